//! `espalier doctor`: the case study's deployment guide (and the static benchmark's OS tuning)
//! as checks. Each finding says what was found, whether it should change, and the command
//! that changes it.
//!
//! Owns: the checks ([`check`], a pure function of [`Inputs`], the topology and the config)
//! and reading their inputs from sysfs/procfs ([`read_inputs`]). Must not touch: any setting —
//! doctor only reads and advises.

use crate::config::{Affinity, Config};
use crate::cpuset::CpuSet;
use crate::topology::Topology;
use serde::Serialize;
use std::path::Path;

/// What the checks look at; `None` where the file is not there to read.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub somaxconn: Option<u64>,
    pub tcp_max_syn_backlog: Option<u64>,
    pub ip_local_port_range: Option<(u32, u32)>,
    pub tcp_tw_reuse: Option<u32>,
    /// (soft, hard) open-files limit of this process, as workers inherit it.
    pub nofile: Option<(u64, u64)>,
    pub numa_balancing: Option<u32>,
    pub irqbalance_running: bool,
    /// Scaling governor per CPU that has cpufreq.
    pub governors: Vec<(u32, String)>,
    /// The deepest enabled idle state of CPU 0: (name, exit latency in µs).
    pub deepest_idle: Option<(String, u64)>,
    /// The selected mode of transparent huge pages (`always`, `madvise`, `never`).
    pub thp: Option<String>,
    /// The config's certificates: (site, file, whole days until it expires, who renews it
    /// — `None`: whoever gave the file, then `espalier reload`).
    pub certificates: Vec<(String, String, i64, Option<String>)>,
    /// DNS-01's delegations into espalier's own zone (`[server.acme.dns]`): (name, the CNAME
    /// line its zone needs, what is wrong — `None` when in place). A name left empty: the
    /// lookups could not be made (the problem says why).
    pub acme_delegations: Vec<(String, String, Option<String>)>,
    /// What the running kernel's TLS (kTLS) takes; `None` when not asked (a fixture).
    pub ktls: Option<crate::os::ktls::KernelSupport>,
    /// Whether io_uring can carry connections (`os::uring::probe`: what it found, or why
    /// not), and the environment's `ESPALIER_IO`; `None` when not asked (a fixture).
    pub io_uring: Option<(Result<String, String>, Option<String>)>,
    /// With `[server.cluster]`: the etcd member that answered and the fleet's revision, or
    /// why none did; `None` without a fleet.
    pub cluster: Option<Result<(String, i64), String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Informational: worth knowing, nothing to change for serving.
    Info,
    /// Should change.
    Warn,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    pub found: String,
    /// What to do (empty when nothing).
    pub advice: String,
}

fn finding(
    check: &'static str,
    status: Status,
    found: String,
    advice: impl Into<String>,
) -> Finding {
    Finding {
        check,
        status,
        found,
        advice: advice.into(),
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Reads the inputs from a sysfs and a procfs root (the live `/sys` and `/proc`, or fixtures).
pub fn read_inputs(sysfs: &Path, procfs: &Path) -> Inputs {
    let num = |rel: &str| read_trim(&procfs.join(rel)).and_then(|v| v.parse().ok());
    let port_range = read_trim(&procfs.join("sys/net/ipv4/ip_local_port_range")).and_then(|v| {
        let mut it = v.split_whitespace().filter_map(|x| x.parse::<u32>().ok());
        Some((it.next()?, it.next()?))
    });
    let nofile = std::fs::read_to_string(procfs.join("self/limits"))
        .ok()
        .and_then(|t| parse_nofile(&t));
    let cpu_dir = sysfs.join("devices/system/cpu");
    let mut governors = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&cpu_dir) {
        let mut ids: Vec<u32> = entries
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("cpu")?
                    .parse()
                    .ok()
            })
            .collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(g) = read_trim(&cpu_dir.join(format!("cpu{id}/cpufreq/scaling_governor"))) {
                governors.push((id, g));
            }
        }
    }
    let mut deepest_idle: Option<(String, u64)> = None;
    for k in 0..16 {
        let state = cpu_dir.join(format!("cpu0/cpuidle/state{k}"));
        let Some(name) = read_trim(&state.join("name")) else {
            break;
        };
        if read_trim(&state.join("disable")).as_deref() == Some("1") {
            continue;
        }
        let latency = read_trim(&state.join("latency"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if deepest_idle.as_ref().is_none_or(|(_, l)| latency >= *l) {
            deepest_idle = Some((name, latency));
        }
    }
    let thp = read_trim(&sysfs.join("kernel/mm/transparent_hugepage/enabled")).and_then(|v| {
        v.split_whitespace()
            .find(|w| w.starts_with('['))
            .map(|w| w.trim_matches(['[', ']']).to_string())
    });
    Inputs {
        somaxconn: num("sys/net/core/somaxconn"),
        tcp_max_syn_backlog: num("sys/net/ipv4/tcp_max_syn_backlog"),
        ip_local_port_range: port_range,
        tcp_tw_reuse: num("sys/net/ipv4/tcp_tw_reuse").map(|v: u64| v as u32),
        nofile,
        numa_balancing: num("sys/kernel/numa_balancing").map(|v: u64| v as u32),
        irqbalance_running: crate::nic::irqbalance_running(procfs),
        governors,
        deepest_idle,
        thp,
        certificates: Vec::new(),
        acme_delegations: Vec::new(),
        ktls: None,
        io_uring: None,
        cluster: None,
    }
}

/// The "Max open files" line of /proc/self/limits: (soft, hard); "unlimited" is u64::MAX.
pub fn parse_nofile(limits: &str) -> Option<(u64, u64)> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut f = line["Max open files".len()..].split_whitespace();
    let v = |s: &str| {
        if s == "unlimited" {
            Some(u64::MAX)
        } else {
            s.parse().ok()
        }
    };
    Some((v(f.next()?)?, v(f.next()?)?))
}

/// Runs every check. `config` adds the checks that depend on what will be served.
pub fn check(i: &Inputs, t: &Topology, config: Option<&Config>) -> Vec<Finding> {
    let mut out = Vec::new();
    let defaults = crate::config::ServerSettings::default();
    let server = config.map_or(&defaults, |c| &c.server);
    let backlog = server.backlog as u64;

    match i.somaxconn {
        Some(v) if v < backlog => out.push(finding("somaxconn", Status::Warn, format!("net.core.somaxconn = {v}, below the listen backlog {backlog}: the kernel silently caps the accept queue"), format!("sysctl -w net.core.somaxconn={backlog}"))),
        Some(v) => out.push(finding("somaxconn", Status::Ok, format!("net.core.somaxconn = {v} ≥ backlog {backlog}"), "")),
        None => {}
    }
    match i.tcp_max_syn_backlog {
        Some(v) if v < backlog => out.push(finding("tcp_max_syn_backlog", Status::Warn, format!("net.ipv4.tcp_max_syn_backlog = {v}, below the listen backlog {backlog}: SYNs are dropped under bursts"), format!("sysctl -w net.ipv4.tcp_max_syn_backlog={backlog}"))),
        Some(v) => out.push(finding("tcp_max_syn_backlog", Status::Ok, format!("net.ipv4.tcp_max_syn_backlog = {v} ≥ backlog {backlog}"), "")),
        None => {}
    }
    if let Some((lo, hi)) = i.ip_local_port_range {
        let ports = hi.saturating_sub(lo) + 1;
        // The static-benchmark seed needed 50,000 ephemeral ports to load a server without
        // port exhaustion; a server alone does not use them.
        let (status, advice) = if ports < 50_000 {
            (Status::Info, "on a machine that generates load (espalier bench, espalier scale): sysctl -w net.ipv4.ip_local_port_range=\"10000 65535\"")
        } else {
            (Status::Ok, "")
        };
        out.push(finding(
            "ip_local_port_range",
            status,
            format!("{ports} ephemeral ports ({lo}-{hi})"),
            advice,
        ));
    }
    if let Some(v) = i.tcp_tw_reuse {
        let (status, advice) = if v == 1 {
            (Status::Ok, "")
        } else {
            (Status::Info, "on a machine that generates load: sysctl -w net.ipv4.tcp_tw_reuse=1 (reuse TIME_WAIT ports for new connections)")
        };
        out.push(finding(
            "tcp_tw_reuse",
            status,
            format!("net.ipv4.tcp_tw_reuse = {v}"),
            advice,
        ));
    }
    if let Some((soft, hard)) = i.nofile {
        let threads_per_worker = config
            .and_then(|c| crate::placement::plan(t, &c.pools, &[]).ok())
            .and_then(|p| p.workers.iter().map(|w| w.threads as u64).max())
            .unwrap_or(t.online_cpus().len() as u64);
        let bindings = config.map_or(1, |c| {
            c.sites
                .iter()
                .map(|s| s.bindings.len() as u64)
                .sum::<u64>()
                .max(1)
        });
        let need = server.limits.max_connections as u64 + threads_per_worker * bindings + 64;
        if soft < need {
            out.push(finding("open files", Status::Warn, format!("open-files limit {soft} (hard {}) is below what a worker may need: {need} ({} connections + listeners + margin)", if hard == u64::MAX { "unlimited".to_string() } else { hard.to_string() }, server.limits.max_connections), format!("ulimit -n {need} before espalier serve (or LimitNOFILE={need} in its systemd unit), or lower server.limits.max_connections")));
        } else {
            out.push(finding(
                "open files",
                Status::Ok,
                format!("open-files limit {soft} ≥ {need} per worker"),
                "",
            ));
        }
    }
    let hard_pools: Vec<&str> = config.map_or(Vec::new(), |c| {
        c.pools
            .iter()
            .filter(|p| p.affinity == Affinity::Hard)
            .map(|p| p.name.as_str())
            .collect()
    });
    if let Some(v) = i.numa_balancing {
        let multi_node = t.nodes.iter().filter(|n| !n.cpus.is_empty()).count() > 1;
        if v != 0 && !hard_pools.is_empty() && multi_node {
            out.push(finding("numa_balancing", Status::Warn, format!("kernel.numa_balancing = {v} while pools {} use hard affinity: the kernel migrates pages and tasks against the placement", hard_pools.join(", ")), "sysctl -w kernel.numa_balancing=0"));
        } else {
            out.push(finding(
                "numa_balancing",
                Status::Ok,
                format!(
                    "kernel.numa_balancing = {v}{}",
                    if hard_pools.is_empty() {
                        " (no hard-affinity pool)"
                    } else {
                        ""
                    }
                ),
                "",
            ));
        }
    }
    let warn_days = (crate::tls::EXPIRY_WARNING.as_secs() / 86_400) as i64;
    for (site, file, days, renewer) in &i.certificates {
        if *days < warn_days {
            out.push(finding(
                "certificate",
                Status::Warn,
                format!("site `{site}`: {file} expires in {days} days"),
                renewer
                    .as_deref()
                    .unwrap_or("renew it, then espalier reload"),
            ));
        } else {
            out.push(finding(
                "certificate",
                Status::Ok,
                format!("site `{site}`: {file} is valid for {days} more days"),
                "",
            ));
        }
    }
    for (name, line, problem) in &i.acme_delegations {
        out.push(match (problem, name.is_empty()) {
            (None, _) => finding(
                "acme dns-01",
                Status::Ok,
                format!("{name}: delegated ({line})"),
                "",
            ),
            (Some(p), true) => finding(
                "acme dns-01",
                Status::Warn,
                p.clone(),
                "check the system's resolvers, or set [server.acme.dns] resolver",
            ),
            (Some(p), false) => finding(
                "acme dns-01",
                Status::Warn,
                format!("{name}: {p}"),
                format!("add to its zone: {line}"),
            ),
        });
    }
    let https = config.is_none_or(|c| c.sites.iter().any(|s| s.tls.is_some()));
    match i.ktls {
        Some(kernel) if https && kernel.is_empty() => out.push(finding(
            "kernel tls",
            Status::Info,
            "this kernel has no kTLS (no `tls` module): HTTPS files are read and encrypted in user space".into(),
            "modprobe tls (a kernel built with CONFIG_TLS), then restart espalier",
        )),
        Some(kernel) if https && !config.is_some_and(|c| c.server.ktls) => out.push(finding(
            "kernel tls",
            Status::Info,
            format!(
                "this kernel's TLS takes {}, and [server] ktls = \"off\" (the default) keeps HTTPS in rustls",
                kernel.describe()
            ),
            "measure with bench/ktls.sh on this machine; where the kernel's costs less, set ktls = \"auto\" so large files go by sendfile over HTTPS",
        )),
        Some(kernel) if https => out.push(finding(
            "kernel tls",
            Status::Ok,
            format!(
                "kTLS takes {}: an HTTPS/1.1 connection goes to it before a file of {} KiB or more",
                kernel.describe(),
                crate::http::ktls::OFFLOAD_MIN_FILE >> 10
            ),
            "",
        )),
        _ => {}
    }
    if let Some((probe, override_)) = &i.io_uring {
        let choice = config.map_or(crate::config::IoChoice::Auto, |c| c.server.io);
        let (status, found, advice) = match (choice.resolve(override_.as_deref(), || probe.clone()), probe) {
            (Err(e), _) => (Status::Warn, e, "set [server] io = \"auto\": espalier falls back to epoll where io_uring is refused"),
            (Ok(path), _) if path.uring => (Status::Ok, path.why, ""),
            (Ok(path), Ok(_)) => (
                Status::Info,
                format!("{}, though io_uring is usable here", path.why),
                "set [server] io = \"auto\" (and unset ESPALIER_IO) to serve cleartext connections through io_uring",
            ),
            (Ok(path), Err(_)) => (
                Status::Info,
                path.why,
                "io_uring needs Linux 6.0 or later, kernel.io_uring_disabled = 0, and (in a container) a seccomp profile that allows io_uring_setup, io_uring_enter and io_uring_register; epoll serves everywhere",
            ),
        };
        out.push(finding(
            "io path",
            status,
            format!("connections' I/O: {found}"),
            advice,
        ));
    }
    match &i.cluster {
        Some(Ok((endpoint, revision))) => out.push(finding(
            "cluster",
            Status::Ok,
            format!("the fleet's etcd answers at {endpoint} (revision {revision})"),
            "",
        )),
        Some(Err(why)) => out.push(finding(
            "cluster",
            Status::Warn,
            format!("the fleet's etcd cannot be reached: {why}"),
            "members serve their copy (the folder of [server.cluster]) until it answers: check etcd's members and the addresses in `etcd`; `espalier status` says since when",
        )),
        None => {}
    }
    if i.irqbalance_running {
        out.push(finding("irqbalance", Status::Warn, "irqbalance is running: it moves NIC interrupts and would undo `espalier nic apply`".into(), "systemctl disable --now irqbalance (or ban the NIC's IRQs in its config), then espalier nic apply"));
    } else {
        out.push(finding(
            "irqbalance",
            Status::Ok,
            "irqbalance is not running".into(),
            "",
        ));
    }
    // NIC interrupts on CPUs of another node than the NIC's.
    let mut irq_cpus = CpuSet::new();
    for nic in t.nics.iter().filter(|n| !n.irqs.is_empty()) {
        for irq in &nic.irqs {
            irq_cpus = irq_cpus.union(&irq.affinity);
        }
        let Some(node) = nic
            .node
            .and_then(|n| t.node(n))
            .filter(|n| !n.cpus.is_empty())
        else {
            continue;
        };
        let off: Vec<String> = nic
            .irqs
            .iter()
            .filter(|q| !q.affinity.is_empty() && !q.affinity.is_subset(&node.cpus))
            .map(|q| format!("{} on CPUs {}", q.irq, q.affinity))
            .collect();
        let on: CpuSet = nic
            .irqs
            .iter()
            .fold(CpuSet::new(), |a, q| a.union(&q.affinity));
        if off.is_empty() && nic.irqs.len() > 1 && on.len() == 1 {
            out.push(finding("nic irqs", Status::Warn, format!("{} (node {}): all {} IRQs are piled on CPU {on}, so one core does every queue's receive work", nic.name, node.id, nic.irqs.len()), format!("espalier nic apply {}", nic.name)));
        } else if off.is_empty() {
            out.push(finding(
                "nic irqs",
                Status::Ok,
                format!(
                    "{}: all {} IRQs on node {} (CPUs {on})",
                    nic.name,
                    nic.irqs.len(),
                    node.id
                ),
                "",
            ));
        } else {
            let shown: Vec<String> = off.iter().take(4).cloned().collect();
            out.push(finding(
                "nic irqs",
                Status::Warn,
                format!(
                    "{} (node {}): {} of {} IRQs run off its node ({}{})",
                    nic.name,
                    node.id,
                    off.len(),
                    nic.irqs.len(),
                    shown.join(", "),
                    if off.len() > 4 { ", …" } else { "" }
                ),
                format!("espalier nic apply {}", nic.name),
            ));
        }
    }
    if let Some(c) = config {
        for p in c.pools.iter().filter(|p| p.cpus.is_some()) {
            let mask = p.cpus.as_ref().expect("filtered");
            let shared = mask.intersection(&irq_cpus);
            if !shared.is_empty() {
                out.push(finding("pool cpus", Status::Warn, format!("pool `{}` (cpus {mask}) includes CPUs {shared} that take NIC interrupts", p.name), format!("espalier nic apply -c {} (it keeps interrupts off pool CPUs), or leave those CPUs out of `cpus`", c.source.as_ref().map_or("FILE".into(), |s| s.display().to_string()))));
            }
        }
    }
    if i.governors.is_empty() {
        out.push(finding(
            "cpu governor",
            Status::Info,
            "no cpufreq here (a virtual machine, or frequency fixed by firmware)".into(),
            "",
        ));
    } else {
        let slow: Vec<u32> = i
            .governors
            .iter()
            .filter(|(_, g)| g != "performance")
            .map(|(c, _)| *c)
            .collect();
        if slow.is_empty() {
            out.push(finding(
                "cpu governor",
                Status::Ok,
                "every CPU uses the performance governor".into(),
                "",
            ));
        } else {
            let g = &i
                .governors
                .iter()
                .find(|(c, _)| *c == slow[0])
                .expect("present")
                .1;
            out.push(finding("cpu governor", Status::Warn, format!("{} CPU(s) use `{g}` (CPUs {}): the case study set the High Performance power plan", slow.len(), CpuSet::from_ids(slow.iter().copied())), "cpupower frequency-set -g performance (or echo performance > /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)"));
        }
    }
    match &i.deepest_idle {
        Some((name, latency)) if *latency > 100 => out.push(finding(
            "idle states",
            Status::Info,
            format!("deepest enabled idle state is {name} ({latency} µs to wake)"),
            "for the lowest latency, disable deep states: cpupower idle-set -D 100",
        )),
        Some((name, latency)) => out.push(finding(
            "idle states",
            Status::Ok,
            format!("deepest enabled idle state is {name} ({latency} µs to wake)"),
            "",
        )),
        None => out.push(finding(
            "idle states",
            Status::Info,
            "no cpuidle information visible".into(),
            "",
        )),
    }
    match i.thp.as_deref() {
        Some("always") => out.push(finding("transparent huge pages", Status::Warn, "transparent_hugepage = always: khugepaged compaction stalls add latency spikes to servers".into(), "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled")),
        Some(mode) => out.push(finding("transparent huge pages", Status::Ok, format!("transparent_hugepage = {mode}"), "")),
        None => {}
    }
    out
}

/// The findings as text, one per line, with advice indented under it.
pub fn render(findings: &[Finding]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for f in findings {
        let tag = match f.status {
            Status::Ok => "ok  ",
            Status::Info => "info",
            Status::Warn => "WARN",
        };
        let _ = writeln!(s, "[{tag}] {}: {}", f.check, f.found);
        if !f.advice.is_empty() && f.status != Status::Ok {
            let _ = writeln!(s, "       fix: {}", f.advice);
        }
    }
    let warnings = findings.iter().filter(|f| f.status == Status::Warn).count();
    let _ = writeln!(
        s,
        "{}",
        if warnings == 0 {
            "all well".to_string()
        } else {
            format!("{warnings} thing(s) should change")
        }
    );
    s
}

#[cfg(test)]
mod tests;
