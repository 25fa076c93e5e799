//! Human-readable rendering of a [`Topology`] for `espalier topology`.
//!
//! Owns: the table layout. Must not touch: how the topology is read or decided.

use super::Topology;
use crate::cpuset::CpuSet;
use crate::units::format_bytes;
use std::fmt::Write;

/// The table printed by `espalier topology` without `--json`.
pub fn table(t: &Topology) -> String {
    let mut out = String::new();
    let online = t.online_cpus();
    let offline: CpuSet = t.cpus.iter().filter(|c| !c.online).map(|c| c.id).collect();
    let _ = writeln!(
        out,
        "machine: {} NUMA node(s), {} package(s), {} online CPU(s){}{}, {} L3 domain(s)",
        t.nodes.len(),
        t.packages(),
        online.len(),
        if offline.is_empty() {
            String::new()
        } else {
            format!(" ({offline} offline)")
        },
        if t.smt() { ", SMT on" } else { "" },
        t.l3_domains().len(),
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<6} {:<24} {:>12} {:>12}  DISTANCES",
        "NODE", "CPUS", "MEM TOTAL", "MEM FREE"
    );
    for n in &t.nodes {
        let cpus = if n.cpus.is_empty() {
            "(memory only)".to_string()
        } else {
            n.cpus.to_string()
        };
        let _ = writeln!(
            out,
            "{:<6} {:<24} {:>12} {:>12}  {}",
            n.id,
            cpus,
            format_bytes(n.memory_total_bytes),
            format_bytes(n.memory_free_bytes),
            n.distances
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<6} {:<8} {:<6} {:<8} {:<6} {:<12} L3",
        "CPU", "ONLINE", "NODE", "PACKAGE", "CORE", "SIBLINGS"
    );
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    for c in &t.cpus {
        let _ = writeln!(
            out,
            "{:<6} {:<8} {:<6} {:<8} {:<6} {:<12} {}",
            c.id,
            if c.online { "yes" } else { "no" },
            opt(c.node),
            opt(c.package),
            opt(c.core),
            if c.siblings.is_empty() {
                "-".to_string()
            } else {
                c.siblings.to_string()
            },
            opt(c.l3)
        );
    }
    if !t.nics.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>4} {:>4}  IRQS (numbers) on CPUs",
            "NIC", "NODE", "RX", "TX"
        );
        for n in &t.nics {
            let node = match (n.node, n.is_virtual) {
                (Some(id), _) => id.to_string(),
                (None, true) => "virtual".to_string(),
                (None, false) => "unknown".to_string(),
            };
            let irqs = if n.irqs.is_empty() {
                "-".to_string()
            } else {
                let numbers: CpuSet = n.irqs.iter().map(|i| i.irq).collect();
                let on = n
                    .irqs
                    .iter()
                    .fold(CpuSet::new(), |acc, i| acc.union(&i.affinity));
                format!("{} ({numbers}) on CPUs {on}", n.irqs.len())
            };
            let _ = writeln!(
                out,
                "{:<16} {:<8} {:>4} {:>4}  {}",
                n.name, node, n.rx_queues, n.tx_queues, irqs
            );
        }
    }
    out
}
