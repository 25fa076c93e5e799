//! The placement planner: which worker of which pool runs on which NUMA node (or L3 domain),
//! with which CPUs and which memory policy.
//!
//! Owns: the rules, as a pure function of (topology, pool specs, workers already placed).
//! No syscalls and no I/O: `espalier serve --dry-run` prints its result for any machine, and
//! the master applies it through [`crate::os`].
//!
//! The rules:
//! - `processes = N`, or `auto`/`0` = one worker per *unit* (node, or L3 domain with
//!   `unit = "l3"`) that has CPUs in the pool's `cpus`.
//! - Every worker goes to a unit holding the fewest workers *of its own pool*, then the fewest
//!   workers so far (counting all pools and the workers already placed): a pool spreads over
//!   its units before doubling up on one (so `auto` is exactly one per unit, even beside
//!   other pools), and hosting (N pools × 1 worker) spreads one pool per node and no
//!   node holds two workers while a usable node holds none, unless `cpus` forces it. With
//!   `unit = "l3"` the fewest-workers rule looks at the unit's node next, so workers spread
//!   across nodes before they double up on one node's L3 domains.
//! - Among those, `most-free-memory` (IIS 8's default) starts a pool on the unit whose node has
//!   the most free memory and continues round-robin in unit order from there; `round-robin`
//!   continues from one cursor shared by all pools (the OS-scheduling analogue); `none` gives
//!   every worker all of the pool's CPUs and no home.
//!   IIS re-reads free memory at each worker start; a plan is made at once, so the
//!   fewest-workers rule stands in for the memory the earlier workers will take.
//! - A worker's CPUs are its unit's online CPUs within the pool's `cpus`. When one pool puts
//!   several workers on one unit (more processes than units), they split the unit by whole
//!   cores — SMT siblings kept together — so each owns its CPUs (a true web garden); when there
//!   are fewer cores than workers they share.
//! - Offline CPUs are never used. Memory policy: `bind` for hard affinity (memory must stay
//!   local, like the CPUs), `preferred` for soft (local first, remote rather than failing,
//!   matching threads that may themselves be moved), overridable per pool.

use crate::config::{Affinity, MemoryPolicy, Placement, PoolSpec, Processes, Unit};
use crate::cpuset::CpuSet;
use crate::topology::Topology;
use serde::Serialize;
use std::fmt;

/// One planned worker process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerPlan {
    pub pool: String,
    /// Index within its pool, 0-based.
    pub index: u32,
    /// Home node; `None` for `placement = "none"`.
    pub node: Option<u32>,
    /// Home L3 domain, for `unit = "l3"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l3: Option<u32>,
    /// CPUs the worker runs on: one worker thread per CPU.
    pub cpus: CpuSet,
    pub threads: u32,
    #[serde(serialize_with = "ser_affinity")]
    pub affinity: Affinity,
    /// True when the supervisor may widen the CPUs under load (soft affinity with a home).
    pub may_widen: bool,
    #[serde(serialize_with = "ser_policy")]
    pub memory_policy: MemoryPolicy,
    /// Nodes the memory policy names (empty for the default policy).
    pub memory_nodes: Vec<u32>,
}

fn ser_affinity<S: serde::Serializer>(a: &Affinity, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match a {
        Affinity::Soft => "soft",
        Affinity::Hard => "hard",
    })
}

fn ser_policy<S: serde::Serializer>(p: &MemoryPolicy, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(policy_name(*p))
}

pub fn policy_name(p: MemoryPolicy) -> &'static str {
    match p {
        MemoryPolicy::Bind => "bind",
        MemoryPolicy::Preferred => "preferred",
        MemoryPolicy::Default => "default",
    }
}

/// A whole plan: every worker of every pool, in pool order then index order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub workers: Vec<WorkerPlan>,
}

/// A worker that already runs (used so new pools spread around existing ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacedWorker {
    pub node: Option<u32>,
    pub l3: Option<u32>,
}

/// Why a pool could not be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementError(pub String);

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlacementError {}

/// A place workers can be homed: a node, or one L3 domain of a node.
#[derive(Debug, Clone)]
struct PlacementUnit {
    node: u32,
    l3: Option<u32>,
    cpus: CpuSet,
    free_memory: u64,
    workers: usize,
}

/// The units of both kinds, with the workers each holds so far (all pools, and the workers
/// already placed).
struct Units {
    nodes: Vec<PlacementUnit>,
    l3s: Vec<PlacementUnit>,
}

impl Units {
    fn of(topology: &Topology, already: &[PlacedWorker]) -> Self {
        let mut u = Units {
            nodes: units(topology, Unit::Node),
            l3s: units(topology, Unit::L3),
        };
        for w in already {
            u.count(w.node, w.l3);
        }
        u
    }

    fn list(&self, unit: Unit) -> &[PlacementUnit] {
        match unit {
            Unit::Node => &self.nodes,
            Unit::L3 => &self.l3s,
        }
    }

    fn count(&mut self, node: Option<u32>, l3: Option<u32>) {
        count_worker(&mut self.nodes, &mut self.l3s, node, l3);
    }

    /// Workers on a node, over all its units.
    fn node_load(&self, node: u32) -> usize {
        self.nodes
            .iter()
            .filter(|u| u.node == node)
            .map(|u| u.workers)
            .sum()
    }
}

/// A homing policy (`placement = …`): after the fewest-workers rule, how the next worker's
/// unit is chosen among equals. One row per policy, one small function each; `none` homes no
/// one and is handled before the table ([`place_unhomed`]).
struct Policy {
    placement: Placement,
    /// Whether the round-robin cursor is shared by all pools (else each pool has its own).
    shared_cursor: bool,
    /// The rank of a unit for the pool's next worker, lower first; `cursor` is the unit the
    /// cursor points at (the last handed out), `None` for a pool's first worker.
    rank: fn(unit: &PlacementUnit, cursor: Option<usize>) -> u64,
}

const POLICIES: &[Policy] = &[
    Policy {
        placement: Placement::MostFreeMemory,
        shared_cursor: false,
        rank: most_free_memory_first,
    },
    Policy {
        placement: Placement::RoundRobin,
        shared_cursor: true,
        rank: |_, _| 0,
    },
];

/// IIS 8's `MostAvailableMemory`: a pool's first worker goes where memory is most free; the
/// rest continue in unit order from there.
fn most_free_memory_first(unit: &PlacementUnit, cursor: Option<usize>) -> u64 {
    match cursor {
        None => u64::MAX - unit.free_memory,
        Some(_) => 0,
    }
}

/// Plans every pool in order. Pure: the same inputs always give the same plan.
pub fn plan<P: std::borrow::Borrow<PoolSpec>>(
    topology: &Topology,
    pools: &[P],
    already: &[PlacedWorker],
) -> Result<Plan, PlacementError> {
    let online = topology.online_cpus();
    let mut units = Units::of(topology, already);
    // The round-robin cursor shared by all pools: the position of the last unit handed out.
    let mut shared_cursor: Option<usize> = None;
    let mut workers = Vec::new();
    for pool in pools.iter().map(P::borrow) {
        let allowed = allowed_cpus(pool, &online)?;
        let candidates = candidates(pool, units.list(pool.unit), &allowed)?;
        let count = match pool.processes {
            Processes::Auto => candidates.len() as u32,
            Processes::Count(n) => n,
        };
        let Some(policy) = POLICIES.iter().find(|p| p.placement == pool.placement) else {
            workers.extend(place_unhomed(pool, &allowed, count));
            continue;
        };
        let chosen = choose_units(
            pool,
            policy,
            &candidates,
            count,
            &mut units,
            &mut shared_cursor,
        );
        workers.extend(worker_plans(
            topology,
            pool,
            units.list(pool.unit),
            &chosen,
            &allowed,
        ));
    }
    Ok(Plan { workers })
}

/// The pool's `cpus` that are online (all online CPUs without a mask).
fn allowed_cpus(pool: &PoolSpec, online: &CpuSet) -> Result<CpuSet, PlacementError> {
    let allowed = match &pool.cpus {
        Some(mask) => mask.intersection(online),
        None => online.clone(),
    };
    if allowed.is_empty() {
        return Err(PlacementError(format!(
            "pool `{}` has no online CPU to run on",
            pool.name
        )));
    }
    Ok(allowed)
}

/// The units (positions in unit order) whose CPUs meet the pool's allowed CPUs.
fn candidates(
    pool: &PoolSpec,
    unit_list: &[PlacementUnit],
    allowed: &CpuSet,
) -> Result<Vec<usize>, PlacementError> {
    let candidates: Vec<usize> = (0..unit_list.len())
        .filter(|&i| !unit_list[i].cpus.intersection(allowed).is_empty())
        .collect();
    if candidates.is_empty() {
        let what = match pool.unit {
            Unit::L3 => "L3 domain",
            Unit::Node => "NUMA node",
        };
        return Err(PlacementError(format!(
            "pool `{}`: no {what} has CPUs in {allowed}",
            pool.name
        )));
    }
    Ok(candidates)
}

/// `placement = "none"`: no home; every worker may use all of the pool's CPUs.
fn place_unhomed(pool: &PoolSpec, allowed: &CpuSet, count: u32) -> Vec<WorkerPlan> {
    (0..count)
        .map(|index| WorkerPlan {
            pool: pool.name.clone(),
            index,
            node: None,
            l3: None,
            cpus: allowed.clone(),
            threads: allowed.len() as u32,
            affinity: pool.affinity,
            may_widen: false,
            memory_policy: MemoryPolicy::Default,
            memory_nodes: Vec::new(),
        })
        .collect()
}

/// A unit for each of the pool's `count` workers: the fewest workers first (then, for L3
/// units, the fewest on their node), then the policy's rank, then unit order after the cursor.
/// Each choice is counted at once, so the next worker sees it.
fn choose_units(
    pool: &PoolSpec,
    policy: &Policy,
    candidates: &[usize],
    count: u32,
    units: &mut Units,
    shared_cursor: &mut Option<usize>,
) -> Vec<usize> {
    let mut chosen: Vec<usize> = Vec::with_capacity(count as usize);
    let mut pool_cursor: Option<usize> = None;
    for _ in 0..count {
        let cursor = if policy.shared_cursor {
            *shared_cursor
        } else {
            pool_cursor
        };
        let unit_list = units.list(pool.unit);
        let n = unit_list.len();
        let best = candidates
            .iter()
            .copied()
            .min_by_key(|&i| {
                let u = &unit_list[i];
                // Continue in unit order after the cursor, wrapping around.
                let order = cursor.map_or(i, |c| (i + n - c - 1) % n);
                (
                    // The pool's own workers first: `auto` is one per unit, and a pool
                    // spreads over its units before doubling up on one, whatever other
                    // pools put there.
                    chosen.iter().filter(|&&c| c == i).count(),
                    u.workers,
                    units.node_load(u.node),
                    (policy.rank)(u, cursor),
                    order,
                )
            })
            .expect("candidates is not empty");
        let (node, l3) = (unit_list[best].node, unit_list[best].l3);
        units.count(Some(node), l3);
        chosen.push(best);
        pool_cursor = Some(best);
        if policy.shared_cursor {
            *shared_cursor = Some(best);
        }
    }
    chosen
}

/// The plan of each worker on its chosen unit: the unit's allowed CPUs, split by whole cores
/// among this pool's workers that share the unit, and the memory policy on the unit's node.
fn worker_plans(
    topology: &Topology,
    pool: &PoolSpec,
    unit_list: &[PlacementUnit],
    chosen: &[usize],
    allowed: &CpuSet,
) -> Vec<WorkerPlan> {
    chosen
        .iter()
        .enumerate()
        .map(|(index, &u)| {
            let unit = &unit_list[u];
            let unit_cpus = unit.cpus.intersection(allowed);
            let sharing: Vec<usize> = chosen
                .iter()
                .enumerate()
                .filter(|(_, &c)| c == u)
                .map(|(k, _)| k)
                .collect();
            let slot = sharing.iter().position(|&k| k == index).unwrap_or(0);
            let cpus = split_by_core(topology, &unit_cpus, sharing.len(), slot);
            let policy = pool.memory_policy;
            WorkerPlan {
                pool: pool.name.clone(),
                index: index as u32,
                node: Some(unit.node),
                l3: unit.l3,
                threads: cpus.len() as u32,
                cpus,
                affinity: pool.affinity,
                may_widen: pool.affinity == Affinity::Soft,
                memory_policy: policy,
                memory_nodes: if policy == MemoryPolicy::Default {
                    Vec::new()
                } else {
                    vec![unit.node]
                },
            }
        })
        .collect()
}

/// The units of a topology, in order: nodes by id; L3 domains by domain number. Memory-only
/// nodes are not units (nothing can run there).
fn units(t: &Topology, unit: Unit) -> Vec<PlacementUnit> {
    let mem = |node: u32| t.node(node).map_or(0, |n| n.memory_free_bytes);
    match unit {
        Unit::Node => t
            .nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .map(|n| PlacementUnit {
                node: n.id,
                l3: None,
                cpus: n.cpus.clone(),
                free_memory: n.memory_free_bytes,
                workers: 0,
            })
            .collect(),
        Unit::L3 => {
            let domains = t.l3_domains();
            if domains.is_empty() {
                // No cache information: one domain per node.
                return units(t, Unit::Node)
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut u)| {
                        u.l3 = Some(i as u32);
                        u
                    })
                    .collect();
            }
            domains
                .into_iter()
                .filter_map(|(id, cpus)| {
                    let node = t.node_of_cpu(cpus.first()?)?;
                    Some(PlacementUnit {
                        node,
                        l3: Some(id),
                        cpus,
                        free_memory: mem(node),
                        workers: 0,
                    })
                })
                .collect()
        }
    }
}

fn count_worker(
    nodes: &mut [PlacementUnit],
    l3s: &mut [PlacementUnit],
    node: Option<u32>,
    l3: Option<u32>,
) {
    if let Some(n) = node {
        if let Some(u) = nodes.iter_mut().find(|u| u.node == n) {
            u.workers += 1;
        }
    }
    if let Some(d) = l3 {
        if let Some(u) = l3s.iter_mut().find(|u| u.l3 == Some(d)) {
            u.workers += 1;
        }
    }
}

/// Slot `slot` of `parts` equal shares of `cpus`, cut at core boundaries so SMT siblings stay
/// together. With fewer cores than parts, every part gets all of `cpus`.
fn split_by_core(t: &Topology, cpus: &CpuSet, parts: usize, slot: usize) -> CpuSet {
    if parts <= 1 {
        return cpus.clone();
    }
    // Group by core: a core is the set of siblings within `cpus`.
    let mut cores: Vec<CpuSet> = Vec::new();
    for c in cpus.iter() {
        if cores.iter().any(|core| core.contains(c)) {
            continue;
        }
        let siblings = t.cpu(c).map(|x| x.siblings.clone()).unwrap_or_default();
        let mut core = siblings.intersection(cpus);
        core.insert(c);
        cores.push(core);
    }
    if cores.len() < parts {
        return cpus.clone();
    }
    // Spread the remainder over the first slots.
    let base = cores.len() / parts;
    let extra = cores.len() % parts;
    let start = slot * base + slot.min(extra);
    let len = base + usize::from(slot < extra);
    cores[start..start + len]
        .iter()
        .fold(CpuSet::new(), |acc, c| acc.union(c))
}

/// The plan as a table, one row per worker, for `serve --dry-run`.
pub fn render(plan: &Plan) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:>5} {:>5} {:>4} {:<28} {:>7} {:<9} MEMORY",
        "POOL", "INDEX", "NODE", "L3", "CPUS", "THREADS", "AFFINITY"
    );
    for w in &plan.workers {
        let node = w.node.map_or("-".into(), |n| n.to_string());
        let l3 = w.l3.map_or("-".into(), |n| n.to_string());
        let memory = match w.memory_nodes.as_slice() {
            [] => policy_name(w.memory_policy).to_string(),
            nodes => format!(
                "{}:{}",
                policy_name(w.memory_policy),
                nodes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        let affinity = match w.affinity {
            Affinity::Hard => "hard",
            Affinity::Soft => "soft",
        };
        let _ = writeln!(
            out,
            "{:<16} {:>5} {:>5} {:>4} {:<28} {:>7} {:<9} {}",
            w.pool,
            w.index,
            node,
            l3,
            w.cpus.to_string(),
            w.threads,
            affinity,
            memory
        );
    }
    out
}

#[cfg(test)]
mod tests;
