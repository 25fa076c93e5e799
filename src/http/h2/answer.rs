//! Answers onto HTTP/2 streams: an application's HTTP/1.1 answer read back from the
//! forwarder, a file's pieces, espalier's own errors — each through `send`'s translation and
//! the client's flow-control windows.
//!
//! Owns: relaying those answers. Must not touch: which answer a request gets (the
//! service decides) or the connection's streams (see the parent module).

use super::send::{continue_response, send_answer, send_data, translate, window, Translated};
use crate::http::service::{ConnEnv, FileBody};
use crate::http::{Responder, MAX_HEADERS};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Pieces of a file or an application's answer.
const PIECE: usize = 64 << 10;

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
