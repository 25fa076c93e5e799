//! The admin endpoint on `[server] admin` (default 127.0.0.1:9180): `GET /status` (JSON),
//! `GET /metrics` (Prometheus text), and `POST /pools/NAME/stop|start|recycle`. The CLI's
//! `espalier status`, `pool`, and `recycle` talk to it.
//!
//! Owns: the endpoint's tiny HTTP handling and the metrics' names. Must not touch: pool state
//! (it asks the supervisor over a channel and prints the answer).

use super::log;
use super::supervisor::{AdminCommand, AdminReply};
use crate::config::Config;
use std::fmt::Write;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

/// Starts the endpoint. If its address cannot be bound, serving goes on without it and the
/// master says so once.
pub(super) fn start<E: From<(AdminCommand, oneshot::Sender<AdminReply>)> + Send + 'static>(
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
                continue;
            };
            let events = events.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    handle(stream, events),
                )
                .await;
            });
        }
    });
}

async fn handle<E: From<(AdminCommand, oneshot::Sender<AdminReply>)>>(
    mut stream: tokio::net::TcpStream,
    events: mpsc::UnboundedSender<E>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16384 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let (method, path) = match req.parse(&buf) {
        Ok(_) => (
            req.method.unwrap_or("").to_string(),
            req.path.unwrap_or("").to_string(),
        ),
        Err(_) => (String::new(), String::new()),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let command = match (method.as_str(), parts.as_slice()) {
        ("GET", ["status"]) | ("GET", ["metrics"]) => Some(AdminCommand::Status),
        ("POST", ["pools", name, "stop"]) => Some(AdminCommand::StopPool(name.to_string())),
        ("POST", ["pools", name, "start"]) => Some(AdminCommand::StartPool(name.to_string())),
        ("POST", ["pools", name, "recycle"]) => Some(AdminCommand::Recycle(name.to_string())),
        ("POST", ["reload"]) => Some(AdminCommand::Reload),
        _ => None,
    };
    let (status, content_type, body) = match command {
        None => (
            404,
            "text/plain",
            "not found: GET /status, GET /metrics, POST /reload, POST /pools/NAME/stop|start|recycle\n"
                .to_string(),
        ),
        Some(cmd) => {
            let (tx, rx) = oneshot::channel();
            if events.send(E::from((cmd, tx))).is_err() {
                return Ok(());
            }
            let Ok((status, json)) = rx.await else {
                return Ok(());
            };
            if parts == ["metrics"] {
                (200, "text/plain; version=0.0.4", metrics(&json))
            } else {
                (
                    status,
                    "application/json",
                    format!(
                        "{}\n",
                        serde_json::to_string_pretty(&json).unwrap_or_default()
                    ),
                )
            }
        }
    };
    let head = format!(
        "HTTP/1.1 {status} {}\r\nServer: espalier\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        crate::http::reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Prometheus text from the status JSON.
pub fn metrics(status: &serde_json::Value) -> String {
    let mut out = String::new();
    let families = [
        (
            "espalier_pool_running",
            "gauge",
            "1 when the pool runs, 0 when stopped",
        ),
        (
            "espalier_worker_up",
            "gauge",
            "1 when the worker is running and ready",
        ),
        (
            "espalier_worker_requests_total",
            "counter",
            "requests served by the worker process now in the slot",
        ),
        (
            "espalier_worker_connection_panics_total",
            "counter",
            "connections closed because their task panicked (a bug: please report it)",
        ),
        (
            "espalier_worker_resident_bytes",
            "gauge",
            "resident memory of the worker",
        ),
        (
            "espalier_worker_restarts_total",
            "counter",
            "crash restarts of the slot",
        ),
        (
            "espalier_worker_recycles_total",
            "counter",
            "recycles of the slot",
        ),
    ];
    let pools = status["pools"].as_array().cloned().unwrap_or_default();
    for (name, kind, help) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for p in &pools {
            let pool = p["name"].as_str().unwrap_or("");
            if name == "espalier_pool_running" {
                let _ = writeln!(
                    out,
                    "{name}{{pool=\"{pool}\"}} {}",
                    u8::from(p["state"] == "running")
                );
                continue;
            }
            for w in p["workers"].as_array().cloned().unwrap_or_default() {
                let value = match name {
                    "espalier_worker_up" => u64::from(w["state"] == "running"),
                    "espalier_worker_requests_total" => w["requests"].as_u64().unwrap_or(0),
                    "espalier_worker_connection_panics_total" => {
                        w["connection_panics"].as_u64().unwrap_or(0)
                    }
                    "espalier_worker_resident_bytes" => w["resident_bytes"].as_u64().unwrap_or(0),
                    "espalier_worker_restarts_total" => w["restarts"].as_u64().unwrap_or(0),
                    _ => w["recycles"].as_u64().unwrap_or(0),
                };
                let _ = writeln!(
                    out,
                    "{name}{{pool=\"{pool}\",index=\"{}\"}} {value}",
                    w["index"]
                );
            }
        }
    }
    out
}
