//! Slots and their processes: a slot is one planned worker position (a pool's index-th
//! worker); over its life it holds the current process, perhaps a replacement starting (an
//! overlapped recycle) and old processes draining. Here they start, become ready, are
//! recycled, exit and are reaped — crashes restarted with backoff or stopping the pool
//! (rapid-fail protection).
//!
//! Owns: the process state machine of a slot. Must not touch: listener sockets, cgroups
//! (see [`super::cgroups`]) or the decisions themselves ([`crate::server::lifecycle`]).

use super::life::{
    after_exit, Act, AfterExit, Deadlines, Happening, Life, Restart, SlotHistory, Why,
};
use super::procs::{AppProc, PoolRt, Proc, Slot};
use super::{Event, Supervisor};
use crate::os;
use crate::server::control::Message;

use crate::server::log;
use crate::server::spawn::spawn_worker;
use std::time::{Duration, Instant, SystemTime};

use tokio::io::AsyncBufReadExt;
use tokio::task::JoinHandle;

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
        self.signal_matching(sig, |_| true);
    }

    /// Sends `sig` to every process `which` picks.
    pub(super) fn signal_matching(&mut self, sig: i32, which: impl Fn(&Proc) -> bool) {
        let slots = self.slots.iter_mut().flat_map(Slot::procs_mut);
        let now = Instant::now();
        for p in slots.chain(self.retiring.iter_mut().map(|(_, p)| p)) {
            if which(p) {
                p.happen(Happening::Signalled, now);
                p.signal(sig);
            }
        }
    }

    /// Starts slot `i`'s espalier worker (not an app process): its certificates, ticket keys
    /// and QUIC sockets given; its pid, control socket, and the hosts it was sent.
    fn spawn_espalier_worker(
        &mut self,
        i: usize,
        fail: bool,
        allocate: Option<u64>,
    ) -> Result<(u32, tokio::net::UnixStream, super::hosts_live::SentAtStart), String> {
        let mut spec = self.slots[i].spec.clone();
        spec.store_certs = self.cert_store.certs_for(&spec.pool);
        spec.ticket_keys = self.ticket_keys.for_pool(&spec.pool);
        if spec.quic_early_data {
            spec.session_table_fd = self.session_tables.for_pool(&spec.pool);
        }
        let groups = &mut self.groups;
        let turns = crate::server::listeners::choose_quic_sockets(groups, &mut spec);
        let sources = std::sync::Arc::clone(&spec.sites);
        let (pid, control, sent) = spawn_worker(spec, fail, allocate)?;
        let (config, topology) = (&self.config, &self.topology);
        if !crate::server::listeners::take_quic_turns(groups, &turns, pid, config, topology) {
            log("master", "cannot attach the QUIC steering program; HTTP/3 datagrams are spread by the kernel's reuseport hash, and connections moved by it end");
        }
        Ok((pid, control, (sources, sent)))
    }

    /// Starts a process for slot `i` (as its replacement when `replacing`).
    pub(super) fn start(&mut self, i: usize, replacing: bool) -> Result<(), String> {
        self.pool_group_at_start(i);
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
        let mut sent_at_start = None;
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
                    unready_said: false,
                    probe_at: Instant::now(),
                    look_at: Instant::now() + super::apps::LOOK_EVERY,
                };
                (started.pid, None, started.notify, Some(state))
            }
            None => {
                let (pid, control, sent) = self.spawn_espalier_worker(i, fail, allocate)?;
                sent_at_start = Some(sent);
                let (read_half, write_half) = control.into_split();
                (
                    pid,
                    Some(super::control_out::ControlOut::new(write_half)),
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
            meters: Vec::new(),
            caches: Vec::new(),
            ejected: Vec::new(),
            last_pong: Instant::now(),
            stuck: false,
            busy_at: Instant::now(),
            figures: Default::default(),
            seen_requests: 0,
            control,
            reader,
            app,
            frozen: None,
            accepts_no_more: false,
            hosts_sent: 0,
            hosts_taken: 0,
            hosts_due: None,
            last_hosts: super::hosts_live::sent_at_start(&self.slots[i].spec.pool, sent_at_start),
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
        self.slot_hints.find(&self.slots, generation)
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
            slot.last_start_took = Some(now.duration_since(p.started));
            log(
                "master",
                format!(
                    "{what} {} started: pid {} node {node} cpus {cpus}",
                    slot.spec.name(),
                    p.pid
                ),
            );
            let name = slot.spec.name();
            self.started_answering(&name);
            self.send_due_hosts();
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
        // A started pool's last worker ready (started, or its replacement after a recycle
        // during the start): the master's answers for it end now, before a status can say
        // it runs.
        self.end_answers_once_started(self.slots[i].pool);
        let slot = &self.slots[i];
        let ready = slot.current.iter().chain(slot.replacing.iter());
        if let Some(control) = ready
            .filter(|p| p.generation == generation)
            .find_map(|p| p.control.as_ref())
        {
            self.tell_upstream_health(control);
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
        // A replaced worker's exit may be what a configuration change waits for: answered
        // now, not at the next tick.
        self.answer_config_calls_served(Instant::now());
    }

    fn reap_each(&mut self, republish: &mut Vec<usize>) {
        // What this pass may wait for crashed apps' last words, all of them together.
        let words_until = Instant::now() + crate::server::app::LAST_WORDS;
        while let Some((pid, status)) = os::process::reap_child() {
            let now = Instant::now();
            crate::server::listeners::release_quic(&mut self.groups, pid);
            if self.reaped_retiring(pid, &status) {
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
            // A sleeping slot's last process gone (one that drained): its UDP sockets are
            // read by nobody now, so they join the watch (see `demand`).
            let quic = slot.spec.threads.iter().any(|t| !t.quic.is_empty());
            if slot.asleep && quic && slot.procs().next().is_none() {
                self.watch_slot(i);
            }
            let slot = &mut self.slots[i];
            let name = slot.spec.name();
            let what = if proc_.app.is_some() { "app" } else { "worker" };
            if let Some(app) = &proc_.app {
                if app.endpoint.is_some() {
                    republish.push(slot.pool);
                }
                app_exited(&proc_, app, &name, words_until);
            }
            let pool = &mut self.pools[slot.pool];
            // Killed at the pool's memory_limit: its own kind of exit (see `oom_killed`).
            let stopping = proc_.life.is_stopping();
            if oom_killed(pool, slot, (what, &name, pid, proc_.started), stopping, now) {
                continue;
            }
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

    /// A reaped process of a previous configuration's pool: said, and forgotten. Whether
    /// `pid` was one.
    fn reaped_retiring(&mut self, pid: u32, status: &crate::os::process::ExitStatus) -> bool {
        let Some(k) = self.retiring.iter().position(|(_, p)| p.pid == pid) else {
            return false;
        };
        let (pool, p) = self.retiring.remove(k);
        p.reader.abort();
        let what = match &p.app {
            Some(app) => {
                crate::server::app::forget(p.generation, app.endpoint.as_ref());
                "app"
            }
            None => "worker",
        };
        log(
            "master",
            format!(
                "{what} of the previous configuration of pool {pool} (pid {pid}) exited: {status}"
            ),
        );
        true
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
            let replaced = (self.slots.iter())
                .filter(|s| &s.spec.pool == pool)
                .all(Slot::ready_or_asleep);
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
        let limits_of = |pools: &[Box<PoolRt>], name: &str| {
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

/// An app process gone: its place forgotten, and — when it crashed — its last words said
/// (a short, bounded wait for what may still be in its pipe, `until` for all of a pass).
fn app_exited(proc_: &Proc, app: &AppProc, name: &str, until: Instant) {
    crate::server::app::forget(proc_.generation, app.endpoint.as_ref());
    if proc_.life.is_stopping() {
        return;
    }
    let tail = app.output.last_words(until);
    if !tail.is_empty() {
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        log(
            "master",
            format!(
                "app {name} (pid {}) said last: {}",
                proc_.pid,
                lines.join(" | ")
            ),
        );
    }
}

/// Whether the process that just exited was killed by the kernel's OOM killer at its pool's
/// `memory_limit` (the group's count grew): said as such — its status alone says SIGKILL —
/// counted, and, unless it or its pool was stopping, started again after a pause without
/// counting as a crash for rapid-fail (`true`: its exit is dealt with). The pause doubles
/// for each kill in a row (`lifecycle::oom_restart_pause`), so that an app killed at every
/// start does not spin.
fn oom_killed(
    pool: &mut PoolRt,
    slot: &mut Slot,
    (what, name, pid, started): (&str, &str, u32, Instant),
    stopping: bool,
    now: Instant,
) -> bool {
    let counted = pool.group.as_ref().and_then(|g| g.oom_kills());
    let Some(n) = counted.filter(|&n| n > pool.oom_kills) else {
        return false;
    };
    pool.oom_kills = n;
    let limit = pool.spec.memory_limit.unwrap_or_default() >> 20;
    let stays = stopping || pool.stopped.is_some();
    let (pause, in_a_row) = crate::server::lifecycle::oom_restart_pause(
        now.duration_since(started),
        slot.oom_kills_in_a_row,
    );
    let then = if stays {
        String::new()
    } else {
        format!(
            "; restarting it in {}s (not counted as a crash{})",
            pause.as_secs(),
            if in_a_row > 1 {
                format!("; {in_a_row} kills in a row")
            } else {
                String::new()
            }
        )
    };
    log("master", format!("{what} {name} (pid {pid}) was killed by the kernel's OOM killer: pool {} reached its memory_limit of {limit} MiB ({n} such kill(s) so far){then}", pool.spec.name));
    if stays {
        return false;
    }
    slot.restarts += 1;
    slot.last_exit = Some(format!("killed at memory_limit ({limit} MiB)"));
    slot.oom_kills_in_a_row = in_a_row;
    slot.restart = Restart::At(now + pause);
    true
}
