//! A FastCGI answer's CGI head as the records bring it: read to its end
//! ([`read_cgi_head`]), its status (`Status:`, or a `Location` alone: RFC 3875 §6.2,
//! [`cgi_status`]), the HTTP/1.1 head it stands for where the response cache keeps it
//! ([`http_head`], [`kept`], [`stored`]), and its whole STDOUT within the cache's entry
//! bound ([`read_stdout_whole`]) —
//! for the FastCGI forwarder and the response cache's background refresh alike.
//!
//! Owns: those reads (the CGI head's codec). Must not touch: the client's head (the
//! forwarder's, through `super::head`) or the records' framing (`super::fastcgi_records`).

use super::answer::Keeping;
use super::cache::{CacheRequest, Stored};
use super::cgi::{END_REQUEST, MAX_CGI_HEAD, STDERR, STDOUT};
use super::fastcgi_records::{log_stderr, read_record, Record};
use super::route::ProxyRoute;
use super::upstream::Conn;
use super::Endpoint;
use std::io;
use std::time::Duration;

/// Reads records until the CGI header block is complete; returns it whole (with the start
/// of the body after it) and its length.
pub(super) async fn read_cgi_head(
    conn: &mut Conn,
    first: Record,
    timeout: Duration,
    who: &Endpoint,
) -> Result<(Vec<u8>, usize), u16> {
    let mut head = Vec::new();
    let mut next = Some(first);
    loop {
        let r = match next.take() {
            Some(r) => r,
            None => read_record(conn, timeout).await.map_err(status_of)?,
        };
        match r.kind {
            STDOUT => {
                head.extend_from_slice(&r.content);
                let mut fields = [httparse::EMPTY_HEADER; 100];
                match httparse::parse_headers(&head, &mut fields) {
                    Ok(httparse::Status::Complete((len, _))) => return Ok((head, len)),
                    Ok(httparse::Status::Partial) if head.len() <= MAX_CGI_HEAD => {}
                    _ => return Err(502),
                }
            }
            STDERR => log_stderr(who, &r.content),
            // Ended without a complete header block: nothing usable was said.
            END_REQUEST => return Err(502),
            _ => {}
        }
    }
}

pub(super) fn status_of(e: io::Error) -> u16 {
    if e.kind() == io::ErrorKind::TimedOut {
        504
    } else {
        502
    }
}

/// The status of a CGI header block (`Status: 404 Not Found`; a `Location` alone is a
/// redirect, RFC 3875 §6.2) and the body's `Content-Length`, if it says one.
pub(super) fn cgi_status(
    fields: &[httparse::Header<'_>],
) -> Result<(u16, Option<u64>), &'static str> {
    let mut status = None;
    let mut length: Option<u64> = None;
    let mut located = false;
    for f in fields {
        if f.name.eq_ignore_ascii_case("status") {
            let code = std::str::from_utf8(f.value)
                .ok()
                .and_then(|v| v.get(..3))
                .and_then(|c| c.parse().ok());
            match code {
                Some(c) if (200..600).contains(&c) => status = Some(c),
                _ => return Err("answered a `Status` that is not a status code"),
            }
        } else if f.name.eq_ignore_ascii_case("location") {
            located = true;
        } else if f.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(f.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        }
    }
    let status = status.unwrap_or(if located { 302 } else { 200 });
    Ok((status, length))
}

/// The HTTP/1.1 head a CGI answer of `status` with `fields` stands for, its body `length`
/// long: how it is kept (the fields that framed it in CGI are the length's now).
pub(super) fn http_head<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    head.extend_from_slice(b" \r\n");
    let framing = ["status", "content-length", "transfer-encoding"];
    for (name, value) in fields {
        if framing.iter().any(|f| name.eq_ignore_ascii_case(f)) {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head
}

/// Reads the rest of the answer's STDOUT from `conn` onto `body` (what came with the CGI
/// head), record by record, to its end (`END_REQUEST`) within the store's entry bound and
/// `timeout` a record: whether all of it is there. `false` leaves what was read in `body`,
/// and `conn` at a record's start, for the relay to go on from.
pub(super) async fn read_stdout_whole(
    conn: &mut Conn,
    body: &mut Vec<u8>,
    route: &ProxyRoute,
    (timeout, who): (Duration, &Endpoint),
) -> bool {
    let Some(store) = route.cache.as_ref() else {
        return false;
    };
    let bound = store.entry_bound() as usize;
    while body.len() <= bound {
        let Ok(r) = read_record(conn, timeout).await else {
            return false;
        };
        match r.kind {
            STDOUT => body.extend_from_slice(&r.content),
            STDERR => log_stderr(who, &r.content),
            END_REQUEST => return true,
            _ => {}
        }
    }
    false
}

/// How a CGI answer is kept by the response cache, and the HTTP head it is kept with.
pub(super) type KeptCgi = (Keeping, Vec<u8>);

/// What the CGI head `head` says for the response cache's request `asked` on `route`: its
/// status, and — where the answer may be kept — how, with the HTTP head it stands for.
/// `None`: it does not parse.
pub(super) fn kept(
    head: &[u8],
    route: &ProxyRoute,
    asked: &CacheRequest,
) -> Option<(u16, Option<KeptCgi>)> {
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(head, &mut fields)
    else {
        return None;
    };
    let (status, _) = cgi_status(fields).ok()?;
    let named = fields.iter().map(|f| (f.name, f.value));
    let keep = super::answer::keeping(route, Some(asked), (status, true), named.clone())
        .map(|keeping| (keeping, http_head(status, named)));
    Some((status, keep))
}

/// The answer kept of a CGI answer read whole: its HTTP `head` (from [`http_head`]), its
/// length said, and its `body`, from `endpoint`.
pub(super) fn stored(
    (mut head, body, endpoint): (Vec<u8>, Vec<u8>, Endpoint),
    (keep, validators): Keeping,
) -> Stored {
    head.extend_from_slice(b"Content-Length: ");
    head.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    let head_len = head.len();
    head.extend_from_slice(&body);
    Stored::new(
        bytes::Bytes::from(head),
        head_len,
        endpoint,
        keep,
        validators,
    )
}
