//! Reading an app's HTTP/1.1 answer off its connection: its head to its end ([`read_whole_head`],
//! interim `1xx` answers skipped), and — for the response cache — the whole answer within
//! the store's entry bound ([`read_whole`]). Shared by the forwarder, the response cache's
//! background refresh, the verifier and the trace exporter.
//!
//! Owns: those reads. Must not touch: what the head says (parsed once, by
//! [`super::answer`]) or the client's connection.

use super::route::ProxyRoute;
use super::upstream::Conn;
use super::wire::BodyKind;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest response head accepted from an app.
const MAX_RESPONSE_HEAD: usize = 64 << 10;

/// What went wrong getting the response head.
pub(super) enum HeadError {
    /// Closed before any byte: a retry may go elsewhere.
    ClosedEarly,
    Timeout,
    Garbage,
}

pub(super) async fn read_whole_head(
    conn: &mut Conn,
    ubuf: &mut Vec<u8>,
) -> Result<usize, HeadError> {
    let mut received_any = false;
    loop {
        // Only the end of the head is looked for here; the caller parses it once.
        if let Some(len) = head_end(ubuf) {
            let interim = ubuf.starts_with(b"HTTP/1.")
                && ubuf.get(9) == Some(&b'1')
                && ubuf.get(9..12) != Some(b"101");
            if interim {
                ubuf.drain(..len);
                continue;
            }
            return Ok(len);
        }
        if ubuf.len() >= MAX_RESPONSE_HEAD {
            return Err(HeadError::Garbage);
        }
        if ubuf.capacity() - ubuf.len() < 4096 {
            ubuf.reserve(8 << 10);
        }
        match conn.read_buf(ubuf).await {
            Ok(0) | Err(_) if !received_any => return Err(HeadError::ClosedEarly),
            Ok(0) | Err(_) => return Err(HeadError::Garbage),
            Ok(_) => received_any = true,
        }
    }
}

/// The length of a response head at the start of `buf` (through its empty line, CRLF or a
/// bare LF), when the whole head is there.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
        let at = from + i;
        match buf.get(at + 1) {
            Some(b'\n') => return Some(at + 2),
            Some(b'\r') if buf.get(at + 2) == Some(&b'\n') => return Some(at + 3),
            _ => from = at + 1,
        }
    }
    None
}

/// Reads the rest of the answer whose head is `ubuf[..head_len]` from `conn` into `ubuf`, up
/// to the end its framing `kind` says, within the store's entry bound and `timeout` per
/// read: whether all of it is there now (and nothing after it). `false` leaves what was read
/// in `ubuf`, for the relay to send on.
pub(super) async fn read_whole<R: AsyncRead + Unpin>(
    conn: &mut R,
    ubuf: &mut Vec<u8>,
    (head_len, kind): (usize, BodyKind),
    route: &ProxyRoute,
    timeout: Duration,
) -> bool {
    let Some(store) = route.cache.as_ref() else {
        return false;
    };
    let bound = store.entry_bound() as usize;
    let mut decoder = crate::http::ChunkedDecoder::with_bounds(bound as u64, 64 << 10);
    let mut scanned = head_len;
    loop {
        let whole = match kind {
            BodyKind::None => return ubuf.len() == head_len,
            BodyKind::Length(n) => match (ubuf.len() - head_len) as u64 {
                got if got == n => return true,
                got if got > n => return false,
                _ => false,
            },
            BodyKind::Chunked => match decoder.skip(&ubuf[scanned..]) {
                Ok(d) => {
                    scanned += d.consumed;
                    if d.done {
                        return scanned == ubuf.len();
                    }
                    false
                }
                Err(_) => return false,
            },
            BodyKind::UntilClose => return false,
        };
        if whole || ubuf.len() >= bound {
            return false;
        }
        ubuf.reserve((bound - ubuf.len()).min(64 << 10));
        match tokio::time::timeout(timeout, conn.read_buf(ubuf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return false,
        }
    }
}
