//! Application processes in the supervisor: when one counts as ready, how it is pinged, and
//! telling the front workers of a proxied pool where its ready processes are.
//!
//! Owns: the app side of readiness (probes, settle time; `READY=1` arrives as an ordinary
//! ready message), what an exit during start-up means (the server's start fails with the
//! app's last words, unless the app lost its port to another process and is started again),
//! pings by probe or liveness, the `upstreams` messages, and an app's SIGTERM once its
//! worker's fronts are gone. Must not touch: how a process is
//! started or reaped once running (see [`super::slots`]) — an app process is a slot's process
//! like any.

use super::life::{Happening, Life};
use super::Supervisor;
use crate::proxy::Endpoint;
use crate::server::app::SETTLE;
use crate::server::control::Message;
use crate::topology::nearest::tiers_for;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How often a starting app process is probed.
const PROBE_EVERY: Duration = Duration::from_millis(200);
/// How often a starting app with nothing on its port is looked at for a port of its own
/// choosing (its sockets and the kernel's table read: not at every probe).
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(3);
/// Bound on one probe: connect, and for `health` the answer's status line.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How many app processes, in all, may be started again at start-up because another process
/// took the port they were given: a race is rare, and more losses than this are a pattern
/// (something binding whatever port is free) that a retry would not mend.
const PORT_RETRIES: u32 = 4;

/// What a probe connects to.
#[derive(Clone)]
enum Target {
    /// A proxied process's own endpoint.
    Own(Endpoint),
    /// An activated process's node, through the pool's address: the probing thread runs on
    /// the process's CPUs, so the steering program picks that node's socket.
    Through(SocketAddr, crate::cpuset::CpuSet),
}

/// How a slot's app processes are probed.
struct ProbeSetup {
    health: Option<String>,
    through: Option<(SocketAddr, crate::cpuset::CpuSet)>,
    /// Requested of a starting process once it is up, before it is ready (see [`warm_up`]).
    warmup: Warmup,
}

/// A pool's warm-up: its paths, each answer awaited this long, and the process's name.
#[derive(Clone, Default)]
struct Warmup {
    paths: Vec<String>,
    timeout: Duration,
    name: String,
}

impl ProbeSetup {
    /// What to probe for a process: its own endpoint (proxied), or with `health` the pool's
    /// address from the process's CPUs (activated); `None` when there is nothing to ask.
    fn target(&self, endpoint: Option<&Endpoint>) -> Option<Target> {
        match (endpoint, &self.through) {
            (Some(e), _) => Some(Target::Own(e.clone())),
            (None, Some((addr, cpus)))
                if self.health.is_some() || !self.warmup.paths.is_empty() =>
            {
                Some(Target::Through(*addr, cpus.clone()))
            }
            _ => None,
        }
    }
}

impl Supervisor {
    /// Once a tick: an app waiting for its worker's fronts to finish (see
    /// [`super::procs::Proc::stop_after_fronts`]) gets its SIGTERM once none of them is left — a request they
    /// still forwarded is answered, never cut by the app's exit.
    pub(super) fn term_apps_whose_fronts_left(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.app.is_none() || !slot.draining.iter().any(super::procs::Proc::awaiting_term) {
                continue;
            }
            // Its fronts: the same pool's worker of the same index.
            let (pool, index) = (slot.pool, slot.spec.index);
            let fronts_left = (self.slots.iter()).any(|s| {
                s.app.is_none()
                    && s.pool == pool
                    && s.spec.index == index
                    && s.procs().next().is_some()
            });
            if fronts_left {
                continue;
            }
            for p in self.slots[i]
                .draining
                .iter_mut()
                .filter(|p| p.awaiting_term())
            {
                p.happen(Happening::Signalled, now);
                p.signal(libc::SIGTERM);
            }
        }
    }

    /// Start-up: readiness of the apps, and an app or worker that died before being ready
    /// stops `serve` with the reason (as a worker that reports an error does).
    pub(super) fn startup_tick(&mut self) -> Result<(), String> {
        // What this pass may wait for exited apps' last words, all of them together.
        let words_until = std::time::Instant::now() + crate::server::app::LAST_WORDS;
        while let Some((pid, status)) = crate::os::process::reap_child() {
            let Some(i) = self
                .slots
                .iter()
                .position(|s| s.procs().any(|p| p.pid == pid))
            else {
                continue;
            };
            if self.start_again_on_another_port(i, pid)? {
                continue;
            }
            // Out of its slot: the pid is reaped, and the stop that follows must not signal it
            // (it may already be another process's) nor wait for it.
            let slot = &mut self.slots[i];
            let exited = slot.take_pid(pid);
            if let Some(p) = &exited {
                p.reader.abort();
            }
            let said = exited
                .as_ref()
                .and_then(|p| p.app.as_ref())
                .map(|a| a.output.last_words(words_until).join(" | "))
                .filter(|t| !t.is_empty())
                .map_or(String::new(), |t| format!("; it said: {t}"));
            let what = if slot.app.is_some() { "app" } else { "worker" };
            return Err(format!(
                "{what} {} (pid {pid}) exited while starting: {status}{said}",
                slot.spec.name()
            ));
        }
        for pool in std::mem::take(&mut self.upstreams_unsent) {
            self.publish_upstreams(pool);
        }
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i].app.is_some()
                && self.slots[i]
                    .current
                    .as_ref()
                    .is_some_and(|p| p.life == Life::Starting)
            {
                self.app_readiness(i, now);
            }
        }
        Ok(())
    }

    /// Slot `i`'s app process `pid` exited while starting: when the port it was given is now
    /// held by another process (it lost the race between our choice and its bind, see
    /// [`crate::os::net::loopback_port_held`]), it is started again on another port, at most
    /// [`PORT_RETRIES`] times in all; `false` when it exited for a reason of its own.
    fn start_again_on_another_port(&mut self, i: usize, pid: u32) -> Result<bool, String> {
        let port = match self.slots[i].procs().find(|p| p.pid == pid) {
            Some(p) => match p.app.as_ref().and_then(|a| a.endpoint.as_ref()) {
                Some(Endpoint::Tcp(addr)) => addr.port(),
                _ => return Ok(false),
            },
            None => return Ok(false),
        };
        if self.port_retries >= PORT_RETRIES || !crate::os::net::loopback_port_held(port) {
            return Ok(false);
        }
        self.port_retries += 1;
        let slot = &mut self.slots[i];
        let Some(lost) = slot.take_pid(pid) else {
            return Ok(false);
        };
        lost.reader.abort();
        crate::server::app::forget(
            lost.generation,
            lost.app.as_ref().and_then(|a| a.endpoint.as_ref()),
        );
        crate::server::log(
            "master",
            format!(
                "app {} (pid {pid}) exited while starting: port {port} it was given is now another process's; starting it again on another port",
                slot.spec.name()
            ),
        );
        self.start(i, false)?;
        Ok(true)
    }

    /// How slot `i`'s processes are probed: its pool's `health`, and for an activated app the
    /// pool's address with the slot's CPUs (the probe goes through its node's socket).
    fn probe_setup(&self, i: usize) -> ProbeSetup {
        let app = self.pools[self.slots[i].pool].spec.app.as_ref();
        let health = app.and_then(|a| a.health.clone());
        let cpus = crate::cpuset::CpuSet::from_ids(self.slots[i].spec.cpus.iter().copied());
        ProbeSetup {
            through: self.activation_address(i).map(|a| (a, cpus)),
            health,
            warmup: Warmup {
                paths: app.map(|a| a.warmup.clone()).unwrap_or_default(),
                timeout: app.map_or(PROBE_TIMEOUT, |a| a.response_timeout),
                name: self.slots[i].spec.name(),
            },
        }
    }

    /// A starting app process of slot `i` (current or replacing): ready after a probe
    /// succeeds, or, for an activated app without `health`, after the settle time.
    pub(super) fn app_readiness(&mut self, i: usize, now: Instant) {
        let setup = self.probe_setup(i);
        let events = self.events.clone();
        let slot = &mut self.slots[i];
        let mut settled = Vec::new();
        for p in slot.current.iter_mut().chain(slot.replacing.iter_mut()) {
            let Some(app) = p.app.as_mut() else { continue };
            if p.life != Life::Starting || app.probing || app.probe_at > now {
                continue;
            }
            let Some(target) = setup.target(app.endpoint.as_ref()) else {
                if now.duration_since(p.started) >= SETTLE {
                    settled.push(p.generation);
                }
                continue;
            };
            app.probing = true;
            app.probe_at = now + PROBE_EVERY;
            let look = !app.unready_said && now >= app.look_at;
            if look {
                app.look_at = now + LOOK_EVERY;
            }
            let warmup = setup.warmup.clone();
            probe(
                target,
                setup.health.clone(),
                warmup,
                (p.generation, Some(p.pid), look),
                events.clone(),
            );
        }
        for g in settled {
            self.on_ready(g);
        }
    }

    /// A ready app process's ping: a probe (its `health`, or its endpoint accepting), unless
    /// it pings by itself with `WATCHDOG=1`; an activated app with neither is alive or not.
    pub(super) fn app_ping(&mut self, i: usize, now: Instant) {
        let setup = self.probe_setup(i);
        let events = self.events.clone();
        let Some(p) = self.slots[i].current.as_mut() else {
            return;
        };
        let Some(app) = p.app.as_mut() else { return };
        if app.watchdog || app.probing {
            return;
        }
        let Some(target) = setup.target(app.endpoint.as_ref()) else {
            p.last_pong = now;
            return;
        };
        app.probing = true;
        probe(
            target,
            setup.health,
            Warmup::default(),
            (p.generation, None, false),
            events,
        );
    }

    /// A front worker (`reporter`) saw requests to the app process at `endpoint` time out
    /// several times in a row: a frozen or wedged process, which a TCP probe cannot tell from
    /// a healthy one. Replaced, as a missed ping is.
    pub(super) fn on_unresponsive(&mut self, reporter: u64, endpoint: &str) {
        let Some(pool) = self
            .slots
            .iter()
            .find(|s| s.current.as_ref().is_some_and(|p| p.generation == reporter))
            .map(|s| s.pool)
        else {
            return;
        };
        for slot in self.slots.iter_mut().filter(|s| s.pool == pool) {
            let name = slot.spec.name();
            let Some(p) = slot.current.as_mut() else {
                continue;
            };
            let same = p
                .app
                .as_ref()
                .and_then(|a| a.endpoint.as_ref())
                .is_some_and(|e| e.to_string() == endpoint);
            if same && p.happen(Happening::Unresponsive, Instant::now()).is_some() {
                crate::server::log("master", format!("app {name} (pid {}) let {} requests in a row time out (response_timeout): replaced it", p.pid, crate::proxy::UNRESPONSIVE_AFTER));
            }
        }
    }

    pub(super) fn on_probed(&mut self, generation: u64, healthy: bool, unready: Option<String>) {
        let Some((_, p)) = self.proc_of(generation) else {
            return;
        };
        let pid = p.pid;
        if let Some(app) = p.app.as_mut() {
            app.probing = false;
            if let Some(why) = unready.filter(|_| !app.unready_said) {
                app.unready_said = true;
                crate::os::log("master", format!("app pid {pid} is not ready: {why}"));
            }
        }
        if !healthy {
            return;
        }
        if p.life == Life::Starting {
            self.on_ready(generation);
        } else {
            p.last_pong = Instant::now();
        }
    }

    /// The address an activated slot's health probe goes through: its pool's first listener
    /// group, the unspecified address replaced by loopback.
    fn activation_address(&self, i: usize) -> Option<SocketAddr> {
        let pool = &self.slots[i].spec.pool;
        let g = self.groups.iter().find(|g| g.serves(pool))?;
        let mut addr = g.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        Some(addr)
    }

    /// Tells every front worker of pool `pool` which of its app processes are ready, nearest
    /// to the worker's node first. While none is (a reload that changed the pool replaces its
    /// apps and fronts at once, and new fronts take connections first), the retiring apps of
    /// the pool's previous configuration stand in, so no request meets an empty list (503).
    pub(super) fn publish_upstreams(&mut self, pool: usize) {
        let mut ready: Vec<(Option<u32>, Endpoint)> = self
            .slots
            .iter()
            .filter(|s| s.pool == pool && s.app.is_some())
            .filter_map(|s| {
                let p = s.current.as_ref().filter(|p| p.life.is_ready())?;
                Some((s.spec.node, p.app.as_ref()?.endpoint.clone()?))
            })
            .collect();
        if ready.is_empty() {
            let name = &self.pools[pool].spec.name;
            ready = self
                .retiring
                .iter()
                .filter(|(p, old)| p == name && old.life.is_ready())
                .filter_map(|(_, old)| Some((None, old.app.as_ref()?.endpoint.clone()?)))
                .collect();
        }
        let distance = |a, b| self.topology.distance(a, b);
        let mut unsent = false;
        for s in self
            .slots
            .iter()
            .filter(|s| s.pool == pool && s.app.is_none() && s.spec.proxy.is_some())
        {
            let tiers = tiers_for(s.spec.node, &ready, distance);
            let Ok(json) = serde_json::to_string(&tiers) else {
                continue;
            };
            let line = Message::Upstreams(json).line();
            for p in s.current.iter().chain(s.replacing.iter()) {
                // Refused (a worker that does not read): the tick retries.
                if let Some(control) = &p.control {
                    unsent |= !control.send(&line);
                }
            }
        }
        self.upstreams_unsent.retain(|&p| p != pool);
        if unsent {
            self.upstreams_unsent.push(pool);
        }
    }
}

/// Probes `target` on a thread of its own (blocking connect and read, bounded), and reports
/// the outcome as an event. For a starting process (`pid` given) on a TCP port, the port
/// must also be its own: the probe's connection lands wherever the kernel finds a listener,
/// and another local user may have bound the port first.
fn probe(
    target: Target,
    health: Option<String>,
    warmup: Warmup,
    (generation, pid, look): (u64, Option<u32>, bool),
    events: tokio::sync::mpsc::UnboundedSender<super::Event>,
) {
    let _ = std::thread::Builder::new()
        .name("app-probe".into())
        .spawn(move || {
            let answered = probe_now(&target, health.as_deref()).is_ok();
            let stranger = match (&target, pid) {
                // Looked at once something answered: whoever answered is listening by then.
                (Target::Own(Endpoint::Tcp(addr)), Some(pid)) if answered => {
                    stranger_on(addr.port(), pid)
                }
                _ => None,
            };
            let unready = match (&target, pid) {
                (Target::Own(Endpoint::Tcp(addr)), Some(pid)) if !answered && look => {
                    elsewhere(*addr, pid)
                }
                _ => stranger.clone(),
            };
            let healthy = answered
                && stranger.is_none()
                && (warmup.paths.is_empty() || warm_up(&target, &warmup).is_ok());
            let _ = events.send(super::Event::Probed {
                generation,
                healthy,
                unready,
            });
        });
}

/// Where the app `pid` (or a child) listens when nothing listens on `given`, the address it
/// was given: an app that binds a port of its own (`app.listen(3000)`) would otherwise only
/// meet `startup_time_limit`, with nothing to say why.
fn elsewhere(given: SocketAddr, pid: u32) -> Option<String> {
    let ports = crate::os::sockets_of::listening_ports_of_tree(pid);
    let others: Vec<String> = ports
        .iter()
        .filter(|p| **p != given.port())
        .map(u16::to_string)
        .collect();
    if others.is_empty() {
        return None;
    }
    let many = if others.len() > 1 { "s" } else { "" };
    Some(format!("it listens on port{many} {}, not on {given}, the address it was given (in PORT and the command's `{{port}}`); make it listen on that port — e.g. `app.listen(process.env.PORT)`, `--bind 127.0.0.1:{{port}}`", others.join(", ")))
}

/// Who, other than the app `pid` and its children, listens on its loopback `port`.
fn stranger_on(port: u16, pid: u32) -> Option<String> {
    let strangers = crate::os::sockets_of::strangers_on_port(port, pid);
    let first = strangers.first()?;
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(first.uid))
        .ok()
        .flatten()
        .map_or_else(
            || format!("uid {}", first.uid),
            |u| format!("user {}", u.name),
        );
    Some(format!("127.0.0.1:{port}, the port it was given, is listened on by another process ({user}), not by the app or its children; its visitors are not sent there (it is started again on another port if it cannot bind its own)"))
}

/// IIS's Application Initialization: each warm-up path requested of a new process, in
/// order, its whole answer awaited (whatever its status), before the process is ready — so
/// the first visitor does not pay for its caches and lazy imports. A connection that fails
/// makes the probe fail (tried again, warm-up included).
fn warm_up(target: &Target, warmup: &Warmup) -> std::io::Result<()> {
    let mut said = Vec::new();
    for path in &warmup.paths {
        let started = std::time::Instant::now();
        let mut stream = connect(target)?;
        stream.set_timeout(warmup.timeout)?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: espalier-warmup\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes())?;
        // The answer is read to its end and dropped as it comes (only its status line is
        // kept), within the pool's response_timeout in all: an app that streams forever
        // neither grows the master nor holds the start.
        let mut head = [0u8; 16];
        let mut kept = 0;
        let mut piece = [0u8; 16 << 10];
        loop {
            let n = match stream.read(&mut piece) {
                Ok(_) if started.elapsed() > warmup.timeout => {
                    Err(std::io::ErrorKind::TimedOut.into())
                }
                other => other,
            }
            .inspect_err(|e| {
                let name = &warmup.name;
                crate::os::log("master", format!("app {name}: warm-up request {path} gave up: {e} (response_timeout {}s); it is tried again", warmup.timeout.as_secs()));
            })?;
            if n == 0 {
                break;
            }
            let take = n.min(head.len() - kept);
            head[kept..kept + take].copy_from_slice(&piece[..take]);
            kept += take;
        }
        let status = crate::http::access_log::status_of(&head[..kept]);
        said.push(format!(
            "{path} {status} ({} ms)",
            started.elapsed().as_millis()
        ));
    }
    crate::os::log(
        "master",
        format!("app {} warmed up: {}", warmup.name, said.join(", ")),
    );
    Ok(())
}

/// A connection to what `target` names, with the probe's timeouts.
fn connect(target: &Target) -> std::io::Result<Box<dyn ReadWrite>> {
    Ok(match target {
        Target::Own(Endpoint::Tcp(addr)) => Box::new(tcp(*addr)?),
        Target::Own(Endpoint::Unix(path)) => {
            let s = std::os::unix::net::UnixStream::connect(path)?;
            s.set_read_timeout(Some(PROBE_TIMEOUT))?;
            s.set_write_timeout(Some(PROBE_TIMEOUT))?;
            Box::new(s)
        }
        Target::Through(addr, cpus) => {
            // Connections are steered by the CPU that sends the SYN: run on the process's.
            let _ = crate::os::numa::set_thread_affinity(0, cpus);
            Box::new(tcp(*addr)?)
        }
    })
}

fn probe_now(target: &Target, health: Option<&str>) -> std::io::Result<()> {
    let mut stream = connect(target)?;
    let Some(path) = health else {
        return Ok(());
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: espalier-health\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes())?;
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < 12 {
        let n = stream.read(&mut head[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let line = std::str::from_utf8(&head[..got]).unwrap_or("");
    if line.starts_with("HTTP/1.") && line.get(9..10) == Some("2") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("health answered {line:?}")))
    }
}

trait ReadWrite: Read + Write {
    /// Read and write timeouts.
    fn set_timeout(&self, d: Duration) -> std::io::Result<()>;
}

impl ReadWrite for std::net::TcpStream {
    fn set_timeout(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))?;
        self.set_write_timeout(Some(d))
    }
}

impl ReadWrite for std::os::unix::net::UnixStream {
    fn set_timeout(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))?;
        self.set_write_timeout(Some(d))
    }
}

fn tcp(addr: SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let s = std::net::TcpStream::connect_timeout(&addr, PROBE_TIMEOUT)?;
    s.set_read_timeout(Some(PROBE_TIMEOUT))?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(s)
}
