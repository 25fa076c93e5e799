//! The typed configuration: every setting of `[server]` and `[[pool]]` (a `[[site]]`'s are in
//! `site`), with the defaults docs/reference.md documents (IIS's, where IIS has one).
//!
//! Owns: the settings' types and defaults. Must not touch: how TOML becomes them (see
//! [`super::validate`]).

use super::acme_settings::AcmeSettings;
use super::site::SiteSpec;
use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

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
    /// Cap on the memory of the pool's processes together, in bytes (`memory_limit`): past
    /// it the kernel reclaims, then kills one of them — the pool's alone.
    pub memory_limit: Option<u64>,
    /// Swap the pool's processes may use beyond `memory_limit` (`swap_limit`, with it).
    pub swap_limit: Option<u64>,
    /// Cap on the pool's processes and threads together (`pids_limit`): a fork past it fails.
    pub pids_limit: Option<u64>,
    /// The pool's share of disk time against the others' (`io_weight`, 1–10 000; 100 is
    /// every unweighted group's).
    pub io_weight: Option<u32>,
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

/// A limit on-demand pools get when they set none of their own: derived from the machine
/// and the number of pools (`"auto"`), none (`"none"`), or the one given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TenantDefault {
    Auto,
    Off,
    Set(u64),
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
    /// Proxy: the HTTP its processes are spoken to in (`protocol`, HTTP/1.1 by default;
    /// `"http2"`: h2c, for gRPC apps).
    #[serde(default)]
    pub protocol: crate::config::upstream::Protocol,
    /// Proxy: client fields whose names hold `_` go on to the app (`pass_underscored_fields`);
    /// by default they are dropped (see `proxy::request::dropped_on_the_way`).
    #[serde(default)]
    pub pass_underscored_fields: bool,
    /// Requests in flight at one app process, and the queue beyond (`None`: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backpressure: Option<Backpressure>,
    /// `[pool.isolation]`: the filesystem its processes see (see `config::isolation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<super::isolation::Isolation>,
    /// Its answers read at its own speed, whatever the client's (`buffer`; see
    /// `proxy::spool`); `None`: streamed as the client takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<Buffering>,
    /// Its cacheable answers kept (`cache_responses`; see `proxy::cache`); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_responses: Option<super::upstream::ResponseCache>,
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

/// `[server] io`: how the worker threads read and write their cleartext connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoChoice {
    /// io_uring where the kernel has what it needs (see `os::uring::probe`), else epoll.
    Auto,
    Uring,
    Epoll,
}

/// The I/O path chosen, and why (for the start's log line and `espalier doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoPath {
    pub uring: bool,
    pub why: String,
}

impl IoChoice {
    /// The path to use: `override_` is the environment's `ESPALIER_IO` (it decides where the
    /// config leaves the choice to `auto`; the test suite runs both paths with it), `probe`
    /// what the kernel allows (`Ok` says what it found, `Err` why not). Asking for io_uring
    /// where the kernel refuses it is an error, not a silent fallback.
    pub fn resolve(
        self,
        override_: Option<&str>,
        probe: impl FnOnce() -> Result<String, String>,
    ) -> Result<IoPath, String> {
        self.resolve_as(|v| format!("[server] io = \"{v}\""), override_, probe)
    }

    /// [`Self::resolve`], its messages naming the choice as `setting` writes a value (the
    /// load generator's `--io uring`).
    pub fn resolve_as(
        self,
        setting: impl Fn(&str) -> String,
        override_: Option<&str>,
        probe: impl FnOnce() -> Result<String, String>,
    ) -> Result<IoPath, String> {
        let (choice, by) = match (self, override_) {
            (IoChoice::Auto, Some("uring")) => (IoChoice::Uring, "ESPALIER_IO=uring".to_string()),
            (IoChoice::Auto, Some("epoll")) => (IoChoice::Epoll, "ESPALIER_IO=epoll".to_string()),
            (IoChoice::Auto, Some("auto") | Some("") | None) => (IoChoice::Auto, setting("auto")),
            (IoChoice::Auto, Some(other)) => {
                return Err(format!(
                    "ESPALIER_IO={other}: use auto, uring or epoll (or unset it)"
                ))
            }
            (IoChoice::Uring, _) => (IoChoice::Uring, setting("uring")),
            (IoChoice::Epoll, _) => (IoChoice::Epoll, setting("epoll")),
        };
        match (choice, probe) {
            (IoChoice::Epoll, _) => Ok(IoPath {
                uring: false,
                why: format!("epoll ({by})"),
            }),
            (IoChoice::Uring, probe) => match probe() {
                Ok(found) => Ok(IoPath {
                    uring: true,
                    why: format!("io_uring ({by}; {found})"),
                }),
                Err(why) => Err(format!(
                    "{by}, but {why}; use {} to fall back to epoll",
                    setting("auto")
                )),
            },
            (IoChoice::Auto, probe) => Ok(match probe() {
                Ok(found) => IoPath {
                    uring: true,
                    why: format!("io_uring ({found})"),
                },
                Err(why) => IoPath {
                    uring: false,
                    why: format!("epoll ({why})"),
                },
            }),
        }
    }
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
    /// The user the dispatcher (`server::dispatcher`) runs as when espalier runs as root: it
    /// reads every visitor's request head, and must be nobody's keys. Default `nobody`.
    pub dispatcher_user: String,
    /// Default `cpu`.
    pub steering: Steering,
    /// `ktls = "auto"`: where the kernel has kTLS, an HTTPS/1.1 connection about to send a
    /// large file is handed to the kernel's TLS (see `http::ktls`); `"off"` (the default,
    /// until it is measured to pay — see docs/guide/https.md): rustls keeps every connection.
    pub ktls: bool,
    /// `http3 = true`: every https address also answers HTTP/3 over QUIC on the same UDP port
    /// (see `http::h3`), advertised by `Alt-Svc` on its HTTP/1.1 and HTTP/2 answers. Default
    /// false.
    pub http3: bool,
    /// `http3_early_data = true`: HTTP/3 takes requests in a resumed connection's first
    /// flight (0-RTT); one whose method is not safe waits for the handshake (see
    /// `http::h3::early`). Default false.
    pub http3_early_data: bool,
    /// How worker threads do their connections' I/O. Default `auto` (io_uring where the
    /// kernel allows it).
    pub io: IoChoice,
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
    /// On-demand workers that may be starting at once; past it a wake waits its turn, its
    /// visitors answered 503 with `Retry-After`. Default (`None`): the machine's CPUs.
    pub on_demand_starting: Option<u32>,
    /// On-demand workers that may be awake at once; past it the least recently busy idle one
    /// sleeps to make room (or, all busy, the wake waits its turn). Default (`None`): one per
    /// 128 MiB of the memory the server may use (see `server::supervisor::wake`).
    pub on_demand_running: Option<u32>,
    /// The memory limit of an on-demand pool that sets no `memory_limit` of its own
    /// (`on_demand_memory_limit`; see `server::supervisor::wake::default_limits`).
    pub on_demand_memory_limit: TenantDefault,
    /// The same for `pids_limit` (`on_demand_pids_limit`).
    pub on_demand_pids_limit: TenantDefault,
    pub limits: Limits,
    /// `[server.acme]`: the store's missing and expiring certificates ordered from an ACME
    /// directory (`None`: the store is filled by others).
    pub acme: Option<AcmeSettings>,
    /// `[server.tracing]`: a span per request exported over OTLP (`None`: no tracing, and
    /// a client's `traceparent` passes to the app untouched).
    pub tracing: Option<super::tracing::TracingSpec>,
    /// `[server.cluster]`: the sites, pools and upstream groups shared with a fleet through
    /// etcd (`None`: this file's and its includes' alone).
    pub cluster: Option<super::cluster::ClusterSpec>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            admin: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9180),
            admin_token: None,
            worker_header: false,
            dispatcher_user: "nobody".into(),
            steering: Steering::Cpu,
            ktls: false,
            http3: false,
            http3_early_data: false,
            io: IoChoice::Auto,
            certificates: None,
            backlog: 1024,
            shutdown_timeout: Duration::from_secs(10),
            drain_delay: Duration::ZERO,
            on_demand_starting: None,
            on_demand_running: None,
            on_demand_memory_limit: TenantDefault::Auto,
            on_demand_pids_limit: TenantDefault::Auto,
            limits: Limits::default(),
            acme: None,
            tracing: None,
            cluster: None,
        }
    }
}

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from; `None` for the built-in default.
    pub source: Option<PathBuf>,
    pub server: ServerSettings,
    /// Shared, as the sites are.
    pub pools: Vec<std::sync::Arc<PoolSpec>>,
    /// Shared: a change of one site of 10,000 keeps the others' (cloning a configuration, a
    /// worker's spec, or comparing two, is then a count and a pointer each).
    pub sites: Vec<std::sync::Arc<SiteSpec>>,
    /// `[[upstream]]` groups, and a group for each server address a path names itself.
    pub upstreams: Vec<super::upstream::UpstreamSpec>,
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
            memory_limit: None,
            swap_limit: None,
            pids_limit: None,
            io_weight: None,
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

/// Requests that may wait beyond the cap, by default (IIS's `queueLength`).
pub const DEFAULT_QUEUE_LENGTH: u32 = 1000;
/// How long a request may wait for an app process, by default.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(10);
pub use super::upstream::{Buffering, DEFAULT_BUFFERING};

/// A pool's `max_requests_per_process`, `queue_length` and `queue_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backpressure {
    pub max_requests_per_process: u32,
    pub queue_length: u32,
    pub queue_timeout: Duration,
}
