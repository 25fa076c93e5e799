//! An HTTP/3 request's body: read piece by piece, whole (bounded) for an answer made here, or
//! pumped into the forwarder as it arrives for an application — a worker then holds at most
//! the pipe's buffer of an upload, and QUIC's flow control opens only as the app takes it.
//!
//! Owns: [`piece`], [`rest`], [`Arriving`] and [`pump`]. Must not touch: the stream's answer
//! (see the parent module) or the forwarder's checks of the body (its chunked bound).

use crate::http::streams::write_piece;
use crate::http::Framing;
use bytes::{Buf, Bytes};
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};

pub(super) use crate::http::streams::{declared_length, expects_continue};

type Recv = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// The next piece of a body (`None` at its end), within `timeout`; `Err` when the client
/// reset the stream or sent nothing for `timeout` (the stream is then cancelled).
pub(super) async fn piece<S: h3::quic::RecvStream>(
    stream: &mut h3::server::RequestStream<S, Bytes>,
    timeout: Duration,
) -> Result<Option<Bytes>, ()> {
    match tokio::time::timeout(timeout, stream.recv_data()).await {
        Ok(Ok(Some(mut piece))) => Ok(Some(piece.copy_to_bytes(piece.remaining()))),
        Ok(Ok(None)) => Ok(None),
        Ok(Err(_)) => Err(()),
        Err(_) => {
            stream.stop_sending(h3::error::Code::H3_REQUEST_CANCELLED);
            Err(())
        }
    }
}

/// Why a body was not read whole.
pub(super) enum Cut {
    /// More than its bound arrived.
    TooLarge,
    /// The client went away or stalled.
    Gone,
}

/// The body from its `first` piece to its end, at most `bound` bytes.
pub(super) async fn rest<S: h3::quic::RecvStream>(
    first: Bytes,
    stream: &mut h3::server::RequestStream<S, Bytes>,
    bound: u64,
    timeout: Duration,
) -> Result<Vec<u8>, Cut> {
    let mut body = first.to_vec();
    loop {
        if body.len() as u64 > bound {
            return Err(Cut::TooLarge);
        }
        match piece(stream, timeout).await {
            Ok(Some(more)) => body.extend_from_slice(&more),
            Ok(None) => return Ok(body),
            Err(()) => return Err(Cut::Gone),
        }
    }
}

/// A body still arriving for an app: its first piece (already read, to know there is a
/// body), the rest of the stream, and how the forwarder gets it framed.
pub(super) struct Arriving<'a> {
    pub(super) first: Bytes,
    pub(super) recv: &'a mut Recv,
    pub(super) framing: Framing,
}

/// Writes the body to `to` as it arrives, from `first` on: as it came when the client
/// declared its length (more than that is cut, not passed on), else chunked. A body cut short
/// — the client resets the stream, stalls for `timeout`, or sends other than it declared —
/// shuts `to`, so the forwarder sees it end early, as when an HTTP/1.1 client goes away
/// mid-upload. One that ends well leaves `to` open (the forwarder may still read it).
pub(super) async fn pump<W: AsyncWrite + Unpin>(
    first: Bytes,
    recv: &mut Recv,
    framing: Framing,
    to: &mut W,
    timeout: Duration,
) {
    let chunked = framing == Framing::Chunked;
    let mut left = match framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    let mut next = Some(first);
    let whole = loop {
        let data = match next.take() {
            Some(data) => data,
            None => match piece(recv, timeout).await {
                Ok(Some(data)) => data,
                Ok(None) => break left.is_none_or(|l| l == 0),
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
        if write_piece(to, &data, chunked).await.is_err() {
            // The forwarder is done with the request (it answered, or failed).
            return;
        }
    };
    if !whole {
        let _ = to.shutdown().await;
    } else if chunked {
        let _ = to.write_all(b"0\r\n\r\n").await;
    }
}
