//! Starting worker processes: the spec each worker is handed (its placement, its inherited
//! sockets, its sites), and the fork/exec that applies the placement before the new program
//! runs.
//!
//! Owns: turning a plan and the listener groups into [`WorkerSpec`]s, and spawning one.
//! Must not touch: when a worker starts or stops (the supervisor decides) or the sockets'
//! life (the listener groups own them).

use super::handoffs::Handoffs;
use super::listeners::ListenerGroup;
use super::spec::{ThreadSpec, WorkerSpec, ENV_VAR};
use crate::config::{Affinity, Config, IdleAction, PoolSpec, SiteSpec};
use crate::os;
use crate::placement::Plan;
use crate::routing::GroupRoutes;
use crate::topology::Topology;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Command;
use std::sync::Arc;

/// What every worker is told of `[server.acme]` (or a fleet's orders): where the challenges'
/// files are, and the on-demand bound.
fn acme_specs(config: &Config) -> (Option<std::path::PathBuf>, Option<u32>) {
    let acme = config.server.acme.as_ref();
    // A fleet's member answers the proofs of its fleet's orders, its own or another's.
    let fleet = config.server.cluster.is_some() && config.server.certificates.is_some();
    // The runtime folder is made before any worker is (its hand-off sockets are in it); were
    // it not, no worker could start, and none answers a challenge.
    let challenges = (acme.is_some() || fleet)
        .then(crate::server::acme::challenge_dir)
        .and_then(Result::ok);
    (
        challenges,
        acme.and_then(|a| a.on_demand.as_ref()).map(|d| d.in_flight),
    )
}

pub(super) fn worker_specs(
    config: &Config,
    plan: &Plan,
    groups: &[ListenerGroup],
    handoffs: &Handoffs,
    topology: &Topology,
    wanted: impl Fn(&str) -> bool,
) -> Vec<WorkerSpec> {
    // Built once and shared by every spec, or indexed once: with thousands of pools on one
    // port, anything per worker that scanned every pool or socket made the start quadratic.
    let sites = Arc::new(config.sites.clone());
    let upstreams = Arc::new(config.upstreams.clone());
    let routes: Vec<Arc<GroupRoutes>> = groups.iter().map(|g| Arc::new(g.routes.clone())).collect();
    let (peers, to_dispatcher) =
        hand_off_tables(config, plan, (groups, handoffs), topology, &wanted);
    let no_peers = Arc::new(crate::handoff::Peers::default());
    let handoff_fds = handoffs.fds();
    // The wanted pools alone: a reload of one pool of 10,000 looks each up once, and
    // indexes it alone.
    let pools: rustc_hash::FxHashMap<&str, &PoolSpec> = (config.pools.iter())
        .filter(|p| wanted(&p.name))
        .map(|p| (p.name.as_str(), &**p))
        .collect();
    let (groups_of, socket_of) = socket_index(groups, |pool| pools.contains_key(pool));
    let senders = super::handoffs::senders(&config.pools);
    // Once, not per worker (the probe is cached; the environment and the text are not).
    let uring = super::io_path(&config.server).is_ok_and(|p| p.uring);
    let (acme_challenges, acme_on_demand) = acme_specs(config);
    plan.workers
        .iter()
        .enumerate()
        .filter_map(|(w, worker)| {
            // The plan names configured pools (it was made from them); a reload asks only for
            // the pools it changes.
            let pool = *pools.get(worker.pool.as_str())?;
            let my_groups: &[usize] = groups_of.get(pool.name.as_str()).map_or(&[], Vec::as_slice);
            let sockets = Sockets {
                groups,
                socket_of: &socket_of,
                handoff_fds: &handoff_fds,
            };
            let threads = thread_specs(worker, (w, pool), my_groups, &sockets, topology);
            // Only a worker on a shared address hands connections on, and ranks targets (an
            // on-demand one is given its hand-off sockets as it wakes).
            let shares = my_groups.iter().any(|&g| groups[g].shared());
            // Behind the dispatcher, its one target is the dispatcher (its sites are cut to its
            // own as its process starts: `own_view`).
            let my_peers = if shares && pool.name != super::dispatcher::POOL {
                &to_dispatcher
            } else if shares {
                &peers
            } else {
                &no_peers
            };
            Some(WorkerSpec {
                pool: pool.name.clone(),
                index: worker.index,
                node: worker.node,
                hard: worker.affinity == Affinity::Hard,
                cpus: worker.cpus.as_slice().to_vec(),
                memory_policy: worker.memory_policy,
                memory_nodes: worker.memory_nodes.clone(),
                control_fd: -1,
                threads,
                groups: my_groups.iter().map(|&g| Arc::clone(&routes[g])).collect(),
                sites: Arc::clone(&sites),
                upstreams: Arc::clone(&upstreams),
                acme_challenges: acme_challenges.clone(),
                acme_on_demand,
                handoff_peers: Arc::clone(my_peers),
                limits: config.server.limits.clone(),
                worker_header: config.server.worker_header,
                tracing: config.server.tracing.clone(),
                ktls: config.server.ktls,
                http3: config.server.http3,
                quic_tag: super::listeners::quic_tag(),
                quic_early_data: config.server.http3_early_data,
                uring,
                // A frozen process's ring still runs the kernel's side of its operations
                // (seen with cgroup v2's freezer): a multishot accept would take the
                // connection that should wake it, out of the master's sight, and hold it.
                accept_on_ring: uring && pool.idle_action != IdleAction::Suspend,
                // A draining worker's own bound (IIS shutdownTimeLimit); stopping the whole
                // server is bounded by [server] shutdown_timeout in the master.
                shutdown_timeout: pool.shutdown_time_limit,
                cgroups: Vec::new(),
                handoff_senders: senders.clone(),
                handoff_key: handoffs.key,
                identity: pool.identity.clone(),
                // Filled in as the process starts, from the files as they are then.
                store_certs: Vec::new(),
                ticket_keys: String::new(),
                session_table_fd: None,
                proxy: proxy_settings(pool),
            })
        })
        .collect()
}

/// The hand-off tables the specs are given: the whole one (the dispatcher's), and the
/// dispatcher's slots alone (a pool behind it knows its own sites alone — see `own_view` —
/// and reaches every other pool through it: its start and its reloads do not grow with the
/// address's other sites). Without the dispatcher among the `wanted`, the whole table is
/// its slots alone too: at a change of one pool of 10,000, the others' are not listed.
fn hand_off_tables(
    config: &Config,
    plan: &Plan,
    (groups, handoffs): (&[ListenerGroup], &Handoffs),
    topology: &Topology,
    wanted: &impl Fn(&str) -> bool,
) -> (Arc<crate::handoff::Peers>, Arc<crate::handoff::Peers>) {
    let dispatcher = super::dispatcher::POOL;
    let whole = plan.workers.iter().any(|w| w.pool == dispatcher) && wanted(dispatcher);
    let only = (!whole).then_some(dispatcher);
    let peers = handoffs.peers((groups, &config.pools), plan, topology, only);
    let to_dispatcher = Arc::new(peers.of_pool(dispatcher));
    (Arc::new(peers), to_dispatcher)
}

/// Per pool (of those `wanted`), the groups it serves; per group, each (worker, thread)'s
/// socket.
type SocketIndex<'a> = (
    HashMap<&'a str, Vec<usize>>,
    Vec<HashMap<(usize, usize), usize>>,
);

fn socket_index(groups: &[ListenerGroup], wanted: impl Fn(&str) -> bool) -> SocketIndex<'_> {
    let mut groups_of: HashMap<&str, Vec<usize>> = HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        for pool in group.pools.iter().filter(|p| wanted(p)) {
            groups_of.entry(pool.as_str()).or_default().push(g);
        }
    }
    let socket_of = groups
        .iter()
        .map(|g| g.owners.iter().enumerate().map(|(i, &o)| (o, i)).collect())
        .collect();
    (groups_of, socket_of)
}

/// Where the plan's workers find their sockets: the listener groups, each group's socket
/// by (worker, thread), and each thread's hand-off socket.
struct Sockets<'a> {
    groups: &'a [ListenerGroup],
    socket_of: &'a [HashMap<(usize, usize), usize>],
    handoff_fds: &'a HashMap<(&'a str, u32, u32), RawFd>,
}

/// The threads of the plan's `w`th worker (of `pool`): one per CPU that listens, each with
/// its sockets of `my_groups` (the pool's groups), its hand-off socket, its node and its
/// QUIC sockets.
fn thread_specs(
    worker: &crate::placement::WorkerPlan,
    (w, pool): (usize, &PoolSpec),
    my_groups: &[usize],
    at: &Sockets<'_>,
    topology: &Topology,
) -> Vec<ThreadSpec> {
    super::listeners::listening_cpus(worker, pool.activated())
        .into_iter()
        .enumerate()
        .map(|(t, cpu)| ThreadSpec {
            cpu,
            listeners: my_groups
                .iter()
                .enumerate()
                .filter_map(|(local_g, &g)| {
                    let i = *at.socket_of[g].get(&(w, t))?;
                    Some((at.groups[g].sockets[i].as_raw_fd(), local_g))
                })
                .collect(),
            handoff_fd: at
                .handoff_fds
                .get(&(pool.name.as_str(), worker.index, cpu))
                .copied(),
            node: topology.node_of_cpu(cpu),
            quic: quic_sockets(at.groups, at.socket_of, my_groups, (w, t)),
        })
        .collect()
}

/// How a front worker of `pool` speaks to its app: `None` without one, or where the app
/// accepts the connections itself (activation).
fn proxy_settings(pool: &PoolSpec) -> Option<crate::proxy::ProxySettings> {
    pool.app
        .as_ref()
        .filter(|a| a.transport != crate::config::Transport::Activation)
        .map(|a| crate::proxy::ProxySettings {
            connect_timeout: a.connect_timeout,
            response_timeout: a.response_timeout,
            fastcgi: a.transport == crate::config::Transport::FastCgi,
            script_extensions: a.script_extensions.clone(),
            http2: a.protocol == crate::config::upstream::Protocol::Http2,
            backpressure: a.backpressure,
            pass_underscored_fields: a.pass_underscored_fields,
            buffer: a.buffer,
            cache: a.cache_responses.clone(),
            wait_for_ready: match pool.start {
                crate::config::StartMode::OnDemand => pool.startup_time_limit,
                crate::config::StartMode::Always => {
                    crate::proxy::WAIT_FOR_READY.min(a.connect_timeout)
                }
            },
        })
}

/// In a pool's routes, the site of a host another pool serves (behind the dispatcher, its
/// requests go back there): no site of the worker's has this index.
pub const ANOTHER_POOLS: usize = usize::MAX;

/// What a worker of `pool` behind the dispatcher is given, made as its process starts (an
/// idle pool's spec stays the one shared by all): its own sites alone, and each address's
/// routes with its own hosts alone, renumbered; a shared address's stay marked
/// `dispatched`, so that any other host goes back to the dispatcher. Linear in the
/// address's sites, once per process start.
fn own_view(
    pool: &str,
    sites: &[std::sync::Arc<crate::config::SiteSpec>],
    groups: &[Arc<GroupRoutes>],
) -> (Vec<Arc<crate::config::SiteSpec>>, Vec<Arc<GroupRoutes>>) {
    let own: Vec<usize> = (0..sites.len())
        .filter(|&i| sites[i].served_by(pool))
        .collect();
    let local: HashMap<usize, usize> = own.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let routes = groups
        .iter()
        .map(|r| {
            let mut hosts: Vec<(Option<String>, usize)> = r
                .hosts
                .iter()
                .filter_map(|(host, i)| Some((host.clone(), *local.get(i)?)))
                .collect();
            // The address's default site is this pool's: it answers only the names no site
            // has, so every other pool's name is listed, as another pool's.
            if r.dispatched && hosts.iter().any(|(h, _)| h.is_none()) {
                hosts.extend(
                    r.hosts
                        .iter()
                        .filter(|(_, i)| !local.contains_key(i))
                        .map(|(h, _)| (h.clone(), ANOTHER_POOLS)),
                );
            }
            Arc::new(GroupRoutes {
                addr: r.addr,
                hosts,
                proxy_protocol: r.proxy_protocol,
                proxy_protocol_from: r.proxy_protocol_from.clone(),
                tls: r.tls,
                dispatched: r.dispatched,
            })
        })
        .collect();
    let sites = own.iter().map(|&i| sites[i].clone()).collect();
    (sites, routes)
}

/// Spawns `cmd` with the slot's placement applied between fork and exec (as well as by the
/// program itself, for espalier's workers), so the pages touched while the new program starts
/// come from its node too; `fds` are inherited.
pub(super) fn spawn_placed(
    spec: &WorkerSpec,
    cmd: &mut Command,
    fds: Vec<RawFd>,
) -> std::io::Result<std::process::Child> {
    let policy = os::numa::PreparedMemPolicy::new(spec.memory_mode(), &spec.memory_nodes);
    let affinity = os::numa::PreparedAffinity::new(&crate::cpuset::CpuSet::from_ids(
        spec.cpus.iter().copied(),
    ))
    .ok();
    os::process::spawn_placed(cmd, fds, policy, affinity)
}

/// A thread's UDP sockets, on the groups of `my_groups` that answer HTTP/3 (those with UDP
/// sockets), to be chosen as the worker starts; `owner` is (worker in the plan, thread).
fn quic_sockets(
    groups: &[ListenerGroup],
    socket_of: &[HashMap<(usize, usize), usize>],
    my_groups: &[usize],
    owner: (usize, usize),
) -> Vec<super::spec::QuicSocket> {
    (my_groups.iter().enumerate())
        .filter(|&(_, &g)| !groups[g].udp.is_empty())
        .filter_map(|(local_g, &g)| {
            Some(super::spec::QuicSocket {
                fd: -1,
                index: 0,
                owner: *socket_of[g].get(&owner)?,
                group: local_g,
                addr: groups[g].addr,
            })
        })
        .collect()
}

/// Starts a worker process with its sockets and spec; returns its pid and control socket.
/// `fail_at_start` asks the worker to fail right after starting, and `allocate_mib` to allocate
/// that much at start (fault injection for tests).
/// The sites and host tables a process of `spec`'s pool is sent: its own sites whole, the
/// others' outline — behind the dispatcher, its own alone. Made for each process started (or
/// each dispatcher told new hosts), not kept in every spec.
pub(super) fn as_seen(spec: &WorkerSpec) -> (Arc<Vec<Arc<SiteSpec>>>, Vec<Arc<GroupRoutes>>) {
    if spec.pool != super::dispatcher::POOL && spec.groups.iter().any(|g| g.dispatched) {
        let (sites, groups) = own_view(&spec.pool, &spec.sites, &spec.groups);
        return (Arc::new(sites), groups);
    }
    let sites = (spec.sites.iter()).map(|s| s.as_seen_by(s, &spec.pool));
    (Arc::new(sites.collect()), spec.groups.clone())
}

/// A started worker: its pid, its control socket, and the hosts it was sent (its sites and
/// groups `as_seen`, its hand-off table), which a dispatcher holds until its first `hosts`
/// update changes them.
pub(super) type Spawned = (u32, tokio::net::UnixStream, super::hosts_update::Hosts);

pub(super) fn spawn_worker(
    mut spec: WorkerSpec,
    fail_at_start: bool,
    allocate_mib: Option<u64>,
) -> Result<Spawned, String> {
    let (master_end, worker_end) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    spec.control_fd = worker_end.as_raw_fd();
    let mut fds: Vec<RawFd> = spec
        .threads
        .iter()
        .flat_map(|t| {
            (t.listeners.iter().map(|&(fd, _)| fd))
                .chain(t.handoff_fd)
                .chain(t.quic.iter().map(|q| q.fd))
        })
        .collect();
    fds.push(worker_end.as_raw_fd());
    fds.extend(spec.session_table_fd);
    (spec.sites, spec.groups) = as_seen(&spec);
    let json = serde_json::to_vec(&spec).map_err(|e| e.to_string())?;
    let spec_file = crate::os::process::sealed_memfd("espalier-worker-spec", &json)
        .map_err(|e| format!("cannot hand worker {} its spec: {e}", spec.name()))?;
    fds.push(spec_file.as_raw_fd());
    let exe = crate::os::process::own_executable()
        .map_err(|e| format!("cannot find the espalier binary: {e}"))?;
    let mut cmd = Command::new(exe);
    std::os::unix::process::CommandExt::arg0(&mut cmd, crate::os::process::own_executable_name());
    // The master alone speaks to systemd (a worker's READY=1 would be taken for the service's).
    cmd.arg("worker")
        .env(ENV_VAR, spec_file.as_raw_fd().to_string())
        .env_remove(crate::os::notify::NOTIFY_SOCKET);
    if fail_at_start {
        cmd.env(super::worker::FAIL_AT_START_VAR, &spec.pool);
    } else {
        cmd.env_remove(super::worker::FAIL_AT_START_VAR);
    }
    match allocate_mib {
        Some(mib) => cmd.env(super::worker::ALLOCATE_VAR, mib.to_string()),
        None => cmd.env_remove(super::worker::ALLOCATE_VAR),
    };
    let child = spawn_placed(&spec, &mut cmd, fds)
        .map_err(|e| format!("cannot start worker {}: {e}", spec.name()))?;
    drop(worker_end);
    drop(spec_file);
    master_end
        .set_nonblocking(true)
        .map_err(|e| e.to_string())?;
    let control = tokio::net::UnixStream::from_std(master_end).map_err(|e| e.to_string())?;
    Ok((
        child.id(),
        control,
        super::hosts_update::Hosts::of_spec(&spec),
    ))
}
