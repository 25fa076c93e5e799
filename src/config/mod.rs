//! The espalier configuration: typed settings with their defaults, loading from TOML, and
//! validation against the machine's topology.
//!
//! Owns: what every key means and defaults to (documented on each field and in the README),
//! and the one-line error messages (`FILE:LINE: key: what is wrong; how to fix it`).
//! Must not touch: placement decisions (that is [`crate::placement`]) or any syscall; the
//! topology it validates against is passed in. The one look at the file system beyond reading
//! the file itself: each site's `root` must be a directory, checked here so that `check`
//! refuses what `serve` could not use, with the key's line.

mod locate;
mod raw;

use crate::cpuset::CpuSet;
use crate::topology::Topology;
use crate::units::{parse_duration, parse_percent, parse_size};
use locate::{path_to_string, Locator, Seg};
use raw::{RawConfig, Scalar};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many worker processes a pool runs (IIS `maxProcesses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processes {
    /// One per NUMA node (or L3 domain with `unit = "l3"`) that has CPUs in the pool's `cpus`;
    /// written `"auto"` or `0`, like IIS's `maxProcesses = 0`.
    Auto,
    Count(u32),
}

/// How a worker's home node is chosen (IIS `numaNodeAssignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// IIS 8's default: the first worker on the node with the most free memory, the following
    /// ones round-robin in node order from there.
    MostFreeMemory,
    /// The OS-scheduling analogue: next node in order, continuing across all pools.
    RoundRobin,
    /// No home node: every worker may use all of the pool's CPUs.
    None,
}

/// How strictly a worker keeps to its home node (IIS `numaNodeAffinityMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// Starts on its home node; may be widened to other nodes when its home is saturated.
    Soft,
    /// Never leaves its home node's CPUs.
    Hard,
}

/// The unit a worker is placed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Node,
    /// An L3 cache domain: several per node on modern CPUs.
    L3,
}

/// The NUMA memory policy applied to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryPolicy {
    /// `MPOL_BIND` to the home node: memory never comes from elsewhere (may fail under
    /// memory pressure instead of going remote). The default for hard affinity.
    Bind,
    /// `MPOL_PREFERRED` for the home node: local when possible, remote rather than fail. The
    /// default for soft affinity, whose threads may run elsewhere anyway.
    Preferred,
    /// Leave the kernel's default (local to whichever CPU allocates).
    Default,
}

/// What a pool's sites do when the pool is stopped (IIS `loadBalancerCapabilities`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadBalancer {
    /// Answer `503 Service Unavailable` (IIS `HttpLevel`).
    Http,
    /// Reset connections (IIS `TcpLevel`), so a load balancer in front fails over.
    Tcp,
}

/// Periodic recycling of a pool's workers (IIS `periodicRestart`).
#[derive(Debug, Clone, PartialEq)]
pub struct Recycle {
    /// After this many requests per worker; `None` = never (IIS default 0).
    pub requests: Option<u64>,
    /// After this much uptime; IIS's default is 29 hours (`1740` minutes). `None` = never.
    pub interval: Option<Duration>,
    /// At these local times of day (`"03:00"`, or with seconds `"03:00:30"`), as seconds
    /// since midnight.
    pub schedule: Vec<u32>,
    /// When a worker's resident memory exceeds this many bytes. `None` = never.
    pub memory: Option<u64>,
    /// Start the replacement before stopping the old worker (IIS `disallowOverlappingRotation
    /// = false`, the default).
    pub overlap: bool,
}

/// Rapid-fail protection (IIS `failure.rapidFailProtection`).
#[derive(Debug, Clone, PartialEq)]
pub struct RapidFail {
    pub enabled: bool,
    /// IIS default: 5 crashes …
    pub max_crashes: u32,
    /// … within 5 minutes.
    pub interval: Duration,
}

/// One application pool: a group of workers and how they are placed.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub name: String,
    /// Default 1, as IIS; `"auto"`/`0` = one per node.
    pub processes: Processes,
    pub placement: Placement,
    pub affinity: Affinity,
    pub unit: Unit,
    /// The CPUs the pool may use (IIS `smpProcessorAffinityMask`); default all online CPUs.
    pub cpus: Option<CpuSet>,
    pub memory_policy: MemoryPolicy,
    /// Cap on the pool's CPU use, as a fraction of one CPU (`"50%"` = half of one CPU,
    /// `"200%"` = two CPUs), summed over all of its workers.
    pub cpu_limit: Option<f64>,
    pub load_balancer: LoadBalancer,
    /// IIS `startupTimeLimit`, default 90 s.
    pub startup_time_limit: Duration,
    /// IIS `shutdownTimeLimit`, default 90 s.
    pub shutdown_time_limit: Duration,
    /// IIS `pingInterval`, default 30 s.
    pub ping_interval: Duration,
    /// IIS `pingResponseTime`, default 90 s.
    pub ping_response_time: Duration,
    pub recycle: Recycle,
    pub rapid_fail: RapidFail,
}

/// The request handlers a site's application can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandlerKind {
    /// Files under the site's `root` (or the built-in welcome page when it has none).
    Static,
    /// The case study's "simple dynamic page", built per request.
    Dynamic,
    /// CPU-heavy work (audio synthesis and encoding), like the web-gardening seed's service.
    Cpu,
}

impl HandlerKind {
    pub const NAMES: &'static str = "\"static\", \"dynamic\" or \"cpu\"";

    pub fn name(self) -> &'static str {
        match self {
            HandlerKind::Static => "static",
            HandlerKind::Dynamic => "dynamic",
            HandlerKind::Cpu => "cpu",
        }
    }
}

/// An application: a URL path prefix served by one pool with one handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    pub path: String,
    pub pool: String,
    pub handler: HandlerKind,
}

/// Where a site listens: `http://IP:PORT[:HOST]`, IIS's `protocol://ip:port:host`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub addr: SocketAddr,
    /// Host header this binding answers; `None` answers any.
    pub host: Option<String>,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.addr)?;
        if let Some(h) = &self.host {
            write!(f, ":{h}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteSpec {
    pub name: String,
    pub bindings: Vec<Binding>,
    /// Document root, resolved against the config file's folder; `None` = built-in page.
    pub root: Option<PathBuf>,
    /// Index files tried for a directory, in order. Default `["index.html"]`.
    pub index: Vec<String>,
    /// Serve symlinks that lead outside `root`. Default false.
    pub follow_symlinks: bool,
    pub apps: Vec<AppSpec>,
}

impl SiteSpec {
    /// The pool serving this site (validation guarantees all its apps share one).
    pub fn pool(&self) -> &str {
        &self.apps[0].pool
    }
}

/// Per-connection protocol limits (`[server.limits]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Longest request line; longer → 414… we answer 431/400 as documented. Default 8 KiB.
    pub max_request_line: usize,
    /// All request headers together; larger → 431. Default 16 KiB.
    pub max_header_size: usize,
    /// Number of header fields; more → 431. Default 100.
    pub max_headers: usize,
    /// Request body; larger → 413. Default 1 MiB.
    pub max_body_size: u64,
    /// Time to receive a whole request head; slower → 408. Default 10 s.
    pub header_timeout: Duration,
    /// Time to receive a request body; slower → 408. Default 30 s.
    pub body_timeout: Duration,
    /// Idle keep-alive connections are closed after this. Default 75 s (nginx's).
    pub keepalive_timeout: Duration,
    /// Open connections per worker; more → 503 and close. Default 16384.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 << 10,
            max_header_size: 16 << 10,
            max_headers: 100,
            max_body_size: 1 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(75),
            max_connections: 16384,
        }
    }
}

/// How a new connection picks the worker thread that accepts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steering {
    /// The thread on the CPU that received the connection (or on its node): a BPF program on
    /// each reuseport group.
    Cpu,
    /// The kernel's reuseport hash of the connection's addresses.
    Hash,
}

/// `[server]`: settings of the master and all workers.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// Admin endpoint for status and metrics. Default 127.0.0.1:9180.
    pub admin: SocketAddr,
    /// Add `X-Espalier-Worker: <pool>/<index>/cpu<N>` to responses. Default false.
    pub worker_header: bool,
    /// Default `cpu`.
    pub steering: Steering,
    /// Listen backlog per socket. Default 1024 (capped by `net.core.somaxconn`).
    pub backlog: u32,
    /// How long in-flight requests may run after SIGTERM. Default 10 s.
    pub shutdown_timeout: Duration,
    pub limits: Limits,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            admin: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9180),
            worker_header: false,
            steering: Steering::Cpu,
            backlog: 1024,
            shutdown_timeout: Duration::from_secs(10),
            limits: Limits::default(),
        }
    }
}

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from; `None` for the built-in default.
    pub source: Option<PathBuf>,
    pub server: ServerSettings,
    pub pools: Vec<PoolSpec>,
    pub sites: Vec<SiteSpec>,
}

/// A config error: one line naming file, line and key, and saying how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All the errors of one file (each is one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl PoolSpec {
    /// A pool with every default, named `name`.
    pub fn with_defaults(name: &str) -> Self {
        PoolSpec {
            name: name.to_string(),
            processes: Processes::Count(1),
            placement: Placement::MostFreeMemory,
            affinity: Affinity::Soft,
            unit: Unit::Node,
            cpus: None,
            memory_policy: MemoryPolicy::Preferred,
            cpu_limit: None,
            load_balancer: LoadBalancer::Http,
            startup_time_limit: Duration::from_secs(90),
            shutdown_time_limit: Duration::from_secs(90),
            ping_interval: Duration::from_secs(30),
            ping_response_time: Duration::from_secs(90),
            recycle: Recycle {
                requests: None,
                interval: None,
                schedule: Vec::new(),
                memory: None,
                overlap: true,
            },
            rapid_fail: RapidFail {
                enabled: true,
                max_crashes: 5,
                interval: Duration::from_secs(300),
            },
        }
    }
}

impl Config {
    /// The configuration used when no file is given: one pool with a worker per NUMA node,
    /// one site on `listen` serving `root` (or the built-in welcome page).
    pub fn builtin(listen: SocketAddr, root: Option<PathBuf>) -> Self {
        let mut pool = PoolSpec::with_defaults("default");
        pool.processes = Processes::Auto;
        Config {
            source: None,
            server: ServerSettings::default(),
            pools: vec![pool],
            sites: vec![SiteSpec {
                name: "default".into(),
                bindings: vec![Binding {
                    addr: listen,
                    host: None,
                }],
                root,
                index: vec!["index.html".into()],
                follow_symlinks: false,
                apps: vec![AppSpec {
                    path: "/".into(),
                    pool: "default".into(),
                    handler: HandlerKind::Static,
                }],
            }],
        }
    }

    /// Reads and validates `path` against `topology`.
    pub fn load(path: &Path, topology: &Topology) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: path.display().to_string(),
                line: None,
                key: String::new(),
                message: format!("cannot read the config file: {e}"),
            }])
        })?;
        Config::parse(&text, path, topology)
    }

    /// Validates config text; `path` names it in errors and anchors relative roots.
    pub fn parse(text: &str, path: &Path, topology: &Topology) -> Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        let locator = Locator::new(text);
        let raw: RawConfig = match toml::from_str(text) {
            Ok(r) => r,
            Err(e) => return Err(ConfigErrors(vec![syntax_error(&file, text, &locator, &e)])),
        };
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut v = Validator {
            file,
            locator,
            errors: Vec::new(),
        };
        let config = v.config(raw, &base, topology);
        if v.errors.is_empty() {
            let mut config = config;
            config.source = Some(path.to_path_buf());
            Ok(config)
        } else {
            Err(ConfigErrors(v.errors))
        }
    }

    pub fn pool(&self, name: &str) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.name == name)
    }
}

/// Turns a TOML/serde error into our one-line form: the key is the text before `=` on the
/// error's line (or the key serde names), under the nearest table header above it.
fn syntax_error(file: &str, text: &str, locator: &Locator, e: &toml::de::Error) -> ConfigError {
    let (line, key) = match e.span() {
        Some(span) => {
            let line = locator.line_of_offset(span.start);
            let line_text = text.lines().nth(line - 1).unwrap_or("");
            let header = text
                .lines()
                .take(line)
                .filter_map(|l| {
                    let t = l.trim();
                    t.starts_with('[')
                        .then(|| t.trim_matches(|c| c == '[' || c == ']').trim().to_string())
                })
                .last();
            let own = line_text
                .split_once('=')
                .map(|(k, _)| k.trim().to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('['));
            let key = match (header, own) {
                (Some(h), Some(k)) => format!("{h}.{k}"),
                (Some(h), None) => h,
                (None, Some(k)) => k,
                (None, None) => String::new(),
            };
            (Some(line), key)
        }
        None => (None, String::new()),
    };
    let mut message = e.message().trim().replace('\n', " ");
    if message.starts_with("unknown field") {
        message.push_str("; remove it or correct its spelling (see the README's config reference)");
    }
    ConfigError {
        file: file.to_string(),
        line,
        key,
        message,
    }
}

/// Collects every error while turning raw values into typed ones.
struct Validator {
    file: String,
    locator: Locator,
    errors: Vec<ConfigError>,
}

impl Validator {
    fn err(&mut self, path: &[Seg], message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            line: self.locator.line(path),
            key: path_to_string(path),
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

    fn config(&mut self, raw: RawConfig, base: &Path, topo: &Topology) -> Config {
        let server = self.server(raw.server.unwrap_or_default());
        let mut pools: Vec<PoolSpec> = Vec::new();
        for (i, rp) in raw.pool.into_iter().enumerate() {
            let pool = self.pool(i, rp, topo);
            if pools.iter().any(|p| p.name == pool.name) {
                self.err(
                    &[Seg::Key("pool"), Seg::Index(i), Seg::Key("name")],
                    format!(
                        "a pool named `{}` is already defined; give each pool its own name",
                        pool.name
                    ),
                );
            }
            pools.push(pool);
        }
        let mut sites: Vec<SiteSpec> = Vec::new();
        for (i, rs) in raw.site.into_iter().enumerate() {
            let site = self.site(i, rs, base, &pools);
            if sites.iter().any(|s| s.name == site.name) {
                self.err(
                    &[Seg::Key("site"), Seg::Index(i), Seg::Key("name")],
                    format!(
                        "a site named `{}` is already defined; give each site its own name",
                        site.name
                    ),
                );
            }
            sites.push(site);
        }
        self.check_bindings(&sites);
        if sites.is_empty() {
            self.err(
                &[Seg::Key("site")],
                "the config defines no [[site]]; add one with `bindings` and a `[[site.app]]`",
            );
        }
        Config {
            source: None,
            server,
            pools,
            sites,
        }
    }

    fn server(&mut self, raw: raw::RawServer) -> ServerSettings {
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
        if limits.max_headers > crate::http::MAX_HEADERS {
            self.err(
                &p("max_headers"),
                format!(
                    "{} is more than the HTTP engine can hold; use at most {}",
                    limits.max_headers,
                    crate::http::MAX_HEADERS
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
        ServerSettings {
            admin,
            worker_header: raw.worker_header.unwrap_or(d.worker_header),
            steering,
            backlog,
            shutdown_timeout,
            limits,
        }
    }

    fn pool(&mut self, i: usize, raw: raw::RawPool, topo: &Topology) -> PoolSpec {
        let at = |k: &'static str| [Seg::Key("pool"), Seg::Index(i), Seg::Key(k)];
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

    fn site(&mut self, i: usize, raw: raw::RawSite, base: &Path, pools: &[PoolSpec]) -> SiteSpec {
        let at = |k: &'static str| [Seg::Key("site"), Seg::Index(i), Seg::Key(k)];
        let name = raw.name.unwrap_or_else(|| format!("site{i}"));
        let mut bindings = Vec::new();
        if raw.bindings.is_empty() {
            self.err(
                &at("bindings"),
                "the site has no bindings; add bindings = [\"http://127.0.0.1:8080\"]",
            );
        }
        for (k, b) in raw.bindings.iter().enumerate() {
            match parse_binding(b) {
                Ok(binding) => bindings.push(binding),
                Err(m) => self.err(
                    &[
                        Seg::Key("site"),
                        Seg::Index(i),
                        Seg::Key("bindings"),
                        Seg::Index(k),
                    ],
                    m,
                ),
            }
        }
        let root = raw.root.map(|r| {
            let p = PathBuf::from(&r);
            if p.is_absolute() {
                p
            } else {
                base.join(p)
            }
        });
        if let Some(dir) = &root {
            let at = [Seg::Key("site"), Seg::Index(i), Seg::Key("root")];
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => self.err(&at, format!("{} is a file, not a directory; name the directory that holds the site's files", dir.display())),
                Err(e) => self.err(&at, format!("{} cannot be used ({e}); create it, or fix the path (relative paths are from the config file's directory)", dir.display())),
            }
        }
        let mut apps = Vec::new();
        if raw.app.is_empty() {
            self.err(&[Seg::Key("site"), Seg::Index(i)], format!("site `{name}` has no [[site.app]]; add one with path = \"/\" and pool = \"...\""));
        }
        for (k, ra) in raw.app.into_iter().enumerate() {
            let ap = |key: &'static str| {
                [
                    Seg::Key("site"),
                    Seg::Index(i),
                    Seg::Key("app"),
                    Seg::Index(k),
                    Seg::Key(key),
                ]
            };
            let path = ra.path.unwrap_or_else(|| "/".into());
            if !path.starts_with('/') {
                self.err(&ap("path"), format!("`{path}` must start with `/`"));
            }
            let pool = match ra.pool {
                Some(p) => p,
                None if pools.len() == 1 => pools[0].name.clone(),
                None => {
                    self.err(
                        &[
                            Seg::Key("site"),
                            Seg::Index(i),
                            Seg::Key("app"),
                            Seg::Index(k),
                        ],
                        "this app names no `pool`; add pool = \"...\"",
                    );
                    String::new()
                }
            };
            if !pool.is_empty() && !pools.iter().any(|p| p.name == pool) {
                let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                let hint = if names.is_empty() {
                    "define a [[pool]] with that name".to_string()
                } else {
                    format!("use one of: {}", names.join(", "))
                };
                self.err(&ap("pool"), format!("no pool is named `{pool}`; {hint}"));
            }
            let handler = self.choice(
                &ap("handler"),
                ra.handler,
                HandlerKind::Static,
                &[
                    ("static", HandlerKind::Static),
                    ("dynamic", HandlerKind::Dynamic),
                    ("cpu", HandlerKind::Cpu),
                ],
            );
            if apps.iter().any(|a: &AppSpec| a.path == path) {
                self.err(
                    &ap("path"),
                    format!("site `{name}` already has an app at `{path}`"),
                );
            }
            apps.push(AppSpec {
                path,
                pool,
                handler,
            });
        }
        // Path routing across pools needs a dispatcher in front of the workers (DESIGN.md:
        // "a later step"); until then one site is served by one pool.
        if let Some(other) = apps.iter().find(|a| a.pool != apps[0].pool) {
            let msg = format!(
                "site `{name}` sends apps to pools `{}` and `{}`; one site is served by one pool — give the other pool its own [[site]] on its own port",
                apps[0].pool, other.pool
            );
            self.err(&[Seg::Key("site"), Seg::Index(i), Seg::Key("app")], msg);
        }
        SiteSpec {
            name,
            bindings,
            root,
            index: raw.index.unwrap_or_else(|| vec!["index.html".into()]),
            follow_symlinks: raw.follow_symlinks.unwrap_or(false),
            apps,
        }
    }

    /// One address may be bound by several sites only with different host names, and only
    /// when the same pool serves them (its workers route by `Host`).
    fn check_bindings(&mut self, sites: &[SiteSpec]) {
        for (i, s) in sites.iter().enumerate() {
            for (k, b) in s.bindings.iter().enumerate() {
                let path = [
                    Seg::Key("site"),
                    Seg::Index(i),
                    Seg::Key("bindings"),
                    Seg::Index(k),
                ];
                let earlier = sites[..=i].iter().enumerate().flat_map(|(j, t)| {
                    let upto = if j == i { k } else { t.bindings.len() };
                    t.bindings[..upto].iter().map(move |c| (t, c))
                });
                for (t, c) in earlier.collect::<Vec<_>>() {
                    if c.addr.port() != b.addr.port() {
                        continue;
                    }
                    let same_addr = c.addr == b.addr
                        || c.addr.ip().is_unspecified()
                        || b.addr.ip().is_unspecified();
                    if !same_addr {
                        continue;
                    }
                    if c.host == b.host {
                        self.err(&path, format!("duplicate binding: `{b}` is already bound by site `{}`; remove one or give it a host name", t.name));
                    } else if !s.apps.is_empty() && !t.apps.is_empty() && t.pool() != s.pool() {
                        self.err(&path, format!(
                            "`{b}` shares port {} with site `{}` but is served by another pool; give it its own port (routing one port to several pools is not supported yet)",
                            b.addr.port(), t.name
                        ));
                    }
                }
            }
        }
    }
}

fn scalar_text(s: &Scalar) -> String {
    match s {
        Scalar::Int(n) => n.to_string(),
        Scalar::Float(f) => f.to_string(),
        Scalar::Text(t) => format!("`{t}`"),
        Scalar::Bool(b) => b.to_string(),
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `HH:MM` or `HH:MM:SS` → seconds since midnight.
fn parse_time_of_day(t: &str) -> Option<u32> {
    let parts: Vec<u32> = t
        .trim()
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [h, m] if *h < 24 && *m < 60 => Some(h * 3600 + m * 60),
        [h, m, s] if *h < 24 && *m < 60 && *s < 60 => Some(h * 3600 + m * 60 + s),
        _ => None,
    }
}

/// Parses `http://IP:PORT[:HOST]`; `*` stands for every IPv4 address, as in IIS.
pub fn parse_binding(text: &str) -> Result<Binding, String> {
    let fix = "write it like \"http://127.0.0.1:8080\", \"http://[::1]:8080\" or \"http://*:80:example.com\"";
    let rest = match text.split_once("://") {
        Some(("http", rest)) => rest,
        Some(("https", _)) => return Err(format!("`{text}`: https bindings are not supported yet; terminate TLS in front of espalier or use http://")),
        Some((scheme, _)) => return Err(format!("`{text}`: unknown protocol `{scheme}`; {fix}")),
        None => return Err(format!("`{text}` has no protocol; {fix}")),
    };
    let (ip_text, after) = if let Some(r) = rest.strip_prefix('[') {
        let (ip, after) = r
            .split_once(']')
            .ok_or_else(|| format!("`{text}`: unclosed `[`; {fix}"))?;
        (
            ip,
            after
                .strip_prefix(':')
                .ok_or_else(|| format!("`{text}` has no port; {fix}"))?,
        )
    } else {
        rest.split_once(':')
            .ok_or_else(|| format!("`{text}` has no port; {fix}"))?
    };
    let ip: IpAddr = if ip_text == "*" {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        ip_text
            .parse()
            .map_err(|_| format!("`{text}`: `{ip_text}` is not an IP address; {fix}"))?
    };
    let (port_text, host) = match after.split_once(':') {
        Some((p, h)) if !h.is_empty() => (p, Some(h.to_ascii_lowercase())),
        Some((p, _)) => (p, None),
        None => (after.trim_end_matches('/'), None),
    };
    let port: u16 = port_text
        .parse()
        .map_err(|_| format!("`{text}`: `{port_text}` is not a port number; {fix}"))?;
    Ok(Binding {
        addr: SocketAddr::new(ip, port),
        host,
    })
}

#[cfg(test)]
mod tests;
