//! A request in FastCGI records: the CGI variables (RFC 3875) and the record framing
//! (FastCGI 1.0 §3–§5) — eight-byte headers, length-prefixed name-value pairs.
//!
//! Owns: [`FastCgiRequest::new`] (the script's variables as [`super::script`] resolved them,
//! `HTTP_*` without `HTTP_PROXY`) and the record constants. Must not touch:
//! sockets (see [`super::fastcgi`]).

use super::script::Script;
use crate::http::service::LentHead;
use crate::http::{Framing, Method, Request};

pub(super) const VERSION: u8 = 1;
pub(super) const BEGIN_REQUEST: u8 = 1;
pub(super) const END_REQUEST: u8 = 3;
pub(super) const PARAMS: u8 = 4;
pub(super) const STDIN: u8 = 5;
pub(super) const STDOUT: u8 = 6;
pub(super) const STDERR: u8 = 7;
pub(super) const RESPONDER: u16 = 1;
/// The `FCGI_KEEP_CONN` flag is never set: a connection carries one request, then the app
/// closes it (see `fastcgi::forward` for why).
pub(super) const ONE_REQUEST: u8 = 0;
/// Every request on a connection is request 1, one at a time (as nginx does).
pub(super) const REQUEST_ID: u16 = 1;
pub(super) const MAX_RECORD: usize = 65535;
/// A record's header: version, type, request id, content length, padding, reserved.
const HEADER_LEN: usize = 8;
/// Largest CGI header block accepted from an app.
pub(super) const MAX_CGI_HEAD: usize = 64 << 10;

/// A request as FastCGI records, ready to send (its body follows from the client).
pub struct FastCgiRequest {
    /// BEGIN_REQUEST and every PARAMS record, the empty one included.
    pub(super) records: Vec<u8>,
    pub(super) body_len: u64,
    pub(super) head_only: bool,
    pub(super) client_minor: u8,
    pub(super) keep_alive: bool,
    pub(super) retryable: bool,
    pub(super) expect_continue: bool,
    pub(super) chunked: bool,
    /// As [`super::ForwardRequest`]'s.
    pub(super) compress: Option<Option<crate::compress::Coding>>,
    /// What the route's response cache makes of it (see [`super::fastcgi_cached`]).
    pub(super) cache: Option<super::cache::CacheRequest>,
    /// Its path takes its route's buffering (`buffer`), if the route has any.
    pub(super) buffered: bool,
}

pub(super) fn record(out: &mut Vec<u8>, kind: u8, content: &[u8]) {
    debug_assert!(content.len() <= MAX_RECORD);
    let len = content.len() as u16;
    let padding = (8 - content.len() % 8) % 8;
    out.extend_from_slice(&[
        VERSION,
        kind,
        (REQUEST_ID >> 8) as u8,
        REQUEST_ID as u8,
        (len >> 8) as u8,
        len as u8,
        padding as u8,
        0,
    ]);
    out.extend_from_slice(content);
    out.extend_from_slice(&[0u8; 8][..padding]);
}

fn pair_len(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

fn pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    pair_len(out, name.len());
    pair_len(out, value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

impl FastCgiRequest {
    /// `req` as FastCGI records; `script` is what it runs and where (see [`super::script`]),
    /// `lent` how its connection framed it and where that connection came from and arrived.
    pub fn new(req: &Request<'_>, script: &Script, lent: &LentHead<'_>) -> Self {
        let (framing, keep_alive, expect_continue) =
            (lent.framing, lent.keep_alive, lent.expect_continue);
        use std::os::unix::ffi::OsStrExt;
        let root_bytes = script.root.as_os_str().as_bytes();
        let mut params = Vec::with_capacity(1024);
        let mut uri = req.path.as_bytes().to_vec();
        if !req.query.is_empty() {
            uri.push(b'?');
            uri.extend_from_slice(req.query.as_bytes());
        }
        let body_len = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let protocol: &[u8] = if req.minor_version == 0 {
            b"HTTP/1.0"
        } else {
            b"HTTP/1.1"
        };
        let host = req.host().unwrap_or("");
        let server_name = host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let fixed: [(&[u8], &[u8]); 11] = [
            (b"GATEWAY_INTERFACE", b"CGI/1.1"),
            (b"SERVER_SOFTWARE", b"espalier"),
            (b"SERVER_PROTOCOL", protocol),
            (b"REQUEST_METHOD", req.method_text.as_bytes()),
            (b"REQUEST_URI", &uri),
            (b"DOCUMENT_URI", &script.document_uri),
            (b"QUERY_STRING", req.query.as_bytes()),
            (b"DOCUMENT_ROOT", root_bytes),
            (b"SCRIPT_NAME", &script.name),
            (b"SCRIPT_FILENAME", &script.filename),
            // php-cgi's cgi.force_redirect wants it; php-fpm ignores it.
            (b"REDIRECT_STATUS", b"200"),
        ];
        for (n, v) in fixed {
            pair(&mut params, n, v);
        }
        pair(&mut params, b"PATH_INFO", &script.path_info);
        pair(&mut params, b"SERVER_NAME", server_name.as_bytes());
        connection_params(&mut params, lent);
        // A chunked body's length is known once it is read whole: the forwarder adds it then
        // (`with_length`).
        if let Framing::Length(n) = framing {
            pair(&mut params, b"CONTENT_LENGTH", n.to_string().as_bytes());
        }
        header_params(&mut params, req, lent.granted, lent.trace.is_some());
        trace_params(&mut params, lent.trace);
        let mut records = Vec::with_capacity(params.len() + 64);
        record(
            &mut records,
            BEGIN_REQUEST,
            &[
                (RESPONDER >> 8) as u8,
                RESPONDER as u8,
                ONE_REQUEST,
                0,
                0,
                0,
                0,
                0,
            ],
        );
        for part in params.chunks(MAX_RECORD) {
            record(&mut records, PARAMS, part);
        }
        record(&mut records, PARAMS, &[]);
        let idempotent = matches!(req.method_text, "GET" | "HEAD" | "OPTIONS");
        FastCgiRequest {
            records,
            body_len,
            head_only: req.method == Method::Head,
            client_minor: req.minor_version,
            keep_alive,
            retryable: idempotent && framing.carries_nothing(),
            expect_continue,
            chunked: matches!(framing, Framing::Chunked),
            compress: None,
            cache: None,
            buffered: true,
        }
    }
}

impl FastCgiRequest {
    /// The request with its chunked body's length, `len`, now that the body has been read
    /// whole: `CONTENT_LENGTH` in one more PARAMS record before the empty one that ends them
    /// (FastCGI's parameters are a stream; records may split it anywhere).
    pub(super) fn with_length(self, len: u64) -> Self {
        let mut req = self.with_param(b"CONTENT_LENGTH", len.to_string().as_bytes());
        req.body_len = len;
        req.chunked = false;
        req
    }

    /// The request with one more CGI variable, `name` = `value` (one the request has not):
    /// in one more PARAMS record before the empty one that ends them.
    pub(super) fn with_param(mut self, name: &[u8], value: &[u8]) -> Self {
        add_param(&mut self.records, name, value);
        self
    }
}

/// Adds the CGI variable `name` = `value` to `records` (BEGIN_REQUEST and the PARAMS records,
/// the empty one that ends them last): in one more PARAMS record before that one (FastCGI's
/// parameters are a stream; records may split it anywhere).
pub(super) fn add_param(records: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let end = records.len() - HEADER_LEN;
    debug_assert_eq!(&records[end + 1..end + 2], &[PARAMS]);
    records.truncate(end);
    let mut param = Vec::with_capacity(name.len() + value.len() + 8);
    pair(&mut param, name, value);
    record(records, PARAMS, &param);
    record(records, PARAMS, &[]);
}

impl FastCgiRequest {}

/// The CGI variables of the connection: its scheme, both ends, the client certificate's
/// subject and the user basic authentication let in.
fn connection_params(params: &mut Vec<u8>, lent: &LentHead<'_>) {
    if lent.https {
        pair(params, b"HTTPS", b"on");
        pair(params, b"REQUEST_SCHEME", b"https");
    } else {
        pair(params, b"REQUEST_SCHEME", b"http");
    }
    if let Some(a) = lent.client {
        pair(params, b"REMOTE_ADDR", a.ip().to_string().as_bytes());
        pair(params, b"REMOTE_PORT", a.port().to_string().as_bytes());
    }
    if let Some(subject) = lent.client_cert {
        // As Apache's mod_ssl names them, which PHP applications read.
        pair(params, b"SSL_CLIENT_S_DN", subject.as_bytes());
        pair(params, b"SSL_CLIENT_VERIFY", b"SUCCESS");
    }
    if let Some(user) = lent.remote_user {
        pair(params, b"REMOTE_USER", user.as_bytes());
        pair(params, b"AUTH_TYPE", b"Basic");
    }
    if let Some(a) = lent.local {
        pair(params, b"SERVER_ADDR", a.ip().to_string().as_bytes());
        pair(params, b"SERVER_PORT", a.port().to_string().as_bytes());
    }
}

/// The request's header fields as CGI variables (`HTTP_*`, and `CONTENT_TYPE`).
/// A traced request's hop, as the fields an app's OpenTelemetry SDK reads (`HTTP_*`).
fn trace_params(params: &mut Vec<u8>, trace: Option<&crate::http::trace::TraceCtx>) {
    if let Some(trace) = trace {
        pair(params, b"HTTP_TRACEPARENT", &trace.traceparent());
        if !trace.state.is_empty() {
            pair(params, b"HTTP_TRACESTATE", trace.state.as_bytes());
        }
    }
}

/// The fields a path's verifier let the request in with replace the client's own.
fn header_params(
    params: &mut Vec<u8>,
    req: &Request<'_>,
    granted: Option<&crate::routing::auth_request::Granted>,
    traced: bool,
) {
    let mut name = Vec::with_capacity(64);
    let mut cookies = false;
    let own = req
        .headers
        .iter()
        .filter(|h| !granted.is_some_and(|g| g.replaces(h.name)))
        .filter(|h| !(traced && super::request::is_trace_field(h.name)))
        .map(|h| (h.name, h.value));
    let given = (granted.iter().flat_map(|g| &g.fields)).map(|(n, v)| (n.as_str(), v.as_slice()));
    for (field, value) in own.chain(given) {
        if field.eq_ignore_ascii_case("cookie") {
            // One HTTP_COOKIE of every crumb an HTTP/2 or HTTP/3 client sent apart.
            if !std::mem::replace(&mut cookies, true) {
                let mut joined = Vec::with_capacity(value.len());
                super::request::join_cookies(&mut joined, req);
                pair(params, b"HTTP_COOKIE", &joined);
            }
            continue;
        }
        if field.eq_ignore_ascii_case("content-type") {
            pair(params, b"CONTENT_TYPE", value);
            continue;
        }
        // httpoxy: a client's `Proxy:` must never become HTTP_PROXY in the app.
        if field.eq_ignore_ascii_case("content-length")
            || field.eq_ignore_ascii_case("proxy")
            || field.contains('_')
        {
            continue;
        }
        name.clear();
        name.extend_from_slice(b"HTTP_");
        name.extend(field.bytes().map(|b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        pair(params, &name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_padded_to_eight_bytes_and_pairs_take_long_lengths() {
        let mut out = Vec::new();
        record(&mut out, STDIN, b"hello");
        assert_eq!(&out[..8], &[1, STDIN, 0, 1, 0, 5, 3, 0]);
        assert_eq!(out.len(), 16);
        let mut p = Vec::new();
        pair(&mut p, b"A", &[b'x'; 200]);
        assert_eq!(&p[..5], &[1, 0x80, 0, 0, 200]);
        assert_eq!(p.len(), 1 + 4 + 1 + 200);
    }
}
