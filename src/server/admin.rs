//! The admin endpoint on `[server] admin` (default 127.0.0.1:9180): `GET /status` (JSON),
//! `GET /metrics` (Prometheus text), `POST /reload` and `POST /pools/NAME/stop|start|recycle`;
//! and the client the CLI's `espalier status`, `pool`, `recycle` and `reload` use.
//!
//! Owns: the endpoint's routes, the command and reply types, and the client side. Both sides
//! speak through the crate's one HTTP engine: requests are parsed with
//! [`crate::http::parse_head`] and answered with [`crate::http::Responder`]; the client reads
//! responses with `httparse`, the parser the engine is built on.
//! Must not touch: pool state (it asks the supervisor over a channel and prints the answer).

use super::log;
use super::status::Status;
use crate::config::Config;
use crate::http::{parse_head, Head, HeadLimits, Method, Responder, MAX_HEADERS};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// What the admin endpoint asks of the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    Status,
    StopPool(String),
    StartPool(String),
    Recycle(String),
    Reload,
}

/// The supervisor's answer.
#[derive(Debug)]
pub enum AdminReply {
    Status(Box<Status>),
    /// A command's outcome: the HTTP status (200 done, 400 refused, 404 no such pool, 409 not
    /// now) and one line for the operator.
    Done {
        status: u16,
        message: String,
    },
}

/// An admin request: what `espalier status` and friends send.
type Request = (AdminCommand, oneshot::Sender<AdminReply>);

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 1024,
    max_header_size: 8192,
    max_headers: 32,
    max_body_size: 0,
};

/// The command a method and path ask for, and whether the answer is metrics text.
fn route(method: Method, path: &str) -> Option<(AdminCommand, bool)> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    Some(match (method, parts.as_slice()) {
        (Method::Get, ["status"]) => (AdminCommand::Status, false),
        (Method::Get, ["metrics"]) => (AdminCommand::Status, true),
        (Method::Post, ["pools", name, "stop"]) => {
            (AdminCommand::StopPool(name.to_string()), false)
        }
        (Method::Post, ["pools", name, "start"]) => {
            (AdminCommand::StartPool(name.to_string()), false)
        }
        (Method::Post, ["pools", name, "recycle"]) => {
            (AdminCommand::Recycle(name.to_string()), false)
        }
        (Method::Post, ["reload"]) => (AdminCommand::Reload, false),
        _ => return None,
    })
}

/// Starts the endpoint. If its address cannot be bound, serving goes on without it and the
/// master says so once.
pub(super) fn start<E: From<Request> + Send + 'static>(
    config: &Config,
    events: mpsc::UnboundedSender<E>,
) {
    let addr = config.server.admin;
    let listener = match std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .and_then(tokio::net::TcpListener::from_std)
    {
        Ok(l) => l,
        Err(e) => {
            log("master", format!("admin endpoint disabled: cannot listen on {addr}: {e} (set [server] admin to a free address)"));
            return;
        }
    };
    log(
        "master",
        format!("admin endpoint on http://{addr} (/status, /metrics)"),
    );
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let events = events.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), handle(stream, events)).await;
            });
        }
    });
}

/// One request per connection, answered and closed.
async fn handle<E: From<Request>>(
    mut stream: tokio::net::TcpStream,
    events: mpsc::UnboundedSender<E>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut out = Vec::with_capacity(1024);
    let common = crate::http::clock::common_now();
    loop {
        let n = stream.read_buf(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let (command, head_only) = match parse_head(&buf, &LIMITS, &mut headers) {
            Ok(Head::Partial) => continue,
            Err(e) => {
                Responder::new(&mut out, &common, false, 1, false).error(e.status());
                break;
            }
            Ok(Head::Complete { request, .. }) => (
                route(request.method, request.path),
                request.method == Method::Head,
            ),
        };
        let mut resp = Responder::new(&mut out, &common, false, 1, head_only);
        let Some((command, metrics)) = command else {
            resp.simple(
                404,
                "text/plain; charset=utf-8",
                b"not found: GET /status, GET /metrics, POST /reload, POST /pools/NAME/stop|start|recycle\n",
            );
            break;
        };
        let (tx, rx) = oneshot::channel();
        if events.send(E::from((command, tx))).is_err() {
            return Ok(());
        }
        let Ok(reply) = rx.await else {
            return Ok(());
        };
        match reply {
            AdminReply::Status(s) if metrics => {
                resp.simple(200, "text/plain; version=0.0.4", s.metrics().as_bytes())
            }
            AdminReply::Status(s) => resp.simple(200, "application/json", &json(&*s)),
            AdminReply::Done { status, message } => {
                let body = serde_json::json!({ "ok": status == 200, "message": message });
                resp.simple(status, "application/json", &json(&body));
            }
        }
        break;
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

fn json(value: &impl serde::Serialize) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    body
}

/// The client side: one request to the admin endpoint at `addr`; (status, body).
pub fn request(addr: SocketAddr, method: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3))
        .map_err(|e| format!("cannot reach espalier's admin endpoint at {addr}: {e} (is espalier serve running? give -c FILE or --admin ADDR)"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(&raw) {
        Ok(httparse::Status::Complete(len)) => {
            Ok((response.code.unwrap_or(0), raw[len..].to_vec()))
        }
        _ => Err(format!("{addr} did not answer HTTP")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(Method::Get, "/status"),
            Some((AdminCommand::Status, false))
        );
        assert_eq!(
            route(Method::Get, "/metrics"),
            Some((AdminCommand::Status, true))
        );
        assert_eq!(
            route(Method::Post, "/pools/web/recycle"),
            Some((AdminCommand::Recycle("web".into()), false))
        );
        assert_eq!(
            route(Method::Get, "/pools/web/recycle"),
            None,
            "actions are POSTs"
        );
        assert_eq!(
            route(Method::Post, "/reload/"),
            Some((AdminCommand::Reload, false))
        );
        assert_eq!(route(Method::Get, "/"), None);
    }
}
