//! The pool supervisor: the master's event loop after start-up — IIS's WAS keeping application
//! pools alive without an operator.
//!
//! Owns: the life of every worker process — start, readiness, pings, crash restart with
//! backoff, rapid-fail protection (a stopped pool's sites are answered by a small responder the
//! master keeps: 503, or a reset with `load_balancer = "tcp"`), overlapped recycling (by
//! requests, uptime, memory, schedule or on demand), graceful stop — and the admin endpoint's
//! commands. Decisions come from [`super::lifecycle`]; syscalls from [`crate::os`].
//! Must not touch: requests (it answers none except a stopped pool's 503) or the listeners'
//! sockets beyond accepting on copies of them while a pool is stopped.

use super::lifecycle;
use super::log;
use super::master::{spawn_worker, ListenerGroup};
use super::spec::WorkerSpec;
use crate::config::{Config, LoadBalancer, PoolSpec};
use crate::os;
use serde::Serialize;
use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How often stats pings go out (pings also count as the health check).
const STATS_PING: Duration = Duration::from_secs(1);

/// What the admin endpoint asks of the supervisor.
#[derive(Debug)]
pub enum AdminCommand {
    Status,
    StopPool(String),
    StartPool(String),
    Recycle(String),
    Reload,
}

/// The supervisor's answer: (HTTP status, JSON body).
pub type AdminReply = (u16, serde_json::Value);

/// Worker processes are named by generation (unique for the master's life), not by slot:
/// a reload adds and removes slots.
pub(super) enum Event {
    Ready {
        generation: u64,
    },
    Failed {
        generation: u64,
        why: String,
    },
    Pong {
        generation: u64,
        requests: u64,
        panics: u64,
    },
    /// The worker answers, but these engine threads of it are not turning.
    Stuck {
        generation: u64,
        threads: String,
    },
    Admin(AdminCommand, oneshot::Sender<AdminReply>),
}

impl From<(AdminCommand, oneshot::Sender<AdminReply>)> for Event {
    fn from((cmd, reply): (AdminCommand, oneshot::Sender<AdminReply>)) -> Self {
        Event::Admin(cmd, reply)
    }
}

/// One running worker process.
struct Proc {
    pid: u32,
    /// Its pool's name.
    pool: String,
    generation: u64,
    started: Instant,
    started_unix: u64,
    ready: bool,
    /// Asked to stop (recycle, pool stop, shutdown): its exit is no crash.
    stopping: bool,
    /// When a draining worker was told to stop, for `shutdown_time_limit`.
    stop_sent: Option<Instant>,
    requests: u64,
    /// Connection tasks that panicked and were contained (see `server::conn_task`).
    panics: u64,
    last_pong: Instant,
    /// Whether the last ping found stuck threads (logged once per episode).
    stuck: bool,
    control: OwnedWriteHalf,
    reader: JoinHandle<()>,
}

/// One planned worker position: a pool's index-th worker.
struct Slot {
    spec: WorkerSpec,
    pool: usize,
    current: Option<Proc>,
    /// The replacement started by an overlapped recycle, not yet ready.
    replacing: Option<Proc>,
    /// Old workers finishing their requests.
    draining: Vec<Proc>,
    respawn_at: Option<Instant>,
    young_deaths: u32,
    restarts: u32,
    recycles: u32,
    last_exit: Option<String>,
    /// A non-overlapped recycle: start again when the old one has exited.
    restart_after_exit: bool,
    /// Soft affinity: where the worker has been widened to.
    soft: super::soft::SoftState,
}

impl PoolRt {
    fn new(spec: PoolSpec) -> Self {
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
    fn new(spec: WorkerSpec, pool: usize) -> Self {
        Slot {
            spec,
            pool,
            current: None,
            replacing: None,
            draining: Vec::new(),
            respawn_at: None,
            young_deaths: 0,
            restarts: 0,
            recycles: 0,
            last_exit: None,
            restart_after_exit: false,
            soft: Default::default(),
        }
    }
}

struct PoolRt {
    spec: PoolSpec,
    /// Why it is stopped (rapid-fail, or by command).
    stopped: Option<String>,
    crashes: VecDeque<Instant>,
    responders: Vec<JoinHandle<()>>,
    /// Fault injection for tests (`ESPALIER_ALLOCATE_AT_START=POOL:MIB`): first starts of the
    /// pool's workers allocate this much, to push them past a memory recycle limit.
    allocate_mib: Option<u64>,
    /// The CPU-capped control group of a pool with `cpu_limit`.
    cpu_group: Option<os::cgroup::Group>,
    /// Fault injection for tests (`ESPALIER_FAIL_AT_START=POOL:N` in the master's
    /// environment): the next N *restarts* of the pool's workers fail. First starts never do:
    /// a worker that cannot start at launch stops `espalier serve` with its error instead.
    fail_starts: u32,
}

struct Supervisor {
    /// The configuration running now (replaced by a reload).
    config: Config,
    topology: crate::topology::Topology,
    groups: Vec<ListenerGroup>,
    /// Workers of a reloaded or removed pool: they serve until the pool's new workers are all
    /// ready (or at once, for a removed pool), then drain.
    retiring: Vec<(String, Proc)>,
    /// Each node's online CPUs, for soft affinity.
    nodes: Vec<(u32, crate::cpuset::CpuSet)>,
    online: crate::cpuset::CpuSet,
    /// The last `/proc/stat` sample and when it was taken.
    load_sample: (Instant, Vec<(u32, u64, u64)>),
    cgroups: Option<os::cgroup::Hierarchy>,
    /// Per-worker cpusets of hard-affinity pools, removed at exit.
    cpusets: Vec<os::cgroup::Group>,
    slots: Vec<Slot>,
    pools: Vec<PoolRt>,
    events: mpsc::UnboundedSender<Event>,
    next_generation: u64,
    last_second_of_day: u32,
}

pub(super) async fn run(
    config: &Config,
    topology: &crate::topology::Topology,
    groups: Vec<ListenerGroup>,
    specs: Vec<WorkerSpec>,
) -> Result<i32, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut sigchld = signal(SignalKind::child()).map_err(|e| e.to_string())?;
    let mut sighup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let pools: Vec<PoolRt> = config
        .pools
        .iter()
        .map(|p| {
            // Fault injection for tests, from the master's environment (`POOL:N`).
            let injected = |var: &str| -> Option<u64> {
                std::env::var(var)
                    .ok()?
                    .split_once(':')
                    .filter(|(pool, _)| *pool == p.name)?
                    .1
                    .parse()
                    .ok()
            };
            PoolRt {
                allocate_mib: injected("ESPALIER_ALLOCATE_AT_START"),
                fail_starts: injected("ESPALIER_FAIL_AT_START").unwrap_or(0) as u32,
                ..PoolRt::new(p.clone())
            }
        })
        .collect();
    let slots: Vec<Slot> = specs
        .into_iter()
        .map(|spec| {
            let pool = config
                .pools
                .iter()
                .position(|p| p.name == spec.pool)
                .expect("spec of a configured pool");
            Slot::new(spec, pool)
        })
        .collect();
    let mut sv = Supervisor {
        config: config.clone(),
        topology: topology.clone(),
        retiring: Vec::new(),
        groups,
        nodes: topology
            .nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .map(|n| (n.id, n.cpus.clone()))
            .collect(),
        online: topology.online_cpus(),
        load_sample: (Instant::now(), read_proc_stat()),
        cgroups: os::cgroup::detect(std::path::Path::new("/sys/fs/cgroup")),
        cpusets: Vec::new(),
        slots,
        pools,
        events: tx.clone(),
        next_generation: 1,
        last_second_of_day: os::process::local_second_of_day(),
    };

    for g in &sv.groups {
        let hosts: Vec<String> = g
            .routes
            .iter()
            .map(|(h, _)| h.clone().unwrap_or_else(|| "*".into()))
            .collect();
        log(
            "master",
            format!(
                "listening on http://{} for pool {} ({} sockets, hosts {})",
                g.addr,
                g.pool,
                g.sockets.len(),
                hosts.join(",")
            ),
        );
    }
    sv.make_cgroups();
    // Start every worker, then wait until each is ready or has failed.
    for i in 0..sv.slots.len() {
        if let Err(e) = sv.start(i, false) {
            sv.stop_everything(Duration::from_secs(1)).await;
            return Err(e);
        }
    }
    let startup = config
        .pools
        .iter()
        .map(|p| p.startup_time_limit)
        .max()
        .unwrap_or(Duration::from_secs(90));
    let deadline = tokio::time::Instant::now() + startup;
    while sv
        .slots
        .iter()
        .any(|s| s.current.as_ref().is_some_and(|p| !p.ready))
    {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = tokio::time::sleep_until(deadline) => None,
        };
        match ev {
            Some(Event::Ready { generation }) => sv.on_ready(generation),
            Some(Event::Failed { generation, why }) => {
                let name = sv
                    .slot_of(generation)
                    .map_or("?".to_string(), |i| sv.slots[i].spec.name());
                sv.stop_everything(Duration::from_secs(2)).await;
                return Err(format!("worker {name} could not start: {why}"));
            }
            Some(Event::Admin(_, reply)) => {
                let _ = reply.send((503, serde_json::json!({"error": "starting"})));
            }
            Some(Event::Pong { .. } | Event::Stuck { .. }) => {}
            None => {
                let late: Vec<String> = sv
                    .slots
                    .iter()
                    .filter(|s| s.current.as_ref().is_some_and(|p| !p.ready))
                    .map(|s| s.spec.name())
                    .collect();
                sv.stop_everything(Duration::from_secs(2)).await;
                return Err(format!(
                    "worker(s) {} did not report ready within {}s (startup_time_limit)",
                    late.join(", "),
                    startup.as_secs()
                ));
            }
        }
    }
    super::admin::start(config, tx.clone());
    log(
        "master",
        format!(
            "{} worker(s) serving; SIGTERM or Ctrl-C stops them gracefully",
            sv.slots.len()
        ),
    );

    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => sv.on_event(ev),
            _ = sigchld.recv() => sv.reap(),
            _ = tick.tick() => sv.on_tick(),
            _ = sighup.recv() => {
                let _ = sv.reload_logged();
            }
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
        }
    }
    log(
        "master",
        format!(
            "stopping: in-flight requests have {}s to finish (a second signal stops at once)",
            config.server.shutdown_timeout.as_secs()
        ),
    );
    for s in &mut sv.slots {
        s.respawn_at = None;
        s.restart_after_exit = false;
    }
    sv.signal_all(libc::SIGTERM);
    let deadline =
        tokio::time::Instant::now() + config.server.shutdown_timeout + Duration::from_secs(1);
    while sv.any_alive() {
        tokio::select! {
            _ = sigchld.recv() => sv.reap(),
            _ = tokio::time::sleep(Duration::from_millis(50)) => sv.reap(),
            _ = sigterm.recv() => break,
            _ = sigint.recv() => break,
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    sv.stop_everything(Duration::from_millis(300)).await;
    sv.remove_cgroups();
    log("master", "stopped");
    Ok(0)
}

impl Supervisor {
    /// Control groups: a CPU cap per pool with `cpu_limit`, a cpuset per hard-affinity worker.
    /// Where they cannot be made, one warning says why and the pool runs without.
    fn make_cgroups(&mut self) {
        self.make_cgroups_for(0);
    }

    /// Control groups for the slots from `first` on (all at start; a reload's new ones).
    fn make_cgroups_for(&mut self, first: usize) {
        let Some(h) = self.cgroups.clone() else {
            if self.pools.iter().any(|p| p.spec.cpu_limit.is_some()) {
                log("master", "warning: no cgroup cpu controller is mounted (neither v2 cpu.max nor v1 cpu.cfs_quota_us): cpu_limit is not applied");
            }
            return;
        };
        for p in 0..self.pools.len() {
            let Some(limit) = self.pools[p].spec.cpu_limit else {
                continue;
            };
            if !self.slots[first..].iter().any(|s| s.pool == p) {
                continue;
            }
            let name = self.pools[p].spec.name.clone();
            match os::cgroup::cpu_limited(&h, &name, limit) {
                Ok(g) => {
                    log("master", format!("pool {name}: CPU capped at {:.0}% of one CPU over all its workers ({})", limit * 100.0, g.dirs[0].display()));
                    for s in self.slots[first..].iter_mut().filter(|s| s.pool == p) {
                        s.spec.cgroups.extend(g.dirs.iter().cloned());
                    }
                    self.pools[p].cpu_group = Some(g);
                }
                Err(e) => log("master", format!("warning: pool {name}: cpu_limit not applied: {e}; the pool runs without a cap")),
            }
        }
        let mut warned = false;
        for s in self.slots[first..]
            .iter_mut()
            .filter(|s| s.spec.hard && s.spec.node.is_some())
        {
            let cpus = crate::cpuset::CpuSet::from_ids(s.spec.cpus.iter().copied());
            let nodes = if s.spec.memory_nodes.is_empty() {
                vec![s.spec.node.unwrap_or(0)]
            } else {
                s.spec.memory_nodes.clone()
            };
            match os::cgroup::cpuset(
                &h,
                &format!("{}-{}", s.spec.pool, s.spec.index),
                &cpus,
                &nodes,
            ) {
                Ok(g) => {
                    s.spec.cgroups.extend(g.dirs.iter().cloned());
                    self.cpusets.push(g);
                }
                Err(e) if !warned => {
                    warned = true;
                    log("master", format!("warning: hard-affinity workers get no cpuset cgroup: {e}; CPU affinity and memory policy still apply"));
                }
                Err(_) => {}
            }
        }
    }

    fn remove_cgroups(&mut self) {
        for g in self.cpusets.drain(..) {
            g.remove();
        }
        for p in &self.pools {
            if let Some(g) = &p.cpu_group {
                g.remove();
            }
        }
        if let Some(h) = &self.cgroups {
            os::cgroup::remove_parents(h);
        }
    }

    fn procs(&self) -> impl Iterator<Item = &Proc> {
        self.slots
            .iter()
            .flat_map(|s| {
                s.current
                    .iter()
                    .chain(s.replacing.iter())
                    .chain(s.draining.iter())
            })
            .chain(self.retiring.iter().map(|(_, p)| p))
    }

    fn any_alive(&self) -> bool {
        self.procs().next().is_some()
    }

    fn signal_all(&mut self, sig: i32) {
        for s in &mut self.slots {
            for p in s
                .current
                .iter_mut()
                .chain(s.replacing.iter_mut())
                .chain(s.draining.iter_mut())
            {
                p.stopping = true;
                let _ = os::process::kill(p.pid, sig);
            }
        }
        for (_, p) in &mut self.retiring {
            p.stopping = true;
            let _ = os::process::kill(p.pid, sig);
        }
    }

    /// SIGTERM to all, then SIGKILL to whoever is left after `grace`; reaps them.
    async fn stop_everything(&mut self, grace: Duration) {
        for s in &mut self.slots {
            s.respawn_at = None;
            s.restart_after_exit = false;
        }
        self.signal_all(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.any_alive() && Instant::now() < deadline {
            self.reap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.any_alive() {
            for p in self.procs() {
                log(
                    "master",
                    format!("worker pid {} did not stop in time: killed", p.pid),
                );
            }
            self.signal_all(libc::SIGKILL);
            for _ in 0..50 {
                self.reap();
                if !self.any_alive() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Starts a process for slot `i` (as its replacement when `replacing`).
    fn start(&mut self, i: usize, replacing: bool) -> Result<(), String> {
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
        let (pid, control) = spawn_worker(self.slots[i].spec.clone(), fail, allocate)?;
        let generation = self.next_generation;
        self.next_generation += 1;
        let (read_half, write_half) = control.into_split();
        let events = self.events.clone();
        // Lines from the worker become events.
        let reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(read_half);
            let mut line = String::new();
            loop {
                line.clear();
                match lines.read_line(&mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let l = line.trim();
                        let ev = if l.starts_with("ready") {
                            Event::Ready { generation }
                        } else if let Some(figures) = l.strip_prefix("pong ") {
                            let mut n = figures.split(' ').map(|n| n.parse().unwrap_or(0));
                            Event::Pong {
                                generation,
                                requests: n.next().unwrap_or(0),
                                panics: n.next().unwrap_or(0),
                            }
                        } else if let Some(threads) = l.strip_prefix("stuck ") {
                            Event::Stuck {
                                generation,
                                threads: threads.to_string(),
                            }
                        } else if let Some(why) = l.strip_prefix("error ") {
                            Event::Failed {
                                generation,
                                why: why.to_string(),
                            }
                        } else {
                            continue;
                        };
                        if events.send(ev).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let p = Proc {
            pid,
            pool: self.slots[i].spec.pool.clone(),
            generation,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            ready: false,
            stopping: false,
            stop_sent: None,
            requests: 0,
            panics: 0,
            last_pong: Instant::now(),
            stuck: false,
            control: write_half,
            reader,
        };
        let slot = &mut self.slots[i];
        if replacing {
            slot.replacing = Some(p);
        } else {
            slot.current = Some(p);
        }
        Ok(())
    }

    /// The slot a worker process (by generation) belongs to now.
    fn slot_of(&self, generation: u64) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.current
                .iter()
                .chain(s.replacing.iter())
                .chain(s.draining.iter())
                .any(|p| p.generation == generation)
        })
    }

    /// The process of `generation`, wherever it is in its slot, with the slot's name.
    fn proc_of(&mut self, generation: u64) -> Option<(String, &mut Proc)> {
        let slot = self.slot_of(generation)?;
        let s = &mut self.slots[slot];
        let name = s.spec.name();
        s.current
            .iter_mut()
            .chain(s.replacing.iter_mut())
            .chain(s.draining.iter_mut())
            .find(|p| p.generation == generation)
            .map(|p| (name, p))
    }

    fn on_ready(&mut self, generation: u64) {
        let Some(i) = self.slot_of(generation) else {
            return;
        };
        let slot = &mut self.slots[i];
        let cpus = crate::cpuset::CpuSet::from_ids(slot.spec.cpus.iter().copied());
        let node = slot.spec.node.map_or("-".into(), |n| n.to_string());
        if let Some(p) = slot.current.as_mut().filter(|p| p.generation == generation) {
            p.ready = true;
            log(
                "master",
                format!(
                    "worker {} started: pid {} node {node} cpus {cpus}",
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
            let mut new = slot.replacing.take().expect("checked");
            new.ready = true;
            if let Some(mut old) = slot.current.take() {
                old.stopping = true;
                let _ = os::process::kill(old.pid, libc::SIGTERM);
                slot.draining.push(old);
            }
            log(
                "master",
                format!(
                    "worker {} started: pid {} node {node} cpus {cpus} (recycled)",
                    slot.spec.name(),
                    new.pid
                ),
            );
            slot.current = Some(new);
            slot.recycles += 1;
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Ready { generation } => self.on_ready(generation),
            Event::Failed { generation, why } => {
                let Some(slot) = self.slot_of(generation) else {
                    return;
                };
                let s = &mut self.slots[slot];
                if s.current
                    .iter()
                    .chain(s.replacing.iter())
                    .any(|p| p.generation == generation)
                {
                    log(
                        "master",
                        format!("worker {} failed to start: {why}", s.spec.name()),
                    );
                    s.last_exit = Some(why);
                }
            }
            Event::Pong {
                generation,
                requests,
                panics,
            } => {
                if let Some((name, p)) = self.proc_of(generation) {
                    if p.stuck {
                        log(
                            "master",
                            format!("worker {name} (pid {}) is turning again", p.pid),
                        );
                    }
                    p.requests = requests;
                    p.panics = panics;
                    p.last_pong = Instant::now();
                    p.stuck = false;
                }
            }
            Event::Stuck {
                generation,
                threads,
            } => {
                // Not a pong: `ping_response_time` replaces the worker if this goes on.
                if let Some((name, p)) = self.proc_of(generation) {
                    if !p.stuck {
                        log("master", format!("worker {name} (pid {}): engine thread(s) {threads} have not turned for 2s; replacing it if this lasts ping_response_time", p.pid));
                    }
                    p.stuck = true;
                }
            }
            Event::Admin(cmd, reply) => {
                let answer = self.admin(cmd);
                let _ = reply.send(answer);
            }
        }
    }

    /// Reaps every exited worker: expected exits are logged; crashes are restarted with
    /// backoff or stop the pool (rapid-fail protection).
    fn reap(&mut self) {
        while let Some((pid, status)) = os::process::reap_child() {
            let now = Instant::now();
            if let Some(k) = self.retiring.iter().position(|(_, p)| p.pid == pid) {
                let (pool, p) = self.retiring.remove(k);
                p.reader.abort();
                log("master", format!("worker of the previous configuration of pool {pool} (pid {pid}) exited: {status}"));
                continue;
            }
            let Some(i) = self.slots.iter().position(|s| {
                s.current
                    .iter()
                    .chain(s.replacing.iter())
                    .chain(s.draining.iter())
                    .any(|p| p.pid == pid)
            }) else {
                continue;
            };
            let slot = &mut self.slots[i];
            let proc_ = if slot.current.as_ref().is_some_and(|p| p.pid == pid) {
                slot.current.take()
            } else if slot.replacing.as_ref().is_some_and(|p| p.pid == pid) {
                slot.replacing.take()
            } else {
                let k = slot
                    .draining
                    .iter()
                    .position(|p| p.pid == pid)
                    .expect("found above");
                Some(slot.draining.remove(k))
            }
            .expect("found above");
            proc_.reader.abort();
            let name = slot.spec.name();
            if proc_.stopping {
                log(
                    "master",
                    format!("worker {name} (pid {pid}) exited: {status}"),
                );
                if slot.restart_after_exit && slot.current.is_none() {
                    slot.restart_after_exit = false;
                    slot.respawn_at = Some(now);
                }
                continue;
            }
            slot.restarts += 1;
            slot.last_exit = Some(status.to_string());
            let uptime = proc_.ready.then(|| now.duration_since(proc_.started));
            let (delay, young) = lifecycle::restart_delay(uptime, slot.young_deaths);
            slot.young_deaths = young;
            let pool = &mut self.pools[slot.pool];
            if pool.stopped.is_some() {
                continue;
            }
            if lifecycle::record_crash(&mut pool.crashes, now, &pool.spec.rapid_fail) {
                let rf = &pool.spec.rapid_fail;
                let why = format!(
                    "{} crashes within {}",
                    rf.max_crashes,
                    crate::units::format_duration(rf.interval)
                );
                log(
                    "master",
                    format!("worker {name} (pid {pid}) exited: {status}"),
                );
                let pool_name = pool.spec.name.clone();
                self.stop_pool(&pool_name, &format!("rapid-fail protection: {why}"));
                continue;
            }
            log(
                "master",
                format!(
                    "worker {name} (pid {pid}) exited: {status}; restarting it in {}",
                    crate::units::format_duration(delay)
                ),
            );
            slot.respawn_at = Some(now + delay);
        }
    }

    /// Once a second: per-node load, and soft-affinity workers widened or narrowed.
    fn soft_affinity(&mut self, now: Instant) {
        if now.duration_since(self.load_sample.0) < Duration::from_secs(1) || self.nodes.len() < 2 {
            return;
        }
        let sample = read_proc_stat();
        let nodes = self.nodes.clone();
        let node_of = |cpu: u32| nodes.iter().find(|(_, c)| c.contains(cpu)).map(|(n, _)| *n);
        let load = super::soft::node_load(&self.load_sample.1, &sample, node_of);
        self.load_sample = (now, sample);
        for slot in &mut self.slots {
            let pool = &self.pools[slot.pool];
            let (Some(home), Some(p)) = (slot.spec.node, slot.current.as_ref().filter(|p| p.ready))
            else {
                continue;
            };
            if slot.spec.hard || pool.stopped.is_some() {
                continue;
            }
            let allowed = pool
                .spec
                .cpus
                .clone()
                .unwrap_or_else(|| self.online.clone());
            let candidates: Vec<u32> = nodes
                .iter()
                .filter(|(_, c)| !c.intersection(&allowed).is_empty())
                .map(|(n, _)| *n)
                .collect();
            let own = crate::cpuset::CpuSet::from_ids(slot.spec.cpus.iter().copied());
            let (cpus, what) = match super::soft::decide(&mut slot.soft, home, &load, &candidates) {
                super::soft::Decision::Keep => continue,
                super::soft::Decision::Widen(to) => {
                    let extra = nodes
                        .iter()
                        .filter(|(n, _)| to.contains(n))
                        .fold(crate::cpuset::CpuSet::new(), |a, (_, c)| {
                            a.union(&c.intersection(&allowed))
                        });
                    (own.union(&extra), format!("widened to nodes {to:?}: node {home} is saturated and they have idle cycles"))
                }
                super::soft::Decision::Narrow => (own, format!("narrowed back to node {home}")),
            };
            match os::numa::set_process_affinity(p.pid, &cpus) {
                Ok(()) => log(
                    "master",
                    format!(
                        "worker {} (soft affinity) {what}: cpus {cpus}",
                        slot.spec.name()
                    ),
                ),
                Err(e) => log(
                    "master",
                    format!(
                        "worker {}: cannot change its CPUs to {cpus}: {e}",
                        slot.spec.name()
                    ),
                ),
            }
        }
    }

    /// Re-reads the config file and applies it: unchanged pools keep running untouched; a
    /// changed pool gets new workers on its existing sockets (more opened if it grew) and its
    /// old workers drain once the new ones are all ready; a new pool starts; a removed pool's
    /// workers drain and its listeners close with them. A config with errors changes nothing.
    fn reload(&mut self) -> Result<String, String> {
        let path = self
            .config
            .source
            .clone()
            .ok_or("espalier serve was started without -c FILE: there is no file to reload")?;
        let file = path.display().to_string();
        let new = Config::load(&path, &self.topology).map_err(|e| e.to_string())?;
        let plan = crate::placement::plan(&self.topology, &new.pools, &[])
            .map_err(|e| format!("{file}: {e}"))?;
        let mut notes = Vec::new();
        if new.server.admin != self.config.server.admin {
            notes.push(format!(
                "the admin address stays {} until a restart",
                self.config.server.admin
            ));
        }
        let mut old_server = self.config.server.clone();
        old_server.admin = new.server.admin;
        let server_changed = old_server != new.server;
        let mut wanted = super::master::wanted_groups(&new);
        // An address may not move between pools while the old pool's workers still hold it.
        for w in &wanted {
            if let Some(g) = self
                .groups
                .iter()
                .find(|g| g.addr == w.addr && g.pool != w.pool)
            {
                return Err(format!("{file}: http://{} moves from pool {} to pool {}: restart espalier serve to apply that", w.addr, g.pool, w.pool));
            }
        }
        let sites_of = |c: &Config, pool: &str| {
            c.sites
                .iter()
                .filter(|s| s.pool() == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let planned = |pool: &str| {
            plan.workers
                .iter()
                .filter(|w| w.pool == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let old_plan = crate::placement::plan(&self.topology, &self.config.pools, &[])
            .map_err(|e| e.to_string())?;
        let was_planned = |pool: &str| {
            old_plan
                .workers
                .iter()
                .filter(|w| w.pool == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let changed: Vec<String> = new
            .pools
            .iter()
            .filter(|p| {
                server_changed
                    || self.config.pool(&p.name) != Some(*p)
                    || sites_of(&self.config, &p.name) != sites_of(&new, &p.name)
                    || was_planned(&p.name) != planned(&p.name)
            })
            .map(|p| p.name.clone())
            .collect();
        let removed: Vec<String> = self
            .config
            .pools
            .iter()
            .filter(|p| new.pool(&p.name).is_none())
            .map(|p| p.name.clone())
            .collect();

        // Listener groups, in two phases, like nginx's reload building its new cycle beside
        // the old one: first everything that can fail — binding new addresses, opening the
        // sockets a grown pool needs — into new sockets only; then, when all of it succeeded,
        // the switch, which cannot fail. A refused reload changes nothing that serves.
        let mut fresh: Vec<ListenerGroup> = Vec::new();
        let mut grown: Vec<(usize, Vec<socket2::Socket>, super::master::SocketOwners)> = Vec::new();
        for w in wanted.iter_mut().filter(|w| changed.contains(&w.pool)) {
            let owners = super::master::group_owners(&w.pool, &self.topology, &plan);
            match self
                .groups
                .iter()
                .position(|g| g.pool == w.pool && g.addr == w.addr)
            {
                Some(i) => {
                    let sockets =
                        super::master::open_missing(&self.groups[i], owners.len(), &new, &file)?;
                    grown.push((i, sockets, owners));
                }
                None => {
                    if let Err(e) = std::net::TcpListener::bind(w.addr) {
                        let site = super::master::site_of(&new, w.addr);
                        return Err(super::master::bind_error(site, w.addr, &e, &file));
                    }
                    let mut g = ListenerGroup {
                        pool: w.pool.clone(),
                        addr: w.addr,
                        routes: std::mem::take(&mut w.routes),
                        sockets: Vec::new(),
                        owners: Vec::new(),
                    };
                    super::master::fill_group(&mut g, &new, &self.topology, &plan, &file)?;
                    fresh.push(g);
                }
            }
        }
        // The switch: grown groups take their new sockets, routes and owners; groups no pool
        // wants any more close (the master's copies now; the old workers' with them).
        for (i, sockets, owners) in grown {
            let g = &mut self.groups[i];
            g.sockets.extend(sockets);
            if let Some(w) = wanted
                .iter_mut()
                .find(|w| w.pool == g.pool && w.addr == g.addr)
            {
                g.routes = std::mem::take(&mut w.routes);
            }
            super::master::arm_group(g, &owners, &new, &self.topology);
        }
        let mut closed = 0;
        let mut groups: Vec<ListenerGroup> = Vec::new();
        for g in std::mem::take(&mut self.groups) {
            let keep_as_is = !changed.contains(&g.pool) && !removed.contains(&g.pool);
            let still_wanted = wanted.iter().any(|w| w.pool == g.pool && w.addr == g.addr);
            if keep_as_is || still_wanted {
                groups.push(g);
            } else {
                closed += 1;
            }
        }
        groups.extend(fresh);
        self.groups = groups;

        // Workers: changed and removed pools' processes retire; changed and new pools get slots.
        let specs = super::master::worker_specs(&new, &plan, &self.groups);
        let mut slots = Vec::new();
        for mut slot in std::mem::take(&mut self.slots) {
            let pool = slot.spec.pool.clone();
            if changed.contains(&pool) || removed.contains(&pool) {
                let gone = removed.contains(&pool);
                for mut p in slot
                    .current
                    .take()
                    .into_iter()
                    .chain(slot.replacing.take())
                    .chain(slot.draining.drain(..))
                {
                    if gone || p.stopping {
                        p.stopping = true;
                        let _ = os::process::kill(p.pid, libc::SIGTERM);
                    }
                    self.retiring.push((pool.clone(), p));
                }
            } else {
                slots.push(slot);
            }
        }
        let mut pools: Vec<PoolRt> = Vec::new();
        for p in &new.pools {
            let old = self
                .pools
                .iter()
                .position(|x| x.spec.name == p.name)
                .map(|i| self.pools.remove(i));
            let mut rt = old.unwrap_or_else(|| PoolRt::new(p.clone()));
            rt.spec = p.clone();
            pools.push(rt);
        }
        for gone in self.pools.drain(..) {
            for r in gone.responders {
                r.abort();
            }
            // Its control group is removed at exit, once its workers are gone.
            if let Some(g) = gone.cpu_group {
                self.cpusets.push(g);
            }
        }
        self.pools = pools;
        let first_new = slots.len();
        for spec in specs.into_iter().filter(|s| changed.contains(&s.pool)) {
            slots.push(Slot::new(spec, 0));
        }
        for s in &mut slots {
            s.pool = self
                .pools
                .iter()
                .position(|p| p.spec.name == s.spec.pool)
                .expect("slot of a configured pool");
        }
        self.slots = slots;
        self.config = new;
        self.make_cgroups_for(first_new);
        for i in first_new..self.slots.len() {
            if self.pools[self.slots[i].pool].stopped.is_some() {
                continue;
            }
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].respawn_at = Some(Instant::now() + lifecycle::MAX_BACKOFF);
            }
        }
        let kept = self.pools.len() - changed.len();
        let mut summary = format!(
            "reloaded {file}: {kept} pool(s) unchanged, {} changed or new (their workers replaced, overlapped), {} removed, {closed} listener group(s) closed",
            changed.len(),
            removed.len()
        );
        for n in notes {
            summary.push_str("; ");
            summary.push_str(&n);
        }
        Ok(summary)
    }

    /// Reloads (SIGHUP or `espalier reload`) and logs the outcome; the message is the log line.
    fn reload_logged(&mut self) -> Result<String, String> {
        let outcome = self
            .reload()
            .map_err(|e| format!("reload refused, the running configuration keeps serving: {e}"));
        let (Ok(line) | Err(line)) = &outcome;
        log("master", line);
        outcome
    }

    /// Retiring workers drain once their pool's new workers are all ready.
    fn retire_when_replaced(&mut self) {
        for (pool, p) in &mut self.retiring {
            if p.stopping {
                continue;
            }
            let slots: Vec<&Slot> = self.slots.iter().filter(|s| &s.spec.pool == pool).collect();
            let replaced = slots
                .iter()
                .all(|s| s.current.as_ref().is_some_and(|c| c.ready));
            let pool_stopped = self
                .pools
                .iter()
                .any(|x| &x.spec.name == pool && x.stopped.is_some());
            if replaced || pool_stopped {
                p.stopping = true;
                let _ = os::process::kill(p.pid, libc::SIGTERM);
            }
        }
    }

    /// Draining workers past their pool's `shutdown_time_limit` are killed.
    fn enforce_shutdown_limits(&mut self, now: Instant) {
        let limit_of = |pools: &[PoolRt], name: &str| {
            pools
                .iter()
                .find(|p| p.spec.name == name)
                .map_or(Duration::from_secs(90), |p| p.spec.shutdown_time_limit)
        };
        let pools = &self.pools;
        let drainers = self
            .slots
            .iter_mut()
            .flat_map(|s| s.draining.iter_mut())
            .chain(self.retiring.iter_mut().map(|(_, p)| p));
        for p in drainers.filter(|p| p.stopping) {
            let sent = *p.stop_sent.get_or_insert(now);
            let limit = limit_of(pools, &p.pool);
            if now.duration_since(sent) > limit {
                log(
                    "master",
                    format!(
                        "worker pid {} still draining after {}s (shutdown_time_limit): killed",
                        p.pid,
                        limit.as_secs()
                    ),
                );
                let _ = os::process::kill(p.pid, libc::SIGKILL);
                p.stop_sent = Some(now + Duration::from_secs(3600));
            }
        }
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        self.retire_when_replaced();
        self.enforce_shutdown_limits(now);
        self.soft_affinity(now);
        let second = os::process::local_second_of_day();
        let crossed_window = (self.last_second_of_day, second);
        self.last_second_of_day = second;
        for i in 0..self.slots.len() {
            let pool = &self.pools[self.slots[i].pool];
            if pool.stopped.is_some() {
                continue;
            }
            let (startup_limit, ping_response, recycle) = (
                pool.spec.startup_time_limit,
                pool.spec.ping_response_time,
                pool.spec.recycle.clone(),
            );
            let ping_every = pool.spec.ping_interval.min(STATS_PING);
            let slot = &mut self.slots[i];
            if slot.respawn_at.is_some_and(|t| t <= now) && slot.current.is_none() {
                slot.respawn_at = None;
                if let Err(e) = self.start(i, false) {
                    log("master", format!("{e}; trying again"));
                    self.slots[i].respawn_at = Some(now + lifecycle::MAX_BACKOFF);
                }
                continue;
            }
            let Some(p) = slot.current.as_mut() else {
                continue;
            };
            if !p.ready {
                if now.duration_since(p.started) > startup_limit {
                    log("master", format!("worker {} (pid {}) did not report ready within {}s (startup_time_limit): replacing it", slot.spec.name(), p.pid, startup_limit.as_secs()));
                    let _ = os::process::kill(p.pid, libc::SIGKILL);
                }
                continue;
            }
            // Pings: stats, and the health check.
            if now.duration_since(p.last_pong) > ping_response.max(ping_every * 3) {
                log("master", format!("worker {} (pid {}) missed its pings for {}s (ping_response_time): replacing it", slot.spec.name(), p.pid, ping_response.as_secs()));
                let _ = os::process::kill(p.pid, libc::SIGKILL);
                continue;
            }
            if now.duration_since(p.last_pong) >= ping_every {
                let _ = p.control.try_write(b"ping\n");
            }
            if slot.replacing.is_none() && !slot.restart_after_exit {
                let uptime = now.duration_since(p.started);
                let crossed =
                    lifecycle::crossed(&recycle.schedule, crossed_window.0, crossed_window.1);
                let resident = if recycle.memory.is_some() {
                    os::process::resident_bytes(p.pid)
                } else {
                    None
                };
                if let Some(why) =
                    lifecycle::recycle_due(&recycle, uptime, p.requests, resident, crossed)
                {
                    log(
                        "master",
                        format!(
                            "recycling worker {} (pid {}): {why}",
                            slot.spec.name(),
                            p.pid
                        ),
                    );
                    self.recycle_slot(i);
                }
            }
        }
    }

    /// Recycles one worker: overlapped (new one first) unless the pool says otherwise.
    fn recycle_slot(&mut self, i: usize) {
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
                old.stopping = true;
                let _ = os::process::kill(old.pid, libc::SIGTERM);
                slot.draining.push(old);
                slot.recycles += 1;
                slot.restart_after_exit = true;
            }
            None => slot.respawn_at = Some(Instant::now()),
        }
    }

    fn stop_pool(&mut self, name: &str, why: &str) {
        let Some(p) = self.pools.iter().position(|p| p.spec.name == name) else {
            return;
        };
        self.pools[p].stopped = Some(why.to_string());
        for s in self.slots.iter_mut().filter(|s| s.pool == p) {
            s.respawn_at = None;
            s.restart_after_exit = false;
            for proc_ in s.current.take().into_iter().chain(s.replacing.take()) {
                let _ = os::process::kill(proc_.pid, libc::SIGTERM);
                let mut proc_ = proc_;
                proc_.stopping = true;
                s.draining.push(proc_);
            }
        }
        let lb = self.pools[p].spec.load_balancer;
        let mut responders = Vec::new();
        for g in self.groups.iter().filter(|g| g.pool == name) {
            for socket in &g.sockets {
                match socket
                    .try_clone()
                    .map(std::net::TcpListener::from)
                    .and_then(tokio::net::TcpListener::from_std)
                {
                    Ok(l) => responders.push(tokio::spawn(respond_stopped(l, lb))),
                    Err(e) => log(
                        "master",
                        format!("cannot answer for stopped pool {name} on {}: {e}", g.addr),
                    ),
                }
            }
        }
        self.pools[p].responders = responders;
        let answer = match lb {
            LoadBalancer::Http => "answer 503 Service Unavailable",
            LoadBalancer::Tcp => "reset connections (load_balancer = \"tcp\")",
        };
        log("master", format!("POOL {name} STOPPED by {why}: its sites {answer}; `espalier pool start {name}` brings it back"));
    }

    fn start_pool(&mut self, name: &str) -> bool {
        let Some(p) = self.pools.iter().position(|p| p.spec.name == name) else {
            return false;
        };
        let pool = &mut self.pools[p];
        if pool.stopped.take().is_none() {
            return true;
        }
        for r in pool.responders.drain(..) {
            r.abort();
        }
        pool.crashes.clear();
        let now = Instant::now();
        for s in self.slots.iter_mut().filter(|s| s.pool == p) {
            s.young_deaths = 0;
            s.respawn_at = Some(now);
        }
        log("master", format!("pool {name} started"));
        true
    }

    fn admin(&mut self, cmd: AdminCommand) -> AdminReply {
        let known = |sv: &Self, name: &str| sv.pools.iter().any(|p| p.spec.name == name);
        match cmd {
            AdminCommand::Status => (200, serde_json::to_value(self.status()).unwrap_or_default()),
            AdminCommand::Reload => match self.reload_logged() {
                Ok(summary) => (200, serde_json::json!({ "ok": true, "message": summary })),
                Err(message) => (400, serde_json::json!({ "ok": false, "message": message })),
            },
            AdminCommand::StopPool(name) if known(self, &name) => {
                if self
                    .pools
                    .iter()
                    .any(|p| p.spec.name == name && p.stopped.is_none())
                {
                    self.stop_pool(&name, "command");
                }
                (
                    200,
                    serde_json::json!({ "ok": true, "message": format!("pool {name} stopped") }),
                )
            }
            AdminCommand::StartPool(name) if known(self, &name) => {
                self.start_pool(&name);
                (
                    200,
                    serde_json::json!({ "ok": true, "message": format!("pool {name} starting") }),
                )
            }
            AdminCommand::Recycle(name) if known(self, &name) => {
                if self
                    .pools
                    .iter()
                    .any(|p| p.spec.name == name && p.stopped.is_some())
                {
                    return (
                        409,
                        serde_json::json!({ "ok": false, "message": format!("pool {name} is stopped; start it first") }),
                    );
                }
                let slots: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.pools[self.slots[i].pool].spec.name == name)
                    .collect();
                for i in &slots {
                    log(
                        "master",
                        format!("recycling worker {} on request", self.slots[*i].spec.name()),
                    );
                    self.recycle_slot(*i);
                }
                (
                    200,
                    serde_json::json!({ "ok": true, "message": format!("recycling {} worker(s) of pool {name}", slots.len()) }),
                )
            }
            AdminCommand::StopPool(name)
            | AdminCommand::StartPool(name)
            | AdminCommand::Recycle(name) => {
                let names: Vec<&str> = self.pools.iter().map(|p| p.spec.name.as_str()).collect();
                (
                    404,
                    serde_json::json!({ "ok": false, "message": format!("no pool is named `{name}` (pools: {})", names.join(", ")) }),
                )
            }
        }
    }

    fn status(&self) -> Status {
        let now = Instant::now();
        Status {
            pools: self
                .pools
                .iter()
                .enumerate()
                .map(|(p, pool)| PoolStatus {
                    name: pool.spec.name.clone(),
                    cpu_limit: pool.spec.cpu_limit,
                    cgroup: pool
                        .cpu_group
                        .as_ref()
                        .map(|g| g.dirs[0].display().to_string()),
                    cpu_used_s: pool
                        .cpu_group
                        .as_ref()
                        .and_then(|g| g.usage_ns())
                        .map(|ns| ns as f64 / 1e9),
                    state: if pool.stopped.is_some() {
                        "stopped"
                    } else {
                        "running"
                    },
                    stopped_because: pool.stopped.clone(),
                    workers: self
                        .slots
                        .iter()
                        .filter(|s| s.pool == p)
                        .map(|s| {
                            let cur = s.current.as_ref();
                            WorkerStatus {
                                index: s.spec.index,
                                pid: cur.map(|c| c.pid),
                                node: s.spec.node,
                                cpus: s.spec.cpus.clone(),
                                state: match (cur, s.respawn_at.is_some() || s.restart_after_exit) {
                                    (Some(c), _) if c.ready => "running",
                                    (Some(_), _) => "starting",
                                    (None, true) => "restarting",
                                    (None, false) => "stopped",
                                },
                                started_unix: cur.map(|c| c.started_unix),
                                uptime_s: cur.map(|c| now.duration_since(c.started).as_secs_f64()),
                                requests: cur.map_or(0, |c| c.requests),
                                connection_panics: cur.map_or(0, |c| c.panics),
                                resident_bytes: cur
                                    .and_then(|c| os::process::resident_bytes(c.pid)),
                                recycles: s.recycles,
                                restarts: s.restarts,
                                last_exit: s.last_exit.clone(),
                                draining: s.draining.iter().map(|d| d.pid).collect(),
                                widened_to: s.soft.widened_to.clone(),
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
pub struct Status {
    pub pools: Vec<PoolStatus>,
}

#[derive(Serialize)]
pub struct PoolStatus {
    pub name: String,
    pub state: &'static str,
    /// The cap, as a fraction of one CPU.
    pub cpu_limit: Option<f64>,
    /// The CPU-capped control group, when the cap is applied.
    pub cgroup: Option<String>,
    /// CPU time used by the pool's group so far (the cgroup's own accounting).
    pub cpu_used_s: Option<f64>,
    pub stopped_because: Option<String>,
    pub workers: Vec<WorkerStatus>,
}

#[derive(Serialize)]
pub struct WorkerStatus {
    pub index: u32,
    pub pid: Option<u32>,
    pub node: Option<u32>,
    pub cpus: Vec<u32>,
    pub state: &'static str,
    pub started_unix: Option<u64>,
    pub uptime_s: Option<f64>,
    pub requests: u64,
    /// Connection tasks that panicked and were closed (each one a bug worth reporting).
    pub connection_panics: u64,
    pub resident_bytes: Option<u64>,
    pub recycles: u32,
    pub restarts: u32,
    pub last_exit: Option<String>,
    /// Old processes of this slot still finishing their requests.
    pub draining: Vec<u32>,
    /// Soft affinity: the nodes the worker may use besides its home, now.
    pub widened_to: Vec<u32>,
}

fn read_proc_stat() -> Vec<(u32, u64, u64)> {
    std::fs::read_to_string("/proc/stat")
        .map(|t| super::soft::parse_proc_stat(&t))
        .unwrap_or_default()
}

/// Answers a stopped pool's connections on a copy of one of its listener sockets.
async fn respond_stopped(listener: tokio::net::TcpListener, lb: LoadBalancer) {
    const BODY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nServer: espalier\r\nConnection: close\r\nRetry-After: 5\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\n\r\n503 Service Unavailable\n";
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(async move {
            match lb {
                LoadBalancer::Tcp => {
                    // A reset, so a load balancer in front fails over at once.
                    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
                }
                LoadBalancer::Http => {
                    // Read the request head (bounded) so the answer is not overtaken by a reset.
                    let mut buf = [0u8; 4096];
                    let _ =
                        tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
                    let _ = stream.write_all(BODY).await;
                    let _ = stream.shutdown().await;
                }
            }
        });
    }
}
