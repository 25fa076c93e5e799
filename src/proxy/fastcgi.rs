//! `transport = "fastcgi"`: the request forwarded to an app process (php-fpm, php-cgi) in
//! FastCGI records, its CGI answer turned back into an HTTP response — IIS's FastCGI module,
//! and nginx's `fastcgi_pass`.
//!
//! Owns: sending a request's records ([`super::cgi`] built them) and its body, and reading a
//! CGI response (`Status:`, `Location:`) back into HTTP. Must not touch: which
//! process answers or the client connection's loop (shared with [`super::forward`]).
//!
//! The record layer is written here rather than taken from the `fastcgi-client` crate: CGI
//! variables must carry a header's raw bytes (that crate's `Params` holds `str`), the body
//! must stream both ways through fixed buffers, and its buffered keep-alive call keeps only
//! the last STDOUT record of an answer (read in its source, 0.11). The protocol is eight-byte
//! headers and length-prefixed pairs (FastCGI 1.0 spec, §3–§5).
//!
//! A chunked request body is answered `411 Length Required`: FastCGI needs `CONTENT_LENGTH`
//! before the body, and espalier does not buffer bodies to learn it (nginx before 1.3.9 did
//! the same).
use super::cgi::*;
use super::encode;
use super::forward::{Failure, LentConnection, Outcome};
use super::request::HOP_BY_HOP;
use super::route::ProxyRoute;
use super::upstream::Conn;
use super::wire::{kept_fields, read_timeout, send_continue, to_client, write_timeout, OwnAnswers};
use super::Endpoint;
use crate::compress::Stream;
use std::borrow::Cow;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// One record read from the app.
struct Record {
    kind: u8,
    content: Vec<u8>,
}

async fn read_exact_timeout(conn: &mut Conn, buf: &mut [u8], timeout: Duration) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let n = read_timeout(conn, &mut buf[got..], timeout).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(())
}

async fn read_record(conn: &mut Conn, timeout: Duration) -> io::Result<Record> {
    let mut head = [0u8; 8];
    read_exact_timeout(conn, &mut head, timeout).await?;
    if head[0] != VERSION {
        return Err(io::Error::other("not a FastCGI record"));
    }
    let len = u16::from_be_bytes([head[4], head[5]]) as usize;
    let mut content = vec![0u8; len + head[6] as usize];
    read_exact_timeout(conn, &mut content, timeout).await?;
    content.truncate(len);
    Ok(Record {
        kind: head[1],
        content,
    })
}

/// Sends the request body as STDIN records, then the empty one that ends it: what the client
/// buffer holds first, then through one fixed buffer. Leaves in `rbuf` what follows the body.
async fn send_stdin<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    rbuf: &mut Vec<u8>,
    conn: &mut Conn,
    total: u64,
    client_timeout: Duration,
    upstream_timeout: Duration,
) -> Result<(), Failure> {
    let mut out = Vec::with_capacity(
        MAX_RECORD.min(
            usize::try_from(total)
                .unwrap_or(usize::MAX)
                .saturating_add(64),
        ) + 16,
    );
    let have = (rbuf.len() as u64).min(total) as usize;
    for part in rbuf[..have].chunks(MAX_RECORD) {
        record(&mut out, STDIN, part);
    }
    rbuf.drain(..have);
    let mut left = total - have as u64;
    let mut buf = vec![0u8; if left > 0 { 32 << 10 } else { 0 }];
    loop {
        if left == 0 {
            record(&mut out, STDIN, &[]);
        }
        if !out.is_empty() {
            write_timeout(conn, &out, upstream_timeout)
                .await
                .map_err(|_| Failure::Answer(502))?;
            out.clear();
        }
        if left == 0 {
            return Ok(());
        }
        let want = (left as usize).min(buf.len());
        let n = match read_timeout(client, &mut buf[..want], client_timeout).await {
            Ok(0) | Err(_) => return Err(Failure::Drop),
            Ok(n) => n,
        };
        record(&mut out, STDIN, &buf[..n]);
        left -= n as u64;
    }
}

/// How the answer goes to the client.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientFraming {
    Length(u64),
    Chunked,
    /// An HTTP/1.0 client without a length: the close ends the body.
    Close,
    None,
}

/// Reads records until the CGI header block is complete; returns it whole (with the start
/// of the body after it) and its length.
async fn read_cgi_head(
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

fn status_of(e: io::Error) -> u16 {
    if e.kind() == io::ErrorKind::TimedOut {
        504
    } else {
        502
    }
}

/// An app's STDERR goes to espalier's log (the worker's stderr), line by line, named.
fn log_stderr(who: &Endpoint, text: &[u8]) {
    for line in String::from_utf8_lossy(text)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        eprintln!("espalier[fastcgi {who}]: {line}");
    }
}

/// Forwards a request to a FastCGI app process and relays its answer.
pub async fn forward<C: AsyncRead + AsyncWrite + Unpin>(
    client: LentConnection<'_, C>,
    req: FastCgiRequest,
    route: &ProxyRoute,
) -> Outcome {
    let LentConnection {
        stream,
        rbuf,
        clock,
        body_timeout,
        report,
        fields: edits,
        pages,
        ..
    } = client;
    let (minor, head_only) = (req.client_minor, req.head_only);
    let own = OwnAnswers {
        report,
        clock,
        client_minor: minor,
        head_only,
        fields: edits,
        pages,
    };
    if req.chunked {
        return own.answer(stream, 411).await;
    }
    let timeout = route.settings().response_timeout;
    if !send_continue(stream, req.expect_continue, body_timeout).await {
        return Outcome::Close;
    }
    let mut avoid = None;
    let mut tries = 0;
    let (endpoint, mut conn, first, _slot) = loop {
        tries += 1;
        // The slot (under max_requests_per_process) is held until the answer is done.
        let (endpoint, mut conn, slot) = match route.connection(avoid.take()).await {
            Ok(c) => c,
            Err(status) => {
                if status != 503 {
                    route.log_failure(None, status, "could not be connected to");
                }
                return own.unavailable(stream, status).await;
            }
        };
        if write_timeout(&mut conn, &req.records, timeout)
            .await
            .is_err()
        {
            if req.retryable && tries < 2 {
                avoid = Some(endpoint);
                continue;
            }
            route.log_failure(Some(&endpoint), 502, "did not take the FastCGI request");
            return own.answer(stream, 502).await;
        }
        match send_stdin(stream, rbuf, &mut conn, req.body_len, body_timeout, timeout).await {
            Ok(()) => {}
            Err(Failure::Answer(status)) => {
                route.log_failure(Some(&endpoint), status, "did not take the request's body");
                return own.answer(stream, status).await;
            }
            Err(Failure::Drop) => return Outcome::Close,
        }
        let asked = std::time::Instant::now();
        match read_record(&mut conn, timeout).await {
            Ok(r) => {
                report
                    .upstream_micros
                    .set(Some(asked.elapsed().as_micros() as u64));
                route.answered(&endpoint);
                break (endpoint, conn, r, slot);
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && req.retryable && tries < 2 => {
                avoid = Some(endpoint);
            }
            Err(e) => {
                let cause = format!("did not answer ({e})");
                let status = status_of(e);
                if status == 504 {
                    route.timed_out(&endpoint);
                }
                route.log_failure(Some(&endpoint), status, &cause);
                return own.answer(stream, status).await;
            }
        }
    };
    let (head, head_len) = match read_cgi_head(&mut conn, first, timeout, &endpoint).await {
        Ok(h) => h,
        Err(status) => {
            let cause =
                "ended or broke its answer before a whole CGI header block (or one over its bound)";
            route.log_failure(Some(&endpoint), status, cause);
            return own.answer(stream, status).await;
        }
    };
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(&head, &mut fields)
    else {
        route.log_failure(
            Some(&endpoint),
            502,
            "answered a CGI header block that does not parse",
        );
        return own.answer(stream, 502).await;
    };
    // CGI: `Status: 404 Not Found`; a `Location` alone is a redirect (RFC 3875 §6.2).
    let mut status = 200u16;
    let mut length: Option<u64> = None;
    let mut located = false;
    for f in fields.iter() {
        if f.name.eq_ignore_ascii_case("status") {
            let code = std::str::from_utf8(f.value)
                .ok()
                .and_then(|v| v.get(..3))
                .and_then(|c| c.parse().ok());
            match code {
                Some(c) if (200..600).contains(&c) => status = c,
                _ => {
                    route.log_failure(
                        Some(&endpoint),
                        502,
                        "answered a `Status` that is not a status code",
                    );
                    return own.answer(stream, 502).await;
                }
            }
        } else if f.name.eq_ignore_ascii_case("location") {
            located = true;
        } else if f.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(f.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        }
    }
    if located && !fields.iter().any(|f| f.name.eq_ignore_ascii_case("status")) {
        status = 302;
    }
    // The site's page instead of the script's error body (the FastCGI connection carries
    // this request only: dropping it unread costs nothing more).
    if own.replaces(status) {
        let kept = kept_fields(fields.iter().map(|f| (f.name, f.value)));
        return own.replace(stream, status, &kept).await;
    }
    report.status.set(status);
    let bodiless = head_only || status == 204 || status == 304;
    let plan = encode::plan(
        req.compress,
        status,
        head_only,
        fields.iter().map(|f| (f.name, f.value)),
    );
    let mut encoder = match plan {
        encode::Plan::Compress(c) if !bodiless => Stream::new(c).ok(),
        _ => None,
    };
    let framing = match (bodiless, length.filter(|_| encoder.is_none()), minor) {
        (true, _, _) => ClientFraming::None,
        (false, Some(n), _) => ClientFraming::Length(n),
        (false, None, 1) => ClientFraming::Chunked,
        (false, None, _) => ClientFraming::Close,
    };
    let keep = req.keep_alive && framing != ClientFraming::Close;
    let mut out = Vec::with_capacity(head_len + 256);
    out.extend_from_slice(if minor == 0 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    out.extend_from_slice(status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(crate::http::reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&clock.common());
    for f in fields.iter() {
        if f.name.eq_ignore_ascii_case("status")
            || HOP_BY_HOP.iter().any(|d| f.name.eq_ignore_ascii_case(d))
            || edits.is_some_and(|e| e.removes(f.name.as_bytes()))
            || (f.name.eq_ignore_ascii_case("content-length") && !bodiless)
        {
            continue;
        }
        let value = match plan {
            encode::Plan::Compress(_) if encoder.is_some() => {
                match encode::rewritten(f.name, f.value) {
                    Some(v) => Cow::Owned(v),
                    None => continue,
                }
            }
            encode::Plan::Vary | encode::Plan::Compress(_)
                if f.name.eq_ignore_ascii_case("vary") =>
            {
                Cow::Owned(encode::with_accept_encoding(f.value))
            }
            _ => Cow::Borrowed(f.value),
        };
        out.extend_from_slice(f.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(&value);
        out.extend_from_slice(b"\r\n");
    }
    if plan != encode::Plan::AsIs && !fields.iter().any(|f| f.name.eq_ignore_ascii_case("vary")) {
        out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
    }
    if let (encode::Plan::Compress(c), Some(_)) = (plan, &encoder) {
        out.extend_from_slice(format!("Content-Encoding: {}\r\n", c.token()).as_bytes());
    }
    if let Some(e) = edits {
        e.add_missing(&mut out, |name| {
            !e.removes(name)
                && fields
                    .iter()
                    .any(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
        });
    }
    match framing {
        ClientFraming::Length(n) => {
            out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
        }
        ClientFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        _ => {}
    }
    match (keep, minor) {
        (false, 1) => out.extend_from_slice(b"Connection: close\r\n"),
        (true, 0) => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
    report.head.set(out.len() as u64);
    let mut sent: u64 = 0;
    let mut clean = true;
    // The body: what came after the header block, then STDOUT records until END_REQUEST.
    let mut data = head[head_len..].to_vec();
    loop {
        // Compressed, the data is what the encoder gives for it.
        if let Some(e) = encoder.as_mut().filter(|_| !data.is_empty()) {
            if e.push(&data).is_err() {
                return Outcome::Close;
            }
            data = e.take();
        }
        if !data.is_empty() {
            match framing {
                ClientFraming::None => {}
                ClientFraming::Length(n) => {
                    let take = (data.len() as u64).min(n - sent) as usize;
                    clean &= take == data.len();
                    out.extend_from_slice(&data[..take]);
                    sent += take as u64;
                }
                ClientFraming::Chunked => {
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(&data);
                    out.extend_from_slice(b"\r\n");
                }
                ClientFraming::Close => out.extend_from_slice(&data),
            }
            data.clear();
        }
        // Write when a record's worth is waiting; small answers go out once, at the end.
        if out.len() >= MAX_RECORD {
            if to_client(stream, report, &out, body_timeout).await.is_err() {
                return Outcome::Close;
            }
            out.clear();
        }
        let r = match read_record(&mut conn, timeout).await {
            Ok(r) => r,
            Err(_) => {
                // The head may be out already: the client sees the close.
                let _ = to_client(stream, report, &out, body_timeout).await;
                return Outcome::Close;
            }
        };
        match r.kind {
            STDOUT => data = r.content,
            STDERR => log_stderr(&endpoint, &r.content),
            END_REQUEST => break,
            _ => {}
        }
    }
    if let Some(e) = encoder {
        match e.finish() {
            Ok(tail) if framing == ClientFraming::Chunked && !tail.is_empty() => {
                out.extend_from_slice(format!("{:x}\r\n", tail.len()).as_bytes());
                out.extend_from_slice(&tail);
                out.extend_from_slice(b"\r\n");
            }
            Ok(tail) => out.extend_from_slice(&tail),
            Err(_) => return Outcome::Close,
        }
    }
    if framing == ClientFraming::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    let complete = match framing {
        ClientFraming::Length(n) => sent == n,
        _ => true,
    };
    if to_client(stream, report, &out, body_timeout).await.is_err() {
        return Outcome::Close;
    }
    // The app's connection is not kept (nor asked to stay, see `cgi::BEGIN_REQUEST`): a
    // php-fpm child serves one connection at a time, so an idle kept connection holds a
    // child that another client is waiting for (nginx closes it too, without
    // `fastcgi_keep_conn`).
    drop(conn);
    // The body was sent whole before the answer was read (`send_stdin`).
    match (complete && clean, keep) {
        (true, true) => Outcome::KeepAlive,
        (true, false) => Outcome::Answered,
        (false, _) => Outcome::Close,
    }
}
