//! Control groups of the running pools: a group per pool with `cpu_limit`, `memory_limit` or
//! `pids_limit`, and a cpuset per hard-affinity worker, made at start (and for a reload's new slots) and removed
//! when the master stops. Where they cannot be made, one warning says why and the pool runs
//! without.
//!
//! Owns: which groups exist and which slot joins which (a worker joins its groups itself,
//! before it pins its threads). Must not touch: cgroup files (that is [`crate::os::cgroup`]).

use super::Supervisor;
use crate::os;
use crate::server::log;

/// A pool's limits, said for the log.
fn said(limits: os::cgroup::PoolLimits) -> String {
    let mut parts = Vec::new();
    if let Some(cpu) = limits.cpu {
        parts.push(format!("CPU capped at {:.0}% of one CPU", cpu * 100.0));
    }
    if let Some(bytes) = limits.memory {
        parts.push(format!("memory at {} MiB", bytes >> 20));
    }
    if let Some(bytes) = limits.swap {
        parts.push(format!("swap at {} MiB", bytes >> 20));
    }
    if let Some(n) = limits.pids {
        parts.push(format!("{n} processes and threads"));
    }
    if let Some(w) = limits.io_weight {
        parts.push(format!("IO weight {w}"));
    }
    format!("{} over all its processes", parts.join(", "))
}

impl Supervisor {
    /// Control groups: a CPU cap per pool with `cpu_limit`, a cpuset per hard-affinity worker.
    /// Where they cannot be made, one warning says why and the pool runs without.
    pub(super) fn make_cgroups(&mut self) {
        self.make_cgroups_for(0);
    }

    /// Control groups for the slots from `first` on (all at start; a reload's new ones).
    pub(super) fn make_cgroups_for(&mut self, first: usize) {
        let limits_of = |p: &crate::config::PoolSpec| os::cgroup::PoolLimits {
            cpu: p.cpu_limit,
            memory: p.memory_limit,
            swap: p.swap_limit,
            pids: p.pids_limit,
            io_weight: p.io_weight,
        };
        let Some(h) = self.cgroups.hierarchy.clone() else {
            if self
                .pools
                .iter()
                .any(|p| limits_of(&p.spec) != Default::default())
            {
                log("master", "warning: no cgroup controller is available (neither v2 in espalier's own cgroup nor v1 cpu, memory or pids): cpu_limit, memory_limit and pids_limit are not applied");
            }
            return;
        };
        for p in 0..self.pools.len() {
            let limits = limits_of(&self.pools[p].spec);
            if limits == Default::default() || !self.slots[first..].iter().any(|s| s.pool == p) {
                continue;
            }
            let name = self.pools[p].spec.name.clone();
            match os::cgroup::pool_group(&h, &name, limits) {
                Ok(g) => {
                    log(
                        "master",
                        format!("pool {name}: {} ({})", said(limits), g.dirs[0].display()),
                    );
                    for s in self.slots[first..].iter_mut().filter(|s| s.pool == p) {
                        s.spec.cgroups.extend(g.dirs.iter().cloned());
                    }
                    self.pools[p].group = Some(g);
                }
                Err(e) => log(
                    "master",
                    format!(
                        "warning: pool {name}: {} not applied: {e}; the pool runs without",
                        said(limits)
                    ),
                ),
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
                .and_then(|p| p.group.as_ref());
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
            if let Some(g) = &p.group {
                g.remove();
            }
        }
        if let Some(h) = &self.cgroups.hierarchy {
            os::cgroup::remove_parents(h);
        }
    }
}
