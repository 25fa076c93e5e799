//! The one response writer: every answer's head — espalier's own (handlers, static files,
//! a step's refusal, a 502 for an app that failed), an HTTP app's and a FastCGI app's — is
//! written by [`Responder`], and gets its site's response steps in one place
//! ([`Responder::response_steps`]).
//!
//! Owns: the status line (always `HTTP/1.1`, as RFC 9110 §2.5 asks of a server: an HTTP/1.0
//! client reads it as 1.0), espalier's common lines (`Server`, `Date`, the worker line) but
//! for those an app's answer says itself ([`Sent`]), the `Connection` line the client gets
//! ([`Then`]), the framing fields, the site's error page and field edits. Must not touch:
//! which fields an app's answer keeps (the proxy filters them before they come here), the
//! body beyond a small one written in place, or the socket.

use super::response_chain::{ResponseChain, Step, Whose};
use super::{clock, error_pages};
use crate::features::head::{AnswerIndex, HeadEdit};

/// What the connection does after the answer, as its `Connection` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    KeepAlive,
    Close,
    /// A `101 Switching Protocols`: the connection becomes the app's tunnel.
    Upgrade,
}

/// Which of espalier's common lines an answer has its own of (an app's `Server`, `Date`):
/// those of espalier's are left out, as a proxy keeps its origin's.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sent {
    pub server: bool,
    pub date: bool,
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        401 => "Unauthorized",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// [`Responder::unavailable`] as bytes, with the common lines formatted now (for the master).
pub fn unavailable_now() -> Vec<u8> {
    let mut out = Vec::with_capacity(200);
    Responder::new(&mut out, &clock::common_now(), false, 1, false).unavailable();
    out
}

/// Writes one response into a connection's output buffer. Every response carries `Server`,
/// `Date`, the worker header when enabled, and `Connection` when it differs from the default.
pub struct Responder<'a> {
    out: &'a mut Vec<u8>,
    common: &'a [u8],
    then: Then,
    minor_version: u8,
    head_only: bool,
    /// Where the head being written lies in `out`: its status, and its fields when
    /// `indexing` — kept as they are written and through the response steps' edits (see
    /// `features::head`).
    index: AnswerIndex,
    /// Whether each field is indexed as it is written: for an answer with response steps to
    /// run or a stream to make its response from. An HTTP/1.1 client's answer without steps
    /// (a static page's) gets its text alone and pays for no index.
    indexing: bool,
}

impl<'a> Responder<'a> {
    /// `common` holds the `Server`, `Date` and worker header lines, already formatted.
    pub fn new(
        out: &'a mut Vec<u8>,
        common: &'a [u8],
        keep_alive: bool,
        minor_version: u8,
        head_only: bool,
    ) -> Self {
        Responder {
            out,
            common,
            then: if keep_alive {
                Then::KeepAlive
            } else {
                Then::Close
            },
            minor_version,
            head_only,
            index: AnswerIndex::default(),
            indexing: false,
        }
    }

    /// Indexes every field from now on (see [`Self::indexing`]): for a stream's response, or
    /// when `steps` (a response chain) will run over the answer.
    pub fn index_fields(&mut self, steps: bool) {
        self.indexing |= steps;
    }

    /// The index of the head written last (its status and fields, where they lie in the
    /// buffer): what an HTTP/2 or HTTP/3 stream's response is made from. Boxed where it is
    /// taken: it is held across awaits, in futures that are moved whole.
    pub fn into_index(self) -> Box<AnswerIndex> {
        Box::new(self.index)
    }

    /// Where the head written last ends in the buffer (its end when none was ended).
    pub fn head_end(&self) -> usize {
        self.index.head().map_or(self.out.len(), |h| h.end)
    }

    /// The answer is one after which the connection does `then` (an upgrade).
    pub fn then(&mut self, then: Then) {
        self.then = then;
    }

    pub fn keep_alive(&self) -> bool {
        self.then == Then::KeepAlive
    }

    /// Where the next response starts in the output buffer (see [`Self::response_steps`]).
    pub fn mark(&self) -> usize {
        self.out.len()
    }

    /// The response steps of the answer's site (and path) on the answer written since
    /// `mark` — the one place they run, on every answer: espalier's own (handlers, static
    /// files, a step's refusal, `OwnAnswers` on a lent connection) and apps' heads
    /// (`proxy::head`). `None`: the site configures none, and this costs nothing.
    pub fn response_steps(&mut self, mark: usize, chain: Option<&ResponseChain>, whose: Whose) {
        let Some(chain) = chain else {
            return;
        };
        // Nothing written since `mark` (an answer refused): nothing to edit.
        if self.index.head().map(|h| h.start) != Some(mark) {
            return;
        }
        // Its writer asks for the index before it writes, where it knows the chain.
        debug_assert!(
            self.indexing,
            "response steps over an answer written unindexed"
        );
        if !self.indexing {
            return;
        }
        for step in chain.steps() {
            let mut head = HeadEdit {
                out: self.out,
                index: &mut self.index,
            };
            match step {
                Step::ErrorPage(pages) if whose == Whose::Own => self.brand_error(mark, pages),
                Step::ErrorPage(_) => {}
                Step::Headers(edits) => edits.apply(&mut head),
                Step::Feature(feature) => feature.run(&mut head),
            }
        }
    }

    /// Writes `lines` (whole `Name: value\r\n` lines espalier formatted), indexed.
    fn lines(&mut self, lines: &[u8]) {
        if self.indexing {
            self.index.lines(self.out.len(), lines);
        }
        self.out.extend_from_slice(lines);
    }

    /// Ends the head with its blank line.
    fn blank_line(&mut self) {
        self.out.extend_from_slice(b"\r\n");
        self.index.end(self.out.len());
    }

    pub fn head_only(&self) -> bool {
        self.head_only
    }

    /// Starts a response: status line and the common headers.
    pub fn status(&mut self, status: u16) -> &mut Self {
        self.status_line(status, "", Sent::default())
    }

    /// Starts a response whose fields are partly another's (an app's): `reason` its phrase
    /// ("" for the status's own), `sent` the common lines it has its own of. Then the
    /// `Connection` line: `close` when the connection ends after it (said to HTTP/1.0 clients
    /// too, as nginx does), `keep-alive` to an HTTP/1.0 client it stays open for, `upgrade`.
    pub fn status_line(&mut self, status: u16, reason: &str, sent: Sent) -> &mut Self {
        self.index.begin(self.out.len(), status);
        self.out.extend_from_slice(b"HTTP/1.1 ");
        self.out
            .extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        self.out.push(b' ');
        let reason = match reason {
            "" => self::reason(status),
            r => r,
        };
        self.out.extend_from_slice(reason.as_bytes());
        self.out.extend_from_slice(b"\r\n");
        let common = self.common;
        if !sent.server && !sent.date {
            self.lines(common);
        } else {
            let (server, date, rest) = clock::split_common(common);
            if !sent.server {
                self.lines(server);
            }
            if !sent.date {
                self.lines(date);
            }
            self.lines(rest);
        }
        match (self.then, self.minor_version) {
            (Then::Close, _) => self.lines(b"Connection: close\r\n"),
            (Then::Upgrade, _) => self.lines(b"Connection: upgrade\r\n"),
            (Then::KeepAlive, 0) => self.lines(b"Connection: keep-alive\r\n"),
            (Then::KeepAlive, _) => {}
        }
        self
    }

    pub fn header(&mut self, name: &str, value: &str) -> &mut Self {
        self.field(name.as_bytes(), value.as_bytes())
    }

    /// A field whose name or value need not be text (an app's, passed on as it sent it).
    pub fn field(&mut self, name: &[u8], value: &[u8]) -> &mut Self {
        let len = name.len() + 2 + value.len() + 2;
        if self.indexing {
            self.index.line(self.out.len(), name.len(), len);
        }
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// Header lines already formatted (`Name: value\r\n`…), such as a cached file's.
    pub fn raw_headers(&mut self, lines: &[u8]) -> &mut Self {
        self.lines(lines);
        self
    }

    /// Appends bytes as they are (a preformatted body after [`Self::end_head`]), with room
    /// after them for the lines the response steps add to the head once the body is in
    /// (`headers`, HSTS, `Alt-Svc`): without it a body of kilobytes was moved to a new
    /// allocation for a few bytes more — over HTTP/3 every time, the buffer going to quinn
    /// rather than back to the connection.
    pub fn append(&mut self, bytes: &[u8]) -> &mut Self {
        const ROOM_FOR_STEPS: usize = 256;
        self.out.reserve(bytes.len() + ROOM_FOR_STEPS);
        self.out.extend_from_slice(bytes);
        self
    }

    pub fn content_length(&mut self, len: u64) -> &mut Self {
        let mut b = itoa::Buffer::new();
        self.field(b"Content-Length", b.format(len).as_bytes())
    }

    /// `Transfer-Encoding` with `codings` (`chunked`, or an app's `gzip, chunked`).
    pub fn transfer_encoding(&mut self, codings: &[u8]) -> &mut Self {
        self.field(b"Transfer-Encoding", codings)
    }

    /// Ends the head; the body (if any) follows separately.
    pub fn end_head(&mut self) {
        self.blank_line();
    }

    /// Ends the head and appends `body` (not for HEAD requests).
    pub fn body(&mut self, body: &[u8]) {
        self.content_length(body.len() as u64);
        self.blank_line();
        if !self.head_only {
            self.out.extend_from_slice(body);
        }
    }

    /// Ends the head and writes the body straight into the output buffer with `write`, its
    /// length known only once written: room is left for the `Content-Length` value, and the
    /// body is moved back over what the value did not use (one `memmove` within the buffer,
    /// cheaper than building the body elsewhere and copying it, or counting it first). A
    /// HEAD answer's body is written, measured and dropped.
    pub fn body_written(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        // A length's digits (at most 20) and the head's end.
        const ROOM: usize = 20 + 4;
        self.out.extend_from_slice(b"Content-Length: ");
        let value_at = self.out.len();
        self.out.resize(value_at + ROOM, 0);
        let body_at = self.out.len();
        write(self.out);
        let len = self.out.len() - body_at;
        let mut b = itoa::Buffer::new();
        let digits = b.format(len).as_bytes();
        let end_of_head = value_at + digits.len() + 4;
        self.out.copy_within(body_at.., end_of_head);
        self.out[value_at..value_at + digits.len()].copy_from_slice(digits);
        self.out[value_at + digits.len()..end_of_head].copy_from_slice(b"\r\n\r\n");
        self.out
            .truncate(end_of_head + if self.head_only { 0 } else { len });
        const NAME: usize = "Content-Length".len();
        let line_at = value_at - NAME - 2;
        if self.indexing {
            self.index.line(line_at, NAME, end_of_head - 2 - line_at);
        }
        self.index.end(end_of_head);
    }

    /// A complete small response: status, content type and body.
    pub fn simple(&mut self, status: u16, content_type: &str, body: &[u8]) {
        self.status(status)
            .header("Content-Type", content_type)
            .body(body);
    }

    /// The one 503 espalier sends outside a handler — a worker over its connection limit, a
    /// stopped pool — with `Retry-After` (the responder should say `Connection: close`).
    pub fn unavailable(&mut self) {
        self.status(503)
            .header("Retry-After", "5")
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(b"503 Service Unavailable\n");
    }

    /// A site's own page for `status`, with `kept` field lines (whole, `Name: value\r\n`).
    pub fn error_page(&mut self, status: u16, page: &error_pages::ErrorPage, kept: &[u8]) {
        self.status(status)
            .raw_headers(kept)
            .header("Content-Type", page.content_type)
            .body(&page.body);
    }

    /// Replaces the error answer written since `mark` by the site's page for its status, if
    /// it has one, keeping the fields the page does not say ([`error_pages::KEPT_FIELDS`]).
    fn brand_error(&mut self, mark: usize, pages: &error_pages::ErrorPages) {
        let status = self.index.status();
        let Some(page) = pages.get(status).filter(|_| status >= 400) else {
            return;
        };
        let kept = self.index.lines_of(self.out, |name| {
            (error_pages::KEPT_FIELDS.iter()).any(|k| k.as_bytes().eq_ignore_ascii_case(name))
        });
        self.out.truncate(mark);
        self.error_page(status, page, &kept);
    }

    /// [`Self::error`] with field lines of its own (`Retry-After: 1\r\n`).
    pub fn error_keeping(&mut self, status: u16, kept: &[u8]) {
        if kept.is_empty() {
            return self.error(status);
        }
        let text = format!("{status} {}\n", reason(status));
        self.status(status)
            .raw_headers(kept)
            .header("Content-Type", "text/plain; charset=utf-8")
            .body(text.as_bytes());
    }

    /// A plain-text error page for `status`.
    pub fn error(&mut self, status: u16) {
        let mut text = String::with_capacity(40);
        text.push_str(itoa::Buffer::new().format(status));
        text.push(' ');
        text.push_str(reason(status));
        text.push('\n');
        self.simple(status, "text/plain; charset=utf-8", text.as_bytes());
    }
}
