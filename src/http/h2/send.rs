//! Sending onto an HTTP/2 stream: an HTTP/1.1 head translated into the stream's response
//! (its field values sharing one buffer), data within the client's flow-control windows, an
//! answer written whole queued at once.
//!
//! Owns: that translation and the window waits. Must not touch: which answer a stream gets
//! (the service's) or where it comes from (`answer` relays, `lent` lends the stream).

use crate::http::MAX_HEADERS;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use std::time::Duration;

/// What one stream may have queued to send beyond the client's window.
pub(super) const SEND_BUFFER: usize = 256 << 10;

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
    pub(super) length: Option<u64>,
    pub(super) chunked: bool,
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

/// Waits until the client's windows let the stream send at least one byte, up to `want`, and
/// returns how many. A client that opens no window for `timeout` gets the stream reset
/// (CANCEL): one that never reads would otherwise hold the answer, its task and its
/// connection for ever.
pub(super) async fn window(
    send: &mut SendStream<Bytes>,
    want: usize,
    timeout: Duration,
) -> Option<usize> {
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
