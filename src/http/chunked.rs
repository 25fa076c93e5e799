//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally and in place.
//!
//! Owns: the chunk grammar, its limits and the status each violation gets. Must not touch:
//! the connection (it is handed bytes and says how many it used) or heads (see [`super`]).
//!
//! Why a byte-level state machine rather than re-parsing the buffered body on each read: a
//! decoder that starts over every time more bytes arrive is quadratic in the body, and one
//! that waits for a whole chunk-size line buffers whatever a client puts in an extension
//! (`1;ext=` followed by hundreds of MiB). Here every byte is looked at once, state survives
//! across reads, and every client-controlled size is bounded:
//! - a chunk size is accumulated with checked arithmetic (past 64 bits is 400);
//! - the decoded body is bounded by `max_body_size` (413);
//! - the bytes of all chunk extensions together are bounded by `max_header_size` (413: they
//!   are body framing, and nothing here reads them);
//! - the trailer section is bounded by `max_header_size` (431, like a head too large).
//!
//! Strictness, as nginx and RFC 9112 would have it (a request another server would frame
//! differently is refused, never guessed at): every line ends in CRLF (a bare LF or CR is
//! 400), a size has at least one hex digit, whitespace is allowed only between the size and
//! an extension, and extensions and trailers may hold no control character but HTAB.
//!
//! Decoding is in place: data bytes are moved down over the framing that preceded them, so
//! after [`ChunkedDecoder::decode`] the body so far lies contiguous at the start of the
//! slice, and the caller may drop the framing bytes it used. Nothing is allocated.

use super::ProtocolError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex digits of a chunk size (`seen`: at least one so far).
    Size {
        seen: bool,
    },
    /// After the digits: optional whitespace before `;` or CR.
    AfterSize,
    /// Inside chunk extensions, until CR.
    Extension,
    /// Saw the CR ending a size line; LF must follow.
    SizeLf,
    /// Chunk data, `left` bytes to go.
    Data {
        left: u64,
    },
    /// After chunk data: CR then LF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line, until CR.
    Trailer,
    /// Saw the CR ending a trailer line; LF must follow.
    TrailerLf,
    /// Saw the CR of the final empty line; LF must follow.
    FinalLf,
    Done,
}

/// What one call to [`ChunkedDecoder::decode`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Encoded bytes used from the start of the slice.
    pub consumed: usize,
    /// Body bytes now at the start of the slice (`produced <= consumed`).
    pub produced: usize,
    /// The last chunk and the trailers have been read.
    pub done: bool,
}

/// The state of one chunked body being received.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    body_len: u64,
    extension_bytes: usize,
    trailer_bytes: usize,
    max_body: u64,
    max_framing: usize,
}

impl ChunkedDecoder {
    /// A decoder with explicit bounds: decoded body size, and extension/trailer bytes.
    pub fn with_bounds(max_body: u64, max_framing: usize) -> Self {
        ChunkedDecoder {
            state: State::Size { seen: false },
            size: 0,
            body_len: 0,
            extension_bytes: 0,
            trailer_bytes: 0,
            max_body,
            max_framing,
        }
    }

    /// Decodes what `buf` holds, moving data bytes to the front of `buf`. Bytes after the end
    /// of the body (a pipelined request) are left alone: `consumed` stops at the end.
    pub fn decode(&mut self, buf: &mut [u8]) -> Result<Decoded, ProtocolError> {
        let (mut read, mut write) = (0, 0);
        while let Some((start, n)) = self.next_data(buf, &mut read)? {
            buf.copy_within(start..start + n, write);
            write += n;
        }
        Ok(self.decoded(read, write))
    }

    /// As [`Self::decode`], but only measures: nothing is moved, so `buf` may be shared (a
    /// load generator finding where a response's body ends).
    pub fn skip(&mut self, buf: &[u8]) -> Result<Decoded, ProtocolError> {
        let (mut read, mut produced) = (0, 0);
        while let Some((_, n)) = self.next_data(buf, &mut read)? {
            produced += n;
        }
        Ok(self.decoded(read, produced))
    }

    fn decoded(&self, consumed: usize, produced: usize) -> Decoded {
        Decoded {
            consumed,
            produced,
            done: self.state == State::Done,
        }
    }

    /// Walks `buf` from `*read`: framing bytes are consumed one at a time; the next run of
    /// chunk data is consumed whole and returned as (start, length). `None` at the end of
    /// `buf` or of the body. Every byte is looked at once, whatever the split across reads.
    fn next_data(
        &mut self,
        buf: &[u8],
        read: &mut usize,
    ) -> Result<Option<(usize, usize)>, ProtocolError> {
        while *read < buf.len() && self.state != State::Done {
            if let State::Data { left } = self.state {
                let n = left.min((buf.len() - *read) as u64) as usize;
                let start = *read;
                *read += n;
                self.state = if n as u64 == left {
                    State::DataCr
                } else {
                    State::Data {
                        left: left - n as u64,
                    }
                };
                return Ok(Some((start, n)));
            }
            let b = buf[*read];
            *read += 1;
            self.state = self.step(b)?;
        }
        Ok(None)
    }

    /// One framing byte (anything but chunk data).
    fn step(&mut self, b: u8) -> Result<State, ProtocolError> {
        use ProtocolError::BadRequest;
        Ok(match self.state {
            State::Size { seen } => match hex_value(b) {
                Some(v) => {
                    // Leading zeros are allowed; a size past 64 bits is refused.
                    self.size = self
                        .size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(u64::from(v)))
                        .ok_or(BadRequest)?;
                    State::Size { seen: true }
                }
                None if seen => self.after_size(b)?,
                None => return Err(BadRequest),
            },
            State::AfterSize => self.after_size(b)?,
            State::Extension => match b {
                b'\r' => State::SizeLf,
                b'\t' => self.extension_byte(State::Extension)?,
                0..=31 | 127 => return Err(BadRequest),
                _ => self.extension_byte(State::Extension)?,
            },
            State::SizeLf => {
                if b != b'\n' {
                    return Err(BadRequest);
                }
                self.begin_chunk()?
            }
            State::Data { .. } => unreachable!("data is copied in bulk"),
            State::DataCr => match b {
                b'\r' => State::DataLf,
                _ => return Err(BadRequest),
            },
            State::DataLf => match b {
                b'\n' => State::Size { seen: false },
                _ => return Err(BadRequest),
            },
            State::TrailerStart => match b {
                b'\r' => State::FinalLf,
                b' ' | b'\t' => return Err(BadRequest), // obs-fold
                _ => self.trailer_byte(b)?,
            },
            State::Trailer => match b {
                b'\r' => State::TrailerLf,
                _ => self.trailer_byte(b)?,
            },
            State::TrailerLf | State::FinalLf if b != b'\n' => return Err(BadRequest),
            State::TrailerLf => State::TrailerStart,
            State::FinalLf => State::Done,
            State::Done => State::Done,
        })
    }

    /// A byte after the size digits: whitespace, the start of an extension, or CR.
    fn after_size(&mut self, b: u8) -> Result<State, ProtocolError> {
        match b {
            b' ' | b'\t' => self.extension_byte(State::AfterSize),
            b';' => self.extension_byte(State::Extension),
            b'\r' => Ok(State::SizeLf),
            _ => Err(ProtocolError::BadRequest),
        }
    }

    fn extension_byte(&mut self, next: State) -> Result<State, ProtocolError> {
        self.extension_bytes += 1;
        if self.extension_bytes > self.max_framing {
            return Err(ProtocolError::BodyTooLarge);
        }
        Ok(next)
    }

    fn trailer_byte(&mut self, b: u8) -> Result<State, ProtocolError> {
        if b != b'\t' && (b < 32 || b == 127) {
            return Err(ProtocolError::BadRequest);
        }
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.max_framing {
            return Err(ProtocolError::HeadersTooLarge);
        }
        Ok(State::Trailer)
    }

    /// The size line is complete: start the chunk's data, or the trailers after the last one.
    fn begin_chunk(&mut self) -> Result<State, ProtocolError> {
        let size = std::mem::take(&mut self.size);
        if size == 0 {
            return Ok(State::TrailerStart);
        }
        self.body_len = self
            .body_len
            .checked_add(size)
            .filter(|&n| n <= self.max_body)
            .ok_or(ProtocolError::BodyTooLarge)?;
        Ok(State::Data { left: size })
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes a whole chunked body at the start of `buf` (a copy is decoded; `buf` is left as
/// it is): `Ok(Some((consumed, body)))` when complete, `Ok(None)` when more bytes are needed.
/// For callers that want the body of bytes they hold whole (tests, the fuzz target).
pub fn decode_chunked(
    buf: &[u8],
    max_body: u64,
    max_framing: usize,
) -> Result<Option<(usize, Vec<u8>)>, ProtocolError> {
    let mut copy = buf.to_vec();
    let mut decoder = ChunkedDecoder::with_bounds(max_body, max_framing);
    let d = decoder.decode(&mut copy)?;
    if !d.done {
        return Ok(None);
    }
    copy.truncate(d.produced);
    Ok(Some((d.consumed, copy)))
}

/// The length of a whole chunked body at the start of `buf`, framing included, without
/// copying it: `Ok(Some(len))` when complete, `Ok(None)` when more bytes are needed.
pub fn chunked_len(
    buf: &[u8],
    max_body: u64,
    max_framing: usize,
) -> Result<Option<usize>, ProtocolError> {
    let d = ChunkedDecoder::with_bounds(max_body, max_framing).skip(buf)?;
    Ok(d.done.then_some(d.consumed))
}
