//! One active health check of an upstream server: a `GET` of the check's path on a new
//! connection — in HTTP/1.1, or in HTTP/2 for a group spoken to in it (`protocol`), as its
//! traffic is — its answer's status and (when asked) body judged; or, with `grpc_service`,
//! gRPC's health protocol (`grpc.health.v1.Health/Check`, up when `SERVING`), which a gRPC
//! server answers where it resets a plain `GET`.
//!
//! Also the master's other small GET, [`get_status`] (`[server.acme] ask`).
//!
//! Owns: the probe's request and its reading, bounded in time and size. Must not touch: what
//! a result does (the supervisor counts rises and falls, see `supervisor::upstream_checks`).

use crate::config::upstream::{ActiveCheck, ServerAddress, ServerSpec};
use rustls::pki_types::ServerName;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most of an answer a probe reads: a health page is small, and a body check looks no
/// further.
const MAX_ANSWER: usize = 64 << 10;

/// How a probe speaks TLS to an `https://` server (as its traffic does): the client
/// configuration and the name, or why there is none.
pub type ProbeTls = Option<Result<(Arc<rustls::ClientConfig>, ServerName<'static>), String>>;

/// Probes `server` once: `Ok` when it answered in time with a status in the check's range
/// (and its body holds the check's text), else why not.
pub async fn probe(
    server: &ServerSpec,
    check: &ActiveCheck,
    tls: &ProbeTls,
    http2: bool,
) -> Result<(), String> {
    let asked = Asked {
        host: check.host.as_deref().unwrap_or(&server.name),
        path: &check.path,
        https: tls.is_some(),
        http2,
        grpc: check.grpc_service.as_deref(),
    };
    match tokio::time::timeout(check.timeout, exchange(server, check, tls, asked)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    }
}

/// What a probe asks for, and how.
#[derive(Clone, Copy)]
struct Asked<'a> {
    host: &'a str,
    path: &'a str,
    https: bool,
    http2: bool,
    /// Asks gRPC's health service about this service instead.
    grpc: Option<&'a str>,
}

async fn exchange(
    server: &ServerSpec,
    check: &ActiveCheck,
    tls: &ProbeTls,
    request: Asked<'_>,
) -> Result<(), String> {
    let mut answer = Vec::with_capacity(1024);
    match &server.address {
        ServerAddress::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a)
                .await
                .map_err(|e| format!("connect failed: {e}"))?;
            match tls {
                None => ask(s, request, &mut answer).await?,
                Some(Err(e)) => return Err(e.clone()),
                Some(Ok((config, name))) => {
                    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
                    let s = connector
                        .connect(name.clone(), s)
                        .await
                        .map_err(|e| format!("TLS handshake failed: {e}"))?;
                    ask(s, request, &mut answer).await?;
                }
            }
        }
        ServerAddress::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p)
                .await
                .map_err(|e| format!("connect failed: {e}"))?;
            ask(s, request, &mut answer).await?;
        }
    }
    judge(&answer, check)
}

/// A `GET` of `target` from `authority` (`HOST:PORT`, a name resolved) in HTTP/1.1 on a
/// connection of its own, bounded by `within`: the answer's status.
pub async fn get_status(
    authority: &str,
    target: &str,
    within: std::time::Duration,
) -> Result<u16, String> {
    let exchange = async {
        let s = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| format!("connect failed: {e}"))?;
        let mut answer = Vec::with_capacity(1024);
        let asked = Asked {
            host: authority,
            path: target,
            https: false,
            http2: false,
            grpc: None,
        };
        ask(s, asked, &mut answer).await?;
        Ok(status_of(&answer)?.0)
    };
    match tokio::time::timeout(within, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {within:?}")),
    }
}

/// Sends `request` on `s` and reads the answer into `out`, as an HTTP/1.x answer (one in
/// HTTP/2 is written so: its status line and its body).
async fn ask<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    mut s: S,
    request: Asked<'_>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    if let Some(service) = request.grpc {
        return ask_grpc(s, request, service, out).await;
    }
    if request.http2 {
        return ask_h2(s, request, out).await;
    }
    let text = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: espalier-health-check\r\nConnection: close\r\n\r\n",
        request.path, request.host
    );
    s.write_all(text.as_bytes())
        .await
        .map_err(|e| format!("send failed: {e}"))?;
    read_answer(&mut s, out).await
}

/// An HTTP/2 connection of the probe's own over `s`: its sender, and the future that drives
/// it (ending when the connection does).
async fn h2_connection<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    s: S,
) -> Result<
    (
        h2::client::SendRequest<bytes::Bytes>,
        impl std::future::Future<Output = ()>,
    ),
    String,
> {
    let (sender, connection) =
        (h2::client::handshake(s).await).map_err(|e| format!("HTTP/2 handshake failed: {e}"))?;
    Ok((sender, async move {
        let _ = connection.await;
    }))
}

/// [`ask`] in HTTP/2, on a connection of the probe's own.
async fn ask_h2<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    s: S,
    request: Asked<'_>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let failed = |what: &str, e: h2::Error| format!("{what} failed: {e}");
    let (mut sender, driving) = h2_connection(s).await?;
    let asking = async {
        let scheme = if request.https { "https" } else { "http" };
        let get = http::Request::get(format!("{scheme}://{}{}", request.host, request.path))
            .header("user-agent", "espalier-health-check")
            .body(())
            .map_err(|e| format!("the check's path cannot be asked for: {e}"))?;
        let (response, _) = (sender.send_request(get, true)).map_err(|e| failed("send", e))?;
        let response = response.await.map_err(|e| failed("read", e))?;
        let status = response.status();
        out.extend_from_slice(format!("HTTP/1.1 {} -\r\n\r\n", status.as_u16()).as_bytes());
        let mut body = response.into_body();
        while let Some(data) = body.data().await {
            let data = data.map_err(|e| failed("read", e))?;
            let _ = body.flow_control().release_capacity(data.len());
            out.extend_from_slice(&data);
            if out.len() >= MAX_ANSWER {
                break;
            }
        }
        Ok(())
    };
    tokio::select! {
        r = asking => r,
        () = driving => Err("closed the connection without answering".into()),
    }
}

/// gRPC's `grpc.health.v1.Health/Check` about `service`, on a connection of the probe's
/// own: `200` written into `out` (as an answer [`judge`] reads) when the server answered
/// `SERVING` with `grpc-status: 0`, else why not.
async fn ask_grpc<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    s: S,
    request: Asked<'_>,
    service: &str,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let failed = |what: &str, e: h2::Error| format!("{what} failed: {e}");
    let (mut sender, driving) = h2_connection(s).await?;
    let asking = async {
        let scheme = if request.https { "https" } else { "http" };
        let uri = format!("{scheme}://{}/grpc.health.v1.Health/Check", request.host);
        let post = http::Request::post(uri)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("user-agent", "espalier-health-check")
            .body(())
            .map_err(|e| format!("the check cannot be asked: {e}"))?;
        let (response, mut body_out) =
            (sender.send_request(post, false)).map_err(|e| failed("send", e))?;
        body_out
            .send_data(grpc_health_request(service).into(), true)
            .map_err(|e| failed("send", e))?;
        let response = response.await.map_err(|e| failed("read", e))?;
        if response.status() != http::StatusCode::OK {
            return Err(format!("answered HTTP {}", response.status().as_u16()));
        }
        let mut status_in_head = grpc_status(response.headers());
        let mut body = response.into_body();
        let mut message = Vec::new();
        while let Some(data) = body.data().await {
            let data = data.map_err(|e| failed("read", e))?;
            let _ = body.flow_control().release_capacity(data.len());
            message.extend_from_slice(&data);
            if message.len() >= MAX_ANSWER {
                return Err("answered more than a health check's answer".into());
            }
        }
        if status_in_head.is_none() {
            let trailers = body.trailers().await.map_err(|e| failed("read", e))?;
            status_in_head = trailers.as_ref().and_then(grpc_status);
        }
        match status_in_head {
            Some(0) => {}
            Some(code) => return Err(format!("answered grpc-status {code}")),
            None => return Err("answered no grpc-status".into()),
        }
        match grpc_health_status(&message)? {
            1 => {
                out.extend_from_slice(b"HTTP/1.1 200 -\r\n\r\n");
                Ok(())
            }
            serving => Err(format!("answered {}", serving_name(serving))),
        }
    };
    tokio::select! {
        r = asking => r,
        () = driving => Err("closed the connection without answering".into()),
    }
}

/// A `HealthCheckRequest { service }` in a gRPC frame: uncompressed, its length, then the
/// message — field 1, a string. Written by hand: two bytes of protobuf do not need a
/// code generator.
fn grpc_health_request(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            message.push((n as u8) | 0x80);
            n >>= 7;
        }
        message.push(n as u8);
        message.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// The `status` of a `HealthCheckResponse` in a gRPC frame (field 1, an enum: 1 SERVING);
/// 0 (UNKNOWN) when absent, as protobuf reads a missing field.
fn grpc_health_status(frame: &[u8]) -> Result<u64, String> {
    let bad = || "answered no gRPC health message".to_string();
    let (&compressed, rest) = frame.split_first().ok_or_else(bad)?;
    if compressed != 0 || rest.len() < 4 {
        return Err(bad());
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let mut m = rest.get(4..4 + len).ok_or_else(bad)?;
    let mut status = 0;
    while let Some((&tag, rest)) = m.split_first() {
        m = rest;
        match tag & 7 {
            0 => {
                let (value, used) = varint(m).ok_or_else(bad)?;
                m = &m[used..];
                if tag >> 3 == 1 {
                    status = value;
                }
            }
            2 => {
                let (len, used) = varint(m).ok_or_else(bad)?;
                m = m.get(used + len as usize..).ok_or_else(bad)?;
            }
            _ => return Err(bad()),
        }
    }
    Ok(status)
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (k, &byte) in b.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * k);
        if byte & 0x80 == 0 {
            return Some((value, k + 1));
        }
    }
    None
}

fn serving_name(status: u64) -> &'static str {
    match status {
        0 => "UNKNOWN",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "a status other than SERVING",
    }
}

fn grpc_status(fields: &http::HeaderMap) -> Option<u32> {
    fields.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// Reads until the server closes (the request said `Connection: close`) or the bound.
async fn read_answer<R: AsyncReadExt + Unpin>(r: &mut R, out: &mut Vec<u8>) -> Result<(), String> {
    let mut buf = [0u8; 8192];
    while out.len() < MAX_ANSWER {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset after a whole answer (some servers close so) still judges the answer.
            Err(_) if !out.is_empty() => break,
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
    Ok(())
}

/// Whether `answer` passes `check`, or why not.
fn judge(answer: &[u8], check: &ActiveCheck) -> Result<(), String> {
    let (status, body_at) = status_of(answer)?;
    if status < check.status.0 || status > check.status.1 {
        return Err(format!("answered {status}"));
    }
    if let Some(text) = &check.body {
        let body = &answer[body_at..];
        if memchr::memmem::find(body, text.as_bytes()).is_none() {
            return Err(format!("answered {status} without \"{text}\" in its body"));
        }
    }
    Ok(())
}

/// An HTTP/1.x answer's final status, and where its body starts: interim answers (1xx,
/// such as a `100 Continue` or `103 Early Hints` a server sends first) are skipped.
fn status_of(answer: &[u8]) -> Result<(u16, usize), String> {
    let mut at = 0;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut head = httparse::Response::new(&mut fields);
        match head.parse(&answer[at..]) {
            Ok(httparse::Status::Complete(n)) => match head.code.unwrap_or(0) {
                100..=199 => at += n,
                code => return Ok((code, at + n)),
            },
            _ if answer.is_empty() => return Err("closed without answering".into()),
            _ if at > 0 => return Err("answered only an interim (1xx) response".into()),
            _ => return Err("answered no HTTP/1.x response head".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn grpc_health_messages_are_written_and_read_as_protobuf() {
        assert_eq!(grpc_health_request(""), [0, 0, 0, 0, 0]);
        assert_eq!(
            grpc_health_request("db"),
            [0, 0, 0, 0, 4, 0x0a, 2, b'd', b'b']
        );
        let long = "s".repeat(200);
        assert_eq!(&grpc_health_request(&long)[5..8], &[0x0a, 0xc8, 0x01]);
        assert_eq!(grpc_health_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(grpc_health_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        // An empty message is UNKNOWN; an unknown string field is skipped.
        assert_eq!(grpc_health_status(&[0, 0, 0, 0, 0]), Ok(0));
        assert_eq!(
            grpc_health_status(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 1]),
            Ok(1)
        );
        assert!(grpc_health_status(&[0, 0, 0, 0, 9, 0x08]).is_err());
        assert!(grpc_health_status(&[1, 0, 0, 0, 2, 0x08, 1]).is_err());
    }

    fn check(body: Option<&str>) -> ActiveCheck {
        ActiveCheck {
            path: "/healthz".into(),
            host: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            status: (200, 399),
            body: body.map(String::from),
            rise: 2,
            fall: 3,
            grpc_service: None,
        }
    }

    #[test]
    fn an_answer_passes_by_its_status_and_body() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(judge(ok, &check(None)), Ok(()));
        assert_eq!(judge(ok, &check(Some("ok"))), Ok(()));
        assert_eq!(
            judge(ok, &check(Some("ready"))),
            Err("answered 200 without \"ready\" in its body".into())
        );
        let bad = b"HTTP/1.1 503 Service Unavailable\r\n\r\n";
        assert_eq!(judge(bad, &check(None)), Err("answered 503".into()));
        assert!(judge(b"", &check(None)).is_err());
        let early = b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\nok";
        assert_eq!(judge(early, &check(Some("ok"))), Ok(()));
        assert!(judge(b"HTTP/1.1 100 Continue\r\n\r\n", &check(None)).is_err());
        assert!(judge(b"SSH-2.0-OpenSSH\r\n", &check(None)).is_err());
    }
}
