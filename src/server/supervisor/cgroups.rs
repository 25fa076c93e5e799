//! Control groups of the running pools: a CPU-capped group per pool with `cpu_limit`, and a
//! cpuset per hard-affinity worker, made at start (and for a reload's new slots) and removed
//! when the master stops. Where they cannot be made, one warning says why and the pool runs
//! without.
//!
//! Owns: which groups exist and which slot joins which (a worker joins its groups itself,
//! before it pins its threads). Must not touch: cgroup files (that is [`crate::os::cgroup`]).

use super::Supervisor;
use crate::os;
use crate::server::log;

impl Supervisor {
    /// Control groups: a CPU cap per pool with `cpu_limit`, a cpuset per hard-affinity worker.
    /// Where they cannot be made, one warning says why and the pool runs without.
    pub(super) fn make_cgroups(&mut self) {
        self.make_cgroups_for(0);
    }

    /// Control groups for the slots from `first` on (all at start; a reload's new ones).
    pub(super) fn make_cgroups_for(&mut self, first: usize) {
        let Some(h) = self.cgroups.hierarchy.clone() else {
            if self.pools.iter().any(|p| p.spec.cpu_limit.is_some()) {
                log("master", "warning: no cgroup cpu controller is available (neither v2 cpu.max in espalier's own cgroup nor v1 cpu.cfs_quota_us): cpu_limit is not applied");
            }
            return;
        };
        for p in 0..self.pools.len() {
            let Some(limit) = self.pools[p].spec.cpu_limit else {
                continue;
            };
            if !self.slots[first..].iter().any(|s| s.pool == p) {
                continue;
            }
            let name = self.pools[p].spec.name.clone();
            match os::cgroup::cpu_limited(&h, &name, limit) {
                Ok(g) => {
                    log("master", format!("pool {name}: CPU capped at {:.0}% of one CPU over all its workers ({})", limit * 100.0, g.dirs[0].display()));
                    for s in self.slots[first..].iter_mut().filter(|s| s.pool == p) {
                        s.spec.cgroups.extend(g.dirs.iter().cloned());
                    }
                    self.pools[p].cpu_group = Some(g);
                }
                Err(e) => log("master", format!("warning: pool {name}: cpu_limit not applied: {e}; the pool runs without a cap")),
            }
        }
        let mut warned = false;
        for s in self.slots[first..]
            .iter_mut()
            .filter(|s| s.spec.hard && s.spec.node.is_some())
        {
            let cpus = crate::cpuset::CpuSet::from_ids(s.spec.cpus.iter().copied());
            let nodes = if s.spec.memory_nodes.is_empty() {
                vec![s.spec.node.unwrap_or(0)]
            } else {
                s.spec.memory_nodes.clone()
            };
            let pool_group = self
                .pools
                .iter()
                .find(|p| p.spec.name == s.spec.pool)
                .and_then(|p| p.cpu_group.as_ref());
            match os::cgroup::cpuset(
                &h,
                &format!("{}-{}", s.spec.pool, s.spec.index),
                &cpus,
                &nodes,
                pool_group,
            ) {
                Ok(g) => {
                    if h.unified() {
                        // One v2 group per process: the cpuset (a child of the pool's
                        // capped group, when there is one) is the one it joins.
                        s.spec.cgroups.clear();
                    }
                    s.spec.cgroups.extend(g.dirs.iter().cloned());
                    self.cgroups.cpusets.push(g);
                }
                Err(e) if !warned => {
                    warned = true;
                    log("master", format!("warning: hard-affinity workers get no cpuset cgroup: {e}; CPU affinity and memory policy still apply"));
                }
                Err(_) => {}
            }
        }
    }

    pub(super) fn remove_cgroups(&mut self) {
        for g in self.cgroups.cpusets.drain(..) {
            g.remove();
        }
        for p in &self.pools {
            if let Some(g) = &p.cpu_group {
                g.remove();
            }
        }
        if let Some(h) = &self.cgroups.hierarchy {
            os::cgroup::remove_parents(h);
        }
    }
}
