//! The response for a cached file or one of its compressed forms: conditional requests (`ETag`/`If-None-Match`,
//! `Last-Modified`/`If-Modified-Since`, `If-Range`), a single byte range (206/416), HEAD,
//! and the body from memory or with `sendfile`.
//!
//! Owns: these HTTP semantics of a file. Must not touch: finding or caching the file.

use super::entry::{Body, Shown};
use crate::http::service::{FileBody, Reply};
use crate::http::{Method, Request, Responder};
use std::rc::Rc;

/// Writes the response for a cached entry: 304, 206, 416 or 200.
pub(super) fn respond(e: Shown<'_>, req: &Request<'_>, resp: &mut Responder<'_>) -> Reply {
    if not_modified(&e, req) {
        resp.status(304).raw_headers(e.head).end_head();
        return Reply::Done;
    }
    let range = match req.header("range") {
        Some(r) if e.ranges && req.method == Method::Get && if_range_matches(&e, req) => {
            parse_range(r, e.size)
        }
        _ => RangeRequest::Full,
    };
    let (status, start, len) = match range {
        RangeRequest::Full => (200, 0, e.size),
        RangeRequest::Partial(start, end) => (206, start, end - start + 1),
        RangeRequest::Unsatisfiable => {
            resp.status(416)
                .header("Content-Range", &format!("bytes */{}", e.size))
                .header("Content-Type", "text/plain; charset=utf-8")
                .body(b"416 Range Not Satisfiable\n");
            return Reply::Done;
        }
    };
    resp.status(status).raw_headers(e.head);
    if status == 206 {
        resp.header(
            "Content-Range",
            &format!("bytes {start}-{}/{}", start + len - 1, e.size),
        );
    }
    resp.content_length(len).end_head();
    if resp.head_only() {
        return Reply::Done;
    }
    match e.body {
        Body::Memory(data) => {
            resp.append(&data[start as usize..(start + len) as usize]);
            Reply::Done
        }
        Body::Open(file) => Reply::File(FileBody {
            file: Rc::clone(file),
            offset: start,
            len,
        }),
    }
}

fn not_modified(e: &Shown<'_>, req: &Request<'_>) -> bool {
    if let Some(inm) = req.header("if-none-match") {
        // Weak comparison (RFC 9110 §13.1.2): W/ prefixes are ignored.
        return inm
            .split(',')
            .map(str::trim)
            .any(|t| t == "*" || t.trim_start_matches("W/") == e.etag);
    }
    if let Some(ims) = req.header("if-modified-since") {
        if let Ok(since) = httpdate::parse_http_date(ims) {
            return e.mtime <= since;
        }
    }
    false
}

fn if_range_matches(e: &Shown<'_>, req: &Request<'_>) -> bool {
    match req.header("if-range") {
        None => true,
        Some(v) if v.starts_with('"') => v == e.etag,
        Some(v) => httpdate::parse_http_date(v).is_ok_and(|t| t == e.mtime),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum RangeRequest {
    Full,
    /// Inclusive byte positions.
    Partial(u64, u64),
    Unsatisfiable,
}

/// Parses a `Range` header for one range. Several ranges, or a unit other than bytes, are
/// answered with the whole file — which RFC 9110 allows.
fn parse_range(header: &str, size: u64) -> RangeRequest {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        return RangeRequest::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeRequest::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    // Positions past 64 bits are past any file: as RFC 9110 §14.1.2 reads, a last position
    // beyond the end means "to the end" (206), a first one beyond it is unsatisfiable (416).
    // nginx answers 416 to both; see docs/operations.md ("Ranges past 64 bits").
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
    };
    let (start, end) = match (a.is_empty(), b.is_empty()) {
        (true, true) => return RangeRequest::Full,
        (true, false) => {
            // Suffix: the last N bytes.
            let Some(n) = num(b) else {
                return RangeRequest::Full;
            };
            if n == 0 {
                return RangeRequest::Unsatisfiable;
            }
            (size.saturating_sub(n), size.saturating_sub(1))
        }
        (false, _) => {
            let Some(start) = num(a) else {
                return RangeRequest::Full;
            };
            let end = if b.is_empty() {
                size.saturating_sub(1)
            } else {
                match num(b) {
                    Some(e) if e >= start => e.min(size.saturating_sub(1)),
                    _ => return RangeRequest::Full,
                }
            };
            (start, end)
        }
    };
    if size == 0 || start >= size {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Partial(start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), RangeRequest::Partial(0, 9));
        assert_eq!(parse_range("bytes=90-", 100), RangeRequest::Partial(90, 99));
        assert_eq!(parse_range("bytes=-10", 100), RangeRequest::Partial(90, 99));
        assert_eq!(
            parse_range("bytes=95-200", 100),
            RangeRequest::Partial(95, 99)
        );
        assert_eq!(parse_range("bytes=100-", 100), RangeRequest::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), RangeRequest::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeRequest::Full);
        assert_eq!(parse_range("items=0-1", 100), RangeRequest::Full);
        assert_eq!(parse_range("bytes=5-1", 100), RangeRequest::Full);
        assert_eq!(
            parse_range("bytes=0-99999999999999999999999", 100),
            RangeRequest::Partial(0, 99),
            "an end past 64 bits is the end of the file"
        );
        assert_eq!(
            parse_range("bytes=99999999999999999999999-", 100),
            RangeRequest::Unsatisfiable
        );
        assert_eq!(
            parse_range("bytes=-99999999999999999999999", 100),
            RangeRequest::Partial(0, 99)
        );
        assert_eq!(parse_range("bytes=+1-2", 100), RangeRequest::Full);
    }
}
