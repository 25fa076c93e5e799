//! A worker process: applies its placement, then runs one thread per CPU it owns, each with
//! its own single-threaded event loop, its own listener sockets, caches and counters.
//!
//! Owns: the worker's start — placed, what its threads share made, the pool's user assumed,
//! its threads started — and its graceful stop. Beside it: `engine`, one engine thread (its
//! runtime, connections' environment, heartbeat and drain); `admission`, a thread's
//! connections taken in; `shared`, what the threads share; `from_master`, the control
//! channel once ready (what it answers the master's pings is `worker_health`'s). Must not
//! touch: other workers or the listeners' life (the master owns the sockets; a worker only
//! uses its inherited copies).
//!
//! Affinity: the main thread and, for soft affinity, every engine thread may run on all of
//! the worker's CPUs (its home node); with hard affinity each engine thread is pinned to its
//! one CPU. Memory policy is set on the main thread before any other thread starts, so every
//! thread inherits it.

use super::control::Message;
use super::log;
use super::spec::{WorkerSpec, ENV_VAR};
use super::worker_health::ThreadHealth;
use crate::cpuset::CpuSet;
use crate::os::{self, numa::MemPolicyMode};
use crate::proxy::SharedTiers;
use shared::Shared;
use std::io::Write;

use std::os::unix::net::UnixStream;
use std::sync::Arc;
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
    place(spec)?;
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
    let on_demand = spec
        .acme_on_demand
        .map(|most| crate::tls::on_demand::OnDemand::new(4 * most as usize));
    let shared = Arc::new(Shared::of(
        spec,
        &store,
        ktls,
        on_demand.as_ref().map(|(d, _)| d),
    )?);
    // Each thread's UDP sockets for HTTP/3, as the master handed them.
    let quic = crate::server::quic::sockets(spec, |g| shared.configs[g].is_some());
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
    let (hosts_tx, hosts_rx) = watch::channel(None);
    let (taken_tx, taken_rx) = tokio::sync::mpsc::unbounded_channel();
    let hosts = (hosts_rx, taken_tx);
    let (stop_tx, threads, accepts_no_more) =
        start_threads(spec, (&shared, &health, &tiers), quic, hosts)?;
    on_purpose(spec)?;
    let ready = Message::Ready {
        pid: std::process::id(),
    };
    control
        .write_all(ready.line().as_bytes())
        .map_err(|e| format!("lost the master: {e}"))?;

    // Answer the master's pings with the requests served; on SIGTERM/SIGINT (or the master
    // going away), drain.
    let to_master = from_master::Shared {
        health: &health,
        tiers: &tiers,
        upstreams: &upstreams,
        store: &store,
        tickets: &shared.tickets,
    };
    let hosts = from_master::HostsTold::new(hosts_tx, taken_rx, spec);
    let served = from_master::serve_master(spec, control, to_master, (on_demand, hosts));
    let _ = stop_tx.send(true);
    say_accepting_ended(
        control,
        &accepts_no_more,
        threads.len(),
        spec.shutdown_timeout,
    );
    for t in threads {
        let _ = t.join();
    }
    served
}

/// What the tests ask of a worker through its environment: memory held
/// ([`ALLOCATE_VAR`]), or a failure at start ([`FAIL_AT_START_VAR`]).
fn on_purpose(spec: &WorkerSpec) -> Result<(), String> {
    if let Some(mib) = std::env::var(ALLOCATE_VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // Resident on purpose: every page written, and kept for the worker's life.
        let ballast = vec![1u8; mib << 20];
        std::mem::forget(std::hint::black_box(ballast));
    }
    match fail_at_start() {
        Some(pool) if pool == spec.pool => Err(format!(
            "failing at start on purpose ({FAIL_AT_START_VAR}={pool})"
        )),
        _ => Ok(()),
    }
}

/// Tells the master once every one of `threads` accepts no more (within `within`): a
/// configuration change then knows every new connection meets the new workers.
fn say_accepting_ended(
    mut control: &std::os::unix::net::UnixStream,
    ended: &std::sync::mpsc::Receiver<()>,
    threads: usize,
    within: std::time::Duration,
) {
    let deadline = std::time::Instant::now() + within;
    let all = (0..threads).all(|_| {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        ended.recv_timeout(left).is_ok()
    });
    if all {
        let _ = control.write_all(Message::Stopping.line().as_bytes());
    }
}

/// [`start_threads`]'s threads: how they are told to drain, their handles, and where each
/// says it accepts no more.
type Started = (
    watch::Sender<bool>,
    Vec<std::thread::JoinHandle<()>>,
    std::sync::mpsc::Receiver<()>,
);

/// Starts one engine thread per CPU of `spec` and waits until each has started (`Err` with
/// the first one's reason); the sender that tells them to drain, their handles, and where
/// each says it accepts no more.
fn start_threads(
    spec: &WorkerSpec,
    (shared, health, tiers): (&Arc<Shared>, &[Arc<ThreadHealth>], &Arc<SharedTiers>),
    quic: Vec<crate::server::quic::ThreadSockets>,
    (hosts, hosts_taken): engine::HostsChannels,
) -> Result<Started, String> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel::<()>();
    let (started_tx, started_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::new();
    let mut quic = quic.into_iter();
    for (t, thread) in spec.threads.iter().enumerate() {
        let spec = spec.clone();
        let tiers = Arc::clone(tiers);
        let stop_rx = stop_rx.clone();
        let started_tx = started_tx.clone();
        let stopped_tx = stopped_tx.clone();
        let cpu = thread.cpu;
        let health = Arc::clone(&health[t]);
        let shared = Arc::clone(shared);
        let quic = quic.next().unwrap_or_default();
        let (hosts, hosts_taken) = (hosts.clone(), hosts_taken.clone());
        let handle = std::thread::Builder::new()
            .name(format!("{}-cpu{cpu}", spec.pool))
            .spawn(move || {
                let channels = engine::ThreadChannels {
                    stop_rx,
                    started: started_tx,
                    accepts_no_more: stopped_tx,
                    hosts,
                    hosts_taken,
                };
                engine::engine_thread(&spec, t, channels, health, tiers, &shared, quic)
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
    Ok((stop_tx, threads, stopped_rx))
}

/// Places the worker as its spec says: in the pool's control groups, under its memory policy,
/// on its CPUs (the engine threads inherit both). Errors name what could not be had.
fn place(spec: &WorkerSpec) -> Result<(), String> {
    let _ = os::process::die_with_parent();
    // Join the pool's control groups before anything is pinned (see WorkerSpec::cgroups).
    for dir in &spec.cgroups {
        let group = os::cgroup::Group {
            dirs: vec![dir.clone()],
            ..Default::default()
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
    Ok(())
}

mod admission;
mod engine;
mod from_master;
mod shared;

#[cfg(test)]
mod tests;
