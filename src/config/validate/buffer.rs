//! Validation of `buffer` on a pool's app and on an `[[upstream]]` group: `true`, `false` or
//! `{ response = SIZE, request = SIZE, disk = SIZE }`.
//!
//! Owns: that key's forms and bounds. Must not touch: where it may be written (the pool's
//! and the group's validators refuse it where their forwarder cannot buffer) or its default
//! (a sync pool's, decided in [`super::app`]).

use super::super::locate::Seg;
use super::super::model::{Backpressure, Buffering, Transport, DEFAULT_BUFFERING};
use super::super::raw::{RawPool, Scalar};
use super::super::upstream::Protocol;
use super::Validator;

/// The least memory an answer or a request body may be held in: one read.
const MIN_MEMORY: u64 = 4 << 10;

impl Validator {
    /// `buffer` at `at` as written (`None`: unwritten), or `default` where it is not.
    pub(super) fn buffering(
        &mut self,
        at: &[Seg],
        written: Option<toml::Value>,
        default: Option<Buffering>,
    ) -> Option<Buffering> {
        let form = "write buffer = true, buffer = false, or buffer = { response = \"1MiB\", request = \"1MiB\", disk = \"1GiB\" }";
        let table = match written {
            None => return default,
            Some(toml::Value::Boolean(on)) => return on.then_some(DEFAULT_BUFFERING),
            Some(toml::Value::Table(t)) => t,
            Some(other) => {
                self.err(at, format!("{other} is not a buffering; {form}"));
                return default;
            }
        };
        let mut bounds = DEFAULT_BUFFERING;
        for (key, value) in table {
            let mut key_at = at.to_vec();
            key_at.push(Seg::Key(match key.as_str() {
                "response" => "response",
                "request" => "request",
                "disk" => "disk",
                _ => {
                    let keys = "response, request, disk";
                    self.err(
                        at,
                        format!("`{key}` is not a key of buffer ({keys}); {form}"),
                    );
                    continue;
                }
            }));
            let scalar = match value {
                toml::Value::Integer(n) => Scalar::Int(n),
                toml::Value::String(s) => Scalar::Text(s),
                toml::Value::Boolean(b) => Scalar::Bool(b),
                toml::Value::Float(f) => Scalar::Float(f),
                other => Scalar::Text(other.to_string()),
            };
            if key == "response" || key == "request" {
                let bound = self.size(&key_at, Some(scalar), DEFAULT_BUFFERING.response);
                if bound < MIN_MEMORY {
                    self.err(&key_at, format!("{bound} bytes cannot hold one read; write 4KiB or more (buffer = false turns it off)"));
                }
                if key == "response" {
                    bounds.response = bound;
                } else {
                    bounds.request = bound;
                }
            } else {
                // 0: memory only, the rest at the client's speed.
                bounds.disk = self.size(&key_at, Some(scalar), DEFAULT_BUFFERING.disk);
            }
        }
        Some(bounds)
    }
}

impl Validator {
    /// A pool's `buffer`: on by default where a process takes one request at a time — a
    /// FastCGI app (php-fpm's children) or `max_requests_per_process = 1` (a sync app a slow
    /// client would hold) — and only where answers come as HTTP/1.1 or FastCGI from an app
    /// espalier forwards to.
    pub(super) fn app_buffering(
        &mut self,
        i: usize,
        raw: &mut RawPool,
        (transport, protocol): (Transport, Protocol),
        backpressure: Option<Backpressure>,
    ) -> Option<Buffering> {
        let at = [Seg::Key("pool"), Seg::Index(i), Seg::Key("buffer")];
        let written = raw.buffer.take();
        let fastcgi = transport == Transport::FastCgi;
        let can = fastcgi || (transport == Transport::Proxy && protocol == Protocol::Http1);
        if written.is_some() && !can {
            if protocol == Protocol::Http2 {
                self.err(&at, "an app spoken to in HTTP/2 (protocol = \"http2\") streams its answers, gRPC's among them; remove it");
            }
            // With activation, the proxy keys' refusal says it.
            return None;
        }
        let sync = backpressure.is_some_and(|b| b.max_requests_per_process == 1);
        let default = (can && (sync || fastcgi)).then_some(DEFAULT_BUFFERING);
        self.buffering(&at, written, default)
    }
}
