//! `espalier nic`: the case study's Set-NetAdapterRSS for Linux. Each NIC's receive-queue
//! interrupts go to CPUs on the NIC's own node — physical cores first, hyper-threads after —
//! its transmit queues get XPS maps to the same CPUs, and RPS spreads receive work only where a
//! NIC has fewer queues than its node has cores. A NIC whose node is unknown is spread over
//! all nodes, and the plan says so.
//!
//! Owns: the plan, a pure function of the topology ([`plan`]), and the files a plan changes
//! ([`changes`]). Applying is [`apply`]: the only code here that writes. Must not touch: the
//! server's placement.

use crate::cpuset::CpuSet;
use crate::topology::{Nic, Topology};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// One queue's CPUs (and, for receive queues, its interrupt when one was found).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueCpus {
    pub queue: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irq: Option<Option<u32>>,
    pub cpus: CpuSet,
}

/// The plan of one NIC.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NicPlan {
    pub name: String,
    pub node: Option<u32>,
    /// Receive queues: their IRQ (if found) and the CPU that should take it.
    pub rx: Vec<QueueCpus>,
    /// Transmit queues: the CPUs whose packets go out on each (XPS).
    pub tx: Vec<QueueCpus>,
    /// Receive packet steering per receive queue; empty when the NIC has enough queues.
    pub rps: Vec<QueueCpus>,
    pub notes: Vec<String>,
}

/// A node's CPUs in the order interrupts should take them: one thread of every core first,
/// then the cores' other hyper-threads.
pub fn cores_first(t: &Topology, cpus: &CpuSet) -> Vec<u32> {
    let mut first = Vec::new();
    let mut later = Vec::new();
    for c in cpus.iter() {
        let siblings = t
            .cpu(c)
            .map(|x| x.siblings.intersection(cpus))
            .unwrap_or_default();
        if siblings.first().is_none_or(|f| f == c) {
            first.push(c);
        } else {
            later.push(c);
        }
    }
    first.extend(later);
    first
}

/// The receive-queue number an interrupt of NIC `iface` serves, from its action name
/// (`eth0-TxRx-3`, `ens1f0-rx-3`, `mlx5_comp3@pci:…`, `virtio2-input.3`; a single-vector NIC's
/// IRQ named just `eth1` serves queue 0); `None` for interrupts that serve no receive queue
/// (transmit-only, configuration, control).
pub fn irq_queue(name: &str, iface: &str) -> Option<u32> {
    if name == iface {
        return Some(0);
    }
    let base = name.split('@').next().unwrap_or(name);
    let base = base.strip_prefix(iface).unwrap_or(base);
    let lower = base.to_ascii_lowercase();
    if [
        "-tx-", "output", "config", "async", "ctrl", "event", "-link",
    ]
    .iter()
    .any(|k| lower.contains(k))
    {
        return None;
    }
    let digits: String = base
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// Plans the NICs named in `only` (all physical NICs when empty; a named virtual one too),
/// keeping interrupts off `reserved` CPUs where the node has others.
pub fn plan(t: &Topology, only: &[String], reserved: &CpuSet) -> Result<Vec<NicPlan>, String> {
    for name in only {
        if !t.nics.iter().any(|n| &n.name == name) {
            let known: Vec<&str> = t.nics.iter().map(|n| n.name.as_str()).collect();
            return Err(format!(
                "no network interface is named `{name}` (this machine has: {})",
                known.join(", ")
            ));
        }
    }
    let chosen: Vec<&Nic> = t
        .nics
        .iter()
        .filter(|n| {
            if only.is_empty() {
                !n.is_virtual
            } else {
                only.contains(&n.name)
            }
        })
        .collect();
    Ok(chosen
        .into_iter()
        .map(|n| plan_one(t, n, reserved))
        .collect())
}

fn plan_one(t: &Topology, nic: &Nic, reserved: &CpuSet) -> NicPlan {
    let mut notes = Vec::new();
    let home: Option<&crate::topology::Node> = nic
        .node
        .and_then(|id| t.node(id))
        .filter(|n| !n.cpus.is_empty());
    let mut order: Vec<u32> = match home {
        Some(node) => cores_first(t, &node.cpus),
        None => {
            notes.push(match nic.node {
                Some(id) => format!("node {id} has no CPUs: spread over all nodes"),
                None => "NUMA node unknown (the firmware does not say): spread over all nodes"
                    .to_string(),
            });
            // One CPU of each node in turn, so no node takes all the interrupts.
            let per_node: Vec<Vec<u32>> = t
                .nodes
                .iter()
                .filter(|n| !n.cpus.is_empty())
                .map(|n| cores_first(t, &n.cpus))
                .collect();
            let longest = per_node.iter().map(Vec::len).max().unwrap_or(0);
            (0..longest)
                .flat_map(|i| per_node.iter().filter_map(move |l| l.get(i).copied()))
                .collect()
        }
    };
    if !reserved.is_empty() {
        let free: Vec<u32> = order
            .iter()
            .copied()
            .filter(|c| !reserved.contains(*c))
            .collect();
        if free.is_empty() {
            notes.push(format!(
                "every candidate CPU is reserved by a pool ({reserved}); using them anyway"
            ));
        } else {
            order = free;
        }
    }
    let cpu_at = |i: usize| CpuSet::from_ids([order[i % order.len()]]);
    // Map each receive queue to its interrupt by the queue number in the IRQ's name.
    let mut rx_irq: Vec<Option<u32>> = vec![None; nic.rx_queues as usize];
    for irq in &nic.irqs {
        if let Some(q) = irq_queue(&irq.name, &nic.name) {
            if let Some(slot) = rx_irq.get_mut(q as usize).filter(|s| s.is_none()) {
                *slot = Some(irq.irq);
            }
        }
    }
    if !nic.irqs.is_empty() && rx_irq.iter().all(Option::is_none) {
        notes.push("interrupts found but none could be matched to a receive queue by name".into());
    }
    let rx: Vec<QueueCpus> = (0..nic.rx_queues)
        .map(|q| QueueCpus {
            queue: q,
            irq: Some(rx_irq[q as usize]),
            cpus: cpu_at(q as usize),
        })
        .collect();
    // XPS: every candidate CPU sends on one queue, queue q taking CPUs q, q + tx, q + 2·tx, …
    // A single transmit queue has nothing to choose (and the kernel has no xps_cpus for it).
    let tx_queues = if nic.tx_queues > 1 { nic.tx_queues } else { 0 };
    let tx: Vec<QueueCpus> = (0..tx_queues)
        .map(|q| QueueCpus {
            queue: q,
            irq: None,
            cpus: order
                .iter()
                .enumerate()
                .filter(|(i, _)| *i as u32 % tx_queues == q)
                .map(|(_, &c)| c)
                .collect(),
        })
        .filter(|q| !q.cpus.is_empty())
        .collect();
    let cores = order
        .iter()
        .filter(|&&c| {
            t.cpu(c)
                .is_none_or(|x| x.siblings.first().is_none_or(|f| f == c))
        })
        .count() as u32;
    let rps = if nic.rx_queues > 0 && nic.rx_queues < cores {
        notes.push(format!("{} receive queue(s) for {cores} cores: RPS spreads the rest of the receive work over the node", nic.rx_queues));
        let all: CpuSet = order.iter().copied().collect();
        (0..nic.rx_queues)
            .map(|q| QueueCpus {
                queue: q,
                irq: None,
                cpus: all.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    NicPlan {
        name: nic.name.clone(),
        node: nic.node,
        rx,
        tx,
        rps,
        notes,
    }
}

/// The plan as a table.
pub fn render(plans: &[NicPlan]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for p in plans {
        let node = p.node.map_or("unknown".to_string(), |n| n.to_string());
        let _ = writeln!(
            out,
            "{} (node {node}): {} rx queue(s), {} with XPS",
            p.name,
            p.rx.len(),
            p.tx.len()
        );
        for n in &p.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        for q in &p.rx {
            let irq = q
                .irq
                .flatten()
                .map_or("no irq".to_string(), |i| format!("irq {i}"));
            let _ = writeln!(out, "  rx-{:<4} {:<10} -> CPU {}", q.queue, irq, q.cpus);
        }
        for q in &p.tx {
            let _ = writeln!(out, "  tx-{:<4} {:<10} <- CPUs {}", q.queue, "xps", q.cpus);
        }
        for q in &p.rps {
            let _ = writeln!(out, "  rx-{:<4} {:<10} -> CPUs {}", q.queue, "rps", q.cpus);
        }
    }
    out
}

/// One file a plan writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub path: PathBuf,
    pub value: String,
}

/// The files a plan writes, with the values it writes (IRQ affinity as a cpu-list, RPS/XPS as
/// the hexadecimal masks those files take).
pub fn changes(plans: &[NicPlan], sysfs: &Path, procfs: &Path) -> Vec<Change> {
    let mut out = Vec::new();
    for p in plans {
        for q in &p.rx {
            if let Some(Some(irq)) = q.irq {
                out.push(Change {
                    path: procfs.join(format!("irq/{irq}/smp_affinity_list")),
                    value: q.cpus.to_string(),
                });
            }
        }
        for q in &p.rps {
            out.push(Change {
                path: sysfs.join(format!(
                    "class/net/{}/queues/rx-{}/rps_cpus",
                    p.name, q.queue
                )),
                value: q.cpus.to_mask(),
            });
        }
        for q in &p.tx {
            out.push(Change {
                path: sysfs.join(format!(
                    "class/net/{}/queues/tx-{}/xps_cpus",
                    p.name, q.queue
                )),
                value: q.cpus.to_mask(),
            });
        }
    }
    out
}

/// What applying did to one file.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub path: PathBuf,
    pub old: String,
    pub new: String,
    /// The shell command that puts the old value back.
    pub undo: String,
    pub error: Option<String>,
}

/// Writes each change (unless `dry_run`), reading the old value first so it can be undone.
pub fn apply(changes: &[Change], dry_run: bool) -> Vec<Applied> {
    changes
        .iter()
        .map(|c| {
            let old = std::fs::read_to_string(&c.path)
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            let undo = format!(
                "echo {} > {}",
                if old.is_empty() { "0" } else { &old },
                c.path.display()
            );
            let error = if dry_run {
                None
            } else {
                std::fs::write(&c.path, format!("{}\n", c.value))
                    .err()
                    .map(|e| e.to_string())
            };
            Applied {
                path: c.path.clone(),
                old,
                new: c.value.clone(),
                undo,
                error,
            }
        })
        .collect()
}

/// Whether irqbalance runs (it would move the interrupts back): a `comm` of `irqbalance` under
/// procfs.
pub fn irqbalance_running(procfs: &Path) -> bool {
    std::fs::read_dir(procfs).ok().is_some_and(|d| {
        d.filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .any(|e| {
                std::fs::read_to_string(e.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "irqbalance")
            })
    })
}

#[cfg(test)]
mod tests;
