//! Forwarding one request to an app process and its response back, streamed both ways.
//!
//! Owns: sending a request ([`super::request`] rewrote its head; [`super::route`] chose the
//! process) and its body as it arrives, reading the response head and writing the client's
//! (the site's field edits, error pages and compression applied), and choosing the error
//! answers: `502` when the app is down or answers garbage, `503` when no process is ready,
//! `504` when it does not answer in `response_timeout`. The body then goes by
//! [`super::relay`] (or [`super::encode`], compressed). Must not touch: the client
//! connection's loop (it hands the request here and takes the connection back when the
//! answer says it may go on).
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

use super::encode;
use super::relay::{relay_body, tunnel, BUF};
use super::request::{connection_tokens, dropped_on_the_way, push_field, ForwardRequest};
use super::route::ProxyRoute;
use super::upstream::Conn;
use super::wire::{
    kept_fields, read_timeout, send_continue, to_client, write_timeout, BodyKind, OwnAnswers,
};
use super::Endpoint;
pub(super) use crate::http::service::{LentConnection, Outcome};
use crate::http::{ChunkedDecoder, Framing, ProtocolError};
use std::borrow::Cow;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// Largest response head accepted from an app.
const MAX_RESPONSE_HEAD: usize = 64 << 10;

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

/// Forwards the request to an app process and relays its answer to the client.
pub async fn forward<C: AsyncRead + AsyncWrite + Unpin>(
    client: LentConnection<'_, C>,
    req: ForwardRequest,
    route: &ProxyRoute,
) -> Outcome {
    let LentConnection {
        stream,
        rbuf,
        clock,
        max_body,
        max_framing,
        body_timeout,
        report,
        fields: edits,
        pages,
    } = client;
    let settings = route.settings();
    let own = OwnAnswers {
        report,
        clock,
        client_minor: req.client_minor,
        head_only: req.head_only,
        fields: edits,
        pages,
    };
    if !send_continue(stream, req.expect_continue, body_timeout).await {
        return Outcome::Close;
    }
    let mut avoid: Option<Endpoint> = None;
    let mut tries = 0;
    let (endpoint, mut conn, mut ubuf, head_len, _slot) = loop {
        tries += 1;
        // The slot (under max_requests_per_process) is held until the answer is done.
        let (endpoint, mut conn, slot) = match route.connection(avoid.take()).await {
            Ok(c) => c,
            Err(status) => {
                if status != 503 {
                    route.log_failure(None, status, "could not be connected to");
                }
                return own.unavailable(stream, status).await;
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
            route.log_failure(Some(&endpoint), 502, "did not take the request's head");
            return own.answer(stream, 502).await;
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
                if status == 502 {
                    route.log_failure(Some(&endpoint), 502, "did not take the request's body");
                }
                return own.answer(stream, status).await;
            }
            Err(Failure::Drop) => return Outcome::Close,
        }
        let mut ubuf = Vec::with_capacity(8 << 10);
        let asked = std::time::Instant::now();
        match read_head(&mut conn, &mut ubuf, clock, settings.response_timeout).await {
            Ok(len) => {
                report
                    .upstream_micros
                    .set(Some(asked.elapsed().as_micros() as u64));
                route.answered(&endpoint);
                break (endpoint, conn, ubuf, len, slot);
            }
            Err(HeadError::ClosedEarly) if req.retryable && tries < 2 => {
                avoid = Some(endpoint);
                continue;
            }
            Err(HeadError::Timeout) => {
                route.timed_out(&endpoint);
                let cause = format!(
                    "did not answer within response_timeout ({:?})",
                    settings.response_timeout
                );
                route.log_failure(Some(&endpoint), 504, &cause);
                return own.answer(stream, 504).await;
            }
            Err(HeadError::ClosedEarly) => {
                route.log_failure(
                    Some(&endpoint),
                    502,
                    "closed the connection without answering",
                );
                return own.answer(stream, 502).await;
            }
            Err(HeadError::Garbage) => {
                let cause = "answered a malformed, cut-off or over-64-KiB HTTP/1.x response head";
                route.log_failure(Some(&endpoint), 502, cause);
                return own.answer(stream, 502).await;
            }
        }
    };
    // The response head, parsed again for its fields (the buffer is ours now).
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut fields);
    if !matches!(
        resp.parse(&ubuf[..head_len]),
        Ok(httparse::Status::Complete(_))
    ) {
        route.log_failure(
            Some(&endpoint),
            502,
            "answered a response head that does not parse",
        );
        return own.answer(stream, 502).await;
    }
    let status = resp.code.unwrap_or(502);
    let reason = resp.reason.unwrap_or("");
    let upstream_minor = resp.version.unwrap_or(0);
    let listed = connection_tokens(resp.headers.iter().map(|h| (h.name, h.value)));
    let upstream_closes =
        listed.iter().any(|t| t.eq_ignore_ascii_case("close")) || upstream_minor == 0;
    let kind = match body_kind(status, req.head_only, resp.headers) {
        Some(k) => k,
        None => {
            let cause = "answered with a framing that cannot be relayed (Content-Length and Transfer-Encoding disagree or are malformed)";
            route.log_failure(Some(&endpoint), 502, cause);
            return own.answer(stream, 502).await;
        }
    };
    report.status.set(status);
    let switching = status == 101 && req.upgrade;
    if status == 101 && !req.upgrade {
        route.log_failure(
            Some(&endpoint),
            502,
            "switched protocols (101) on a request that asked for no upgrade",
        );
        return own.answer(stream, 502).await;
    }
    // The site's page instead of the app's error body (which is left unread: the app's
    // connection is dropped, not pooled).
    if own.replaces(status) {
        let kept = kept_fields(resp.headers.iter().map(|h| (h.name, h.value)));
        return own.replace(stream, status, &kept).await;
    }
    let plan = encode::plan(
        req.compress,
        status,
        req.head_only,
        resp.headers.iter().map(|h| (h.name, h.value)),
    );
    // The encoder is made with the plan, not after the head is sent: it is what counts
    // toward the thread's bound on answers being compressed (see `encode::MAX_COMPRESSING`).
    let compressing = match plan {
        encode::Plan::Compress(c) if kind != BodyKind::None => {
            match crate::compress::Stream::new(c) {
                Ok(encoder) => Some(encoder),
                Err(_) => return own.answer(stream, 500).await,
            }
        }
        _ => None,
    };
    // To the client: HTTP/1.1 chunked when the length is unknown (or compressed), else
    // close-delimited for an HTTP/1.0 client.
    let rechunk = matches!(kind, BodyKind::UntilClose) && req.client_minor == 1;
    let plain_for_old_client = matches!(kind, BodyKind::Chunked) && req.client_minor == 0;
    let keep = req.keep_alive
        && !switching
        && match compressing {
            Some(_) => req.client_minor == 1,
            None => (rechunk || kind != BodyKind::UntilClose) && !plain_for_old_client,
        };
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
                && !edits.is_some_and(|e| e.removes(h.name.as_bytes()))
        };
        // As the app sent it, but what compression changes (no allocation otherwise).
        let value: Option<Cow<'_, [u8]>> = match plan {
            _ if !copy => None,
            encode::Plan::AsIs => Some(Cow::Borrowed(h.value)),
            encode::Plan::Vary if h.name.eq_ignore_ascii_case("vary") => {
                Some(Cow::Owned(encode::with_accept_encoding(h.value)))
            }
            encode::Plan::Vary => Some(Cow::Borrowed(h.value)),
            // A HEAD or 304 answer is never compressed; a compressed body's length is unknown
            // before its end.
            encode::Plan::Compress(_) if h.name.eq_ignore_ascii_case("content-length") => None,
            encode::Plan::Compress(_) => encode::rewritten(h.name, h.value).map(Cow::Owned),
        };
        if let Some(value) = value {
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
    }
    if plan != encode::Plan::AsIs
        && !resp
            .headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("vary"))
    {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    if let (Some(_), encode::Plan::Compress(c)) = (&compressing, plan) {
        push_field(&mut out, "Content-Encoding", c.token());
        if req.client_minor == 1 {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
    }
    if let Some(line) = &route.worker_line {
        out.extend_from_slice(line.as_bytes());
    }
    if let Some(e) = edits {
        e.add_missing(&mut out, |name| {
            !e.removes(name)
                && resp
                    .headers
                    .iter()
                    .any(|h| h.name.as_bytes().eq_ignore_ascii_case(name))
        });
    }
    match kind {
        _ if compressing.is_some() => {}
        BodyKind::Length(n) => {
            push_field(&mut out, "Content-Length", itoa::Buffer::new().format(n))
        }
        BodyKind::Chunked if !plain_for_old_client => {
            // The body passes as the app framed it: its codings too (`gzip, chunked`).
            let codings: Vec<&str> = resp
                .headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
                .filter_map(|h| std::str::from_utf8(h.value).ok())
                .collect();
            push_field(&mut out, "Transfer-Encoding", &codings.join(", "))
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
    report.head.set(out.len() as u64);
    ubuf.drain(..head_len);
    // A small answer read whole goes out with its head in one write; nothing is left to relay.
    let mut kind = kind;
    if let (BodyKind::Length(n), None) = (kind, &compressing) {
        if ubuf.len() as u64 == n {
            out.extend_from_slice(&ubuf);
            ubuf.clear();
            kind = BodyKind::None;
        }
    }
    if to_client(stream, report, &out, body_timeout).await.is_err() {
        return Outcome::Close;
    }
    if switching {
        tunnel(stream, report, rbuf, conn, ubuf).await;
        return Outcome::Close;
    }
    let timeouts = (settings.response_timeout, body_timeout);
    let relayed = match compressing {
        Some(encoder) => {
            let chunked = req.client_minor == 1;
            encode::relay(
                &mut conn, stream, report, ubuf, kind, encoder, chunked, timeouts,
            )
            .await
        }
        None => {
            let framing = (rechunk, plain_for_old_client);
            relay_body(&mut conn, stream, report, ubuf, kind, framing, timeouts).await
        }
    };
    match relayed {
        Ok(clean) => {
            if clean && !upstream_closes && !matches!(kind, BodyKind::UntilClose) {
                route.pool.put(&endpoint, conn);
            }
            // The body was sent whole before the answer was read (`send_body`).
            if keep {
                Outcome::KeepAlive
            } else {
                Outcome::Answered
            }
        }
        Err(()) => Outcome::Close,
    }
}

/// Sends the request body to the app as it arrives from the client: first what the client
/// buffer holds, then through one fixed buffer. Leaves in `rbuf` only what follows the body.
async fn send_body<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
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
        // Decoded and framed again, as nginx does: the client's chunk extensions and
        // trailer fields stay behind (a trailer `Host`, `Content-Length` or
        // `X-Forwarded-For` would otherwise reach the app beside the head's).
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::with_bounds(max_body, max_framing);
            let mut out = Vec::new();
            let d = decoder
                .decode(rbuf)
                .map_err(|e: ProtocolError| Failure::Answer(e.status()))?;
            chunk_again(&mut out, &rbuf[..d.produced], d.done);
            write_timeout(conn, &out, upstream_timeout)
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
                let d = decoder
                    .decode(&mut buf[..n])
                    .map_err(|e: ProtocolError| Failure::Answer(e.status()))?;
                out.clear();
                chunk_again(&mut out, &buf[..d.produced], d.done);
                write_timeout(conn, &out, upstream_timeout)
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

/// `data` as one chunk (none when empty), and the last chunk with no trailers when `done`.
fn chunk_again(out: &mut Vec<u8>, data: &[u8], done: bool) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    if done {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

/// Reads the app's response head into `ubuf` (skipping interim 1xx answers other than 101);
/// returns the head's length. `timeout` bounds the whole wait, interim answers included: an
/// app sending `100 Continue` every few milliseconds does not hold the client past it.
async fn read_head(
    conn: &mut Conn,
    ubuf: &mut Vec<u8>,
    clock: &crate::http::clock::Clock,
    timeout: Duration,
) -> Result<usize, HeadError> {
    // The whole wait, in the thread's clock's list of waits (no timer per request).
    match clock.within(timeout, read_whole_head(conn, ubuf)).await {
        Ok(r) => r,
        Err(()) => Err(HeadError::Timeout),
    }
}

async fn read_whole_head(conn: &mut Conn, ubuf: &mut Vec<u8>) -> Result<usize, HeadError> {
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
        match conn.read_buf(ubuf).await {
            Ok(0) | Err(_) if !received_any => return Err(HeadError::ClosedEarly),
            Ok(0) | Err(_) => return Err(HeadError::Garbage),
            Ok(_) => received_any = true,
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
    let mut encodings = 0;
    for f in fields {
        if f.name.eq_ignore_ascii_case("transfer-encoding") {
            // Two lines are refused (502), as the request parser refuses them: read one way
            // here and another by the next hop, they would frame the body differently.
            encodings += 1;
            if encodings > 1 {
                return None;
            }
            let v = std::str::from_utf8(f.value).ok()?;
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if f.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = std::str::from_utf8(f.value).ok()?.trim().parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    Some(match (chunked, length) {
        // An encoding that does not end in chunked: the body runs to the close.
        _ if encodings == 1 && !chunked => BodyKind::UntilClose,
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // An encoding that does not end in chunked runs to the close; two lines are refused
        // (once read as close-delimited, whichever came first).
        assert_eq!(
            body_kind(200, false, &[f("Transfer-Encoding", b"gzip")]),
            Some(BodyKind::UntilClose)
        );
        for pair in [[&b"gzip"[..], b"chunked"], [b"chunked", b"chunked"]] {
            let two = [
                f("Transfer-Encoding", pair[0]),
                f("Transfer-Encoding", pair[1]),
            ];
            assert_eq!(body_kind(200, false, &two), None, "{pair:?}");
        }
    }

    #[test]
    fn a_chunked_request_body_is_framed_again_without_its_trailers() {
        let mut decoder = ChunkedDecoder::with_bounds(1 << 20, 4096);
        let mut body =
            b"5;ext=1\r\nhello\r\n0\r\nHost: evil\r\nX-Forwarded-For: 1.2.3.4\r\n\r\nGET".to_vec();
        let d = decoder.decode(&mut body).unwrap();
        assert!(d.done);
        let mut out = Vec::new();
        chunk_again(&mut out, &body[..d.produced], d.done);
        assert_eq!(out, b"5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(&body[d.consumed..], b"GET");
    }
}
