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

/// Adds `dirs` to a process's groups, once each.
fn join(groups: &mut Vec<std::path::PathBuf>, dirs: &[std::path::PathBuf]) {
    for d in dirs {
        if !groups.contains(d) {
            groups.push(d.clone());
        }
    }
}

impl Supervisor {
    /// Control groups: a CPU cap per pool with `cpu_limit`, a cpuset per hard-affinity worker.
    /// Where they cannot be made, one warning says why and the pool runs without.
    pub(super) fn make_cgroups(&mut self) {
        self.make_cgroups_for(0);
    }

    /// Pool `p`'s limits: its own, and for an on-demand pool that sets none, the defaults
    /// its share of the machine gives (see [`super::wake::default_limits`]).
    fn limits_of(&self, p: usize) -> os::cgroup::PoolLimits {
        let spec = &self.pools[p].spec;
        let mut limits = os::cgroup::PoolLimits {
            cpu: spec.cpu_limit,
            memory: spec.memory_limit,
            swap: spec.swap_limit,
            pids: spec.pids_limit,
            io_weight: spec.io_weight,
        };
        if spec.start == crate::config::StartMode::OnDemand {
            let on_demand = (self.pools.iter())
                .filter(|p| p.spec.start == crate::config::StartMode::OnDemand)
                .count();
            let (_, running) =
                super::wake::bounds(&self.config.server, self.online.len(), self.memory);
            let machine = (self.memory, os::cgroup::process_ids());
            let (memory, pids) =
                super::wake::default_limits(&self.config.server, machine, on_demand, running);
            limits.memory = limits.memory.or(memory);
            limits.pids = limits.pids.or(pids);
        }
        limits
    }

    /// Control groups for the slots from `first` on (all at start; a reload's new ones). An
    /// on-demand pool's is made at its first start ([`Self::pool_group_at_start`]): with
    /// thousands of sleeping pools, a group each at start would cost the start-up thousands
    /// of directories in every controller, for pools that may never wake.
    pub(super) fn make_cgroups_for(&mut self, first: usize) {
        let Some(h) = self.cgroups.hierarchy.clone() else {
            if self.pools.iter().any(|p| {
                let s = &p.spec;
                s.cpu_limit.is_some() || s.memory_limit.is_some() || s.pids_limit.is_some()
            }) {
                log("master", "warning: no cgroup controller is available (neither v2 in espalier's own cgroup nor v1 cpu, memory or pids): cpu_limit, memory_limit and pids_limit are not applied");
            }
            return;
        };
        for p in 0..self.pools.len() {
            let mut slots = self.slots[first..].iter().filter(|s| s.pool == p);
            let Some(_) = slots.clone().next() else {
                continue;
            };
            // A hard-affinity worker's cpuset is made below, inside its pool's group.
            let hard = slots.any(|s| s.spec.hard && s.spec.node.is_some());
            if self.pools[p].spec.start == crate::config::StartMode::OnDemand && !hard {
                continue;
            }
            self.make_pool_group(&h, p, first);
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

    /// An on-demand pool's group, made as its first process starts (see
    /// [`Self::make_cgroups_for`]), and joined by slot `i`.
    pub(super) fn pool_group_at_start(&mut self, i: usize) {
        let p = self.slots[i].pool;
        if self.pools[p].spec.start != crate::config::StartMode::OnDemand {
            return;
        }
        if !self.pools[p].group_tried {
            if let Some(h) = self.cgroups.hierarchy.clone() {
                self.make_pool_group(&h, p, 0);
            }
        } else if let Some(g) = &self.pools[p].group {
            join(&mut self.slots[i].spec.cgroups, &g.dirs);
        }
    }

    /// Pool `p`'s group with its limits, joined by its slots from `first` on. Made once: a
    /// failure is said and the pool runs without.
    fn make_pool_group(&mut self, h: &os::cgroup::Hierarchy, p: usize, first: usize) {
        self.pools[p].group_tried = true;
        let limits = self.limits_of(p);
        if limits == Default::default() {
            return;
        }
        let spec = &self.pools[p].spec;
        let defaulted = spec.memory_limit.is_none()
            && spec.pids_limit.is_none()
            && spec.cpu_limit.is_none()
            && spec.io_weight.is_none();
        let name = spec.name.clone();
        match os::cgroup::pool_group(h, &name, limits) {
            Ok(g) => {
                log(
                    "master",
                    format!("pool {name}: {} ({})", said(limits), g.dirs[0].display()),
                );
                for s in self.slots[first..].iter_mut().filter(|s| s.pool == p) {
                    join(&mut s.spec.cgroups, &g.dirs);
                }
                self.pools[p].group = Some(g);
                self.pools[p].limits = limits;
            }
            // The defaults are said to fail once, not per pool: there may be thousands.
            Err(e) if defaulted && self.cgroups.defaults_failed_said => drop(e),
            Err(e) => {
                self.cgroups.defaults_failed_said |= defaulted;
                let which = if defaulted {
                    "on-demand pools run without their default limits (said once; on_demand_memory_limit = \"none\" and on_demand_pids_limit = \"none\" ask for none)"
                } else {
                    "the pool runs without"
                };
                log(
                    "master",
                    format!(
                        "warning: pool {name}: {} not applied: {e}; {which}",
                        said(limits)
                    ),
                )
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
