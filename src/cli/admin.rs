//! `espalier status`, `pool stop|start`, `recycle` and `reload`: the running server, through
//! its admin endpoint.
//!
//! Owns: finding the endpoint (`--admin`, or `[server] admin` of `-c FILE`) and printing its
//! answers. Must not touch: HTTP (the client is [`crate::server::admin::request`]) or the
//! status's shape (it reads the typed [`Status`]).

use super::{AdminArgs, MachineArgs};
use crate::config::Config;
use crate::server::admin;
use crate::server::status::Status;
use std::net::SocketAddr;

impl AdminArgs {
    pub(super) fn address(&self) -> Result<SocketAddr, String> {
        if let Some(a) = self.admin {
            return Ok(a);
        }
        match &self.config {
            Some(path) => {
                let t = MachineArgs::default().read()?;
                Ok(Config::load(path, &t)
                    .map_err(|e| e.to_string())?
                    .server
                    .admin)
            }
            None => Ok(crate::config::ServerSettings::default().admin),
        }
    }

    /// The config file whose server is meant (`-c FILE`): the server checks it is that one.
    pub(super) fn meant(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    /// The token for actions: `--token`, `$ESPALIER_ADMIN_TOKEN`, the config's
    /// `admin_token`, or the token file the server made for its address on this machine.
    pub(super) fn token(&self, addr: SocketAddr) -> Option<String> {
        if let Some(t) = self
            .token
            .clone()
            .or_else(|| std::env::var("ESPALIER_ADMIN_TOKEN").ok())
        {
            return Some(t);
        }
        if let Some(path) = &self.config {
            let t = MachineArgs::default().read().ok()?;
            if let Some(token) = Config::load(path, &t).ok()?.server.admin_token {
                return Some(token);
            }
        }
        std::fs::read_to_string(admin::token_file(addr))
            .ok()
            .map(|t| t.trim().to_string())
    }
}

/// A command (`POST path`): prints the server's one-line answer, or returns it as the error.
pub(super) fn post(args: &AdminArgs, path: &str) -> Result<i32, String> {
    let addr = args.address()?;
    let token = args.token(addr);
    let (status, body) = admin::request_as(addr, "POST", path, token.as_deref(), args.meant())?;
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let message = v["message"].as_str().unwrap_or(text.trim());
    if status == 200 {
        println!("{message}");
        Ok(0)
    } else {
        Err(message.to_string())
    }
}

/// Which pools `espalier status` asks for, as given on its command line.
pub(super) struct Wanted {
    pub pool: Option<String>,
    pub state: Option<String>,
    pub page: usize,
    pub per_page: Option<usize>,
}

impl Wanted {
    /// The status query string; a bad value is said as the server would.
    fn query(&self) -> Result<String, String> {
        let mut parts = Vec::new();
        if let Some(p) = &self.pool {
            parts.push(format!("pool={p}"));
        }
        if let Some(s) = &self.state {
            parts.push(format!("state={s}"));
        }
        parts.push(format!("page={}", self.page));
        if let Some(n) = self.per_page {
            parts.push(format!("per_page={n}"));
        }
        let text = parts.join("&");
        crate::server::status::StatusQuery::parse(&text)
            .map_err(|e| format!("espalier status: {e}"))?;
        Ok(text)
    }
}

/// `espalier status`: the pools and workers as a table, or the JSON as served.
pub(super) fn status(args: &AdminArgs, json: bool, wanted: &Wanted) -> Result<i32, String> {
    let path = format!("/status?{}", wanted.query()?);
    let (code, body) = admin::request_as(args.address()?, "GET", &path, None, args.meant())?;
    let text = String::from_utf8_lossy(&body);
    if code != 200 {
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let message = v["message"].as_str().unwrap_or(text.trim()).to_string();
        return Err(format!("the admin endpoint answered {code}: {message}"));
    }
    if json {
        print!("{text}");
        return Ok(0);
    }
    let status: Status = serde_json::from_slice(&body)
        .map_err(|e| format!("the admin endpoint's status is not espalier's: {e}"))?;
    print!("{}", render(&status));
    Ok(0)
}

/// A pool's limits against what its group uses now, one line (`None` without a limit):
/// `memory 45 MiB of 128 MiB (1 OOM kill), 12 of 48 processes, pressure memory 0.0% …`.
fn limits_line(p: &crate::server::status::PoolStatus) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(limit) = p.memory_limit {
        let now = p
            .memory_bytes
            .map_or("-".into(), crate::units::format_bytes);
        let throttled = match (p.memory_high_events, p.memory_max_events) {
            (Some(high), Some(max)) => format!(", throttled {high}× at 90 %, {max}× at the limit"),
            _ => String::new(),
        };
        parts.push(format!(
            "memory {now} of {} ({} OOM kill(s){throttled})",
            crate::units::format_bytes(limit),
            p.oom_kills
        ));
    }
    if let Some(limit) = p.pids_limit {
        parts.push(format!(
            "{} of {limit} processes and threads",
            p.pids.map_or("-".into(), |n| n.to_string())
        ));
    }
    if let Some([memory, cpu, io]) = p.pressure {
        parts.push(format!(
            "pressure (10 s): memory {memory:.1}%, CPU {cpu:.1}%, IO {io:.1}%"
        ));
    }
    (!parts.is_empty()).then(|| format!("LIMITS: {}", parts.join("; ")))
}

/// The fleet's line of `espalier status` (`None` without one): `CLUSTER /espalier/prod: node
/// web-1, revision 42, reachable; members web-1 (42), web-2 (42); ordering a.example by
/// web-2` (the names whose order lock a member holds).
fn cluster_line(c: &crate::server::status::FleetState) -> String {
    let reach = match (c.reachable, c.unreachable_since, &c.cause) {
        (true, ..) => "reachable".to_string(),
        (false, Some(since), cause) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            let ago = now.map_or(0, |n| n.as_secs().saturating_sub(since));
            format!(
                "etcd UNREACHABLE for {ago} s ({})",
                cause.as_deref().unwrap_or("?")
            )
        }
        (false, None, _) => "connecting".to_string(),
    };
    let members: Vec<String> = (c.members.iter())
        .map(|m| {
            let node = m["node"].as_str().unwrap_or("?");
            match m["said"]["revision"].as_i64() {
                Some(r) => format!("{node} ({r})"),
                None => node.to_string(),
            }
        })
        .collect();
    let locks: Vec<String> = (c.locks.iter())
        .map(|l| {
            let (name, node) = (l["name"].as_str(), l["node"].as_str());
            format!("{} by {}", name.unwrap_or("?"), node.unwrap_or("?"))
        })
        .collect();
    let ordering = match locks.is_empty() {
        true => String::new(),
        false => format!("; ordering {}", locks.join(", ")),
    };
    format!(
        "CLUSTER {}: node {}, revision {}, {reach}; members {}{ordering}",
        c.prefix,
        c.node,
        c.revision,
        if members.is_empty() {
            "-".to_string()
        } else {
            members.join(", ")
        }
    )
}

/// The status as the table `espalier status` prints.
fn render(status: &Status) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if let Some(c) = &status.cluster {
        let _ = writeln!(out, "{}", cluster_line(c));
    }
    let _ = writeln!(
        out,
        "{:<14} {:>5} {:<6} {:>8} {:>5} {:<14} {:<10} {:>10} {:>10} {:>9} {:>8}  LAST EXIT",
        "POOL",
        "INDEX",
        "ROLE",
        "PID",
        "NODE",
        "CPUS",
        "STATE",
        "UPTIME",
        "REQUESTS",
        "RSS",
        "RECYCLED"
    );
    let opt = |x: Option<u32>| x.map_or("-".to_string(), |v| v.to_string());
    let shown_all = status.pools.len() == status.pools_total;
    // The dispatcher's rows last (espalier's own pool, in front of the shared addresses).
    for p in status.pools.iter().chain(&status.dispatcher) {
        if let Some(why) = &p.stopped_because {
            let _ = writeln!(out, "{} is STOPPED ({why})", p.name);
        }
        if let Some(line) = limits_line(p) {
            let _ = writeln!(out, "{} {line}", p.name);
        }
        for w in &p.workers {
            let cpus = crate::cpuset::CpuSet::from_ids(w.cpus.iter().copied());
            let _ = writeln!(
                out,
                "{:<14} {:>5} {:<6} {:>8} {:>5} {:<14} {:<10} {:>10} {:>10} {:>9} {:>8}  {}",
                p.name,
                w.index,
                w.role.as_str(),
                opt(w.pid),
                opt(w.node),
                cpus.to_string(),
                w.state.as_str(),
                w.uptime_s
                    .map_or("-".into(), |s| crate::units::format_duration(
                        std::time::Duration::from_secs(s as u64)
                    )),
                w.requests,
                w.resident_bytes
                    .map_or("-".into(), crate::units::format_bytes),
                w.recycles,
                w.last_exit.as_deref().unwrap_or("-")
            );
        }
    }
    if !shown_all {
        let c = &status.counts;
        let _ = writeln!(
            out,
            "\nshowing {} of {} matched pools ({} in all: {} running, {} suspended, {} idle, {} stopped); page {} of {}; --pool, --state, --page, --all",
            status.pools.len(),
            status.pools_matched,
            status.pools_total,
            c.running,
            c.suspended,
            c.idle,
            c.stopped,
            status.page.max(1),
            status.pools_matched.div_ceil(status.per_page.max(1)).max(1),
        );
    }
    if status.addresses.iter().any(|a| a.shared) {
        let _ = writeln!(
            out,
            "\nSHARED ADDRESSES (routed by host and path to each site's pools)"
        );
        for a in status.addresses.iter().filter(|a| a.shared) {
            for site in &a.sites {
                let _ = writeln!(
                    out,
                    "{:<28} {:<28} {:<16} {}",
                    a.address,
                    site.host.as_deref().unwrap_or("(default)"),
                    site.site,
                    site.pools.join(", ")
                );
            }
        }
    }
    if !status.certificates.is_empty() {
        let _ = writeln!(out, "\nCERTIFICATES (ordered by espalier, [server.acme])");
        let at = |t: Option<u64>| {
            t.map_or("-".to_string(), |s| {
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(s),
                )
                .to_string()
            })
        };
        for c in &status.certificates {
            let _ = writeln!(
                out,
                "{:<28} {:<9} ends {:<21} renewed from {}{}",
                c.name,
                c.state,
                at(c.not_after),
                at(c.renew_at),
                c.last_error
                    .as_deref()
                    .map_or(String::new(), |e| format!("  last error: {e}"))
            );
        }
    }
    if !status.upstreams.is_empty() {
        let _ = writeln!(out, "\nUPSTREAMS (servers espalier did not start)");
        for g in &status.upstreams {
            for s in &g.servers {
                let role = if s.backup { " backup" } else { "" };
                let ejected = match s.ejected_by {
                    0 => String::new(),
                    n => format!(", ejected by {n} worker(s)"),
                };
                let _ = writeln!(
                    out,
                    "{:<14} {:<28} {:<12} weight {}{role}{ejected}{}",
                    g.name,
                    s.address,
                    s.state,
                    s.weight,
                    s.last_failure
                        .as_deref()
                        .map_or(String::new(), |f| format!("  last failure: {f}"))
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cluster_line_says_who_orders_which_name() {
        let fleet = crate::server::status::FleetState {
            prefix: "/espalier/prod".into(),
            node: "web-1".into(),
            reachable: true,
            unreachable_since: None,
            cause: None,
            revision: 42,
            members: vec![serde_json::json!({ "node": "web-1", "said": { "revision": 42 } })],
            locks: vec![serde_json::json!({ "name": "shop.example", "node": "web-2" })],
        };
        assert_eq!(
            super::cluster_line(&fleet),
            "CLUSTER /espalier/prod: node web-1, revision 42, reachable; members web-1 (42); ordering shop.example by web-2"
        );
    }
}
