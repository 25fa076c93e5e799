//! The typed configuration: every setting of `[server]`, `[[pool]]` and `[[site]]`, with the
//! defaults the README documents (IIS's, where IIS has one).
//!
//! Owns: the settings' types and defaults. Must not touch: how TOML becomes them (see
//! [`super::validate`]).

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

pub use crate::routing::rules::{RuleAction, RuleSpec};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// The largest `max_headers` the HTTP engine supports (its header array lives on the stack):
/// a larger limit is refused when the config is checked.
pub const MAX_HEADERS: usize = 256;

pub use crate::certs::TlsFiles;

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
    /// The user's application the pool runs instead of espalier's own workers (`command`).
    pub app: Option<AppCommand>,
    /// The user and groups its workers and application processes run as (`user`, `group`);
    /// `None` = the user espalier runs as.
    pub identity: Option<crate::os::identity::Identity>,
    /// When its processes start (IIS `startMode`): at `serve`, or on the first connection.
    pub start: StartMode,
    /// An on-demand pool's process that served nothing (no request, no open connection) for
    /// this long is stopped, and starts again on the next connection (IIS `idleTimeout`,
    /// default 20 minutes); `None` = never.
    pub idle_timeout: Option<Duration>,
    /// What idleness does to it (IIS `idleTimeoutAction`): stop its processes, or freeze
    /// them and give back their memory (IIS 8.5's `Suspend`), to be thawed by the next
    /// connection. Default `Stop`.
    pub idle_action: IdleAction,
    /// An on-demand pool's page answered `503` with `Retry-After` by the master while the
    /// pool starts, instead of holding the waking client (IIS's `warmupPage`
    /// of Application Initialization). Default none: the client waits.
    pub warmup_page: Option<PathBuf>,
}

/// What an on-demand pool's idle process undergoes (IIS `idleTimeoutAction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdleAction {
    /// Stopped; the next connection starts a new process (IIS `Terminate`).
    Stop,
    /// Frozen (cgroup freezer) and its memory reclaimed; the next connection thaws it.
    Suspend,
}

/// When a pool's processes start (IIS `startMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartMode {
    /// With `serve`, and kept running.
    Always,
    /// On the first connection or hand-off for one of its sites; stopped again when idle.
    OnDemand,
}

/// From this many pools on, a pool starts on demand unless it says otherwise: IIS 8.5
/// activates sites dynamically from 100 sites on, since most of a hoster's sites are idle.
pub const ON_DEMAND_FROM_POOLS: usize = 100;

/// The largest `warmup_page`: a page the master answers from memory, not a site.
pub const WARMUP_PAGE_MAX: u64 = 64 << 10;

/// IIS's default `idleTimeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// How requests reach a pool's application processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Transport {
    /// systemd socket activation: the app accepts on the pool's listeners itself (zero hops).
    Activation,
    /// espalier's workers accept and forward each request to an app process on their node.
    Proxy,
    /// As `Proxy`, in FastCGI (php-fpm, php-cgi), with scripts under the site's `root`.
    FastCgi,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Activation => "activation",
            Transport::Proxy => "proxy",
            Transport::FastCgi => "fastcgi",
        }
    }
}

/// Where a proxied app process listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpstreamKind {
    /// A free loopback port, in `PORT` and `{port}`.
    Tcp,
    /// A unix socket path, in `ESPALIER_SOCKET` and `{socket}`.
    Unix,
}

/// A pool's application: the program each of its processes runs, and how it is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppCommand {
    /// argv, no shell; `{port}` and `{socket}` are replaced per process.
    pub command: Vec<String>,
    /// Working directory (resolved against the config file's folder; default that folder).
    pub directory: PathBuf,
    /// Added to the environment espalier was started with.
    pub environment: Vec<(String, String)>,
    pub transport: Transport,
    /// A path that must answer 2xx before a process counts as ready, and at every ping.
    pub health: Option<String>,
    /// Paths requested of a new process (first start, restart, recycle) once it is up and
    /// before it takes traffic, in order (IIS Application Initialization).
    pub warmup: Vec<String>,
    pub upstream: UpstreamKind,
    /// Proxy: connecting to an app process. Default 5 s.
    pub connect_timeout: Duration,
    /// Proxy: waiting for the app's response head, or for more of its body. Default 60 s
    /// (nginx's `proxy_read_timeout`).
    pub response_timeout: Duration,
    /// FastCGI: the extensions of the files the app may run (`.php`); every other path is
    /// refused before it reaches the app (see `proxy::script`).
    pub script_extensions: Vec<String>,
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
    /// Forwarded to the pool's application processes (a pool with `command` and
    /// `transport = "proxy"`); set by validation, never written in a config.
    Proxy,
}

impl HandlerKind {
    pub const NAMES: &'static str = "\"static\", \"dynamic\" or \"cpu\"";

    pub fn name(self) -> &'static str {
        match self {
            HandlerKind::Static => "static",
            HandlerKind::Dynamic => "dynamic",
            HandlerKind::Cpu => "cpu",
            HandlerKind::Proxy => "proxy",
        }
    }
}

/// An application: a URL path prefix served by one pool with one handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    pub path: String,
    /// Empty for a static path that names no pool on a site whose other paths do: it is
    /// served by whichever of the site's pools holds the connection (see [`Self::any_pool`]).
    pub pool: String,
    pub handler: HandlerKind,
    /// Files under the site's `root` are served as files before the app is asked (nginx's
    /// `try_files $uri $uri/ …`, Caddy's `php_fastcgi`): the default of a FastCGI app,
    /// `try_files = true` for a proxied one. See [`crate::handlers`]' front controller.
    #[serde(default, skip_serializing_if = "is_false")]
    pub try_files: bool,
    /// A FastCGI app's front controller (`/index.php`): the script run for a path that is
    /// neither a script nor a file, with the original URI in `REQUEST_URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// URL path prefixes (without a trailing `/`) under which no script runs: upload folders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_scripts: Vec<String>,
    /// Its own header fields, over the site's (see [`SiteSpec::headers`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Its static files' `Cache-Control`, before the site's (see [`SiteSpec::cache`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<(String, String)>,
    /// A static path's own folder, its prefix not part of the file path (nginx's `alias`:
    /// `/static/x.css` is `ALIAS/x.css`); `None`: under the site's root, prefix included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<PathBuf>,
}

impl AppSpec {
    /// `path` served by `pool` with `handler`, no files tried before it.
    pub fn new(path: String, pool: String, handler: HandlerKind) -> Self {
        AppSpec {
            path,
            pool,
            handler,
            try_files: false,
            fallback: None,
            no_scripts: Vec::new(),
            headers: Vec::new(),
            cache: Vec::new(),
            alias: None,
        }
    }

    /// A static path served by whichever pool holds the connection (`/static/` beside a
    /// proxied or FastCGI app, on https as on http: a TLS connection belongs to one pool).
    pub fn any_pool(&self) -> bool {
        self.pool.is_empty()
    }

    /// Whether `pool` answers this path when it holds the connection.
    pub fn answered_by(&self, pool: &str) -> bool {
        self.any_pool() || self.pool == pool
    }
}

/// Where a site listens: `http://IP:PORT[:HOST]`, IIS's `protocol://ip:port:host`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub addr: SocketAddr,
    /// Host header this binding answers (and, over TLS, the SNI name); `None` answers any.
    pub host: Option<String>,
    /// `https://`: TLS, with the site's certificate.
    #[serde(default)]
    pub tls: bool,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.addr)?;
        if let Some(h) = &self.host {
            write!(f, ":{h}")?;
        }
        Ok(())
    }
}

/// A site. In a worker's spec, most sites are another pool's [`outline`](SiteSpec::outline),
/// so what is empty is not written (a hoster's thousands of outlines stay a few bytes each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Document root, resolved against the config file's folder; `None` = built-in page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// Index files tried for a directory, in order. Default `["index.html"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub index: Vec<String>,
    /// Serve symlinks that lead outside `root`. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow_symlinks: bool,
    pub apps: Vec<AppSpec>,
    /// Where and how the site's requests are logged; `None` = not logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogSpec>,
    /// Whether its bindings' connections start with a PROXY protocol header (v1 or v2) from a
    /// load balancer, naming the real client. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub proxy_protocol: bool,
    /// Its certificate chain and key for `https://` bindings (`tls = { cert, key }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// `Strict-Transport-Security` sent with its answers over TLS (`max-age=…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hsts: Option<String>,
    /// Its `http://` bindings answer 308 to the same URL on its first https port.
    #[serde(default, skip_serializing_if = "is_false")]
    pub redirect_to_https: bool,
    /// Header fields set on its answers, its apps' included: `(name, value)`; a field the
    /// app sent by that name is replaced, and an empty value only removes it (`Server`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// `Cache-Control` of its static files: `(content type, value)`, the type exact
    /// (`text/css`), a family (`image/*`) or `*`; the first that matches wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<(String, String)>,
    /// Its redirect and rewrite rules, in order (see [`crate::routing::rules`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSpec>,
    /// Its own error pages: `(status, file)`, the file resolved against the config's folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<(u16, PathBuf)>,
    /// Its apps' own error answers are replaced by its page for their status.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replace_app_errors: bool,
    /// The content codings its answers may go out in, its preference first; empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compress: Vec<crate::compress::Coding>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl SiteSpec {
    /// The pools its apps name, each once, in the order of its apps (a static path without a
    /// pool names none).
    pub fn pools(&self) -> Vec<&str> {
        let mut pools: Vec<&str> = Vec::new();
        for a in self.apps.iter().filter(|a| !a.any_pool()) {
            if !pools.contains(&a.pool.as_str()) {
                pools.push(&a.pool);
            }
        }
        pools
    }

    /// Whether `pool` serves any of the site's apps (a site's apps may be spread over pools by
    /// path, as IIS applications are).
    pub fn served_by(&self, pool: &str) -> bool {
        self.apps.iter().any(|a| a.pool == pool)
    }

    /// What another pool's worker is told of the site: its name and which pool serves which
    /// path — what routing and hand-off need (the address's host table says which names lead
    /// to it) — without its bindings, root, log, certificate and policies, which only the
    /// pools that serve it act on. Hosting thousands of sites, those were most of every
    /// worker's spec; and a change to them (a reload of one site's file) leaves the other
    /// pools' workers as they are.
    pub fn outline(&self) -> SiteSpec {
        SiteSpec {
            name: self.name.clone(),
            bindings: Vec::new(),
            root: None,
            index: Vec::new(),
            follow_symlinks: false,
            // Which pool serves which path; how the path is served is its pool's business.
            apps: self
                .apps
                .iter()
                .map(|a| AppSpec::new(a.path.clone(), a.pool.clone(), a.handler))
                .collect(),
            access_log: None,
            proxy_protocol: false,
            tls: None,
            hsts: None,
            redirect_to_https: false,
            headers: Vec::new(),
            cache: Vec::new(),
            rules: Vec::new(),
            errors: Vec::new(),
            replace_app_errors: false,
            compress: Vec::new(),
        }
    }

    /// The site as `pool`'s workers are told it: whole if it serves the site, else its
    /// [`outline`](Self::outline).
    pub fn as_seen_by(&self, pool: &str) -> SiteSpec {
        if self.served_by(pool) {
            self.clone()
        } else {
            self.outline()
        }
    }
}

/// The line format of an access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFormat {
    /// The Common Log Format (NCSA), as every log tool reads it.
    Common,
    /// Common plus referer and user agent (Apache/nginx `combined`), then espalier's request
    /// time in microseconds, the worker and the upstream time of a proxied app.
    Combined,
    /// One JSON object per line, every field named.
    Json,
}

/// A site's access log (`access_log = { path = "…", format = "…" }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessLogSpec {
    /// Resolved against the config file's folder.
    pub path: PathBuf,
    pub format: LogFormat,
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
    /// The token the admin endpoint's actions (stop, start, recycle, reload) require. Default:
    /// a random one, created at first start in a file (see `server::admin::token_file`); a non-loopback `admin` needs one written here.
    pub admin_token: Option<String>,
    /// Add `X-Espalier-Worker: <pool>/<index>/cpu<N>` to responses. Default false.
    pub worker_header: bool,
    /// Default `cpu`.
    pub steering: Steering,
    /// `ktls = "auto"`: where the kernel has kTLS, an HTTPS/1.1 connection about to send a
    /// large file is handed to the kernel's TLS (see `http::ktls`); `"off"` (the default,
    /// until it is measured to pay — see the README): rustls keeps every connection.
    pub ktls: bool,
    /// The certificate store (IIS's Central Certificate Store): a folder of `HOST.pem` +
    /// `HOST.key` (`_.example.com.*` for `*.example.com`) that a site with `https://`
    /// bindings and no `tls` takes its certificates from (see `certs::store`). Default none.
    pub certificates: Option<PathBuf>,
    /// Listen backlog per socket. Default 1024 (capped by `net.core.somaxconn`).
    pub backlog: u32,
    /// How long in-flight requests may run after SIGTERM. Default 10 s.
    pub shutdown_timeout: Duration,
    /// How long the server goes on serving after SIGTERM with `GET /ready` answering 503,
    /// so load balancers take it out of rotation before its listeners close. Default 0.
    pub drain_delay: Duration,
    pub limits: Limits,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            admin: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9180),
            admin_token: None,
            worker_header: false,
            steering: Steering::Cpu,
            ktls: false,
            certificates: None,
            backlog: 1024,
            shutdown_timeout: Duration::from_secs(10),
            drain_delay: Duration::ZERO,
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

impl PoolSpec {
    /// Whether the pool's application accepts on the pool's sockets itself.
    pub fn activated(&self) -> bool {
        self.app
            .as_ref()
            .is_some_and(|a| a.transport == Transport::Activation)
    }

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
            identity: None,
            app: None,
            start: StartMode::Always,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            idle_action: IdleAction::Stop,
            warmup_page: None,
        }
    }
}
