//! An HTTP/1.1 request body still arriving after its head: how much is in, and the chunked
//! framing decoded in place as it comes.
//!
//! Owns: [`Pending`] and moving it forward over the read buffer ([`advance_body`]). Must not
//! touch: the socket (the connection loop reads) or what the body is for.

use super::{ChunkedDecoder, ProtocolError};

/// A request whose head is parsed but whose body is still arriving. It is always the first
/// request in the read buffer, so offsets are from the buffer's start.
pub(super) enum Pending {
    /// A sized body: the request is complete once the buffer holds `end` bytes.
    Length { end: usize, expect_continue: bool },
    /// A chunked body: `body_len` decoded bytes follow the `head_len` bytes of the head (the
    /// framing already decoded is dropped from the buffer as it goes).
    Chunked {
        head_len: usize,
        body_len: usize,
        decoder: ChunkedDecoder,
        done: bool,
        expect_continue: bool,
    },
}

impl Pending {
    pub(super) fn expect_continue(&self) -> bool {
        match self {
            Pending::Length {
                expect_continue, ..
            }
            | Pending::Chunked {
                expect_continue, ..
            } => *expect_continue,
        }
    }
}

/// Moves a pending body forward with what the buffer holds: `Ok(true)` when the request at
/// the start of the buffer can be answered (or nothing is pending), `Ok(false)` when more
/// bytes are needed.
pub(super) fn advance_body(
    pending: &mut Option<Pending>,
    rbuf: &mut Vec<u8>,
) -> Result<bool, ProtocolError> {
    match pending {
        None => Ok(true),
        Some(Pending::Length { end, .. }) => Ok(rbuf.len() >= *end),
        Some(Pending::Chunked { done: true, .. }) => Ok(true),
        Some(Pending::Chunked {
            head_len,
            body_len,
            decoder,
            done,
            ..
        }) => {
            let start = *head_len + *body_len;
            let d = decoder.decode(&mut rbuf[start..])?;
            // The framing just decoded is dropped, so the buffer holds head + body + the rest.
            rbuf.drain(start + d.produced..start + d.consumed);
            *body_len += d.produced;
            *done = d.done;
            Ok(d.done)
        }
    }
}
