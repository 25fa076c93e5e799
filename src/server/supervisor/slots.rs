//! Slots and their processes: a slot is one planned worker position (a pool's index-th
//! worker); over its life it holds the current process, perhaps a replacement starting (an
//! overlapped recycle) and old processes draining. Here they start, become ready, are
//! recycled, exit and are reaped — crashes restarted with backoff or stopping the pool
//! (rapid-fail protection).
//!
//! Owns: the process state machine of a slot. Must not touch: listener sockets, cgroups
//! (see [`super::cgroups`]) or the decisions themselves ([`crate::server::lifecycle`]).

use super::{Event, Supervisor};
use crate::config::PoolSpec;
use crate::os;
use crate::server::control::Message;
use crate::server::lifecycle;
use crate::server::log;
use crate::server::spawn::spawn_worker;
use crate::server::spec::WorkerSpec;
use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};
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
    pub(super) ready: bool,
    /// Asked to stop (recycle, pool stop, shutdown): its exit is no crash.
    pub(super) stopping: bool,
    /// When a draining worker was told to stop, for `shutdown_time_limit`.
    pub(super) stop_sent: Option<Instant>,
    pub(super) requests: u64,
    /// Connection tasks that panicked and were contained (see `server::conn_task`).
    pub(super) panics: u64,
    pub(super) last_pong: Instant,
    /// Whether the last ping found stuck threads (logged once per episode).
    pub(super) stuck: bool,
    /// The supervisor sent SIGKILL (a startup or ping deadline): said and done once, while
    /// the process is dying.
    pub(super) killed: bool,
    pub(super) control: OwnedWriteHalf,
    pub(super) reader: JoinHandle<()>,
}

/// One planned worker position: a pool's index-th worker.
pub(super) struct Slot {
    pub(super) spec: WorkerSpec,
    pub(super) pool: usize,
    pub(super) current: Option<Proc>,
    /// The replacement started by an overlapped recycle, not yet ready.
    pub(super) replacing: Option<Proc>,
    /// Old workers finishing their requests.
    pub(super) draining: Vec<Proc>,
    pub(super) respawn_at: Option<Instant>,
    pub(super) young_deaths: u32,
    pub(super) restarts: u32,
    pub(super) recycles: u32,
    pub(super) last_exit: Option<String>,
    /// A non-overlapped recycle: start again when the old one has exited.
    pub(super) restart_after_exit: bool,
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
        for p in slots.chain(self.retiring.iter_mut().map(|(_, p)| p)) {
            p.stopping = true;
            let _ = os::process::kill(p.pid, sig);
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
                        let Some(message) = Message::parse(&line) else {
                            continue;
                        };
                        let ev = Event::Worker {
                            generation,
                            message,
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
            killed: false,
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

    /// Reaps every exited worker: expected exits are logged; crashes are restarted with
    /// backoff or stop the pool (rapid-fail protection).
    pub(super) fn reap(&mut self) {
        while let Some((pid, status)) = os::process::reap_child() {
            let now = Instant::now();
            if let Some(k) = self.retiring.iter().position(|(_, p)| p.pid == pid) {
                let (pool, p) = self.retiring.remove(k);
                p.reader.abort();
                log("master", format!("worker of the previous configuration of pool {pool} (pid {pid}) exited: {status}"));
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
                old.stopping = true;
                let _ = os::process::kill(old.pid, libc::SIGTERM);
                slot.draining.push(old);
                slot.recycles += 1;
                slot.restart_after_exit = true;
            }
            None => slot.respawn_at = Some(Instant::now()),
        }
    }

    /// Retiring workers drain once their pool's new workers are all ready.
    pub(super) fn retire_when_replaced(&mut self) {
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
    pub(super) fn enforce_shutdown_limits(&mut self, now: Instant) {
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
}
