//! Forwarding one request to an app process and its response back, streamed both ways.
//!
//! Owns: the upstream request head ([`ForwardRequest::new`]: hop-by-hop fields dropped,
//! `X-Forwarded-For/Proto/Host` set), choosing a process (own node first, see
//! [`super::Tiers`]), sending the body as it arrives, reading the response head, relaying the
//! body, tunnelling an Upgrade, and the error answers: `502` when the app is down or answers
//! garbage, `503` when no process is ready, `504` when it does not answer in
//! `response_timeout`. Must not touch: the client connection's loop (it hands the request here
//! and takes the connection back when the answer says it may go on).
//!
//! Bodies never sit whole in memory: each direction goes through one fixed buffer, so a 50 MB
//! upload costs a worker 64 KiB. A chunked body is checked by the same decoder the engine uses
//! (strict framing, bounded extensions and trailers) and passed on as it was sent, so the app
//! sees exactly the framing espalier validated — no request smuggling between the two.
//!
//! Retry: a request that is idempotent and has no body is sent again, once, on a new
//! connection to another process when its connection was closed before any byte of a
//! response — a keep-alive connection the app closed as it was reused, or a process that
//! died. Anything else that fails after being sent is answered 502, never repeated.

use super::upstream::{Conn, Pool};
use super::{Endpoint, Tiers};
use crate::http::{ChunkedDecoder, Framing, Method, ProtocolError, Request, Responder};
use std::cell::{Cell, RefCell};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Transfer buffer of each direction.
const BUF: usize = 64 << 10;
/// Largest response head accepted from an app.
const MAX_RESPONSE_HEAD: usize = 64 << 10;
/// How long a request waits for a first app process to be ready (start-up, a restart)
/// before it is answered 503, at most.
const WAIT_FOR_READY: Duration = Duration::from_secs(5);

/// A pool's proxy timeouts.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct ProxySettings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Speak FastCGI to the app processes instead of HTTP/1.1.
    #[serde(default)]
    pub fastcgi: bool,
}

/// The tiers of a front worker, replaced by its main thread when the master sends new ones
/// and read by its engine threads: a version check (one atomic load) per request, the lock
/// only when the version moved.
#[derive(Default)]
pub struct SharedTiers {
    version: AtomicU64,
    tiers: Mutex<Arc<Tiers>>,
}

impl SharedTiers {
    pub fn publish(&self, tiers: Tiers) {
        *self.tiers.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(tiers);
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// One engine thread's way to a proxied pool: its view of the tiers, its idle connections,
/// its round-robin position and counters. Never shared with another thread.
pub struct ProxyRoute {
    settings: ProxySettings,
    shared: Arc<SharedTiers>,
    seen: RefCell<(u64, Arc<Tiers>)>,
    pool: Pool,
    next: Cell<usize>,
    /// `X-Espalier-Worker: …\r\n` when `worker_header` is on.
    worker_line: Option<String>,
    /// Requests forwarded beyond the nearest tier (no ready process on this node).
    pub remote: Cell<u64>,
    pub forwarded: Cell<u64>,
}

impl ProxyRoute {
    pub fn new(
        settings: ProxySettings,
        shared: Arc<SharedTiers>,
        worker_line: Option<String>,
    ) -> Self {
        ProxyRoute {
            settings,
            shared,
            seen: RefCell::new((u64::MAX, Arc::new(Tiers::default()))),
            pool: Pool::default(),
            next: Cell::new(0),
            worker_line,
            remote: Cell::new(0),
            forwarded: Cell::new(0),
        }
    }

    fn tiers(&self) -> Arc<Tiers> {
        let version = self.shared.version.load(Ordering::Acquire);
        let mut seen = self.seen.borrow_mut();
        if seen.0 != version {
            let tiers = Arc::clone(&self.shared.tiers.lock().unwrap_or_else(|e| e.into_inner()));
            self.pool
                .retain(|e| tiers.0.iter().flatten().any(|t| t == e));
            *seen = (version, tiers);
        }
        Arc::clone(&seen.1)
    }

    /// The next process to use, round-robin within the nearest tier that has one other than
    /// `avoid` (a retry goes elsewhere when it can). `None` when none is ready.
    fn pick(&self, avoid: Option<&Endpoint>) -> Option<Endpoint> {
        let tiers = self.tiers();
        let usable = |tier: &Vec<Endpoint>| tier.iter().any(|e| Some(e) != avoid);
        let (k, tier) = tiers
            .0
            .iter()
            .enumerate()
            .find(|(_, t)| usable(t))
            .or_else(|| tiers.0.iter().enumerate().find(|(_, t)| !t.is_empty()))?;
        let n = self.next.get();
        self.next.set(n.wrapping_add(1));
        let others = tier.iter().filter(|e| Some(*e) != avoid).count();
        let chosen = if others == 0 {
            tier[n % tier.len()].clone()
        } else {
            tier.iter()
                .filter(|e| Some(*e) != avoid)
                .nth(n % others)
                .expect("counted above")
                .clone()
        };
        if k > 0 {
            self.remote.set(self.remote.get() + 1);
        }
        Some(chosen)
    }

    /// Whether the app speaks FastCGI.
    pub fn fastcgi(&self) -> bool {
        self.settings.fastcgi
    }

    pub(super) fn count_forward(&self) {
        self.forwarded.set(self.forwarded.get() + 1);
    }

    pub(super) fn settings(&self) -> ProxySettings {
        self.settings
    }

    pub(super) fn keep(&self, endpoint: &Endpoint, conn: Conn) {
        self.pool.put(endpoint, conn);
    }

    /// A connection to a ready process other than `avoid` when there is one: an idle one, or
    /// a new one (three processes tried before giving up). Fails with the status to answer:
    /// 503 none ready, 504 connecting timed out, 502 refused.
    pub(super) async fn connection(
        &self,
        avoid: Option<Endpoint>,
    ) -> Result<(Endpoint, Conn), u16> {
        let mut avoid = avoid;
        let mut tries = 0;
        loop {
            tries += 1;
            let Some(endpoint) = self.pick_waiting(avoid.as_ref()).await else {
                return Err(503);
            };
            if let Some(c) = self.pool.take(&endpoint) {
                return Ok((endpoint, c));
            }
            match Conn::connect(&endpoint, self.settings.connect_timeout).await {
                Ok(c) => return Ok((endpoint, c)),
                // Nothing was sent: another process may take it.
                Err(_) if tries < 3 => avoid = Some(endpoint),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err(504),
                Err(_) => return Err(502),
            }
        }
    }

    async fn pick_waiting(&self, avoid: Option<&Endpoint>) -> Option<Endpoint> {
        let until = tokio::time::Instant::now() + WAIT_FOR_READY.min(self.settings.connect_timeout);
        loop {
            if let Some(e) = self.pick(avoid) {
                return Some(e);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A request as it goes to the app: its head rewritten, and what the forwarding needs to know.
pub struct ForwardRequest {
    head: Vec<u8>,
    body: Framing,
    retryable: bool,
    head_only: bool,
    upgrade: bool,
    client_minor: u8,
    keep_alive: bool,
    expect_continue: bool,
}

/// Fields that describe one connection, not the message (RFC 9110 §7.6.1), and the ones
/// espalier sets itself.
fn dropped_on_the_way(name: &str, listed: &[&str]) -> bool {
    const OWN: [&str; 12] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "expect",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
    ];
    OWN.iter().any(|o| name.eq_ignore_ascii_case(o))
        || listed.iter().any(|l| name.eq_ignore_ascii_case(l))
}

/// The tokens of every `Connection` field.
fn connection_tokens<'a>(headers: impl Iterator<Item = (&'a str, &'a [u8])>) -> Vec<&'a str> {
    headers
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

impl ForwardRequest {
    /// The request `req` (framed by `framing`, from `peer`) as it goes to the app.
    pub fn new(
        req: &Request<'_>,
        framing: Framing,
        keep_alive: bool,
        expect_continue: bool,
        peer: Option<&str>,
        proto: &str,
    ) -> Self {
        let fields = || req.headers.iter().map(|h| (h.name, h.value));
        let listed = connection_tokens(fields());
        let upgrade = listed.iter().any(|t| t.eq_ignore_ascii_case("upgrade"))
            && req.header("upgrade").is_some()
            && req.minor_version == 1;
        let mut head = Vec::with_capacity(512);
        head.extend_from_slice(req.method_text.as_bytes());
        head.push(b' ');
        head.extend_from_slice(req.path.as_bytes());
        if !req.query.is_empty() {
            head.push(b'?');
            head.extend_from_slice(req.query.as_bytes());
        }
        head.extend_from_slice(b" HTTP/1.1\r\n");
        for h in req.headers {
            if dropped_on_the_way(h.name, &listed) {
                continue;
            }
            head.extend_from_slice(h.name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(h.value);
            head.extend_from_slice(b"\r\n");
        }
        // X-Forwarded-For: the client's own list, then the client.
        let mut forwarded_for = false;
        for h in req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
        {
            head.extend_from_slice(if forwarded_for {
                b", "
            } else {
                b"X-Forwarded-For: "
            });
            head.extend_from_slice(h.value);
            forwarded_for = true;
        }
        if let Some(ip) = peer {
            head.extend_from_slice(if forwarded_for {
                b", "
            } else {
                b"X-Forwarded-For: "
            });
            head.extend_from_slice(ip.as_bytes());
            forwarded_for = true;
        }
        if forwarded_for {
            head.extend_from_slice(b"\r\n");
        }
        push_field(&mut head, "X-Forwarded-Proto", proto);
        if let Some(host) = req.host() {
            push_field(&mut head, "X-Forwarded-Host", host);
        }
        match framing {
            Framing::None => {}
            Framing::Length(n) => {
                push_field(&mut head, "Content-Length", itoa::Buffer::new().format(n))
            }
            Framing::Chunked => push_field(&mut head, "Transfer-Encoding", "chunked"),
        }
        if upgrade {
            let protocol = req.header("upgrade").unwrap_or_default();
            push_field(&mut head, "Upgrade", protocol);
            push_field(&mut head, "Connection", "upgrade");
        } else {
            push_field(&mut head, "Connection", "keep-alive");
        }
        head.extend_from_slice(b"\r\n");
        let idempotent = matches!(
            req.method_text,
            "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE" | "TRACE"
        );
        ForwardRequest {
            head,
            body: framing,
            retryable: idempotent && matches!(framing, Framing::None) && !upgrade,
            head_only: req.method == Method::Head,
            upgrade,
            client_minor: req.minor_version,
            keep_alive,
            expect_continue,
        }
    }
}

fn push_field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The client side of a forwarded request, lent by the connection's loop.
pub struct Client<'a> {
    pub stream: &'a mut TcpStream,
    /// Bytes received after the request head: the body's start, perhaps the next request.
    /// On return it holds only what follows the body.
    pub rbuf: &'a mut Vec<u8>,
    /// The thread's clock: its `Server`/`Date` lines head espalier's own error answers.
    pub clock: &'a crate::http::clock::Clock,
    pub max_body: u64,
    pub max_framing: usize,
    /// Between reads of the body, and for writes to the client.
    pub body_timeout: Duration,
}

/// Whether the client connection may carry another request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    KeepAlive,
    Close,
}

pub(super) enum Failure {
    /// Nothing was answered yet: answer this status and close.
    Answer(u16),
    /// A response was under way (or the client is gone): just close.
    Drop,
}

/// What went wrong getting the response head.
enum HeadError {
    /// Closed before any byte: a retry may go elsewhere.
    ClosedEarly,
    Timeout,
    Garbage,
}

/// How the app frames its response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Forwards the request to an app process and relays its answer to the client.
pub async fn forward(client: Client<'_>, req: ForwardRequest, route: &ProxyRoute) -> Outcome {
    route.count_forward();
    let Client {
        stream,
        rbuf,
        clock,
        max_body,
        max_framing,
        body_timeout,
    } = client;
    let settings = route.settings;
    if req.expect_continue {
        // The app never sees `Expect` (a hop's business); the client may send its body now.
        if write_timeout(stream, b"HTTP/1.1 100 Continue\r\n\r\n", body_timeout)
            .await
            .is_err()
        {
            return Outcome::Close;
        }
    }
    let mut avoid: Option<Endpoint> = None;
    let mut tries = 0;
    let (endpoint, mut conn, mut ubuf, head_len) = loop {
        tries += 1;
        let (endpoint, mut conn) = match route.connection(avoid.take()).await {
            Ok(c) => c,
            Err(status) => {
                return answer(stream, clock, status, req.client_minor, req.head_only).await
            }
        };
        if write_timeout(&mut conn, &req.head, settings.response_timeout)
            .await
            .is_err()
        {
            if req.retryable && tries < 2 {
                avoid = Some(endpoint);
                continue;
            }
            return answer(stream, clock, 502, req.client_minor, req.head_only).await;
        }
        let sent = send_body(
            stream,
            rbuf,
            &mut conn,
            req.body,
            (max_body, max_framing),
            body_timeout,
            settings.response_timeout,
        )
        .await;
        match sent {
            Ok(()) => {}
            Err(Failure::Answer(status)) => {
                return answer(stream, clock, status, req.client_minor, req.head_only).await
            }
            Err(Failure::Drop) => return Outcome::Close,
        }
        let mut ubuf = Vec::with_capacity(8 << 10);
        match read_head(&mut conn, &mut ubuf, settings.response_timeout).await {
            Ok(len) => break (endpoint, conn, ubuf, len),
            Err(HeadError::ClosedEarly) if req.retryable && tries < 2 => {
                avoid = Some(endpoint);
                continue;
            }
            Err(HeadError::Timeout) => {
                return answer(stream, clock, 504, req.client_minor, req.head_only).await
            }
            Err(_) => return answer(stream, clock, 502, req.client_minor, req.head_only).await,
        }
    };
    // The response head, parsed again for its fields (the buffer is ours now).
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut fields);
    if !matches!(
        resp.parse(&ubuf[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        return answer(stream, clock, 502, req.client_minor, req.head_only).await;
    }
    let status = resp.code.unwrap_or(502);
    let reason = resp.reason.unwrap_or("");
    let upstream_minor = resp.version.unwrap_or(0);
    let listed = connection_tokens(resp.headers.iter().map(|h| (h.name, h.value)));
    let upstream_closes =
        listed.iter().any(|t| t.eq_ignore_ascii_case("close")) || upstream_minor == 0;
    let kind = match body_kind(status, req.head_only, resp.headers) {
        Some(k) => k,
        None => return answer(stream, clock, 502, req.client_minor, req.head_only).await,
    };
    let switching = status == 101 && req.upgrade;
    if status == 101 && !req.upgrade {
        return answer(stream, clock, 502, req.client_minor, req.head_only).await;
    }
    // To the client: HTTP/1.1 chunked when the length is unknown, else close-delimited for
    // an HTTP/1.0 client.
    let rechunk = matches!(kind, BodyKind::UntilClose) && req.client_minor == 1;
    let plain_for_old_client = matches!(kind, BodyKind::Chunked) && req.client_minor == 0;
    let keep = req.keep_alive
        && !switching
        && (rechunk || kind != BodyKind::UntilClose)
        && !plain_for_old_client;
    let mut out = Vec::with_capacity(head_len + 128);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for h in resp.headers.iter() {
        let copy = if h.name.eq_ignore_ascii_case("content-length") {
            // A HEAD or 304 answer keeps the length it describes; a body's length is ours.
            kind == BodyKind::None
        } else if switching && h.name.eq_ignore_ascii_case("upgrade") {
            true
        } else {
            !dropped_on_the_way(h.name, &listed)
        };
        if copy {
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value);
            out.extend_from_slice(b"\r\n");
        }
    }
    if let Some(line) = &route.worker_line {
        out.extend_from_slice(line.as_bytes());
    }
    match kind {
        BodyKind::Length(n) => {
            push_field(&mut out, "Content-Length", itoa::Buffer::new().format(n))
        }
        BodyKind::Chunked if !plain_for_old_client => {
            push_field(&mut out, "Transfer-Encoding", "chunked")
        }
        BodyKind::UntilClose if rechunk => push_field(&mut out, "Transfer-Encoding", "chunked"),
        _ => {}
    }
    if switching {
        out.extend_from_slice(b"Connection: upgrade\r\n");
    } else if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if req.client_minor == 0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    ubuf.drain(..head_len);
    // A small answer read whole goes out with its head in one write; nothing is left to relay.
    let mut kind = kind;
    if let BodyKind::Length(n) = kind {
        if ubuf.len() as u64 == n {
            out.extend_from_slice(&ubuf);
            ubuf.clear();
            kind = BodyKind::None;
        }
    }
    if write_timeout(stream, &out, body_timeout).await.is_err() {
        return Outcome::Close;
    }
    if switching {
        tunnel(stream, rbuf, conn, ubuf).await;
        return Outcome::Close;
    }
    let relayed = relay_body(
        &mut conn,
        stream,
        ubuf,
        kind,
        (rechunk, plain_for_old_client),
        settings.response_timeout,
        body_timeout,
    )
    .await;
    match relayed {
        Ok(clean) => {
            if clean && !upstream_closes && !matches!(kind, BodyKind::UntilClose) {
                route.pool.put(&endpoint, conn);
            }
            if keep {
                Outcome::KeepAlive
            } else {
                Outcome::Close
            }
        }
        Err(()) => Outcome::Close,
    }
}

/// espalier's own answer (no byte of a response was sent yet); the connection then closes,
/// since a body may be left half-read.
pub(super) async fn answer(
    stream: &mut TcpStream,
    clock: &crate::http::clock::Clock,
    status: u16,
    client_minor: u8,
    head_only: bool,
) -> Outcome {
    let mut out = Vec::with_capacity(256);
    {
        // Borrowed and let go before the write: the clock's own task refreshes the lines.
        let common = clock.common();
        Responder::new(&mut out, &common, false, client_minor, head_only).error(status);
    }
    let _ = write_timeout(stream, &out, Duration::from_secs(5)).await;
    Outcome::Close
}

pub(super) async fn write_timeout<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    buf: &[u8],
    d: Duration,
) -> io::Result<()> {
    match tokio::time::timeout(d, w.write_all(buf)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

pub(super) async fn read_timeout<R: AsyncReadExt + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    d: Duration,
) -> io::Result<usize> {
    match tokio::time::timeout(d, r.read(buf)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// Sends the request body to the app as it arrives from the client: first what the client
/// buffer holds, then through one fixed buffer. Leaves in `rbuf` only what follows the body.
async fn send_body(
    client: &mut TcpStream,
    rbuf: &mut Vec<u8>,
    conn: &mut Conn,
    framing: Framing,
    (max_body, max_framing): (u64, usize),
    client_timeout: Duration,
    upstream_timeout: Duration,
) -> Result<(), Failure> {
    let upstream_failed = |_| Failure::Answer(502);
    match framing {
        Framing::None => Ok(()),
        Framing::Length(total) => {
            let have = (rbuf.len() as u64).min(total) as usize;
            write_timeout(conn, &rbuf[..have], upstream_timeout)
                .await
                .map_err(upstream_failed)?;
            rbuf.drain(..have);
            let mut left = total - have as u64;
            let mut buf = vec![0u8; BUF.min(left as usize)];
            while left > 0 {
                let want = (left as usize).min(buf.len());
                let n = match read_timeout(client, &mut buf[..want], client_timeout).await {
                    Ok(0) | Err(_) => return Err(Failure::Drop),
                    Ok(n) => n,
                };
                write_timeout(conn, &buf[..n], upstream_timeout)
                    .await
                    .map_err(upstream_failed)?;
                left -= n as u64;
            }
            Ok(())
        }
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::with_bounds(max_body, max_framing);
            let step = |decoder: &mut ChunkedDecoder, bytes: &[u8]| {
                decoder
                    .skip(bytes)
                    .map_err(|e: ProtocolError| Failure::Answer(e.status()))
            };
            let d = step(&mut decoder, rbuf)?;
            write_timeout(conn, &rbuf[..d.consumed], upstream_timeout)
                .await
                .map_err(upstream_failed)?;
            rbuf.drain(..d.consumed);
            if d.done {
                return Ok(());
            }
            let mut buf = vec![0u8; BUF];
            loop {
                let n = match read_timeout(client, &mut buf, client_timeout).await {
                    Ok(0) | Err(_) => return Err(Failure::Drop),
                    Ok(n) => n,
                };
                let d = step(&mut decoder, &buf[..n])?;
                write_timeout(conn, &buf[..d.consumed], upstream_timeout)
                    .await
                    .map_err(upstream_failed)?;
                if d.done {
                    // A pipelined request after the body stays for the connection's loop.
                    rbuf.extend_from_slice(&buf[d.consumed..n]);
                    return Ok(());
                }
            }
        }
    }
}

/// Reads the app's response head into `ubuf` (skipping interim 1xx answers other than 101);
/// returns the head's length.
async fn read_head(
    conn: &mut Conn,
    ubuf: &mut Vec<u8>,
    timeout: Duration,
) -> Result<usize, HeadError> {
    let mut received_any = false;
    loop {
        // Only the end of the head is looked for here; the caller parses it once.
        if let Some(len) = head_end(ubuf) {
            let interim = ubuf.starts_with(b"HTTP/1.")
                && ubuf.get(9) == Some(&b'1')
                && ubuf.get(9..12) != Some(b"101");
            if interim {
                ubuf.drain(..len);
                continue;
            }
            return Ok(len);
        }
        if ubuf.len() >= MAX_RESPONSE_HEAD {
            return Err(HeadError::Garbage);
        }
        if ubuf.capacity() - ubuf.len() < 4096 {
            ubuf.reserve(8 << 10);
        }
        let read = tokio::time::timeout(timeout, conn.read_buf(ubuf)).await;
        match read {
            Err(_) => return Err(HeadError::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) if !received_any => return Err(HeadError::ClosedEarly),
            Ok(Ok(0)) | Ok(Err(_)) => return Err(HeadError::Garbage),
            Ok(Ok(_)) => received_any = true,
        }
    }
}

/// The length of a response head at the start of `buf` (through its empty line, CRLF or a
/// bare LF), when the whole head is there.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let at = from + i;
        match buf.get(at + 1) {
            Some(b'\n') => return Some(at + 2),
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => return Some(at + 3),
            _ => from = at + 1,
        }
    }
    None
}

/// How the app's response is framed (RFC 9112 §6.3); `None` when it cannot be told.
fn body_kind(status: u16, head_only: bool, fields: &[httparse::Header<'_>]) -> Option<BodyKind> {
    if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
        return Some(BodyKind::None);
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for f in fields {
        if f.name.eq_ignore_ascii_case("transfer-encoding") {
            let v = std::str::from_utf8(f.value).ok()?;
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
            if !chunked {
                return Some(BodyKind::UntilClose);
            }
        } else if f.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = std::str::from_utf8(f.value).ok()?.trim().parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    Some(match (chunked, length) {
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    })
}

/// Relays the response body to the client. `Ok(clean)`: whether the app connection ended
/// exactly at the body's end (and may be reused).
async fn relay_body(
    conn: &mut Conn,
    client: &mut TcpStream,
    mut ubuf: Vec<u8>,
    kind: BodyKind,
    (rechunk, dechunk): (bool, bool),
    upstream_timeout: Duration,
    client_timeout: Duration,
) -> Result<bool, ()> {
    // The transfer buffer, only for a body that did not come with the head.
    let mut buf = Vec::new();
    match kind {
        BodyKind::None => Ok(ubuf.is_empty()),
        BodyKind::Length(total) => {
            let have = (ubuf.len() as u64).min(total) as usize;
            let extra = ubuf.len() > have;
            if have > 0 {
                write_timeout(client, &ubuf[..have], client_timeout)
                    .await
                    .map_err(|_| ())?;
            }
            let mut left = total - have as u64;
            if left > 0 {
                buf.resize(BUF, 0);
            }
            while left > 0 {
                let want = (left as usize).min(BUF);
                let n = match read_timeout(conn, &mut buf[..want], upstream_timeout).await {
                    Ok(0) | Err(_) => return Err(()),
                    Ok(n) => n,
                };
                write_timeout(client, &buf[..n], client_timeout)
                    .await
                    .map_err(|_| ())?;
                left -= n as u64;
            }
            Ok(!extra)
        }
        BodyKind::Chunked => {
            // Responses are not bounded by the client's request limits.
            let mut decoder = ChunkedDecoder::with_bounds(u64::MAX, 64 << 10);
            let mut pending = std::mem::take(&mut ubuf);
            buf.resize(BUF, 0);
            loop {
                let d = if dechunk {
                    let d = decoder.decode(&mut pending).map_err(|_| ())?;
                    write_timeout(client, &pending[..d.produced], client_timeout)
                        .await
                        .map_err(|_| ())?;
                    d
                } else {
                    let d = decoder.skip(&pending).map_err(|_| ())?;
                    write_timeout(client, &pending[..d.consumed], client_timeout)
                        .await
                        .map_err(|_| ())?;
                    d
                };
                if d.done {
                    return Ok(d.consumed == pending.len());
                }
                pending.clear();
                let n = match read_timeout(conn, &mut buf, upstream_timeout).await {
                    Ok(0) | Err(_) => return Err(()),
                    Ok(n) => n,
                };
                pending.extend_from_slice(&buf[..n]);
            }
        }
        BodyKind::UntilClose => {
            let mut pending = ubuf;
            buf.resize(BUF, 0);
            loop {
                if !pending.is_empty() {
                    if rechunk {
                        let size = format!("{:x}\r\n", pending.len());
                        write_timeout(client, size.as_bytes(), client_timeout)
                            .await
                            .map_err(|_| ())?;
                        pending.extend_from_slice(b"\r\n");
                    }
                    write_timeout(client, &pending, client_timeout)
                        .await
                        .map_err(|_| ())?;
                }
                pending.clear();
                match read_timeout(conn, &mut buf, upstream_timeout).await {
                    Ok(0) => break,
                    Err(_) => return Err(()),
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                }
            }
            if rechunk {
                write_timeout(client, b"0\r\n\r\n", client_timeout)
                    .await
                    .map_err(|_| ())?;
            }
            Ok(false)
        }
    }
}

/// After `101 Switching Protocols`: bytes both ways until either side closes.
async fn tunnel(client: &mut TcpStream, rbuf: &mut Vec<u8>, mut conn: Conn, ubuf: Vec<u8>) {
    if !rbuf.is_empty() && conn.write_all(rbuf).await.is_err() {
        return;
    }
    rbuf.clear();
    if !ubuf.is_empty() && client.write_all(&ubuf).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(client, &mut conn).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    fn forwarded(raw: &[u8], peer: Option<&str>) -> String {
        let limits = crate::http::HeadLimits {
            max_request_line: 8192,
            max_header_size: 16384,
            max_headers: 100,
            max_body_size: 1 << 20,
        };
        let mut headers: [MaybeUninit<httparse::Header<'_>>; crate::http::MAX_HEADERS] =
            [const { MaybeUninit::uninit() }; crate::http::MAX_HEADERS];
        let head = crate::http::parse_head(raw, &limits, &mut headers).expect("parses");
        let crate::http::Head::Complete {
            request,
            framing,
            keep_alive,
            expect_continue,
            ..
        } = head
        else {
            panic!("complete head")
        };
        let f = ForwardRequest::new(&request, framing, keep_alive, expect_continue, peer, "http");
        String::from_utf8(f.head).expect("text")
    }

    #[test]
    fn hop_by_hop_fields_are_dropped_and_forwarded_ones_set() {
        let head = forwarded(
            b"GET /a?b=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n",
            Some("192.0.2.7"),
        );
        assert!(
            head.starts_with("GET /a?b=1 HTTP/1.1\r\nHost: shop.example\r\n"),
            "{head}"
        );
        for gone in ["X-Secret", "Keep-Alive", "TE:", "https"] {
            assert!(!head.contains(gone), "{gone} in {head}");
        }
        assert!(head.contains("Accept: */*\r\n"));
        assert!(
            head.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
            "{head}"
        );
        assert!(head.contains("X-Forwarded-Proto: http\r\n"));
        assert!(head.contains("X-Forwarded-Host: shop.example\r\n"));
        assert!(head.ends_with("Connection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn bodies_are_reframed_and_upgrades_kept() {
        let head = forwarded(
            b"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
            None,
        );
        assert!(head.contains("Transfer-Encoding: chunked\r\n"));
        assert!(!head.contains("Expect"));
        let head = forwarded(
            b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n",
            None,
        );
        assert!(
            head.contains("Upgrade: websocket\r\nConnection: upgrade\r\n\r\n"),
            "{head}"
        );
        assert!(head.contains("Sec-WebSocket-Key: x\r\n"));
    }

    #[test]
    fn response_framing_follows_rfc_9112() {
        let f = |name: &'static str, value: &'static [u8]| httparse::Header { name, value };
        assert_eq!(
            body_kind(200, true, &[f("Content-Length", b"5")]),
            Some(BodyKind::None)
        );
        assert_eq!(body_kind(304, false, &[]), Some(BodyKind::None));
        assert_eq!(
            body_kind(200, false, &[f("Content-Length", b"5")]),
            Some(BodyKind::Length(5))
        );
        assert_eq!(
            body_kind(
                200,
                false,
                &[
                    f("Transfer-Encoding", b"gzip, chunked"),
                    f("Content-Length", b"5")
                ]
            ),
            Some(BodyKind::Chunked)
        );
        assert_eq!(body_kind(200, false, &[]), Some(BodyKind::UntilClose));
        assert_eq!(
            body_kind(
                200,
                false,
                &[f("Content-Length", b"5"), f("Content-Length", b"6")]
            ),
            None
        );
        assert_eq!(body_kind(200, false, &[f("Content-Length", b"x")]), None);
    }
}
