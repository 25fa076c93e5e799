//! The pool supervisor: the master's event loop after start-up — IIS's WAS keeping application
//! pools alive without an operator.
//!
//! Owns: the loop itself — signals (SIGCHLD reaps, SIGHUP reloads, SIGTERM/SIGINT stop gracefully), the
//! tick (respawns, readiness and ping deadlines, recycling by limits, soft affinity), and
//! events from workers and the admin endpoint. The rest lives beside it:
//! - `start_up`: the state made from the configuration, every worker started and waited for;
//!   `stop`: the graceful stop and the blunt one;
//! - `procs`: what it keeps of each process, slot and pool; `life`: a process's and a slot's
//!   states, and the one transition function of each; `event`: what the loop reacts to;
//!   `control_out`: the lines written to a worker's control socket, each reaching it whole;
//! - `slots`: a slot's processes — start, ready, recycle, reap, crash restart, rapid-fail —
//!   whether espalier workers or the processes of a pool's application;
//! - `apps`: an application process's readiness and pings (probes, settle time) and telling
//!   a proxied pool's front workers where its ready processes are;
//! - `pools`: stopping and starting pools, admin commands;
//! - `report`: the status report, filtered and paged;
//! - `reload`: applying a changed config, transactionally (`reload_diff`: which pools it
//!   changes; `reload_groups`: its listener groups; `hosts_live`: a dispatcher told its new hosts, not restarted, and an add
//!   that keeps the sockets); `config_api`: the configuration API's reads and writes, a write answered once
//!   it serves (`config_version`: its version, last change and waiting answers); `upgrade`:
//!   a new binary started on this master's sockets, which then drains; `fleet`: a fleet's
//!   state (`[server.cluster]`), `fleet_copy`: etcd's copy applied, the API's shared
//!   writes sent to etcd first; `fleet_tickets`: the fleet's session ticket secrets;
//!   `fleet_files`: the fleet's certificates, challenge proofs and account copied to disk;
//! - `cert_store`: the certificate store's pairs for starting workers; `cert_updates`: the
//!   changed ones sent to running workers; `acme`: the store's certificates ordered from an
//!   ACME directory and renewed (`acme_schedule`: when; `acme_dns`: DNS-01's publisher kept); `on_demand`: which names a handshake may have ordered, and
//!   the bounds; `on_demand_answers`: a worker's ask for one, answered; `ticket_keys`: the
//!   session ticket keys rotated and sent to the workers; `session_tables`: the pools' shared
//!   TLS session tables (HTTP/3's 0-RTT);
//! - `demand`: on-demand pools — a sleeping worker woken by its first connection, and put
//!   back to sleep after `idle_timeout`; `app_on_request`: a woken pool's app started at its
//!   front's first request for it;
//! - `suspend`: freezing idle on-demand workers and thawing them;
//! - `wake`: how many on-demand workers may wake and be awake at once; `wake_budget`: how many
//!   sleeping pools one client may wake a minute;
//! - `cgroups`: CPU caps, memory and pids limits (on-demand pools' made at their first
//!   start) and cpusets;
//! - `affinity`: soft affinity, applied;
//! - `live`: the admin page's live figures (each CPU's load, requests per pool), read once a
//!   second; `samples`: those figures kept between samples;
//! - `upstream_checks`: upstream groups' active health checks and each server's state;
//!   `upstream_told`: a check's result logged and told to the workers.
//!
//! Decisions come from [`super::lifecycle`] and [`super::soft`]; syscalls from [`crate::os`].
//! Must not touch: requests (it answers none except a stopped pool's 503) or the listeners'
//! sockets beyond accepting on copies of them while a pool is stopped.

mod acme;
mod acme_dns;
mod acme_schedule;
mod affinity;
mod app_on_request;
mod apps;
mod cert_store;
mod cert_updates;
mod cgroups;
mod config_api;
mod config_version;
mod control_out;
mod demand;
pub(super) mod event;
mod fleet;
mod fleet_copy;
mod fleet_files;
mod fleet_tickets;
mod hosts_live;
mod life;
mod live;
mod on_demand;
mod on_demand_answers;
mod pools;
mod procs;
mod reload;
mod reload_diff;
mod reload_groups;
mod report;
mod samples;
mod session_tables;
mod slots;
mod start_up;
mod stop;
mod suspend;
mod ticket_keys;
mod upgrade;
mod upstream_checks;
mod upstream_told;
mod wake;
mod wake_budget;

use super::admin::AdminReply;
use super::control::Message;
use super::lifecycle;
use super::listeners::ListenerGroup;
use super::log;
use super::spec::WorkerSpec;
use crate::config::{Config, StartMode};
use crate::os;
pub(super) use event::Event;
use life::{Act, Deadlines, Happening, Life, Restart, Why};
use procs::{PoolRt, Proc, Slot};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Names for a log line: all of a few, the first few and the count of many (a hoster's port
/// has thousands of hosts, and a log line is read by a person).
fn first_of(names: &[String]) -> String {
    const SHOWN: usize = 8;
    if names.len() <= SHOWN {
        return names.join(", ");
    }
    format!("{}, … ({} in all)", names[..SHOWN].join(", "), names.len())
}

/// How often stats pings go out (pings also count as the health check).
const STATS_PING: Duration = Duration::from_secs(1);

/// A gap between ticks (every 100 ms) past which the master itself was paused.
const MASTER_PAUSED: Duration = Duration::from_secs(3);

struct Supervisor {
    /// The configuration running now (replaced by a reload).
    config: Config,
    /// Its pools' plan (the start's, then each reload's): the next reload's "before", not
    /// planned again for every change.
    plan: crate::placement::Plan,
    topology: crate::topology::Topology,
    groups: Vec<ListenerGroup>,
    /// The hand-off sockets of pools on shared addresses (one per thread slot).
    handoffs: super::handoffs::Handoffs,
    /// Workers of a reloaded or removed pool: they serve until the pool's new workers are all
    /// ready (or at once, for a removed pool), then drain.
    retiring: Vec<(String, Proc)>,
    /// Each node's online CPUs, for soft affinity.
    nodes: Vec<(u32, crate::cpuset::CpuSet)>,
    online: crate::cpuset::CpuSet,
    /// The last `/proc/stat` sample and when it was taken.
    load_sample: (Instant, Vec<(u32, u64, u64)>),
    /// The control groups made for CPU caps and hard affinity (see `cgroups`).
    cgroups: procs::Cgroups,
    /// The configuration API's version and last change (see `config_api`).
    config_api: config_version::ConfigApi,
    slots: Vec<Slot>,
    /// Where a process was last found among the slots (see `procs::SlotHints`).
    slot_hints: procs::SlotHints,
    /// Boxed: a pool added among 10,000 moves each pool's place, not its large state
    /// (`reload::match_pools`).
    #[allow(clippy::vec_box)]
    pools: Vec<Box<PoolRt>>,
    events: mpsc::UnboundedSender<Event>,
    next_generation: u64,
    last_second_of_day: u32,
    /// When the last tick ran: a gap far longer than the tick's period means the master
    /// itself was paused (SIGSTOP, a VM freeze), not its workers.
    last_tick: Instant,
    /// When the heap's free memory goes back to the kernel: a while after the last change.
    trim_at: Option<Instant>,
    /// Proxied pools whose front workers have not all been told their app processes yet.
    upstreams_unsent: Vec<usize>,
    /// The admin page's CPU loads and request history.
    live: samples::LiveSamples,
    /// The certificate store's names by pool and what was last seen of its files.
    cert_store: cert_store::CertStore,
    /// The secrets of every pool's session ticket keys (see `ticket_keys`).
    ticket_keys: crate::tls::tickets::KeyRing,
    /// The pools' shared TLS session tables, for HTTP/3's 0-RTT.
    session_tables: session_tables::SessionTables,
    /// The cgroup freezer and its groups (see `suspend`).
    freezing: procs::Freezing,
    /// App processes started again at start-up after losing their port (see
    /// `apps::PORT_RETRIES`).
    port_retries: u32,
    /// The memory the server may use (the machine's, or its control group's cap), for the
    /// on-demand bounds' defaults (see `wake`).
    memory: Option<u64>,
    /// What the on-demand bounds keep between wakes (see `wake`, `app_on_request`).
    waking: procs::Waking,
    /// The task that takes what reaches the master's hand-off socket (see `demand`).
    handed_to_master: Option<tokio::task::JoinHandle<()>>,
    /// Upstream groups' active checks.
    upstream_checks: upstream_checks::UpstreamChecks,
    /// The certificates ordered for the store (`[server.acme]`).
    acme: acme::Acme,
    /// The names asked for by handshakes (`[server.acme] on_demand`).
    on_demand: on_demand::OnDemandOrders,
    /// A binary upgrade under way, or done (see `upgrade`).
    upgrade: procs::Upgrade,
    /// The fleet this server is a member of (`[server.cluster]`; see `fleet`).
    fleet: fleet::Fleet,
}

/// The signals the master acts on.
pub(super) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    chld: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let on = |kind| signal(kind).map_err(|e| e.to_string());
        Ok(Signals {
            term: on(SignalKind::terminate())?,
            int: on(SignalKind::interrupt())?,
            chld: on(SignalKind::child())?,
            hup: on(SignalKind::hangup())?,
            usr1: on(SignalKind::user_defined1())?,
            usr2: on(SignalKind::user_defined2())?,
        })
    }
}

/// Runs the master (`running`: its configuration and plan) from its listeners opened to its
/// last process stopped: the start (`start_up`), the loop of events, and the stop (`stop`).
pub(super) async fn run(
    running: (Config, crate::placement::Plan),
    topology: &crate::topology::Topology,
    groups: Vec<ListenerGroup>,
    handoffs: super::handoffs::Handoffs,
    specs: Vec<WorkerSpec>,
    (admin, upgrading): (
        std::net::TcpListener,
        Option<std::os::unix::net::UnixStream>,
    ),
) -> Result<i32, String> {
    let mut signals = Signals::new()?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut sv = Supervisor::new(running, topology, groups, handoffs, specs, tx.clone());
    sv.log_listening();
    sv.make_cgroups();
    sv.take_handed_to_master();
    sv.start_all(&mut rx).await?;
    sv.upgrade.admin_socket = admin.try_clone().ok();
    sv.upgrade.admin_task = super::admin::start(admin, &sv.config, topology, tx.clone());
    // Reading and checking thousands of sites' files left freed memory in the heap's arenas.
    os::alloc::release_free_memory();
    log(
        "master",
        format!(
            "{} worker(s) serving{}; SIGTERM or Ctrl-C stops them gracefully",
            sv.slots.iter().filter(|s| !s.asleep).count(),
            match sv.slots.iter().filter(|s| s.asleep).count() {
                0 => String::new(),
                n => format!(", {n} on demand (started by their first connection)"),
            }
        ),
    );
    sv.notify_ready();
    // After the start: at 10,000 files it reads them all again — as a change through the
    // API reads them, so that the folders are watched from now on and the first change
    // finds its files trusted (it listed and looked at each of 10,000 otherwise).
    crate::config::files_read_once(|| sv.config_api.read_version(&sv.config));
    if let Some(mut upgrading) = upgrading {
        sv.upgrade.from = Some(std::os::unix::process::parent_id());
        // The master this one upgrades stops taking connections once it reads this.
        use std::io::Write;
        let _ = upgrading.write_all(b"ready\n");
        log(
            "master",
            "upgrade: serving on the previous master's sockets",
        );
    }

    // The start is not a pause: the ticks are counted from here.
    sv.last_tick = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => {
                sv.on_event(ev);
                if sv.upgrade.handed_over {
                    break;
                }
            }
            _ = signals.chld.recv() => sv.reap(),
            _ = tick.tick() => sv.on_tick(),
            _ = signals.hup.recv() => {
                // systemd's reload protocol: RELOADING=1 with the time, READY=1 when done.
                let _ = os::notify::notify(&format!(
                    "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
                    os::notify::monotonic_usec()
                ));
                let _ = sv.reload_logged();
                sv.notify_ready();
            }
            _ = signals.usr1.recv() => sv.reopen_logs(),
            _ = signals.usr2.recv() => sv.begin_upgrade(None),
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
        }
    }
    sv.stop_gracefully(&mut signals).await;
    Ok(0)
}

impl Supervisor {
    fn on_event(&mut self, ev: Event) {
        self.on_event_only(ev);
        self.answer_config_calls_served(Instant::now());
    }

    fn on_event_only(&mut self, ev: Event) {
        match ev {
            Event::Worker {
                generation,
                message,
            } => self.on_message(generation, message),
            Event::Admin(cmd, reply) => self.admin(cmd, reply),
            Event::Upgraded { pid, outcome } => self.on_upgraded(pid, outcome),
            Event::Probed {
                generation,
                healthy,
                unready,
            } => self.on_probed(generation, healthy, unready),
            Event::Demand { slot } => self.on_demand(&slot),
            Event::Handed { pool, received } => self.on_handed(&pool, *received),
            Event::UpstreamChecked {
                epoch,
                group,
                server,
                result,
            } => self.on_upstream_checked(epoch, group, server, result),
            Event::Resolved { group, servers } => self.on_resolved(&group, servers),
            Event::AcmeOrdered { name, outcome } => self.on_acme_ordered(&name, outcome),
            Event::AcmeLooked { name, pair } => self.acme.on_looked(&name, pair),
            Event::OnDemandJudged { name, judged } => self.on_demand_judged(&name, judged),
            Event::Cluster(news) => self.on_cluster(news),
        }
    }

    /// An ACME order ended: said, and a name asked for on demand served or let go.
    fn on_acme_ordered(&mut self, name: &str, outcome: Result<event::Issued, String>) {
        let issued = outcome.is_ok();
        self.acme.on_ordered(name, outcome);
        self.on_demand_ordered(name, issued);
    }

    /// A control message from the worker process of `generation`.
    fn on_message(&mut self, generation: u64, message: Message) {
        match message {
            Message::Ready { .. } => self.on_ready(generation),
            Message::Error(why) => {
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
            Message::Pong(figures) => self.on_pong(generation, figures),
            Message::Stuck(threads) => {
                // Not a pong: `ping_response_time` replaces the worker if this goes on.
                if let Some((name, p)) = self.proc_of(generation) {
                    if !p.stuck {
                        log("master", format!("worker {name} (pid {}): engine thread(s) {threads} have not turned for 2s; replacing it if this lasts ping_response_time", p.pid));
                    }
                    p.stuck = true;
                }
            }
            Message::Stopping => self.on_stopping(generation),
            Message::HostsTaken(taken) => self.hosts_taken(generation, taken),
            Message::Unresponsive(endpoint) => self.on_unresponsive(generation, &endpoint),
            Message::Ejected(pairs) => {
                if let Some((_, p)) = self.proc_of(generation) {
                    let words: Vec<&str> = pairs.split_whitespace().collect();
                    p.ejected = (words.chunks_exact(2))
                        .map(|w| (w[0].to_string(), w[1].to_string()))
                        .collect();
                }
            }
            Message::WantCertificate(name) => self.want_certificate(generation, &name),
            Message::WantApp => self.want_app(generation),
            figures @ (Message::Meters(_) | Message::Caches(_)) => {
                self.on_figures(generation, figures)
            }
            Message::Ping
            | Message::Upstreams(_)
            | Message::UpstreamHealth(_)
            | Message::Reopen
            | Message::Certificate(_)
            | Message::TicketKeys(_)
            | Message::Purge(_)
            | Message::Hosts(_)
            | Message::NoCertificate(_) => {}
        }
    }

    /// A pong: a worker's figures (an `ejected` line follows when it has any), or an app's
    /// sd_notify `WATCHDOG=1` (it pings by itself from then on).
    fn on_pong(&mut self, generation: u64, figures: crate::server::control::Figures) {
        let Some((name, p)) = self.proc_of(generation) else {
            return;
        };
        p.last_pong = Instant::now();
        if let Some(app) = p.app.as_mut() {
            app.watchdog = true;
            return;
        }
        if p.stuck {
            log(
                "master",
                format!("worker {name} (pid {}) is turning again", p.pid),
            );
        }
        p.figures = figures;
        p.ejected.clear();
        p.stuck = false;
    }

    /// READY=1 for systemd (`Type=notify`), with a status line of what serves.
    fn notify_ready(&self) {
        let running = self.procs().filter(|p| p.life.has_been_ready()).count();
        let stopped = self.pools.iter().filter(|p| p.stopped.is_some()).count();
        let _ = os::notify::notify(&format!(
            "READY=1\nSTATUS={running} process(es) serving in {} pool(s){}",
            self.pools.len(),
            if stopped > 0 {
                format!(", {stopped} stopped")
            } else {
                String::new()
            }
        ));
    }

    /// SIGUSR1: every worker reopens its access logs (after logrotate moved them).
    pub(super) fn reopen_logs(&mut self) {
        // New files, owned by their pools' users, before the workers reopen.
        if let Err(e) = crate::server::runtime::prepare_access_logs(&self.config) {
            log("master", format!("warning: {e}"));
        }
        let line = Message::Reopen.line();
        let mut told = 0;
        for p in self.procs() {
            if let Some(control) = &p.control {
                told += usize::from(control.send(&line));
            }
        }
        log(
            "master",
            format!("SIGUSR1: {told} worker(s) reopen their access logs"),
        );
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        let paused = now.duration_since(self.last_tick);
        self.last_tick = now;
        if paused > MASTER_PAUSED {
            // The master did not look for that long: the pongs it missed are its own fault.
            // Every process's pings start over, rather than healthy ones being killed.
            log(
                "master",
                format!(
                    "the master was paused for {}s; the workers' pings start over",
                    paused.as_secs()
                ),
            );
            for p in self.slots.iter_mut().flat_map(|s| s.procs_mut()) {
                p.last_pong = now;
            }
        }
        for pool in std::mem::take(&mut self.upstreams_unsent) {
            self.publish_upstreams(pool);
        }
        self.retire_when_replaced();
        self.send_due_hosts();
        self.trim_when_settled(now);
        self.answer_config_calls_served(now);
        self.forget_upgraded_master();
        self.scan_certificate_store();
        self.rotate_ticket_keys_when_due();
        self.resolve_upstreams_due(now);
        self.sleep_idle(now);
        self.start_wanted_apps();
        self.watch_turned_away_again(now);
        self.term_apps_whose_fronts_left(now);
        self.enforce_shutdown_limits(now);
        self.sample_load(now);
        let second = os::process::local_second_of_day();
        let crossed_window = (self.last_second_of_day, second);
        self.last_second_of_day = second;
        for i in 0..self.slots.len() {
            self.tick_slot(i, now, crossed_window);
        }
    }

    /// Slot `i`'s turn of the tick: a due restart, the process's deadlines (start, pings),
    /// an app's readiness, its ping, and a recycle its limits call for.
    fn tick_slot(&mut self, i: usize, now: Instant, crossed_window: (u32, u32)) {
        let pool = &self.pools[self.slots[i].pool];
        // A sleeping slot has no process, or a frozen one that can answer nothing.
        if pool.stopped.is_some() || self.slots[i].asleep {
            return;
        }
        let (recycle, ping_response) = (pool.spec.recycle.clone(), pool.spec.ping_response_time);
        // A worker is pinged every second for its figures; an app process only every
        // `ping_interval`, since its ping is a request to its `health` URL.
        let ping_every = if self.slots[i].app.is_some() {
            pool.spec.ping_interval
        } else {
            pool.spec.ping_interval.min(STATS_PING)
        };
        let limits = Deadlines {
            startup: pool.spec.startup_time_limit,
            ping: pool.spec.ping_response_time.max(ping_every * 3),
            shutdown: pool.spec.shutdown_time_limit,
        };
        if self.slots[i].app.is_some()
            && self.slots[i]
                .replacing
                .as_ref()
                .is_some_and(|p| p.life == Life::Starting)
        {
            // An overlapped recycle's new app process becomes ready as a first one does.
            self.app_readiness(i, now);
        }
        let slot = &mut self.slots[i];
        if matches!(slot.restart, Restart::At(t) if t <= now) && slot.current.is_none() {
            slot.restart = Restart::No;
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again"));
                self.slots[i].restart = Restart::At(now + lifecycle::MAX_BACKOFF);
            }
            return;
        }
        let Some(p) = slot.current.as_mut() else {
            return;
        };
        let starting = p.life == Life::Starting;
        let name = slot.spec.name();
        match p.happen(Happening::Tick(limits), now) {
            Some(Act::Kill(Why::StartupLimit)) => {
                log("master", format!("worker {name} (pid {}) did not report ready within {}s (startup_time_limit): replacing it", p.pid, limits.startup.as_secs()));
                return;
            }
            Some(Act::Kill(_)) => {
                log("master", format!("worker {name} (pid {}) missed its pings for {}s (ping_response_time): replacing it", p.pid, ping_response.as_secs()));
                return;
            }
            _ => {}
        }
        // Dying (its exit is reaped like any other), or not ready yet.
        if !p.life.is_ready() {
            if starting && slot.app.is_some() {
                self.app_readiness(i, now);
            }
            return;
        }
        if now.duration_since(p.last_pong) >= ping_every {
            match &p.control {
                Some(control) => {
                    control.send(&Message::Ping.line());
                }
                None => self.app_ping(i, now),
            }
        }
        let slot = &mut self.slots[i];
        let Some(p) = slot.current.as_mut() else {
            return;
        };
        if slot.replacing.is_none() && slot.restart != Restart::AfterExit {
            let uptime = now.duration_since(p.started);
            let crossed = lifecycle::crossed(&recycle.schedule, crossed_window.0, crossed_window.1);
            let resident = if recycle.memory.is_some() {
                p.resident_bytes()
            } else {
                None
            };
            if let Some(why) =
                lifecycle::recycle_due(&recycle, uptime, p.figures.requests, resident, crossed)
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
