//! The machine's hardware layout: NUMA nodes, logical CPUs, L3 cache domains and NICs.
//!
//! Owns: the plain structs every policy works on ([`Topology`], [`Node`], [`Cpu`], [`Nic`]) and
//! the pure parsers for the sysfs/procfs text formats they come from. Like HAProxy's
//! `cpu_topo.c`, the machine is read once into these structs; placement and the NIC planner are
//! small functions over them.
//! Must not touch: the file system (that is [`sysfs`]) or any syscall.

pub mod nearest;
pub mod render;
pub mod sysfs;

use crate::cpuset::CpuSet;
use serde::Serialize;

pub use sysfs::{read, SysfsPaths};

/// One NUMA node. Memory-only nodes have an empty `cpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub id: u32,
    /// Online CPUs of this node.
    pub cpus: CpuSet,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
    /// SLIT distances to every node, in the order of [`Topology::nodes`].
    pub distances: Vec<u32>,
}

/// One logical CPU (a hardware thread).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cpu {
    pub id: u32,
    pub online: bool,
    /// The NUMA node, when known (offline CPUs may not say).
    pub node: Option<u32>,
    /// Physical package (socket), from `topology/physical_package_id`; unknown when offline.
    pub package: Option<u32>,
    /// Core id within its package, from `topology/core_id`.
    pub core: Option<u32>,
    /// SMT siblings including this CPU (`topology/thread_siblings_list`).
    pub siblings: CpuSet,
    /// The L3 cache domain, numbered 0.. in order of each domain's lowest CPU.
    pub l3: Option<u32>,
}

/// An interrupt line of a NIC, with its current CPU affinity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Irq {
    pub irq: u32,
    pub name: String,
    pub affinity: CpuSet,
}

/// A network interface and where it is wired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    pub name: String,
    /// The NUMA node of the device (`device/numa_node`); `None` when absent or -1.
    pub node: Option<u32>,
    pub rx_queues: u32,
    pub tx_queues: u32,
    /// True for interfaces with no device behind them (loopback, veth, bridges).
    #[serde(rename = "virtual")]
    pub is_virtual: bool,
    /// The interrupts found for this NIC; empty when procfs was not read.
    pub irqs: Vec<Irq>,
}

/// The whole machine as read from sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// Nodes in ascending id order; ids need not be contiguous.
    pub nodes: Vec<Node>,
    /// Every CPU the kernel knows of (possible/present), online or not, in id order.
    pub cpus: Vec<Cpu>,
    pub nics: Vec<Nic>,
}

impl Topology {
    /// The machine as a process confined to `allowed` sees it (its cpuset or affinity: a
    /// container's, `taskset`'s, systemd's `CPUAffinity=`): CPUs outside it count as offline,
    /// so placement uses only CPUs the process may run on. Nodes keep their memory.
    pub fn confined_to(mut self, allowed: &CpuSet) -> Topology {
        for c in &mut self.cpus {
            c.online &= allowed.contains(c.id);
        }
        for n in &mut self.nodes {
            n.cpus = n.cpus.intersection(allowed);
        }
        self
    }

    /// All online CPUs.
    pub fn online_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.id)
            .collect()
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn cpu(&self, id: u32) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    /// The kernel's distance from node `a` to node `b` (10 = local); without a table, 10 to
    /// itself and 20 to any other.
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        let to = self.nodes.iter().position(|n| n.id == b);
        match (self.node(a), to) {
            (Some(n), Some(k)) => n.distances.get(k).copied().unwrap_or(20),
            _ if a == b => 10,
            _ => 20,
        }
    }

    /// The node a CPU belongs to, if known.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpu(cpu).and_then(|c| c.node)
    }

    /// Online CPUs grouped by L3 domain, in domain order. CPUs with no L3 information each
    /// form no domain; a machine with no L3 data at all yields one domain per node.
    pub fn l3_domains(&self) -> Vec<(u32, CpuSet)> {
        let mut domains: Vec<(u32, CpuSet)> = Vec::new();
        for c in self.cpus.iter().filter(|c| c.online) {
            if let Some(l3) = c.l3 {
                match domains.iter_mut().find(|(id, _)| *id == l3) {
                    Some((_, set)) => set.insert(c.id),
                    None => domains.push((l3, CpuSet::from_ids([c.id]))),
                }
            }
        }
        domains.sort_by_key(|(id, _)| *id);
        domains
    }

    /// Number of distinct packages among online CPUs.
    pub fn packages(&self) -> usize {
        let mut p: Vec<u32> = self.cpus.iter().filter_map(|c| c.package).collect();
        p.sort_unstable();
        p.dedup();
        p.len()
    }

    /// True when some online CPU has more than one hardware thread.
    pub fn smt(&self) -> bool {
        self.cpus.iter().any(|c| c.online && c.siblings.len() > 1)
    }
}

/// Memory figures of one node, from `nodeN/meminfo` (`Node 0 MemTotal:  3893024 kB`) or the
/// whole machine's `/proc/meminfo` (`MemTotal:  3893024 kB`). Returns (total, free) in bytes.
pub fn parse_meminfo(text: &str) -> (u64, u64) {
    let mut total = 0;
    let mut free = 0;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        // Skip the "Node N" prefix when present.
        let key = loop {
            match fields.next() {
                Some("Node") => {
                    fields.next();
                }
                Some(k) => break k,
                None => break "",
            }
        };
        let value: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let bytes = match fields.next() {
            Some("kB") => value.saturating_mul(1024),
            _ => value,
        };
        match key {
            "MemTotal:" => total = bytes,
            "MemFree:" => free = bytes,
            _ => {}
        }
    }
    (total, free)
}

/// A node's `distance` file: whitespace-separated integers.
pub fn parse_distances(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// One line of `/proc/interrupts` for a numbered IRQ: its number and action name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptLine {
    pub irq: u32,
    pub name: String,
}

/// Parses `/proc/interrupts`, keeping numbered IRQs (not NMI, LOC, …) with their action name
/// (the last column, such as `virtio2-input.0` or `eth0-TxRx-3`).
pub fn parse_interrupts(text: &str) -> Vec<InterruptLine> {
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |h| h.split_whitespace().count());
    let mut out = Vec::new();
    for line in lines {
        let Some((num, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Ok(irq) = num.parse::<u32>() else {
            continue;
        };
        // After the per-CPU counts come the chip name, the hw irq and the action names.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let name = fields.get(ncpus..).map_or(String::new(), |tail| {
            tail.last().copied().unwrap_or_default().to_string()
        });
        out.push(InterruptLine { irq, name });
    }
    out
}

/// Whether an interrupt action name belongs to a NIC named `iface` whose device is `device`
/// (the basename of `class/net/IFACE/device`, such as `virtio2` or `0000:03:00.0`).
pub fn irq_belongs_to(name: &str, iface: &str, device: Option<&str>) -> bool {
    let owned_by = |prefix: &str| {
        name == prefix
            || name
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(['-', '@', '_']))
    };
    owned_by(iface) || device.is_some_and(|d| owned_by(d) || name.ends_with(&format!("@pci:{d}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_of_node_and_machine() {
        let node = "Node 0 MemTotal:        3893024 kB\nNode 0 MemFree:         3340812 kB\n";
        assert_eq!(parse_meminfo(node), (3893024 * 1024, 3340812 * 1024));
        let machine = "MemTotal:  100 kB\nMemFree:  40 kB\nMemAvailable: 60 kB\n";
        assert_eq!(parse_meminfo(machine), (102400, 40960));
        assert_eq!(parse_meminfo("garbage\n\n:::"), (0, 0));
    }

    #[test]
    fn interrupts_keep_numbered_lines_and_names() {
        let text = "           CPU0       CPU1\n 38:          0        250 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\nNMI:  0 0 Non-maskable interrupts\n";
        let l = parse_interrupts(text);
        assert_eq!(
            l,
            vec![InterruptLine {
                irq: 38,
                name: "virtio2-input.0".into()
            }]
        );
    }

    #[test]
    fn irq_ownership_by_iface_or_device() {
        assert!(irq_belongs_to("eth0-TxRx-3", "eth0", None));
        assert!(irq_belongs_to("virtio2-input.0", "eth0", Some("virtio2")));
        assert!(irq_belongs_to(
            "mlx5_comp3@pci:0000:03:00.0",
            "ens1f0",
            Some("0000:03:00.0")
        ));
        assert!(!irq_belongs_to("eth10-TxRx-0", "eth1", None));
        assert!(!irq_belongs_to("virtio20-input.0", "eth0", Some("virtio2")));
    }
}

#[cfg(test)]
mod fixture_tests;
