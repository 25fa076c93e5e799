//! A worker thread's spans on their way to the collector (`[server.tracing]`): kept in a
//! bounded queue of the thread's own, and sent in batches over OTLP/HTTP (protobuf, the
//! messages of `opentelemetry-proto`) by a task of the thread — every second, or as soon as
//! a batch is full — on one kept connection to the collector.
//!
//! Owns: [`Exporter`]: the queue, its bound, the batches' posting and what is dropped. Must
//! not touch: what a span says (the handlers make them from a request's trace and log entry).
//!
//! Not the OpenTelemetry SDK's batch processor: it hands every span through a channel to an
//! exporting thread of its own (or a runtime's task), shared by the process's threads, and a
//! request's thread would then touch memory another core writes; here each thread queues and
//! posts its own, as its access log writes its own buffer — nothing is shared between cores,
//! and a request never waits for the collector: a full queue drops the span and counts it.

use super::answer_read::{read_whole_head, HeadError};
use super::upstream::Conn;
use super::verify::read_answer;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Spans a thread holds at most while the collector is slow or away: past it, new ones are
/// dropped (and counted), never queued without bound.
pub const MAX_QUEUED: usize = 4096;

/// Spans per batch: a full one is sent at once.
const BATCH: usize = 512;

/// How often a thread sends what it has.
const EVERY: Duration = Duration::from_secs(1);

/// One batch's exchange with the collector, connection included.
const POST_WITHIN: Duration = Duration::from_secs(5);

/// A text attribute.
pub fn text(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// A number attribute.
pub fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..Default::default()
    }
}

/// A thread's queue of spans and its way to the collector.
pub struct Exporter {
    collector: SocketAddr,
    host: String,
    path: String,
    /// The process's attributes: `service.name`, the pool, the worker.
    resource: Vec<KeyValue>,
    queued: RefCell<Vec<Span>>,
    full: tokio::sync::Notify,
    dropped: Cell<u64>,
    /// Why the last post failed, when it did (a cause is logged when it changes).
    failing: RefCell<Option<String>>,
    /// The thread's name in the log.
    who: String,
}

impl Exporter {
    pub fn new(
        spec: &crate::config::tracing::TracingSpec,
        resource: Vec<KeyValue>,
        who: String,
    ) -> Rc<Self> {
        Rc::new(Exporter {
            collector: spec.collector,
            host: spec.host.clone(),
            path: spec.path.clone(),
            resource,
            queued: RefCell::new(Vec::with_capacity(BATCH)),
            full: tokio::sync::Notify::new(),
            dropped: Cell::new(0),
            failing: RefCell::new(None),
            who,
        })
    }

    /// Queues `span`, or drops it when the queue is full.
    pub fn record(&self, span: Span) {
        let mut queued = self.queued.borrow_mut();
        if queued.len() >= MAX_QUEUED {
            drop(queued);
            self.dropped_some(1, "the queue is full");
            return;
        }
        queued.push(span);
        if queued.len() == BATCH {
            self.full.notify_one();
        }
    }

    /// Counts `n` dropped spans, logged at powers of two (a collector away for an hour is a
    /// few lines, not one per span).
    fn dropped_some(&self, n: u64, why: &str) {
        let before = self.dropped.get();
        let after = before + n;
        self.dropped.set(after);
        if (before + 1..=after).any(crate::os::nth_worth_logging) {
            crate::os::log(
                &self.who,
                format_args!("tracing: {after} spans dropped so far ({why}); later drops are logged at powers of two"),
            );
        }
    }

    /// The thread's task: sends what is queued every second, or when a batch is full, until
    /// the thread ends.
    pub async fn run(self: Rc<Self>) {
        let mut conn: Option<Conn> = None;
        loop {
            let _ = tokio::time::timeout(EVERY, self.full.notified()).await;
            loop {
                let batch: Vec<Span> = {
                    let mut queued = self.queued.borrow_mut();
                    let n = queued.len().min(BATCH);
                    queued.drain(..n).collect()
                };
                if batch.is_empty() {
                    break;
                }
                let n = batch.len() as u64;
                let body = self.request(batch).encode_to_vec();
                match tokio::time::timeout(POST_WITHIN, self.post(&mut conn, &body)).await {
                    Ok(Ok(())) => {
                        if let Some(was) = self.failing.borrow_mut().take() {
                            crate::os::log(
                                &self.who,
                                format_args!(
                                    "tracing: the collector at {} takes spans again (it {was})",
                                    self.collector
                                ),
                            );
                        }
                    }
                    Ok(Err(cause)) => self.failed(&mut conn, n, cause),
                    Err(_) => self.failed(
                        &mut conn,
                        n,
                        format!("did not answer within {POST_WITHIN:?}"),
                    ),
                }
            }
        }
    }

    fn failed(&self, conn: &mut Option<Conn>, n: u64, cause: String) {
        *conn = None;
        let mut failing = self.failing.borrow_mut();
        if failing.as_deref() != Some(cause.as_str()) {
            crate::os::log(
                &self.who,
                format_args!("tracing: the collector at {} {cause}; its spans are dropped until it takes them", self.collector),
            );
            *failing = Some(cause);
        }
        drop(failing);
        self.dropped_some(n, "the collector did not take them");
    }

    fn request(&self, spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: self.resource.clone(),
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "espalier".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }

    /// Posts one batch on the kept connection (a new one when there is none, or when the
    /// kept one fails before any answer).
    async fn post(&self, conn: &mut Option<Conn>, body: &[u8]) -> Result<(), String> {
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            self.path,
            self.host,
            body.len()
        )
        .into_bytes();
        head.extend_from_slice(body);
        for attempt in 0..2 {
            let fresh = conn.is_none();
            if fresh {
                let c = TcpStream::connect(self.collector)
                    .await
                    .map_err(|e| format!("cannot be reached ({e})"))?;
                let _ = c.set_nodelay(true);
                *conn = Some(Conn::Tcp(c));
            }
            let Some(c) = conn.as_mut() else { continue };
            match exchange(c, &head).await {
                Ok((status, keep)) => {
                    if !keep {
                        *conn = None;
                    }
                    return match status {
                        200..=299 => Ok(()),
                        other => Err(format!("answered {other}")),
                    };
                }
                // A kept connection the collector closed meanwhile: once more on a new one.
                Err(_) if !fresh && attempt == 0 => *conn = None,
                Err(e) => return Err(e),
            }
        }
        Err("closed the connection twice".into())
    }
}

/// Writes a request and reads its answer whole (the forwarder's head reading, the
/// verifier's answer reading): the status, and whether the connection may carry the next.
async fn exchange(conn: &mut Conn, request: &[u8]) -> Result<(u16, bool), String> {
    conn.write_all(request)
        .await
        .map_err(|e| format!("closed the connection ({e})"))?;
    let mut buf = Vec::with_capacity(1024);
    let len = read_whole_head(conn, &mut buf).await.map_err(|e| match e {
        HeadError::ClosedEarly => "closed the connection without answering".to_string(),
        HeadError::Timeout | HeadError::Garbage => {
            "answered a malformed or over-64-KiB head".to_string()
        }
    })?;
    let (answer, reusable) = read_answer(conn, buf, len).await?;
    Ok((answer.status, reusable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_spans_is_held_to_the_bound_and_the_rest_counted() {
        // A client may ask for sampling (a trusted `traceparent` with its flag set) on every
        // request: what a thread holds stays bounded however fast they come.
        let spec = crate::config::tracing::TracingSpec {
            collector: "127.0.0.1:9".parse().unwrap(),
            host: "127.0.0.1:9".into(),
            path: "/v1/traces".into(),
            sample: 1.0,
            trust_incoming: true,
            service_name: "espalier".into(),
        };
        let exporter = Exporter::new(&spec, Vec::new(), "test".into());
        for _ in 0..MAX_QUEUED + 904 {
            exporter.record(Span::default());
        }
        assert_eq!(exporter.queued.borrow().len(), MAX_QUEUED);
        assert_eq!(exporter.dropped.get(), 904);
    }
}
