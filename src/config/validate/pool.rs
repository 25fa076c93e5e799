//! Validation of a `[[pool]]`: processes, placement, affinity, CPUs against the machine,
//! limits, recycling and rapid-fail protection.
//!
//! Owns: the pool keys' rules. Must not touch: sites.

use super::super::locate::Seg;
use super::super::model::*;
use super::super::parse::{parse_time_of_day, valid_name};
use super::super::raw::{self, Scalar};
use super::{scalar_text, Validator};
use crate::cpuset::CpuSet;
use crate::topology::Topology;
use crate::units::parse_percent;
use std::time::Duration;

impl Validator {
    pub(in crate::config) fn pool(
        &mut self,
        i: usize,
        mut raw: raw::RawPool,
        topo: &Topology,
        base: &std::path::Path,
        default_start: StartMode,
    ) -> PoolSpec {
        let at = |k: &'static str| [Seg::Key("pool"), Seg::Index(i), Seg::Key(k)];
        let app = self.app_command(i, &mut raw, base);
        let name = match raw.name {
            Some(n) if valid_name(&n) => n,
            Some(n) => {
                self.err(
                    &at("name"),
                    format!("`{n}` is not a usable name; use letters, digits, `-` and `_`"),
                );
                n
            }
            None => {
                self.err(
                    &[Seg::Key("pool"), Seg::Index(i)],
                    "this [[pool]] has no `name`; add name = \"...\"",
                );
                format!("pool{i}")
            }
        };
        let mut p = PoolSpec::with_defaults(&name);
        p.app = app;
        p.processes = match raw.processes {
            None => p.processes,
            Some(Scalar::Int(0)) => Processes::Auto,
            Some(Scalar::Int(n)) if n > 0 && n <= 4096 => Processes::Count(n as u32),
            Some(Scalar::Text(t)) if t == "auto" => Processes::Auto,
            Some(other) => {
                self.err(&at("processes"), format!("{} is not a process count; write a number from 1 to 4096, or \"auto\" (or 0) for one per NUMA node", scalar_text(&other)));
                p.processes
            }
        };
        p.placement = self.choice(
            &at("placement"),
            raw.placement,
            p.placement,
            &[
                ("most-free-memory", Placement::MostFreeMemory),
                ("round-robin", Placement::RoundRobin),
                ("none", Placement::None),
            ],
        );
        p.affinity = self.choice(
            &at("affinity"),
            raw.affinity,
            p.affinity,
            &[("soft", Affinity::Soft), ("hard", Affinity::Hard)],
        );
        p.unit = self.choice(
            &at("unit"),
            raw.unit,
            p.unit,
            &[("node", Unit::Node), ("l3", Unit::L3)],
        );
        let policy_default = match (p.placement, p.affinity) {
            (Placement::None, _) => MemoryPolicy::Default,
            (_, Affinity::Hard) => MemoryPolicy::Bind,
            (_, Affinity::Soft) => MemoryPolicy::Preferred,
        };
        p.memory_policy = self.choice(
            &at("memory_policy"),
            raw.memory_policy,
            policy_default,
            &[
                ("bind", MemoryPolicy::Bind),
                ("preferred", MemoryPolicy::Preferred),
                ("default", MemoryPolicy::Default),
            ],
        );
        p.load_balancer = self.choice(
            &at("load_balancer"),
            raw.load_balancer,
            p.load_balancer,
            &[("http", LoadBalancer::Http), ("tcp", LoadBalancer::Tcp)],
        );
        p.cpus = raw.cpus.and_then(|c| self.pool_cpus(&at("cpus"), c, topo));
        p.cpu_limit = match raw.cpu_limit {
            None => None,
            Some(Scalar::Text(t)) => parse_percent(&t)
                .map_err(|m| self.err(&at("cpu_limit"), m))
                .ok(),
            Some(other) => {
                self.err(
                    &at("cpu_limit"),
                    format!(
                        "{} is not a percentage; write it like \"50%\" (of one CPU)",
                        scalar_text(&other)
                    ),
                );
                None
            }
        };
        // Below these, a pool's own worker (its threads and buffers) could not run.
        if let Some(limit) = raw.memory_limit {
            let bytes = self.size(&at("memory_limit"), Some(limit), 0);
            if bytes < 32 << 20 {
                self.err(&at("memory_limit"), "is below 32 MiB, where the pool's own worker cannot run; give it room, like \"512MiB\"");
            }
            p.memory_limit = Some(bytes);
        }
        if let Some(swap) = raw.swap_limit {
            p.swap_limit = Some(self.size(&at("swap_limit"), Some(swap), 0));
            if p.memory_limit.is_none() {
                self.err(&at("swap_limit"), "bounds the swap beyond memory_limit, and there is none; add memory_limit = \"512MiB\", or remove it");
            }
        }
        if raw.pids_limit.is_some() {
            p.pids_limit = Some(u64::from(self.count_up_to(
                &at("pids_limit"),
                raw.pids_limit,
                1024,
                4_194_304,
            )));
            if p.pids_limit.is_some_and(|n| n < 16) {
                self.err(&at("pids_limit"), "is below 16, where the pool's own worker and its threads cannot run; give it room, like 256");
            }
        }
        if raw.io_weight.is_some() {
            p.io_weight = Some(self.count_up_to(&at("io_weight"), raw.io_weight, 100, 10_000));
        }
        p.identity = match (raw.user, raw.group) {
            (None, None) => None,
            (None, Some(_)) => {
                self.err(&at("group"), "applies with `user`; add user = \"…\" (the group then replaces the user's primary group)");
                None
            }
            (Some(user), group) => (self.identities.entry((user, group)))
                .or_insert_with_key(|(user, group)| {
                    crate::os::identity::lookup(user, group.as_deref())
                })
                .clone()
                .map_err(|m| {
                    let key = if m.starts_with("group") {
                        "group"
                    } else {
                        "user"
                    };
                    self.err(&at(key), m)
                })
                .ok(),
        };
        p.startup_time_limit = self.duration(
            &at("startup_time_limit"),
            raw.startup_time_limit,
            p.startup_time_limit,
        );
        p.shutdown_time_limit = self.duration(
            &at("shutdown_time_limit"),
            raw.shutdown_time_limit,
            p.shutdown_time_limit,
        );
        p.ping_interval = self.duration(&at("ping_interval"), raw.ping_interval, p.ping_interval);
        p.ping_response_time = self.duration(
            &at("ping_response_time"),
            raw.ping_response_time,
            p.ping_response_time,
        );
        p.start = self.choice(
            &at("start"),
            raw.start,
            default_start,
            &[
                ("always", StartMode::Always),
                ("on-demand", StartMode::OnDemand),
            ],
        );
        let idle_given = raw.idle_timeout.is_some();
        let idle = self.duration(&at("idle_timeout"), raw.idle_timeout, DEFAULT_IDLE_TIMEOUT);
        p.idle_timeout = (!idle.is_zero()).then_some(idle);
        if idle_given && p.start == StartMode::Always {
            self.err(
                &at("idle_timeout"),
                "applies to pools that start on demand (a pool that always runs is never stopped for idleness); add start = \"on-demand\", or remove idle_timeout",
            );
        }
        p.warmup_page = raw.warmup_page.and_then(|page| {
            let path = base.join(page);
            let fix = "write a small HTML file (at most 64 KiB) for the master to answer with while the pool starts";
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() <= WARMUP_PAGE_MAX => {}
                Ok(m) if m.is_file() => {
                    self.err(&at("warmup_page"), format!("{} is {} bytes; {fix}", path.display(), m.len()));
                    return None;
                }
                Ok(_) => {
                    self.err(&at("warmup_page"), format!("{} is not a file; {fix}", path.display()));
                    return None;
                }
                Err(e) => {
                    self.err(&at("warmup_page"), format!("cannot read {} ({e}); {fix} (relative paths are from the config file's folder)", path.display()));
                    return None;
                }
            }
            if p.start == StartMode::Always {
                self.err(&at("warmup_page"), "is answered while an on-demand pool starts, and this pool always runs; add start = \"on-demand\", or remove warmup_page");
            }
            Some(path)
        });
        let action_given = raw.idle_action.is_some();
        p.idle_action = self.choice(
            &at("idle_action"),
            raw.idle_action,
            IdleAction::Stop,
            &[("stop", IdleAction::Stop), ("suspend", IdleAction::Suspend)],
        );
        if action_given && p.start == StartMode::Always {
            self.err(
                &at("idle_action"),
                "applies to pools that start on demand (a pool that always runs is never idle-stopped or suspended); add start = \"on-demand\", or remove idle_action",
            );
        }
        if let Some(r) = raw.recycle {
            let rp = |k: &'static str| {
                [
                    Seg::Key("pool"),
                    Seg::Index(i),
                    Seg::Key("recycle"),
                    Seg::Key(k),
                ]
            };
            p.recycle.requests = r
                .requests
                .map(|n| self.positive(&rp("requests"), Some(n), 1));
            p.recycle.interval = r
                .interval
                .map(|v| self.duration(&rp("interval"), Some(v), Duration::ZERO));
            p.recycle.memory = r.memory.map(|v| self.size(&rp("memory"), Some(v), 0));
            p.recycle.overlap = r.overlap.unwrap_or(true);
            for (k, t) in r.schedule.unwrap_or_default().iter().enumerate() {
                match parse_time_of_day(t) {
                    Some(hm) => p.recycle.schedule.push(hm),
                    None => self.err(
                        &[
                            Seg::Key("pool"),
                            Seg::Index(i),
                            Seg::Key("recycle"),
                            Seg::Key("schedule"),
                            Seg::Index(k),
                        ],
                        format!(
                            "`{t}` is not a time of day; write it like \"03:00\" or \"03:00:30\""
                        ),
                    ),
                }
            }
        }
        if let Some(r) = raw.rapid_fail {
            let rp = |k: &'static str| {
                [
                    Seg::Key("pool"),
                    Seg::Index(i),
                    Seg::Key("rapid_fail"),
                    Seg::Key(k),
                ]
            };
            p.rapid_fail.enabled = r.enabled.unwrap_or(true);
            p.rapid_fail.max_crashes = self
                .positive(&rp("max_crashes"), r.max_crashes, 5)
                .min(u32::MAX as u64) as u32;
            p.rapid_fail.interval =
                self.duration(&rp("interval"), r.interval, p.rapid_fail.interval);
        }
        p
    }

    fn pool_cpus(&mut self, path: &[Seg], v: Scalar, topo: &Topology) -> Option<CpuSet> {
        let text = match v {
            Scalar::Text(t) => t,
            Scalar::Int(n) if n >= 0 => n.to_string(),
            other => {
                self.err(
                    path,
                    format!(
                        "{} is not a CPU list; write it like \"1-3,8\"",
                        scalar_text(&other)
                    ),
                );
                return None;
            }
        };
        let set = match CpuSet::parse(&text) {
            Ok(s) => s,
            Err(e) => {
                self.err(path, format!("{e}; write a CPU list like \"1-3,8\""));
                return None;
            }
        };
        let known: CpuSet = topo.cpus.iter().map(|c| c.id).collect();
        let missing = set.difference(&known);
        if !missing.is_empty() {
            let last = known.iter().last().unwrap_or(0);
            self.err(path, format!("CPU(s) {missing} do not exist on this machine (it has 0-{last}); remove them from the list"));
            return None;
        }
        let usable = set.intersection(&topo.online_cpus());
        if usable.is_empty() {
            self.err(path, format!("leaves the pool no online CPU (\"{set}\" are all offline); include at least one of {}", topo.online_cpus()));
            return None;
        }
        Some(set)
    }
}
