//! The admin endpoint's client: what `espalier status`, `pool`, `recycle`, `reload` and
//! `config` send, one request per connection.
//!
//! Owns: making the request and reading the answer (`httparse`: the HTTP/1.1 codec of this
//! client). Must not touch: what the answers mean (the CLI's).

use super::config_identity;
use std::net::SocketAddr;
use std::time::Duration;

/// The client side: one request to the admin endpoint at `addr`; (status, body).
pub fn request(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
    request_with_token(addr, method, path, None)
}

/// As [`request`], carrying the admin token (actions need it).
pub fn request_with_token(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, Vec<u8>), String> {
    request_as(addr, method, path, token, None)
}

/// As [`request_with_token`], for the server of the config file `config` (a server started
/// from another file answers 409 instead of acting).
pub fn request_as(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    config: Option<&std::path::Path>,
) -> Result<(u16, Vec<u8>), String> {
    let (status, _, body) = request_with_body(addr, (method, path), token, config, &[], b"")?;
    Ok((status, body))
}

/// The answer's status, `ETag` (the configuration's version, from `/config`) and body.
pub type Answer = (u16, Option<String>, Vec<u8>);

/// As [`request_as`], with `fields` added to the head and `body` sent (the configuration
/// API's writes). A read (`GET`, `HEAD`) whose connection the endpoint reset or closed
/// before any answer is asked again, twice at most, after 100 and 300 ms: a kernel short of
/// TCP memory resets a closed socket still sending (a ten-thousand-pool status, megabytes,
/// was cut so), and a read changes nothing when asked twice. A write is never asked again.
pub fn request_with_body(
    addr: SocketAddr,
    (method, path): (&str, &str),
    token: Option<&str>,
    config: Option<&std::path::Path>,
    fields: &[(&str, &str)],
    body: &[u8],
) -> Result<Answer, String> {
    let mut head = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    if let Some(file) = config {
        head.push_str(&format!("X-Espalier-Config: {}\r\n", config_identity(file)));
    }
    for (name, value) in fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let len = body.len();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{head}Content-Length: {len}\r\nConnection: close\r\n\r\n").into_bytes();
    request.extend_from_slice(body);
    // A change applied to thousands of sites takes longer than a read.
    let wait = Duration::from_secs(if method == "GET" { 10 } else { 60 });
    // A read asked again after these pauses; a write never.
    let pauses: &[u64] = match method {
        "GET" | "HEAD" => &[100, 300],
        _ => &[],
    };
    let mut answer = ask_once(addr, &request, wait);
    let mut asked = 1;
    for &ms in pauses {
        if !matches!(answer, Err(Unanswered::Closed)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(ms));
        answer = ask_once(addr, &request, wait);
        asked += 1;
    }
    answer.map_err(|e| match e {
        Unanswered::Closed => {
            let times = if asked > 1 { format!(", {asked} times") } else { String::new() };
            format!("the admin endpoint at {addr} closed the connection before answering{times}; it may be busy: try again")
        }
        Unanswered::Other(why) => why,
    })
}

/// Why a request got no answer: the endpoint closed or reset the connection first, or
/// another reason, said.
enum Unanswered {
    Closed,
    Other(String),
}

/// `request` on one connection, its answer read within `wait`.
fn ask_once(addr: SocketAddr, request: &[u8], wait: Duration) -> Result<Answer, Unanswered> {
    use std::io::{ErrorKind, Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| Unanswered::Other(format!("cannot reach espalier's admin endpoint at {addr}: {e} (is espalier serve running? give -c FILE or --admin ADDR)")))?;
    s.set_read_timeout(Some(wait))
        .map_err(|e| Unanswered::Other(e.to_string()))?;
    let closed = |e: std::io::Error| match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::UnexpectedEof => {
            Unanswered::Closed
        }
        _ => Unanswered::Other(format!(
            "the admin endpoint at {addr} did not answer ({e}); it may be busy: try again"
        )),
    };
    s.write_all(request).map_err(closed)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(closed)?;
    if raw.is_empty() {
        return Err(Unanswered::Closed);
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(&raw) {
        Ok(httparse::Status::Complete(len)) => {
            let etag = (response.headers.iter())
                .find(|h| h.name.eq_ignore_ascii_case("etag"))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(|v| v.trim().trim_matches('"').to_string());
            Ok((response.code.unwrap_or(0), etag, raw[len..].to_vec()))
        }
        _ => Err(Unanswered::Other(format!("{addr} did not answer HTTP"))),
    }
}
