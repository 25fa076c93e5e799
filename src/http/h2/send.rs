//! Sending onto an HTTP/2 stream: data within the client's flow-control windows, an
//! answer written whole queued at once.
//!
//! Owns: the window waits and the answer queued whole. Must not touch: which answer a stream gets
//! (the service's) or where it comes from (`answer` relays, `lent` lends the stream).

use crate::features::head::AnswerIndex;
use crate::http::streams::response_of;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use std::time::Duration;

/// What one stream may have queued to send beyond the client's window.
pub(super) const SEND_BUFFER: usize = 256 << 10;

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

/// Queues an answer espalier wrote (`out`, its head indexed by `index`, and an in-memory
/// body after it) on the stream, without waiting: the h2 crate holds what the client's
/// windows do not yet take (at most the in-memory body, which is small). With `more` (a file
/// follows), the stream is left open and returned. `None` when the stream is gone or no
/// head was written.
pub(super) fn send_answer(
    respond: &mut SendResponse<Bytes>,
    (out, index): (Vec<u8>, &AnswerIndex),
    more: bool,
    head_only: bool,
) -> Option<Option<SendStream<Bytes>>> {
    let out = Bytes::from(out);
    let (response, head_len) = response_of(&out, index)?;
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
