//! Starting a pool's application processes (pools with `command`): the private endpoint of a
//! proxied process, the `sd_notify` socket it may speak, its output captured into the
//! master's log, and the placed spawn through [`super::app_exec`].
//!
//! Owns: one app process's start and the channels it reports on. Must not touch: when a
//! process starts or stops (the supervisor decides) or the listener sockets' life.
//!
//! Readiness, in the order: `READY=1` on `NOTIFY_SOCKET` when the app speaks
//! sd_notify; else the pool's `health` URL answering 2xx; else, for a proxied app, its
//! endpoint accepting a connection; else (activation) being alive for [`SETTLE`] — its
//! sockets already queue connections, so a premature "ready" costs nothing but a wait.

use super::app_exec::{ExecSpec, ENV_VAR};
use super::control::Message;
use super::log;
use super::spec::WorkerSpec;
use super::supervisor::event::Event;
use crate::config::{AppCommand, Transport, UpstreamKind};
use crate::proxy::Endpoint;
use std::collections::VecDeque;
use std::io::BufRead;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// How long an activated app without sd_notify or `health` must stay alive to count as ready.
pub const SETTLE: Duration = Duration::from_secs(1);

/// How many of an app's last output lines are kept, to explain a crash.
const TAIL_LINES: usize = 8;

/// How long the master waits, at most, for the last output of the apps it reaps in one pass
/// (a pipe is at its end at once, unless a child of the app holds it): one budget for the
/// pass, not one per app, so a hundred apps crashing together stall it 200 ms, not 20 s.
pub const LAST_WORDS: Duration = Duration::from_millis(200);

/// An app process's last lines of output (stdout and stderr), newest last.
pub type OutputTail = Arc<Tail>;

/// What [`OutputTail`] holds: the lines, and how many of the app's streams are still open.
#[derive(Default)]
pub struct Tail {
    lines: Mutex<VecDeque<String>>,
    open: Mutex<u8>,
    closed: std::sync::Condvar,
}

impl Tail {
    /// The last lines, newest last.
    pub fn lines(&self) -> Vec<String> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect()
    }

    /// The last lines once the app's streams are read to their end, or `until` has come
    /// (a child of the app may hold them open). An exited app's last words may still be in
    /// its pipe when its exit is reaped: read before it, they were missing from the log.
    pub fn last_words(&self, until: std::time::Instant) -> Vec<String> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let within = until.saturating_duration_since(std::time::Instant::now());
        let _ = self
            .closed
            .wait_timeout_while(open, within, |open| *open > 0);
        self.lines()
    }
}

/// A running app process's channels to the master.
pub(super) struct StartedApp {
    pub pid: u32,
    pub endpoint: Option<Endpoint>,
    /// Reads its `NOTIFY_SOCKET` datagrams (aborted when it exits).
    pub notify: tokio::task::JoinHandle<()>,
    pub output: OutputTail,
}

/// Removes what an exited app process left in the runtime folder: its notify socket and, for
/// `upstream = "unix"`, its listening socket.
pub fn forget(generation: u64, endpoint: Option<&Endpoint>) {
    if let Some(dir) = super::runtime::runtime_dir() {
        let _ = std::fs::remove_file(dir.join(format!("notify-{generation}")));
    }
    if let Some(Endpoint::Unix(path)) = endpoint {
        let _ = std::fs::remove_file(path);
    }
}

/// A free loopback port for a proxied process. Bound and released: the app binds it a moment
/// later, as every platform handler that passes `PORT` does — below the kernel's ephemeral
/// range where it can, so that no outgoing connection takes it in that moment.
fn free_loopback_port() -> Result<u16, String> {
    crate::os::net::free_loopback_port()
        .map_err(|e| format!("cannot find a free loopback port: {e}"))
}

/// `argv` with `{port}` and `{socket}` replaced.
pub fn substitute(argv: &[String], port: Option<u16>, socket: Option<&Path>) -> Vec<String> {
    argv.iter()
        .map(|a| {
            let mut a = a.clone();
            if let Some(p) = port {
                a = a.replace("{port}", &p.to_string());
            }
            if let Some(s) = socket {
                a = a.replace("{socket}", &s.to_string_lossy());
            }
            a
        })
        .collect()
}

/// Starts one app process for the slot `spec` (its placement, and for activation its
/// listener sockets) of a pool running `app`. `names` are the `LISTEN_FDNAMES` of the
/// sockets, in order.
pub(super) fn spawn_app(
    spec: &WorkerSpec,
    app: &AppCommand,
    names: &[String],
    generation: u64,
    watchdog: Option<Duration>,
    events: UnboundedSender<Event>,
) -> Result<StartedApp, String> {
    let who = spec.name();
    let dir = super::runtime::ensure_runtime_dir()?;
    let fds: Vec<i32> = match app.transport {
        Transport::Activation => spec
            .threads
            .iter()
            .flat_map(|t| t.listeners.iter().map(|&(fd, _)| fd))
            .collect(),
        Transport::Proxy | Transport::FastCgi => Vec::new(),
    };
    let (port, socket, endpoint) = app_address(spec, app, generation)?;
    let notify_path = dir.join(format!("notify-{generation}"));
    let _ = std::fs::remove_file(&notify_path);
    let notify_sock = std::os::unix::net::UnixDatagram::bind(&notify_path)
        .map_err(|e| format!("cannot create {}: {e}", notify_path.display()))?;
    notify_sock
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    // The app, running as its pool's user, must be able to send to it.
    super::runtime::give_to(&notify_path, spec.identity.as_ref())?;
    let argv = substitute(&app.command, port, socket.as_deref());
    let exec = ExecSpec {
        name: who.clone(),
        fds: fds.clone(),
        names: names.to_vec(),
        cgroups: spec.cgroups.clone(),
        cpus: spec.cpus.clone(),
        memory_policy: spec.memory_policy,
        memory_nodes: spec.memory_nodes.clone(),
        watchdog: watchdog.is_some(),
        identity: spec.identity.clone(),
        isolation: app.isolation.clone(),
        port,
        socket: socket.clone(),
    };
    // In a sealed file, not the environment: one environment string may not pass 128 KiB,
    // and an isolated pool's spec names every other pool's folder.
    let json = serde_json::to_vec(&exec).map_err(|e| e.to_string())?;
    let exec_file = crate::os::process::sealed_memfd("espalier-app-exec", &json)
        .map_err(|e| format!("cannot hand {who} its start: {e}"))?;
    let mut fds = fds;
    fds.push(exec_file.as_raw_fd());
    let address = (port, socket.as_deref());
    let mut cmd = app_command(
        spec,
        app,
        &argv,
        (exec_file.as_raw_fd(), &notify_path),
        address,
        watchdog,
    )?;
    let mut child = super::spawn::spawn_placed(spec, &mut cmd, fds)
        .map_err(|e| format!("cannot start {who} (`{}`): {e}", argv.join(" ")))?;
    drop(exec_file);
    let pid = child.id();
    let output: OutputTail = Arc::default();
    let prefix = format!("{who} pid {pid}");
    if let Some(out) = child.stdout.take() {
        capture(out, prefix.clone(), Arc::clone(&output));
    }
    if let Some(err) = child.stderr.take() {
        capture(err, prefix, Arc::clone(&output));
    }
    // The child is reaped by the supervisor's waitpid loop, not through `child`.
    drop(child);
    let notify = relay_notify(notify_sock, notify_path, generation, events)?;
    Ok(StartedApp {
        pid,
        endpoint,
        notify,
        output,
    })
}

/// The command that starts an app process through `app-exec`: its program and arguments,
/// its folder, and its environment — the start spec's descriptor (`exec_fd`), the notify
/// socket, the pool's names, its address (`PORT` or `ESPALIER_SOCKET`) and watchdog.
fn app_command(
    spec: &WorkerSpec,
    app: &AppCommand,
    argv: &[String],
    (exec_fd, notify_path): (i32, &std::path::Path),
    (port, socket): (Option<u16>, Option<&std::path::Path>),
    watchdog: Option<Duration>,
) -> Result<Command, String> {
    let exe = crate::os::process::own_executable()
        .map_err(|e| format!("cannot find the espalier binary: {e}"))?;
    let mut cmd = Command::new(exe);
    std::os::unix::process::CommandExt::arg0(&mut cmd, crate::os::process::own_executable_name());
    cmd.arg("app-exec")
        .arg("--")
        .args(argv)
        .current_dir(&app.directory)
        .env(ENV_VAR, exec_fd.to_string())
        .env("NOTIFY_SOCKET", notify_path)
        .env("ESPALIER_POOL", &spec.pool)
        .env("ESPALIER_WORKER", spec.name())
        .env(
            "ESPALIER_NODE",
            spec.node.map_or(String::new(), |n| n.to_string()),
        )
        .env_remove(super::spec::ENV_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &app.environment {
        cmd.env(k, v);
    }
    match (port, socket) {
        (Some(p), _) => cmd.env("PORT", p.to_string()),
        (None, Some(s)) => cmd.env("ESPALIER_SOCKET", s),
        _ => cmd.env_remove("PORT"),
    };
    match watchdog {
        Some(d) => cmd.env("WATCHDOG_USEC", d.as_micros().to_string()),
        None => cmd.env_remove("WATCHDOG_USEC"),
    };
    Ok(cmd)
}

/// An app process's port, socket path and endpoint (see [`app_address`]).
type AppAddress = (Option<u16>, Option<std::path::PathBuf>, Option<Endpoint>);

/// Where an app process of `spec` listens: a free loopback port (`PORT`), or a socket in
/// its pool's runtime folder (`ESPALIER_SOCKET`); nothing of its own when it is activated
/// (it takes the listeners). The port, the socket's path, and the endpoint fronts reach.
fn app_address(spec: &WorkerSpec, app: &AppCommand, generation: u64) -> Result<AppAddress, String> {
    Ok(match app.transport {
        Transport::Activation => (None, None, None),
        Transport::Proxy | Transport::FastCgi => match app.upstream {
            UpstreamKind::Tcp => {
                let port = free_loopback_port()?;
                let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                (Some(port), None, Some(Endpoint::Tcp(addr)))
            }
            UpstreamKind::Unix => {
                let pool_dir = super::runtime::ensure_pool_dir(&spec.pool, spec.identity.as_ref())?;
                let path = pool_dir.join(format!("{}-{generation}.sock", spec.index));
                let _ = std::fs::remove_file(&path);
                (None, Some(path.clone()), Some(Endpoint::Unix(path)))
            }
        },
    })
}

/// Relays what an app process sends its `NOTIFY_SOCKET` (sd_notify: READY=1, WATCHDOG=1,
/// STOPPING=1) to the supervisor as its messages; the socket's file goes when it ends.
fn relay_notify(
    notify_sock: std::os::unix::net::UnixDatagram,
    notify_path: std::path::PathBuf,
    generation: u64,
    events: UnboundedSender<Event>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let notify_sock = tokio::net::UnixDatagram::from_std(notify_sock).map_err(|e| e.to_string())?;
    Ok(tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = notify_sock.recv(&mut buf).await {
            for message in notify_messages(&String::from_utf8_lossy(&buf[..n])) {
                if events
                    .send(Event::Worker {
                        generation,
                        message,
                    })
                    .is_err()
                {
                    return;
                }
            }
        }
        let _ = std::fs::remove_file(&notify_path);
    }))
}

/// Copies an app's output into the master's log, line by line with its name, keeping the
/// last lines. A thread per stream: it blocks only on the pipe, and ends with the app.
fn capture(stream: impl std::io::Read + Send + 'static, prefix: String, tail: OutputTail) {
    *tail.open.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    let spawned = std::thread::Builder::new()
        .name("app-output".into())
        .spawn({
            let tail = Arc::clone(&tail);
            move || {
                let mut reader = std::io::BufReader::new(stream);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let text = String::from_utf8_lossy(&line);
                            let text = text.trim_end();
                            log(&prefix, text);
                            let mut t = tail.lines.lock().unwrap_or_else(|e| e.into_inner());
                            if t.len() == TAIL_LINES {
                                t.pop_front();
                            }
                            t.push_back(text.to_string());
                        }
                    }
                }
                stream_closed(&tail);
            }
        });
    if spawned.is_err() {
        stream_closed(&tail);
    }
}

/// One of an app's streams reached its end (or was never read).
fn stream_closed(tail: &Tail) {
    let mut open = tail.open.lock().unwrap_or_else(|e| e.into_inner());
    *open = open.saturating_sub(1);
    tail.closed.notify_all();
}

/// The control messages an sd_notify datagram carries (`KEY=VALUE` lines): `READY=1` is
/// readiness, `WATCHDOG=1` a pong, `STOPPING=1` the app stopping by itself.
pub fn notify_messages(datagram: &str) -> Vec<Message> {
    datagram
        .lines()
        .filter_map(|l| match l.trim() {
            "READY=1" => Some(Message::Ready { pid: 0 }),
            "WATCHDOG=1" => Some(Message::Pong(Default::default())),
            "WATCHDOG=trigger" => Some(Message::Stuck("watchdog=trigger".into())),
            "STOPPING=1" => Some(Message::Stopping),
            _ => None,
        })
        .collect()
}

/// The `LISTEN_FDNAMES` of a slot's sockets: the name of the site each group serves first.
pub fn fd_names(spec: &WorkerSpec) -> Vec<String> {
    spec.threads
        .iter()
        .flat_map(|t| t.listeners.iter().map(|&(_, g)| g))
        .map(|g| {
            spec.groups
                .get(g)
                .and_then(|routes| routes.hosts.first())
                .and_then(|&(_, site)| spec.sites.get(site))
                .map_or_else(|| format!("espalier{g}"), |s| s.name.clone())
                .replace(':', "_")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An app's last line, written just before it exits, is read before its exit is told —
    /// its pipe may still hold it when the exit is reaped.
    #[test]
    fn last_words_wait_for_the_streams_end() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3; echo cannot reach the database >&2"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let tail: OutputTail = Arc::default();
        capture(
            child.stderr.take().unwrap(),
            "test".into(),
            Arc::clone(&tail),
        );
        let said = tail.last_words(std::time::Instant::now() + Duration::from_secs(30));
        assert_eq!(said, ["cannot reach the database"]);
        child.wait().unwrap();
    }
}
