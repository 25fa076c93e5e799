//! `transport = "fastcgi"`: the request forwarded to an app process (php-fpm, php-cgi) in
//! FastCGI records, its CGI answer turned back into an HTTP response — IIS's FastCGI module,
//! and nginx's `fastcgi_pass`.
//!
//! Owns: the CGI variables of a request ([`FastCgiRequest::new`]: `SCRIPT_FILENAME` from the
//! site's `root` and the normalized path, `PATH_INFO`, `HTTP_*` without `HTTP_PROXY`), the
//! record framing, and reading a CGI response (`Status:`, `Location:`). Must not touch: which
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

use super::forward::{answer, read_timeout, write_timeout, Client, Failure, Outcome, ProxyRoute};
use super::upstream::Conn;
use super::Endpoint;
use crate::http::{Framing, Method, Request};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::net::TcpStream;

const VERSION: u8 = 1;
const BEGIN_REQUEST: u8 = 1;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
const STDERR: u8 = 7;
const RESPONDER: u16 = 1;
const KEEP_CONN: u8 = 1;
/// Every request on a connection is request 1, one at a time (as nginx does).
const REQUEST_ID: u16 = 1;
const MAX_RECORD: usize = 65535;
/// Largest CGI header block accepted from an app.
const MAX_CGI_HEAD: usize = 64 << 10;

/// A request as FastCGI records, ready to send (its body follows from the client).
pub struct FastCgiRequest {
    /// BEGIN_REQUEST and every PARAMS record, the empty one included.
    records: Vec<u8>,
    body_len: u64,
    head_only: bool,
    client_minor: u8,
    keep_alive: bool,
    retryable: bool,
    expect_continue: bool,
    chunked: bool,
}

fn record(out: &mut Vec<u8>, kind: u8, content: &[u8]) {
    debug_assert!(content.len() <= MAX_RECORD);
    let len = content.len() as u16;
    let padding = (8 - content.len() % 8) % 8;
    out.extend_from_slice(&[
        VERSION,
        kind,
        (REQUEST_ID >> 8) as u8,
        REQUEST_ID as u8,
        (len >> 8) as u8,
        len as u8,
        padding as u8,
        0,
    ]);
    out.extend_from_slice(content);
    out.extend_from_slice(&[0u8; 8][..padding]);
}

fn pair_len(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

fn pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    pair_len(out, name.len());
    pair_len(out, value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// The script a normalized path names under the document root: `(SCRIPT_NAME, PATH_INFO)`.
/// `/a/b.php/x/y` → (`/a/b.php`, `/x/y`); `/dir/` → (`/dir/index.php`, ``).
pub fn split_script(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&path[from..], b".php") {
        let end = from + i + 4;
        if end == path.len() || path[end] == b'/' {
            return (path[..end].to_vec(), path[end..].to_vec());
        }
        from = end;
    }
    if path.ends_with(b"/") {
        let mut script = path.to_vec();
        script.extend_from_slice(b"index.php");
        return (script, Vec::new());
    }
    (path.to_vec(), Vec::new())
}

/// Where the connection came from and arrived, for the CGI variables.
pub struct Addresses {
    pub peer: Option<SocketAddr>,
    pub local: Option<SocketAddr>,
}

impl FastCgiRequest {
    /// `req` as FastCGI records; `path` is its normalized path (the app was chosen on it),
    /// `root` the site's document root.
    pub fn new(
        req: &Request<'_>,
        path: &[u8],
        root: &Path,
        framing: Framing,
        keep_alive: bool,
        expect_continue: bool,
        addresses: &Addresses,
    ) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let (script, path_info) = split_script(path);
        let root_bytes = root.as_os_str().as_bytes();
        let mut filename = root_bytes.trim_ascii_end().to_vec();
        while filename.ends_with(b"/") {
            filename.pop();
        }
        filename.extend_from_slice(&script);
        let mut params = Vec::with_capacity(1024);
        let mut uri = req.path.as_bytes().to_vec();
        if !req.query.is_empty() {
            uri.push(b'?');
            uri.extend_from_slice(req.query.as_bytes());
        }
        let body_len = match framing {
            Framing::Length(n) => n,
            _ => 0,
        };
        let protocol: &[u8] = if req.minor_version == 0 {
            b"HTTP/1.0"
        } else {
            b"HTTP/1.1"
        };
        let host = req.host().unwrap_or("");
        let server_name = host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        let fixed: [(&[u8], &[u8]); 11] = [
            (b"GATEWAY_INTERFACE", b"CGI/1.1"),
            (b"SERVER_SOFTWARE", b"espalier"),
            (b"SERVER_PROTOCOL", protocol),
            (b"REQUEST_METHOD", req.method_text.as_bytes()),
            (b"REQUEST_URI", &uri),
            (b"DOCUMENT_URI", path),
            (b"QUERY_STRING", req.query.as_bytes()),
            (b"DOCUMENT_ROOT", root_bytes),
            (b"SCRIPT_NAME", &script),
            (b"SCRIPT_FILENAME", &filename),
            // php-cgi's cgi.force_redirect wants it; php-fpm ignores it.
            (b"REDIRECT_STATUS", b"200"),
        ];
        for (n, v) in fixed {
            pair(&mut params, n, v);
        }
        pair(&mut params, b"PATH_INFO", &path_info);
        pair(&mut params, b"SERVER_NAME", server_name.as_bytes());
        if let Some(a) = addresses.peer {
            pair(&mut params, b"REMOTE_ADDR", a.ip().to_string().as_bytes());
            pair(&mut params, b"REMOTE_PORT", a.port().to_string().as_bytes());
        }
        if let Some(a) = addresses.local {
            pair(&mut params, b"SERVER_ADDR", a.ip().to_string().as_bytes());
            pair(&mut params, b"SERVER_PORT", a.port().to_string().as_bytes());
        }
        if !matches!(framing, Framing::None) {
            pair(
                &mut params,
                b"CONTENT_LENGTH",
                body_len.to_string().as_bytes(),
            );
        }
        let mut name = Vec::with_capacity(64);
        for h in req.headers {
            if h.name.eq_ignore_ascii_case("content-type") {
                pair(&mut params, b"CONTENT_TYPE", h.value);
                continue;
            }
            // httpoxy: a client's `Proxy:` must never become HTTP_PROXY in the app.
            if h.name.eq_ignore_ascii_case("content-length")
                || h.name.eq_ignore_ascii_case("proxy")
                || h.name.contains('_')
            {
                continue;
            }
            name.clear();
            name.extend_from_slice(b"HTTP_");
            name.extend(h.name.bytes().map(|b| match b {
                b'-' => b'_',
                b => b.to_ascii_uppercase(),
            }));
            pair(&mut params, &name, h.value);
        }
        let mut records = Vec::with_capacity(params.len() + 64);
        record(
            &mut records,
            BEGIN_REQUEST,
            &[
                (RESPONDER >> 8) as u8,
                RESPONDER as u8,
                KEEP_CONN,
                0,
                0,
                0,
                0,
                0,
            ],
        );
        for part in params.chunks(MAX_RECORD) {
            record(&mut records, PARAMS, part);
        }
        record(&mut records, PARAMS, &[]);
        let idempotent = matches!(req.method_text, "GET" | "HEAD" | "OPTIONS");
        FastCgiRequest {
            records,
            body_len,
            head_only: req.method == Method::Head,
            client_minor: req.minor_version,
            keep_alive,
            retryable: idempotent && matches!(framing, Framing::None),
            expect_continue,
            chunked: matches!(framing, Framing::Chunked),
        }
    }
}

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
async fn send_stdin(
    client: &mut TcpStream,
    rbuf: &mut Vec<u8>,
    conn: &mut Conn,
    total: u64,
    client_timeout: Duration,
    upstream_timeout: Duration,
) -> Result<(), Failure> {
    let mut out = Vec::with_capacity(MAX_RECORD.min(total as usize + 64) + 16);
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
pub async fn forward(client: Client<'_>, req: FastCgiRequest, route: &ProxyRoute) -> Outcome {
    route.count_forward();
    let Client {
        stream,
        rbuf,
        clock,
        body_timeout,
        ..
    } = client;
    let (minor, head_only) = (req.client_minor, req.head_only);
    if req.chunked {
        return answer(stream, clock, 411, minor, head_only).await;
    }
    let timeout = route.settings().response_timeout;
    if req.expect_continue
        && write_timeout(stream, b"HTTP/1.1 100 Continue\r\n\r\n", body_timeout)
            .await
            .is_err()
    {
        return Outcome::Close;
    }
    let mut avoid = None;
    let mut tries = 0;
    let (endpoint, mut conn, first) = loop {
        tries += 1;
        let (endpoint, mut conn) = match route.connection(avoid.take()).await {
            Ok(c) => c,
            Err(status) => return answer(stream, clock, status, minor, head_only).await,
        };
        if write_timeout(&mut conn, &req.records, timeout)
            .await
            .is_err()
        {
            if req.retryable && tries < 2 {
                avoid = Some(endpoint);
                continue;
            }
            return answer(stream, clock, 502, minor, head_only).await;
        }
        match send_stdin(stream, rbuf, &mut conn, req.body_len, body_timeout, timeout).await {
            Ok(()) => {}
            Err(Failure::Answer(status)) => {
                return answer(stream, clock, status, minor, head_only).await
            }
            Err(Failure::Drop) => return Outcome::Close,
        }
        match read_record(&mut conn, timeout).await {
            Ok(r) => break (endpoint, conn, r),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && req.retryable && tries < 2 => {
                avoid = Some(endpoint);
            }
            Err(e) => return answer(stream, clock, status_of(e), minor, head_only).await,
        }
    };
    let (head, head_len) = match read_cgi_head(&mut conn, first, timeout, &endpoint).await {
        Ok(h) => h,
        Err(status) => return answer(stream, clock, status, minor, head_only).await,
    };
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(&head, &mut fields)
    else {
        return answer(stream, clock, 502, minor, head_only).await;
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
                _ => return answer(stream, clock, 502, minor, head_only).await,
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
    let bodiless = head_only || status == 204 || status == 304;
    let framing = match (bodiless, length, minor) {
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
    const DROPPED: [&str; 8] = [
        "status",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    ];
    for f in fields.iter() {
        if DROPPED.iter().any(|d| f.name.eq_ignore_ascii_case(d))
            || (f.name.eq_ignore_ascii_case("content-length") && !bodiless)
        {
            continue;
        }
        out.extend_from_slice(f.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(f.value);
        out.extend_from_slice(b"\r\n");
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
    let mut sent: u64 = 0;
    let mut clean = true;
    // The body: what came after the header block, then STDOUT records until END_REQUEST.
    let mut data = head[head_len..].to_vec();
    loop {
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
            if write_timeout(stream, &out, body_timeout).await.is_err() {
                return Outcome::Close;
            }
            out.clear();
        }
        let r = match read_record(&mut conn, timeout).await {
            Ok(r) => r,
            Err(_) => {
                // The head may be out already: the client sees the close.
                let _ = write_timeout(stream, &out, body_timeout).await;
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
    if framing == ClientFraming::Chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    let complete = match framing {
        ClientFraming::Length(n) => sent == n,
        _ => true,
    };
    if write_timeout(stream, &out, body_timeout).await.is_err() {
        return Outcome::Close;
    }
    if clean {
        route.keep(&endpoint, conn);
    }
    if keep && complete && clean {
        Outcome::KeepAlive
    } else {
        Outcome::Close
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_and_path_info_are_split_at_php() {
        let s = |p: &str| {
            let (a, b) = split_script(p.as_bytes());
            (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap())
        };
        assert_eq!(s("/index.php"), ("/index.php".into(), "".into()));
        assert_eq!(s("/a/b.php/x/y"), ("/a/b.php".into(), "/x/y".into()));
        assert_eq!(s("/a.phpx/b.php"), ("/a.phpx/b.php".into(), "".into()));
        assert_eq!(s("/dir/"), ("/dir/index.php".into(), "".into()));
        assert_eq!(s("/style.css"), ("/style.css".into(), "".into()));
    }

    #[test]
    fn records_are_padded_to_eight_bytes_and_pairs_take_long_lengths() {
        let mut out = Vec::new();
        record(&mut out, STDIN, b"hello");
        assert_eq!(&out[..8], &[1, STDIN, 0, 1, 0, 5, 3, 0]);
        assert_eq!(out.len(), 16);
        let mut p = Vec::new();
        pair(&mut p, b"A", &[b'x'; 200]);
        assert_eq!(&p[..5], &[1, 0x80, 0, 0, 200]);
        assert_eq!(p.len(), 1 + 4 + 1 + 200);
    }
}
