//! One engine thread of a worker: pinned (to its CPU under hard affinity, else to the
//! worker's), its own single-threaded runtime, its listeners, hand-off socket and QUIC
//! endpoints, its connections and their environment (the site service, its routes to apps
//! and upstream groups, its clock), a heartbeat for the master's pings, and its drain.
//!
//! Owns: a thread's start, its heartbeat and its drain. Must not touch: other threads
//! (nothing is shared on the request path but what `Shared` holds read-only and the tiers'
//! version) or the connections' protocol (`crate::http`).

use super::admission::{accept_loop, receive_loop, Admission, Listener};
use super::shared::Shared;
use crate::cpuset::CpuSet;
use crate::handlers::{ProxyRoutes, ThreadService};
use crate::http::clock::Clock;
use crate::http::conn::Shutdown;
use crate::http::service::{ConnEnv, Timeouts};
use crate::http::HeadLimits;
use crate::os;
use crate::proxy::{GroupSource, ProxyRoute, SharedTiers};
use crate::routing::GroupRoutes;
use crate::server::hosts_update::Hosts;
use crate::server::spec::{ThreadSpec, WorkerSpec};
use crate::server::worker_health::{ThreadHealth, HEARTBEAT};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How the threads hear of a dispatcher's new hosts, and say which update they took:
/// `(thread, generation)`.
pub(super) type HostsChannels = (
    watch::Receiver<Option<Arc<Hosts>>>,
    tokio::sync::mpsc::UnboundedSender<(usize, u64)>,
);

/// How a thread hears that the worker drains, and tells that it started.
pub(super) struct ThreadChannels {
    pub(super) stop_rx: watch::Receiver<bool>,
    pub(super) started: std::sync::mpsc::Sender<Result<(), String>>,
    /// Told once the thread's listeners accept no more, draining.
    pub(super) accepts_no_more: std::sync::mpsc::Sender<()>,
    /// A dispatcher's new hosts (see `supervisor::hosts_live`), and where the thread says
    /// which update it took: `(thread, generation)`.
    pub(super) hosts: watch::Receiver<Option<Arc<Hosts>>>,
    pub(super) hosts_taken: tokio::sync::mpsc::UnboundedSender<(usize, u64)>,
}

/// One engine thread: its own runtime, its listeners, its connections — until the worker
/// drains, then within `shutdown_timeout`.
pub(super) fn engine_thread(
    spec: &WorkerSpec,
    t: usize,
    channels: ThreadChannels,
    health: Arc<ThreadHealth>,
    tiers: Arc<SharedTiers>,
    shared: &Shared,
    quic: crate::server::quic::ThreadSockets,
) {
    let ThreadChannels {
        mut stop_rx,
        started,
        accepts_no_more,
        hosts,
        hosts_taken,
    } = channels;
    let thread = &spec.threads[t];
    let affinity = if spec.hard {
        CpuSet::from_ids([thread.cpu])
    } else {
        CpuSet::from_ids(spec.cpus.iter().copied())
    };
    if let Err(e) = os::numa::set_thread_affinity(0, &affinity) {
        let _ = started.send(Err(format!("cannot pin thread to CPUs {affinity}: {e}")));
        return;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = started.send(Err(format!("cannot start an event loop: {e}")));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let serving = match Serving::start(spec, thread, &health, Arc::clone(&tiers), shared, quic)
        {
            Ok(serving) => serving,
            Err(e) => {
                let _ = started.send(Err(e));
                return;
            }
        };
        let _ = started.send(Ok(()));
        let taking = serving.take_hosts((spec, t), (&health, tiers, shared), hosts, hosts_taken);
        tokio::select! {
            _ = stop_rx.wait_for(|stop| *stop) => {}
            () = taking => {}
        }
        serving.drain(spec.shutdown_timeout, accepts_no_more).await;
    });
}

/// A thread serving: how it admits connections (their environment), how many are open, and
/// its accept tasks.
struct Serving {
    admission: Rc<Admission>,
    open: Rc<Cell<usize>>,
    accepting: Vec<JoinHandle<()>>,
}

impl Serving {
    /// Starts taking connections on `thread`'s sockets, and its heartbeat; `Err` with the
    /// line the worker fails to start with.
    fn start(
        spec: &WorkerSpec,
        thread: &ThreadSpec,
        health: &Arc<ThreadHealth>,
        tiers: Arc<SharedTiers>,
        shared: &Shared,
        quic: crate::server::quic::ThreadSockets,
    ) -> Result<Serving, String> {
        let ring =
            if spec.uring {
                let ring = crate::os::uring::Ring::start(spec.limits.body_timeout);
                Some(ring.map_err(|e| {
                    format!("cannot start io_uring ({e}); set [server] io = \"epoll\"")
                })?)
            } else {
                None
            };
        // The worker's connection limit, divided among its threads (no shared counter).
        let max_conns = spec
            .limits
            .max_connections
            .div_ceil(spec.threads.len().max(1));
        let clock = Rc::new(Clock::new(worker_line(spec, thread)));
        tokio::task::spawn_local(Rc::clone(&clock).run());
        let kept = (ring, clock, Rc::new(Shutdown::default()));
        let env = thread_env(spec, thread, health, (tiers, shared, max_conns), kept);
        let open = Rc::new(Cell::new(0usize));
        let mut listeners = Vec::new();
        for &(fd, group) in &thread.listeners {
            let std_listener = os::net::adopt_listener(fd);
            let ring = env.ring.as_ref().filter(|_| spec.accept_on_ring);
            let l = Listener::new(std_listener, ring)
                .map_err(|e| format!("cannot use listener fd {fd}: {e}"))?;
            listeners.push((l, group));
        }
        // Connections other pools hand to this thread on a shared address.
        let receiver = thread
            .handoff_fd
            .map(|fd| {
                // The master handed us this fd for this thread's exclusive use.
                crate::handoff::Receiver::new(
                    crate::os::process::adopt_fd(fd),
                    spec.handoff_senders.clone(),
                    spec.handoff_key,
                )
            })
            .transpose()
            .map_err(|e| format!("cannot use hand-off socket: {e}"))?;
        let admission = Rc::new(Admission {
            env: std::cell::RefCell::new(env),
            open: Rc::clone(&open),
            max_conns,
            panics: Arc::clone(&health.panics),
            who: format!("{}/{}/cpu{}", spec.pool, spec.index, thread.cpu).into(),
            cpu: thread.cpu,
            accepted: Cell::new(0),
            steered: Cell::new(0),
        });
        if let Some(receiver) = receiver {
            tokio::task::spawn_local(receive_loop(receiver, Rc::clone(&admission)));
        }
        let mut accepting: Vec<_> = listeners
            .into_iter()
            .map(|(l, group)| {
                tokio::task::spawn_local(accept_loop(l, group, Rc::clone(&admission)))
            })
            .collect();
        accepting.extend(start_quic(spec, &admission, shared, quic)?);
        beat(Arc::clone(health), Rc::clone(&admission));
        Ok(Serving {
            admission,
            open,
            accepting,
        })
    }

    /// Takes each update of a dispatcher's hosts (see `supervisor::hosts_live`): the
    /// thread's new connections get an environment routed by them (connections open keep
    /// theirs), and the thread says which update it took. Ends never. (A dispatcher has no
    /// QUIC endpoint, whose environment is its own: `check` refuses HTTP/3 where pools share
    /// an address.)
    async fn take_hosts(
        &self,
        (spec, t): (&WorkerSpec, usize),
        (health, tiers, shared): (&ThreadHealth, Arc<SharedTiers>, &Shared),
        mut hosts: watch::Receiver<Option<Arc<Hosts>>>,
        taken: tokio::sync::mpsc::UnboundedSender<(usize, u64)>,
    ) {
        while hosts.changed().await.is_ok() {
            let Some(update) = hosts.borrow_and_update().clone() else {
                continue;
            };
            let spec = update.applied_to(spec);
            let old = self.admission.env();
            let kept = (
                old.ring.clone(),
                Rc::clone(&old.clock),
                Rc::clone(&old.shutdown),
            );
            let limits = (Arc::clone(&tiers), shared, self.admission.max_conns);
            let env = thread_env(&spec, &spec.threads[t], health, limits, kept);
            env.service.count_from(&old.service);
            let old_env = std::mem::replace(&mut *self.admission.env.borrow_mut(), env);
            // Taken before the old environment is freed: at 10,000 sites that is a tenth of
            // the update's time, and no connection waits for it.
            let _ = taken.send((t, update.generation));
            drop((old, old_env));
        }
        std::future::pending().await
    }

    /// Drains within `within`: every connection's next answer says `Connection: close`
    /// (HTTP/2: GOAWAY); one waiting for a request gets `http::shutdown::DRAIN_IDLE` to send
    /// it; in-flight requests finish.
    async fn drain(self, within: Duration, accepts_no_more: std::sync::mpsc::Sender<()>) {
        self.admission.env().shutdown.begin();
        let deadline = tokio::time::Instant::now() + within;
        // A ring's accept takes connections until its cancel completes, and one still armed
        // when the process exits goes on taking them while the kernel tears the ring down —
        // connections nobody serves, which the successor or the master would have. So the
        // thread ends only after every accept loop did (tokio's at once; the ring's once the
        // kernel confirmed the cancel, what it took by then admitted and counted in `open`).
        for accept in self.accepting {
            let _ = tokio::time::timeout_at(deadline, accept).await;
        }
        let _ = accepts_no_more.send(());
        while self.open.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.admission.env().service.flush_logs();
    }
}

/// The thread's worker line (`worker_header`), which goes into every answer with the clock's
/// common lines, an app's too (see `proxy::head`).
fn worker_line(spec: &WorkerSpec, thread: &ThreadSpec) -> String {
    if !spec.worker_header {
        return String::new();
    }
    format!(
        "X-Espalier-Worker: {}/{}/cpu{}\r\n",
        spec.pool, spec.index, thread.cpu
    )
}

/// What a thread's environments share over its life: its ring, its clock and its drain.
type ThreadKept = (Option<Rc<crate::os::uring::Ring>>, Rc<Clock>, Rc<Shutdown>);

/// A thread's connections' environment: its site service with its routes to the pool's app
/// and to upstream groups (each held to its share of the thread's `max_conns`), its limits
/// and timeouts, with what the thread keeps over its life (`kept`).
fn thread_env(
    spec: &WorkerSpec,
    thread: &ThreadSpec,
    health: &ThreadHealth,
    (tiers, shared, max_conns): (Arc<SharedTiers>, &Shared, usize),
    (ring, clock, shutdown): ThreadKept,
) -> Rc<ConnEnv<ThreadService>> {
    let identity = format!("{}/{}/cpu{}", spec.pool, spec.index, thread.cpu);
    let routes = ProxyRoutes {
        app: spec
            .proxy
            .clone()
            .map(|settings| ProxyRoute::new(settings, tiers))
            .map(|route| Rc::new(route.keeping_answers(&format!("pool:{}", spec.pool)))),
        // Each thread draws its own servers: seeded apart by CPU and process.
        upstreams: (shared.upstreams.iter())
            .map(|h| {
                let seed = (u64::from(std::process::id()) << 32) | u64::from(thread.cpu);
                let group = GroupSource::new(Arc::clone(h), thread.node, seed);
                let route = ProxyRoute::to_group(group);
                let cache = format!("upstream:{}", h.spec.name);
                (h.spec.name.clone(), Rc::new(route.keeping_answers(&cache)))
            })
            .collect(),
        verifiers: Default::default(),
    };
    // No one app or group may hold more than its share of the thread's connections.
    for route in routes.app.iter().chain(routes.upstreams.values()) {
        route.share_of(max_conns);
    }
    let peers = crate::handoff::Peers::targets(
        &spec.handoff_peers,
        &spec.pool,
        (thread.cpu, thread.node),
        spec.handoff_key,
    );
    let l = &spec.limits;
    let groups = spec.groups.iter().map(|g| GroupRoutes::clone(g)).collect();
    Rc::new(ConnEnv {
        service: ThreadService::new(
            &spec.pool,
            &spec.sites,
            groups,
            Rc::clone(&clock),
            identity,
            routes,
            peers,
        )
        .with_body_default(l.max_body_size)
        .with_tls(&shared.configs, shared.kernel)
        .with_limits(&shared.limits)
        .with_meters(&health.meters)
        .with_tracing(spec.tracing.as_ref(), &spec.pool)
        .with_acme(spec.acme_challenges.as_deref()),
        clock,
        limits: HeadLimits {
            max_request_line: l.max_request_line,
            max_header_size: l.max_header_size,
            max_headers: l.max_headers,
            max_body_size: shared.max_body,
        },
        timeouts: Timeouts {
            header: l.header_timeout,
            body: l.body_timeout,
            keepalive: l.keepalive_timeout,
        },
        shutdown,
        streams: std::cell::Cell::new(0),
        ring,
    })
}

/// The thread's QUIC endpoints (HTTP/3), each accepting in a task of its own.
fn start_quic(
    spec: &WorkerSpec,
    admission: &Admission,
    shared: &Shared,
    quic: crate::server::quic::ThreadSockets,
) -> Result<Vec<JoinHandle<()>>, String> {
    let mut accepting = Vec::new();
    if quic.is_empty() {
        return Ok(accepting);
    }
    let thread = Rc::new(crate::server::quic::Thread {
        env: admission.env(),
        open: Rc::clone(&admission.open),
        max_conns: admission.max_conns,
        panics: Arc::clone(&admission.panics),
        who: Rc::clone(&admission.who),
    });
    let links = crate::server::quic::links();
    for (socket, group, index) in quic {
        let Some((tls, held)) = &shared.configs[group] else {
            continue;
        };
        let tag = spec.quic_tag;
        // check refuses it where a site asks for client certificates.
        // 0-RTT resumes from the pool's shared table, else the worker's own cache.
        let early = (spec.quic_early_data).then(|| {
            shared
                .sessions
                .clone()
                .unwrap_or_else(|| tls.session_storage.clone())
        });
        let settings = (spec.limits.keepalive_timeout, early);
        let certs = (&links, held.as_ref());
        let endpoint = crate::server::quic::endpoint((socket, index), tag, tls, settings, certs)?;
        accepting.push(tokio::task::spawn_local(crate::server::quic::accept_loop(
            endpoint,
            (group, spec.quic_early_data),
            Rc::clone(&thread),
        )));
    }
    Ok(accepting)
}

/// The thread's heartbeat: its figures published for the master's pings, its access log
/// lines written, and freed memory given back after a burst.
fn beat(health: Arc<ThreadHealth>, admission: Rc<Admission>) {
    health.beat(0, 0, admission.figures());
    tokio::task::spawn_local(async move {
        let mut tick = tokio::time::interval(HEARTBEAT);
        let mut trim = TrimAfterBurst::default();
        loop {
            tick.tick().await;
            let env = admission.env();
            health.beat(
                env.service.served(),
                env.service.remote_forwards(),
                admission.figures(),
            );
            // Access log lines are written at least this often.
            env.service.flush_logs();
            if trim.due(admission.open.get() + env.streams.get()) {
                os::alloc::release_free_memory();
            }
        }
    });
}

/// When a thread gives freed memory back: once its work (connections open, and HTTP/2
/// stream tasks, which may outlive their connection) fell to half of a burst's peak (a burst
/// being at least [`TrimAfterBurst::BURST`]), or to none after some. Off the request path (the
/// heartbeat asks), and rare: a steady load never trims.
#[derive(Default)]
pub(super) struct TrimAfterBurst {
    peak: usize,
}

impl TrimAfterBurst {
    const BURST: usize = 32;

    pub(super) fn due(&mut self, open: usize) -> bool {
        self.peak = self.peak.max(open);
        if (self.peak >= Self::BURST && open <= self.peak / 2) || (open == 0 && self.peak > 0) {
            self.peak = open;
            return true;
        }
        false
    }
}
