//! The listener sockets: one reuseport group per address, one socket per worker thread of
//! the pool serving a site there — of the dispatcher, where several pools share the address
//! (see [`super::dispatcher`]) — in (node, CPU) order, with the CPU-steering program attached.
//!
//! Owns: opening, growing and arming listener groups, and the message when a port cannot be
//! had. The master keeps every socket for its whole life (like HTTP.sys request queues: a
//! worker that dies leaves its sockets open in the master, so new connections queue instead
//! of being refused). An address served by several pools (sites told apart by host, or one
//! site's apps by path) is one group with a socket per dispatcher thread, O(CPUs) however many
//! pools share it: a connection goes to the dispatcher's thread on the receiving CPU, which
//! hands it to the right pool (see [`crate::handoff`]). With `[server] http3`, an https
//! address one pool serves has a UDP group beside it: two or more sockets per thread, so a
//! recycle's successor reads its own beside the draining worker, and the QUIC steering program (see
//! [`super::quic_steering`]) that keeps each connection's datagrams on its socket. Must not
//! touch: workers (the supervisor hands them the sockets) or requests.

use super::log;
use super::steering;
use crate::config::{Config, PoolSpec, Steering};
use crate::os;
use crate::placement::Plan;
use crate::routing::GroupRoutes;
use crate::topology::Topology;
use socket2::Socket;
use std::net::SocketAddr;

/// One reuseport group: every thread of the pools serving one address.
pub struct ListenerGroup {
    /// The pools serving the address's sites, in config order; then the dispatcher, on a
    /// shared address.
    pub(super) pools: Vec<String>,
    pub(super) addr: SocketAddr,
    pub(super) routes: GroupRoutes,
    /// Sockets in group order; `owners[i]` = (worker index in the plan, thread index).
    pub(super) sockets: Vec<Socket>,
    pub(super) owners: Vec<(usize, usize)>,
    /// `(CPU, pool)` of each socket's owner, for steering around a stopped pool.
    pub(super) owner_pools: Vec<(u32, String)>,
    /// With HTTP/3 on the address: its UDP sockets (see [`super::quic_sockets`]).
    pub(super) udp: super::quic_sockets::QuicSockets,
}

impl ListenerGroup {
    /// Whether several pools share the address (its workers hand connections over).
    pub(super) fn shared(&self) -> bool {
        self.pools.len() > 1
    }

    pub(super) fn serves(&self, pool: &str) -> bool {
        self.pools.iter().any(|p| p == pool)
    }

    /// An empty group for `routes` (sockets are opened by [`fill_group`]).
    pub(super) fn new(addr: SocketAddr, pools: Vec<String>, routes: GroupRoutes) -> Self {
        ListenerGroup {
            pools,
            addr,
            routes,
            sockets: Vec::new(),
            owners: Vec::new(),
            owner_pools: Vec::new(),
            udp: Default::default(),
        }
    }

    /// Whether HTTP/3 answers on the address: `[server] http3` on an https address one pool
    /// serves (check refuses it on a shared one).
    pub(super) fn answers_quic(&self, config: &Config) -> bool {
        config.server.http3 && self.routes.tls && !self.shared()
    }
}

/// The tag in the connection IDs this master's workers issue (see
/// [`super::quic_steering::cid`]): drawn once per master, the same for every worker and
/// every recycle, so the program always knows its own IDs.
pub(super) fn quic_tag() -> u16 {
    static TAG: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| fastrand::u16(..))
}

/// The listener groups a config wants: one per address, with the sites it routes to by host
/// (indices into the config's sites) and the pools serving them.
pub(super) fn wanted_groups(config: &Config) -> Vec<ListenerGroup> {
    let mut groups: Vec<ListenerGroup> = Vec::new();
    // Per group, its pools as a set too: thousands of pools share a hoster's port (their
    // names borrowed and hashed fast: this runs at every change of 10,000 sites).
    let mut pools_of: Vec<rustc_hash::FxHashSet<&str>> = Vec::new();
    for (site_idx, site) in config.sites.iter().enumerate() {
        for b in &site.bindings {
            let k = match groups.iter().position(|g| g.addr == b.addr) {
                Some(k) => k,
                None => {
                    pools_of.push(Default::default());
                    let routes = GroupRoutes {
                        addr: b.addr,
                        hosts: Vec::new(),
                        proxy_protocol: false,
                        dispatched: false,
                        proxy_protocol_from: site.proxy_protocol_from.clone(),
                        tls: b.tls,
                    };
                    groups.push(ListenerGroup::new(b.addr, Vec::new(), routes));
                    groups.len() - 1
                }
            };
            let g = &mut groups[k];
            g.routes.hosts.push((b.host.clone(), site_idx));
            // The sites of an address agree (checked with the config).
            g.routes.proxy_protocol |= site.proxy_protocol;
            for pool in site.pools() {
                if pools_of[k].insert(pool) {
                    g.pools.push(pool.to_string());
                }
            }
        }
    }
    let rank: rustc_hash::FxHashMap<&str, usize> = config
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    // A shared address has the dispatcher in front (see `super::dispatcher`), last.
    let dispatched = config.pool(super::dispatcher::POOL).is_some();
    for g in &mut groups {
        // Each pool's rank looked up once, not at each of the sort's comparisons.
        g.pools
            .sort_by_cached_key(|p| rank.get(p.as_str()).copied());
        if dispatched && g.pools.len() > 1 {
            g.pools.push(super::dispatcher::POOL.to_string());
            g.routes.dispatched = true;
        }
    }
    groups
}

/// The thread that owns one socket of a group.
#[derive(Debug, Clone)]
pub(super) struct SocketOwner {
    /// The worker's index in the plan, and the thread's index in the worker.
    pub worker: usize,
    pub thread: usize,
    pub cpu: u32,
    pub pool: String,
}

/// The threads that own a group's sockets, in socket order.
pub(super) type SocketOwners = Vec<SocketOwner>;

/// The threads that own the sockets of an address served by `pools`, in (node, CPU) order:
/// the dispatcher's alone where it is one of them (a shared address), else every thread of
/// the pool. An activated application has one socket per process (on its first CPU; the
/// steering table sends the node's other CPUs to the node's sockets), since it accepts with
/// one socket per address.
pub(super) fn group_owners(
    pools: &[String],
    config: &Config,
    topology: &Topology,
    plan: &Plan,
) -> SocketOwners {
    let dispatcher = [super::dispatcher::POOL.to_string()];
    let pools = if pools.contains(&dispatcher[0]) {
        &dispatcher[..]
    } else {
        pools
    };
    let mut owners: SocketOwners = Vec::new();
    for (w, worker) in plan
        .workers
        .iter()
        .enumerate()
        .filter(|(_, w)| pools.contains(&w.pool))
    {
        let activated = config.pool(&worker.pool).is_some_and(PoolSpec::activated);
        for (t, cpu) in listening_cpus(worker, activated).into_iter().enumerate() {
            owners.push(SocketOwner {
                worker: w,
                thread: t,
                cpu,
                pool: worker.pool.clone(),
            });
        }
    }
    owners.sort_by_key(|o| {
        (
            steering::socket_order_key(o.cpu, |c| topology.node_of_cpu(c)),
            o.worker,
            o.thread,
        )
    });
    owners
}

/// The CPUs of a planned process that listen: every one (a thread each) for espalier's
/// workers; the first alone for an activated application.
pub(super) fn listening_cpus(worker: &crate::placement::WorkerPlan, activated: bool) -> Vec<u32> {
    if activated {
        worker.cpus.iter().take(1).collect()
    } else {
        worker.cpus.iter().collect()
    }
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
                .map_err(|e| bind_error(site_of(config, g.addr), &g.routes.url(), &e, file))
        })
        .collect()
}

/// Opens the UDP sockets a group lacks for `owners` threads to answer HTTP/3; none where it
/// does not. As [`open_missing`], the group itself is not changed.
pub(super) fn open_missing_udp(
    g: &ListenerGroup,
    owners: usize,
    config: &Config,
    file: &str,
) -> Result<Vec<Socket>, String> {
    if !g.answers_quic(config) {
        return Ok(Vec::new());
    }
    g.udp.open_missing(g.addr, owners).map_err(|e| {
        let url = format!("udp {} (HTTP/3)", g.addr);
        bind_error(site_of(config, g.addr), &url, &e, file)
    })
}

/// Records which thread owns each socket and attaches the steering programs. Nothing here
/// can fail in a way that changes what is served: returns whether the programs could be
/// attached. `udp` are the UDP sockets [`open_missing_udp`] opened for it.
pub(super) fn arm_group(
    g: &mut ListenerGroup,
    owners: &[SocketOwner],
    udp: Vec<Socket>,
    config: &Config,
    topology: &Topology,
) -> bool {
    g.owners = owners.iter().map(|o| (o.worker, o.thread)).collect();
    g.owner_pools = owners.iter().map(|o| (o.cpu, o.pool.clone())).collect();
    match g.answers_quic(config) {
        true => g.udp.add(udp),
        false => g.udp.clear(),
    }
    steer(g, config, topology, &[]) & steer_quic(g, config, topology)
}

/// Attaches the QUIC steering program for the group's UDP sockets (see
/// [`super::quic_steering`]); true where there are none.
pub(super) fn steer_quic(g: &ListenerGroup, config: &Config, topology: &Topology) -> bool {
    let Some(first) = g.udp.first() else {
        return true;
    };
    let owners: Vec<Option<u32>> = (0..g.udp.current().len())
        .map(|i| g.owner_pools.get(i).map(|(cpu, _)| *cpu))
        .collect();
    let group = super::quic_steering::QuicGroup {
        owners: &owners,
        current: g.udp.current(),
        sockets: g.udp.len() as u32,
        tag: quic_tag(),
        by_node: config.server.steering != Steering::Hash,
    };
    let online = topology.online_cpus();
    match super::quic_steering::quic_program(&group, &online, |c| topology.node_of_cpu(c)) {
        Some(prog) => os::net::attach_reuseport_cbpf(first, &prog).is_ok(),
        None => true,
    }
}

/// Attaches the steering program for the group's owners, leaving out the sockets of the
/// `stopped` pools: on a shared address, their CPUs' connections go to the other pools'
/// threads (nearest first, as for a CPU no thread owns), which hand them on.
pub(super) fn steer(
    g: &ListenerGroup,
    config: &Config,
    topology: &Topology,
    stopped: &[String],
) -> bool {
    if config.server.steering == Steering::Hash {
        return true;
    }
    // Sockets beyond the threads (a reload that shrank the pool) are never chosen.
    let stopped: std::collections::HashSet<&str> = stopped.iter().map(String::as_str).collect();
    let thread_cpus: Vec<Option<u32>> = g
        .owner_pools
        .iter()
        .map(|(cpu, pool)| (!stopped.contains(pool.as_str())).then_some(*cpu))
        .collect();
    if thread_cpus.iter().all(Option::is_none) {
        // Every pool of the address is stopped: the master answers on all its sockets.
        return true;
    }
    let table = steering::steering_table_of(&thread_cpus, &topology.online_cpus(), |c| {
        topology.node_of_cpu(c)
    });
    let prog = steering::steering_program(&table, thread_cpus.len() as u32);
    g.sockets
        .first()
        .is_none_or(|first| os::net::attach_reuseport_cbpf(first, &prog).is_ok())
}

/// A thread's UDP socket as a worker about to start takes it: (group, socket).
pub(super) struct QuicTurn {
    group: usize,
    socket: u16,
}

/// Gives each thread of `spec` a UDP socket on each address where it answers HTTP/3 — one
/// no live process reads (see [`super::quic_sockets`]); what [`take_quic_turns`] records
/// once the worker has started. A thread that cannot have one answers over TCP alone there.
pub(super) fn choose_quic_sockets(
    groups: &mut [ListenerGroup],
    spec: &mut super::spec::WorkerSpec,
) -> Vec<QuicTurn> {
    let mut turns = Vec::new();
    for thread in &mut spec.threads {
        thread.quic.retain_mut(|q| {
            let Some(group) = groups.iter().position(|g| g.addr == q.addr) else {
                return false;
            };
            let Some((fd, index)) = groups[group].udp.choose(q.owner, q.addr) else {
                return false;
            };
            (q.fd, q.index) = (fd, index);
            turns.push(QuicTurn {
                group,
                socket: index,
            });
            true
        });
    }
    turns
}

/// Records that worker `pid` reads the sockets [`choose_quic_sockets`] gave it, and steers
/// new connections to them; returns false when a program could not be attached.
pub(super) fn take_quic_turns(
    groups: &mut [ListenerGroup],
    turns: &[QuicTurn],
    pid: u32,
    config: &Config,
    topology: &Topology,
) -> bool {
    let mut touched: Vec<usize> = Vec::new();
    for t in turns {
        groups[t.group].udp.take(t.socket, pid);
        if !touched.contains(&t.group) {
            touched.push(t.group);
        }
    }
    // Every group steered, even past one that failed.
    let failed = (touched.iter()).filter(|&&g| !steer_quic(&groups[g], config, topology));
    failed.count() == 0
}

/// The UDP sockets new QUIC connections for `spec`'s threads go to while no process reads
/// them, or only `frozen` (its suspended worker): what a sleeping pool's watch waits on,
/// besides its listeners.
pub(super) fn unread_quic_sockets(
    groups: &[ListenerGroup],
    spec: &super::spec::WorkerSpec,
    frozen: Option<u32>,
) -> Vec<std::os::fd::RawFd> {
    let quic = spec.threads.iter().flat_map(|t| &t.quic);
    quic.filter_map(|q| {
        let group = groups.iter().find(|g| g.addr == q.addr)?;
        group.udp.unread_current(q.owner, frozen)
    })
    .collect()
}

/// `pid` exited: the UDP sockets it read are free for later workers.
pub(super) fn release_quic(groups: &mut [ListenerGroup], pid: u32) {
    for g in groups {
        g.udp.release(pid);
    }
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
    let owners = group_owners(&g.pools, config, topology, plan);
    let sockets = open_missing(g, owners.len(), config, file)?;
    let udp = open_missing_udp(g, owners.len(), config, file)?;
    g.sockets.extend(sockets);
    Ok(arm_group(g, &owners, udp, config, topology))
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
/// Sockets this master was started with (`inherited`: a service manager's, or the master it
/// upgrades) are each group's first, in the order passed; the group's other sockets join them.
pub(super) fn open_listeners(
    config: &Config,
    topology: &Topology,
    plan: &Plan,
    file: &str,
    mut inherited: Vec<os::net::Inherited>,
) -> Result<Vec<ListenerGroup>, String> {
    let mut groups = wanted_groups(config);
    let mut steering_failed = false;
    for g in &mut groups {
        let (mine, rest): (Vec<_>, Vec<_>) = inherited.into_iter().partition(|s| s.addr == g.addr);
        inherited = rest;
        let (udp, tcp): (Vec<_>, Vec<_>) = mine.into_iter().partition(|s| s.udp);
        if tcp.is_empty() {
            probe_free(
                config,
                g.addr,
                &g.routes,
                (file, Patience::AtStart),
                Proto::Tcp,
            )?;
        }
        for s in tcp {
            let url = g.routes.url();
            if !s.reuse_port {
                return Err(format!("{file}: site `{}`: the socket passed for {url} (LISTEN_FDS) has no SO_REUSEPORT, so espalier cannot give each worker thread its own socket beside it; add ReusePort=yes to the socket unit", site_of(config, s.addr)));
            }
            if g.sockets.is_empty() {
                log("master", format!("{url}: using the socket {} passed", s.by));
            }
            g.sockets.push(s.socket);
        }
        if udp.is_empty() {
            probe_free(
                config,
                g.addr,
                &g.routes,
                (file, Patience::AtStart),
                Proto::Udp,
            )?;
        } else if g.answers_quic(config) {
            let read: Vec<bool> = udp.iter().map(|s| s.read_by_old).collect();
            g.udp.add(udp.into_iter().map(|s| s.socket).collect());
            // The upgraded master (this one's parent) drains them: its workers' QUIC
            // connections stay theirs (see `supervisor::upgrade`).
            g.udp.read_by(&read, std::os::unix::process::parent_id());
        }
        if !fill_group(g, config, topology, plan, file)? && !steering_failed {
            log("master", "cannot attach the CPU-steering program; connections are spread by the kernel's reuseport hash instead");
            steering_failed = true;
        }
    }
    for s in inherited {
        log(
            "master",
            format!(
                "warning: the socket passed for {} matches no binding of {file}; it is closed",
                s.addr
            ),
        );
    }
    Ok(groups)
}

/// Which of an address's ports [`probe_free`] looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Proto {
    Tcp,
    /// Only where HTTP/3 answers on the address (`[server] http3`, an https one).
    Udp,
}

/// How often, and how far apart, a starting server tries again a port another process holds.
const START_TRIES: u32 = 5;
const START_TRY_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether a held port is waited for a moment ([`probe_free`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Patience {
    /// A starting server: a port held by a process that is ending — the server a restart
    /// replaces still closing, or what a killed server left frozen, just ended and not yet
    /// gone (the kernel frees its sockets as it exits) — is tried again, as nginx tries
    /// `bind()` five times, half a second apart. Said once in the log.
    AtStart,
    /// A reload: refused at once (waiting would hold every other change back).
    None,
}

/// Refuses an address whose port another program holds, before its group is opened: a plain
/// bind fails where the workers' SO_REUSEPORT sockets would silently join another server's
/// group (and, over UDP, split its datagrams).
pub(super) fn probe_free(
    config: &Config,
    addr: SocketAddr,
    routes: &GroupRoutes,
    (file, patience): (&str, Patience),
    proto: Proto,
) -> Result<(), String> {
    if proto == Proto::Udp && !(config.server.http3 && routes.tls) {
        return Ok(());
    }
    let bind = || match proto {
        Proto::Tcp => std::net::TcpListener::bind(addr).map(drop),
        Proto::Udp => std::net::UdpSocket::bind(addr).map(drop),
    };
    let mut tries = 1;
    let e = loop {
        match bind() {
            Ok(()) => return Ok(()),
            Err(e)
                if patience == Patience::AtStart
                    && tries < START_TRIES
                    && e.raw_os_error() == Some(libc::EADDRINUSE) =>
            {
                if tries == 1 {
                    log(
                        "master",
                        format!(
                            "{addr} is held by another process ({e}); trying again for a moment"
                        ),
                    );
                }
                tries += 1;
                std::thread::sleep(START_TRY_EVERY);
            }
            Err(e) => break e,
        }
    };
    let site = site_of(config, addr);
    Err(match (proto, e.raw_os_error()) {
        (Proto::Tcp, _) => bind_error(site, &routes.url(), &e, file),
        (Proto::Udp, Some(libc::EADDRINUSE)) => format!("{file}: site `{site}`: cannot listen for HTTP/3 on udp {addr}: {e}; another program holds the UDP port (another server's HTTP/3?): stop it, change the port in `bindings`, or set [server] http3 = false"),
        (Proto::Udp, _) => bind_error(site, &format!("udp {addr} (HTTP/3)"), &e, file),
    })
}

/// The line for an address (`url`: `https://127.0.0.1:8443`) that cannot be listened on.
pub(super) fn bind_error(site: &str, url: &str, e: &std::io::Error, file: &str) -> String {
    let fix = match e.raw_os_error() {
        Some(libc::EADDRINUSE) => "another program holds it: stop it or change the port in `bindings`".to_string(),
        Some(libc::EACCES) => "ports below 1024 need root or CAP_NET_BIND_SERVICE: run as root or use a port ≥ 1024 in `bindings`".to_string(),
        Some(libc::EADDRNOTAVAIL) => "no interface has that address: use 127.0.0.1, 0.0.0.0 or one of this machine's addresses".to_string(),
        // Every pool's thread has a socket of each address it serves (and one to take
        // hand-offs): thousands of pools need tens of thousands of descriptors.
        Some(libc::EMFILE | libc::ENFILE) => format!(
            "espalier may open {} files (the hard limit): raise it for the service (systemd LimitNOFILE=, or `ulimit -Hn` before starting), or give pools fewer CPUs each (`cpus`), since each listening CPU of each pool takes one socket per address",
            crate::os::process::descriptor_limit().map_or("?".into(), |n| n.to_string())
        ),
        _ => "check `bindings`".to_string(),
    };
    format!("{file}: site `{site}`: cannot listen on {url}: {e}; {fix}")
}
