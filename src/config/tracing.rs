//! `[server.tracing]`'s settings: where spans go, how many requests are traced, and whether
//! a client's trace is continued.
//!
//! Owns: [`TracingSpec`], pure data. Must not touch: tracing itself (`crate::http::trace`
//! decides and propagates, `crate::proxy::trace_export` exports).

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The share of requests traced unless `sample` says otherwise (a client's sampled trace
/// is always followed when trusted).
pub const DEFAULT_SAMPLE: f64 = 0.01;

/// `[server.tracing]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracingSpec {
    /// The OTLP/HTTP collector's address, as resolved at `check`.
    pub collector: SocketAddr,
    /// Its `Host` and the path spans are posted to (`/v1/traces`).
    pub host: String,
    pub path: String,
    /// The share of requests traced, 0 to 1 (by trace id, as OpenTelemetry's
    /// `TraceIdRatioBased`), when no trusted parent decides.
    pub sample: f64,
    /// A client's `traceparent` is continued (its sampling followed) rather than replaced.
    pub trust_incoming: bool,
    /// The `service.name` of espalier's spans.
    pub service_name: String,
}
