//! An HTTP/3 request's body: read piece by piece, whole (bounded) for an answer made here, or
//! pumped into the forwarder as it arrives for an application — a worker then holds at most
//! the pipe's buffer of an upload, and QUIC's flow control opens only as the app takes it.
//!
//! Owns: [`piece`], [`rest`], [`Arriving`] and the stream's side of the shared pump
//! (`stream_forward::pump`). Must not touch: the stream's answer
//! (see the parent module) or the forwarder's checks of the body (its chunked bound).

use crate::http::Framing;
use bytes::{Buf, Bytes};
use std::time::Duration;

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

/// HTTP/3's side of [`crate::http::stream_forward::pump`]: QUIC's window opens as pieces are read.
impl crate::http::stream_forward::StreamIn for Recv {
    async fn piece(&mut self, timeout: Duration) -> Result<Option<Bytes>, ()> {
        piece(self, timeout).await
    }

    fn taken(&mut self, _n: usize) {}

    async fn answered_early(&mut self, _max: u64, _timeout: Duration) {
        self.stop_sending(h3::error::Code::H3_NO_ERROR);
    }
}
