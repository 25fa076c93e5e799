//! Slots and their processes: a slot is one planned worker position (a pool's index-th
//! worker); over its life it holds the current process, perhaps a replacement starting (an
//! overlapped recycle) and old processes draining. Here they start, become ready, are
//! recycled, exit and are reaped — crashes restarted with backoff or stopping the pool
//! (rapid-fail protection).
//!
//! Owns: the process state machine of a slot. Must not touch: listener sockets, cgroups
//! (see [`super::cgroups`]) or the decisions themselves ([`crate::server::lifecycle`]).

use super::life::{
    after_exit, Act, AfterExit, Deadlines, Happening, Life, Restart, SlotHistory, Times, Why,
};
use super::{Event, Supervisor};
use crate::config::{AppCommand, Config, PoolSpec, Transport};
use crate::os;
use crate::server::control::Message;

use crate::server::log;
use crate::server::spawn::spawn_worker;
use crate::server::spec::WorkerSpec;
use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

/// How long a replaced proxied app process keeps serving new requests after its successor is
/// ready: the front workers' switch to the successor is one control message away.
const UPSTREAM_HANDOVER: Duration = Duration::from_millis(500);
use tokio::io::AsyncBufReadExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::task::JoinHandle;

/// One running worker process.
pub(super) struct Proc {
    pub(super) pid: u32,
    /// Its pool's name.
    pub(super) pool: String,
    pub(super) generation: u64,
    pub(super) started: Instant,
    pub(super) started_unix: u64,
    /// Where it is in its life (changed only through [`Proc::happen`]).
    pub(super) life: Life,
    pub(super) requests: u64,
    /// Connection tasks that panicked and were contained (see `server::conn_task`).
    pub(super) panics: u64,
    /// A front worker's requests forwarded off its node.
    pub(super) remote: u64,
    /// Its connections open now, accepted so far, and accepted on the CPU that received them.
    pub(super) connections: u64,
    pub(super) accepted: u64,
    pub(super) steered: u64,
    pub(super) last_pong: Instant,
    /// Whether the last ping found stuck threads (logged once per episode).
    pub(super) stuck: bool,
    /// An espalier worker's control socket; `None` for an app process (it has no such
    /// channel: sd_notify, probes and its exit tell about it).
    pub(super) control: Option<OwnedWriteHalf>,
    /// Reads the worker's control lines, or an app's `NOTIFY_SOCKET`.
    pub(super) reader: JoinHandle<()>,
    /// What only an app process has.
    pub(super) app: Option<AppProc>,
}

/// The state of one application process (a pool with `command`).
pub(super) struct AppProc {
    /// Where a proxied process listens.
    pub(super) endpoint: Option<crate::proxy::Endpoint>,
    /// Its last lines of output, for the log when it dies.
    pub(super) output: crate::server::app::OutputTail,
    /// It has sent `WATCHDOG=1`: its pings come by themselves.
    pub(super) watchdog: bool,
    /// A readiness or health probe is under way.
    pub(super) probing: bool,
    /// When the next readiness probe may go out.
    pub(super) probe_at: Instant,
}

impl Proc {
    /// Moves its life on by `h` at `now` and sends the signal that calls for: what was sent.
    pub(super) fn happen(&mut self, h: Happening, now: Instant) -> Option<Act> {
        let times = Times {
            started: self.started,
            last_pong: self.last_pong,
        };
        let (life, act) = self.life.on(h, now, times);
        self.life = life;
        match act {
            Some(Act::Term) => self.signal(libc::SIGTERM),
            Some(Act::Kill(_)) => self.signal(libc::SIGKILL),
            None => {}
        }
        act
    }

    /// Asked to stop: a proxied app after its front workers learn of its successor (the
    /// hand-over), anything else at once.
    pub(super) fn stop(&mut self, now: Instant) {
        let proxied = self.app.as_ref().is_some_and(|a| a.endpoint.is_some());
        let handover = proxied.then_some(UPSTREAM_HANDOVER);
        self.happen(Happening::Stop { handover }, now);
    }

    /// Resident memory: an application's whole process tree, an espalier worker's own.
    pub(super) fn resident_bytes(&self) -> Option<u64> {
        if self.app.is_none() {
            return os::process::resident_bytes(self.pid);
        }
        let tree = os::process::process_tree(self.pid);
        let sizes: Vec<u64> = tree
            .iter()
            .filter_map(|&pid| os::process::resident_bytes(pid))
            .collect();
        (!sizes.is_empty()).then(|| sizes.iter().sum())
    }

    /// Sends `sig`. SIGKILL reaches an app's whole process group (gunicorn's workers with
    /// their arbiter); any other signal goes to the process, which passes it on as it sees fit.
    pub(super) fn signal(&self, sig: i32) {
        if self.app.is_some() && sig == libc::SIGKILL {
            let _ = os::process::kill_group(self.pid, sig);
        }
        let _ = os::process::kill(self.pid, sig);
    }
}

/// One planned worker position: a pool's index-th worker.
pub(super) struct Slot {
    pub(super) spec: WorkerSpec,
    pub(super) pool: usize,
    /// The application this slot runs; `None` for an espalier worker.
    pub(super) app: Option<AppCommand>,
    pub(super) current: Option<Proc>,
    /// The replacement started by an overlapped recycle, not yet ready.
    pub(super) replacing: Option<Proc>,
    /// Old workers finishing their requests.
    pub(super) draining: Vec<Proc>,
    /// When it starts its next process.
    pub(super) restart: Restart,
    pub(super) young_deaths: u32,
    pub(super) restarts: u32,
    pub(super) recycles: u32,
    pub(super) last_exit: Option<String>,
    /// Soft affinity: where the worker has been widened to.
    pub(super) soft: crate::server::soft::SoftState,
}

impl PoolRt {
    pub(super) fn new(spec: PoolSpec) -> Self {
        PoolRt {
            spec,
            stopped: None,
            crashes: VecDeque::new(),
            responders: Vec::new(),
            allocate_mib: None,
            cpu_group: None,
            fail_starts: 0,
        }
    }
}

impl Slot {
    pub(super) fn new(spec: WorkerSpec, pool: usize) -> Self {
        Slot {
            spec,
            pool,
            app: None,
            current: None,
            replacing: None,
            draining: Vec::new(),
            restart: Restart::No,
            young_deaths: 0,
            restarts: 0,
            recycles: 0,
            last_exit: None,
            soft: Default::default(),
        }
    }
}

pub(super) struct PoolRt {
    pub(super) spec: PoolSpec,
    /// Why it is stopped (rapid-fail, or by command).
    pub(super) stopped: Option<String>,
    pub(super) crashes: VecDeque<Instant>,
    pub(super) responders: Vec<JoinHandle<()>>,
    /// Fault injection for tests (`ESPALIER_ALLOCATE_AT_START=POOL:MIB`): first starts of the
    /// pool's workers allocate this much, to push them past a memory recycle limit.
    pub(super) allocate_mib: Option<u64>,
    /// The CPU-capped control group of a pool with `cpu_limit`.
    pub(super) cpu_group: Option<os::cgroup::Group>,
    /// Fault injection for tests (`ESPALIER_FAIL_AT_START=POOL:N` in the master's
    /// environment): the next N *restarts* of the pool's workers fail. First starts never do:
    /// a worker that cannot start at launch stops `espalier serve` with its error instead.
    pub(super) fail_starts: u32,
}

impl Slot {
    /// The slots of one planned process of `config`: an espalier worker; an activated
    /// application; or, for a proxied application, the app process and the front worker
    /// that forwards to it (the app first, so it is starting when the front is ready).
    pub(super) fn for_spec(spec: WorkerSpec, pool: usize, config: &Config) -> Vec<Slot> {
        let app = config.pool(&spec.pool).and_then(|p| p.app.clone());
        match app {
            None => vec![Slot::new(spec, pool)],
            Some(app) if app.transport == Transport::Activation => {
                let mut s = Slot::new(spec, pool);
                s.app = Some(app);
                vec![s]
            }
            Some(app) => {
                let mut app_spec = spec.clone();
                app_spec.threads.clear();
                app_spec.proxy = None;
                let mut s = Slot::new(app_spec, pool);
                s.app = Some(app);
                vec![s, Slot::new(spec, pool)]
            }
        }
    }

    /// Every process of the slot: the current one, its replacement, and the ones draining.
    pub(super) fn procs(&self) -> impl Iterator<Item = &Proc> {
        self.current
            .iter()
            .chain(self.replacing.iter())
            .chain(self.draining.iter())
    }

    pub(super) fn procs_mut(&mut self) -> impl Iterator<Item = &mut Proc> {
        self.current
            .iter_mut()
            .chain(self.replacing.iter_mut())
            .chain(self.draining.iter_mut())
    }

    /// Takes the process `pid` out of the slot, wherever it is.
    fn take_pid(&mut self, pid: u32) -> Option<Proc> {
        if self.current.as_ref().is_some_and(|p| p.pid == pid) {
            return self.current.take();
        }
        if self.replacing.as_ref().is_some_and(|p| p.pid == pid) {
            return self.replacing.take();
        }
        let k = self.draining.iter().position(|p| p.pid == pid)?;
        Some(self.draining.remove(k))
    }
}

/// Turns a worker's control lines into events, until it closes the socket.
fn read_lines(
    read_half: tokio::net::unix::OwnedReadHalf,
    generation: u64,
    events: tokio::sync::mpsc::UnboundedSender<Event>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(read_half);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let Some(message) = Message::parse(&line) else {
                        continue;
                    };
                    if events
                        .send(Event::Worker {
                            generation,
                            message,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    })
}

impl Supervisor {
    /// Every process of every slot, and the retiring ones of a previous configuration.
    pub(super) fn procs(&self) -> impl Iterator<Item = &Proc> {
        self.slots
            .iter()
            .flat_map(Slot::procs)
            .chain(self.retiring.iter().map(|(_, p)| p))
    }

    pub(super) fn any_alive(&self) -> bool {
        self.procs().next().is_some()
    }

    pub(super) fn signal_all(&mut self, sig: i32) {
        let slots = self.slots.iter_mut().flat_map(Slot::procs_mut);
        let now = Instant::now();
        for p in slots.chain(self.retiring.iter_mut().map(|(_, p)| p)) {
            p.happen(Happening::Signalled, now);
            p.signal(sig);
        }
    }

    /// Starts a process for slot `i` (as its replacement when `replacing`).
    pub(super) fn start(&mut self, i: usize, replacing: bool) -> Result<(), String> {
        let first_start = self.slots[i].restarts == 0
            && self.slots[i].recycles == 0
            && !replacing
            && self.slots[i].last_exit.is_none();
        let pool = &mut self.pools[self.slots[i].pool];
        let fail = pool.fail_starts > 0 && !first_start;
        if fail {
            pool.fail_starts -= 1;
        }
        let allocate = if first_start { pool.allocate_mib } else { None };
        let watchdog = pool.spec.ping_response_time;
        let generation = self.next_generation;
        self.next_generation += 1;
        let (pid, control, reader, app) = match &self.slots[i].app {
            Some(app) => {
                let spec = &self.slots[i].spec;
                let started = crate::server::app::spawn_app(
                    spec,
                    app,
                    &crate::server::app::fd_names(spec),
                    generation,
                    Some(watchdog),
                    self.events.clone(),
                )?;
                let state = AppProc {
                    endpoint: started.endpoint,
                    output: started.output,
                    watchdog: false,
                    probing: false,
                    probe_at: Instant::now(),
                };
                (started.pid, None, started.notify, Some(state))
            }
            None => {
                let (pid, control) = spawn_worker(self.slots[i].spec.clone(), fail, allocate)?;
                let (read_half, write_half) = control.into_split();
                (
                    pid,
                    Some(write_half),
                    read_lines(read_half, generation, self.events.clone()),
                    None,
                )
            }
        };
        let p = Proc {
            pid,
            pool: self.slots[i].spec.pool.clone(),
            generation,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            life: Life::Starting,
            requests: 0,
            connections: 0,
            accepted: 0,
            steered: 0,
            panics: 0,
            remote: 0,
            last_pong: Instant::now(),
            stuck: false,
            control,
            reader,
            app,
        };
        let slot = &mut self.slots[i];
        if replacing {
            slot.replacing = Some(p);
        } else {
            slot.current = Some(p);
        }
        if slot.app.is_none() && slot.spec.proxy.is_some() {
            // A new front worker learns where its pool's app processes are.
            self.publish_upstreams(self.slots[i].pool);
        }
        Ok(())
    }

    /// The slot a worker process (by generation) belongs to now.
    pub(super) fn slot_of(&self, generation: u64) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| s.procs().any(|p| p.generation == generation))
    }

    /// The process of `generation`, wherever it is in its slot, with the slot's name.
    pub(super) fn proc_of(&mut self, generation: u64) -> Option<(String, &mut Proc)> {
        let slot = self.slot_of(generation)?;
        let s = &mut self.slots[slot];
        let name = s.spec.name();
        s.procs_mut()
            .find(|p| p.generation == generation)
            .map(|p| (name, p))
    }

    pub(super) fn on_ready(&mut self, generation: u64) {
        let Some(i) = self.slot_of(generation) else {
            return;
        };
        let slot = &mut self.slots[i];
        let cpus = crate::cpuset::CpuSet::from_ids(slot.spec.cpus.iter().copied());
        let node = slot.spec.node.map_or("-".into(), |n| n.to_string());
        let what = if slot.app.is_some() { "app" } else { "worker" };
        let now = Instant::now();
        if let Some(p) = slot
            .current
            .as_mut()
            .filter(|p| p.generation == generation && p.life == Life::Starting)
        {
            p.happen(Happening::Ready, now);
            log(
                "master",
                format!(
                    "{what} {} started: pid {} node {node} cpus {cpus}",
                    slot.spec.name(),
                    p.pid
                ),
            );
        } else if slot
            .replacing
            .as_ref()
            .is_some_and(|p| p.generation == generation)
        {
            // Overlapped recycle: the new worker accepts; the old one drains.
            let Some(mut new) = slot.replacing.take() else {
                return;
            };
            new.happen(Happening::Ready, now);
            if let Some(mut old) = slot.current.take() {
                // A proxied app's front workers first learn of the new process (below).
                old.stop(now);
                slot.draining.push(old);
            }
            log(
                "master",
                format!(
                    "{what} {} started: pid {} node {node} cpus {cpus} (recycled)",
                    slot.spec.name(),
                    new.pid
                ),
            );
            slot.current = Some(new);
            slot.recycles += 1;
        }
        if self.slots[i].app.is_some() {
            self.publish_upstreams(self.slots[i].pool);
        }
    }

    /// Reaps every exited worker: expected exits are logged; crashes are restarted with
    /// backoff or stop the pool (rapid-fail protection).
    pub(super) fn reap(&mut self) {
        let mut republish: Vec<usize> = Vec::new();
        self.reap_each(&mut republish);
        republish.dedup();
        for pool in republish {
            self.publish_upstreams(pool);
        }
    }

    fn reap_each(&mut self, republish: &mut Vec<usize>) {
        while let Some((pid, status)) = os::process::reap_child() {
            let now = Instant::now();
            if let Some(k) = self.retiring.iter().position(|(_, p)| p.pid == pid) {
                let (pool, p) = self.retiring.remove(k);
                p.reader.abort();
                let what = match &p.app {
                    Some(app) => {
                        crate::server::app::forget(p.generation, app.endpoint.as_ref());
                        "app"
                    }
                    None => "worker",
                };
                log("master", format!("{what} of the previous configuration of pool {pool} (pid {pid}) exited: {status}"));
                continue;
            }
            let Some(i) = self
                .slots
                .iter()
                .position(|s| s.procs().any(|p| p.pid == pid))
            else {
                continue;
            };
            let slot = &mut self.slots[i];
            let proc_ = slot.take_pid(pid).expect("found above");
            proc_.reader.abort();
            let name = slot.spec.name();
            let what = if proc_.app.is_some() { "app" } else { "worker" };
            if let Some(app) = &proc_.app {
                crate::server::app::forget(proc_.generation, app.endpoint.as_ref());
                if app.endpoint.is_some() {
                    republish.push(slot.pool);
                }
                if !proc_.life.is_stopping() {
                    let tail = app.output.lock().unwrap_or_else(|e| e.into_inner());
                    if !tail.is_empty() {
                        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
                        log(
                            "master",
                            format!("app {name} (pid {pid}) said last: {}", lines.join(" | ")),
                        );
                    }
                }
            }
            let pool = &mut self.pools[slot.pool];
            if !proc_.life.is_stopping() {
                slot.restarts += 1;
                slot.last_exit = Some(status.to_string());
                if pool.stopped.is_some() {
                    continue;
                }
            }
            let history = SlotHistory {
                young_deaths: &mut slot.young_deaths,
                crashes: &mut pool.crashes,
                rapid_fail: &pool.spec.rapid_fail,
            };
            let current_gone = slot.current.is_none();
            match after_exit(
                proc_.life,
                proc_.started,
                now,
                slot.restart,
                current_gone,
                history,
            ) {
                AfterExit::Expected(restart) => {
                    log(
                        "master",
                        format!("{what} {name} (pid {pid}) exited: {status}"),
                    );
                    slot.restart = restart;
                }
                AfterExit::RapidFail => {
                    let rf = &pool.spec.rapid_fail;
                    let why = format!(
                        "{} crashes within {}",
                        rf.max_crashes,
                        crate::units::format_duration(rf.interval)
                    );
                    log(
                        "master",
                        format!("{what} {name} (pid {pid}) exited: {status}"),
                    );
                    let pool_name = pool.spec.name.clone();
                    self.stop_pool(&pool_name, &format!("rapid-fail protection: {why}"));
                }
                AfterExit::Crashed(delay) => {
                    log(
                        "master",
                        format!(
                            "{what} {name} (pid {pid}) exited: {status}; restarting it in {}",
                            crate::units::format_duration(delay)
                        ),
                    );
                    slot.restart = Restart::At(now + delay);
                }
            }
        }
    }

    /// Recycles one worker: overlapped (new one first) unless the pool says otherwise.
    pub(super) fn recycle_slot(&mut self, i: usize) {
        let overlap = self.pools[self.slots[i].pool].spec.recycle.overlap;
        if self.slots[i].replacing.is_some() {
            return;
        }
        if overlap && self.slots[i].current.is_some() {
            if let Err(e) = self.start(i, true) {
                log(
                    "master",
                    format!(
                        "cannot start a replacement for {}: {e}",
                        self.slots[i].spec.name()
                    ),
                );
            }
            return;
        }
        let slot = &mut self.slots[i];
        match slot.current.take() {
            Some(mut old) => {
                old.happen(Happening::Stop { handover: None }, Instant::now());
                slot.draining.push(old);
                slot.recycles += 1;
                slot.restart = Restart::AfterExit;
            }
            None => slot.restart = Restart::At(Instant::now()),
        }
    }

    /// Retiring workers drain once their pool's new workers are all ready.
    pub(super) fn retire_when_replaced(&mut self) {
        let now = Instant::now();
        for (pool, p) in &mut self.retiring {
            if p.life.is_stopping() {
                continue;
            }
            let slots: Vec<&Slot> = self.slots.iter().filter(|s| &s.spec.pool == pool).collect();
            let replaced = slots
                .iter()
                .all(|s| s.current.as_ref().is_some_and(|c| c.life.is_ready()));
            let pool_stopped = self
                .pools
                .iter()
                .any(|x| &x.spec.name == pool && x.stopped.is_some());
            if pool_stopped {
                p.happen(Happening::Stop { handover: None }, now);
            } else if replaced {
                // A proxied app's front workers first learn of the new processes (published
                // when they became ready); then it stops, as an overlapped recycle's does.
                p.stop(now);
            }
        }
    }

    /// The deadlines of the processes that are stopping: a replaced app's SIGTERM after its
    /// hand-over, SIGKILL past its pool's `shutdown_time_limit`.
    pub(super) fn enforce_shutdown_limits(&mut self, now: Instant) {
        let limits_of = |pools: &[PoolRt], name: &str| {
            let shutdown = pools
                .iter()
                .find(|p| p.spec.name == name)
                .map_or(Duration::from_secs(90), |p| p.spec.shutdown_time_limit);
            // Only the shutdown limit applies to a stopping process.
            Deadlines {
                startup: Duration::MAX,
                ping: Duration::MAX,
                shutdown,
            }
        };
        let pools = &self.pools;
        let drainers = self
            .slots
            .iter_mut()
            .flat_map(|s| s.draining.iter_mut())
            .chain(self.retiring.iter_mut().map(|(_, p)| p));
        for p in drainers.filter(|p| p.life.is_stopping()) {
            let limits = limits_of(pools, &p.pool);
            if p.happen(Happening::Tick(limits), now) == Some(Act::Kill(Why::ShutdownLimit)) {
                log(
                    "master",
                    format!(
                        "worker pid {} still draining after {}s (shutdown_time_limit): killed",
                        p.pid,
                        limits.shutdown.as_secs()
                    ),
                );
            }
        }
    }
}
