//! Validation of `buffer` on a pool's app and on an `[[upstream]]` group: `true`, `false` or
//! `{ response = SIZE, request = SIZE, disk = SIZE }`; and of `cache_responses` there:
//! `true`, `false` or `{ size = SIZE, entry = SIZE }`.
//!
//! Owns: those keys' forms and bounds. Must not touch: where it may be written (the pool's
//! and the group's validators refuse it where their forwarder cannot buffer) or its default
//! (a sync pool's, decided in [`super::app`]).

use super::super::locate::Seg;
use super::super::model::{Backpressure, Buffering, Transport, DEFAULT_BUFFERING};
use super::super::raw::{RawPool, Scalar};
use super::super::upstream::Protocol;
use super::super::upstream::{CacheKeyPart, ResponseCache, DEFAULT_RESPONSE_CACHE};
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

impl Validator {
    /// `cache_responses` at `at` as written, for answers spoken in `protocol` (`None`:
    /// unwritten, off, or refused). Answers over HTTP/2 are streams (gRPC's), never kept.
    pub(super) fn response_cache(
        &mut self,
        at: &[Seg],
        written: Option<toml::Value>,
        protocol: Protocol,
    ) -> Option<ResponseCache> {
        let form = "write cache_responses = true, or cache_responses = { size = \"64MiB\", entry = \"1MiB\", key = [\"X-Tenant\", \"cookie:currency\"], disk = \"1GiB\", folder = \"/var/cache/espalier\" }";
        let table = match written? {
            _ if protocol == Protocol::Http2 => {
                self.err(at, "answers spoken in HTTP/2 (protocol = \"http2\") are streams, gRPC's among them, and are not kept; remove it");
                return None;
            }
            toml::Value::Boolean(on) => return on.then_some(DEFAULT_RESPONSE_CACHE),
            toml::Value::Table(t) => t,
            other => {
                self.err(at, format!("{other} is not a response cache; {form}"));
                return None;
            }
        };
        let mut cache = DEFAULT_RESPONSE_CACHE;
        for (key, value) in table {
            let mut key_at = at.to_vec();
            key_at.push(Seg::Key(match key.as_str() {
                "size" => "size",
                "entry" => "entry",
                "disk" => "disk",
                "folder" => {
                    key_at.push(Seg::Key("folder"));
                    cache.folder = self.cache_folder(&key_at, value);
                    continue;
                }
                "key" => {
                    key_at.push(Seg::Key("key"));
                    cache.key = self.cache_key(&key_at, value);
                    continue;
                }
                _ => {
                    self.err(
                        at,
                        format!(
                            "`{key}` is not a key of cache_responses (size, entry, key, disk, folder); {form}"
                        ),
                    );
                    continue;
                }
            }));
            let scalar = match value {
                toml::Value::Integer(n) => Scalar::Int(n),
                toml::Value::String(s) => Scalar::Text(s),
                other => Scalar::Text(other.to_string()),
            };
            let bound = self.size(&key_at, Some(scalar), 0);
            if bound < MIN_MEMORY {
                self.err(&key_at, format!("{bound} bytes cannot hold an answer; write 4KiB or more (cache_responses = false turns it off)"));
            }
            match key.as_str() {
                "size" => cache.size = bound,
                "disk" => cache.disk = bound,
                _ => cache.entry = bound,
            }
        }
        if cache.entry > cache.size {
            self.err(at, format!("its entry ({} bytes) is larger than its size ({} bytes), so such an answer could never be kept; make size the larger", cache.entry, cache.size));
        }
        if cache.folder.is_some() && cache.disk == 0 {
            self.err(at, "has a folder but no disk bound, so nothing would go there; add disk = \"1GiB\" (or remove folder)");
        }
        Some(cache)
    }

    /// `cache_responses.folder`: an absolute path to a folder that exists.
    fn cache_folder(&mut self, at: &[Seg], value: toml::Value) -> Option<std::path::PathBuf> {
        let path = value.as_str().map(std::path::PathBuf::from);
        match path {
            Some(p) if p.is_absolute() && p.is_dir() => Some(p),
            Some(p) if p.is_absolute() => {
                let said = format!(
                    "{} is not a folder here; make it (mkdir -p), or name another",
                    p.display()
                );
                self.err(at, said);
                None
            }
            _ => {
                self.err(
                    at,
                    "is not an absolute path; write folder = \"/var/cache/espalier\"",
                );
                None
            }
        }
    }

    /// `cache_responses.key`: request field names and `cookie:NAME`s.
    fn cache_key(&mut self, at: &[Seg], value: toml::Value) -> Vec<CacheKeyPart> {
        let fix = "write it like key = [\"X-Tenant\", \"cookie:currency\"]: request field names, and cookies as cookie:NAME";
        let toml::Value::Array(list) = value else {
            self.err(at, format!("is not a list; {fix}"));
            return Vec::new();
        };
        let token = |t: &str| {
            !t.is_empty()
                && t.len() <= 256
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        let mut parts = Vec::new();
        for item in list {
            let part = match item.as_str() {
                Some(t) => match t.strip_prefix("cookie:") {
                    Some(name) if token(name) => Some(CacheKeyPart::Cookie(name.to_string())),
                    None if token(t) => Some(CacheKeyPart::Field(t.to_ascii_lowercase())),
                    _ => None,
                },
                None => None,
            };
            match part {
                Some(part) => parts.push(part),
                None => self.err(
                    at,
                    format!("{item} is not a field name or cookie:NAME; {fix}"),
                ),
            }
        }
        parts
    }

    /// A pool's `cache_responses`: only where espalier forwards the app's HTTP/1.1 or
    /// FastCGI answers (not an activated app's, whose refusal says it).
    pub(super) fn app_response_cache(
        &mut self,
        i: usize,
        raw: &mut RawPool,
        (transport, protocol): (Transport, Protocol),
    ) -> Option<ResponseCache> {
        let at = [Seg::Key("pool"), Seg::Index(i), Seg::Key("cache_responses")];
        let written = raw.cache_responses.take();
        if !matches!(transport, Transport::Proxy | Transport::FastCgi) {
            return None;
        }
        self.response_cache(&at, written, protocol)
    }
}
