//! `espalier topology`, `check`, `nic` and `doctor`: the machine and a config, inspected.
//!
//! Owns: printing what the library modules found. Must not touch: the findings themselves.

use super::{MachineArgs, NicAction};
use crate::config::Config;
use crate::placement;
use crate::server::acme_dns::lookup::Delegation;
use crate::topology::render;
use std::path::{Path, PathBuf};

/// `espalier topology`: the machine as a table or JSON.
pub(super) fn topology(machine: &MachineArgs, json: bool) -> Result<i32, String> {
    let t = machine.read()?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&t).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", render::table(&t));
    }
    Ok(0)
}

/// `espalier check`: a config validated and planned, without running it.
pub(super) fn check(config: &Path, machine: &MachineArgs) -> Result<i32, String> {
    let t = machine.read_placeable()?;
    let c = Config::load(config, &t).map_err(|e| e.to_string())?;
    let plan =
        placement::plan(&t, &c.pools, &[]).map_err(|e| format!("{}: {e}", config.display()))?;
    for w in crate::tls::expiry_warnings(&c.sites, std::time::SystemTime::now()) {
        eprintln!("{}: {w}", config.display());
    }
    let cgroups = machine.roots().0.join("fs/cgroup");
    if store_problems(&c, config)
        | delegation_problems(&c, config)
        | limit_problems(&c, config, &cgroups)
    {
        return Ok(1);
    }
    for addr in addresses_in_use(&c) {
        eprintln!("{}: warning: {addr} is in use by another process, so `serve` cannot listen there (a running espalier that you mean to reload keeps it); stop that process or choose another address", config.display());
    }
    let admin = c.server.admin;
    if std::net::TcpListener::bind(admin).is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
    {
        eprintln!("{}: warning: key `server.admin`: {admin} is in use by another process, so `serve` would refuse to start (unless that is this file's own server, running); give this server its own [server] admin, or serve --admin ADDR", config.display());
    }
    println!(
        "{}: ok — {} pool(s), {} site(s), {} worker(s) planned",
        config.display(),
        c.pools.len(),
        c.sites.len(),
        plan.workers.len()
    );
    Ok(0)
}

/// `memory_limit`, `swap_limit`, `pids_limit` and `io_weight` where the machine's control groups (under `cgroups`) offer
/// no controller to apply them: one line each, with the fix. Whether any was.
fn limit_problems(c: &Config, file: &Path, cgroups: &Path) -> bool {
    use crate::os::cgroup::Hierarchy;
    // v1 accounts swap (memory and swap together) only when the kernel was booted so.
    let (memory, swap, pids, io) = match crate::os::cgroup::detect(cgroups) {
        Some(Hierarchy::V2 {
            memory, pids, io, ..
        }) => (memory, memory, pids, io),
        Some(Hierarchy::V1 {
            memory,
            pids,
            blkio,
            ..
        }) => {
            let swap = memory
                .as_ref()
                .is_some_and(|m| m.join("memory.memsw.limit_in_bytes").exists());
            (memory.is_some(), swap, pids.is_some(), blkio.is_some())
        }
        None => (false, false, false, false),
    };
    let fix = "on cgroup v2, run espalier in a cgroup that may hand the controller to its children (systemd: Delegate=yes); on v1, mount its hierarchy; or remove the key";
    let mut refused = false;
    let server = &c.server;
    let set = |d: crate::config::TenantDefault| matches!(d, crate::config::TenantDefault::Set(_));
    for (key, controller, missing) in [
        (
            "on_demand_memory_limit",
            "memory",
            set(server.on_demand_memory_limit) && !memory,
        ),
        (
            "on_demand_pids_limit",
            "pids",
            set(server.on_demand_pids_limit) && !pids,
        ),
    ] {
        if missing {
            eprintln!("{}: [server] key `{key}`: this machine's control groups ({}) offer no {controller} controller espalier may use; {fix}", file.display(), cgroups.display());
            refused = true;
        }
    }
    for pool in &c.pools {
        let wanted = [
            (
                "memory_limit",
                "memory",
                pool.memory_limit.is_some() && !memory,
            ),
            (
                "swap_limit",
                "swap-accounting memory",
                pool.swap_limit.is_some() && !swap,
            ),
            ("pids_limit", "pids", pool.pids_limit.is_some() && !pids),
            (
                "io_weight",
                "io (v1: blkio with the BFQ scheduler's weights)",
                pool.io_weight.is_some() && !io,
            ),
        ];
        for (key, controller, missing) in wanted {
            if missing {
                eprintln!("{}: pool `{}`: key `{key}`: this machine's control groups ({}) offer no {controller} controller espalier may use; {fix}", file.display(), pool.name, cgroups.display());
                refused = true;
            }
        }
    }
    refused
}

/// The names `[server.acme.dns]` proves in espalier's own zone, each with the CNAME line its
/// zone needs and what a lookup found of it (a name and its wildcard share one challenge
/// name: looked up once). Empty without an own zone.
fn acme_delegations(c: &Config) -> Result<Vec<(String, String, Delegation)>, String> {
    let Some(dns) = c.server.acme.as_ref().and_then(|a| a.dns.as_ref()) else {
        return Ok(Vec::new());
    };
    let crate::config::TxtPublishing::Own { zone, .. } = &dns.publish else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = (crate::server::acme::names(c).into_iter())
        .filter(|(_, proof)| *proof == crate::server::acme::Proof::Dns01)
        .map(|(name, _)| name)
        .collect();
    names.sort_by_key(|n| crate::certs::dns01::challenge_name(n));
    names.dedup_by_key(|n| crate::certs::dns01::challenge_name(n));
    let found = crate::server::acme_dns::lookup::check(&names, zone, dns.resolver)?;
    Ok((names.into_iter().zip(found))
        .map(|(name, found)| {
            let line = crate::certs::dns01::cname_line(&name, zone);
            (name, line, found)
        })
        .collect())
}

/// `check`'s lines on DNS-01's delegations: each name's, in place or the line to add to its
/// zone. Whether any is missing or points elsewhere (a lookup that failed is a warning).
fn delegation_problems(c: &Config, file: &Path) -> bool {
    let at = format!("{}: key `server.acme.dns`", file.display());
    let found = match acme_delegations(c) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("{at}: warning: {e}");
            return false;
        }
    };
    let mut refused = false;
    for (name, line, found) in found {
        let challenge = crate::certs::dns01::challenge_name(&name);
        match (found.problem(&challenge), &found) {
            (None, _) => eprintln!("{at}: {name}: {challenge} is delegated (CNAME in place)"),
            (Some(problem), Delegation::Unknown(_)) => {
                eprintln!("{at}: warning: {name}: {problem}; its zone needs: {line}")
            }
            (Some(problem), _) => {
                eprintln!("{at}: {name} cannot be proven by DNS-01: {problem}; add this line to its zone: {line}");
                refused = true;
            }
        }
    }
    refused
}

/// The certificate store's pairs for the config's names, read and checked as `serve` reads
/// them: a missing pair is a warning (one added later is served without a reload), a pair
/// `serve` would refuse (expired, a key of another certificate) an error. Whether any was.
fn store_problems(c: &Config, file: &Path) -> bool {
    let Some(dir) = &c.server.certificates else {
        return false;
    };
    let now = std::time::SystemTime::now();
    let mut refused = false;
    let on_demand = c.server.acme.as_ref().and_then(|a| a.on_demand.as_ref());
    for site in c.sites.iter().filter(|s| s.tls.is_none()) {
        // A binding without a host takes any name: on demand, ordered once `ask` approves
        // (without `ask`, such a binding and a store are refused).
        let ask = on_demand.and_then(|d| d.ask.as_ref());
        if let (Some(ask), true) = (ask, site.bindings.iter().any(|b| b.tls && b.host.is_none())) {
            eprintln!("{}: site `{}`: a name only its https binding without a host takes is ordered at its first handshake when {} approves it", file.display(), site.name, ask.url);
        }
        for host in site
            .bindings
            .iter()
            .filter(|b| b.tls)
            .filter_map(|b| b.host.as_deref())
        {
            let at = format!(
                "{}: site `{}`: certificate store {}",
                file.display(),
                site.name,
                dir.display()
            );
            let answers_http01 = (site.bindings.iter())
                .any(|b| !b.tls && b.host.as_deref().is_none_or(|h| h == host));
            let dns01 = c.server.acme.as_ref().and_then(|a| a.dns.as_ref());
            let by_dns = dns01.is_some_and(|d| d.all_names || host.starts_with("*."));
            if acme_orders(c, host) && by_dns {
                eprintln!("{at}: {host} is proven by DNS-01 ([server.acme.dns])");
            } else if acme_orders(c, host) && !answers_http01 {
                eprintln!("{at}: {host} has no http:// binding: its certificate is proven by TLS-ALPN-01 on its https:// binding, which the directory reaches on port 443");
            }
            match crate::certs::store::StoreCert::read(dir, host, now) {
                Ok(Some(pair)) => {
                    // Close to its end: said, with who renews it (espalier, or whoever fills
                    // the store).
                    let until = crate::certs::renewal::lifetime(pair.chain.as_bytes()).map(|l| l.1);
                    let left = until.ok().and_then(|u| u.duration_since(now).ok());
                    if let Some(left) = left.filter(|l| *l < crate::tls::EXPIRY_WARNING) {
                        let days = left.as_secs() / 86_400;
                        let who = if acme_orders(c, host) {
                            "`serve` renews it from [server.acme]"
                        } else {
                            "renew it (the store picks the new pair up without a reload)"
                        };
                        eprintln!("{at}: warning: the certificate of {host} ends in {days} day(s); {who}");
                    }
                }
                // Ordered by `serve` itself (but a wildcard, which neither challenge proves:
                // on demand, each name under it is ordered for itself).
                Ok(None) if on_demand.is_some() && !(by_dns && host.starts_with("*.")) => eprintln!("{at}: no pair for {host} yet; `serve` orders {} at the first handshake that asks for it (on_demand)", if host.starts_with("*.") { format!("each name under {host}") } else { host.to_string() }),
                Ok(None) if acme_orders(c, host) => eprintln!("{at}: no pair for {host} yet; `serve` orders it from {}", c.server.acme.as_ref().map_or("", |a| a.directory.as_str())),
                Ok(None) => eprintln!("{at}: warning: no pair for {host}; add {host}.pem and {host}.key (or the parent's _. pair), picked up without a reload", host = host.replace('*', "_")),
                Err(e) => {
                    eprintln!("{at}: {host}: {e}");
                    refused = true;
                }
            }
        }
    }
    refused
}

/// Whether `serve` orders and renews the store's pair of binding host `host` itself
/// (`[server.acme]`; a wildcard's pair neither challenge can prove).
fn acme_orders(c: &Config, host: &str) -> bool {
    let acme = c.server.acme.as_ref();
    acme.is_some_and(|a| a.dns.is_some() || !host.starts_with("*."))
}

/// The certificate store's pairs of the config's names, as `espalier doctor` shows them:
/// (site, file, whole days left, who renews it). A name without a pair is `check`'s to say.
fn store_days_left(
    c: &Config,
    now: std::time::SystemTime,
) -> Vec<(String, String, i64, Option<String>)> {
    let Some(dir) = &c.server.certificates else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for site in c.sites.iter().filter(|s| s.tls.is_none()) {
        for host in (site.bindings.iter().filter(|b| b.tls)).filter_map(|b| b.host.as_deref()) {
            let Some(files) = (crate::certs::store::files_for(dir, host).into_iter())
                .find(|f| f.cert.exists() && f.key.exists())
            else {
                continue;
            };
            let Ok(chain) = std::fs::read(&files.cert) else {
                continue;
            };
            let Ok((_, until)) = crate::certs::renewal::lifetime(&chain) else {
                continue;
            };
            let secs = match until.duration_since(now) {
                Ok(left) => left.as_secs() as i64,
                Err(past) => -(past.duration().as_secs() as i64),
            };
            let renewer = if acme_orders(c, host) {
                "espalier serve renews it from [server.acme]; `espalier status` shows its last error"
            } else {
                "put a renewed pair in the store (picked up without a reload)"
            };
            let file = files.cert.display().to_string();
            out.push((
                site.name.clone(),
                file,
                secs.div_euclid(86_400),
                Some(renewer.into()),
            ));
        }
    }
    out
}

/// The binding addresses another socket holds now (tried with a plain bind, without
/// `SO_REUSEPORT`, and released at once). A warning, not an error: the holder may be the
/// espalier this config is about to be reloaded into.
fn addresses_in_use(c: &Config) -> Vec<std::net::SocketAddr> {
    let mut seen = Vec::new();
    let mut busy = Vec::new();
    for addr in c
        .sites
        .iter()
        .flat_map(|s| s.bindings.iter().map(|b| b.addr))
    {
        if seen.contains(&addr) {
            continue;
        }
        seen.push(addr);
        if let Err(e) = std::net::TcpListener::bind(addr) {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                busy.push(addr);
            }
        }
    }
    busy
}

pub(super) fn nic(action: NicAction) -> Result<i32, String> {
    let (args, apply, dry_run) = match &action {
        NicAction::Plan(a) => (a, false, true),
        NicAction::Apply { nic, dry_run } => (nic, true, *dry_run),
    };
    let t = args.machine.read()?;
    let reserved = match &args.config {
        Some(path) => {
            let c = Config::load(path, &t).map_err(|e| e.to_string())?;
            c.pools
                .iter()
                .filter_map(|p| p.cpus.clone())
                .fold(crate::cpuset::CpuSet::new(), |a, m| a.union(&m))
        }
        None => crate::cpuset::CpuSet::new(),
    };
    let plans = crate::nic::plan(&t, &args.interfaces, &reserved)?;
    let (sysfs, procfs) = args.machine.roots();
    let irqbalance = crate::nic::irqbalance_running(&procfs);
    if irqbalance {
        eprintln!("espalier: warning: irqbalance is running and will move these interrupts again; stop it (systemctl disable --now irqbalance) before applying");
    }
    if !apply {
        if args.json {
            let v = serde_json::json!({ "nics": plans, "irqbalance_running": irqbalance });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", crate::nic::render(&plans));
        }
        return Ok(0);
    }
    let changes = crate::nic::changes(&plans, &sysfs, &procfs);
    let applied = crate::nic::apply(&changes, dry_run);
    let failed = applied.iter().filter(|a| a.error.is_some()).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "dry_run": dry_run, "changes": applied })
            )
            .map_err(|e| e.to_string())?
        );
    } else {
        for a in &applied {
            match &a.error {
                None => println!(
                    "{}{}: {} -> {}    # undo: {}",
                    if dry_run { "would set " } else { "" },
                    a.path.display(),
                    a.old,
                    a.new,
                    a.undo
                ),
                Some(e) => println!("FAILED {}: {e}", a.path.display()),
            }
        }
        if applied.is_empty() {
            println!("nothing to change");
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {} change(s) failed (see FAILED above; writing /proc/irq and queue masks needs root)", applied.len()));
    }
    Ok(0)
}

/// Which member of the fleet's etcd answers, and its revision; why none does.
fn cluster_answers(spec: &crate::config::cluster::ClusterSpec) -> Result<(String, i64), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (_, k, revision) = crate::server::cluster::connect_from(spec, 0).await?;
        Ok((spec.endpoints[k].clone(), revision))
    })
}

pub(super) fn doctor(
    config: Option<PathBuf>,
    machine: MachineArgs,
    json: bool,
) -> Result<i32, String> {
    let t = machine.read()?;
    let c = config
        .as_ref()
        .map(|p| Config::load(p, &t).map_err(|e| e.to_string()))
        .transpose()?;
    let (sysfs, procfs) = machine.roots();
    let mut inputs = crate::doctor::read_inputs(&sysfs, &procfs);
    if let Some(c) = &c {
        let now = std::time::SystemTime::now();
        inputs.certificates = crate::tls::days_left(&c.sites, now);
        inputs.certificates.extend(store_days_left(c, now));
        inputs.cluster = c.server.cluster.as_ref().map(cluster_answers);
        inputs.acme_delegations = match acme_delegations(c) {
            Ok(found) => (found.into_iter())
                .map(|(name, line, found)| {
                    let problem = found.problem(&crate::certs::dns01::challenge_name(&name));
                    (name, line, problem)
                })
                .collect(),
            Err(e) => vec![(String::new(), String::new(), Some(e))],
        };
    }
    // The running kernel's, so only when looking at the live machine.
    if machine.sysfs.is_none() {
        inputs.ktls = Some(crate::os::ktls::probe());
        inputs.io_uring = Some((crate::os::uring::probe(), std::env::var("ESPALIER_IO").ok()));
    }
    let findings = crate::doctor::check(&inputs, &t, c.as_ref());
    let warn = findings
        .iter()
        .any(|f| f.status == crate::doctor::Status::Warn);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "ok": !warn, "findings": findings }))
                .map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", crate::doctor::render(&findings));
    }
    Ok(if warn { 1 } else { 0 })
}
