//! Soft affinity, applied: once a second, from the per-node load between two `/proc/stat`
//! samples (read once in `supervisor::live`), each soft-affinity worker widened to idle nodes
//! or narrowed back home as [`crate::server::soft::decide`] says.
//!
//! Owns: applying it. Must not touch: the decision's thresholds (they are pure, in
//! [`crate::server::soft`]) or reading `/proc/stat`.

use super::Supervisor;
use crate::os;
use crate::server::log;

impl Supervisor {
    /// Once a second, with the `/proc/stat` samples at its two ends (taken once, in
    /// `supervisor::live`, for this and the admin page): per-node load, and soft-affinity
    /// workers widened or narrowed.
    pub(super) fn soft_affinity(&mut self, before: &[(u32, u64, u64)], after: &[(u32, u64, u64)]) {
        if self.nodes.len() < 2 {
            return;
        }
        let nodes = self.nodes.clone();
        let node_of = |cpu: u32| nodes.iter().find(|(_, c)| c.contains(cpu)).map(|(n, _)| *n);
        let load = crate::server::soft::node_load(before, after, node_of);
        for slot in &mut self.slots {
            let pool = &self.pools[slot.pool];
            let (Some(home), Some(p)) = (
                slot.spec.node,
                slot.current.as_ref().filter(|p| p.life.is_ready()),
            ) else {
                continue;
            };
            if slot.spec.hard || pool.stopped.is_some() {
                continue;
            }
            let allowed = pool
                .spec
                .cpus
                .clone()
                .unwrap_or_else(|| self.online.clone());
            let candidates: Vec<u32> = nodes
                .iter()
                .filter(|(_, c)| !c.intersection(&allowed).is_empty())
                .map(|(n, _)| *n)
                .collect();
            let own = crate::cpuset::CpuSet::from_ids(slot.spec.cpus.iter().copied());
            let (cpus, what) = match crate::server::soft::decide(
                &mut slot.soft,
                home,
                &load,
                &candidates,
            ) {
                crate::server::soft::Decision::Keep => continue,
                crate::server::soft::Decision::Widen(to) => {
                    let extra = nodes
                        .iter()
                        .filter(|(n, _)| to.contains(n))
                        .fold(crate::cpuset::CpuSet::new(), |a, (_, c)| {
                            a.union(&c.intersection(&allowed))
                        });
                    (own.union(&extra), format!("widened to nodes {to:?}: node {home} is saturated and they have idle cycles"))
                }
                crate::server::soft::Decision::Narrow => {
                    (own, format!("narrowed back to node {home}"))
                }
            };
            // An application's whole tree moves (gunicorn's workers do its work).
            let pids = if slot.app.is_some() {
                os::process::process_tree(p.pid)
            } else {
                vec![p.pid]
            };
            let applied = pids
                .iter()
                .try_for_each(|&pid| os::numa::set_process_affinity(pid, &cpus));
            match applied {
                Ok(()) => log(
                    "master",
                    format!(
                        "worker {} (soft affinity) {what}: cpus {cpus}",
                        slot.spec.name()
                    ),
                ),
                Err(e) => log(
                    "master",
                    format!(
                        "worker {}: cannot change its CPUs to {cpus}: {e}",
                        slot.spec.name()
                    ),
                ),
            }
        }
    }
}
