//! Tracing as a worker thread runs it (`[server.tracing]`): each routed request gets its
//! trace ([`crate::http::trace`]), a sampled one is logged — so the engine times it and
//! gives its entry back — and at its end its server span, and its hop's client span when it
//! was lent, go to the thread's exporter ([`crate::proxy::trace_export`]).
//!
//! Owns: [`Traced`] and the spans' attributes (OpenTelemetry's HTTP semantic conventions).
//! Must not touch: the decision or the export (theirs), or the request (its context carries
//! the trace; the proxy's head writes its `traceparent`).

use crate::config::tracing::TracingSpec;
use crate::http::access_log::{Entry, HTTP2, HTTP3};
use crate::http::service::{RequestCtx, Route};
use crate::http::trace::{TraceCtx, Tracing};
use crate::http::Request;
use crate::proxy::trace_export::{int, text, Exporter};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span, Status};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A thread's tracing and its exporter.
pub(super) struct Traced {
    tracing: Tracing,
    exporter: Rc<Exporter>,
    pool: String,
}

impl Traced {
    /// Tracing by `spec` for a thread of `pool` named `identity`; its exporter's task starts
    /// on the thread's runtime.
    pub(super) fn start(spec: &TracingSpec, pool: &str, identity: &str) -> Traced {
        let resource = vec![
            text("service.name", spec.service_name.clone()),
            text("service.instance.id", identity),
            text("espalier.pool", pool),
        ];
        let exporter = Exporter::new(spec, resource, identity.to_string());
        tokio::task::spawn_local(Rc::clone(&exporter).run());
        Traced {
            tracing: Tracing::new(spec),
            exporter,
            pool: pool.to_string(),
        }
    }

    /// Gives `route`'s request its trace; a sampled one is logged (its spans are made from
    /// its entry).
    pub(super) fn begin<T>(&self, route: &mut Route<T>, req: &Request<'_>) {
        if let Some(ctx) = route.ctx_mut() {
            let trace = self.tracing.begin(req);
            ctx.logged |= trace.sampled;
            ctx.trace = Some(Rc::new(trace));
        }
    }

    /// The spans of a request that ended as `entry` says, if it was sampled: its site
    /// `site` and its app's path `route` (the matched prefix).
    pub(super) fn record(
        &self,
        ctx: &RequestCtx,
        entry: &Entry<'_>,
        site: &str,
        route: Option<&str>,
    ) {
        let Some(trace) = ctx.trace.as_deref().filter(|t| t.sampled) else {
            return;
        };
        let now = Instant::now();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let at = |when: Instant| nanos(wall.saturating_sub(now.saturating_duration_since(when)));
        let end = nanos(wall);
        let start = end.saturating_sub(entry.micros * 1000);
        let method = String::from_utf8_lossy(entry.req.method).into_owned();
        let version = match entry.req.minor_version {
            HTTP2 => "2",
            HTTP3 => "3",
            0 => "1.0",
            _ => "1.1",
        };
        let mut attributes = vec![
            text("http.request.method", method.clone()),
            text("url.path", String::from_utf8_lossy(entry.req.path)),
            int("http.response.status_code", i64::from(entry.status)),
            text("network.protocol.name", "http"),
            text("network.protocol.version", version),
            text("client.address", entry.peer),
            text("espalier.site", site),
            text("espalier.pool", self.pool.clone()),
        ];
        if !entry.req.query.is_empty() {
            attributes.push(text("url.query", String::from_utf8_lossy(entry.req.query)));
        }
        if let Some(host) = entry.req.host {
            attributes.push(text("server.address", String::from_utf8_lossy(host)));
        }
        if let Some(route) = route {
            attributes.push(text("http.route", route));
        }
        let name = match route {
            Some(route) => format!("{method} {route}"),
            None => method.clone(),
        };
        let server = span(
            trace,
            (trace.server_span, trace.parent),
            (name, SpanKind::Server),
        );
        self.exporter.record(Span {
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            status: error_status(entry.status),
            ..server
        });
        let Some(hop) = entry.hop else {
            return;
        };
        let waited = Duration::from_micros(entry.upstream_micros.unwrap_or(0));
        let mut attributes = vec![
            text("http.request.method", method.clone()),
            int("http.response.status_code", i64::from(entry.status)),
        ];
        if let Some(addr) = hop.addr {
            attributes.push(text("server.address", addr.ip().to_string()));
            attributes.push(int("server.port", i64::from(addr.port())));
        }
        if hop.resends > 0 {
            attributes.push(int("http.request.resend_count", i64::from(hop.resends)));
        }
        let client = span(
            trace,
            (trace.hop_span, Some(trace.server_span)),
            (method, SpanKind::Client),
        );
        let asked = at(hop.asked);
        self.exporter.record(Span {
            start_time_unix_nano: asked,
            end_time_unix_nano: asked + nanos(waited),
            attributes,
            status: error_status(entry.status),
            ..client
        });
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// A span of `trace` with its id and parent, name and kind; times and attributes to fill.
fn span(
    trace: &TraceCtx,
    (id, parent): (
        opentelemetry::trace::SpanId,
        Option<opentelemetry::trace::SpanId>,
    ),
    (name, kind): (String, SpanKind),
) -> Span {
    Span {
        trace_id: trace.trace_id.to_bytes().to_vec(),
        span_id: id.to_bytes().to_vec(),
        parent_span_id: parent.map(|p| p.to_bytes().to_vec()).unwrap_or_default(),
        trace_state: trace.state.clone(),
        // W3C's sampled flag, and that the parent's remoteness is known (OTLP's flags).
        flags: 0x1
            | 0x100
            | if trace.parent.is_some() && id == trace.server_span {
                0x200
            } else {
                0
            },
        name,
        kind: kind as i32,
        ..Default::default()
    }
}

/// A 5xx is an error of the server's span, by HTTP's semantic conventions.
fn error_status(status: u16) -> Option<Status> {
    (status >= 500).then(|| Status {
        code: StatusCode::Error as i32,
        message: String::new(),
    })
}
