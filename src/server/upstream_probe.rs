//! One active health check of an upstream server: a `GET` of the check's path on a new
//! connection — in HTTP/1.1, or in HTTP/2 for a group spoken to in it (`protocol`), as its
//! traffic is — its answer's status and (when asked) body judged.
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

/// [`ask`] in HTTP/2, on a connection of the probe's own.
async fn ask_h2<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    s: S,
    request: Asked<'_>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let failed = |what: &str, e: h2::Error| format!("{what} failed: {e}");
    let (mut sender, connection) =
        (h2::client::handshake(s).await).map_err(|e| failed("HTTP/2 handshake", e))?;
    let driving = async move {
        let _ = connection.await;
    };
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

/// An HTTP/1.x answer's status, and where its body starts.
fn status_of(answer: &[u8]) -> Result<(u16, usize), String> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut fields);
    match head.parse(answer) {
        Ok(httparse::Status::Complete(n)) => Ok((head.code.unwrap_or(0), n)),
        _ if answer.is_empty() => Err("closed without answering".into()),
        _ => Err("answered no HTTP/1.x response head".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        assert!(judge(b"SSH-2.0-OpenSSH\r\n", &check(None)).is_err());
    }
}
