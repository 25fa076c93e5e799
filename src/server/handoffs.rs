//! The master's side of connection hand-off on shared addresses (see [`crate::handoff`]): one
//! unix datagram socket per thread slot of every pool that serves a shared address, bound in
//! the master's runtime folder and kept for the master's life, and where each thread hands a
//! pool's connections — the same CPU first, then its node, then by the kernel's distances.
//!
//! Owns: creating the hand-off sockets and the table of them every worker is given (each
//! thread ranks its targets from it, see `handoff::Peers`). Must not touch:
//! the connections (workers pass them; the master answers only for a stopped pool, in
//! `supervisor::pools`).

use super::listeners::ListenerGroup;
use crate::config::PoolSpec;
use crate::placement::Plan;
use crate::topology::Topology;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

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
    next_id: u64,
    /// Made at the master's start, kept across reloads (old and new workers hand to each
    /// other), given to workers only.
    pub key: crate::handoff::Key,
}

/// The users whose processes may hand connections over: the master's (it passes stragglers
/// of a stopped pool on) and every pool's.
pub fn senders(pools: &[PoolSpec]) -> Vec<u32> {
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
    let mut seen = std::collections::HashSet::new();
    groups
        .iter()
        .filter(|g| g.shared())
        .flat_map(|g| g.pools.iter().map(String::as_str))
        .filter(|p| seen.insert(*p))
        .collect()
}

/// A planned listening thread: `(worker index, node, CPU)`.
type PlannedThread = (u32, Option<u32>, u32);

/// Every planned worker's listening CPUs, by pool: `(worker index, node, CPU)` — one pass
/// over the plan, not one per pool.
fn planned_threads_by_pool<'a>(
    plan: &'a Plan,
    pools: &'a [PoolSpec],
) -> HashMap<&'a str, Vec<PlannedThread>> {
    let activated: HashSet<&str> = pools
        .iter()
        .filter(|p| p.activated())
        .map(|p| p.name.as_str())
        .collect();
    let mut by_pool: HashMap<&str, Vec<PlannedThread>> = HashMap::new();
    for w in &plan.workers {
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
            next_id: 0,
            key: crate::handoff::Key::random()
                .map_err(|e| format!("cannot read /dev/urandom for the hand-off key: {e}"))?,
        })
    }

    /// Creates the sockets the plan's threads on shared addresses lack. Existing ones stay
    /// (a restarted or reloaded worker in the same slot takes the same socket).
    pub fn ensure(
        &mut self,
        groups: &[ListenerGroup],
        pools: &[PoolSpec],
        plan: &Plan,
    ) -> Result<(), String> {
        let threads = planned_threads_by_pool(plan, pools);
        let existing: HashSet<(String, u32, u32)> = self
            .sockets
            .iter()
            .map(|s| (s.pool.clone(), s.index, s.cpu))
            .collect();
        for pool in sharing_pools(groups) {
            for &(index, _, cpu) in threads.get(pool).into_iter().flatten() {
                if existing.contains(&(pool.to_string(), index, cpu)) {
                    continue;
                }
                let dir = super::runtime::ensure_runtime_dir()?;
                let path = dir.join(format!("handoff-{}", self.next_id));
                self.next_id += 1;
                let _ = std::fs::remove_file(&path);
                // Writable by all, so the workers of every pool's user can reach it; the
                // receiver takes datagrams only signed with the master's key (which no app
                // process has) from this server's users (`senders`), which the kernel names
                // on each (`SO_PASSCRED`).
                let socket = UnixDatagram::bind(&path)
                    .and_then(|s| s.set_nonblocking(true).map(|()| s))
                    .and_then(|s| crate::os::fdpass::pass_credentials(s.as_raw_fd()).map(|()| s))
                    .and_then(|s| {
                        use std::os::unix::fs::PermissionsExt;
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                            .map(|()| s)
                    })
                    .map_err(|e| {
                        format!(
                            "cannot create the hand-off socket {} for pool {pool}: {e}",
                            path.display()
                        )
                    })?;
                self.sockets.push(HandoffSocket {
                    pool: pool.to_string(),
                    index,
                    cpu,
                    path,
                    socket,
                });
            }
        }
        Ok(())
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
    pub fn retain_planned(&mut self, groups: &[ListenerGroup], pools: &[PoolSpec], plan: &Plan) {
        let sharing: HashSet<&str> = sharing_pools(groups).into_iter().collect();
        let threads = planned_threads_by_pool(plan, pools);
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

    /// The table every worker is given of the hand-off sockets (see `handoff::Peers`): each
    /// socket with its thread's node — the planned worker's home node, else its CPU's.
    pub fn peers(&self, plan: &Plan, topology: &Topology) -> crate::handoff::Peers {
        let homes: HashMap<(&str, u32), Option<u32>> = plan
            .workers
            .iter()
            .map(|w| ((w.pool.as_str(), w.index), w.node))
            .collect();
        let sockets = self
            .sockets
            .iter()
            .map(|s| crate::handoff::Peer {
                pool: s.pool.clone(),
                cpu: s.cpu,
                node: homes
                    .get(&(s.pool.as_str(), s.index))
                    .copied()
                    .flatten()
                    .or_else(|| topology.node_of_cpu(s.cpu)),
                path: s.path.clone(),
            })
            .collect();
        let ids: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
        let distances = ids
            .iter()
            .flat_map(|&a| ids.iter().map(move |&b| (a, b)))
            .map(|(a, b)| (a, b, topology.distance(a, b)))
            .collect();
        crate::handoff::Peers { sockets, distances }
    }
}
