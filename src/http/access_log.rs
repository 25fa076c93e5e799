//! Access logs: one line per request in the Common, combined or JSON format, written by each
//! worker thread through its own buffer into its own descriptor of the site's file (opened
//! with `O_APPEND`, so the threads' and workers' writes never interleave within a line and no
//! lock is shared across cores). A buffer is written when it passes [`FLUSH_AT`], at every
//! heartbeat of its thread (a few times a second) and when the thread stops.
//!
//! Reopening (SIGUSR1 to the master, logrotate's convention): the worker bumps [`REOPEN`]
//! and each thread reopens its files at its next flush — nothing is checked per request.
//!
//! Owns: the line formats, escaping and the buffers. Must not touch: what a request was
//! answered (the connection loop measures it and hands it here).

use crate::config::{AccessLogSpec, LogFormat};
use crate::http::clock::Clock;
use crate::http::Request;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped to have every thread of this process reopen its logs.
pub static REOPEN: AtomicU64 = AtomicU64::new(0);

/// A thread's buffer is written once it holds this much.
const FLUSH_AT: usize = 32 << 10;

/// What the log line says of the request itself, borrowed from it (or from a copy kept while
/// a proxied request's buffer is reused).
#[derive(Clone, Copy)]
pub struct Facts<'a> {
    pub method: &'a [u8],
    pub path: &'a [u8],
    pub query: &'a [u8],
    pub minor_version: u8,
    pub host: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    /// The request body's length as its `Content-Length` declared it (0 without one).
    pub body_in: u64,
}

impl<'a> Facts<'a> {
    pub fn of(req: &Request<'a>) -> Self {
        Facts {
            method: req.method_text.as_bytes(),
            path: req.path.as_bytes(),
            query: req.query.as_bytes(),
            minor_version: req.minor_version,
            host: req.host().map(str::as_bytes),
            referer: req.header("referer").map(str::as_bytes),
            user_agent: req.header("user-agent").map(str::as_bytes),
            body_in: req
                .header("content-length")
                .and_then(|l| l.trim().parse().ok())
                .unwrap_or(0),
        }
    }
}

/// [`Facts`] owned: a proxied request's, kept across the forwarding.
pub struct OwnedFacts {
    bytes: Vec<u8>,
    /// (start, len) of method, path, query, host, referer, user agent in `bytes`.
    spans: [(usize, usize); 6],
    present: [bool; 3],
    minor_version: u8,
    body_in: u64,
}

impl OwnedFacts {
    pub fn of(req: &Request<'_>) -> Self {
        let f = Facts::of(req);
        let mut bytes = Vec::with_capacity(256);
        let mut spans = [(0, 0); 6];
        let parts = [
            Some(f.method),
            Some(f.path),
            Some(f.query),
            f.host,
            f.referer,
            f.user_agent,
        ];
        for (k, part) in parts.iter().enumerate() {
            let p = part.unwrap_or(b"");
            spans[k] = (bytes.len(), p.len());
            bytes.extend_from_slice(p);
        }
        OwnedFacts {
            bytes,
            spans,
            present: [
                f.host.is_some(),
                f.referer.is_some(),
                f.user_agent.is_some(),
            ],
            minor_version: f.minor_version,
            body_in: f.body_in,
        }
    }

    pub fn facts(&self) -> Facts<'_> {
        let part = |k: usize| &self.bytes[self.spans[k].0..self.spans[k].0 + self.spans[k].1];
        Facts {
            method: part(0),
            path: part(1),
            query: part(2),
            minor_version: self.minor_version,
            host: self.present[0].then(|| part(3)),
            referer: self.present[1].then(|| part(4)),
            user_agent: self.present[2].then(|| part(5)),
            body_in: self.body_in,
        }
    }
}

/// What a request was answered, as the log line needs it.
#[derive(Clone, Copy)]
pub struct Entry<'a> {
    pub req: Facts<'a>,
    pub status: u16,
    /// Response body bytes sent (the head not counted), as Apache's `%b` and nginx's
    /// `$body_bytes_sent`, which log analyzers read.
    pub bytes: u64,
    /// From the request's first byte to its last answer byte queued.
    pub micros: u64,
    /// A proxied app's time to its answer's head.
    pub upstream_micros: Option<u64>,
    /// The hop that answered a lent request (see [`Report::hop`]).
    pub hop: Option<Hop>,
    /// Its trace (`[server.tracing]`), whose id the JSON line carries.
    pub trace: Option<&'a super::trace::TraceCtx>,
    /// What the route's response cache did for it, if one looked.
    pub cache: Option<CacheSeen>,
    /// The client's address, formatted.
    pub peer: &'a str,
}

impl<'a> Entry<'a> {
    /// A request espalier answered itself: `answer` is what it wrote (head and body), and
    /// `file_len` bytes of a file follow it.
    pub fn answered(
        req: Facts<'a>,
        answer: &[u8],
        file_len: u64,
        arrived: Option<std::time::Instant>,
        peer: &'a str,
    ) -> Self {
        Entry {
            req,
            status: status_of(answer),
            bytes: (answer.len() - head_len(answer)) as u64 + file_len,
            micros: micros_since(arrived),
            upstream_micros: None,
            hop: None,
            trace: None,
            cache: None,
            peer,
        }
    }

    /// A request answered by what its connection was lent to, as `report` saw it go out.
    pub fn reported(
        req: Facts<'a>,
        report: &Report,
        arrived: Option<std::time::Instant>,
        peer: &'a str,
    ) -> Self {
        Entry {
            req,
            status: report.status.get(),
            bytes: report.bytes.get().saturating_sub(report.head.get()),
            micros: micros_since(arrived),
            upstream_micros: report.upstream_micros.get(),
            hop: report.hop.get(),
            trace: None,
            cache: report.cache.get(),
            peer,
        }
    }
}

fn micros_since(arrived: Option<std::time::Instant>) -> u64 {
    arrived.map_or(0, |a| a.elapsed().as_micros() as u64)
}

/// What a request lent with its connection (to an application) was answered, filled in as
/// the answer goes out: the log line's figures.
#[derive(Default)]
pub struct Report {
    pub status: Cell<u16>,
    /// Bytes written to the client (head and body).
    pub bytes: Cell<u64>,
    /// Of those, the response head's.
    pub head: Cell<u64>,
    /// From the request sent to the app's answer head received.
    pub upstream_micros: Cell<Option<u64>>,
    /// The hop that answered, for its span (`[server.tracing]`): when the request was sent
    /// to it, its address (none for a unix socket) and how many times it was sent again.
    pub hop: Cell<Option<Hop>>,
    /// What the route's response cache did for it, where one looked (`cache_responses`).
    pub cache: Cell<Option<CacheSeen>>,
}

/// What a response cache did for a request: answered it while fresh, had the app asked, or
/// answered it stale (within `stale-while-revalidate`, or standing in for the app's error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheSeen {
    Hit,
    Miss,
    Stale,
}

/// A lent request's hop to the app or server that answered it.
#[derive(Debug, Clone, Copy)]
pub struct Hop {
    pub asked: std::time::Instant,
    pub addr: Option<std::net::SocketAddr>,
    pub resends: u8,
}

/// What a request refused without an answer (an access list's `deny_action = "close"`) is
/// logged as: nginx's 444, "closed without a response".
pub const REFUSED: &[u8] = b"HTTP/1.1 444 ";

/// The status code of a response written at the start of `answer` (`HTTP/1.1 200 …`); 0
/// when there is none.
pub fn status_of(answer: &[u8]) -> u16 {
    super::status_of(answer).unwrap_or(0)
}

/// One site's log in one thread.
pub struct AccessLog {
    spec: AccessLogSpec,
    file: RefCell<Option<File>>,
    buf: RefCell<Vec<u8>>,
    reopened: Cell<u64>,
    /// The last write failed (said once in the log).
    failing: Cell<bool>,
}

/// Opens `path` for appending, creating it (mode 0640: a site's query strings are not every
/// user's to read), without following a symlink.
pub fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

impl AccessLog {
    pub fn open(spec: &AccessLogSpec) -> std::io::Result<Self> {
        Ok(AccessLog {
            file: RefCell::new(Some(open(&spec.path)?)),
            spec: spec.clone(),
            buf: RefCell::new(Vec::with_capacity(FLUSH_AT + 1024)),
            reopened: Cell::new(REOPEN.load(Ordering::Relaxed)),
            failing: Cell::new(false),
        })
    }

    /// Adds one request's line.
    pub fn record(&self, e: &Entry<'_>, clock: &Clock, worker: &str) {
        let mut buf = self.buf.borrow_mut();
        let times = clock.log_time();
        match self.spec.format {
            LogFormat::Common | LogFormat::Combined => {
                clf_line(&mut buf, e, &times.0);
                if self.spec.format == LogFormat::Combined {
                    buf.extend_from_slice(b" \"");
                    escaped(&mut buf, e.req.referer.unwrap_or(b"-"));
                    buf.extend_from_slice(b"\" \"");
                    escaped(&mut buf, e.req.user_agent.unwrap_or(b"-"));
                    buf.extend_from_slice(b"\" ");
                    buf.extend_from_slice(itoa::Buffer::new().format(e.micros).as_bytes());
                    buf.push(b' ');
                    buf.extend_from_slice(worker.as_bytes());
                    buf.push(b' ');
                    match e.upstream_micros {
                        Some(u) => buf.extend_from_slice(itoa::Buffer::new().format(u).as_bytes()),
                        None => buf.push(b'-'),
                    }
                }
            }
            LogFormat::Json => json_line(&mut buf, e, &times.1, worker),
        }
        buf.push(b'\n');
        drop(times);
        if buf.len() >= FLUSH_AT {
            drop(buf);
            self.flush();
        }
    }

    /// Writes what is buffered (reopening the file first when asked to).
    pub fn flush(&self) {
        let generation = REOPEN.load(Ordering::Relaxed);
        if generation != self.reopened.get() {
            self.reopened.set(generation);
            let reopened = open(&self.spec.path);
            if let Err(e) = &reopened {
                eprintln!(
                    "espalier[access log]: cannot reopen {}: {e}; its lines are lost until it can be",
                    self.spec.path.display()
                );
            }
            *self.file.borrow_mut() = reopened.ok();
        }
        let mut buf = self.buf.borrow_mut();
        if buf.is_empty() {
            return;
        }
        if let Some(f) = self.file.borrow_mut().as_mut() {
            // One write per buffer: O_APPEND places it whole at the end. A failed write (a
            // full disk) is said once, and once more when writing works again.
            match f.write_all(&buf) {
                Err(e) if !self.failing.get() => {
                    self.failing.set(true);
                    let lines = memchr::memchr_iter(b'\n', &buf).count();
                    eprintln!(
                        "espalier[access log]: cannot write {}: {e}; {lines} line(s) lost, and those after until it can be written again",
                        self.spec.path.display()
                    );
                }
                Ok(()) if self.failing.get() => {
                    self.failing.set(false);
                    eprintln!(
                        "espalier[access log]: {} is written again",
                        self.spec.path.display()
                    );
                }
                _ => {}
            }
        }
        buf.clear();
    }
}

/// The length of the response head at the start of `answer` (through its empty line); all of
/// it when there is no empty line.
pub fn head_len(answer: &[u8]) -> usize {
    // Line ends found with `memchr` (a head has a dozen): cheaper per request than building
    // a substring finder.
    memchr::memchr_iter(b'\n', answer)
        .find(|&i| i >= 3 && &answer[i - 3..i] == b"\r\n\r")
        .map_or(answer.len(), |i| i + 1)
}

/// `peer - - [time] "METHOD target HTTP/1.x" status bytes`.
fn clf_line(buf: &mut Vec<u8>, e: &Entry<'_>, time: &str) {
    buf.extend_from_slice(if e.peer.is_empty() { "-" } else { e.peer }.as_bytes());
    buf.extend_from_slice(b" - - [");
    buf.extend_from_slice(time.as_bytes());
    buf.extend_from_slice(b"] \"");
    request_line(buf, &e.req);
    buf.extend_from_slice(b"\" ");
    buf.extend_from_slice(itoa::Buffer::new().format(e.status).as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(itoa::Buffer::new().format(e.bytes).as_bytes());
}

fn request_line(buf: &mut Vec<u8>, req: &Facts<'_>) {
    escaped(buf, req.method);
    buf.push(b' ');
    escaped(buf, req.path);
    if !req.query.is_empty() {
        buf.push(b'?');
        escaped(buf, req.query);
    }
    buf.push(b' ');
    buf.extend_from_slice(protocol(req.minor_version));
}

/// [`Facts::minor_version`] of a request that came over HTTP/2.
pub const HTTP2: u8 = 20;
/// [`Facts::minor_version`] of a request that came over HTTP/3.
pub const HTTP3: u8 = 30;

/// The protocol as logs write it.
fn protocol(minor_version: u8) -> &'static [u8] {
    match minor_version {
        0 => b"HTTP/1.0",
        HTTP2 => b"HTTP/2.0",
        HTTP3 => b"HTTP/3.0",
        _ => b"HTTP/1.1",
    }
}

/// A client's bytes in a quoted CLF field: `"`, `\`, controls and non-ASCII as `\xHH`, as
/// nginx writes them, so a line can never be forged or broken by what a client sends.
fn escaped(buf: &mut Vec<u8>, bytes: &[u8]) {
    let plain = |b: &u8| *b != b'"' && *b != b'\\' && (0x20..0x7f).contains(b);
    if bytes.iter().all(plain) {
        buf.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            buf.extend_from_slice(format!("\\x{b:02X}").as_bytes());
        } else {
            buf.push(b);
        }
    }
}

/// A client's bytes in a JSON string: `"`, `\` and controls escaped; bytes that are not
/// UTF-8 as `\u00HH`, so every line is valid JSON whatever was sent.
fn json_escaped(buf: &mut Vec<u8>, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => buf.extend_from_slice(b"\\\""),
                '\\' => buf.extend_from_slice(b"\\\\"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    buf.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
                }
                c => {
                    let mut tmp = [0u8; 4];
                    buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
            }
        }
        for &b in chunk.invalid() {
            buf.extend_from_slice(format!("\\u00{b:02x}").as_bytes());
        }
    }
}

fn json_field(buf: &mut Vec<u8>, name: &str, value: Option<&[u8]>) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\":");
    match value {
        Some(v) => {
            buf.push(b'"');
            json_escaped(buf, v);
            buf.push(b'"');
        }
        None => buf.extend_from_slice(b"null"),
    }
}

fn json_number(buf: &mut Vec<u8>, name: &str, value: Option<u64>) {
    buf.extend_from_slice(b",\"");
    buf.extend_from_slice(name.as_bytes());
    buf.extend_from_slice(b"\":");
    match value {
        Some(v) => buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        None => buf.extend_from_slice(b"null"),
    }
}

fn json_line(buf: &mut Vec<u8>, e: &Entry<'_>, time: &str, worker: &str) {
    buf.extend_from_slice(b"{\"time\":\"");
    buf.extend_from_slice(time.as_bytes());
    buf.push(b'"');
    json_field(buf, "remote", Some(e.peer.as_bytes()));
    json_field(buf, "method", Some(e.req.method));
    json_field(buf, "path", Some(e.req.path));
    json_field(buf, "query", Some(e.req.query));
    json_field(buf, "protocol", Some(protocol(e.req.minor_version)));
    json_field(buf, "host", e.req.host);
    json_number(buf, "status", Some(u64::from(e.status)));
    json_number(buf, "bytes", Some(e.bytes));
    json_field(buf, "referer", e.req.referer);
    json_field(buf, "user_agent", e.req.user_agent);
    json_number(buf, "request_us", Some(e.micros));
    json_number(buf, "upstream_us", e.upstream_micros);
    json_field(buf, "worker", Some(worker.as_bytes()));
    if let Some(trace) = e.trace {
        json_field(buf, "trace_id", Some(trace.trace_id.to_string().as_bytes()));
    }
    buf.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_ends_at_the_first_empty_line() {
        assert_eq!(head_len(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\nbody\r\n\r\n"), 25);
        assert_eq!(head_len(b"HTTP/1.1 200 OK\r\n"), 17);
        assert_eq!(head_len(b""), 0);
    }

    #[test]
    fn client_bytes_cannot_break_a_line() {
        let mut b = Vec::new();
        escaped(&mut b, b"a\"b\\c\nd\xffe");
        assert_eq!(b, b"a\\x22b\\x5Cc\\x0Ad\\xFFe");
        let mut j = Vec::new();
        json_escaped(&mut j, b"a\"b\\c\nd\xffe\xc3\xa9");
        assert_eq!(
            String::from_utf8(j).unwrap(),
            "a\\\"b\\\\c\\u000ad\\u00ffeé"
        );
    }
}
