//! What the supervisor keeps of each process, slot and pool: the data, and the small acts on
//! one process (moving its life on, signalling it, measuring it).
//!
//! Owns: [`Proc`], [`AppProc`], [`Slot`], [`PoolRt`]. Must not touch: starting or reaping
//! processes (see `super::slots`) or the decisions (see `super::life`).

use super::life::{Act, Happening, Life, Restart, Times};
use crate::config::{AppCommand, PoolSpec, Transport};
use crate::os;
use crate::server::spec::WorkerSpec;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How long a replaced proxied app process keeps serving new requests after its successor is
/// ready: the front workers' switch to the successor is one control message away.
const UPSTREAM_HANDOVER: Duration = Duration::from_millis(500);
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
    /// Its figures, as its last pong told (see `server::control::Figures`).
    pub(super) figures: crate::server::control::Figures,
    /// Its sites' figures (`metrics = true`), as its last pong told.
    pub(super) meters: Vec<crate::server::meters::SiteMeters>,
    /// Its response caches' figures, each store's, as its last pong told.
    pub(super) caches: Vec<crate::proxy::cache_store::StoreCounts>,
    /// The upstream servers it has ejected, (group, address), as its last pong told.
    pub(super) ejected: Vec<(String, String)>,
    pub(super) last_pong: Instant,
    /// Whether the last ping found stuck threads (logged once per episode).
    pub(super) stuck: bool,
    /// The last time it had a request or a connection (for `idle_timeout`), and its request
    /// count then.
    pub(super) busy_at: Instant,
    pub(super) seen_requests: u64,
    /// An espalier worker's control socket; `None` for an app process (it has no such
    /// channel: sd_notify, probes and its exit tell about it).
    pub(super) control: Option<super::control_out::ControlOut>,
    /// Reads the worker's control lines, or an app's `NOTIFY_SOCKET`.
    pub(super) reader: JoinHandle<()>,
    /// What only an app process has.
    pub(super) app: Option<AppProc>,
    /// Its freezer group while it is suspended (`idle_action = "suspend"`).
    pub(super) frozen: Option<crate::os::freezer::FreezeGroup>,
    /// An espalier worker told to stop says when its threads accept no more (`stopping`):
    /// from then on every new connection goes to its successor (see `super::config_api`).
    pub(super) accepts_no_more: bool,
    /// A dispatcher's `hosts` updates sent, and the last one all its threads took (see
    /// `super::hosts_live`).
    pub(super) hosts_sent: u64,
    pub(super) hosts_taken: u64,
    /// A dispatcher's `hosts` line not sent yet.
    pub(super) hosts_due: Option<HostsDue>,
    /// The hosts a dispatcher was last sent, which the next update changes (update 0: those
    /// it started with; `None`: another pool's process, which is sent no hosts).
    pub(super) last_hosts: Option<SentHosts>,
}

/// A dispatcher's `hosts` line not sent yet (see `super::hosts_live`): since when, and the
/// pools whose new workers it waits for (those of the changes it carries; a pool the change
/// did not touch, however it fares, holds nothing back).
pub(super) struct HostsDue {
    pub(super) line: String,
    pub(super) since: std::time::Instant,
    pub(super) pools: std::collections::HashSet<String>,
    /// The hosts it sends, for the update after it.
    pub(super) sent: SentHosts,
}

/// What a `hosts` update gave a dispatcher (see `super::hosts_live`): the configuration's
/// sites it was made from, and the hosts as the dispatcher holds them — the update, its
/// groups, its hand-off table, and each site in outline, in the sources' order.
pub(super) struct SentHosts {
    pub(super) sources: Arc<Vec<Arc<crate::config::SiteSpec>>>,
    pub(super) hosts: crate::server::hosts_update::Hosts,
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
    /// Why it is not ready (another process on its port, or it listening on another) was
    /// said in the log (once per process).
    pub(super) unready_said: bool,
    /// When the next readiness probe may go out.
    pub(super) probe_at: Instant,
    /// When a probe that finds nothing on its port next looks at where it listens instead.
    pub(super) look_at: Instant,
}

impl Proc {
    /// Whether it is an app a front worker forwards to (proxied or FastCGI): in a stop it
    /// outlives the fronts, so the requests they have in flight to it can finish.
    pub(super) fn behind_a_front(&self) -> bool {
        self.app.as_ref().is_some_and(|a| a.endpoint.is_some())
    }

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

    /// Asked to stop with its whole worker (a pool put to sleep, or stopped to make room): an
    /// app behind a front waits for the front to finish what it forwards (SIGTERM once no
    /// front of its worker is left, see `Supervisor::term_apps_whose_fronts_left`, or at
    /// `limit`); anything else at once.
    pub(super) fn stop_after_fronts(&mut self, now: Instant, limit: Duration) {
        let handover = self.behind_a_front().then_some(limit);
        self.happen(Happening::Stop { handover }, now);
    }

    /// Whether it waits, stopping, for its SIGTERM (a hand-over or its fronts).
    pub(super) fn awaiting_term(&self) -> bool {
        matches!(
            self.life,
            Life::Stopping {
                term_at: Some(_),
                ..
            }
        )
    }

    /// Resident memory: an application's whole process tree, an espalier worker's own.
    pub(super) fn resident_bytes(&self) -> Option<u64> {
        if self.app.is_none() {
            return os::process::resident_bytes(self.pid);
        }
        os::process::resident_bytes_of(&os::process::process_tree(self.pid))
    }

    /// Sends `sig`. SIGKILL reaches an app's whole process group (gunicorn's workers with
    /// their arbiter); any other signal goes to the process, which passes it on as it sees fit.
    pub(super) fn signal(&self, sig: i32) {
        // A frozen process could not act on it (nor, under v1, even die).
        if let Some(g) = &self.frozen {
            let _ = g.thaw();
        }
        if self.app.is_some() && sig == libc::SIGKILL {
            let _ = os::process::kill_group(self.pid, sig);
        }
        let _ = os::process::kill(self.pid, sig);
    }
}

/// The control groups' part: the hierarchy found at start (none: no caps, no cpusets), and
/// the per-worker cpusets of hard-affinity pools, removed at exit.
pub(super) struct Cgroups {
    pub(super) hierarchy: Option<os::cgroup::Hierarchy>,
    pub(super) cpusets: Vec<os::cgroup::Group>,
    /// Whether an on-demand pool's default limits were said not to apply (once, not per
    /// pool: there may be thousands).
    pub(super) defaults_failed_said: bool,
}

/// A binary upgrade's part (see `super::upgrade`): a copy of the admin endpoint's socket to
/// pass on and the task that accepts on it here, the new master starting and the answers
/// waiting for it, and whether it took over.
#[derive(Default)]
pub(super) struct Upgrade {
    pub(super) admin_socket: Option<std::net::TcpListener>,
    pub(super) admin_task: Option<tokio::task::JoinHandle<()>>,
    pub(super) new_master: Option<u32>,
    pub(super) waiting: Vec<tokio::sync::oneshot::Sender<crate::server::admin::AdminReply>>,
    pub(super) handed_over: bool,
    /// The master this one upgraded, while it drains: its workers read some UDP sockets.
    pub(super) from: Option<u32>,
}

/// The freezer's part (`idle_action = "suspend"`): the cgroup freezer found at start, the
/// groups made (removed at exit), and whether its absence was said.
pub(super) struct Freezing {
    pub(super) freezer: Option<os::freezer::Freezer>,
    pub(super) groups: Vec<os::freezer::FreezeGroup>,
    pub(super) warned: bool,
}

/// The on-demand bounds' part: wakes turned away (for the log's bound), sleeping pools woken
/// per client address, and the pools whose front waits for room to start its app.
#[derive(Default)]
pub(super) struct Waking {
    pub(super) turned_away: u64,
    pub(super) by_client: super::wake_budget::WakesByClient,
    pub(super) apps_wanted: VecDeque<String>,
}

/// Which slot each process (by generation) was last found in: every message from a worker
/// names its process, and scanning 10,000 slots (each a whole worker spec long) for it cost
/// an added site 5 ms of the master's time at 10,000 sites. A hint, checked before it is
/// used: slots are renumbered and taken out by reloads without it being told.
#[derive(Default)]
pub(super) struct SlotHints(std::cell::RefCell<rustc_hash::FxHashMap<u64, usize>>);

impl SlotHints {
    /// The slot of `slots` process `generation` is in: where it was last found if it is
    /// there still, else found again (and kept).
    pub(super) fn find(&self, slots: &[Slot], generation: u64) -> Option<usize> {
        let holds = |i: usize| {
            slots
                .get(i)
                .is_some_and(|s| s.procs().any(|p| p.generation == generation))
        };
        let mut hints = self.0.borrow_mut();
        if let Some(&i) = hints.get(&generation).filter(|&&i| holds(i)) {
            return Some(i);
        }
        let i = (0..slots.len()).find(|&i| holds(i));
        match i {
            Some(i) => {
                // Bounded by the processes there are: the exited ones' hints go at a rebuild.
                if hints.len() > 2 * slots.len() + 64 {
                    hints.clear();
                }
                hints.insert(generation, i);
            }
            None => {
                hints.remove(&generation);
            }
        }
        i
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
    /// Its processes OOM-killed in a row, each soon after its start (see `oom_killed`).
    pub(super) oom_kills_in_a_row: u32,
    pub(super) restarts: u32,
    pub(super) recycles: u32,
    pub(super) last_exit: Option<String>,
    /// Soft affinity: where the worker has been widened to.
    pub(super) soft: crate::server::soft::SoftState,
    /// An on-demand slot without a process, its sockets watched by `watcher` (see
    /// `super::demand`).
    pub(super) asleep: bool,
    pub(super) watcher: Option<JoinHandle<()>>,
    /// While a woken slot starts, the master's answerers of its pool's `warmup_page`.
    pub(super) page_answerers: Vec<JoinHandle<()>>,
    /// How long its last process took from start to ready (the page's `Retry-After`).
    pub(super) last_start_took: Option<std::time::Duration>,
    /// A woken front worker whose start waits for its app process (so that the master,
    /// not the front, takes the connections meanwhile, and answers its `warmup_page`).
    pub(super) after_app: bool,
    /// Asleep and not allowed to wake until then (see `super::wake`): its sockets are
    /// answered 503 meanwhile, and watched again after.
    pub(super) turned_away_until: Option<Instant>,
}

impl PoolRt {
    pub(super) fn new(spec: std::sync::Arc<PoolSpec>) -> Self {
        PoolRt {
            spec,
            stopped: None,
            crashes: VecDeque::new(),
            responders: Vec::new(),
            allocate_mib: None,
            group: None,
            limits: Default::default(),
            group_tried: false,
            oom_kills: 0,
            fail_starts: 0,
            warmup_page: None,
        }
    }
}

/// A slot dropped (its pool changed or removed by a reload) takes its watch and its page
/// answerers with it: a task left running would wake or answer for the slot that replaced it.
impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
        for a in self.page_answerers.drain(..) {
            a.abort();
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
            oom_kills_in_a_row: 0,
            restarts: 0,
            recycles: 0,
            last_exit: None,
            soft: Default::default(),
            asleep: false,
            watcher: None,
            page_answerers: Vec::new(),
            last_start_took: None,
            after_app: false,
            turned_away_until: None,
        }
    }
}

pub(super) struct PoolRt {
    /// Shared with the configuration's.
    pub(super) spec: std::sync::Arc<PoolSpec>,
    /// Why it is stopped (rapid-fail, or by command).
    pub(super) stopped: Option<String>,
    pub(super) crashes: VecDeque<Instant>,
    pub(super) responders: Vec<JoinHandle<()>>,
    /// Fault injection for tests (`ESPALIER_ALLOCATE_AT_START=POOL:MIB`): first starts of the
    /// pool's workers allocate this much, to push them past a memory recycle limit.
    pub(super) allocate_mib: Option<u64>,
    /// The control group of a pool with `cpu_limit`, `memory_limit` or `pids_limit` (an
    /// on-demand pool's, at its first start: see `super::cgroups`), and the limits it
    /// applies (the pool's own, or an on-demand pool's defaults).
    pub(super) group: Option<os::cgroup::Group>,
    pub(super) limits: os::cgroup::PoolLimits,
    /// Whether its group was made or tried (an on-demand pool's waits for its first start).
    pub(super) group_tried: bool,
    /// Its processes the kernel's OOM killer killed (as its group counts them).
    pub(super) oom_kills: u64,
    /// Fault injection for tests (`ESPALIER_FAIL_AT_START=POOL:N` in the master's
    /// environment): the next N *restarts* of the pool's workers fail. First starts never do:
    /// a worker that cannot start at launch stops `espalier serve` with its error instead.
    pub(super) fail_starts: u32,
    /// Its `warmup_page` as last read, and what identified the file then (read again only
    /// when that moved).
    pub(super) warmup_page: Option<(os::read_as::Stamp, std::sync::Arc<[u8]>)>,
}

impl Slot {
    /// The slots of one planned process of `config`: an espalier worker; an activated
    /// application; or, for a proxied application, the app process and the front worker
    /// that forwards to it (the app first, so it is starting when the front is ready).
    /// `pool_spec`: its pool's (given, not looked up by name: 10,000 pools start at once).
    pub(super) fn for_spec(
        spec: WorkerSpec,
        pool: usize,
        pool_spec: Option<&PoolSpec>,
    ) -> Vec<Slot> {
        let app = pool_spec.and_then(|p| p.app.clone());
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

    /// Whether it serves as planned: its process ready, or asleep (an on-demand one, its
    /// sockets watched) — what a replaced or stopped pool's connections wait for.
    pub(super) fn ready_or_asleep(&self) -> bool {
        self.asleep || self.current.as_ref().is_some_and(|c| c.life.is_ready())
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
    pub(super) fn take_pid(&mut self, pid: u32) -> Option<Proc> {
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
