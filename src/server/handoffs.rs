//! The master's side of connection hand-off on shared addresses (see [`crate::handoff`]): one
//! unix datagram socket per thread slot of every pool that serves a shared address, bound in
//! the master's runtime folder at a path named after the slot, and where each thread hands a
//! pool's connections — the same CPU first, then its node, then by the kernel's distances.
//!
//! A slot's socket lives while its pool may have a process: from the start of a pool that
//! always runs, from the wake of an on-demand one, until it goes back to sleep (or the plan
//! drops the slot). A sleeping pool has no socket and no file — the table every worker is
//! given names the paths all the same, and a sender that finds none there hands the
//! connection to the master's own socket ([`Handoffs::wake`]) with the pool's name; the
//! master opens the slot's sockets, passes the connection into them and wakes the pool
//! (`supervisor::demand`). So 10,000 idle pools cost the master no descriptor.
//!
//! Owns: creating and closing the hand-off sockets, the master's socket, and the table every
//! worker is given (each thread ranks its targets from it, see `handoff::Peers`). Must not
//! touch: the connections (workers pass them; the master passes on what reaches its own
//! socket, and answers for a stopped pool, in `supervisor`).

use super::listeners::ListenerGroup;
use crate::config::PoolSpec;
use crate::placement::Plan;
use crate::topology::Topology;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// One thread slot's receiving socket: `(pool, worker index, CPU)` names the slot, whichever
/// process fills it now.
pub struct HandoffSocket {
    pub pool: String,
    pub index: u32,
    pub cpu: u32,
    pub path: PathBuf,
    pub socket: UnixDatagram,
}

/// Every hand-off socket of the running configuration, and the key every message carries.
pub struct Handoffs {
    pub sockets: Vec<HandoffSocket>,
    /// The master's socket (see the module's doc), while some address is shared.
    pub wake: Option<(PathBuf, UnixDatagram)>,
    /// Made at the master's start, kept across reloads (old and new workers hand to each
    /// other), given to workers only.
    pub key: crate::handoff::Key,
}

/// The users whose processes may hand connections over: the master's (it passes stragglers
/// of a stopped pool on) and every pool's.
pub fn senders(pools: &[std::sync::Arc<PoolSpec>]) -> Vec<u32> {
    let mut uids = vec![crate::os::identity::effective_uid()];
    for p in pools {
        if let Some(id) = &p.identity {
            if !uids.contains(&id.uid) {
                uids.push(id.uid);
            }
        }
    }
    uids
}

/// The pools that serve some shared address, in order.
fn sharing_pools(groups: &[ListenerGroup]) -> Vec<&str> {
    // A fast hasher here and below: the names are the configuration's, and a hoster's port
    // has 10,000 of them at every change that tells the dispatcher its new hosts.
    let mut seen = rustc_hash::FxHashSet::default();
    groups
        .iter()
        .filter(|g| g.shared())
        .flat_map(|g| g.pools.iter().map(String::as_str))
        .filter(|p| seen.insert(*p))
        .collect()
}

/// The pools that start asleep, by name (looked up once per pool: thousands of them).
pub fn on_demand_pools(pools: &[std::sync::Arc<PoolSpec>]) -> HashSet<&str> {
    pools
        .iter()
        .filter(|p| p.start == crate::config::StartMode::OnDemand)
        .map(|p| p.name.as_str())
        .collect()
}

/// A planned listening thread: `(worker index, node, CPU)`.
type PlannedThread = (u32, Option<u32>, u32);

/// Every planned worker's listening CPUs, by pool: `(worker index, node, CPU)` — one pass
/// over the plan, not one per pool.
fn planned_threads_by_pool<'a>(
    plan: &'a Plan,
    pools: &'a [std::sync::Arc<PoolSpec>],
    wanted: impl Fn(&str) -> bool,
) -> rustc_hash::FxHashMap<&'a str, Vec<PlannedThread>> {
    let activated: rustc_hash::FxHashSet<&str> = pools
        .iter()
        .filter(|p| p.activated())
        .map(|p| p.name.as_str())
        .collect();
    let mut by_pool: rustc_hash::FxHashMap<&str, Vec<PlannedThread>> = Default::default();
    for w in plan.workers.iter().filter(|w| wanted(&w.pool)) {
        let cpus = super::listeners::listening_cpus(w, activated.contains(w.pool.as_str()));
        let threads = by_pool.entry(w.pool.as_str()).or_default();
        threads.extend(cpus.into_iter().map(|cpu| (w.index, w.node, cpu)));
    }
    by_pool
}

impl Handoffs {
    pub fn new() -> Result<Self, String> {
        Ok(Handoffs {
            sockets: Vec::new(),
            wake: None,
            key: crate::handoff::Key::random()
                .map_err(|e| format!("cannot read /dev/urandom for the hand-off key: {e}"))?,
        })
    }

    /// Creates the sockets the plan's threads on shared addresses lack, but for the pools
    /// `asleep` says start without a process (on demand); and the master's socket when some
    /// address is shared. Existing ones stay (a restarted or reloaded worker in the same slot
    /// takes the same socket).
    pub fn ensure(
        &mut self,
        groups: &[ListenerGroup],
        pools: &[std::sync::Arc<PoolSpec>],
        plan: &Plan,
        asleep: impl Fn(&str) -> bool,
    ) -> Result<(), String> {
        let sharing = sharing_pools(groups);
        if !sharing.is_empty() && self.wake.is_none() {
            let path = super::runtime::ensure_runtime_dir()?.join("handoff-master");
            let socket = bind(&path).map_err(|e| {
                format!(
                    "cannot create the master's hand-off socket {}: {e}",
                    path.display()
                )
            })?;
            self.wake = Some((path, socket));
        }
        // The awake sharing pools' threads alone: a hoster's 10,000 pools sleep but a few.
        let awake: HashSet<&str> = sharing.into_iter().filter(|p| !asleep(p)).collect();
        let threads = planned_threads_by_pool(plan, pools, |p| awake.contains(p));
        for (pool, threads) in threads {
            for (index, _, cpu) in threads {
                self.open(pool, index, cpu)?;
            }
        }
        Ok(())
    }

    /// Opens slot `(pool, index)`'s socket for each of its `cpus` that lacks one; its
    /// descriptors, by CPU.
    pub fn open_slot(
        &mut self,
        pool: &str,
        index: u32,
        cpus: &[u32],
    ) -> Result<Vec<(u32, RawFd)>, String> {
        cpus.iter()
            .map(|&cpu| self.open(pool, index, cpu).map(|fd| (cpu, fd)))
            .collect()
    }

    /// The socket of thread slot `(pool, index, cpu)`, made if it has none.
    fn open(&mut self, pool: &str, index: u32, cpu: u32) -> Result<RawFd, String> {
        if let Some(h) = self
            .sockets
            .iter()
            .find(|h| h.pool == pool && h.index == index && h.cpu == cpu)
        {
            return Ok(h.socket.as_raw_fd());
        }
        let path =
            crate::handoff::slot_path(&super::runtime::ensure_runtime_dir()?, pool, index, cpu);
        let socket = bind(&path).map_err(|e| {
            format!(
                "cannot create the hand-off socket {} for pool {pool}: {e}",
                path.display()
            )
        })?;
        let fd = socket.as_raw_fd();
        self.sockets.push(HandoffSocket {
            pool: pool.to_string(),
            index,
            cpu,
            path,
            socket,
        });
        Ok(fd)
    }

    /// Closes slot `(pool, index)`'s sockets and files, as its pool goes to sleep: the file
    /// first, so that senders from then on reach the master, then what was queued before is
    /// taken out and returned, for the master to pass on as to a sleeping pool. (A sender
    /// that found the file just before it went may still be delivering: that connection is
    /// lost with the socket — a window of one system call.)
    pub fn close_slot(
        &mut self,
        pool: &str,
        index: u32,
        senders: &[u32],
    ) -> Vec<crate::handoff::Received> {
        let mut queued = Vec::new();
        let key = self.key;
        self.sockets.retain(|h| {
            if h.pool != pool || h.index != index {
                return true;
            }
            let _ = std::fs::remove_file(&h.path);
            queued.extend(crate::handoff::drain(h.socket.as_raw_fd(), senders, &key));
            false
        });
        queued
    }

    /// Each thread slot's receiving socket, by `(pool, worker index, CPU)`: an index the
    /// caller builds once to look up many.
    pub fn fds(&self) -> HashMap<(&str, u32, u32), RawFd> {
        self.sockets
            .iter()
            .map(|s| ((s.pool.as_str(), s.index, s.cpu), s.socket.as_raw_fd()))
            .collect()
    }

    /// Closes the sockets no planned thread uses any more (their files too).
    pub fn retain_planned(
        &mut self,
        groups: &[ListenerGroup],
        pools: &[std::sync::Arc<PoolSpec>],
        plan: &Plan,
    ) {
        let sharing: HashSet<&str> = sharing_pools(groups).into_iter().collect();
        // The threads of the pools with a socket alone (not a hoster's 10,000 asleep).
        let open: HashSet<String> = self.sockets.iter().map(|s| s.pool.clone()).collect();
        let threads = planned_threads_by_pool(plan, pools, |p| open.contains(p));
        self.sockets.retain(|s| {
            let keep = sharing.contains(s.pool.as_str())
                && threads.get(s.pool.as_str()).is_some_and(|t| {
                    t.iter()
                        .any(|&(index, _, cpu)| index == s.index && cpu == s.cpu)
                });
            if !keep {
                let _ = std::fs::remove_file(&s.path);
            }
            keep
        });
    }

    /// The table every worker is given of the hand-off sockets (see `handoff::Peers`): every
    /// planned thread slot of the pools on shared addresses — whether its socket is open now
    /// or not (its pool asleep) — with its thread's node (the planned worker's home node, else
    /// its CPU's), and the master's socket. `only`: the one pool whose slots are wanted (a
    /// pool behind the dispatcher is given the dispatcher's alone: at a change of one pool
    /// of 10,000, the others' are not listed for nothing).
    pub fn peers(
        &self,
        (groups, pools): (&[ListenerGroup], &[std::sync::Arc<PoolSpec>]),
        plan: &Plan,
        topology: &Topology,
        only: Option<&str>,
    ) -> crate::handoff::Peers {
        let dir = super::runtime::runtime_dir()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let wanted = |pool: &str| only.is_none_or(|o| o == pool);
        let threads = planned_threads_by_pool(plan, pools, wanted);
        let pools = sharing_pools(groups)
            .into_iter()
            .filter(|pool| wanted(pool))
            .filter_map(|pool| {
                let slots: Vec<_> = (threads.get(pool)?.iter())
                    .map(|&(index, home, cpu)| {
                        (index, cpu, home.or_else(|| topology.node_of_cpu(cpu)))
                    })
                    .collect();
                (!slots.is_empty()).then(|| crate::handoff::PoolSlots(pool.to_string(), slots))
            })
            .collect();
        let ids: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
        let distances = ids
            .iter()
            .flat_map(|&a| ids.iter().map(move |&b| (a, b)))
            .map(|(a, b)| (a, b, topology.distance(a, b)))
            .collect();
        crate::handoff::Peers {
            dir,
            pools,
            distances,
            wake: self.wake.as_ref().map(|(path, _)| path.clone()),
        }
    }
}

/// A hand-off socket bound at `path`, non-blocking. Writable by all, so the workers of every
/// pool's user can reach it; the receiver takes datagrams only signed with the master's key
/// (which no app process has) from this server's users (`senders`), which the kernel names on
/// each (`SO_PASSCRED`).
fn bind(path: &Path) -> std::io::Result<UnixDatagram> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let socket = UnixDatagram::bind(path)?;
    socket.set_nonblocking(true)?;
    crate::os::fdpass::pass_credentials(socket.as_raw_fd())?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(socket)
}
