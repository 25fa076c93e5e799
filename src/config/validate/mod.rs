//! Validation: the raw TOML turned into the typed [`Config`], every error collected with its
//! line and key (the user fixes a file in one pass, not one error per run).
//!
//! Owns: what is valid and the fix each error suggests. The validator's core and
//! `[server]` are here; what ties pools and sites together in [`across`]; pools in
//! [`pool`], sites in [`site`] (their TLS in
//! [`site_tls`]), `[server.acme]` in [`acme`] (its DNS-01 in
//! [`acme_dns`]).
//! Must not touch: defaults (see [`super::model`]) or placement.

mod access;
mod acme;
mod acme_dns;
mod across;
mod app;
mod auth_request;
mod buffer;
mod cluster;
mod fields;
mod front;
mod http3;
mod isolation;
mod pool;
mod rules;
mod site;
mod site_app;
mod site_tls;
mod tracing;

mod upstream;

use super::error::ConfigError;
use super::include::Source;
use super::locate::{path_to_string, Seg};
use super::model::*;
use super::raw::{self, RawConfig, Scalar};
use super::site::SiteSpec;
use crate::topology::Topology;
use crate::units::{parse_duration, parse_size};
use std::path::Path;
use std::time::Duration;

/// By pool, site or upstream group: (index into the sources, index within that file).
pub(super) type Origins = Vec<(usize, usize)>;

/// Collects every error while turning raw values into typed ones.
/// Pools and sites are numbered across every file read (`include`); an error about one names
/// the file it was written in, and its index and line there.
pub(super) struct Validator {
    pub(super) sources: Vec<Source>,
    /// By pool, by site: (index into `sources`, index within that file).
    pub(super) pool_origin: Origins,
    pub(super) site_origin: Origins,
    pub(super) upstream_origin: Origins,
    /// Whether `[server] certificates` names a store (a site's https bindings may then go
    /// without `tls`).
    pub(super) store: bool,
    /// Whether `[server.acme]` orders on demand the names `ask` approves: an https binding
    /// without a host may then take its certificates from the store, name by name.
    pub(super) asks: bool,
    /// The pools by name, once they are read (sites look theirs up: thousands of each).
    /// Each pool's index by name (a fast hasher: the configuration's own names, 10,000 at
    /// a hoster's every change).
    pub(super) pool_index: rustc_hash::FxHashMap<String, usize>,
    /// The upstream groups, read before the sites (whose paths name them, or add one by
    /// writing a server's address).
    pub(super) upstreams: Vec<super::upstream::UpstreamSpec>,
    /// The pools' users (and groups) looked up, each once: thousands of pools may run as
    /// one user, and each look-up reads the user and group databases.
    pub(super) identities: IdentitiesSeen,
    pub(super) errors: Vec<ConfigError>,
}

/// How a pool that does not say `start` starts, when `pools` are written: IIS 8.5's dynamic
/// site activation — a hoster's many pools start on demand.
pub(super) fn default_start(pools: usize) -> StartMode {
    if pools >= ON_DEMAND_FROM_POOLS {
        StartMode::OnDemand
    } else {
        StartMode::Always
    }
}

/// A validation's user look-ups, by (user, group).
pub(super) type IdentitiesSeen = std::collections::HashMap<
    (String, Option<String>),
    Result<crate::os::identity::Identity, String>,
>;

impl Validator {
    /// A validator of the pools and sites read from `sources` (the main file first), each
    /// pool's, site's and upstream group's file and place there given by its origins.
    pub(super) fn new(
        sources: Vec<Source>,
        (pool_origin, site_origin, upstream_origin): (Origins, Origins, Origins),
    ) -> Self {
        Validator {
            sources,
            pool_origin,
            site_origin,
            upstream_origin,
            store: false,
            asks: false,
            pool_index: Default::default(),
            upstreams: Vec::new(),
            identities: Default::default(),
            errors: Vec::new(),
        }
    }

    /// Says what the server's settings tell every site: whether a store holds certificates,
    /// and whether ACME orders on demand the names `ask` approves.
    pub(super) fn know_server(&mut self, server: &ServerSettings) {
        self.store = server.certificates.is_some();
        self.asks = (server.acme.as_ref())
            .and_then(|a| a.on_demand.as_ref())
            .is_some_and(|d| d.ask.is_some());
    }

    fn err(&mut self, path: &[Seg], message: impl Into<String>) {
        let mut path = path.to_vec();
        let origin = match path.as_slice() {
            [Seg::Key("pool"), Seg::Index(i), ..] => self.pool_origin.get(*i),
            [Seg::Key("site"), Seg::Index(i), ..] => self.site_origin.get(*i),
            [Seg::Key("upstream"), Seg::Index(i), ..] => self.upstream_origin.get(*i),
            _ => None,
        };
        let source = match origin {
            Some(&(file, local)) => {
                path[1] = Seg::Index(local);
                &self.sources[file]
            }
            None => &self.sources[0],
        };
        self.errors.push(ConfigError {
            file: source.file.clone(),
            line: source.locator.line(&path),
            key: path_to_string(&path),
            message: message.into(),
        });
    }

    fn duration(&mut self, path: &[Seg], v: Option<Scalar>, default: Duration) -> Duration {
        match v {
            None => default,
            Some(Scalar::Int(n)) if n >= 0 => Duration::from_secs(n as u64),
            Some(Scalar::Text(t)) => parse_duration(&t).unwrap_or_else(|m| {
                self.err(path, m);
                default
            }),
            Some(other) => {
                self.err(
                    path,
                    format!("{other:?} is not a duration; write it like \"30s\" or \"5m\""),
                );
                default
            }
        }
    }

    fn size(&mut self, path: &[Seg], v: Option<Scalar>, default: u64) -> u64 {
        match v {
            None => default,
            Some(Scalar::Int(n)) if n >= 0 => n as u64,
            Some(Scalar::Text(t)) => parse_size(&t).unwrap_or_else(|m| {
                self.err(path, m);
                default
            }),
            Some(other) => {
                self.err(
                    path,
                    format!("{other:?} is not a size; write it like \"16KiB\" or \"2GiB\""),
                );
                default
            }
        }
    }

    /// A duration that must not be zero: a zero timeout would close every connection at once.
    fn nonzero_duration(&mut self, path: &[Seg], v: Option<Scalar>, default: Duration) -> Duration {
        let d = self.duration(path, v, default);
        if d.is_zero() {
            self.err(
                path,
                "must be above 0 (a zero timeout closes every connection at once); remove the key for the default",
            );
            return default;
        }
        d
    }

    fn positive(&mut self, path: &[Seg], v: Option<i64>, default: u64) -> u64 {
        match v {
            None => default,
            Some(n) if n > 0 => n as u64,
            Some(n) => {
                self.err(path, format!("{n} must be a whole number above 0"));
                default
            }
        }
    }

    fn choice<T: Copy>(
        &mut self,
        path: &[Seg],
        v: Option<String>,
        default: T,
        options: &[(&str, T)],
    ) -> T {
        let Some(text) = v else { return default };
        match options.iter().find(|(n, _)| *n == text) {
            Some((_, t)) => *t,
            None => {
                let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
                self.err(path, format!("`{text}` is not one of {}", names.join(", ")));
                default
            }
        }
    }

    pub(super) fn config(&mut self, raw: RawConfig, base: &Path, topo: &Topology) -> Config {
        let server = self.server(raw.server.unwrap_or_default(), base);
        self.know_server(&server);
        let mut pools: Vec<std::sync::Arc<PoolSpec>> = Vec::new();
        let default_start = default_start(raw.pool.len());
        let mut pool_names = std::collections::HashSet::new();
        for (i, rp) in raw.pool.into_iter().enumerate() {
            let pool = self.pool(i, rp, topo, base, default_start);
            if !pool_names.insert(pool.name.clone()) {
                self.err(
                    &[Seg::Key("pool"), Seg::Index(i), Seg::Key("name")],
                    format!(
                        "a pool named `{}` is already defined; give each pool its own name",
                        pool.name
                    ),
                );
            }
            pools.push(std::sync::Arc::new(pool));
        }
        // A config with no pool at all (a reverse proxy's, a static site's) is served by one
        // of espalier's workers per NUMA node, as the built-in default is.
        self.hide_other_pools(&mut pools);
        if pools.is_empty() && pool_names.is_empty() {
            let mut pool = PoolSpec::with_defaults("default");
            pool.processes = Processes::Auto;
            pools.push(std::sync::Arc::new(pool));
        }
        self.pool_index = pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .rev()
            .collect();
        self.upstreams = self.read_upstreams(raw.upstream, base);
        // The groups written as [[upstream]]; a path's own address adds one after them.
        let written_groups = self.upstreams.len();
        let mut sites: Vec<std::sync::Arc<SiteSpec>> = Vec::new();
        let mut site_names = std::collections::HashSet::new();
        for (i, rs) in raw.site.into_iter().enumerate() {
            let site = self.site(i, rs, base, &pools);
            if !site_names.insert(site.name.clone()) {
                self.err(
                    &[Seg::Key("site"), Seg::Index(i), Seg::Key("name")],
                    format!(
                        "a site named `{}` is already defined; give each site its own name",
                        site.name
                    ),
                );
            }
            sites.push(std::sync::Arc::new(site));
        }
        self.check_across(&server, written_groups, &mut sites, &pools);
        Config {
            source: None,
            server,
            pools,
            sites,
            upstreams: std::mem::take(&mut self.upstreams),
        }
    }

    /// `[server] on_demand_memory_limit` (a size, `memory`) or `on_demand_pids_limit` (a
    /// count): `"auto"` (the default), `"none"`, or the limit, at least what a pool's own
    /// `memory_limit` or `pids_limit` may be.
    fn tenant_default(
        &mut self,
        key: &'static str,
        v: Option<Scalar>,
        memory: bool,
    ) -> TenantDefault {
        let at = [Seg::Key("server"), Seg::Key(key)];
        let (floor, example) = if memory {
            (32 << 20, "\"512MiB\"")
        } else {
            (16, "512")
        };
        let n = match v {
            None => return TenantDefault::Auto,
            Some(Scalar::Text(t)) if t == "auto" => return TenantDefault::Auto,
            Some(Scalar::Text(t)) if t == "none" => return TenantDefault::Off,
            Some(Scalar::Int(n)) if n > 0 => n as u64,
            Some(Scalar::Text(t)) if memory => match parse_size(&t) {
                Ok(n) => n,
                Err(m) => {
                    self.err(
                        &at,
                        format!("{m}; or write \"auto\" (the default) or \"none\""),
                    );
                    return TenantDefault::Auto;
                }
            },
            Some(other) => {
                self.err(&at, format!("{other:?} is not a limit; write \"auto\" (the default), \"none\" or one like {example}"));
                return TenantDefault::Auto;
            }
        };
        if n < floor {
            let what = if memory { "32 MiB" } else { "16" };
            self.err(&at, format!("is below {what}, where a pool's own worker cannot run; give it room, like {example}"));
            return TenantDefault::Auto;
        }
        TenantDefault::Set(n)
    }

    fn server(&mut self, raw: raw::RawServer, base: &Path) -> ServerSettings {
        let d = ServerSettings::default();
        let admin = match raw.admin {
            None => d.admin,
            Some(a) => a.parse().unwrap_or_else(|_| {
                self.err(
                    &[Seg::Key("server"), Seg::Key("admin")],
                    format!("`{a}` is not an address; write it like \"127.0.0.1:9180\""),
                );
                d.admin
            }),
        };
        let admin_token = raw.admin_token.filter(|t| {
            let ok = t.len() >= 16 && t.bytes().all(|b| b.is_ascii_graphic());
            if !ok {
                self.err(
                    &[Seg::Key("server"), Seg::Key("admin_token")],
                    "must be at least 16 printable characters without spaces; generate one with `openssl rand -hex 24`",
                );
            }
            ok
        });
        if !admin.ip().is_loopback() && admin_token.is_none() {
            self.err(
                &[Seg::Key("server"), Seg::Key("admin")],
                format!("{admin} is reachable from other machines, and its actions (stop, recycle, reload) would be guarded only by a token kept on this one; set [server] admin_token (`openssl rand -hex 24`), or use 127.0.0.1"),
            );
        }
        let backlog = self.positive(
            &[Seg::Key("server"), Seg::Key("backlog")],
            raw.backlog,
            d.backlog as u64,
        );
        let backlog = u32::try_from(backlog).unwrap_or(u32::MAX);
        let shutdown_timeout = self.duration(
            &[Seg::Key("server"), Seg::Key("shutdown_timeout")],
            raw.shutdown_timeout,
            d.shutdown_timeout,
        );
        let drain_delay = self.duration(
            &[Seg::Key("server"), Seg::Key("drain_delay")],
            raw.drain_delay,
            d.drain_delay,
        );
        let mut bound = |key: &'static str, v: Option<i64>| {
            v.map(|_| self.positive(&[Seg::Key("server"), Seg::Key(key)], v, 1))
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        let on_demand_starting = bound("on_demand_starting", raw.on_demand_starting);
        let on_demand_running = bound("on_demand_running", raw.on_demand_running);
        let on_demand_memory_limit =
            self.tenant_default("on_demand_memory_limit", raw.on_demand_memory_limit, true);
        let on_demand_pids_limit =
            self.tenant_default("on_demand_pids_limit", raw.on_demand_pids_limit, false);
        let l = raw.limits.unwrap_or_default();
        let dl = Limits::default();
        let p = |k: &'static str| [Seg::Key("server"), Seg::Key("limits"), Seg::Key(k)];
        let limits = Limits {
            max_request_line: self.size(
                &p("max_request_line"),
                l.max_request_line,
                dl.max_request_line as u64,
            ) as usize,
            max_header_size: self.size(
                &p("max_header_size"),
                l.max_header_size,
                dl.max_header_size as u64,
            ) as usize,
            max_headers: self.positive(&p("max_headers"), l.max_headers, dl.max_headers as u64)
                as usize,
            max_body_size: self.size(&p("max_body_size"), l.max_body_size, dl.max_body_size),
            header_timeout: self.nonzero_duration(
                &p("header_timeout"),
                l.header_timeout,
                dl.header_timeout,
            ),
            body_timeout: self.nonzero_duration(
                &p("body_timeout"),
                l.body_timeout,
                dl.body_timeout,
            ),
            keepalive_timeout: self.nonzero_duration(
                &p("keepalive_timeout"),
                l.keepalive_timeout,
                dl.keepalive_timeout,
            ),
            max_connections: self.positive(
                &p("max_connections"),
                l.max_connections,
                dl.max_connections as u64,
            ) as usize,
        };
        if limits.max_headers > crate::config::MAX_HEADERS {
            self.err(
                &p("max_headers"),
                format!(
                    "{} is more than the HTTP engine can hold; use at most {}",
                    limits.max_headers,
                    crate::config::MAX_HEADERS
                ),
            );
        }
        if limits.max_request_line > limits.max_header_size {
            self.err(&p("max_request_line"), "is larger than server.limits.max_header_size, which includes the request line; raise max_header_size");
        }
        let steering = self.choice(
            &[Seg::Key("server"), Seg::Key("steering")],
            raw.steering,
            d.steering,
            &[("cpu", Steering::Cpu), ("hash", Steering::Hash)],
        );
        let ktls = self.choice(
            &[Seg::Key("server"), Seg::Key("ktls")],
            raw.ktls,
            d.ktls,
            &[("auto", true), ("off", false)],
        );
        let io = self.choice(
            &[Seg::Key("server"), Seg::Key("io")],
            raw.io,
            d.io,
            &[
                ("auto", IoChoice::Auto),
                ("uring", IoChoice::Uring),
                ("epoll", IoChoice::Epoll),
            ],
        );
        let orders = raw.acme.is_some();
        let certificates = raw.certificates.and_then(|dir| {
            let dir = base.join(dir);
            match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Some(dir),
                // ACME writes there: the master makes the folder (0700) as it starts.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && orders => Some(dir),
                Ok(_) => {
                    self.err(&[Seg::Key("server"), Seg::Key("certificates")], format!("{} is a file; name the folder that holds HOST.pem and HOST.key", dir.display()));
                    None
                }
                Err(e) => {
                    self.err(&[Seg::Key("server"), Seg::Key("certificates")], format!("{} cannot be used ({e}); create the folder, or fix the path (relative paths are from the config file's folder)", dir.display()));
                    None
                }
            }
        });
        let acme = raw
            .acme
            .and_then(|a| self.acme(a, base, certificates.is_some()));
        let tracing = raw.tracing.and_then(|t| self.tracing(t));
        let cluster = raw.cluster.and_then(|c| self.cluster(c, base));
        if let (Some(c), true) = (&cluster, acme.is_some()) {
            self.fleet_orders(c);
        }
        ServerSettings {
            cluster,
            tracing,
            acme,
            admin,
            admin_token,
            certificates,
            worker_header: raw.worker_header.unwrap_or(d.worker_header),
            // Looked up when it is needed (as root, with a shared address): see
            // `server::dispatcher`.
            dispatcher_user: raw.dispatcher_user.unwrap_or(d.dispatcher_user),
            steering,
            ktls,
            http3: raw.http3.unwrap_or(d.http3),
            http3_early_data: raw.http3_early_data.unwrap_or(d.http3_early_data),
            io,
            backlog,
            shutdown_timeout,
            drain_delay,
            on_demand_starting,
            on_demand_running,
            on_demand_memory_limit,
            on_demand_pids_limit,
            limits,
        }
    }
}

pub(super) fn scalar_text(s: &Scalar) -> String {
    match s {
        Scalar::Int(n) => n.to_string(),
        Scalar::Float(f) => f.to_string(),
        Scalar::Text(t) => format!("`{t}`"),
        Scalar::Bool(b) => b.to_string(),
    }
}
