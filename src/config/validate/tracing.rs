//! Validation of `[server.tracing]`: the collector's URL (OTLP/HTTP, resolved now), the
//! sample share, and the span's service name.
//!
//! Owns: those keys' rules. Must not touch: what tracing does (see
//! [`crate::config::tracing`]).

use super::super::locate::Seg;
use super::super::raw::{RawTracing, Scalar};
use super::super::tracing::{TracingSpec, DEFAULT_SAMPLE};
use super::Validator;
use std::net::ToSocketAddrs;

impl Validator {
    pub(super) fn tracing(&mut self, raw: RawTracing) -> Option<TracingSpec> {
        let key = |k: &'static str| [Seg::Key("server"), Seg::Key("tracing"), Seg::Key(k)];
        let Some(url) = raw.otlp else {
            self.err(&key("otlp"), "is missing: the OTLP/HTTP collector spans go to, like otlp = \"http://127.0.0.1:4318\"");
            return None;
        };
        let Some(rest) = url.strip_prefix("http://") else {
            self.err(&key("otlp"), format!("`{url}`: spans go over OTLP/HTTP in the clear to a collector beside the server; write it like \"http://127.0.0.1:4318\" (an OpenTelemetry Collector there can forward them over TLS)"));
            return None;
        };
        let (host, path) = rest.find('/').map_or((rest, ""), |k| rest.split_at(k));
        let path = match path.trim_end_matches('/') {
            "" => "/v1/traces".to_string(),
            p => p.to_string(),
        };
        let collector = match host.to_socket_addrs().map(|mut a| a.next()) {
            Ok(Some(addr)) => addr,
            Ok(None) | Err(_) => {
                self.err(&key("otlp"), format!("`{host}` is not an address with a port (or a name that resolves); write it like \"http://127.0.0.1:4318\""));
                return None;
            }
        };
        let sample = match raw.sample {
            None => DEFAULT_SAMPLE,
            Some(Scalar::Float(f)) if (0.0..=1.0).contains(&f) => f,
            Some(Scalar::Int(n)) if n == 0 || n == 1 => n as f64,
            Some(other) => {
                self.err(&key("sample"), format!("{} is not a share of requests: write one from 0 to 1, like 0.01 (one request in a hundred)", super::scalar_text(&other)));
                DEFAULT_SAMPLE
            }
        };
        let service_name = raw.service_name.unwrap_or_else(|| "espalier".into());
        if service_name.is_empty() || service_name.chars().any(char::is_control) {
            self.err(
                &key("service_name"),
                "names espalier in the traces: give it a name without control characters",
            );
        }
        Some(TracingSpec {
            collector,
            host: host.to_string(),
            path,
            sample,
            trust_incoming: raw.trust_incoming.unwrap_or(true),
            service_name,
        })
    }
}
