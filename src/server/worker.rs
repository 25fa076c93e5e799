//! A worker process: applies its placement, then runs one thread per CPU it owns, each with
//! its own single-threaded event loop, its own listener sockets, caches and counters.
//!
//! Owns: the worker's threads and its graceful stop (what it answers the master's pings is
//! `worker_health`'s). Must not touch: other workers or the
//! listeners' life (the master owns the sockets; a worker only uses its inherited copies).
//!
//! Affinity: the main thread and, for soft affinity, every engine thread may run on all of
//! the worker's CPUs (its home node); with hard affinity each engine thread is pinned to its
//! one CPU. Memory policy is set on the main thread before any other thread starts, so every
//! thread inherits it.

use super::conn_task::{self, Slot};
use super::control::Message;
use super::log;
use super::spec::{WorkerSpec, ENV_VAR};
use super::worker_health::{pong, site_meters, ThreadHealth, HEARTBEAT};
use crate::cpuset::CpuSet;
use crate::handlers::ProxyRoutes;
use crate::handlers::ThreadService;
use crate::handoff::PoolTargets;
use crate::http::accept::Accepted;
use crate::http::clock::Clock;
use crate::http::conn::Shutdown;
use crate::http::service::{ConnEnv, Timeouts};
use crate::http::{HeadLimits, Responder};
use crate::os::{self, numa::MemPolicyMode};
use crate::proxy::{GroupHealth, GroupSource, ProxyRoute, SharedTiers};
use crate::routing::limits::Accounts;
use crate::routing::GroupRoutes;
use std::cell::Cell;
use std::io::Write;

use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// Fault injection for the pool tests: a worker of the named pool fails right after start.
/// The master sets it for a number of starts (`ESPALIER_FAIL_AT_START=POOL:COUNT` in the
/// master's environment); nothing else reads it.
pub const FAIL_AT_START_VAR: &str = "ESPALIER_WORKER_FAIL_AT_START";

/// Fault injection for the memory-recycle test: the worker allocates and touches this many
/// MiB at start (the master sets it for first starts only, from
/// `ESPALIER_ALLOCATE_AT_START=POOL:MIB` in its environment).
pub const ALLOCATE_VAR: &str = "ESPALIER_WORKER_ALLOCATE_MIB";

fn fail_at_start() -> Option<String> {
    std::env::var(FAIL_AT_START_VAR)
        .ok()
        .filter(|v| !v.is_empty())
}

/// Entry point of `espalier worker` (started only by the master).
pub fn main() -> i32 {
    let spec: WorkerSpec = match std::env::var(ENV_VAR)
        .map_err(|e| e.to_string())
        .and_then(|fd| fd.parse().map_err(|_| format!("`{fd}` is no descriptor")))
        .and_then(|fd| os::process::read_inherited(fd).map_err(|e| e.to_string()))
        .and_then(|json| serde_json::from_slice(&json).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("espalier: `espalier worker` is started by `espalier serve`, not by hand ({ENV_VAR}: {e})");
            return 2;
        }
    };
    let name = spec.name();
    // Before the master under memory pressure (its -900 is inherited; raising needs no right).
    let _ = os::process::set_oom_score_adj(super::lifecycle::OOM_SCORE_ADJ_POOL);
    super::conn_task::install_panic_hook();
    // The master handed us this fd for our exclusive use.
    let mut control = os::process::adopt_unix_stream(spec.control_fd);
    match run(&spec, &mut control) {
        Ok(()) => 0,
        Err(message) => {
            let _ = control.write_all(Message::Error(message.clone()).line().as_bytes());
            log(&name, &message);
            1
        }
    }
}

fn run(spec: &WorkerSpec, control: &mut UnixStream) -> Result<(), String> {
    let _ = os::process::die_with_parent();
    // Join the pool's control groups before anything is pinned (see WorkerSpec::cgroups).
    for dir in &spec.cgroups {
        let group = os::cgroup::Group {
            dirs: vec![dir.clone()],
            accounting: None,
        };
        if let Err(e) = group.attach(std::process::id()) {
            log(
                &spec.name(),
                format!("warning: {e}; running outside that control group"),
            );
        }
    }
    let cpus = CpuSet::from_ids(spec.cpus.iter().copied());
    // The master set the policy before exec; setting it again reports a failure here, with
    // the worker's name. The default policy is what a new process has, so it needs no call.
    let mode = spec.memory_mode();
    if mode != MemPolicyMode::Default {
        os::numa::set_memory_policy(mode, &spec.memory_nodes).map_err(|e| {
            format!(
                "cannot set memory policy {:?} on node(s) {:?}: {e}",
                spec.memory_policy, spec.memory_nodes
            )
        })?;
    }
    os::numa::set_thread_affinity(0, &cpus)
        .map_err(|e| format!("cannot run on CPUs {cpus}: {e} (are they outside this process's allowed CPUs, e.g. a container's cpuset?)"))?;
    // Which HTTPS/1.1 connections the kernel's TLS can take, asked of the kernel once.
    let ktls = if spec.ktls && spec.groups.iter().any(|g| g.tls) {
        os::ktls::probe()
    } else {
        crate::os::ktls::KernelSupport::NONE
    };
    // Certificates are read while the worker may still read its keys (often root's alone);
    // the store's come from the master, checked.
    let store = Arc::new(crate::certs::store::StoreKeys::default());
    for cert in &spec.store_certs {
        if let Err(e) = store.insert(cert) {
            log(&spec.name(), format!("certificate store: {e}"));
        }
    }
    // Handshakes held for certificates ordered on demand, and the names to ask the master for.
    // A worker holds up to four times the master's bound: the master, which hears every
    // pool, is the one that refuses past it (and says so), this only caps the worker's memory.
    let mut on_demand = spec
        .acme_on_demand
        .map(|most| crate::tls::on_demand::OnDemand::new(4 * most as usize));
    let shared = Arc::new(Shared {
        configs: spec
            .groups
            .iter()
            .map(|g| {
                g.tls
                    .then(|| {
                        crate::tls::server_config(
                            g,
                            &spec.sites,
                            &spec.pool,
                            &spec.name(),
                            &store,
                            !ktls.is_empty(),
                            crate::tls::AcmeAnswers {
                                challenges: spec.acme_challenges.as_deref(),
                                on_demand: on_demand.as_ref().map(|(d, _)| d),
                            },
                        )
                    })
                    .transpose()
            })
            .collect::<Result<_, _>>()?,
        kernel: ktls,
        max_body: body_ceiling(spec.limits.max_body_size, &spec.sites),
        upstreams: used_upstreams(spec)
            .map(|u| Arc::new(GroupHealth::new(Arc::new(u.clone()))))
            .collect(),
        // Each limited site's clients, counted per worker (per node; see routing::limits).
        limits: spec
            .sites
            .iter()
            .map(|s| {
                s.limit.clone().map(|limit| {
                    let who = spec.name();
                    let report = Box::new(move |line: String| log(&who, line));
                    Arc::new(Accounts::new(&s.name, limit, spec.threads.len(), report))
                })
            })
            .collect(),
    });
    // Each thread's UDP sockets for HTTP/3, as the master handed them.
    let mut quic = crate::server::quic::sockets(spec, |g| shared.configs[g].is_some()).into_iter();
    // Placed and in its control groups (which needed root): now the pool's user, before any
    // thread starts or any request is read.
    if let Some(id) = &spec.identity {
        id.assume()
            .map_err(|e| format!("cannot become user `{}`: {e}", id.user))?;
        // Changing user clears the parent-death signal.
        let _ = os::process::die_with_parent();
    }
    // The hand-off key and the pool's keys must stay out of reach of the app processes that
    // run as the same user (see `handoff`).
    os::process::not_dumpable().map_err(|e| format!("cannot make the worker non-dumpable: {e}"))?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let (started_tx, started_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    // Each thread publishes its figures and a heartbeat here, for the master's pings.
    let epoch = std::time::Instant::now();
    let health: Vec<Arc<ThreadHealth>> = spec
        .threads
        .iter()
        .map(|_| Arc::new(ThreadHealth::new(epoch, &spec.sites)))
        .collect();
    // The app processes a front worker forwards to, replaced at each `upstreams` message.
    let tiers = Arc::new(SharedTiers::default());
    let upstreams = shared.upstreams.clone();
    for (t, thread) in spec.threads.iter().enumerate() {
        let spec = spec.clone();
        let tiers = Arc::clone(&tiers);
        let stop_rx = stop_rx.clone();
        let started_tx = started_tx.clone();
        let cpu = thread.cpu;
        let health = Arc::clone(&health[t]);
        let shared = Arc::clone(&shared);
        let quic = quic.next().unwrap_or_default();
        let handle = std::thread::Builder::new()
            .name(format!("{}-cpu{cpu}", spec.pool))
            .spawn(move || {
                let channels = ThreadChannels {
                    stop_rx,
                    started: started_tx,
                };
                engine_thread(&spec, t, channels, health, tiers, &shared, quic)
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        threads.push(handle);
    }
    drop(started_tx);
    for _ in 0..spec.threads.len() {
        match started_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("a worker thread died while starting".into()),
        }
    }
    if let Some(mib) = std::env::var(ALLOCATE_VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // Resident on purpose: every page written, and kept for the worker's life.
        let ballast = vec![1u8; mib << 20];
        std::mem::forget(std::hint::black_box(ballast));
    }
    if let Some(pool) = fail_at_start() {
        if pool == spec.pool {
            return Err(format!(
                "failing at start on purpose ({FAIL_AT_START_VAR}={pool})"
            ));
        }
    }
    let ready = Message::Ready {
        pid: std::process::id(),
    };
    control
        .write_all(ready.line().as_bytes())
        .map_err(|e| format!("lost the master: {e}"))?;

    // Answer the master's pings with the requests served; on SIGTERM/SIGINT (or the master
    // going away), drain.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("signal handler");
        let mut int = signal(SignalKind::interrupt()).expect("signal handler");
        let control = control.try_clone().expect("clone control socket");
        control
            .set_nonblocking(true)
            .expect("nonblocking control socket");
        let control = tokio::net::UnixStream::from_std(control).expect("register control socket");
        let (read_half, mut write_half) = control.into_split();
        let mut lines = tokio::io::BufReader::new(read_half);
        let mut line = String::new();
        let (demand, mut asked) = match on_demand.take() {
            Some((demand, asked)) => (Some(demand), Some(asked)),
            None => (None, None),
        };
        loop {
            line.clear();
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                () = tiers.app_wanted.notified() => {
                    if write_half.write_all(Message::WantApp.line().as_bytes()).await.is_err() {
                        break;
                    }
                }
                Some(name) = next_asked(&mut asked) => {
                    let ask = Message::WantCertificate(name).line();
                    if write_half.write_all(ask.as_bytes()).await.is_err() {
                        break;
                    }
                }
                r = tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut line) => match r {
                    // The master closed the control socket (it is gone): stop too.
                    Ok(0) | Err(_) => break,
                    Ok(_) => match Message::parse(&line) {
                        Some(Message::Ping) => {
                            let mut answer = pong(spec, &health, tiers.queue.figures());
                            if let Some(meters) = site_meters(spec, &health) {
                                answer.push_str(&meters.line());
                            }
                            if let Some(line) = ejected_line(&upstreams) {
                                answer.push_str(&line);
                            }
                            for endpoint in tiers.take_unresponsive() {
                                answer.push_str(&Message::Unresponsive(endpoint.to_string()).line());
                            }
                            if write_half.write_all(answer.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                        Some(Message::Reopen) => {
                            crate::http::access_log::REOPEN.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(Message::Upstreams(json)) => match serde_json::from_str(&json) {
                            Ok(t) => tiers.publish(t),
                            Err(e) => log(&spec.name(), format!("unreadable upstreams from the master: {e}")),
                        },
                        Some(Message::UpstreamHealth(what)) => set_checked(&upstreams, &what),
                        Some(Message::Certificate(json)) => {
                            let cert = serde_json::from_str::<crate::certs::store::StoreCert>(&json)
                                .map_err(|e| format!("unreadable certificate from the master: {e}"))
                                .and_then(|c| store.insert(&c).map(|()| c.host));
                            match cert {
                                Ok(host) => {
                                    if let Some(demand) = &demand {
                                        demand.answered(&host);
                                    }
                                }
                                Err(e) => log(&spec.name(), format!("certificate store: {e}")),
                            }
                        }
                        Some(Message::NoCertificate(name)) => {
                            if let Some(demand) = &demand {
                                demand.answered(&name);
                            }
                        }
                        _ => {}
                    },
                },
            }
        }
    });
    let _ = stop_tx.send(true);
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

/// The next name a held handshake asks the master for (never, without on-demand ordering).
async fn next_asked(
    asked: &mut Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
) -> Option<String> {
    match asked {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// What a worker's threads share: the TLS of its listener groups (each https group's rustls
/// configuration, `None` for cleartext, and the connections the kernel's TLS can take), and
/// the accounts of its sites' limits.
struct Shared {
    configs: Vec<Option<(Arc<rustls::ServerConfig>, Option<crate::tls::Held>)>>,
    kernel: crate::os::ktls::KernelSupport,
    limits: Vec<Option<Arc<Accounts>>>,
    /// The head parser's bound on a body ([`body_ceiling`]).
    max_body: u64,
    /// Each upstream group a path of the worker's sites names: its servers' health, shared
    /// by the threads (see `proxy::group`).
    upstreams: Vec<Arc<GroupHealth>>,
}

/// The `ejected` message of the upstream servers this worker has ejected now, if any.
fn ejected_line(groups: &[Arc<GroupHealth>]) -> Option<String> {
    let pairs: Vec<String> = (groups.iter())
        .flat_map(|g| {
            g.ejected_now()
                .map(move |i| format!("{} {}", g.spec.name, g.spec.servers[i].address))
        })
        .collect();
    (!pairs.is_empty()).then(|| Message::Ejected(pairs.join(" ")).line())
}

/// An `upstream-health` message (`GROUP ADDRESS up|down`) applied to the worker's groups.
fn set_checked(groups: &[Arc<GroupHealth>], what: &str) {
    let mut words = what.split_whitespace();
    let (Some(group), Some(address), Some(state)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    for g in groups.iter().filter(|g| g.spec.name == group) {
        for (k, s) in g.spec.servers.iter().enumerate() {
            if s.address.to_string() == address {
                g.set_checked(k, state == "down");
            }
        }
    }
}

/// The upstream groups the paths of `spec`'s own sites name (a group no path of the
/// worker's uses costs it nothing).
fn used_upstreams(
    spec: &WorkerSpec,
) -> impl Iterator<Item = &crate::config::upstream::UpstreamSpec> {
    let used = |name: &str| {
        (spec.sites.iter())
            .flat_map(|s| &s.apps)
            .any(|a| a.answered_by(&spec.pool) && a.upstream.as_deref() == Some(name))
    };
    spec.upstreams.iter().filter(move |u| used(&u.name))
}

/// How a thread hears that the worker drains, and tells that it started.
struct ThreadChannels {
    stop_rx: watch::Receiver<bool>,
    started: std::sync::mpsc::Sender<Result<(), String>>,
}

/// One engine thread: its own runtime, its listeners, its connections.
fn engine_thread(
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
        let identity = format!("{}/{}/cpu{}", spec.pool, spec.index, thread.cpu);
        let extra = if spec.worker_header {
            format!("X-Espalier-Worker: {identity}\r\n")
        } else {
            String::new()
        };
        let ring = if spec.uring {
            match crate::os::uring::Ring::start(spec.limits.body_timeout) {
                Ok(ring) => Some(ring),
                Err(e) => {
                    let _ = started.send(Err(format!(
                        "cannot start io_uring ({e}); set [server] io = \"epoll\""
                    )));
                    return;
                }
            }
        } else {
            None
        };
        // The worker's connection limit, divided among its threads (no shared counter).
        let max_conns = spec
            .limits
            .max_connections
            .div_ceil(spec.threads.len().max(1));
        // The worker line goes into every answer with the clock's common lines, an app's
        // too (see `proxy::head`).
        let routes = ProxyRoutes {
            app: spec
                .proxy
                .clone()
                .map(|settings| Rc::new(ProxyRoute::new(settings, tiers))),
            // Each thread draws its own servers: seeded apart by CPU and process.
            upstreams: (shared.upstreams.iter())
                .map(|h| {
                    let seed = (u64::from(std::process::id()) << 32) | u64::from(thread.cpu);
                    let group = GroupSource::new(Arc::clone(h), thread.node, seed);
                    (h.spec.name.clone(), Rc::new(ProxyRoute::to_group(group)))
                })
                .collect(),
        };
        // No one app or group may hold more than its share of the thread's connections.
        for route in routes.app.iter().chain(routes.upstreams.values()) {
            route.share_of(max_conns);
        }
        let clock = Rc::new(Clock::new(extra));
        tokio::task::spawn_local(Rc::clone(&clock).run());
        let l = &spec.limits;
        let env = Rc::new(ConnEnv {
            service: ThreadService::new(
                &spec.pool,
                &spec.sites,
                spec.groups.iter().map(|g| GroupRoutes::clone(g)).collect(),
                Rc::clone(&clock),
                identity,
                routes,
                spec.handoff_peers
                    .targets(&spec.pool, thread.cpu, thread.node)
                    .into_iter()
                    .map(|(pool, tiers)| {
                        let wake = spec.handoff_peers.wake.clone();
                        let targets = PoolTargets::new(tiers, spec.handoff_key, pool.clone(), wake);
                        (pool, Rc::new(targets))
                    })
                    .collect(),
            )
            .with_body_default(l.max_body_size)
            .with_tls(&shared.configs, shared.kernel)
            .with_limits(&shared.limits)
            .with_meters(&health.meters)
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
            shutdown: Rc::new(Shutdown::default()),
            streams: std::cell::Cell::new(0),
            ring,
        });
        let open = Rc::new(Cell::new(0usize));
        let mut listeners = Vec::new();
        for &(fd, group) in &thread.listeners {
            let std_listener = os::net::adopt_listener(fd);
            let ring = env.ring.as_ref().filter(|_| spec.accept_on_ring);
            match Listener::new(std_listener, ring) {
                Ok(l) => listeners.push((l, group)),
                Err(e) => {
                    let _ = started.send(Err(format!("cannot use listener fd {fd}: {e}")));
                    return;
                }
            }
        }
        // Connections other pools hand to this thread on a shared address.
        let receiver = match thread.handoff_fd.map(|fd| {
            // The master handed us this fd for this thread's exclusive use.
            crate::handoff::Receiver::new(
                crate::os::process::adopt_fd(fd),
                spec.handoff_senders.clone(),
                spec.handoff_key,
            )
        }) {
            Some(Err(e)) => {
                let _ = started.send(Err(format!("cannot use hand-off socket: {e}")));
                return;
            }
            Some(Ok(r)) => Some(r),
            None => None,
        };
        let admission = Rc::new(Admission {
            env: Rc::clone(&env),
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
        if !quic.is_empty() {
            let thread = Rc::new(crate::server::quic::Thread {
                env: Rc::clone(&env),
                open: Rc::clone(&open),
                max_conns,
                panics: Arc::clone(&health.panics),
                who: Rc::clone(&admission.who),
            });
            let links = crate::server::quic::links();
            for (socket, group, index) in quic {
                let Some((tls, held)) = &shared.configs[group] else {
                    continue;
                };
                let tag = spec.quic_tag;
                // check refuses it where a site asks for client certificates.
                let early = spec.quic_early_data;
                let settings = (l.keepalive_timeout, early);
                let certs = (&links, held.as_ref());
                match crate::server::quic::endpoint((socket, index), tag, tls, settings, certs) {
                    Ok(endpoint) => {
                        accepting.push(tokio::task::spawn_local(crate::server::quic::accept_loop(
                            endpoint,
                            (group, early),
                            Rc::clone(&thread),
                        )))
                    }
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                }
            }
        }
        {
            let env = Rc::clone(&env);
            let health = Arc::clone(&health);
            let admission = Rc::clone(&admission);
            health.beat(0, 0, admission.figures());
            tokio::task::spawn_local(async move {
                let mut tick = tokio::time::interval(HEARTBEAT);
                let mut trim = TrimAfterBurst::default();
                loop {
                    tick.tick().await;
                    health.beat(
                        env.service.served(),
                        env.service.remote_forwards(),
                        admission.figures(),
                    );
                    // Access log lines are written at least this often.
                    env.service.flush_logs();
                    if trim.due(admission.open.get() + env.streams.get()) {
                        os::process::release_free_memory();
                    }
                }
            });
        }
        let _ = started.send(Ok(()));
        let _ = stop_rx.wait_for(|stop| *stop).await;
        env.shutdown.begin();
        // Every connection's next answer says `Connection: close` (HTTP/2: GOAWAY); one
        // waiting for a request gets `http::shutdown::DRAIN_IDLE` to send it; in-flight
        // requests finish within the shutdown bound.
        let deadline = tokio::time::Instant::now() + spec.shutdown_timeout;
        // A ring's accept takes connections until its cancel completes, and one still armed
        // when the process exits goes on taking them while the kernel tears the ring down —
        // connections nobody serves, which the successor or the master would have. So the
        // thread ends only after every accept loop did (tokio's at once; the ring's once the
        // kernel confirmed the cancel, what it took by then admitted and counted in `open`).
        for accept in accepting {
            let _ = tokio::time::timeout_at(deadline, accept).await;
        }
        while open.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        env.service.flush_logs();
    });
}

/// When a thread gives freed memory back: once its work (connections open, and HTTP/2
/// stream tasks, which may outlive their connection) fell to half of a burst's peak (a burst
/// being at least [`TrimAfterBurst::BURST`]), or to none after some. Off the request path (the
/// heartbeat asks), and rare: a steady load never trims.
#[derive(Default)]
struct TrimAfterBurst {
    peak: usize,
}

impl TrimAfterBurst {
    const BURST: usize = 32;

    fn due(&mut self, open: usize) -> bool {
        self.peak = self.peak.max(open);
        if (self.peak >= Self::BURST && open <= self.peak / 2) || (open == 0 && self.peak > 0) {
            self.peak = open;
            return true;
        }
        false
    }
}

/// What a thread needs to take a connection in, accepted or handed over.
struct Admission {
    env: Rc<ConnEnv<ThreadService>>,
    open: Rc<Cell<usize>>,
    max_conns: usize,
    panics: Arc<AtomicU64>,
    who: Rc<str>,
    /// The thread's CPU, and the connections it accepted, and of those received on it.
    cpu: u32,
    accepted: Cell<u64>,
    steered: Cell<u64>,
}

impl Admission {
    /// Its connections open, accepted, and accepted on the thread's own CPU.
    fn figures(&self) -> (u64, u64, u64) {
        (
            self.open.get() as u64,
            self.accepted.get(),
            self.steered.get(),
        )
    }

    /// Serves `stream` on listener group `group` in a contained task, with what a handed-over
    /// connection brings; over the thread's connection limit, or with no group (an address
    /// this worker no longer has), a 503 and close.
    fn admit(&self, stream: Accepted, group: Option<usize>, carried: crate::handoff::Carried) {
        let _ = stream.socket().set_nodelay(true);
        let Some(group) = group.filter(|_| self.open.get() < self.max_conns) else {
            let mut answer = Vec::with_capacity(256);
            Responder::new(&mut answer, &self.env.clock.common(), false, 1, false).unavailable();
            tokio::task::spawn_local(reject_busy(stream, answer));
            return;
        };
        tokio::task::spawn_local(conn_task::serve(
            stream,
            group,
            carried,
            Rc::clone(&self.env),
            Slot::take(&self.open),
            Arc::clone(&self.panics),
            Rc::clone(&self.who),
        ));
    }
}

/// A thread's listening socket: accepted by tokio, or by a multishot accept on the thread's
/// ring (then the connections skip tokio's epoll, see [`Accepted`]).
enum Listener {
    Epoll(tokio::net::TcpListener),
    Ring(crate::os::uring::RingListener),
}

impl Listener {
    fn new(
        listener: std::net::TcpListener,
        ring: Option<&Rc<crate::os::uring::Ring>>,
    ) -> std::io::Result<Self> {
        Ok(match ring {
            Some(ring) => Listener::Ring(crate::os::uring::RingListener::new(ring, listener)),
            None => Listener::Epoll(tokio::net::TcpListener::from_std(listener)?),
        })
    }

    /// The next connection and its peer; `None` once stopped and drained.
    async fn accept(
        &mut self,
    ) -> Option<std::io::Result<(Accepted, Option<std::net::SocketAddr>)>> {
        match self {
            Listener::Epoll(l) => Some(
                l.accept()
                    .await
                    .map(|(stream, peer)| (Accepted::Registered(stream), Some(peer))),
            ),
            // The ring's accept does not say who connected: one getpeername.
            Listener::Ring(l) => l.accept().await.map(|r| {
                r.map(|stream| {
                    let peer = stream.peer_addr().ok();
                    (Accepted::Unregistered(stream), peer)
                })
            }),
        }
    }
}

/// Accepts on one listener until the worker drains: tokio's accept stops at once (the kernel
/// keeps what is queued for the successor), the ring's once its cancel took effect, serving
/// what it had already taken.
async fn accept_loop(mut listener: Listener, group: usize, admission: Rc<Admission>) {
    let env = &admission.env;
    let mut stopping = false;
    loop {
        if !stopping && env.shutdown.started.get() {
            match &mut listener {
                Listener::Epoll(_) => return,
                Listener::Ring(l) => l.stop(),
            }
            stopping = true;
        }
        let accepted = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified(), if !stopping => continue,
            r = listener.accept() => r,
        };
        match accepted {
            None => return,
            Some(Ok((stream, peer))) => {
                // Where the kernel received it: one getsockopt per connection, for the
                // admin page's steering figure.
                let received_on = stream.socket().cpu_affinity().ok();
                admission.accepted.set(admission.accepted.get() + 1);
                if received_on == Some(admission.cpu as usize) {
                    admission.steered.set(admission.steered.get() + 1);
                }
                let carried = crate::handoff::Carried {
                    client: peer,
                    ..Default::default()
                };
                admission.admit(stream, Some(group), carried)
            }
            // Out of descriptors or memory: back off briefly rather than spin.
            Some(Err(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Serves the connections other pools' threads hand to this one, as if accepted here; stops
/// taking them when the worker drains (its successor in the slot takes the rest).
async fn receive_loop(mut receiver: crate::handoff::Receiver, admission: Rc<Admission>) {
    use crate::http::service::Service;
    let env = &admission.env;
    loop {
        if env.shutdown.started.get() {
            return;
        }
        let received = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified() => return,
            r = receiver.next() => r,
        };
        match received {
            Ok(got) => {
                let group = env.service.group_of(got.addr);
                admission.admit(Accepted::Unregistered(got.stream), group, got.carried);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Over the connection limit: the 503 and close.
async fn reject_busy(stream: Accepted, answer: Vec<u8>) {
    let Ok(mut stream) = stream.into_tokio() else {
        return;
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
    let _ = stream.shutdown().await;
}

/// The largest body any request here may carry — the server's `max_body_size` or a larger
/// site's or path's, other pools' included (their requests' heads are read here before the
/// hand-off) — which bounds the head parser; each request is then held to its own.
fn body_ceiling(server: u64, sites: &[crate::config::SiteSpec]) -> u64 {
    sites
        .iter()
        .flat_map(|s| {
            s.apps
                .iter()
                .filter_map(|a| a.max_body_size)
                .chain(s.max_body_size)
        })
        .fold(server, u64::max)
}

#[cfg(test)]
mod tests;
