//! Pools on demand (IIS `startMode = OnDemand` and `idleTimeout`): a sleeping worker has no
//! process, only the listening sockets of an address it has alone, which the master keeps
//! (and with HTTP/3 the UDP socket each thread's new QUIC connections are steered to);
//! the first connection on one of them wakes it, and the connection waits in the socket's
//! queue until the new process takes it. On a shared address it has nothing at all: a
//! connection for it reaches the master's hand-off socket, and the master opens the worker's
//! hand-off sockets, passes the connection into one (where it waits the same way) and wakes
//! it ([`Supervisor::on_handed`]; see `server::handoffs`). A worker that serves nothing for its
//! pool's `idle_timeout` goes back to sleep: stopped, or frozen with `idle_action =
//! "suspend"` (see `super::suspend`; a frozen worker's sockets are watched the same way, and
//! the wake thaws it).
//!
//! Owns: sleeping and waking slots, watching a sleeping slot's sockets, the idle check, and
//! which pools the steering leaves out while asleep. Must not touch: starting or stopping a
//! process itself (`super::slots`), or what a connection says (the woken worker reads it).
//!
//! Why the sockets and not a proxy in the master: the kernel already queues what arrives —
//! a listening socket's backlog, a hand-off socket's datagrams with their descriptors — so the
//! master only needs to see that something waits, then start whoever reads it. Nothing is
//! accepted, read or copied on the way, and the connection is never refused. (The one read:
//! UDP datagrams that cannot open a QUIC connection, dropped — those left when the process
//! stopped, as the pool falls asleep, and any that arrive while it sleeps, so that a stray or
//! made-up datagram wakes nothing; a frozen process's wake for any, its connections live.)

use super::event::Event;
use super::Supervisor;
use crate::config::{IdleAction, StartMode};
use crate::os;
use crate::server::log;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// Waits until one of `fds` is readable (a connection in a listener's queue, a datagram in a
/// hand-off socket), or a datagram that can open a QUIC connection waits in one of the UDP
/// sockets `initials` (others there are dropped: a stray datagram wakes nothing), then
/// reports demand for `slot`. The master watches copies of its descriptors, so that a group a
/// reload closes meanwhile never leaves the watch on a reused number.
fn watch(
    (fds, initials): (&[RawFd], &[RawFd]),
    slot: String,
    events: UnboundedSender<Event>,
) -> Option<JoinHandle<()>> {
    let copies = |fds: &[RawFd]| -> Vec<std::os::fd::OwnedFd> {
        (fds.iter())
            .filter_map(|&fd| crate::os::process::duplicate(fd).ok())
            .collect()
    };
    let (plain, initials) = (copies(fds), copies(initials));
    if plain.is_empty() && initials.is_empty() {
        return None;
    }
    Some(tokio::spawn(async move {
        use crate::os::net::{any_readable, datagram_arrives};
        use crate::server::quic_steering::opens_a_connection;
        let plain = async {
            match plain.is_empty() {
                true => std::future::pending().await,
                false => any_readable(plain).await,
            }
        };
        let initials = async {
            match initials.is_empty() {
                true => std::future::pending().await,
                false => datagram_arrives(initials, opens_a_connection).await,
            }
        };
        let watched = tokio::select! {
            r = plain => r,
            r = initials => r,
        };
        if let Err(e) = watched {
            // Never left asleep unwatched: started now, as a pool that always runs.
            log(
                "master",
                format!("cannot watch the sockets of {slot} ({e}): starting it"),
            );
        }
        let _ = events.send(Event::Demand { slot });
    }))
}

impl Supervisor {
    /// Puts slot `i` to sleep: no process, its sockets watched (a proxied app's process has
    /// none of its own: its front worker's wake it).
    pub(super) fn sleep_slot(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.asleep = true;
        slot.after_app = false;
        for a in slot.page_answerers.drain(..) {
            a.abort();
        }
        // No process (a frozen one keeps its): on a shared address it has no hand-off
        // socket either (see `server::handoffs`); what was queued on it is passed on anew.
        if slot.current.is_none() && slot.spec.threads.iter().any(|t| t.handoff_fd.is_some()) {
            for t in &mut slot.spec.threads {
                t.handoff_fd = None;
            }
            let pool = slot.spec.pool.clone();
            let queued =
                self.handoffs
                    .close_slot(&pool, slot.spec.index, &slot.spec.handoff_senders);
            for received in queued {
                let received = Box::new(received);
                let _ = self.events.send(Event::Handed {
                    pool: pool.clone(),
                    received,
                });
            }
        }
        self.watch_slot(i);
    }

    /// Watches sleeping slot `i`'s sockets (again: a drained worker's UDP sockets join the
    /// watch as it exits, see `slots`), the watch it had replaced.
    pub(super) fn watch_slot(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(w) = slot.watcher.take() {
            w.abort();
        }
        let mut fds: Vec<RawFd> = slot
            .spec
            .threads
            .iter()
            .flat_map(|t| t.listeners.iter().map(|&(fd, _)| fd).chain(t.handoff_fd))
            .collect();
        // Over HTTP/3 a new connection's first datagram waits in the UDP socket the steering
        // sends it to, which the woken (or thawed) worker reads; what waits there when no
        // process is left belongs to the stopped one's connections, and goes (a frozen
        // process keeps its own).
        // A frozen process's sockets wake it for any datagram (its connections live on);
        // an empty slot's only for one that can open a connection.
        let frozen = slot.current.as_ref().map(|p| p.pid);
        let quic = crate::server::listeners::unread_quic_sockets(&self.groups, &slot.spec, frozen);
        let initials = match frozen {
            Some(_) => {
                fds.extend(quic);
                Vec::new()
            }
            None => {
                for &fd in &quic {
                    os::net::discard_datagrams(fd, 4096);
                }
                quic
            }
        };
        slot.watcher = watch((&fds, &initials), slot.spec.name(), self.events.clone());
    }

    /// Takes what reaches the master's hand-off socket (a connection for a pool with no
    /// socket: asleep) as [`Event::Handed`], from this server's users alone, signed.
    /// Started again after a reload (the pools' users may have changed).
    pub(super) fn take_handed_to_master(&mut self) {
        if let Some(task) = self.handed_to_master.take() {
            task.abort();
        }
        let Some((path, socket)) = &self.handoffs.wake else {
            return;
        };
        let senders = crate::server::handoffs::senders(&self.config.pools);
        let receiver = os::process::duplicate(socket.as_raw_fd())
            .and_then(|fd| crate::handoff::Receiver::new(fd, senders, self.handoffs.key));
        let mut receiver = match receiver {
            Ok(r) => r,
            Err(e) => {
                log("master", format!("cannot take connections on {}: {e}; sleeping pools on shared addresses will not wake", path.display()));
                return;
            }
        };
        let events = self.events.clone();
        self.handed_to_master = Some(tokio::spawn(async move {
            while let Ok(received) = receiver.next().await {
                // Unnamed: not a message for the master (dropped, its connection closed).
                let Some(pool) = received.pool.clone() else {
                    continue;
                };
                let received = Box::new(received);
                if events.send(Event::Handed { pool, received }).is_err() {
                    return;
                }
            }
        }));
    }

    /// Slot `i`'s hand-off sockets, opened where they are not (see `server::handoffs`), and
    /// its spec told them: the next process started in the slot inherits them.
    pub(super) fn open_handoffs(&mut self, i: usize) -> Result<(), String> {
        let spec = &self.slots[i].spec;
        let cpus: Vec<u32> = spec.threads.iter().map(|t| t.cpu).collect();
        let opened = self
            .handoffs
            .open_slot(&spec.pool.clone(), spec.index, &cpus)?;
        for t in &mut self.slots[i].spec.threads {
            t.handoff_fd = opened
                .iter()
                .find(|(cpu, _)| *cpu == t.cpu)
                .map(|&(_, fd)| fd);
        }
        Ok(())
    }

    /// A connection for `pool`, whose sockets were not there: the slot's are opened (the
    /// awake one's, else the first's), the connection passed into them, and the slot woken
    /// if it sleeps — it waits in the socket's queue, as for a pool that had its socket.
    pub(super) fn on_handed(&mut self, pool: &str, received: crate::handoff::Received) {
        // espalier's workers of the pool (an app process's slot has no thread, no socket).
        let of_pool = || {
            (0..self.slots.len()).filter(|&i| {
                self.slots[i].spec.pool == pool && !self.slots[i].spec.threads.is_empty()
            })
        };
        let Some(i) = of_pool()
            .find(|&i| !self.slots[i].asleep)
            .or_else(|| of_pool().next())
        else {
            // The pool went with a reload: the connection is closed.
            return;
        };
        let slot = &self.slots[i];
        // A wake (not a thaw: that process exists) is counted against the client's budget.
        if slot.asleep && slot.current.is_none() {
            let client = (received.carried.client)
                .or_else(|| received.stream.peer_addr().ok())
                .map(|a| a.ip());
            if let Some(ip) = client {
                if !self.waking.by_client.take(ip, Instant::now()) {
                    return; // closed: the connection is dropped here
                }
            }
        }
        let slot = &self.slots[i];
        let (index, name) = (slot.spec.index, slot.spec.name());
        let first_cpu = slot.spec.threads.first().map(|t| t.cpu);
        if let Err(e) = self.open_handoffs(i) {
            log(
                "master",
                format!("worker {name}: {e}; a connection for it is closed"),
            );
            return;
        }
        let first = self
            .handoffs
            .sockets
            .iter()
            .find(|h| h.pool == pool && h.index == index && first_cpu == Some(h.cpu));
        if let Some(h) = first {
            // Off the loop: a burst for a pool still starting fills its queue, and the
            // connection waits for room as long as the pool may take to start.
            let within = self.pools[self.slots[i].pool].spec.startup_time_limit;
            let (path, key, who) = (h.path.clone(), self.handoffs.key, name.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::handoff::forward(received, path, key, within).await {
                    log(
                        "master",
                        format!("cannot pass a connection to worker {who}: {e}; it is closed"),
                    );
                }
            });
        }
        if self.slots[i].asleep {
            self.on_demand(&name);
        }
    }

    /// Something waits for the sleeping worker `name`: it starts — with its app process, for
    /// a proxied pool (the app first, as at `serve`).
    pub(super) fn on_demand(&mut self, name: &str) {
        let woken: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].asleep && self.slots[i].spec.is_named(name))
            .collect();
        let Some(&first) = woken.first() else {
            return; // woken already, or gone with a reload
        };
        let started = Instant::now();
        // A frozen worker only thaws: it has its process already. Any other wake must find
        // room under the on-demand bounds (see `super::wake`).
        let frozen = woken.iter().any(|&i| {
            self.slots[i]
                .current
                .as_ref()
                .is_some_and(|p| p.frozen.is_some())
        });
        if !frozen {
            if let Err(why) = self.room_to_wake(name, started) {
                self.turn_away(name, &why, started);
                return;
            }
        }
        let pool = self.slots[first].pool;
        let was_asleep = self.pool_asleep(pool);
        let mut thawed = false;
        // With a warmup page, a proxied pool's front starts once its app is ready: until
        // then the master takes the connections and answers the page.
        let page = self.pools[pool].spec.warmup_page.is_some();
        let with_app = woken.iter().any(|&i| self.slots[i].app.is_some());
        for &i in &woken {
            let slot = &mut self.slots[i];
            slot.asleep = false;
            if let Some(w) = slot.watcher.take() {
                w.abort();
            }
            if self.thaw(i) {
                thawed = true;
                continue;
            }
            if self.starts_on_request(i) {
                // Started at its front's first request (see `super::app_on_request`).
                self.slots[i].asleep = true;
                continue;
            }
            let slot = &mut self.slots[i];
            if page && with_app && slot.app.is_none() {
                slot.after_app = true;
                continue;
            }
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].restart =
                    super::life::Restart::At(started + crate::server::lifecycle::MAX_BACKOFF);
            }
        }
        if !thawed && self.pools[pool].spec.warmup_page.is_some() {
            self.answer_while_starting(&woken);
        }
        let how = if thawed { "thawed" } else { "starting" };
        log(
            "master",
            format!("worker {name} {how} on demand (a connection waits for it)"),
        );
        if was_asleep {
            self.steer_around_away();
        }
    }

    /// Answers the woken `slots`' connections with their pool's `warmup_page` (503 and
    /// `Retry-After`) until they are ready: on copies of their listening sockets, and for what
    /// other pools hand them. The page is looked at now, so a fix to it needs no reload; it
    /// is read as the pool's user (the master is root, and the page's folder may be that
    /// user's to write), never through a symlink, never a FIFO, never past 64 KiB, and again
    /// only when the file changed (see [`os::read_as`]).
    fn answer_while_starting(&mut self, slots: &[usize]) {
        use super::pools::Answer;
        let Some(&first) = slots.first() else { return };
        let rt = &mut self.pools[self.slots[first].pool];
        let Some(path) = rt.spec.warmup_page.clone() else {
            return;
        };
        let known = rt.warmup_page.as_ref().map(|(stamp, _)| *stamp);
        let max = crate::config::WARMUP_PAGE_MAX;
        let body = match os::read_as::read_file_as(rt.spec.identity.as_ref(), &path, max, known) {
            Ok((stamp, Some(read))) => {
                let body: std::sync::Arc<[u8]> = read.into();
                rt.warmup_page = Some((stamp, body.clone()));
                body
            }
            Ok((_, None)) => rt
                .warmup_page
                .as_ref()
                .map(|(_, b)| b.clone())
                .unwrap_or_default(),
            Err(e) => {
                rt.warmup_page = None;
                let who = rt
                    .spec
                    .identity
                    .as_ref()
                    .map_or(String::new(), |id| format!(" as user {}", id.user));
                log("master", format!("pool {}: cannot read warmup_page {}{who} ({e}): its clients wait for it instead", rt.spec.name, path.display()));
                return;
            }
        };
        // The last start's time, rounded up: when a retry finds it ready.
        let took = slots
            .iter()
            .filter_map(|&i| self.slots[i].last_start_took)
            .max();
        let answer = Answer::Page {
            body,
            retry_after: took.map_or(2, |d| d.as_secs() + 1),
            content_type: "text/html; charset=utf-8",
        };
        let key = self.handoffs.key;
        for &i in slots {
            // Who may hand the slot connections: its spec says (computed once, for its start).
            let senders = self.slots[i].spec.handoff_senders.clone();
            self.answer_on_sockets(i, &answer, &senders, key);
        }
    }

    /// Slot `i`'s sockets (listening and hand-off) answered with `answer` by the master (a
    /// reset on an https address: the master has no keys to answer in).
    pub(super) fn answer_on_sockets(
        &mut self,
        i: usize,
        answer: &super::pools::Answer,
        senders: &[u32],
        key: crate::handoff::Key,
    ) {
        use super::pools::{answer_accepted, answer_handed, handoff_copy, listener_copy};
        let slot = &mut self.slots[i];
        for t in &slot.spec.threads {
            for &(fd, group) in &t.listeners {
                let tls = slot.spec.groups.get(group).is_some_and(|g| g.tls);
                let here = if tls {
                    super::pools::Answer::Reset
                } else {
                    answer.clone()
                };
                if let Ok(l) = listener_copy(fd) {
                    slot.page_answerers
                        .push(tokio::spawn(answer_accepted(l, here)));
                }
            }
            let handed = t
                .handoff_fd
                .map(|fd| handoff_copy(fd, senders.to_vec(), key));
            if let Some(Ok(receiver)) = handed {
                let tls_addrs = slot.spec.groups.iter().filter(|g| g.tls).map(|g| g.addr);
                slot.page_answerers.push(tokio::spawn(answer_handed(
                    receiver,
                    answer.clone(),
                    tls_addrs.collect(),
                )));
            }
        }
    }

    /// A process of the worker `name` is ready: a front waiting for its app starts now; once
    /// all are ready, the master stops answering its page.
    pub(super) fn started_answering(&mut self, name: &str) {
        let waiting: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].after_app && self.slots[i].spec.is_named(name))
            .collect();
        for i in waiting {
            self.slots[i].after_app = false;
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].restart = super::life::Restart::At(
                    Instant::now() + crate::server::lifecycle::MAX_BACKOFF,
                );
            }
        }
        let ready = self
            .slots
            .iter()
            .filter(|s| s.spec.is_named(name))
            .all(|s| s.current.as_ref().is_some_and(|p| p.life.is_ready()));
        if ready {
            for s in self.slots.iter_mut().filter(|s| s.spec.is_named(name)) {
                for a in s.page_answerers.drain(..) {
                    a.abort();
                }
            }
        }
    }

    /// Once a tick: an on-demand worker that served nothing for its pool's `idle_timeout`
    /// goes to sleep (with its app process).
    pub(super) fn sleep_idle(&mut self, now: Instant) {
        let mut idle: Vec<String> = Vec::new();
        for slot in self.slots.iter_mut() {
            let spec = &self.pools[slot.pool].spec;
            let (StartMode::OnDemand, Some(timeout)) = (spec.start, spec.idle_timeout) else {
                continue;
            };
            // An app process tells nothing of its requests; its front worker (or, activated,
            // nobody) decides. An activated app is never put to sleep for idleness.
            if slot.app.is_some() || slot.replacing.is_some() || slot.asleep {
                continue;
            }
            let Some(p) = slot.current.as_mut().filter(|p| p.life.is_ready()) else {
                continue;
            };
            if p.figures.connections > 0 || p.figures.requests != p.seen_requests {
                p.seen_requests = p.figures.requests;
                p.busy_at = now;
                continue;
            }
            // Idle by the worker's own word, given after the deadline: the counts are its last
            // ping's, and a request served since (a visitor just before the timeout) would
            // otherwise be missed and its pool stopped under it.
            if p.last_pong.saturating_duration_since(p.busy_at) >= timeout {
                idle.push(slot.spec.name());
            }
        }
        for name in idle {
            self.put_to_sleep(&name, now);
        }
    }

    /// Stops (or, with `idle_action = "suspend"`, freezes) the worker `name` and its app
    /// process for idleness; it sleeps from then on.
    fn put_to_sleep(&mut self, name: &str, now: Instant) {
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].spec.is_named(name))
            .collect();
        let Some(&first) = slots.first() else { return };
        let pool = self.slots[first].pool;
        let timeout = self.pools[pool].spec.idle_timeout.unwrap_or(Duration::ZERO);
        let suspend = self.pools[pool].spec.idle_action == IdleAction::Suspend;
        let suspended = if suspend {
            self.suspend(name, &slots)
        } else {
            super::suspend::Suspended::Refused
        };
        if suspended == super::suspend::Suspended::Busy {
            return;
        }
        if suspended == super::suspend::Suspended::Frozen {
            for &i in &slots {
                self.sleep_slot(i);
            }
            if self.pool_asleep(pool) {
                self.steer_around_away();
            }
            return;
        }
        let limit = self.pools[pool].spec.shutdown_time_limit;
        for &i in &slots {
            let slot = &mut self.slots[i];
            slot.restart = super::life::Restart::No;
            if let Some(mut p) = slot.current.take() {
                p.stop_after_fronts(now, limit);
                slot.draining.push(p);
            }
            self.sleep_slot(i);
        }
        log(
            "master",
            format!(
                "worker {name} served nothing for {} (idle_timeout): stopped; the next connection starts it again",
                crate::units::format_duration(timeout)
            ),
        );
        if self.pool_asleep(pool) {
            self.steer_around_away();
        }
    }

    /// Whether every worker of pool `pool` sleeps.
    pub(super) fn pool_asleep(&self, pool: usize) -> bool {
        let mut slots = self.slots.iter().filter(|s| s.pool == pool).peekable();
        slots.peek().is_some() && slots.all(|s| s.asleep)
    }

    /// Per pool, whether every worker of it sleeps: one pass over the slots, for what asks of
    /// every pool at once (steering, the status).
    pub(super) fn pools_asleep(&self) -> Vec<bool> {
        let mut counts = vec![(0usize, 0usize); self.pools.len()];
        for s in &self.slots {
            if let Some(c) = counts.get_mut(s.pool) {
                c.0 += 1;
                c.1 += usize::from(s.asleep);
            }
        }
        counts
            .into_iter()
            .map(|(n, asleep)| n > 0 && asleep == n)
            .collect()
    }

    /// The pools whose sockets steering leaves out on a shared address: the stopped ones, and
    /// those asleep — whose connections then go to the pools that run, which hand them over,
    /// so that one pool's visitor never wakes another.
    pub(super) fn pools_away(&self) -> Vec<String> {
        let asleep = self.pools_asleep();
        self.pools
            .iter()
            .zip(asleep)
            .filter(|(pool, asleep)| pool.stopped.is_some() || *asleep)
            .map(|(pool, _)| pool.spec.name.clone())
            .collect()
    }

    /// Steers every shared address around the pools away now — one without the dispatcher
    /// in front (whose sockets are its alone, and it is never away): none since the dispatcher,
    /// so nothing is computed (a pass over every pool, at each wake and sleep).
    pub(super) fn steer_around_away(&self) {
        let steered =
            |g: &&crate::server::listeners::ListenerGroup| g.shared() && !g.routes.dispatched;
        if !self.groups.iter().any(|g| steered(&g)) {
            return;
        }
        let away = self.pools_away();
        for g in self.groups.iter().filter(steered) {
            crate::server::listeners::steer(g, &self.config, &self.topology, &away);
        }
    }
}
