//! Control groups for pools: a CPU cap (`cpu_limit`) and, for hard-affinity workers, a cpuset
//! holding exactly the worker's CPUs and home node (so the kernel itself keeps them there, and
//! `Mems_allowed_list` shows the node).
//!
//! cgroup v2's `cpu.max` where the unified hierarchy has the cpu controller; v1's
//! `cpu.cfs_quota_us` (with `cpuacct` for accounting) where only v1 mounts it — the case on
//! machines without systemd, like this project's development VMs. Groups are made under
//! `espalier-<master pid>/` so several servers never share one, and removed when the master
//! stops. Owns: those files. Must not touch: policy (the master decides what to limit).

use crate::cpuset::CpuSet;
use std::path::{Path, PathBuf};

/// The CFS period used for quotas: 100 ms, the kernel's default.
pub const PERIOD_US: u64 = 100_000;

/// Which cgroup interface this machine offers for the cpu controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// A unified (v2) hierarchy at this root whose `cgroup.controllers` lists `cpu`.
    V2 { root: PathBuf },
    /// v1 controllers mounted separately (each `None` when absent).
    V1 {
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
        cpuset: Option<PathBuf>,
    },
}

/// Finds the cgroup interface under `base` (normally `/sys/fs/cgroup`).
pub fn detect(base: &Path) -> Option<Hierarchy> {
    let has_cpu = |dir: &Path| {
        std::fs::read_to_string(dir.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "cpu"))
    };
    for root in [base.to_path_buf(), base.join("unified")] {
        if has_cpu(&root) {
            return Some(Hierarchy::V2 { root });
        }
    }
    let v1 = |name: &str, probe: &str| Some(base.join(name)).filter(|d| d.join(probe).exists());
    let h = Hierarchy::V1 {
        cpu: v1("cpu", "cpu.cfs_quota_us"),
        cpuacct: v1("cpuacct", "cpuacct.usage"),
        cpuset: v1("cpuset", "cpuset.cpus"),
    };
    match &h {
        Hierarchy::V1 {
            cpu: None,
            cpuacct: None,
            cpuset: None,
        } => None,
        _ => Some(h),
    }
}

/// The quota for a fraction of one CPU: `0.25` → 25 ms per 100 ms period.
pub fn quota_us(fraction_of_one_cpu: f64) -> u64 {
    ((fraction_of_one_cpu * PERIOD_US as f64).round() as u64).max(1000)
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A group made for a pool or a worker: the directories a process joins.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub dirs: Vec<PathBuf>,
    /// Where its CPU use is accounted (`cpuacct.usage` in ns, or v2 `cpu.stat` usage_usec).
    pub accounting: Option<PathBuf>,
}

impl Group {
    /// Moves process `pid` (all its threads) into the group.
    pub fn attach(&self, pid: u32) -> Result<(), String> {
        for d in &self.dirs {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// CPU time used by the group's processes, in nanoseconds.
    pub fn usage_ns(&self) -> Option<u64> {
        let path = self.accounting.as_ref()?;
        let text = std::fs::read_to_string(path).ok()?;
        if path.ends_with("cpuacct.usage") {
            text.trim().parse().ok()
        } else {
            text.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|us| us * 1000)
        }
    }

    /// Removes the group's directories (they must be empty of processes).
    pub fn remove(&self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The parent directory of this master's groups in `hierarchy_root`.
fn parent(hierarchy_root: &Path) -> PathBuf {
    hierarchy_root.join(format!("espalier-{}", std::process::id()))
}

/// Makes a pool's CPU-capped group: `cpu_limit` as a fraction of one CPU, over all of the
/// pool's workers together.
pub fn cpu_limited(h: &Hierarchy, pool: &str, fraction: f64) -> Result<Group, String> {
    let quota = quota_us(fraction);
    match h {
        Hierarchy::V2 { root } => {
            // The cpu controller must be enabled for children at each level.
            let _ = write(&root.join("cgroup.subtree_control"), "+cpu");
            let p = parent(root);
            std::fs::create_dir_all(&p)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            write(&p.join("cgroup.subtree_control"), "+cpu")?;
            let dir = p.join(pool);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            Ok(Group {
                accounting: Some(dir.join("cpu.stat")),
                dirs: vec![dir],
            })
        }
        Hierarchy::V1 { cpu, cpuacct, .. } => {
            let cpu = cpu.as_ref().ok_or("the cpu controller is not mounted")?;
            let dir = parent(cpu).join(pool);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            let mut g = Group {
                dirs: vec![dir],
                accounting: None,
            };
            if let Some(acct) = cpuacct {
                let a = parent(acct).join(pool);
                if std::fs::create_dir_all(&a).is_ok() {
                    g.accounting = Some(a.join("cpuacct.usage"));
                    g.dirs.push(a);
                }
            }
            Ok(g)
        }
    }
}

/// Makes a worker's cpuset group (v1 cpuset): exactly `cpus` and memory `nodes`.
pub fn cpuset(h: &Hierarchy, name: &str, cpus: &CpuSet, nodes: &[u32]) -> Result<Group, String> {
    let Hierarchy::V1 {
        cpuset: Some(root), ..
    } = h
    else {
        return Err("no cpuset controller mounted".into());
    };
    let p = parent(root);
    if !p.exists() {
        std::fs::create_dir_all(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        // A v1 cpuset child starts empty: it must be given CPUs and memory before use.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            let v = std::fs::read_to_string(root.join(f)).map_err(|e| e.to_string())?;
            write(&p.join(f), v.trim())?;
        }
    }
    let dir = p.join(name);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    write(&dir.join("cpuset.cpus"), &cpus.to_string())?;
    write(
        &dir.join("cpuset.mems"),
        &nodes
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(","),
    )?;
    Ok(Group {
        dirs: vec![dir],
        accounting: None,
    })
}

/// Removes this master's parent directories (after every group in them is gone).
pub fn remove_parents(h: &Hierarchy) {
    let roots: Vec<&PathBuf> = match h {
        Hierarchy::V2 { root } => vec![root],
        Hierarchy::V1 {
            cpu,
            cpuacct,
            cpuset,
        } => [cpu, cpuacct, cpuset].into_iter().flatten().collect(),
    };
    for r in roots {
        let _ = std::fs::remove_dir(parent(r));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas() {
        assert_eq!(quota_us(0.25), 25_000);
        assert_eq!(quota_us(2.0), 200_000);
        assert_eq!(quota_us(0.001), 1000, "the kernel's minimum is 1 ms");
    }

    #[test]
    fn v2_against_a_fixture_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        let h = detect(dir.path()).unwrap();
        assert_eq!(
            h,
            Hierarchy::V2 {
                root: dir.path().to_path_buf()
            }
        );
        let g = cpu_limited(&h, "shop", 0.5).unwrap();
        let group = dir
            .path()
            .join(format!("espalier-{}/shop", std::process::id()));
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.max")).unwrap(),
            "50000 100000"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(),
            "+cpu"
        );
        g.attach(4242).unwrap();
        assert_eq!(
            std::fs::read_to_string(group.join("cgroup.procs")).unwrap(),
            "4242"
        );
        std::fs::write(group.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
        assert_eq!(g.usage_ns(), Some(1_500_000));
    }

    #[test]
    fn v1_detection_and_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(detect(dir.path()), None);
        std::fs::create_dir_all(dir.path().join("cpu")).unwrap();
        std::fs::write(dir.path().join("cpu/cpu.cfs_quota_us"), "-1").unwrap();
        assert!(matches!(
            detect(dir.path()),
            Some(Hierarchy::V1 {
                cpu: Some(_),
                cpuacct: None,
                cpuset: None
            })
        ));
    }
}
