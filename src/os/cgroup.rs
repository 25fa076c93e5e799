//! Control groups for pools: a CPU cap (`cpu_limit`), a memory cap (`memory_limit`) and a
//! cap on processes (`pids_limit`) and, for hard-affinity workers, a cpuset
//! holding exactly the worker's CPUs and home node (so the kernel itself keeps them there, and
//! `Mems_allowed_list` shows the node).
//!
//! cgroup v2 (the unified hierarchy most distributions mount alone): `cpu.max`, `cpu.stat` and
//! `cpuset.cpus`/`cpuset.mems`, under the master's *own* cgroup as `/proc/self/cgroup` names it
//! — a systemd service with `Delegate=yes` owns that subtree, and writing anywhere else would
//! need more than it was given. v2 lets a cgroup that hands controllers to its children hold
//! no processes (but the root), so a master below the root first moves itself into a leaf
//! (`espalier-master-<pid>`) beside its groups. A process is in one v2 group only: a
//! hard-affinity worker of a CPU-capped pool gets its cpuset as a child of the pool's group.
//! cgroup v1 where only v1 mounts the controllers — machines without systemd, like this
//! project's development VMs: `cpu.cfs_quota_us` (with `cpuacct` for accounting),
//! `memory.limit_in_bytes`, `pids.max` and the `cpuset` hierarchy. Groups are made under `espalier-<master pid>/` so several servers never
//! share one, and removed when the master stops. Owns: those files. Must not touch: policy
//! (the master decides what to limit).

use crate::cpuset::CpuSet;
use std::path::{Path, PathBuf};

/// The CFS period used for quotas: 100 ms, the kernel's default.
pub const PERIOD_US: u64 = 100_000;

/// Which cgroup interface this machine offers for the cpu and cpuset controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// A unified (v2) hierarchy mounted at `root`; `base` is the master's own cgroup in it
    /// (its delegated subtree), whose `cgroup.controllers` lists these.
    V2 {
        root: PathBuf,
        base: PathBuf,
        cpu: bool,
        cpuset: bool,
        /// The memory, pids and io controllers (`memory_limit`, `pids_limit`, `io_weight`).
        memory: bool,
        pids: bool,
        io: bool,
    },
    /// v1 controllers mounted separately (each `None` when absent).
    V1 {
        cpu: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
        cpuset: Option<PathBuf>,
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        /// The blkio hierarchy, where BFQ gives it weights (`blkio.bfq.weight`).
        blkio: Option<PathBuf>,
    },
}

/// What a pool's group caps, its processes together: CPU as a fraction of one CPU, memory in
/// bytes, processes and threads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolLimits {
    pub cpu: Option<f64>,
    pub memory: Option<u64>,
    /// Swap, beyond `memory` (with it).
    pub swap: Option<u64>,
    pub pids: Option<u64>,
    /// The pool's share of disk time against others (1–10 000, 100 the default's).
    pub io_weight: Option<u32>,
}

/// Finds the cgroup interface under `base` (normally `/sys/fs/cgroup`), for this process.
pub fn detect(base: &Path) -> Option<Hierarchy> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    detect_for(base, &own)
}

/// As [`detect`], for a process whose `/proc/PID/cgroup` reads `own`.
pub fn detect_for(base: &Path, own: &str) -> Option<Hierarchy> {
    // The unified hierarchy's line is `0::/path`.
    let own_v2 = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("/")
        .trim()
        .trim_start_matches('/');
    for root in [base.to_path_buf(), base.join("unified")] {
        let dir = root.join(own_v2);
        let Ok(list) = std::fs::read_to_string(dir.join("cgroup.controllers")) else {
            continue;
        };
        let has = |c: &str| list.split_whitespace().any(|x| x == c);
        if ["cpu", "cpuset", "memory", "pids", "io"]
            .iter()
            .any(|c| has(c))
        {
            return Some(Hierarchy::V2 {
                root,
                base: dir,
                cpu: has("cpu"),
                cpuset: has("cpuset"),
                memory: has("memory"),
                pids: has("pids"),
                io: has("io"),
            });
        }
    }
    let v1 = |name: &str, probe: &str| Some(base.join(name)).filter(|d| d.join(probe).exists());
    let h = Hierarchy::V1 {
        cpu: v1("cpu", "cpu.cfs_quota_us"),
        cpuacct: v1("cpuacct", "cpuacct.usage"),
        cpuset: v1("cpuset", "cpuset.cpus"),
        memory: v1("memory", "memory.limit_in_bytes"),
        // The root of a v1 pids hierarchy has no pids.max (it cannot be capped).
        pids: v1("pids", "cgroup.procs"),
        blkio: v1("blkio", "blkio.bfq.weight"),
    };
    match &h {
        Hierarchy::V1 {
            cpu: None,
            cpuacct: None,
            cpuset: None,
            memory: None,
            pids: None,
            blkio: None,
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
    /// Where the kernel counts its OOM kills (v1 `memory.oom_control`, v2 `memory.events`:
    /// an `oom_kill N` line), with a memory limit.
    pub oom_events: Option<PathBuf>,
    /// Its memory in use now (v2 `memory.current`, v1 `memory.usage_in_bytes`), with a memory
    /// limit; its processes and threads (`pids.current`), with a pids limit.
    pub memory_now: Option<PathBuf>,
    pub pids_now: Option<PathBuf>,
    /// v2: the folder of its pressure files (PSI: `memory.pressure`, `cpu.pressure`,
    /// `io.pressure`); v1 has none per group.
    pub pressure: Option<PathBuf>,
}

/// What a pool's group shows now: memory in bytes, processes and threads, and (v2) the share
/// of the last 10 s some of its tasks stalled on memory, CPU and IO (PSI's `some avg10`, %).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GroupUsage {
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    pub pressure: Option<[f64; 3]>,
    /// Times its memory reached `memory.high` and was throttled and reclaimed (v2's `high`
    /// events), and reached `memory.max` (`max` events), since it was made: cgroup v2 only.
    pub memory_high_events: Option<u64>,
    pub memory_max_events: Option<u64>,
}

/// The number in file `path` (its first word).
fn read_number(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// `some avg10=X` of a PSI file's text.
fn some_avg10(text: &str) -> Option<f64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}

impl Group {
    /// What the group shows now (a figure it does not keep is `None`).
    pub fn usage(&self) -> GroupUsage {
        let pressure = self.pressure.as_ref().and_then(|dir| {
            let avg = |f: &str| some_avg10(&std::fs::read_to_string(dir.join(f)).ok()?);
            Some([
                avg("memory.pressure")?,
                avg("cpu.pressure")?,
                avg("io.pressure").unwrap_or(0.0),
            ])
        });
        let (memory_high_events, memory_max_events) = self.memory_events();
        GroupUsage {
            memory: self.memory_now.as_deref().and_then(read_number),
            pids: self.pids_now.as_deref().and_then(read_number),
            pressure,
            memory_high_events,
            memory_max_events,
        }
    }

    /// (`memory.high` events, `memory.max` events) of [`GroupUsage`], with a memory limit.
    fn memory_events(&self) -> (Option<u64>, Option<u64>) {
        let Some(file) = &self.oom_events else {
            return (None, None);
        };
        // v1's `memory.failcnt` would be the limit's hits, but stays 0 past an OOM kill
        // (Linux 6.18, measured): no count is better than a wrong one.
        if !file.ends_with("memory.events") {
            return (None, None);
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let count = |key: &str| {
            (text.lines())
                .find_map(|l| l.strip_prefix(key))
                .and_then(|n| n.trim().parse().ok())
        };
        (count("high "), count("max "))
    }

    /// Processes of the group the kernel's OOM killer has killed since it was made.
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.oom_events.as_ref()?).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }

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

    /// Removes the group's directories. Processes still in one when the master stops are its
    /// own leftovers — children an application process left behind when it exited (a CGI
    /// script of an HTTP server, say) — and would keep the group, and with a v1 hierarchy
    /// its controller, alive: they are killed, and the removal retried for up to a second.
    pub fn remove(&self) {
        for d in &self.dirs {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                    let _ = super::process::kill(pid, libc::SIGKILL);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

/// The parent directory of this master's groups in `hierarchy_root`.
fn parent(hierarchy_root: &Path) -> PathBuf {
    hierarchy_root.join(format!("espalier-{}", std::process::id()))
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// The v2 parent of this master's groups, ready to hand `controllers` (`"+cpu"`, …) to its
/// children: below the root, the master first moves itself into a leaf beside it (a v2 group
/// that hands controllers down may hold no process), then the controllers are enabled at its
/// own cgroup and at the parent.
fn v2_parent(root: &Path, base: &Path, controllers: &str) -> Result<PathBuf, String> {
    if base != root {
        let leaf = base.join(format!("espalier-master-{}", std::process::id()));
        if !leaf.exists() {
            mkdir(&leaf)?;
            write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
        }
    }
    write(&base.join("cgroup.subtree_control"), controllers).map_err(|e| {
        format!("{e} (with systemd, give the unit Delegate=yes so espalier may use its own cgroup)")
    })?;
    let p = parent(base);
    mkdir(&p)?;
    write(&p.join("cgroup.subtree_control"), controllers)?;
    Ok(p)
}

/// Makes a pool's group with its `limits` — `cpu_limit` as a fraction of one CPU, over all of
/// the pool's processes together; `memory_limit` (`memory.high` at 90 % of it, so the pool is
/// reclaimed and slowed before one of its processes is killed); `pids_limit`.
pub fn pool_group(h: &Hierarchy, pool: &str, limits: PoolLimits) -> Result<Group, String> {
    match h {
        Hierarchy::V2 {
            root,
            base,
            cpu,
            cpuset,
            memory,
            pids,
            io,
        } => {
            let wanted = [
                ("cpu", limits.cpu.is_some(), *cpu),
                ("memory", limits.memory.is_some(), *memory),
                ("pids", limits.pids.is_some(), *pids),
                ("io", limits.io_weight.is_some(), *io),
            ];
            let mut controllers = Vec::new();
            for (name, asked, there) in wanted.into_iter().filter(|w| w.1) {
                if asked && !there {
                    return Err(format!("the {name} controller is not available in {} (not in its cgroup.controllers)", base.display()));
                }
                controllers.push(format!("+{name}"));
            }
            if *cpuset {
                controllers.push("+cpuset".into());
            }
            let dir = v2_parent(root, base, &controllers.join(" "))?.join(pool);
            mkdir(&dir)?;
            let mut g = Group {
                dirs: vec![dir.clone()],
                pressure: Some(dir.clone()),
                ..Group::default()
            };
            if let Some(fraction) = limits.cpu {
                write(
                    &dir.join("cpu.max"),
                    &format!("{} {PERIOD_US}", quota_us(fraction)),
                )?;
                g.accounting = Some(dir.join("cpu.stat"));
            }
            if let Some(bytes) = limits.memory {
                write(&dir.join("memory.high"), &(bytes / 10 * 9).to_string())?;
                write(&dir.join("memory.max"), &bytes.to_string())?;
                if let Some(swap) = limits.swap {
                    write(&dir.join("memory.swap.max"), &swap.to_string())?;
                }
                g.oom_events = Some(dir.join("memory.events"));
                g.memory_now = Some(dir.join("memory.current"));
            }
            if let Some(n) = limits.pids {
                write(&dir.join("pids.max"), &n.to_string())?;
                g.pids_now = Some(dir.join("pids.current"));
            }
            if let Some(w) = limits.io_weight {
                write(&dir.join("io.weight"), &format!("default {w}"))?;
            }
            Ok(g)
        }
        Hierarchy::V1 {
            cpu,
            cpuacct,
            memory,
            pids,
            blkio,
            ..
        } => {
            let mut g = Group::default();
            let made = |root: &Option<PathBuf>, name: &str| -> Result<PathBuf, String> {
                let root = root
                    .as_ref()
                    .ok_or(format!("the {name} controller is not mounted"))?;
                let dir = parent(root).join(pool);
                mkdir(&dir)?;
                Ok(dir)
            };
            if let Some(fraction) = limits.cpu {
                let dir = made(cpu, "cpu")?;
                write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                write(
                    &dir.join("cpu.cfs_quota_us"),
                    &quota_us(fraction).to_string(),
                )?;
                g.dirs.push(dir);
                if let Ok(acct) = made(cpuacct, "cpuacct") {
                    g.accounting = Some(acct.join("cpuacct.usage"));
                    g.dirs.push(acct);
                }
            }
            if let Some(bytes) = limits.memory {
                let dir = made(memory, "memory")?;
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                write(
                    &dir.join("memory.soft_limit_in_bytes"),
                    &(bytes / 10 * 9).to_string(),
                )?;
                if let Some(swap) = limits.swap {
                    // v1 bounds memory and swap together, after memory alone.
                    let file = dir.join("memory.memsw.limit_in_bytes");
                    if !file.exists() {
                        return Err("swap is not accounted here (v1 needs the kernel booted with swapaccount=1)".into());
                    }
                    write(&file, &(bytes + swap).to_string())?;
                }
                g.oom_events = Some(dir.join("memory.oom_control"));
                g.memory_now = Some(dir.join("memory.usage_in_bytes"));
                g.dirs.push(dir);
            }
            if let Some(n) = limits.pids {
                let dir = made(pids, "pids")?;
                write(&dir.join("pids.max"), &n.to_string())?;
                g.pids_now = Some(dir.join("pids.current"));
                g.dirs.push(dir);
            }
            if let Some(w) = limits.io_weight {
                // BFQ's weights run 1–1000, v2's 1–10 000.
                let dir = made(blkio, "blkio (with BFQ's weights)")?;
                write(
                    &dir.join("blkio.bfq.weight"),
                    &(w / 10).clamp(1, 1000).to_string(),
                )?;
                g.dirs.push(dir);
            }
            Ok(g)
        }
    }
}

/// Makes a worker's cpuset group: exactly `cpus` and memory `nodes`. On v2, inside `within`
/// (its pool's CPU-capped group) when there is one: a process is in one v2 group only, so the
/// worker's group is the pool's child and replaces it (see [`Hierarchy::unified`]).
pub fn cpuset(
    h: &Hierarchy,
    name: &str,
    cpus: &CpuSet,
    nodes: &[u32],
    within: Option<&Group>,
) -> Result<Group, String> {
    let nodes_text = nodes
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let dir = match h {
        Hierarchy::V2 {
            root,
            base,
            cpuset: true,
            cpu,
            ..
        } => match within.and_then(|g| g.dirs.first()) {
            Some(pool_dir) => {
                write(&pool_dir.join("cgroup.subtree_control"), "+cpuset")?;
                pool_dir.join(name)
            }
            None => {
                let controllers = if *cpu { "+cpu +cpuset" } else { "+cpuset" };
                v2_parent(root, base, controllers)?.join(name)
            }
        },
        Hierarchy::V2 { base, .. } => {
            return Err(format!(
                "the cpuset controller is not available in {} (not in its cgroup.controllers)",
                base.display()
            ))
        }
        Hierarchy::V1 {
            cpuset: Some(root), ..
        } => {
            let p = parent(root);
            if !p.exists() {
                mkdir(&p)?;
                // A v1 cpuset child starts empty: it must be given CPUs and memory before use.
                for f in ["cpuset.cpus", "cpuset.mems"] {
                    let v = std::fs::read_to_string(root.join(f)).map_err(|e| e.to_string())?;
                    write(&p.join(f), v.trim())?;
                }
            }
            p.join(name)
        }
        Hierarchy::V1 { cpuset: None, .. } => return Err("no cpuset controller mounted".into()),
    };
    mkdir(&dir)?;
    write(&dir.join("cpuset.cpus"), &cpus.to_string())?;
    write(&dir.join("cpuset.mems"), &nodes_text)?;
    Ok(Group {
        dirs: vec![dir],
        ..Group::default()
    })
}

impl Hierarchy {
    /// Whether a process joins one group only (v2): a worker's cpuset then replaces its
    /// pool's group rather than adding to it.
    pub fn unified(&self) -> bool {
        matches!(self, Hierarchy::V2 { .. })
    }
}

/// Removes this master's parent directories (after every group in them is gone).
pub fn remove_parents(h: &Hierarchy) {
    let roots: Vec<&PathBuf> = match h {
        Hierarchy::V2 { base, .. } => vec![base],
        Hierarchy::V1 {
            cpu,
            cpuacct,
            cpuset,
            memory,
            pids,
            blkio,
        } => [cpu, cpuacct, cpuset, memory, pids, blkio]
            .into_iter()
            .flatten()
            .collect(),
    };
    for r in roots {
        let _ = std::fs::remove_dir(parent(r));
    }
}

/// The memory this process may use: the machine's (`MemTotal`), or less where its own control
/// group caps it (v2 `memory.max`, v1 `memory.limit_in_bytes`, each up the path to the root,
/// the lowest counting). `None` when `/proc/meminfo` cannot be read.
pub fn memory_limit() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let (total, _) = crate::topology::parse_meminfo(&meminfo);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let caps = own.lines().filter_map(|line| {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let (root, file) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max"),
            c if c.split(',').any(|c| c == "memory") => {
                ("/sys/fs/cgroup/memory", "memory.limit_in_bytes")
            }
            _ => return None,
        };
        Path::new(path.trim_start_matches('/'))
            .ancestors()
            .filter_map(|p| {
                let text = std::fs::read_to_string(Path::new(root).join(p).join(file)).ok()?;
                text.trim().parse::<u64>().ok()
            })
            .min()
    });
    Some(caps.fold(total, u64::min)).filter(|&m| m > 0)
}

/// The process ids the machine has: the fewer of `kernel.pid_max` and `kernel.threads-max`
/// (a thread takes one too). `None` when neither can be read.
pub fn process_ids() -> Option<u64> {
    ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
        .iter()
        .filter_map(|f| read_number(Path::new(f)))
        .min()
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
        let h = detect_for(dir.path(), "0::/\n").unwrap();
        assert_eq!(
            h,
            Hierarchy::V2 {
                root: dir.path().to_path_buf(),
                base: dir.path().to_path_buf(),
                cpu: true,
                cpuset: true,
                memory: true,
                pids: true,
                io: true,
            }
        );
        let limits = PoolLimits {
            cpu: Some(0.5),
            ..Default::default()
        };
        let g = pool_group(&h, "shop", limits).unwrap();
        let group = dir
            .path()
            .join(format!("espalier-{}/shop", std::process::id()));
        assert_eq!(
            std::fs::read_to_string(group.join("cpu.max")).unwrap(),
            "50000 100000"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(),
            "+cpu +cpuset"
        );
        g.attach(4242).unwrap();
        assert_eq!(
            std::fs::read_to_string(group.join("cgroup.procs")).unwrap(),
            "4242"
        );
        std::fs::write(group.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\n").unwrap();
        assert_eq!(g.usage_ns(), Some(1_500_000));
        // A hard-affinity worker of the capped pool: its cpuset is the pool's child.
        let cpus = CpuSet::parse("2-3").unwrap();
        let w = cpuset(&h, "shop-0", &cpus, &[1], Some(&g)).unwrap();
        assert_eq!(w.dirs, vec![group.join("shop-0")]);
        assert_eq!(
            std::fs::read_to_string(group.join("cgroup.subtree_control")).unwrap(),
            "+cpuset"
        );
        assert_eq!(
            std::fs::read_to_string(group.join("shop-0/cpuset.cpus")).unwrap(),
            "2-3"
        );
        assert_eq!(
            std::fs::read_to_string(group.join("shop-0/cpuset.mems")).unwrap(),
            "1"
        );
        assert!(h.unified());
    }

    #[test]
    fn v2_in_a_delegated_subtree() {
        // A systemd service with Delegate=yes: the master's own cgroup, not the root.
        let dir = tempfile::tempdir().unwrap();
        let service = dir.path().join("system.slice/espalier.service");
        std::fs::create_dir_all(&service).unwrap();
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory\n",
        )
        .unwrap();
        std::fs::write(service.join("cgroup.controllers"), "cpuset cpu\n").unwrap();
        let h = detect_for(dir.path(), "0::/system.slice/espalier.service\n").unwrap();
        let Hierarchy::V2 { base, .. } = &h else {
            panic!("{h:?}")
        };
        assert_eq!(base, &service);
        let cpus = CpuSet::parse("0-1").unwrap();
        let g = cpuset(&h, "web-0", &cpus, &[0], None).unwrap();
        let pid = std::process::id();
        assert_eq!(g.dirs, vec![service.join(format!("espalier-{pid}/web-0"))]);
        // The master moved itself into a leaf, then handed the controllers down.
        let leaf = service.join(format!("espalier-master-{pid}"));
        assert_eq!(
            std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap(),
            pid.to_string()
        );
        assert_eq!(
            std::fs::read_to_string(service.join("cgroup.subtree_control")).unwrap(),
            "+cpu +cpuset"
        );
        // Nothing was written above the delegated subtree.
        assert!(!dir.path().join("cgroup.subtree_control").exists());
        assert!(!dir.path().join(format!("espalier-{pid}")).exists());
        // Without the cpuset controller delegated: one clear reason.
        std::fs::write(service.join("cgroup.controllers"), "cpu\n").unwrap();
        let h = detect_for(dir.path(), "0::/system.slice/espalier.service\n").unwrap();
        let e = cpuset(&h, "web-0", &cpus, &[0], None).unwrap_err();
        assert!(e.contains("cpuset controller is not available"), "{e}");
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
                cpuset: None,
                memory: None,
                pids: None,
                blkio: None,
            })
        ));
    }

    #[test]
    fn a_pools_memory_and_pids_limits_go_into_its_v2_group_and_its_kills_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cgroup.controllers"),
            "cpu memory pids io\n",
        )
        .unwrap();
        let h = detect_for(dir.path(), "0::/\n").unwrap();
        let limits = PoolLimits {
            memory: Some(100 << 20),
            swap: Some(0),
            pids: Some(64),
            io_weight: Some(50),
            ..Default::default()
        };
        let g = pool_group(&h, "shop", limits).unwrap();
        let group = &g.dirs[0];
        let read = |f: &str| std::fs::read_to_string(group.join(f)).unwrap();
        assert_eq!(read("memory.max"), (100u64 << 20).to_string());
        assert_eq!(read("memory.high"), ((100u64 << 20) / 10 * 9).to_string());
        assert_eq!(read("pids.max"), "64");
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("io.weight"), "default 50");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(),
            "+memory +pids +io"
        );
        std::fs::write(
            group.join("memory.events"),
            "low 0\nhigh 3\nmax 2\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(g.oom_kills(), Some(1));
        std::fs::write(group.join("memory.current"), "52428800\n").unwrap();
        std::fs::write(group.join("pids.current"), "7\n").unwrap();
        let psi = "some avg10=1.50 avg60=0.20 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        for f in ["memory.pressure", "cpu.pressure", "io.pressure"] {
            std::fs::write(group.join(f), psi).unwrap();
        }
        let usage = g.usage();
        assert_eq!((usage.memory, usage.pids), (Some(50 << 20), Some(7)));
        assert_eq!(usage.pressure, Some([1.5, 1.5, 1.5]));
        assert_eq!(
            (usage.memory_high_events, usage.memory_max_events),
            (Some(3), Some(2))
        );
        // A controller the hierarchy lacks is refused in one line.
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu\n").unwrap();
        let h = detect_for(dir.path(), "0::/\n").unwrap();
        let e = pool_group(&h, "shop", limits).unwrap_err();
        assert!(e.contains("the memory controller is not available"), "{e}");
    }
}
