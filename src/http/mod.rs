//! The HTTP engine: HTTP/1.1 request heads parsed in place, bodies framed, responses written
//! into one buffer per connection; HTTP/2 (over TLS and h2c) by the `h2` crate and HTTP/3
//! ([`h3`], over quinn's QUIC) by the `h3` crate, each stream a request for the same service
//! (what the two share: [`streams`], [`stream_forward`] for a request lent to an app, and
//! [`websocket`], a WebSocket opened on a stream); the contract with that service ([`service`]).
//!
//! Owns: the protocols — parsing (with `httparse`, the parser hyper uses), limits and the
//! status each violation gets, keep-alive and pipelining rules, response heads, HTTP/2's
//! limits — and access-log lines. Must not touch: where a request goes or what its answer
//! says (the [`service::Service`]: [`crate::handlers`]; the engine never names the proxy), or
//! sockets beyond the connection code ([`conn`], [`h2`], [`h3`], [`send`]).
//!
//! Why not hyper for HTTP/1.1: hyper is excellent and general, and costs about 18.5k
//! instructions per request on a keep-alive static page here; a request path made only of a
//! parse into the read buffer, a `memcpy` of a cached response and one `write` per batch of
//! pipelined requests is what lets a worker thread beat nginx. HTTP/2's framing, HPACK and
//! flow control are the `h2` crate's, the same hyper uses.

pub mod accept;
pub mod access_log;
pub mod ask;
mod body;
pub mod chunked;
pub mod clock;
pub mod coding;
pub mod conn;
pub mod edits;
pub mod error_pages;
mod fields;
pub mod h2;
pub mod h3;
pub mod heads;
pub mod ktls;
pub mod meters;
pub mod proxy_header;
mod respond;
pub mod response_chain;
mod send;
pub mod service;
mod shutdown;
pub mod sni;
pub mod stream;
pub(crate) mod stream_forward;
pub(crate) mod streams;
pub mod trace;
pub(crate) mod websocket;

pub use chunked::{chunked_len, decode_chunked, ChunkedDecoder};
use fields::spaces_only_around_value;
pub use fields::{h2_host, valid_host};
pub use respond::{reason, unavailable_now, Responder, Sent, Then};

use std::mem::MaybeUninit;

pub use crate::config::MAX_HEADERS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Other,
}

impl Method {
    pub(crate) fn from_bytes(m: &str) -> Method {
        match m {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            _ => Method::Other,
        }
    }
}

/// One parsed request, borrowing the connection's read buffer.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: Method,
    pub method_text: &'a str,
    /// The path part of the target, still percent-encoded.
    pub path: &'a str,
    /// The query string without `?`, or "".
    pub query: &'a str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    pub headers: &'a [httparse::Header<'a>],
    pub body: &'a [u8],
    /// The client's IP address as text (from a PROXY protocol header on the bindings that
    /// expect one, else the peer's), or "" when unknown; set by the connection loop.
    pub client: &'a str,
    /// The same address, as an address (`None` when unknown): what allow lists and limits
    /// check, without parsing the text per request.
    pub client_ip: Option<std::net::IpAddr>,
    /// Came on an HTTP/2 or HTTP/3 stream: its connection, carrying other streams, cannot be handed to
    /// another pool.
    pub http2: bool,
}

/// The status of an answer head (`HTTP/1.x NNN …`), read from its first 13 bytes without
/// parsing it: espalier's own heads, and an app's where a guess is safe (`None` when it does
/// not start so: the parser then reads it).
pub fn status_of(head: &[u8]) -> Option<u16> {
    match head.get(..13)? {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _, b' ', digits @ .., b' ' | b'\r']
            if digits.iter().all(u8::is_ascii_digit) =>
        {
            Some(digits.iter().fold(0, |n, d| n * 10 + u16::from(d - b'0')))
        }
        _ => None,
    }
}

/// `s` with its `%XX` escapes decoded; `None` for an escape that is not two hex digits.
pub fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

impl<'a> Request<'a> {
    /// Cookie `name`'s value in the request's `Cookie` fields (HTTP/2 and HTTP/3 send a
    /// field a crumb).
    pub fn cookie(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
            .flat_map(|h| h.value.split(|&b| b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii();
                let (n, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
                (n == name.as_bytes()).then_some(&v[1..])
            })
    }

    /// The first header named `name` (case-insensitive), as text.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    }

    /// Every value of the field `name`, in the order received (a field may be sent on several
    /// lines, RFC 9110 §5.3); a value that is not UTF-8 comes as `""`, so a list walk stops
    /// there rather than skipping it.
    pub fn header_values(&self, name: &'a str) -> impl DoubleEndedIterator<Item = &'a str> + '_ {
        self.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| std::str::from_utf8(h.value).map_or("", str::trim))
    }

    /// The request with another target (`path` or `path?query`, as received: still
    /// percent-encoded), as a rewrite rule makes it; everything else its own.
    pub fn retargeted(&self, target: &'a str) -> Request<'a> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        Request {
            path,
            query,
            ..*self
        }
    }

    /// The Host header without its port, lowercased only if needed.
    pub fn host(&self) -> Option<&'a str> {
        let h = self.header("host")?;
        Some(match h.rfind(':') {
            Some(i) if !h.ends_with(']') => &h[..i],
            _ => h,
        })
    }
}

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

impl Framing {
    /// No body to send: none, or one of length 0 (HTTP/2's and HTTP/3's GET) — a request
    /// that can be sent again on another connection as it is.
    pub fn carries_nothing(self) -> bool {
        matches!(self, Framing::None | Framing::Length(0))
    }
}

/// What went wrong with a request; each maps to one status and a closed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    BadRequest,
    UriTooLong,
    HeadersTooLarge,
    BodyTooLarge,
    Timeout,
    NotImplemented,
    VersionNotSupported,
}

impl ProtocolError {
    pub fn status(self) -> u16 {
        match self {
            ProtocolError::BadRequest => 400,
            ProtocolError::Timeout => 408,
            ProtocolError::BodyTooLarge => 413,
            ProtocolError::UriTooLong => 414,
            ProtocolError::HeadersTooLarge => 431,
            ProtocolError::NotImplemented => 501,
            ProtocolError::VersionNotSupported => 505,
        }
    }
}

/// The result of looking at the start of the read buffer.
#[derive(Debug)]
pub enum Head<'a> {
    /// A complete head of `len` bytes.
    Complete {
        request: Request<'a>,
        len: usize,
        framing: Framing,
        keep_alive: bool,
        expect_continue: bool,
    },
    /// More bytes are needed.
    Partial,
}

/// The per-connection protocol limits, in the engine's units.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    pub max_request_line: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
    /// The largest body the head parser lets through: the largest `max_body_size` of any site
    /// or path the worker may see; each request is held to its own once routed
    /// ([`service::RequestCtx::body_bound`]).
    pub max_body_size: u64,
}

/// Parses a request head at the start of `buf`, enforcing the limits.
pub fn parse_head<'a>(
    buf: &'a [u8],
    limits: &HeadLimits,
    headers: &'a mut [MaybeUninit<httparse::Header<'a>>; MAX_HEADERS],
) -> Result<Head<'a>, ProtocolError> {
    // The request line must end within its limit (414 like nginx; 400 if it is no line at all).
    let line_end = memchr::memchr(b'\n', &buf[..buf.len().min(limits.max_request_line + 1)]);
    if line_end.is_none() && buf.len() > limits.max_request_line {
        return Err(ProtocolError::UriTooLong);
    }
    let mut req = httparse::Request::new(&mut []);
    let n = limits.max_headers.min(MAX_HEADERS);
    let status = httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut headers[..n])
        .map_err(|e| match e {
            httparse::Error::TooManyHeaders => ProtocolError::HeadersTooLarge,
            // 505 only for a real but unsupported version (HTTP/2.0 in HTTP/1 framing); garbage is 400.
            httparse::Error::Version
                if line_end
                    .is_some_and(|e| memchr::memmem::find(&buf[..e], b" HTTP/").is_some()) =>
            {
                ProtocolError::VersionNotSupported
            }
            _ => ProtocolError::BadRequest,
        })?;
    let len = match status {
        httparse::Status::Partial => {
            return if buf.len() > limits.max_header_size {
                Err(ProtocolError::HeadersTooLarge)
            } else {
                Ok(Head::Partial)
            };
        }
        httparse::Status::Complete(len) => len,
    };
    if len > limits.max_header_size {
        return Err(ProtocolError::HeadersTooLarge);
    }
    let (Some(method_text), Some(target), Some(minor_version)) =
        (req.method, req.path, req.version)
    else {
        return Err(ProtocolError::BadRequest);
    };
    let headers: &'a [httparse::Header<'a>] = req.headers;
    let mut framing = Framing::None;
    let mut keep_alive = minor_version == 1;
    let mut expect_continue = false;
    let mut host_seen = false;
    let mut content_length: Option<u64> = None;
    for h in headers {
        let name = h.name;
        // Content-Length, Transfer-Encoding and Host decide framing and routing: only spaces
        // may surround their values (see `spaces_only_around_value`).
        let plain = || spaces_only_around_value(buf, h);
        if name.eq_ignore_ascii_case("content-length") {
            // One Content-Length, digits only (RFC 9110 §8.6). A repeated one is refused even
            // when the values agree, as nginx does: two framings are one too many.
            if content_length.is_some() || !plain() {
                return Err(ProtocolError::BadRequest);
            }
            content_length = Some(fields::content_length(h.value).map_err(|e| match e {
                fields::BadLength::Malformed => ProtocolError::BadRequest,
                fields::BadLength::TooLarge => ProtocolError::BodyTooLarge,
            })?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // HTTP/1.0 has no transfer codings (RFC 9112 §6.1: a 1.0 request with one is
            // faulty framing); a second Transfer-Encoding line is refused rather than merged;
            // only `chunked` alone is understood, anything else cannot be framed safely.
            if minor_version == 0 || framing == Framing::Chunked || !plain() {
                return Err(ProtocolError::BadRequest);
            }
            if !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(ProtocolError::NotImplemented);
            }
            framing = Framing::Chunked;
        } else if name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|&b| b == b',') {
                let t = token.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") && minor_version == 0 {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case("host") {
            // Exactly one, and a real host[:port]: which site (and later which pool) serves
            // the request depends on it, so nothing ambiguous may pass.
            if host_seen || !valid_host(h.value.trim_ascii()) || !plain() {
                return Err(ProtocolError::BadRequest);
            }
            host_seen = true;
        } else if name.eq_ignore_ascii_case("expect")
            && h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue")
        {
            expect_continue = minor_version == 1;
        }
    }
    // RFC 9112: a request with both is an attack vector; refuse it.
    if framing == Framing::Chunked && content_length.is_some() {
        return Err(ProtocolError::BadRequest);
    }
    if let Some(cl) = content_length {
        if cl > limits.max_body_size {
            return Err(ProtocolError::BodyTooLarge);
        }
        if cl > 0 {
            framing = Framing::Length(cl);
        }
    }
    // HTTP/1.1 requires Host (RFC 9112 §3.2).
    if minor_version == 1 && !host_seen {
        return Err(ProtocolError::BadRequest);
    }
    if !target.starts_with('/') && target != "*" {
        // Absolute-form is for proxies; origin servers may refuse it.
        return Err(ProtocolError::BadRequest);
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, q),
        None => (target, ""),
    };
    Ok(Head::Complete {
        request: Request {
            method: Method::from_bytes(method_text),
            method_text,
            path,
            query,
            minor_version,
            headers,
            body: &[],
            client: "",
            client_ip: None,
            http2: false,
        },
        len,
        framing,
        keep_alive,
        expect_continue,
    })
}

/// Whether a partial head in `buf` may have become complete since `scanned` bytes of it were
/// parsed: a head ends with an empty line, so only new bytes holding a line end can finish
/// it. Re-parsing only then keeps a head sent one byte at a time linear in its size.
/// Past a limit, parse anyway: the parser is what answers 414 or 431.
pub fn head_may_be_complete(buf: &[u8], scanned: usize, limits: &HeadLimits) -> bool {
    if buf.len() > limits.max_request_line.min(limits.max_header_size) {
        return true;
    }
    let from = scanned.min(buf.len());
    memchr::memchr(b'\n', &buf[from..]).is_some()
}

/// `location` made safe to send as a `Location` of this server's own: a local path that
/// starts with two slashes or a backslash (`//evil.example/`, `/\\evil.example`) would be
/// read by browsers as another host's URL (scheme-relative), an open redirect built from a
/// client's own path — its leading run of slashes becomes one, as nginx's merged slashes
/// would give. Anything else (an absolute URL an operator wrote) is left as it is.
pub fn local_location(location: &str) -> std::borrow::Cow<'_, str> {
    let is_lead = |c: char| matches!(c, '/' | '\\' | '\t' | '\n' | '\r');
    let rest = location.trim_start_matches(is_lead);
    if !location.starts_with(['/', '\\']) || location.len() - rest.len() == 1 {
        return std::borrow::Cow::Borrowed(location);
    }
    std::borrow::Cow::Owned(format!("/{rest}"))
}

#[cfg(test)]
mod tests;
