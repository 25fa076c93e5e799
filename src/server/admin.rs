//! The admin endpoint on `[server] admin` (default 127.0.0.1:9180): the admin page at `/`
//! (see [`super::admin_page`]) with its feeds `GET /machine` and `GET /live`, `GET /ready`
//! (200, or 503 once a drain has started: a load balancer's health check), `GET /status`
//! (JSON), `GET /metrics` (Prometheus text), and the actions `POST /reload`, `POST
//! /pools/NAME/stop|start|recycle`, `POST /tls/rotate-ticket-keys` and `POST
//! /cache/purge?url=…|prefix=…|tag=…` (the response caches'), which need the admin token; and the client the CLI's
//! `espalier status`, `pool`, `recycle` and `reload` use.
//!
//! Owns: the endpoint's routes, the command and reply types, and the client side. Both sides
//! speak through the crate's one HTTP engine: requests are parsed with
//! [`crate::http::parse_head`] and answered with [`crate::http::Responder`]; the client reads
//! responses with `httparse`, the parser the engine is built on.
//! Must not touch: pool state (it asks the supervisor over a channel and prints the answer).

mod client;
mod config_call;
mod connections;
mod token;

pub use client::{request, request_as, request_with_body, request_with_token};
pub use config_call::{ConfigCall, ConfigMethod};
pub use token::token_file;
use token::{server_token, token_of};

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
    Status(super::status::StatusQuery),
    /// The admin page's feed: status, CPU loads, history.
    Live(super::status::StatusQuery),
    StopPool(String),
    StartPool(String),
    Recycle(String),
    Reload,
    /// A new session ticket key now (see `supervisor::ticket_keys`).
    RotateTicketKeys,
    /// Answers taken out of every worker's response cache (`cache_responses`).
    PurgeCache(crate::proxy::cache_purge::Purge),
    /// The configuration API (`/config…`).
    Config(ConfigCall),
    /// A new master from the binary on disk takes over the sockets (see
    /// `supervisor::upgrade`).
    Upgrade,
}

/// The supervisor's answer.
#[derive(Debug)]
pub enum AdminReply {
    Status(Box<Status>),
    Live(Box<super::status::Live>),
    /// A command's outcome: the HTTP status (200 done, 400 refused, 404 no such pool, 409 not
    /// now) and one line for the operator.
    Done {
        status: u16,
        message: String,
    },
    /// The configuration API's answer: its status, JSON body and the configuration's
    /// version (the `ETag`).
    Config {
        status: u16,
        body: Vec<u8>,
        version: Option<String>,
    },
}

/// An admin request: what `espalier status` and friends send.
type Request = (AdminCommand, oneshot::Sender<AdminReply>);

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 1024,
    max_header_size: 8192,
    max_headers: 32,
    max_body_size: config_call::MAX_BODY as u64,
};

/// What a request asks for besides a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    /// The admin page itself.
    Html,
    /// The machine the page draws (topology, static).
    Machine,
    /// Readiness for a load balancer's health check: 200 while serving, 503 from the moment
    /// a drain starts.
    Ready,
}

/// Set when the master starts draining (SIGTERM/SIGINT): `GET /ready` answers 503 from then
/// on, so a load balancer in front stops sending new connections while the in-flight ones
/// finish. Read by the endpoint itself: the supervisor no longer takes requests then.
static DRAINING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks the server as draining (see [`DRAINING`]).
pub(super) fn set_draining() {
    DRAINING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The page or command a method and path ask for; for commands, whether the answer is
/// metrics text.
fn route_page(method: Method, path: &str) -> Option<Page> {
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        (Method::Get | Method::Head, "/" | "/index.html") => Some(Page::Html),
        (Method::Get | Method::Head, "/machine") => Some(Page::Machine),
        (Method::Get | Method::Head, "/ready") => Some(Page::Ready),
        _ => None,
    }
}

/// The command a method, path and query ask for, and whether the answer is metrics text;
/// `Err` for a status query that does not parse (a 400 saying why).
fn route(method: Method, path: &str, query: &str) -> Result<Option<(AdminCommand, bool)>, String> {
    use super::status::StatusQuery;
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let status_query = || StatusQuery::parse(query);
    Ok(Some(match (method, parts.as_slice()) {
        (Method::Get, ["live"]) => (AdminCommand::Live(status_query()?), false),
        (Method::Get, ["status"]) => (AdminCommand::Status(status_query()?), false),
        (Method::Get, ["metrics"]) => (AdminCommand::Status(status_query()?), true),
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
        (Method::Post, ["upgrade"]) => (AdminCommand::Upgrade, false),
        (Method::Post, ["tls", "rotate-ticket-keys"]) => (AdminCommand::RotateTicketKeys, false),
        (Method::Post, ["cache", "purge"]) => {
            let purge = crate::proxy::cache_purge::Purge::of_query(query)?;
            (AdminCommand::PurgeCache(purge), false)
        }
        _ => return Ok(None),
    }))
}

/// Binds the endpoint's address, before anything else starts: a server whose address is
/// another's would leave `espalier status`, `reload` and the page talking to that other
/// server, so it is refused in one line instead.
pub(super) fn bind(config: &Config) -> Result<std::net::TcpListener, String> {
    let addr = config.server.admin;
    std::net::TcpListener::bind(addr).map_err(|e| {
        format!("key `server.admin`: cannot listen on {addr} for the admin endpoint: {e}; if another espalier serves there, give this one its own address ([server] admin = \"127.0.0.1:9181\", or serve --admin ADDR)")
    })
}

/// The header an admin client sends to say which server it means: the canonical path of the
/// config file it read the address from. A server started from another file refuses.
pub const CONFIG_HEADER: &str = "x-espalier-config";

/// How a config file is named between client and server: its canonical path.
pub fn config_identity(path: &std::path::Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// Serves the endpoint on `listener` (from [`bind`]); the task that accepts on it (ended when
/// a new master took the endpoint over, see `supervisor::upgrade`).
pub(super) fn start<E: From<Request> + Send + 'static>(
    listener: std::net::TcpListener,
    config: &Config,
    topology: &crate::topology::Topology,
    events: mpsc::UnboundedSender<E>,
) -> Option<tokio::task::JoinHandle<()>> {
    let addr = config.server.admin;
    let identity: std::sync::Arc<str> = config
        .source
        .as_deref()
        .map_or_else(String::new, config_identity)
        .into();
    let token = match server_token(config) {
        Ok(t) => std::sync::Arc::<str>::from(t),
        Err(e) => {
            log("master", format!("{e}; the admin page is read-only"));
            // No token anyone can send: every action is refused.
            std::sync::Arc::<str>::from("")
        }
    };
    let machine: std::sync::Arc<[u8]> = super::admin_page::machine_json(topology).into();
    let listener = match listener
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpListener::from_std(listener))
    {
        Ok(l) => l,
        Err(e) => {
            log("master", format!("admin endpoint disabled: {addr}: {e}"));
            return None;
        }
    };
    // The token itself only on a terminal: under a service manager this line goes to a
    // journal that more people may read than the token file (mode 0600).
    let where_token = if config.server.admin_token.is_some() {
        "[server] admin_token".to_string()
    } else if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        format!("{} ({token})", token_file(addr).display())
    } else {
        token_file(addr).display().to_string()
    };
    log(
        "master",
        format!("admin endpoint on http://{addr} (the page at /; /status, /metrics, /live); actions need the token in {where_token}"),
    );
    let endpoint = Endpoint {
        addr,
        events,
        token,
        identity,
        machine,
        open: Default::default(),
    };
    Some(tokio::spawn(endpoint.accept(listener)))
}

/// What every admin connection is answered with: the endpoint's address, the supervisor's
/// events, the token and config identity it checks, the machine's picture for the page,
/// and the connections open now.
struct Endpoint<E> {
    addr: SocketAddr,
    events: mpsc::UnboundedSender<E>,
    token: std::sync::Arc<str>,
    identity: std::sync::Arc<str>,
    machine: std::sync::Arc<[u8]>,
    /// A bounded number of connections at once, each for a bounded time: idle connections
    /// of any local user must not take the descriptors the master needs to restart workers.
    open: std::sync::Arc<connections::OpenConnections>,
}

impl<E: From<Request> + Send + 'static> Endpoint<E> {
    /// Takes connections until the master ends the task.
    async fn accept(self, listener: tokio::net::TcpListener) {
        let mut said_at = None;
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Said, at most once a second: out of descriptors, the connection
                    // waits in the queue and is taken once one is free.
                    if said_at
                        .is_none_or(|t: tokio::time::Instant| t.elapsed() >= Duration::from_secs(1))
                    {
                        log(
                            "master",
                            format!("admin endpoint: cannot accept a connection: {e}"),
                        );
                        said_at = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            self.answer(stream);
            // A connection closed to make room is closed as its task is dropped: that runs
            // before the next accept, so a flood of connections never holds more
            // descriptors than the bound (each accept ahead of the drops took one more).
            tokio::task::yield_now().await;
        }
    }

    /// Answers one connection on a task of its own, within [`CONNECTION_TIME`]. Past the
    /// bound, the oldest connection still silent gives way; with none (all being answered)
    /// the new one is closed at once, its descriptor given back.
    fn answer(&self, stream: tokio::net::TcpStream) {
        if !self.open.make_room() {
            log(
                "master",
                format!(
                    "admin endpoint: {} connections are being answered; one more was closed",
                    connections::MAX_CONNECTIONS
                ),
            );
            return;
        }
        let (addr, events) = (self.addr, self.events.clone());
        let (token, machine) = (self.token.clone(), self.machine.clone());
        let identity = self.identity.clone();
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (open_now, asked_now) = (self.open.clone(), asked.clone());
        let id = self.open.next_id();
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(
                CONNECTION_TIME,
                handle(
                    stream,
                    addr,
                    events,
                    (&token, &identity),
                    &machine,
                    &asked_now,
                ),
            )
            .await;
            open_now.remove(id);
        });
        self.open.add(id, asked, task.abort_handle());
    }
}

/// How long an admin connection may take to send its request head: an idle one is closed
/// then.
const HEAD_TIME: Duration = Duration::from_secs(5);
/// How long one admin connection may take, request and answer: a hoster's status of ten
/// thousand sites, made and written by a master under load, took more than the head's bound
/// (a test saw its connection cut at 5 s).
const CONNECTION_TIME: Duration = Duration::from_secs(60);

/// Whether a request's Host may reach an endpoint on `admin`: on a loopback address, only an
/// IP literal or `localhost` — a web page whose name was made to resolve to 127.0.0.1 (DNS
/// rebinding) sends its own name and is refused, so it cannot read `/status`. A non-loopback
/// endpoint is open to the network anyway (and its actions need a token written in the
/// config), so any name that reaches it is taken.
fn host_allowed(host: &str, admin: SocketAddr) -> bool {
    if !admin.ip().is_loopback() {
        return true;
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<std::net::Ipv6Addr>().is_ok())
        }
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// What `request` asks of the supervisor (and whether it asks for metrics); `None` when it
/// was answered here: a page, `/ready`, or a refusal (another host, another server's file,
/// an unknown path's query, an action without the token).
fn command_of(
    (request, body, peer): (&crate::http::Request<'_>, &[u8], &str),
    resp: &mut Responder<'_>,
    addr: SocketAddr,
    (token, identity): (&str, &str),
    machine: &[u8],
) -> Option<Option<(AdminCommand, bool)>> {
    if !request.host().is_none_or(|h| host_allowed(h, addr)) {
        resp.simple(
            421,
            "text/plain; charset=utf-8",
            b"this endpoint answers to its address or localhost only\n",
        );
        return None;
    }
    match route_page(request.method, request.path) {
        Some(Page::Html) => {
            resp.simple(200, "text/html; charset=utf-8", super::admin_page::PAGE);
            return None;
        }
        Some(Page::Machine) => {
            resp.simple(200, "application/json", machine);
            return None;
        }
        Some(Page::Ready) => {
            if DRAINING.load(std::sync::atomic::Ordering::Relaxed) {
                resp.simple(503, "text/plain; charset=utf-8", b"draining\n");
            } else {
                resp.simple(200, "text/plain; charset=utf-8", b"ready\n");
            }
            return None;
        }
        None => {}
    }
    if let Some(refusal) = wrong_server(request, identity) {
        let body = serde_json::json!({ "ok": false, "message": refusal });
        resp.simple(409, "application/json", &json(&body));
        return None;
    }
    // Authorized below: the configuration API's reads too (the files may hold secrets).
    let (command, needs_token) = match config_call::config_call(request, body, peer) {
        Some(Ok(call)) => (Ok(Some((AdminCommand::Config(call), false))), true),
        Some(Err((status, message))) => {
            let body = serde_json::json!({ "ok": false, "message": message });
            resp.simple(status, "application/json", &json(&body));
            return None;
        }
        None => (
            route(request.method, request.path, request.query),
            request.method == Method::Post,
        ),
    };
    let command = match command {
        Ok(c) => c,
        Err(why) => {
            resp.simple(
                400,
                "text/plain; charset=utf-8",
                format!("{why}\n").as_bytes(),
            );
            return None;
        }
    };
    // Actions change the server: they need the token (reads do not).
    let authorized = token_of(request)
        .is_some_and(|t| !token.is_empty() && crate::os::private_dir::same_secret(t, token));
    if needs_token && command.is_some() && !authorized {
        let body = serde_json::json!({
            "ok": false,
            "message": "this action needs the admin token (header `Authorization: Bearer TOKEN`); espalier's commands on this machine read it from the token file or [server] admin_token"
        });
        resp.simple(401, "application/json", &json(&body));
        return None;
    }
    Some(command)
}

/// One request per connection, answered and closed.
async fn handle<E: From<Request>>(
    mut stream: tokio::net::TcpStream,
    addr: SocketAddr,
    events: mpsc::UnboundedSender<E>,
    (token, identity): (&str, &str),
    machine: &[u8],
    asked: &std::sync::atomic::AtomicBool,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut out = Vec::with_capacity(1024);
    let common = crate::http::clock::common_now();
    let mut head_by = tokio::time::Instant::now() + HEAD_TIME;
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".into(), |a| a.ip().to_string());
    loop {
        let Ok(read) = tokio::time::timeout_at(head_by, stream.read_buf(&mut buf)).await else {
            return Ok(());
        };
        let n = read?;
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
            Ok(Head::Complete {
                request,
                len,
                framing,
                ..
            }) => {
                asked.store(true, std::sync::atomic::Ordering::Relaxed);
                // A body (the configuration API's writes) is read whole, within the
                // connection's time; a chunked one is refused.
                let body_len = match framing {
                    crate::http::Framing::Length(n) => n as usize,
                    crate::http::Framing::Chunked => {
                        Responder::new(&mut out, &common, false, 1, false).error(411);
                        break;
                    }
                    _ => 0,
                };
                let Some(body) = buf.get(len..len + body_len) else {
                    head_by = tokio::time::Instant::now() + CONNECTION_TIME;
                    continue;
                };
                let head_only = request.method == Method::Head;
                let mut resp = Responder::new(&mut out, &common, false, 1, head_only);
                let asked = (&request, body, peer.as_str());
                match command_of(asked, &mut resp, addr, (token, identity), machine) {
                    Some(command) => (command, head_only),
                    None => break,
                }
            }
        };
        let mut resp = Responder::new(&mut out, &common, false, 1, head_only);
        let Some((command, metrics)) = command else {
            resp.simple(
                404,
                "text/plain; charset=utf-8",
                b"not found: GET /status, GET /metrics, POST /reload, POST /pools/NAME/stop|start|recycle, /config\n",
            );
            break;
        };
        let (tx, rx) = oneshot::channel();
        if events.send(E::from((command, tx))).is_err() {
            return Ok(());
        }
        let Ok(reply) = rx.await else {
            // Only a master on its way out drops a command unanswered.
            log(
                "master",
                "admin endpoint: a request was left unanswered (the master is stopping)",
            );
            return Ok(());
        };
        write_reply(&mut resp, reply, metrics);
        break;
    }
    send_and_linger(stream, &out, asked).await
}

/// Sends the answer `out`, then holds the connection until the client has read it and
/// closed (within [`LINGER`]): a socket closed with its answer still unsent is orphaned,
/// and a kernel short of TCP memory resets orphans — a 10,000-site status (megabytes) was
/// cut so on a loaded machine, whose log said "TCP: out of memory". nginx's lingering
/// close, for this reason. Answered, the connection is idle again (`asked` false): a client
/// that never closes gives way to a newcomer as a silent one does, and cannot hold the
/// bound against the operator.
async fn send_and_linger(
    mut stream: tokio::net::TcpStream,
    out: &[u8],
    asked: &std::sync::atomic::AtomicBool,
) -> std::io::Result<()> {
    stream.write_all(out).await?;
    stream.shutdown().await?;
    asked.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut sink = [0u8; 256];
    let drained = async {
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(LINGER, drained).await;
    Ok(())
}

/// How long a connection is held after its answer for the client to read it and close.
const LINGER: Duration = Duration::from_secs(10);

/// Writes the supervisor's `reply` (`metrics`: a status as Prometheus text).
fn write_reply(resp: &mut Responder<'_>, reply: AdminReply, metrics: bool) {
    match reply {
        AdminReply::Status(s) if metrics => {
            resp.simple(200, "text/plain; version=0.0.4", s.metrics().as_bytes())
        }
        AdminReply::Status(s) => resp.simple(200, "application/json", &json(&*s)),
        AdminReply::Live(l) => resp.simple(200, "application/json", &compact(&*l)),
        AdminReply::Config {
            status,
            body,
            version,
        } => {
            resp.status(status)
                .header("Content-Type", "application/json");
            if let Some(v) = version {
                resp.header("ETag", &format!("\"{v}\""));
            }
            resp.body(&body);
        }
        AdminReply::Done { status, message } => {
            let body = serde_json::json!({ "ok": status == 200, "message": message });
            resp.simple(status, "application/json", &json(&body));
        }
    }
}

/// Why a request meant for the server of another config file is refused, if it is: the
/// client named its file ([`CONFIG_HEADER`]) and this server was started from another one.
fn wrong_server(request: &crate::http::Request<'_>, identity: &str) -> Option<String> {
    let meant = request.header(CONFIG_HEADER)?;
    if meant == identity {
        return None;
    }
    let this = if identity.is_empty() {
        "a server started without a config file".to_string()
    } else {
        format!("the server of {identity}")
    };
    Some(format!("this admin endpoint is {this}, not of {meant}: that file's server is not running, or was started with serve --admin ADDR (then reach it with --admin ADDR beside -c), or shares this admin address; give it its own [server] admin"))
}

/// Without indentation: the page polls it every second.
fn compact(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

fn json(value: &impl serde::Serialize) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    body
}

#[cfg(test)]
mod tests;
