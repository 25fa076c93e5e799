//! Answers onto HTTP/2 streams: an HTTP/1.1 answer — written by espalier's handlers, or an
//! application's read back from the forwarder — translated into the stream's response (its
//! field values sharing one buffer) and data, the client's flow-control windows respected.
//!
//! Owns: that translation and the sending. Must not touch: which answer a request gets (the
//! service decides) or the connection's streams (see the parent module).

use crate::http::service::{ConnEnv, FileBody};
use crate::http::{Responder, MAX_HEADERS};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// What one stream may have queued to send beyond the client's window.
pub(super) const SEND_BUFFER: usize = 256 << 10;
/// Pieces of a file or an application's answer.
const PIECE: usize = 64 << 10;

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

/// An HTTP/1.1 answer's head (`head`, through its empty line) as an HTTP/2 response, its
/// field values sharing `head`'s bytes (no copy per field): the status, the fields but
/// those HTTP/2 forbids, and the framing the body had (`Content-Length`, chunked).
pub(super) struct Translated {
    pub(super) response: http::Response<()>,
    length: Option<u64>,
    chunked: bool,
}

pub(super) fn translate(head: &Bytes) -> Option<Translated> {
    let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut hs);
    let httparse::Status::Complete(_) = r.parse(head).ok()? else {
        return None;
    };
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(r.code?).ok()?;
    let fields = response.headers_mut();
    fields.reserve(r.headers.len());
    let (mut length, mut chunked) = (None, false);
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value).ok()?.trim().parse().ok();
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
        if connection_specific(h.name) {
            continue;
        }
        let name = http::HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = http::HeaderValue::from_maybe_shared(head.slice_ref(h.value)).ok()?;
        fields.append(name, value);
    }
    Some(Translated {
        response,
        length,
        chunked,
    })
}

/// `100 Continue`, as an informational response.
pub(super) fn continue_response() -> http::Response<()> {
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::CONTINUE;
    response
}

/// Reads the forwarder's HTTP/1.1 answer from `from` and sends it on the stream: interim
/// (1xx) heads skipped but 100 Continue, sent on as an informational response, the
/// framing (length, chunked or close) undone.
pub(super) async fn relay<R: AsyncRead + Unpin>(
    from: &mut R,
    respond: &mut SendResponse<Bytes>,
    head_only: bool,
    timeout: Duration,
) -> Option<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(PIECE);
    let head_len = loop {
        match head_end(&buf) {
            Some((len, status)) if (100..200).contains(&status) => {
                // The forwarder's 100 Continue to a client that waits for it; the others
                // (an app's interim answers are the forwarder's to drop) are skipped.
                if status == 100 {
                    let _ = respond.send_informational(continue_response());
                }
                buf.drain(..len);
                continue;
            }
            Some((len, _)) => break len,
            None if buf.len() < (256 << 10) => {}
            None => return None,
        }
        let n = read_some(from, &mut buf, timeout).await?;
        if n == 0 {
            return None;
        }
    };
    let head = Bytes::copy_from_slice(&buf[..head_len]);
    buf.drain(..head_len);
    let Translated {
        response,
        length,
        chunked,
    } = translate(&head)?;
    let status = response.status().as_u16();
    let no_body = head_only || status == 204 || status == 304 || length == Some(0);
    let mut send = respond.send_response(response, no_body).ok()?;
    if no_body {
        return Some(());
    }
    let mut decoder = chunked.then(|| crate::http::ChunkedDecoder::with_bounds(u64::MAX, 64 << 10));
    let mut left = length.filter(|_| !chunked);
    loop {
        // Nothing more is read from the app than the client's window takes: a client that
        // does not read stops the app's answer in the forwarder's pipe (bounded), and this
        // stream holds no buffer while it waits.
        if buf.is_empty() && read_within_window(from, &mut buf, &mut send, timeout).await? == 0 {
            // The close ends a body framed by it; a shorter one is cut.
            if left.is_some_and(|l| l > 0) || decoder.is_some() {
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return None;
            }
            send_data(&mut send, Bytes::new(), true, timeout).await?;
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
        send_data(&mut send, data, done, timeout).await?;
        if done {
            return Some(());
        }
    }
}

/// A complete response head at the start of `buf`: its length and status; `None` while
/// incomplete. (Malformed heads are found by [`translate`].)
fn head_end(buf: &[u8]) -> Option<(usize, u16)> {
    let mut hs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut hs);
    match r.parse(buf) {
        Ok(httparse::Status::Complete(len)) => Some((len, r.code.unwrap_or(0))),
        Ok(httparse::Status::Partial) => None,
        // Not HTTP: the whole buffer, which `translate` refuses.
        Err(_) => Some((buf.len(), 0)),
    }
}

/// Waits until the client's windows let the stream send at least one byte, up to `want`, and
/// returns how many. A client that opens no window for `timeout` gets the stream reset
/// (CANCEL): one that never reads would otherwise hold the answer, its task and its
/// connection for ever.
async fn window(send: &mut SendStream<Bytes>, want: usize, timeout: Duration) -> Option<usize> {
    send.reserve_capacity(want.min(SEND_BUFFER));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Capacity already assigned and not yet used: `poll_capacity` reports only increases,
        // so it would wait for more than is needed.
        if send.capacity() > 0 {
            return Some(send.capacity());
        }
        let capacity = std::future::poll_fn(|cx| send.poll_capacity(cx));
        match tokio::time::timeout_at(deadline, capacity).await {
            Ok(capacity) => match capacity?.ok()? {
                0 => continue,
                n => return Some(n),
            },
            Err(_) => {
                send.send_reset(h2::Reason::CANCEL);
                return None;
            }
        }
    }
}

/// Reads at most what the client's window takes now from `from` onto the empty `buf`,
/// waiting for the window first (with no buffer held meanwhile); `None` on an error, a
/// timeout or a stream the client reset.
async fn read_within_window<R: AsyncRead + Unpin>(
    from: &mut R,
    buf: &mut Vec<u8>,
    send: &mut SendStream<Bytes>,
    timeout: Duration,
) -> Option<usize> {
    if send.capacity() == 0 {
        *buf = Vec::new();
    }
    let room = window(send, PIECE, timeout).await?;
    buf.resize(room, 0);
    let n = match tokio::time::timeout(timeout, from.read(&mut buf[..])).await {
        Ok(Ok(n)) => n,
        _ => return None,
    };
    buf.truncate(n);
    Some(n)
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
/// A client that opens no window for `timeout` gets the stream reset (CANCEL): one that never
/// reads would otherwise hold the answer, its task and its connection for ever.
pub async fn send_data(
    send: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    timeout: Duration,
) -> Option<()> {
    if data.is_empty() {
        return send.send_data(data, end).ok();
    }
    while !data.is_empty() {
        let capacity = window(send, data.len(), timeout).await?;
        let piece = data.split_to(capacity.min(data.len()));
        send.send_data(piece, end && data.is_empty()).ok()?;
    }
    Some(())
}

/// Queues an answer espalier's handlers wrote as HTTP/1.1 (`out`, head and in-memory body)
/// on the stream, without waiting: the h2 crate holds what the client's windows do not yet
/// take (at most the in-memory body, which is small). With `more` (a file follows), the
/// stream is left open and returned. `None` when the stream is gone or the head is not
/// HTTP.
pub(super) fn send_answer(
    respond: &mut SendResponse<Bytes>,
    out: Bytes,
    more: bool,
    head_only: bool,
) -> Option<Option<SendStream<Bytes>>> {
    let head_len = memchr::memmem::find(&out, b"\r\n\r\n")? + 4;
    let head = out.slice(..head_len);
    let response = translate(&head)?.response;
    let body = if head_only {
        Bytes::new()
    } else {
        out.slice(head_len..)
    };
    let more = more && !head_only;
    let end = body.is_empty() && !more;
    let mut send = respond.send_response(response, end).ok()?;
    if end {
        return Some(None);
    }
    if !body.is_empty() || !more {
        send.send_data(body, !more).ok()?;
    }
    Some(more.then_some(send))
}

/// Sends a file's range in pieces, as the client's windows allow (see [`window`] for
/// `timeout`). A piece is read only once the window takes it: a stream waiting for a client
/// that does not read holds a file position, not bytes.
pub(super) async fn send_file(
    send: &mut SendStream<Bytes>,
    f: FileBody,
    timeout: Duration,
) -> Option<()> {
    use std::os::unix::fs::FileExt;
    let mut offset = f.offset;
    let stop = f.offset + f.len;
    while offset < stop {
        let room = ((stop - offset) as usize).min(PIECE);
        let want = window(send, room, timeout).await?.min(room);
        let mut piece = vec![0u8; want];
        let n = f.file.read_at(&mut piece, offset).ok()?;
        if n == 0 {
            send.send_reset(h2::Reason::INTERNAL_ERROR);
            return None;
        }
        piece.truncate(n);
        offset += n as u64;
        send_data(send, Bytes::from(piece), offset >= stop, timeout).await?;
    }
    if f.len == 0 {
        send_data(send, Bytes::new(), true, timeout).await?;
    }
    Some(())
}

/// espalier's own error answer on a stream, written and queued as its handlers' are.
pub(super) fn send_error<S>(respond: &mut SendResponse<Bytes>, env: &ConnEnv<S>, status: u16) {
    let mut out = Vec::with_capacity(256);
    {
        let common = env.clock.common();
        Responder::new(&mut out, &common, true, 1, false).error(status);
    }
    let _ = send_answer(respond, Bytes::from(out), false, false);
}
