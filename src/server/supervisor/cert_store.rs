//! The certificate store as the master keeps it: which host names each pool takes from it,
//! the pairs read for starting workers, and every few seconds a look at the files of the
//! running pools' names, so that a certificate added or renewed in the store is served
//! without a reload.
//!
//! Owns: when the store's files are read and what was last seen of them (the sending is
//! `super::cert_updates`). Must not touch: the naming rule or the checks (see
//! `crate::certs::store`) or handshakes (the workers).
//!
//! Cost: nothing without `[server] certificates`. With it, a worker's start reads its own
//! sites' pairs (a hoster's sleeping pools cost nothing), and a scan stats two to four files
//! per name of the pools running now — never the whole store, which may hold ten thousand.

use crate::certs::store::{files_for, Stamp, StoreCert};
use crate::config::Config;
use crate::server::log;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// How often the running pools' store files are looked at.
const SCAN_EVERY: Duration = Duration::from_secs(2);

#[derive(Default)]
pub(super) struct CertStore {
    dir: Option<PathBuf>,
    /// By pool name: the host names (wildcards as `*.example.com`) of its sites that take
    /// their certificates from the store.
    hosts: HashMap<String, Vec<String>>,
    /// By host name: the files as last seen (every candidate pair's stamp), so a scan reads
    /// and checks again only what changed, and says a problem once.
    pub(super) seen: HashMap<String, Vec<Stamp>>,
    next_scan: Option<Instant>,
    /// By pool: names added since the start, ordered on demand (kept across reloads).
    added: HashMap<String, Vec<String>>,
}

impl CertStore {
    /// The store of `config` (empty without `[server] certificates`).
    pub(super) fn new(config: &Config) -> Self {
        let Some(dir) = config.server.certificates.clone() else {
            return CertStore::default();
        };
        // A store that ACME fills may not exist yet (`check` let it be): made now, the
        // master's own, as the keys it will hold are.
        if config.server.acme.is_some() && !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            match std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
            {
                Ok(()) => crate::server::log(
                    "master",
                    format!("made the certificate store {} for ACME", dir.display()),
                ),
                Err(e) => crate::server::log(
                    "master",
                    format!("cannot make the certificate store {}: {e}", dir.display()),
                ),
            }
        }
        let mut hosts: HashMap<String, Vec<String>> = HashMap::new();
        for site in config.sites.iter().filter(|s| s.tls.is_none()) {
            let names: Vec<String> = site
                .bindings
                .iter()
                .filter(|b| b.tls)
                .filter_map(|b| b.host.clone())
                .collect();
            for pool in site.pools() {
                let list = hosts.entry(pool.to_string()).or_default();
                for n in &names {
                    if !list.contains(n) {
                        list.push(n.clone());
                    }
                }
            }
        }
        CertStore {
            dir: Some(dir),
            hosts,
            seen: HashMap::new(),
            next_scan: None,
            added: HashMap::new(),
        }
    }

    /// A new configuration (reload): its names; what was seen of the files, and the names
    /// added on demand, are kept.
    pub(super) fn reconfigure(&mut self, config: &Config) {
        let seen = std::mem::take(&mut self.seen);
        let added = std::mem::take(&mut self.added);
        *self = CertStore::new(config);
        self.seen = seen;
        if self.dir.is_some() {
            for (pool, names) in &added {
                for name in names {
                    self.add(pool, name);
                }
            }
        }
    }

    /// `host` is `pool`'s from now on (a name ordered on demand).
    pub(super) fn add(&mut self, pool: &str, host: &str) {
        let list = self.hosts.entry(pool.to_string()).or_default();
        if !list.iter().any(|h| h == host) {
            list.push(host.to_string());
            let added = self.added.entry(pool.to_string()).or_default();
            added.push(host.to_string());
        }
    }

    /// The next scan runs at once (a pair a handshake waits for is in the store).
    pub(super) fn scan_now(&mut self) {
        self.next_scan = None;
    }

    fn stamps(dir: &std::path::Path, host: &str) -> Vec<Stamp> {
        files_for(dir, host).iter().map(Stamp::of).collect()
    }

    /// Reads `host`'s pair now (its files as `stamps` says they are); a problem is logged
    /// when the files differ from the last time one was said.
    fn read(&mut self, host: &str, stamps: Vec<Stamp>, now: SystemTime) -> Option<StoreCert> {
        let dir = self.dir.as_ref()?;
        let changed = self.seen.get(host) != Some(&stamps);
        self.seen.insert(host.to_string(), stamps);
        match StoreCert::read(dir, host, now) {
            Ok(Some(cert)) => Some(cert),
            Ok(None) => {
                if changed {
                    log("master", format!("certificate store: no pair for {host} in {} (HOST.pem + HOST.key, or _.PARENT.pem + .key for a wildcard); its handshakes fail until one is added", dir.display()));
                }
                None
            }
            Err(e) => {
                if changed {
                    log("master", format!("certificate store: {host}: {e}; its handshakes fail until the files are fixed"));
                }
                None
            }
        }
    }

    /// The pairs a starting worker of `pool` is given.
    pub(super) fn certs_for(&mut self, pool: &str) -> Vec<StoreCert> {
        let (Some(dir), Some(hosts)) = (self.dir.clone(), self.hosts.get(pool).cloned()) else {
            return Vec::new();
        };
        let now = SystemTime::now();
        hosts
            .iter()
            .filter_map(|h| self.read(h, Self::stamps(&dir, h), now))
            .collect()
    }

    /// Whether a scan is due (at most once per [`SCAN_EVERY`]; a store is set); marks it done.
    pub(super) fn scan_due(&mut self) -> bool {
        let now = Instant::now();
        if self.dir.is_none() || self.next_scan.is_some_and(|at| now < at) {
            return false;
        }
        self.next_scan = Some(now + SCAN_EVERY);
        true
    }

    /// Of `pools` (running now), the names whose files changed since last seen, read again:
    /// (pool, pair) to send.
    pub(super) fn scan<'a>(
        &mut self,
        pools: impl Iterator<Item = &'a str>,
    ) -> Vec<(String, StoreCert)> {
        let Some(dir) = self.dir.clone() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        // A site split by path over pools has its names in each: read once, sent to each.
        let mut read_now: HashMap<String, Option<StoreCert>> = HashMap::new();
        for pool in pools {
            let Some(hosts) = self.hosts.get(pool).cloned() else {
                continue;
            };
            for host in hosts {
                if !read_now.contains_key(&host) {
                    let stamps = Self::stamps(&dir, &host);
                    if self.seen.get(&host) == Some(&stamps) {
                        continue;
                    }
                    let cert = self.read(&host, stamps, SystemTime::now());
                    read_now.insert(host.clone(), cert);
                }
                if let Some(Some(cert)) = read_now.get(&host) {
                    log(
                        "master",
                        format!("certificate store: {host}: new files, sent to pool {pool}"),
                    );
                    out.push((pool.to_string(), cert.clone()));
                }
            }
        }
        out
    }
}
