//! The dispatcher: espalier's own pool in front of every address several pools share — the
//! place HTTP.sys holds in IIS. Its worker threads, one per CPU that serves such an address,
//! alone own the address's listening sockets; they read a connection's request head (or peek
//! its TLS ClientHello's name, never answering it), and hand the connection, with the bytes
//! read, to a thread of the pool that serves it (see [`crate::handoff`]).
//!
//! Owns: deciding whether a configuration needs the dispatcher, and the pool it is
//! ([`with_dispatcher`]), pure but for the user lookup. Must not touch: sockets (the listener
//! groups give the dispatcher's threads theirs: `listeners::group_owners`) or connections (the
//! dispatcher is an ordinary worker whose sites are all other pools').
//!
//! # Why a pool of its own
//! Before it, every thread of every pool on a shared address had its own socket in the
//! address's reuseport group, and routed what it accepted: a listening socket (and a copy in
//! the master) per pool thread, idle pools included. The kernel stops a reuseport group at
//! 32,768 sockets — ~1,600 sites of one process per node on a 160-CPU machine — and each pool
//! read the request heads of every other pool's visitors. With the dispatcher, a shared
//! address costs one socket per CPU whatever the number of pools, and:
//! - it holds no tenant's secrets: sites are given to it in outline (`SiteSpec::outline`: no
//!   root, certificate or policy), so it loads no key; as root, espalier runs it as
//!   `[server] dispatcher_user` (default `nobody`);
//! - a crash of it loses no socket: the master holds them, as every listener, and the slot
//!   restarts (rapid-fail protection is off: without it, every shared address is down);
//! - one pool's visitor never wakes another on-demand pool (before, a connection steered to a
//!   sleeping pool's socket woke it, to be handed on);
//! - it is one process per node, its threads pinned, so a connection is routed on the CPU
//!   that received it and handed to the target pool's thread there, else on its node, else
//!   the nearest (the hand-off's ranking).
//!
//! - the pools behind it know their own sites alone (`spawn::own_view`), and hand a request
//!   for any other host back to it: a pool's start, memory and spec do not grow with the
//!   address's sites, and adding a site starts the new site's pool and tells the running
//!   dispatcher the port's new hosts, nothing else (`supervisor::reload_diff`,
//!   `supervisor::hosts_live`).
//!
//! It is made by espalier's own worker code rather than a new program because routing a
//! request is exactly what a worker's request chain does (`handlers::route`): the chain
//! decides, once, which pool a host and path belong to; the dispatcher differs only in owning
//! none. Its cost is the hand-off, once per connection (a `sendmsg` and a `recvmsg`); a
//! keep-alive connection's later requests go straight to the pool's thread. An address one
//! pool serves alone has no dispatcher in front: its own threads accept.

use crate::config::{Affinity, Config, PoolSpec, Processes, StartMode};
use crate::cpuset::CpuSet;
// A fast hasher: the configuration's own addresses and pool names, 10,000 at a change.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::net::SocketAddr;

/// The dispatcher's pool name: with a dot, which no configured pool's name may have.
pub const POOL: &str = crate::routing::DISPATCHER;

/// The addresses several pools share.
pub fn shared_addresses(config: &Config) -> Vec<SocketAddr> {
    // Per address its first pool, and whether another came: not every pool in a set (a
    // hoster's port has 10,000, and this runs at every change).
    let mut pools_at: HashMap<SocketAddr, (&str, bool)> = HashMap::default();
    for site in &config.sites {
        for b in &site.bindings {
            for pool in site.pools() {
                let (first, shared) = pools_at.entry(b.addr).or_insert((pool, false));
                *shared |= *first != pool;
            }
        }
    }
    let mut shared: Vec<SocketAddr> = pools_at
        .into_iter()
        .filter(|(_, (_, shared))| *shared)
        .map(|(addr, _)| addr)
        .collect();
    shared.sort_unstable();
    shared
}

/// `config` with the dispatcher's pool added when some address is shared: one process per
/// node, a thread pinned on each CPU of the pools that share an address (all online CPUs when
/// one of them may use any). `root`: whether espalier runs as root, when the dispatcher runs
/// as `[server] dispatcher_user`; `Err` is the line for a user that does not exist.
pub fn with_dispatcher(mut config: Config, root: bool) -> Result<Config, String> {
    let shared = shared_addresses(&config);
    if shared.is_empty() {
        return Ok(config);
    }
    let sharing: HashSet<&str> = config
        .sites
        .iter()
        .filter(|s| s.bindings.iter().any(|b| shared.contains(&b.addr)))
        .flat_map(|s| s.pools())
        .collect();
    let mut cpus: Option<CpuSet> = Some(CpuSet::new());
    for p in config
        .pools
        .iter()
        .filter(|p| sharing.contains(p.name.as_str()))
    {
        // One that may use any CPU makes it all: the others need not be looked up (a
        // hoster's 10,000 pools, at every change).
        let (Some(all), Some(c)) = (&cpus, &p.cpus) else {
            cpus = None;
            break;
        };
        cpus = Some(all.union(c));
    }
    let mut pool = PoolSpec::with_defaults(POOL);
    pool.processes = Processes::Auto;
    pool.affinity = Affinity::Hard;
    pool.cpus = cpus;
    pool.start = StartMode::Always;
    pool.idle_timeout = None;
    pool.rapid_fail.enabled = false;
    if root {
        let user = &config.server.dispatcher_user;
        let identity = crate::os::identity::lookup(user, None).map_err(|e| {
            format!("[server] dispatcher_user: {e} (the dispatcher routes the shared addresses {}; it runs as an unprivileged user)", list(&shared))
        })?;
        if identity.uid == 0 {
            return Err(format!("[server] dispatcher_user: `{user}` is root; name an unprivileged user (the default is `nobody`)"));
        }
        pool.identity = Some(identity);
    }
    config.pools.push(std::sync::Arc::new(pool));
    Ok(config)
}

fn list(addrs: &[SocketAddr]) -> String {
    let mut text: Vec<String> = addrs.iter().take(3).map(ToString::to_string).collect();
    if addrs.len() > 3 {
        text.push(format!("and {} more", addrs.len() - 3));
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    fn config(text: &str) -> Config {
        Config::parse(text, std::path::Path::new("d.toml"), &fixture("dl980")).unwrap()
    }

    const TWO_POOLS: &str = r#"
[[pool]]
name = "a"
cpus = "0-1"
[[pool]]
name = "b"
cpus = "2"
[[site]]
bindings = ["http://127.0.0.1:8080", "http://127.0.0.1:8081:a.test"]
[[site.app]]
pool = "a"
[[site]]
bindings = ["http://127.0.0.1:8081:b.test"]
[[site.app]]
pool = "b"
"#;

    #[test]
    fn a_shared_address_gets_the_dispatcher_on_the_sharing_pools_cpus() {
        let c = with_dispatcher(config(TWO_POOLS), false).unwrap();
        assert_eq!(
            shared_addresses(&c),
            vec!["127.0.0.1:8081".parse().unwrap()]
        );
        let d = c.pool(POOL).expect("the dispatcher is added");
        assert_eq!(d.processes, Processes::Auto);
        assert_eq!(d.affinity, Affinity::Hard);
        assert_eq!(
            d.cpus.as_ref().map(ToString::to_string).as_deref(),
            Some("0-2")
        );
        assert!(!d.rapid_fail.enabled);
        assert_eq!(d.identity, None, "not root: it runs as espalier does");
    }

    #[test]
    fn no_shared_address_no_dispatcher() {
        let text = TWO_POOLS.replace("127.0.0.1:8081:b.test", "127.0.0.1:8082:b.test");
        let c = with_dispatcher(config(&text), false).unwrap();
        assert!(c.pool(POOL).is_none());
        assert_eq!(c.pools.len(), 2);
    }

    #[test]
    fn as_root_it_runs_as_the_dispatcher_user_which_must_exist_and_not_be_root() {
        let mut c = config(TWO_POOLS);
        c.server.dispatcher_user = "no-such-user-here".into();
        let e = with_dispatcher(c, true).unwrap_err();
        assert!(e.starts_with("[server] dispatcher_user: "), "{e}");
        assert!(e.contains("127.0.0.1:8081"), "{e}");
        let mut c = config(TWO_POOLS);
        c.server.dispatcher_user = "root".into();
        let e = with_dispatcher(c, true).unwrap_err();
        assert!(e.contains("is root"), "{e}");
        let c = with_dispatcher(config(TWO_POOLS), true).unwrap();
        let id = c.pool(POOL).unwrap().identity.clone().expect("an identity");
        assert_eq!(id.user, "nobody");
        assert_ne!(id.uid, 0);
    }

    /// The formula the README gives for the case study's DL980 (8 nodes × 20 CPUs), checked
    /// against the plan the code makes: a shared port of 10,000 one-process pools takes one
    /// socket per CPU — 160 — where one per pool thread took 200,000, six times what the
    /// kernel lets a reuseport group have (32,768).
    #[test]
    fn on_the_case_studys_machine_ten_thousand_pools_on_a_port_take_a_socket_per_cpu() {
        let topology = fixture("dl980");
        let mut text = String::new();
        for i in 0..10_000 {
            text.push_str(&format!("[[pool]]\nname = \"p{i}\"\nstart = \"on-demand\"\n[[site]]\nname = \"s{i}\"\nbindings = [\"http://127.0.0.1:80:s{i}.example\"]\n[[site.app]]\npool = \"p{i}\"\nhandler = \"dynamic\"\n"));
        }
        let config = Config::parse(&text, std::path::Path::new("d.toml"), &topology).unwrap();
        let config = with_dispatcher(config, false).unwrap();
        let plan = crate::placement::plan(&topology, &config.pools, &[]).unwrap();
        let groups = super::super::listeners::wanted_groups(&config);
        assert_eq!(groups.len(), 1);
        let owners =
            super::super::listeners::group_owners(&groups[0].pools, &config, &topology, &plan);
        assert_eq!(owners.len(), 160, "one socket per CPU");
        assert!(owners.iter().all(|o| o.pool == POOL));
        let dispatchers: Vec<_> = plan.workers.iter().filter(|w| w.pool == POOL).collect();
        assert_eq!(dispatchers.len(), 8, "one dispatcher process per node");
        let pool_threads: usize = plan
            .workers
            .iter()
            .filter(|w| w.pool != POOL)
            .map(|w| w.cpus.len())
            .sum();
        assert_eq!(pool_threads, 200_000, "a socket per pool thread, as before");
        assert!(pool_threads > 32_768);
    }

    #[test]
    fn a_configured_pool_cannot_take_the_dispatchers_name() {
        let text = TWO_POOLS.replacen("name = \"a\"", "name = \"espalier.dispatcher\"", 1);
        assert!(Config::parse(&text, std::path::Path::new("d.toml"), &fixture("dl980")).is_err());
    }
}
