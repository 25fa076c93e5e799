//! A stream's request lent to a forwarder — HTTP/2's and HTTP/3's alike — as if from an
//! HTTP/1.1 client at the far end of a pipe: its body written in at this end as it arrives
//! ([`pump`], over each protocol's [`StreamIn`]); the forwarder's answer comes back as its
//! heads, structured (`heads::AnswerHeads`: no text to parse back), and its body read out of
//! the pipe, sent on the stream ([`super::streams::relay`], over its `StreamOut`). One
//! [`exchange`] for both protocols, where each had its own copy.
//!
//! Owns: the pipe, the pump and the exchange's end (the forwarder done first: what is left
//! of the body is refused; the relay cut short: the forwarder is dropped, its connection to
//! the app closed). Must not touch: the forwarder itself (the service's) or the streams'
//! lives (`h2`, `h3`).

use super::access_log::Report;
use super::heads::AnswerHeads;
use super::service::{ConnEnv, RequestCtx, Service};
use super::streams::{lent_connection, relay, StreamOut};
use super::Framing;
use bytes::Bytes;
use std::time::Duration;

/// The pipe between a stream and its forwarder: it bounds what a stream holds of its app's
/// answer while its client's window is shut (the forwarder stops reading from the app when
/// it is full).
const FORWARD_PIPE: usize = 16 << 10;

/// One stream's request body as it arrives from its client: HTTP/2's (its window given
/// back as the forwarder takes each piece) or HTTP/3's (QUIC's, given back as it is read).
pub(crate) trait StreamIn {
    /// The next piece (`None` at the body's end), within `timeout`; `Err` when the client
    /// reset the stream or sent nothing for `timeout`.
    async fn piece(&mut self, timeout: Duration) -> Result<Option<Bytes>, ()>;
    /// `n` bytes of it were taken by the forwarder: the client may send that much more.
    fn taken(&mut self, n: usize);
    /// The app answered before the whole body came: the rest is refused (HTTP/3: the client
    /// is told to stop sending) or read and dropped (HTTP/2, up to `max` bytes and
    /// `timeout` between pieces: a reset would fail some clients' uploads).
    async fn answered_early(&mut self, max: u64, timeout: Duration);
}

/// Writes a stream's request body to the forwarder's pipe `to` as it arrives, from `first`
/// on: as it came when the client declared its length (more than that is cut, not passed
/// on), else chunked. A body cut short — the client resets the stream, stalls for `timeout`,
/// or sends other than it declared — shuts `to`, so the forwarder sees it end early, as when
/// an HTTP/1.1 client goes away mid-upload. One that ends well leaves `to` open (the
/// forwarder may still read it). The forwarder done with the request (it answered, or
/// failed) ends the pump.
///
/// [`Framing::None`] is a WebSocket's stream (a request without a body, whose stream then
/// carries the tunnel, see [`super::websocket`]): its bytes pass as they come, for as long
/// as the client sends — its silence is no stall (the app's, in the relay, bounds the
/// tunnel) — and its end shuts `to`, the end of the tunnel's one direction.
pub(crate) async fn pump<I: StreamIn, W: tokio::io::AsyncWrite + Unpin>(
    first: Option<Bytes>,
    from: &mut I,
    framing: Framing,
    to: &mut W,
    timeout: Duration,
) {
    use tokio::io::AsyncWriteExt;
    let chunked = framing == Framing::Chunked;
    let tunnel = framing == Framing::None;
    let timeout = if tunnel { Duration::MAX } else { timeout };
    let mut left = match framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    let mut next = first;
    let whole = loop {
        let data = match next.take() {
            Some(data) => data,
            None => match from.piece(timeout).await {
                Ok(Some(data)) => data,
                Ok(None) => break !tunnel && left.is_none_or(|l| l == 0),
                Err(()) => break false,
            },
        };
        if let Some(l) = &mut left {
            match l.checked_sub(data.len() as u64) {
                Some(rest) => *l = rest,
                None => break false,
            }
        }
        if data.is_empty() {
            continue;
        }
        if super::streams::write_piece(to, &data, chunked)
            .await
            .is_err()
        {
            return;
        }
        from.taken(data.len());
    };
    if !whole {
        let _ = to.shutdown().await;
    } else if chunked {
        let _ = to.write_all(b"0\r\n\r\n").await;
    }
}

/// A request's body for the forwarder: the first piece read already (HTTP/3 reads one to
/// know there is a body), the rest of the stream, and how it is framed for the app.
pub(crate) struct Arriving<'a, I> {
    pub(crate) first: Option<Bytes>,
    pub(crate) rest: &'a mut I,
    pub(crate) framing: Framing,
}

/// Lends the request `lent` to its forwarder through a pipe: its body `whole` (already read)
/// or `arriving` (a WebSocket's tunnel when framed [`Framing::None`]), its answer relayed
/// onto `out`. Relayed whole, the forwarder ends its
/// exchange (its connection kept for the next); cut short (the client reset the stream, or
/// stopped reading), the forwarder is dropped, and its connection to the app closed with it.
pub(crate) async fn exchange<S: Service, I: StreamIn, O: StreamOut>(
    env: &ConnEnv<S>,
    (lent, ctx, report): (S::Lent, &RequestCtx, &Report),
    whole: Vec<u8>,
    arriving: Option<Arriving<'_, I>>,
    out: &mut O,
    head_only: bool,
) {
    let tunnel = arriving
        .as_ref()
        .is_some_and(|a| a.framing == Framing::None);
    let (mut ours, theirs) = tokio::io::duplex(FORWARD_PIPE);
    let (mut answer, mut body_in) = tokio::io::split(theirs);
    let heads = AnswerHeads::default();
    let mut rbuf = whole;
    let forwarding = async {
        let conn = lent_connection((&mut ours, &heads), &mut rbuf, env, ctx, report);
        // Boxed where it is made: a future is moved whole (its every state's room), and this
        // one, the forwarder's, is most of the exchange's — unboxed, it was copied into each
        // future that holds it, and each of those moved in turn.
        Box::pin(env.service.lend(lent, conn)).await;
        // No head comes after this; closing our end ends an answer framed by the close.
        heads.close();
        drop(ours);
    };
    // The body goes in while the forwarder sends it on; once the forwarder is done (an app
    // may answer before the whole body came), the rest of it is refused.
    let timeout = env.timeouts.body;
    let feeding = async {
        let mut forwarding = std::pin::pin!(forwarding);
        if let Some(Arriving {
            first,
            rest,
            framing,
        }) = arriving
        {
            let pumping = pump(first, rest, framing, &mut body_in, timeout);
            let answered_first = tokio::select! {
                () = &mut forwarding => true,
                () = pumping => false,
            };
            if answered_first {
                // What is left of a body is refused; of a tunnel, there is nothing left.
                if !tunnel {
                    rest.answered_early(env.limits.max_body_size, timeout).await;
                }
                return;
            }
        }
        forwarding.await
    };
    let relaying = relay((&heads, &mut answer), out, (head_only, tunnel), timeout);
    let mut relaying = std::pin::pin!(relaying);
    let mut feeding = std::pin::pin!(feeding);
    tokio::select! {
        relayed = &mut relaying => match relayed {
            Some(()) if tunnel => {
                // The app ended the tunnel and the stream's answer ended with it: the client
                // ends its side in turn (RFC 8441 §4: END_STREAM is the orderly close), given
                // `timeout` to, rather than reset at once.
                let _ = tokio::time::timeout(timeout, feeding).await;
            }
            Some(()) => feeding.await,
            None => {}
        },
        () = &mut feeding => {
            let _ = relaying.await;
        }
    }
}
