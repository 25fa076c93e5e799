//! The master's side of connection hand-off on shared addresses (see [`crate::handoff`]): one
//! unix datagram socket per thread slot of every pool that serves a shared address, bound in
//! the master's runtime folder and kept for the master's life, and where each thread hands a
//! pool's connections — the same CPU first, then its node, then by the kernel's distances.
//!
//! Owns: creating the hand-off sockets and choosing each thread's targets. Must not touch:
//! the connections (workers pass them; the master answers only for a stopped pool, in
//! `supervisor::pools`).

use super::listeners::ListenerGroup;
use crate::config::PoolSpec;
use crate::placement::Plan;
use crate::topology::nearest::{tiers_for, Tiers};
use crate::topology::Topology;
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

/// The pools that serve some shared address.
fn sharing_pools(groups: &[ListenerGroup]) -> Vec<&str> {
    let mut pools: Vec<&str> = Vec::new();
    for g in groups.iter().filter(|g| g.shared()) {
        for p in &g.pools {
            if !pools.contains(&p.as_str()) {
                pools.push(p);
            }
        }
    }
    pools
}

/// The listening CPUs of every planned worker of `pool`: `(worker index, node, CPU)`.
fn planned_threads<'a>(
    plan: &'a Plan,
    pools: &'a [PoolSpec],
    pool: &'a str,
) -> impl Iterator<Item = (u32, Option<u32>, u32)> + 'a {
    plan.workers
        .iter()
        .filter(move |w| w.pool == pool)
        .flat_map(move |w| {
            let activated = pools.iter().any(|p| p.name == pool && p.activated());
            super::listeners::listening_cpus(w, activated)
                .into_iter()
                .map(move |cpu| (w.index, w.node, cpu))
        })
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
        for pool in sharing_pools(groups) {
            for (index, _, cpu) in planned_threads(plan, pools, pool) {
                if self.find(pool, index, cpu).is_some() {
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

    fn find(&self, pool: &str, index: u32, cpu: u32) -> Option<&HandoffSocket> {
        self.sockets
            .iter()
            .find(|s| s.pool == pool && s.index == index && s.cpu == cpu)
    }

    /// The receiving socket of a thread, if its pool serves a shared address.
    pub fn fd_of(&self, pool: &str, index: u32, cpu: u32) -> Option<RawFd> {
        self.find(pool, index, cpu).map(|s| s.socket.as_raw_fd())
    }

    /// Closes the sockets no planned thread uses any more (their files too).
    pub fn retain_planned(&mut self, groups: &[ListenerGroup], pools: &[PoolSpec], plan: &Plan) {
        let sharing = sharing_pools(groups);
        self.sockets.retain(|s| {
            let keep = sharing.contains(&s.pool.as_str())
                && planned_threads(plan, pools, &s.pool)
                    .any(|(index, _, cpu)| index == s.index && cpu == s.cpu);
            if !keep {
                let _ = std::fs::remove_file(&s.path);
            }
            keep
        });
    }

    /// Where a thread of `pool` on `cpu` hands connections of each other pool it shares an
    /// address with: that pool's threads on the same CPU, then on the same node, then by the
    /// kernel's distance from the thread's node.
    pub fn targets_for(
        &self,
        pool: &str,
        cpu: u32,
        groups: &[ListenerGroup],
        pools: &[PoolSpec],
        plan: &Plan,
        topology: &Topology,
    ) -> Vec<(String, Tiers<PathBuf>)> {
        let mut others: Vec<&str> = Vec::new();
        for g in groups.iter().filter(|g| g.shared() && g.serves(pool)) {
            for p in g.pools.iter().filter(|p| *p != pool) {
                if !others.contains(&p.as_str()) {
                    others.push(p);
                }
            }
        }
        let node = topology.node_of_cpu(cpu);
        others
            .into_iter()
            .map(|other| {
                let threads: Vec<(Option<u32>, (u32, PathBuf))> =
                    planned_threads(plan, pools, other)
                        .filter_map(|(index, node, c)| {
                            let s = self.find(other, index, c)?;
                            Some((
                                node.or_else(|| topology.node_of_cpu(c)),
                                (c, s.path.clone()),
                            ))
                        })
                        .collect();
                let tiers = tiers_for(node, &threads, |a, b| topology.distance(a, b));
                (other.to_string(), same_cpu_first(tiers, cpu))
            })
            .collect()
    }
}

/// The nearest tier with the thread on `cpu` (if any) as a tier of its own before the rest:
/// a connection handed to the same CPU stays in its caches.
fn same_cpu_first(tiers: Tiers<(u32, PathBuf)>, cpu: u32) -> Tiers<PathBuf> {
    let paths = |tier: Vec<(u32, PathBuf)>| tier.into_iter().map(|(_, p)| p).collect();
    let mut out: Vec<Vec<PathBuf>> = Vec::new();
    let mut rest_of = tiers.tiers.into_iter();
    if let Some(nearest) = rest_of.next() {
        let (same, rest): (Vec<_>, Vec<_>) = nearest.into_iter().partition(|(c, _)| *c == cpu);
        out.extend(
            [same, rest]
                .into_iter()
                .filter(|t| !t.is_empty())
                .map(paths),
        );
    }
    out.extend(rest_of.map(paths));
    Tiers {
        tiers: out,
        local: tiers.local,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_cpu_goes_first_then_its_tier() {
        let p = |s: &str| PathBuf::from(s);
        let tiers = Tiers {
            tiers: vec![
                vec![(0, p("a0")), (1, p("a1")), (2, p("a2"))],
                vec![(4, p("b4"))],
            ],
            local: true,
        };
        let t = same_cpu_first(tiers.clone(), 1);
        assert_eq!(
            t.tiers,
            vec![vec![p("a1")], vec![p("a0"), p("a2")], vec![p("b4")]]
        );
        let t = same_cpu_first(tiers, 7);
        assert_eq!(
            t.tiers,
            vec![vec![p("a0"), p("a1"), p("a2")], vec![p("b4")]]
        );
    }
}
