//! A stream's request body on its way to an application: streamed into the forwarder as it
//! arrives, as an HTTP/1.1 connection's is, rather than read whole first — a worker holds at
//! most the pipe's buffer of an upload, and the client's window opens only as the app takes
//! the bytes, so an upload goes at the app's pace. (Read whole, 128 streams of a connection
//! could each hold `max_body_size`.)
//!
//! Owns: [`Body`], the stream's side of the shared pump (`stream_forward::pump` frames the data for
//! the forwarder: as it came when the client declared a length, else chunked), [`discard`]
//! for a body answered early, [`whole`] for one read whole first, and
//! [`refuse_too_large`] for one over `max_body_size`. Must not touch: the forwarder's checks
//! of the body (its chunked decoder's bound) or the answer's way back (see `answer`).

use crate::http::service::ConnEnv;
use crate::http::Framing;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use std::time::Duration;

/// A request's body as the forwarder gets it.
pub(super) enum Body<'a> {
    /// Read already: no body, or one read whole for espalier's own handlers.
    Whole(&'a [u8]),
    /// Still arriving, framed as the forwarder will pass it on; whether the client waits for
    /// `100 Continue` before sending it.
    Arriving(RecvStream, Framing, bool),
}

pub(super) use crate::http::streams::expects_continue;

/// How an arriving body is framed for the app: by the length the client declared (the h2
/// crate checks the field and holds the stream's data to it), empty when the stream `ended`
/// with its head (a GET: as HTTP/3's is, and resendable on another connection), else
/// chunked; a WebSocket's stream has no body but the tunnel ([`Framing::None`], see
/// `stream_forward::pump`).
pub(super) fn framing_of(parts: &http::request::Parts, ended: bool) -> Framing {
    if crate::http::websocket::is_tunnel(parts) {
        return Framing::None;
    }
    if ended {
        return Framing::Length(0);
    }
    match crate::http::streams::declared_length(parts) {
        Ok(Some(n)) => Framing::Length(n),
        _ => Framing::Chunked,
    }
}

/// HTTP/2's side of [`crate::http::stream_forward::pump`]: the h2 crate holds a stream's data to
/// its declared length; each piece's window is given back once the forwarder has taken it.
impl crate::http::stream_forward::StreamIn for RecvStream {
    async fn piece(&mut self, timeout: Duration) -> Result<Option<Bytes>, ()> {
        match tokio::time::timeout(timeout, self.data()).await {
            Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
            Ok(None) => Ok(None),
            Ok(Some(Err(_))) | Err(_) => Err(()),
        }
    }

    fn taken(&mut self, n: usize) {
        let _ = self.flow_control().release_capacity(n);
    }

    async fn answered_early(&mut self, max: u64, timeout: Duration) {
        discard(self, max, timeout).await;
    }
}

/// A body read whole, at most `bound` bytes (past it: 413, see [`refuse_too_large`]);
/// `None` when it was refused, or the client reset its stream or stalled for
/// `body_timeout`.
pub(super) async fn whole<S>(
    recv: &mut RecvStream,
    respond: &mut SendResponse<Bytes>,
    env: &ConnEnv<S>,
    bound: u64,
) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = tokio::time::timeout(env.timeouts.body, recv.data())
        .await
        .ok()
        .flatten()
    {
        let chunk = chunk.ok()?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        if (body.len() + chunk.len()) as u64 > bound {
            refuse_too_large(respond, recv, env).await;
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body)
}

/// What an upload refused as too large (413) may still send, read and dropped so the client
/// takes the 413 as the answer (at least this much, or `max_body_size` when larger); past
/// it the stream is reset.
pub(super) const DISCARD_AFTER_413: u64 = 16 << 20;

/// How long a refused upload may pause between pieces before its stream is reset: a client
/// that stops sending is not waited for a whole `body_timeout` (nginx's
/// `lingering_timeout`, 5 s).
const LINGER: Duration = Duration::from_secs(5);

/// A body over `max_body_size`: answered 413 before any of it reaches the app, and what the
/// client still sends of it read and dropped (up to [`DISCARD_AFTER_413`], or
/// `max_body_size` when larger), so curl and browsers read the 413 rather than a reset
/// stream (curl 7.88: "(92) Stream error in the HTTP/2 framing layer").
pub(super) async fn refuse_too_large<S>(
    respond: &mut SendResponse<Bytes>,
    recv: &mut RecvStream,
    env: &ConnEnv<S>,
) {
    super::answer::send_error(respond, env, 413);
    let max = DISCARD_AFTER_413.max(env.limits.max_body_size);
    discard(recv, max, LINGER.min(env.timeouts.body)).await;
}

/// The rest of a body the app answered without: read and dropped, up to `max` bytes and
/// `timeout` between pieces, so the client finishes its upload and takes the answer as
/// complete (as nginx discards a body it will not use). A reset ends the stream instead
/// (RFC 9113 §8.1), and some clients, curl among them, report that as a failure.
pub(super) async fn discard(recv: &mut RecvStream, max: u64, timeout: Duration) {
    let mut dropped = 0u64;
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(timeout, recv.data()).await {
        dropped += chunk.len() as u64;
        if dropped > max {
            return;
        }
        let _ = recv.flow_control().release_capacity(chunk.len());
    }
}
