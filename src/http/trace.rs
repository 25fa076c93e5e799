//! A request's trace (`[server.tracing]`): W3C trace context read from the client, a
//! sampling decision, and the ids of the request's server span and of the span of its hop
//! to an app or upstream — made once, where the request is routed, on every protocol.
//!
//! Owns: [`Tracing`] (a thread's settings and its decision) and [`TraceCtx`] (a request's
//! trace, carried in its context to the hop's `traceparent` and to its spans). Must not
//! touch: the spans' recording and export (`crate::proxy::trace_export`).
//!
//! Parent-based sampling, as OpenTelemetry's `ParentBased(TraceIdRatioBased)`: a client's
//! trace, when trusted, is continued with its own decision; any other request starts a trace
//! sampled by its id against the configured share — so every hop of one trace decides alike.
//! An unsampled request still passes a `traceparent` to its app (flags `00`), so the app's
//! spans join the same trace id if it samples them itself.

use super::Request;
use crate::config::tracing::TracingSpec;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A thread's tracing: its settings and its propagator.
pub struct Tracing {
    /// Trace ids whose lower 63 bits fall under this are sampled.
    bound: u64,
    trust_incoming: bool,
    propagator: TraceContextPropagator,
}

/// A request's trace.
#[derive(Debug, Clone)]
pub struct TraceCtx {
    pub trace_id: TraceId,
    /// The request's span in espalier.
    pub server_span: SpanId,
    /// The client's span it continues, when it does.
    pub parent: Option<SpanId>,
    /// The span of its hop to an app or upstream: the parent its app's `traceparent` names.
    pub hop_span: SpanId,
    pub sampled: bool,
    /// The client's `tracestate`, passed on as it came.
    pub state: String,
}

/// The request's fields as the propagator reads them.
struct Fields<'r, 'a>(&'r Request<'a>);

impl Extractor for Fields<'_, '_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.header(key)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.headers.iter().map(|h| h.name).collect()
    }
}

impl Tracing {
    pub fn new(spec: &TracingSpec) -> Self {
        Tracing {
            bound: (spec.sample.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64,
            trust_incoming: spec.trust_incoming,
            propagator: TraceContextPropagator::new(),
        }
    }

    /// `req`'s trace: the client's continued when trusted and valid, else a new one.
    pub fn begin(&self, req: &Request<'_>) -> TraceCtx {
        let server_span = new_span_id();
        let hop_span = new_span_id();
        if self.trust_incoming && req.header("traceparent").is_some() {
            let cx = self.propagator.extract(&Fields(req));
            let parent = cx.span().span_context().clone();
            if parent.is_valid() {
                return TraceCtx {
                    trace_id: parent.trace_id(),
                    server_span,
                    parent: Some(parent.span_id()),
                    hop_span,
                    sampled: parent.is_sampled(),
                    state: parent.trace_state().header(),
                };
            }
        }
        let trace_id = TraceId::from(fastrand::u128(1..));
        TraceCtx {
            sampled: self.samples(trace_id),
            trace_id,
            server_span,
            parent: None,
            hop_span,
            state: String::new(),
        }
    }

    /// `TraceIdRatioBased`'s rule: the id's lower 63 bits against the share.
    fn samples(&self, trace_id: TraceId) -> bool {
        let low = u64::from_be_bytes(trace_id.to_bytes()[8..].try_into().unwrap_or_default());
        (low >> 1) < self.bound
    }
}

fn new_span_id() -> SpanId {
    SpanId::from(fastrand::u64(1..))
}

impl TraceCtx {
    /// The `traceparent` its hop sends the app: this trace, the hop's span, its decision —
    /// written into a fixed array (every lent request of a traced server carries one).
    pub fn traceparent(&self) -> [u8; 55] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = *b"00-00000000000000000000000000000000-0000000000000000-00";
        let hex = |out: &mut [u8], bytes: &[u8]| {
            for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
                pair[0] = HEX[usize::from(b >> 4)];
                pair[1] = HEX[usize::from(b & 15)];
            }
        };
        hex(&mut out[3..35], &self.trace_id.to_bytes());
        hex(&mut out[36..52], &self.hop_span.to_bytes());
        if self.sampled {
            out[54] = b'1';
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Request;

    fn spec(sample: f64, trust_incoming: bool) -> TracingSpec {
        TracingSpec {
            collector: "127.0.0.1:4318".parse().unwrap(),
            host: "127.0.0.1:4318".into(),
            path: "/v1/traces".into(),
            sample,
            trust_incoming,
            service_name: "espalier".into(),
        }
    }

    fn request<'a>(headers: &'a [httparse::Header<'a>]) -> Request<'a> {
        Request {
            method: crate::http::Method::Get,
            method_text: "GET",
            path: "/",
            query: "",
            minor_version: 1,
            headers,
            body: &[],
            client: "",
            client_ip: None,
            http2: false,
        }
    }

    fn with_parent<T>(value: &str, f: impl FnOnce(&Request<'_>) -> T) -> T {
        let headers = [
            httparse::Header {
                name: "traceparent",
                value: value.as_bytes(),
            },
            httparse::Header {
                name: "tracestate",
                value: b"vendor=a",
            },
        ];
        f(&request(&headers))
    }

    #[test]
    fn a_trusted_parent_is_continued_with_its_decision_and_state() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let t = with_parent(parent, |r| Tracing::new(&spec(0.0, true)).begin(r));
        assert_eq!(t.trace_id.to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t.parent.unwrap().to_string(), "b7ad6b7169203331");
        assert!(t.sampled, "the parent's decision, over a share of 0");
        assert_eq!(t.state, "vendor=a");
        let sent = String::from_utf8(t.traceparent().to_vec()).unwrap();
        assert_eq!(sent, format!("00-{}-{}-01", t.trace_id, t.hop_span));
        assert!(
            sent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
            "{sent}"
        );
        assert!(
            sent.ends_with("-01") && !sent.contains("b7ad6b7169203331"),
            "{sent}"
        );
        // Unsampled parent: followed too.
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let t = with_parent(unsampled, |r| Tracing::new(&spec(1.0, true)).begin(r));
        assert!(!t.sampled);
        assert!(t.traceparent().ends_with(b"-00"));
    }

    #[test]
    fn an_untrusted_or_broken_parent_starts_a_trace_of_its_own() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let t = with_parent(parent, |r| Tracing::new(&spec(0.0, false)).begin(r));
        assert_ne!(t.trace_id.to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert!(t.parent.is_none() && !t.sampled && t.state.is_empty());
        let t = with_parent("00-zz-b7ad6b7169203331-01", |r| {
            Tracing::new(&spec(1.0, true)).begin(r)
        });
        assert!(t.parent.is_none() && t.sampled);
    }

    #[test]
    fn the_share_sampled_follows_the_setting() {
        let req = request(&[]);
        for (share, low, high) in [(0.0, 0, 0), (1.0, 10_000, 10_000), (0.1, 800, 1_200)] {
            let tracing = Tracing::new(&spec(share, true));
            let n = (0..10_000).filter(|_| tracing.begin(&req).sampled).count();
            assert!((low..=high).contains(&n), "{share}: {n}");
        }
    }
}
