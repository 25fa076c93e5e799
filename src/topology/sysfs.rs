//! Reads a [`Topology`] from a sysfs tree (and optionally a procfs tree).
//!
//! Owns: which files are read and how missing ones are treated. The default root is the live
//! `/sys` and `/proc`; tests and `--sysfs DIR` point it at a fixture tree with the same layout.
//! Must not touch: interpretation beyond the file formats (that is the parent module's pure
//! parsers), and any write.

use super::{
    irq_belongs_to, parse_distances, parse_interrupts, parse_meminfo, Cpu, Irq, Nic, Node, Topology,
};
use crate::cpuset::CpuSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where to read from.
#[derive(Debug, Clone)]
pub struct SysfsPaths {
    /// The sysfs root, holding `devices/system/{node,cpu}` and `class/net`.
    pub sysfs: PathBuf,
    /// The procfs root (for `interrupts`, `irq/N/smp_affinity_list`, `meminfo`), if any.
    pub procfs: Option<PathBuf>,
}

impl SysfsPaths {
    /// The running machine.
    pub fn live() -> Self {
        SysfsPaths {
            sysfs: "/sys".into(),
            procfs: Some("/proc".into()),
        }
    }

    /// A fixture or another root. Its procfs is `procfs` if given, else a `proc` folder beside
    /// the sysfs root when one exists (fixtures are laid out as `NAME/sys` and `NAME/proc`).
    pub fn at(sysfs: PathBuf, procfs: Option<PathBuf>) -> Self {
        let procfs = procfs.or_else(|| {
            let sibling = sysfs.parent()?.join("proc");
            sibling.is_dir().then_some(sibling)
        });
        SysfsPaths { sysfs, procfs }
    }
}

/// Why the topology could not be read.
#[derive(Debug)]
pub struct TopologyError(pub String);

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TopologyError {}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_u32(path: &Path) -> Option<u32> {
    read_trim(path)?.parse().ok()
}

fn read_cpuset(path: &Path) -> Option<CpuSet> {
    CpuSet::parse(&read_trim(path)?).ok()
}

/// Entries of `dir` named `PREFIX<number>`, as sorted numbers.
fn numbered_entries(dir: &Path, prefix: &str) -> io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Reads the whole machine. Fails only when there is no CPU information at all; everything
/// else that is missing is reported as unknown.
pub fn read(paths: &SysfsPaths) -> Result<Topology, TopologyError> {
    let cpu_dir = paths.sysfs.join("devices/system/cpu");
    let cpu_ids = numbered_entries(&cpu_dir, "cpu").map_err(|e| {
        TopologyError(format!(
            "cannot read {}: {e} (is --sysfs pointing at a sysfs root?)",
            cpu_dir.display()
        ))
    })?;
    if cpu_ids.is_empty() {
        return Err(TopologyError(format!(
            "{} lists no cpuN entries",
            cpu_dir.display()
        )));
    }
    let online_list = read_cpuset(&cpu_dir.join("online"));

    let mut cpus: Vec<Cpu> = cpu_ids
        .iter()
        .map(|&id| read_cpu(&cpu_dir.join(format!("cpu{id}")), id, online_list.as_ref()))
        .collect();
    number_l3_domains(&mut cpus, &cpu_dir);

    let node_dir = paths.sysfs.join("devices/system/node");
    let mut nodes = Vec::new();
    match numbered_entries(&node_dir, "node") {
        Ok(ids) if !ids.is_empty() => {
            for id in ids {
                let d = node_dir.join(format!("node{id}"));
                let (total, free) = fs::read_to_string(d.join("meminfo"))
                    .map(|t| parse_meminfo(&t))
                    .unwrap_or((0, 0));
                let listed = read_cpuset(&d.join("cpulist")).unwrap_or_default();
                nodes.push(Node {
                    id,
                    cpus: listed,
                    memory_total_bytes: total,
                    memory_free_bytes: free,
                    distances: read_trim(&d.join("distance"))
                        .map(|t| parse_distances(&t))
                        .unwrap_or_default(),
                });
            }
        }
        // No NUMA support compiled in: one node holding every online CPU and all memory.
        _ => {
            let (total, free) = paths
                .procfs
                .as_ref()
                .and_then(|p| fs::read_to_string(p.join("meminfo")).ok())
                .map(|t| parse_meminfo(&t))
                .unwrap_or((0, 0));
            nodes.push(Node {
                id: 0,
                cpus: cpus.iter().filter(|c| c.online).map(|c| c.id).collect(),
                memory_total_bytes: total,
                memory_free_bytes: free,
                distances: vec![10],
            });
        }
    }

    // A CPU's node: the node whose cpulist holds it, else the `nodeN` link in its own folder
    // (the only record for offline CPUs on some kernels).
    for cpu in &mut cpus {
        cpu.node = nodes
            .iter()
            .find(|n| n.cpus.contains(cpu.id))
            .map(|n| n.id)
            .or_else(|| {
                numbered_entries(&cpu_dir.join(format!("cpu{}", cpu.id)), "node")
                    .ok()?
                    .first()
                    .copied()
            });
    }
    // Node cpulists may still name CPUs that went offline; keep only online ones.
    for node in &mut nodes {
        node.cpus = node
            .cpus
            .iter()
            .filter(|&c| cpus.iter().any(|x| x.id == c && x.online))
            .collect();
    }
    if nodes.len() == 1 && nodes[0].cpus.is_empty() {
        nodes[0].cpus = cpus.iter().filter(|c| c.online).map(|c| c.id).collect();
        for cpu in cpus.iter_mut().filter(|c| c.online) {
            cpu.node = Some(nodes[0].id);
        }
    }

    let nics = read_nics(paths);
    Ok(Topology { nodes, cpus, nics })
}

fn read_cpu(dir: &Path, id: u32, online_list: Option<&CpuSet>) -> Cpu {
    let topo = dir.join("topology");
    // Offline CPUs have no topology/ folder; `cpu/online` is the authority when present.
    let online = match online_list {
        Some(list) => list.contains(id),
        None => match read_trim(&dir.join("online")) {
            Some(v) => v == "1",
            None => topo.is_dir(),
        },
    };
    if !online {
        return Cpu {
            id,
            online,
            node: None,
            package: None,
            core: None,
            siblings: CpuSet::new(),
            l3: None,
        };
    }
    Cpu {
        id,
        online,
        node: None,
        package: read_u32(&topo.join("physical_package_id")),
        core: read_u32(&topo.join("core_id")),
        siblings: read_cpuset(&topo.join("thread_siblings_list"))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| CpuSet::from_ids([id])),
        l3: None,
    }
}

/// Gives each online CPU the number of its L3 domain: the `cache/indexK` whose `level` is 3
/// names the CPUs sharing it; domains are numbered in order of their lowest CPU.
fn number_l3_domains(cpus: &mut [Cpu], cpu_dir: &Path) {
    let mut domains: Vec<CpuSet> = Vec::new();
    for cpu in cpus.iter().filter(|c| c.online) {
        let cache = cpu_dir.join(format!("cpu{}/cache", cpu.id));
        let Ok(indexes) = numbered_entries(&cache, "index") else {
            continue;
        };
        for k in indexes {
            let idx = cache.join(format!("index{k}"));
            if read_u32(&idx.join("level")) == Some(3) {
                if let Some(shared) = read_cpuset(&idx.join("shared_cpu_list")) {
                    if !domains.contains(&shared) {
                        domains.push(shared);
                    }
                }
            }
        }
    }
    domains.sort_by_key(|d| d.first());
    for cpu in cpus.iter_mut().filter(|c| c.online) {
        cpu.l3 = domains
            .iter()
            .position(|d| d.contains(cpu.id))
            .map(|i| i as u32);
    }
}

fn read_nics(paths: &SysfsPaths) -> Vec<Nic> {
    let net = paths.sysfs.join("class/net");
    let Ok(entries) = fs::read_dir(&net) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let interrupts = paths
        .procfs
        .as_ref()
        .and_then(|p| fs::read_to_string(p.join("interrupts")).ok())
        .map(|t| parse_interrupts(&t))
        .unwrap_or_default();

    let mut nics = Vec::new();
    for name in names {
        let dir = net.join(&name);
        let device = dir.join("device");
        let is_virtual = !device.exists();
        // -1 (and absence) mean the firmware did not say; keep it unknown.
        let node = read_trim(&device.join("numa_node"))
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(|v| u32::try_from(v).ok());
        let (rx, tx) = count_queues(&dir.join("queues"));
        let device_name = fs::canonicalize(&device)
            .ok()
            .and_then(|p| p.file_name()?.to_str().map(str::to_string))
            .filter(|n| n != "device");
        let irqs = if is_virtual {
            Vec::new()
        } else {
            interrupts
                .iter()
                .filter(|l| irq_belongs_to(&l.name, &name, device_name.as_deref()))
                .map(|l| Irq {
                    irq: l.irq,
                    name: l.name.clone(),
                    affinity: paths
                        .procfs
                        .as_ref()
                        .and_then(|p| {
                            read_cpuset(&p.join(format!("irq/{}/smp_affinity_list", l.irq)))
                        })
                        .unwrap_or_default(),
                })
                .collect()
        };
        nics.push(Nic {
            name,
            node,
            rx_queues: rx,
            tx_queues: tx,
            is_virtual,
            irqs,
        });
    }
    nics
}

fn count_queues(dir: &Path) -> (u32, u32) {
    let Ok(entries) = fs::read_dir(dir) else {
        return (0, 0);
    };
    let (mut rx, mut tx) = (0, 0);
    for e in entries.filter_map(|e| e.ok()) {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with("rx-") {
            rx += 1;
        } else if n.starts_with("tx-") {
            tx += 1;
        }
    }
    (rx, tx)
}
