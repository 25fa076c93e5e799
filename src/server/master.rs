//! The master (`espalier serve`): the WAS + HTTP.sys of espalier. It opens every listener
//! itself, starts one worker process per planned slot with its sockets and placement, logs each
//! start, keeps running when a worker dies, and stops everything gracefully on SIGTERM/SIGINT.
//!
//! Owns: the listener sockets (they outlive any worker, like HTTP.sys request queues: a worker
//! that dies leaves its sockets open in the master, so new connections queue instead of being
//! refused) and the worker processes. Must not touch: requests — the master never serves one.

use super::log;
use super::spec::{ThreadSpec, WorkerSpec, ENV_VAR};
use super::steering;
use crate::config::{Affinity, Config, SiteSpec, Steering};
use crate::handlers::GroupRoutes;
use crate::os;
use crate::placement::Plan;
use crate::topology::Topology;
use socket2::Socket;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// One reuseport group: every thread of a pool listening on one address.
pub(super) struct ListenerGroup {
    pub(super) pool: String,
    pub(super) addr: SocketAddr,
    pub(super) routes: GroupRoutes,
    /// Sockets in group order; `owners[i]` = (worker index in the plan, thread index).
    pub(super) sockets: Vec<Socket>,
    pub(super) owners: Vec<(usize, usize)>,
}

/// Runs the server until it is stopped. Returns the exit code.
pub fn run(config: &Config, topology: &Topology, plan: &Plan) -> Result<i32, String> {
    let file = config
        .source
        .as_ref()
        .map_or("the command line".to_string(), |p| p.display().to_string());
    let groups = open_listeners(config, topology, plan, &file)?;
    let specs = worker_specs(config, plan, &groups);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(super::supervisor::run(config, topology, groups, specs))
}

/// The listener groups a config wants: one per pool and address, with the sites it routes to
/// by host (site indices among the pool's own sites).
pub(super) fn wanted_groups(config: &Config) -> Vec<ListenerGroup> {
    let mut groups: Vec<ListenerGroup> = Vec::new();
    for pool in &config.pools {
        let pool_sites: Vec<(usize, &SiteSpec)> = config
            .sites
            .iter()
            .filter(|s| s.pool() == pool.name)
            .enumerate()
            .collect();
        for (site_idx, site) in &pool_sites {
            for b in &site.bindings {
                match groups
                    .iter_mut()
                    .find(|g| g.pool == pool.name && g.addr == b.addr)
                {
                    Some(g) => g.routes.push((b.host.clone(), *site_idx)),
                    None => groups.push(ListenerGroup {
                        pool: pool.name.clone(),
                        addr: b.addr,
                        routes: vec![(b.host.clone(), *site_idx)],
                        sockets: Vec::new(),
                        owners: Vec::new(),
                    }),
                }
            }
        }
    }
    groups
}

/// The threads that own a group's sockets, in socket order: (worker index in the plan,
/// thread index, CPU).
pub(super) type SocketOwners = Vec<(usize, usize, u32)>;

/// The threads that own a pool's sockets on one address, in (node, CPU) order.
pub(super) fn group_owners(pool: &str, topology: &Topology, plan: &Plan) -> SocketOwners {
    let mut owners: SocketOwners = Vec::new();
    for (w, worker) in plan
        .workers
        .iter()
        .enumerate()
        .filter(|(_, w)| w.pool == pool)
    {
        for (t, cpu) in worker.cpus.iter().enumerate() {
            owners.push((w, t, cpu));
        }
    }
    owners.sort_by_key(|&(w, t, cpu)| {
        (
            steering::socket_order_key(cpu, |c| topology.node_of_cpu(c)),
            w,
            t,
        )
    });
    owners
}

/// Opens the sockets a group lacks to have `wanted` of them. The group itself is not changed,
/// so a failure (port taken, no descriptors) leaves it as it was: the caller adds them.
pub(super) fn open_missing(
    g: &ListenerGroup,
    wanted: usize,
    config: &Config,
    file: &str,
) -> Result<Vec<Socket>, String> {
    (g.sockets.len()..wanted)
        .map(|_| {
            os::net::reuseport_listener(g.addr, config.server.backlog)
                .map_err(|e| bind_error(site_of(config, g.addr), g.addr, &e, file))
        })
        .collect()
}

/// Records which thread owns each socket and attaches the steering program. Nothing here can
/// fail in a way that changes what is served: returns whether the program could be attached.
pub(super) fn arm_group(
    g: &mut ListenerGroup,
    owners: &[(usize, usize, u32)],
    config: &Config,
    topology: &Topology,
) -> bool {
    g.owners = owners.iter().map(|&(w, t, _)| (w, t)).collect();
    if config.server.steering == Steering::Hash {
        return true;
    }
    // Sockets beyond the threads (a reload that shrank the pool) are never chosen.
    let thread_cpus: Vec<u32> = owners.iter().map(|&(_, _, cpu)| cpu).collect();
    let table = steering::steering_table(&thread_cpus, &topology.online_cpus(), |c| {
        topology.node_of_cpu(c)
    });
    let prog = steering::steering_program(&table, thread_cpus.len() as u32);
    g.sockets
        .first()
        .is_none_or(|first| os::net::attach_reuseport_cbpf(first, &prog).is_ok())
}

/// Gives a new group one socket per thread of its pool's planned workers and arms it.
/// Returns whether the steering program could be attached.
pub(super) fn fill_group(
    g: &mut ListenerGroup,
    config: &Config,
    topology: &Topology,
    plan: &Plan,
    file: &str,
) -> Result<bool, String> {
    let owners = group_owners(&g.pool, topology, plan);
    let sockets = open_missing(g, owners.len(), config, file)?;
    g.sockets.extend(sockets);
    Ok(arm_group(g, &owners, config, topology))
}

/// The name of the (first) site bound to `addr`, for messages about that address.
pub(super) fn site_of(config: &Config, addr: SocketAddr) -> &str {
    config
        .sites
        .iter()
        .find(|s| s.bindings.iter().any(|b| b.addr == addr))
        .map_or("?", |s| s.name.as_str())
}

/// Opens every listener group, in (node, CPU) order, and attaches the steering programs.
fn open_listeners(
    config: &Config,
    topology: &Topology,
    plan: &Plan,
    file: &str,
) -> Result<Vec<ListenerGroup>, String> {
    let mut groups = wanted_groups(config);
    let mut steering_failed = false;
    for g in &mut groups {
        // Refuse a port someone else holds: a plain bind fails where SO_REUSEPORT would
        // silently join another server's group.
        if let Err(e) = std::net::TcpListener::bind(g.addr) {
            return Err(bind_error(site_of(config, g.addr), g.addr, &e, file));
        }
        if !fill_group(g, config, topology, plan, file)? && !steering_failed {
            log("master", "cannot attach the CPU-steering program; connections are spread by the kernel's reuseport hash instead");
            steering_failed = true;
        }
    }
    Ok(groups)
}

pub(super) fn bind_error(site: &str, addr: SocketAddr, e: &std::io::Error, file: &str) -> String {
    let fix = match e.raw_os_error() {
        Some(libc::EADDRINUSE) => "another program holds it: stop it or change the port in `bindings`".to_string(),
        Some(libc::EACCES) => "ports below 1024 need root or CAP_NET_BIND_SERVICE: run as root or use a port ≥ 1024 in `bindings`".to_string(),
        Some(libc::EADDRNOTAVAIL) => "no interface has that address: use 127.0.0.1, 0.0.0.0 or one of this machine's addresses".to_string(),
        _ => "check `bindings`".to_string(),
    };
    format!("{file}: site `{site}`: cannot listen on http://{addr}: {e}; {fix}")
}

pub(super) fn worker_specs(
    config: &Config,
    plan: &Plan,
    groups: &[ListenerGroup],
) -> Vec<WorkerSpec> {
    plan.workers
        .iter()
        .enumerate()
        .map(|(w, worker)| {
            let pool = config
                .pool(&worker.pool)
                .expect("plan names configured pools");
            let sites: Vec<SiteSpec> = config
                .sites
                .iter()
                .filter(|s| s.pool() == pool.name)
                .cloned()
                .collect();
            let my_groups: Vec<usize> = (0..groups.len())
                .filter(|&g| groups[g].pool == pool.name)
                .collect();
            let threads = worker
                .cpus
                .iter()
                .enumerate()
                .map(|(t, cpu)| ThreadSpec {
                    cpu,
                    listeners: my_groups
                        .iter()
                        .enumerate()
                        .map(|(local_g, &g)| {
                            let i = groups[g]
                                .owners
                                .iter()
                                .position(|&o| o == (w, t))
                                .expect("every thread has a socket");
                            (groups[g].sockets[i].as_raw_fd(), local_g)
                        })
                        .collect(),
                })
                .collect();
            WorkerSpec {
                pool: pool.name.clone(),
                index: worker.index,
                node: worker.node,
                hard: worker.affinity == Affinity::Hard,
                cpus: worker.cpus.as_slice().to_vec(),
                memory_policy: worker.memory_policy,
                memory_nodes: worker.memory_nodes.clone(),
                control_fd: -1,
                threads,
                groups: my_groups
                    .iter()
                    .map(|&g| groups[g].routes.clone())
                    .collect(),
                sites,
                limits: config.server.limits.clone(),
                worker_header: config.server.worker_header,
                // A draining worker's own bound (IIS shutdownTimeLimit); stopping the whole
                // server is bounded by [server] shutdown_timeout in the master.
                shutdown_timeout: pool.shutdown_time_limit,
                cgroups: Vec::new(),
            }
        })
        .collect()
}

/// Starts a worker process with its sockets and spec; returns its pid and control socket.
/// `fail_at_start` asks the worker to fail right after starting, and `allocate_mib` to allocate
/// that much at start (fault injection for tests).
pub(super) fn spawn_worker(
    mut spec: WorkerSpec,
    fail_at_start: bool,
    allocate_mib: Option<u64>,
) -> Result<(u32, tokio::net::UnixStream), String> {
    let (master_end, worker_end) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    spec.control_fd = worker_end.as_raw_fd();
    let mut fds: Vec<RawFd> = spec
        .threads
        .iter()
        .flat_map(|t| t.listeners.iter().map(|&(fd, _)| fd))
        .collect();
    fds.push(worker_end.as_raw_fd());
    let json = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the espalier binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("worker").env(ENV_VAR, json);
    if fail_at_start {
        cmd.env(super::worker::FAIL_AT_START_VAR, &spec.pool);
    } else {
        cmd.env_remove(super::worker::FAIL_AT_START_VAR);
    }
    match allocate_mib {
        Some(mib) => cmd.env(super::worker::ALLOCATE_VAR, mib.to_string()),
        None => cmd.env_remove(super::worker::ALLOCATE_VAR),
    };
    // The worker's placement, applied before exec as well as by the worker itself, so that the
    // pages touched while the new program starts come from its node too.
    let policy = os::numa::PreparedMemPolicy::new(spec.memory_mode(), &spec.memory_nodes);
    let affinity = os::numa::PreparedAffinity::new(&crate::cpuset::CpuSet::from_ids(
        spec.cpus.iter().copied(),
    ))
    .ok();
    // SAFETY: between fork and exec only async-signal-safe system calls run (fcntl, prctl,
    // set_mempolicy, sched_setaffinity), on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &fds {
                os::process::clear_cloexec(fd)?;
            }
            // Failures here are reported by the worker, which applies both again.
            let _ = policy.apply();
            if let Some(a) = &affinity {
                let _ = a.apply();
            }
            os::process::die_with_parent()
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start worker {}: {e}", spec.name()))?;
    drop(worker_end);
    master_end
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let control = tokio::net::UnixStream::from_std(master_end).map_err(|e| e.to_string())?;
    Ok((child.id(), control))
}
