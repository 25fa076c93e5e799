//! HTTP/2 over TLS (ALPN `h2`), and on cleartext with prior knowledge (h2c: a connection
//! that opens with the HTTP/2 preface), with the `h2` crate: framing, flow control, HPACK and the
//! protocol's attack limits are its; each stream is answered by the same service as an
//! HTTP/1.1 request — espalier's own handlers write their answer as they always do, and a
//! proxied application gets an HTTP/1.1 request through the same forwarder.
//!
//! Owns: the translation both ways — a stream's head and body into a [`Request`], an
//! HTTP/1.1 answer into a stream's head and data, flow control respected — and the
//! connection's limits. Must not touch: routing or content (the [`Service`] decides), or
//! HTTP/1.1 framing (the connection loop in [`super::conn`]).
//!
//! Limits against the known HTTP/2 attacks: at most [`MAX_STREAMS`] concurrent streams; a
//! header list bounded by `max_header_size` (HPACK bombs and CONTINUATION floods end there,
//! the crate enforcing it while decoding); streams reset by the client before being answered
//! are bounded (rapid reset, CVE-2023-44487: past the bound the connection gets GOAWAY
//! `ENHANCE_YOUR_CALM`), as are the streams this side resets; windows and send buffers are
//! bounded per stream and per connection; a body beyond `max_body_size` is refused with 413.

use super::access_log::{Entry, Facts, OwnedFacts};
use super::conn::{ConnEnv, FileBody, Reply, Service};
use super::{Framing, Method, Request, Responder, MAX_HEADERS};
use crate::handoff::Carried;
use crate::proxy::{ProxyTarget, Report};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// Concurrent streams a client may open on one connection (nginx's default is 128).
pub const MAX_STREAMS: u32 = 128;
/// Streams the client may reset before they are answered, pending at once (rapid reset).
const MAX_PENDING_RESETS: usize = 32;
/// Streams this side may reset over a connection's life for the client's errors.
const MAX_LOCAL_RESETS: usize = 1024;
/// Flow-control windows: per stream and per connection.
const STREAM_WINDOW: u32 = 256 << 10;
const CONNECTION_WINDOW: u32 = 1 << 20;
/// What one stream may have queued to send beyond the client's window.
const SEND_BUFFER: usize = 256 << 10;
/// Pieces of a file or an application's answer.
const PIECE: usize = 64 << 10;

/// Serves an HTTP/2 connection (TLS with ALPN `h2`) until it closes or the worker drains.
pub async fn serve<S: Service + 'static, T: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: T,
    group: usize,
    env: Rc<ConnEnv<S>>,
    carried: Carried,
    https: bool,
) {
    let client: Rc<str> = Rc::from(super::conn::ip_text(carried.client).as_str());
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(env.limits.max_header_size.min(u32::MAX as usize) as u32)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS));
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(env.timeouts.header, builder.handshake::<T, Bytes>(io)).await
    else {
        return;
    };
    let open = Rc::new(std::cell::Cell::new(0usize));
    let mut draining = false;
    loop {
        // An idle connection (no stream open) is closed after the keep-alive timeout.
        let idle = open.get() == 0;
        let next = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified(), if !draining => {
                draining = true;
                conn.graceful_shutdown();
                continue;
            }
            _ = tokio::time::sleep(env.timeouts.keepalive), if idle && !draining => {
                draining = true;
                conn.graceful_shutdown();
                continue;
            }
            next = conn.accept() => next,
        };
        match next {
            Some(Ok((req, respond))) => {
                if env.shutdown.started.get() && !draining {
                    draining = true;
                    conn.graceful_shutdown();
                }
                let stream = Stream {
                    env: Rc::clone(&env),
                    group,
                    peer: carried.client,
                    https,
                    client: Rc::clone(&client),
                    _open: Open::take(&open),
                };
                tokio::task::spawn_local(stream.answer(req, respond));
            }
            Some(Err(_)) | None => return,
        }
    }
}

/// A connection's count of open streams, given back however a stream's task ends.
struct Open(Rc<std::cell::Cell<usize>>);

impl Open {
    fn take(open: &Rc<std::cell::Cell<usize>>) -> Open {
        open.set(open.get() + 1);
        Open(Rc::clone(open))
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// One stream being answered.
struct Stream<S> {
    env: Rc<ConnEnv<S>>,
    group: usize,
    /// The client, and its address as text (formatted once per connection).
    peer: Option<std::net::SocketAddr>,
    /// Over TLS (h2), or cleartext with prior knowledge (h2c).
    https: bool,
    client: Rc<str>,
    _open: Open,
}

/// Header fields HTTP/2 forbids (RFC 9113 §8.2.2): dropped from HTTP/1.1 answers.
fn connection_specific(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

impl<S: Service + 'static> Stream<S> {
    async fn answer(self, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        let arrived = Instant::now();
        let (parts, mut recv) = req.into_parts();
        let env = &self.env;
        // The body first (bounded): handlers and the forwarder take a whole request.
        let mut body = Vec::new();
        while let Some(chunk) = tokio::time::timeout(env.timeouts.body, recv.data())
            .await
            .ok()
            .flatten()
        {
            let Ok(chunk) = chunk else { return };
            let _ = recv.flow_control().release_capacity(chunk.len());
            if (body.len() + chunk.len()) as u64 > env.limits.max_body_size {
                let _ = send_error(&mut respond, env, 413).await;
                return;
            }
            body.extend_from_slice(&chunk);
        }
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut headers: Vec<httparse::Header<'_>> = Vec::with_capacity(parts.headers.len() + 1);
        // `:authority` stands for Host (RFC 9113 §8.3.1), unless both came.
        if !parts.headers.contains_key(http::header::HOST) {
            if let Some(a) = parts.uri.authority() {
                headers.push(httparse::Header {
                    name: "host",
                    value: a.as_str().as_bytes(),
                });
            }
        }
        for (name, value) in &parts.headers {
            headers.push(httparse::Header {
                name: name.as_str(),
                value: value.as_bytes(),
            });
        }
        if headers.len() > MAX_HEADERS.min(env.limits.max_headers) || !path.starts_with('/') {
            let _ = send_error(&mut respond, env, 400).await;
            return;
        }
        let method_text = parts.method.as_str();
        let request = Request {
            method: Method::from_bytes(method_text),
            method_text,
            path,
            query,
            minor_version: 1,
            headers: &headers,
            body: &body,
            client: &self.client,
        };
        let head_only = request.method == Method::Head;
        if let Some(target) = env.service.proxy_route(self.group, &request) {
            let facts = (env.service.logging() && env.service.wants_log())
                .then(|| OwnedFacts::of(&request));
            let report = Report::default();
            self.forward(&request, target, &report, respond, head_only)
                .await;
            if let Some(facts) = facts {
                let mut req = facts.facts();
                req.minor_version = super::access_log::HTTP2;
                env.service.log(&Entry {
                    req,
                    status: report.status.get(),
                    bytes: report.bytes.get(),
                    micros: arrived.elapsed().as_micros() as u64,
                    upstream_micros: report.upstream_micros.get(),
                    peer: &self.client,
                });
            }
            return;
        }
        let mut out = Vec::with_capacity(1024);
        let reply = {
            let common = env.clock.common();
            let mut resp = Responder::new(&mut out, &common, true, 1, head_only);
            env.service.call(self.group, &request, &mut resp)
        };
        let file = match reply {
            Reply::File(f) => Some(f),
            Reply::Done => None,
        };
        let status = out
            .get(9..12)
            .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok());
        if env.service.logging() && env.service.wants_log() {
            let mut req = Facts::of(&request);
            req.minor_version = super::access_log::HTTP2;
            env.service.log(&Entry {
                req,
                status: status.unwrap_or(0),
                bytes: out.len() as u64 + file.as_ref().map_or(0, |f| f.len),
                micros: arrived.elapsed().as_micros() as u64,
                upstream_micros: None,
                peer: &self.client,
            });
        }
        let _ = send_answer(&mut respond, &out, file, head_only).await;
    }

    /// A request of a proxied application: forwarded as HTTP/1.1 by the forwarder, whose
    /// answer is read back and sent on the stream.
    async fn forward(
        &self,
        request: &Request<'_>,
        target: ProxyTarget,
        report: &Report,
        mut respond: SendResponse<Bytes>,
        head_only: bool,
    ) {
        let env = &self.env;
        let (mut ours, mut theirs) = tokio::io::duplex(PIECE);
        let mut rbuf = request.body.to_vec();
        let framing = Framing::Length(rbuf.len() as u64);
        let added_fields = env.service.hsts_line(self.group);
        let forwarding = async move {
            let client = crate::proxy::Client {
                stream: &mut ours,
                rbuf: &mut rbuf,
                clock: &env.clock,
                max_body: env.limits.max_body_size,
                max_framing: env.limits.max_header_size,
                body_timeout: env.timeouts.body,
                report,
                added_fields: added_fields.as_deref().unwrap_or_default(),
            };
            match target {
                ProxyTarget::Http(route) => {
                    let fwd = crate::proxy::ForwardRequest::new(
                        request,
                        framing,
                        false,
                        false,
                        Some(&*self.client).filter(|c| !c.is_empty()),
                        if self.https { "https" } else { "http" },
                    );
                    crate::proxy::forward(client, fwd, &route).await;
                }
                ProxyTarget::FastCgi(route, root, path) => {
                    let fwd = crate::proxy::FastCgiRequest::new(
                        request,
                        &path,
                        &root,
                        framing,
                        false,
                        false,
                        &crate::proxy::Addresses {
                            peer: self.peer,
                            local: None,
                            https: self.https,
                        },
                    );
                    crate::proxy::fastcgi::forward(client, fwd, &route).await;
                }
            }
            // Closing our end ends an answer framed by the close.
            drop(ours);
        };
        let relaying = relay(&mut theirs, &mut respond, head_only, env.timeouts.body);
        let ((), _) = tokio::join!(Box::pin(forwarding), relaying);
    }
}

/// Reads the forwarder's HTTP/1.1 answer from `from` and sends it on the stream: interim
/// (1xx) heads skipped, the framing (length, chunked or close) undone.
async fn relay<R: AsyncRead + Unpin>(
    from: &mut R,
    respond: &mut SendResponse<Bytes>,
    head_only: bool,
    timeout: Duration,
) -> Option<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(PIECE);
    let (status, fields, head_len) = loop {
        let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut hs);
        match r.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = r.code?;
                if (100..200).contains(&status) {
                    buf.drain(..len);
                    continue;
                }
                let fields: Vec<(String, Vec<u8>)> = r
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), h.value.to_vec()))
                    .collect();
                break (status, fields, len);
            }
            Ok(httparse::Status::Partial) if buf.len() < (256 << 10) => {}
            _ => return None,
        }
        let n = read_some(from, &mut buf, timeout).await?;
        if n == 0 {
            return None;
        }
    };
    buf.drain(..head_len);
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut response = http::Response::builder().status(status);
    for (name, value) in &fields {
        if name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(value).ok()?.trim().parse().ok();
        }
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
        if !connection_specific(name) {
            response = response.header(name.as_str(), value.as_slice());
        }
    }
    let no_body = head_only || status == 204 || status == 304 || length == Some(0);
    let mut send = respond
        .send_response(response.body(()).ok()?, no_body)
        .ok()?;
    if no_body {
        return Some(());
    }
    let mut decoder = chunked.then(|| super::ChunkedDecoder::with_bounds(u64::MAX, 64 << 10));
    let mut left = length.filter(|_| !chunked);
    loop {
        if buf.is_empty() && read_some(from, &mut buf, timeout).await? == 0 {
            // The close ends a body framed by it; a shorter one is cut.
            if left.is_some_and(|l| l > 0) || decoder.is_some() {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return None;
            }
            send_data(&mut send, Bytes::new(), true).await?;
            return Some(());
        }
        let (data, done) = match &mut decoder {
            Some(d) => {
                let got = d.decode(&mut buf).ok()?;
                let data = Bytes::copy_from_slice(&buf[..got.produced]);
                buf.drain(..got.consumed);
                (data, got.done)
            }
            None => {
                let take = left.map_or(buf.len(), |l| (l as usize).min(buf.len()));
                let data = Bytes::copy_from_slice(&buf[..take]);
                buf.drain(..take);
                if let Some(l) = &mut left {
                    *l -= take as u64;
                }
                (data, left == Some(0))
            }
        };
        send_data(&mut send, data, done).await?;
        if done {
            return Some(());
        }
    }
}

/// Reads what is there (up to a piece) onto `buf`; `None` on an error or a timeout.
async fn read_some<R: AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut Vec<u8>,
    timeout: Duration,
) -> Option<usize> {
    buf.reserve(PIECE);
    match tokio::time::timeout(timeout, from.read_buf(buf)).await {
        Ok(Ok(n)) => Some(n),
        _ => None,
    }
}

/// Sends `data` within the client's windows (waiting for capacity), `end` closing the stream.
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes, end: bool) -> Option<()> {
    if data.is_empty() {
        return send.send_data(data, end).ok();
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len().min(SEND_BUFFER));
        let capacity = std::future::poll_fn(|cx| send.poll_capacity(cx))
            .await?
            .ok()?;
        if capacity == 0 {
            continue;
        }
        let piece = data.split_to(capacity.min(data.len()));
        send.send_data(piece, end && data.is_empty()).ok()?;
    }
    Some(())
}

/// Sends an answer espalier's handlers wrote as HTTP/1.1 (`out`), with its file if any.
async fn send_answer(
    respond: &mut SendResponse<Bytes>,
    out: &[u8],
    file: Option<FileBody>,
    head_only: bool,
) -> Option<()> {
    let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut hs);
    let httparse::Status::Complete(head_len) = r.parse(out).ok()? else {
        return None;
    };
    let mut response = http::Response::builder().status(r.code?);
    for h in r.headers.iter().filter(|h| !connection_specific(h.name)) {
        response = response.header(h.name, h.value);
    }
    let body = &out[head_len..];
    let file = file.filter(|_| !head_only);
    let end = head_only || (body.is_empty() && file.is_none());
    let mut send = respond.send_response(response.body(()).ok()?, end).ok()?;
    if end {
        return Some(());
    }
    send_data(&mut send, Bytes::copy_from_slice(body), file.is_none()).await?;
    if let Some(f) = file {
        use std::os::unix::fs::FileExt;
        let mut offset = f.offset;
        let stop = f.offset + f.len;
        while offset < stop {
            let want = ((stop - offset) as usize).min(PIECE);
            let mut piece = vec![0u8; want];
            let n = f.file.read_at(&mut piece, offset).ok()?;
            if n == 0 {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return None;
            }
            piece.truncate(n);
            offset += n as u64;
            send_data(&mut send, Bytes::from(piece), offset >= stop).await?;
        }
    }
    Some(())
}

/// espalier's own error answer on a stream, written and sent as its handlers' are.
async fn send_error<S>(
    respond: &mut SendResponse<Bytes>,
    env: &ConnEnv<S>,
    status: u16,
) -> Option<()> {
    let mut out = Vec::with_capacity(256);
    {
        let common = env.clock.common();
        Responder::new(&mut out, &common, true, 1, false).error(status);
    }
    send_answer(respond, &out, None, false).await
}
