//! Reading responses as a load generator must: fast, and only what it needs — the status,
//! the framing (`Content-Length`, chunked, or until close) and `Connection`.
//!
//! Owns: the client's response scanner. Must not touch: sending. Why a scanner of our own and
//! not the crate's parser (`httparse`, which the engine and the admin client use): a full
//! parser spent two thirds of the client's instructions on headers a load generator never
//! reads, and the load generator must never be the bottleneck (measured against wrk in
//! `bench/loadgen.sh`).

use memchr::memmem;

/// The outcome of reading one response.
pub(super) enum ReadOutcome {
    /// (status, bytes, server asked to close)
    Response(u16, usize, bool),
    Failed,
    /// The connection closed before any byte of the response.
    Closed,
    TimedOut,
}

/// What the client needs of a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ResponseHead {
    status: u16,
    /// Bytes up to and including the blank line.
    len: usize,
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
}

/// The largest response head accepted.
const MAX_HEAD: usize = 64 << 10;

/// Searchers built once: building a `memmem` searcher per response cost more than the search.
struct Finders {
    end: memmem::Finder<'static>,
    content_length: memmem::Finder<'static>,
    connection: memmem::Finder<'static>,
    connection_lower: memmem::Finder<'static>,
    transfer_encoding_any: [memmem::Finder<'static>; 2],
}

static FINDERS: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| Finders {
    end: memmem::Finder::new(b"\r\n\r\n"),
    content_length: memmem::Finder::new(b"\r\nContent-Length:"),
    connection: memmem::Finder::new(b"\r\nConnection:"),
    connection_lower: memmem::Finder::new(b"\r\nconnection:"),
    transfer_encoding_any: [
        memmem::Finder::new(b"ransfer-"),
        memmem::Finder::new(b"RANSFER-"),
    ],
});

/// The value of the header line starting at `at` (after its colon), trimmed.
fn value_at(lines: &[u8], at: usize) -> &[u8] {
    let rest = &lines[at..];
    let end = memchr::memchr(b'\r', rest).unwrap_or(rest.len());
    rest[..end].trim_ascii()
}

fn parse_length(v: &[u8]) -> Result<usize, ()> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(());
    }
    Ok(v.iter().fold(0usize, |n, d| n * 10 + (d - b'0') as usize))
}

fn apply_connection(head: &mut ResponseHead, v: &[u8]) {
    if v.eq_ignore_ascii_case(b"close") {
        head.close = true;
    } else if v.eq_ignore_ascii_case(b"keep-alive") {
        head.close = false;
    }
}

/// Scans a response head without validating every header: the status line, then only
/// `Content-Length`, `Transfer-Encoding` and `Connection`, picked out by their first letter.
/// A full parser (httparse) spent two thirds of the client's instructions on headers a load
/// generator never reads. `Ok(None)`: more bytes needed; `Err`: not HTTP.
pub(super) fn scan_head(buf: &[u8]) -> Result<Option<ResponseHead>, ()> {
    let f = &*FINDERS;
    let Some(end) = f.end.find(buf) else {
        return if buf.len() > MAX_HEAD || (buf.len() >= 7 && &buf[..7] != b"HTTP/1.") {
            Err(())
        } else {
            Ok(None)
        };
    };
    // "HTTP/1.x NNN"
    if end < 12
        || &buf[..7] != b"HTTP/1."
        || buf[8] != b' '
        || !buf[9..12].iter().all(u8::is_ascii_digit)
    {
        return Err(());
    }
    let status = buf[9..12]
        .iter()
        .fold(0u16, |n, d| n * 10 + (d - b'0') as u16);
    let mut head = ResponseHead {
        status,
        len: end + 4,
        content_length: None,
        chunked: false,
        close: buf[7] == b'0',
    };
    let lines = &buf[..end + 2];
    // Fast path: the canonical capitalization nearly every server writes, and no
    // Transfer-Encoding anywhere. Anything else takes the line-by-line scan below.
    if let Some(i) = f.content_length.find(lines) {
        if f.transfer_encoding_any
            .iter()
            .all(|t| t.find(lines).is_none())
        {
            head.content_length = Some(parse_length(value_at(lines, i + 17))?);
            if let Some(i) = f
                .connection
                .find(lines)
                .or_else(|| f.connection_lower.find(lines))
            {
                apply_connection(&mut head, value_at(lines, i + 13));
            }
            return Ok(Some(head));
        }
    }
    let mut pos = memchr::memchr(b'\n', lines).map_or(lines.len(), |i| i + 1);
    while pos < lines.len() {
        let stop = memchr::memchr(b'\n', &lines[pos..]).map_or(lines.len(), |i| pos + i);
        let line = lines[pos..stop]
            .strip_suffix(b"\r")
            .unwrap_or(&lines[pos..stop]);
        pos = stop + 1;
        let value = |name: &[u8]| -> Option<&[u8]> {
            (line.len() > name.len() && line[..name.len()].eq_ignore_ascii_case(name))
                .then(|| line[name.len()..].trim_ascii())
        };
        match line.first().map(|b| b | 0x20) {
            Some(b'c') => {
                if let Some(v) = value(b"content-length:") {
                    head.content_length = Some(parse_length(v)?);
                } else if let Some(v) = value(b"connection:") {
                    apply_connection(&mut head, v);
                }
            }
            Some(b't') => {
                if let Some(v) = value(b"transfer-encoding:") {
                    head.chunked = v.eq_ignore_ascii_case(b"chunked");
                }
            }
            _ => {}
        }
    }
    Ok(Some(head))
}

/// A complete response at the start of `buf`, consumed; `None` when more bytes are needed.
pub(super) fn parse_response(buf: &mut Vec<u8>) -> Option<ReadOutcome> {
    let head = match scan_head(buf) {
        Ok(Some(h)) => h,
        Ok(None) => return None,
        Err(()) => return Some(ReadOutcome::Failed),
    };
    let status = head.status;
    // 1xx, 204 and 304 have no body.
    let total = if (100..200).contains(&status) || status == 204 || status == 304 {
        head.len
    } else if head.chunked {
        match crate::http::chunked_len(&buf[head.len..], u64::MAX, usize::MAX) {
            Ok(Some(used)) => head.len + used,
            Ok(None) => return None,
            Err(_) => return Some(ReadOutcome::Failed),
        }
    } else if let Some(len) = head.content_length {
        if buf.len() < head.len + len {
            return None;
        }
        head.len + len
    } else {
        // Delimited by close: wait for it.
        return None;
    };
    buf.drain(..total);
    if (100..200).contains(&status) {
        return parse_response(buf);
    }
    Some(ReadOutcome::Response(status, total, head.close))
}

/// A response whose body ran until the connection closed: (status, bytes).
pub(super) fn close_delimited(buf: &[u8]) -> Option<(u16, usize)> {
    match scan_head(buf) {
        Ok(Some(h)) => Some((h.status, buf.len())),
        _ => None,
    }
}
