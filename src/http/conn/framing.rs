//! A request's body framed in the connection's buffer: where it ends when the buffer holds
//! it whole, or why it cannot be answered yet (more to read, chunked and to be decoded first,
//! or a declared length past the path's bound).
//!
//! Owns: [`frame`]. Must not touch: reading or the answer (the connection's loop).

use super::super::body::Pending;
use super::super::{ChunkedDecoder, Framing};

/// Why a request's body is not in the buffer whole.
pub(super) enum Unframed {
    /// More of it is to be read.
    Arriving,
    /// It is chunked: decoded (in the next batch) before anything more is read.
    Chunked,
    /// Its declared length cannot be held (413).
    TooLarge,
}

/// Frames the body of the request whose `len`-byte head is at `at` (its state between reads in
/// `pending`): where the body ends when
/// the buffer holds it all, or why it cannot be answered yet.
pub(super) fn frame(
    pending: &mut Option<Pending>,
    rbuf: &[u8],
    (at, len): (usize, usize),
    framing: Framing,
    expect_continue: bool,
    (max_body, max_framing): (u64, usize),
) -> Result<usize, Unframed> {
    let body_start = at + len;
    let end = match framing {
        Framing::None => body_start,
        // Within the connection's bound (the parser checked); its path's may be smaller.
        Framing::Length(n) if n > max_body => return Err(Unframed::TooLarge),
        Framing::Length(n) => {
            // The sum is checked all the same.
            let Some(end) = usize::try_from(n)
                .ok()
                .and_then(|n| body_start.checked_add(n))
            else {
                return Err(Unframed::TooLarge);
            };
            if rbuf.len() < end {
                *pending = Some(Pending::Length {
                    end: end - at,
                    expect_continue,
                });
                return Err(Unframed::Arriving);
            }
            end
        }
        Framing::Chunked => match &*pending {
            Some(Pending::Chunked {
                done: true,
                body_len,
                ..
            }) => body_start + body_len,
            _ => {
                *pending = Some(Pending::Chunked {
                    head_len: len,
                    body_len: 0,
                    decoder: ChunkedDecoder::with_bounds(max_body, max_framing),
                    done: false,
                    expect_continue,
                });
                // Decoded before anything more is read.
                return Err(Unframed::Chunked);
            }
        },
    };
    *pending = None;
    Ok(end)
}
