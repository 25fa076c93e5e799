//! The running server's status, as one typed value: what `GET /status` serves as JSON, what
//! `GET /metrics` renders for Prometheus, and what `espalier status` reads back and prints.
//!
//! Owns: the status types (Serialize and Deserialize, so the CLI reads fields, not string
//! keys) and the metric names. Must not touch: pool state (the supervisor fills these in).

use serde::{Deserialize, Serialize};
use std::fmt::Write;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// The pools asked for (every pool unless the query filtered or paged them).
    pub pools: Vec<PoolStatus>,
    /// Every address listened on, with the sites it routes to and the pools serving them
    /// (with a filter or a page: the sites of the pools listed).
    #[serde(default)]
    pub addresses: Vec<AddressStatus>,
    /// Pools configured, and of them, those the filter matched (before paging).
    #[serde(default)]
    pub pools_total: usize,
    #[serde(default)]
    pub pools_matched: usize,
    /// The dispatcher in front of the shared addresses (see `server::dispatcher`), when some
    /// address is shared: espalier's own pool, in none of the lists and counts of the
    /// configured ones.
    #[serde(default)]
    pub dispatcher: Option<PoolStatus>,
    /// The upstream groups (servers espalier did not start), each server's state by the
    /// master's active checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<UpstreamStatus>,
    /// The certificates espalier orders (`[server.acme]`), by host name: in the admin page's
    /// feed (`/live`), only those not valid or ending within 14 days.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateStatus>,
    /// Every pool counted by state, whatever the filter.
    #[serde(default)]
    pub counts: StateCounts,
    /// The page shown (1-based) and its size; 0 = every matched pool.
    #[serde(default)]
    pub page: usize,
    #[serde(default)]
    pub per_page: usize,
    /// The configuration files' version (the configuration API's `ETag`), and when and by
    /// whom they were last changed through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigState>,
    /// The fleet this server is a member of (`[server.cluster]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<FleetState>,
}

/// The fleet in `/status` (see `supervisor::fleet`): etcd reachable or since when not, the
/// revision of the shared configuration applied here, and the members as their keys say.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FleetState {
    pub prefix: String,
    pub node: String,
    pub reachable: bool,
    /// Since when etcd cannot be reached (Unix seconds), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreachable_since: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The revision of the shared configuration applied here.
    pub revision: i64,
    #[serde(default)]
    pub members: Vec<serde_json::Value>,
    /// The names being ordered, and which member orders each (`{name, node}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<serde_json::Value>,
}

/// The configuration's version in `/status` (see `supervisor::config_api`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ConfigState {
    pub version: String,
    /// When it was last changed through the API or a reload (Unix seconds), and by whom:
    /// `reload`, or the API's caller; none since the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_unix: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_by: Option<String>,
}

/// A certificate espalier orders, in `/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CertificateStatus {
    pub name: String,
    /// Its end (Unix seconds), when the store holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<u64>,
    /// When it is renewed (Unix seconds), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<u64>,
    /// `valid`, `ordering` (none yet, or due), or `failing` (the last order failed).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// An upstream group in `/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamStatus {
    pub name: String,
    pub balance: String,
    pub servers: Vec<UpstreamServerStatus>,
}

/// A server of an upstream group in `/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UpstreamServerStatus {
    /// As written in `servers`.
    pub name: String,
    pub address: String,
    pub weight: u32,
    pub backup: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// `up` or `down` by the active check, `unchecked` before its first probe, `not checked`
    /// in a group without `health` (failures seen in traffic eject a server in each worker
    /// for a while: the log says when).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// Worker processes that have it ejected now, after failures seen in their traffic.
    #[serde(default)]
    pub ejected_by: usize,
}

/// Pools by state.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct StateCounts {
    pub running: usize,
    pub idle: usize,
    pub suspended: usize,
    pub stopped: usize,
}

impl StateCounts {
    pub fn add(&mut self, state: PoolState) {
        match state {
            PoolState::Running => self.running += 1,
            PoolState::Idle => self.idle += 1,
            PoolState::Suspended => self.suspended += 1,
            PoolState::Stopped => self.stopped += 1,
        }
    }
}

/// What the admin page draws once a second (`GET /live`): the status, each CPU's load, and
/// the last ten minutes of requests per pool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Live {
    pub time_unix: f64,
    pub status: Status,
    /// `(CPU, busy fraction 0..1)` over the last second, from `/proc/stat`.
    pub cpu_load: Vec<(u32, f64)>,
    /// One sample a second, oldest first: each pool's requests served so far (the pools of
    /// `status`, and only while they have processes).
    pub history: Vec<HistorySample>,
    /// Every pool with a process now, whatever page `status` is: what the machine map draws.
    #[serde(default)]
    pub active: Vec<PoolStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HistorySample {
    pub time_unix: f64,
    pub pools: Vec<(String, u64)>,
}

/// One listening address and who answers on it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AddressStatus {
    pub address: String,
    /// More than one pool serves it: connections are handed to the right pool by host and
    /// path.
    pub shared: bool,
    pub sites: Vec<AddressSite>,
}

/// A site on an address: its host name (`None`: the default site) and the pools of its apps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AddressSite {
    pub host: Option<String>,
    pub site: String,
    pub pools: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    #[default]
    Running,
    /// By rapid-fail protection or by command: its sites get 503 or a reset.
    Stopped,
    /// On demand, every worker asleep: the next connection starts one.
    Idle,
    /// On demand, every worker asleep, some frozen (`idle_action = "suspend"`): the next
    /// connection thaws one.
    Suspended,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Running,
    /// Started, not ready yet.
    Starting,
    /// Exited; a new process is due (crash backoff, or a recycle without overlap).
    Restarting,
    /// Its pool is stopped.
    Stopped,
    /// On demand: no process until a connection arrives for it.
    Idle,
    /// On demand, frozen with its memory given back: the next connection thaws it.
    Suspended,
}

impl PoolState {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolState::Running => "running",
            PoolState::Stopped => "stopped",
            PoolState::Idle => "idle",
            PoolState::Suspended => "suspended",
        }
    }
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Starting => "starting",
            WorkerState::Restarting => "restarting",
            WorkerState::Stopped => "stopped",
            WorkerState::Idle => "idle",
            WorkerState::Suspended => "suspended",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PoolStatus {
    pub name: String,
    pub state: PoolState,
    /// The cap, as a fraction of one CPU.
    pub cpu_limit: Option<f64>,
    /// The pool's control group (its `cpu_limit`, `memory_limit`, `pids_limit`), when made.
    pub cgroup: Option<String>,
    /// CPU time used by the pool's group so far (the cgroup's own accounting).
    pub cpu_used_s: Option<f64>,
    /// `memory_limit`, in bytes, and the pool's processes the kernel's OOM killer killed at
    /// it since the server started.
    #[serde(default)]
    pub memory_limit: Option<u64>,
    #[serde(default)]
    pub oom_kills: u64,
    /// The pool's group now: memory in use (bytes), processes and threads against
    /// `pids_limit`, and (cgroup v2) the share of the last 10 s some of its tasks stalled on
    /// memory, CPU and IO (PSI's `some avg10`, %).
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub pids_limit: Option<u64>,
    #[serde(default)]
    pub pressure: Option<[f64; 3]>,
    /// Times the pool's memory reached 90 % of `memory_limit` and was throttled, and reached
    /// the limit itself (cgroup v2's `memory.events`; v1 keeps no count).
    #[serde(default)]
    pub memory_high_events: Option<u64>,
    #[serde(default)]
    pub memory_max_events: Option<u64>,
    pub stopped_because: Option<String>,
    pub workers: Vec<WorkerStatus>,
}

/// What a slot's process is.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An espalier worker serving the pool's sites itself.
    #[default]
    Worker,
    /// The pool's application (a pool with `command`).
    App,
    /// An espalier worker forwarding to the pool's application (`transport = "proxy"`).
    Front,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::App => "app",
            Role::Front => "front",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkerStatus {
    pub index: u32,
    #[serde(default)]
    pub role: Role,
    /// Where a proxied app process listens.
    #[serde(default)]
    pub endpoint: Option<String>,
    pub pid: Option<u32>,
    pub node: Option<u32>,
    pub cpus: Vec<u32>,
    pub state: WorkerState,
    pub started_unix: Option<u64>,
    pub uptime_s: Option<f64>,
    pub requests: u64,
    /// Connection tasks that panicked and were closed (each one a bug worth reporting).
    #[serde(default)]
    pub connection_panics: u64,
    /// A front worker's requests forwarded to an app process off its node (none of its own
    /// node's was ready).
    #[serde(default)]
    pub remote_forwards: u64,
    pub resident_bytes: Option<u64>,
    pub recycles: u32,
    pub restarts: u32,
    pub last_exit: Option<String>,
    /// Old processes of this slot still finishing their requests.
    pub draining: Vec<u32>,
    /// Soft affinity: the nodes the worker may use besides its home, now.
    pub widened_to: Vec<u32>,
    /// `hard` or `soft` (IIS's numaNodeAffinityMode).
    #[serde(default)]
    pub affinity: String,
    /// `bind`, `preferred` or `default`, with its nodes.
    #[serde(default)]
    pub memory_policy: String,
    /// Connections open now.
    #[serde(default)]
    pub connections: u64,
    /// Connections accepted, and of those, received on the accepting thread's own CPU.
    #[serde(default)]
    pub accepted: u64,
    #[serde(default)]
    pub steered: u64,
    /// A front worker's queue for its app processes (`max_requests_per_process`).
    #[serde(default)]
    pub queue: crate::proxy::queue::QueueFigures,
    /// How many sets of session ticket keys the worker took, at its last pong (its start's
    /// and each rotation's since; 0 for an app process).
    #[serde(default)]
    pub ticket_keys: u64,
    /// Its response caches' figures (`cache_responses`; none without).
    #[serde(
        default,
        skip_serializing_if = "crate::proxy::cache_store::Counts::is_zero"
    )]
    pub cache: crate::proxy::cache_store::Counts,
    /// Each of its response caches' figures (one per pool or group with `cache_responses`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caches: Vec<crate::proxy::cache_store::StoreCounts>,
    /// Its sites' figures (`metrics = true`; see [`super::meters`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub meters: Vec<super::meters::SiteMeters>,
}

/// A worker metric: name, help, and how to read it off a worker.
type WorkerMetric = (
    &'static str,
    &'static str,
    &'static str,
    fn(&WorkerStatus) -> u64,
);

/// Every per-worker metric family: one row each.
const WORKER_METRICS: &[WorkerMetric] = &[
    (
        "espalier_worker_up",
        "gauge",
        "1 when the worker is running and ready",
        |w| u64::from(w.state == WorkerState::Running),
    ),
    (
        "espalier_worker_requests_total",
        "counter",
        "requests served by the worker process now in the slot",
        |w| w.requests,
    ),
    (
        "espalier_worker_connection_panics_total",
        "counter",
        "connections closed because their task panicked (a bug: please report it)",
        |w| w.connection_panics,
    ),
    (
        "espalier_worker_remote_forwards_total",
        "counter",
        "requests a front worker forwarded to an app process on another node",
        |w| w.remote_forwards,
    ),
    (
        "espalier_worker_queue_waiting",
        "gauge",
        "requests waiting in a front worker's queue for an app process (max_requests_per_process)",
        |w| w.queue.waiting,
    ),
    (
        "espalier_worker_queued_total",
        "counter",
        "requests that waited in the queue for an app process",
        |w| w.queue.queued_total,
    ),
    (
        "espalier_worker_queue_rejected_total",
        "counter",
        "requests answered 503 because the queue was full or their wait ran out",
        |w| w.queue.rejected_total,
    ),
    (
        "espalier_worker_queue_wait_microseconds_total",
        "counter",
        "time requests spent waiting in the queue, together (divide by queued_total for the mean)",
        |w| w.queue.wait_micros_total,
    ),
    (
        "espalier_worker_cache_hits_total",
        "counter",
        "answers given from the worker's response caches (cache_responses)",
        |w| w.cache.hits,
    ),
    (
        "espalier_worker_cache_misses_total",
        "counter",
        "requests its response caches held no fresh answer for (the app was asked)",
        |w| w.cache.misses,
    ),
    (
        "espalier_worker_cache_stale_total",
        "counter",
        "stale answers its response caches gave (stale-while-revalidate, stale-if-error)",
        |w| w.cache.stale,
    ),
    (
        "espalier_worker_cache_stored_total",
        "counter",
        "answers its response caches kept",
        |w| w.cache.stored,
    ),
    (
        "espalier_worker_cache_evicted_total",
        "counter",
        "answers its response caches put out for room, least recently used first",
        |w| w.cache.evicted,
    ),
    (
        "espalier_worker_cache_bytes",
        "gauge",
        "bytes its response caches hold now",
        |w| w.cache.bytes,
    ),
    (
        "espalier_worker_resident_bytes",
        "gauge",
        "resident memory of the worker",
        |w| w.resident_bytes.unwrap_or(0),
    ),
    (
        "espalier_worker_restarts_total",
        "counter",
        "crash restarts of the slot",
        |w| u64::from(w.restarts),
    ),
    (
        "espalier_worker_recycles_total",
        "counter",
        "recycles of the slot",
        |w| u64::from(w.recycles),
    ),
];

impl Status {
    /// The pools' limits and their group's figures, for [`Status::metrics`]: each series
    /// only for the pools that have it.
    fn pool_limits_metrics(&self, out: &mut String) {
        type Figure = fn(&PoolStatus) -> Option<f64>;
        let series: [(&str, &str, &str, Figure); 8] = [
            ("espalier_pool_memory_bytes", "gauge", "memory the pool's processes use now (with memory_limit)", |p| p.memory_bytes.map(|v| v as f64)),
            ("espalier_pool_memory_limit_bytes", "gauge", "the pool's memory_limit", |p| p.memory_limit.map(|v| v as f64)),
            ("espalier_pool_oom_kills_total", "counter", "the pool's processes killed by the kernel's OOM killer at its memory_limit", |p| p.memory_limit.map(|_| p.oom_kills as f64)),
            ("espalier_pool_pids", "gauge", "the pool's processes and threads now (with pids_limit)", |p| p.pids.map(|v| v as f64)),
            ("espalier_pool_pids_limit", "gauge", "the pool's pids_limit", |p| p.pids_limit.map(|v| v as f64)),
            ("espalier_pool_memory_high_events_total", "counter", "times the pool's memory reached 90 % of memory_limit and was throttled (cgroup v2)", |p| p.memory_high_events.map(|v| v as f64)),
            ("espalier_pool_memory_max_events_total", "counter", "times the pool's memory reached memory_limit (cgroup v2)", |p| p.memory_max_events.map(|v| v as f64)),
            ("espalier_pool_memory_pressure_avg10", "gauge", "share (%) of the last 10 s some of the pool's tasks stalled on memory (cgroup v2 PSI)", |p| p.pressure.map(|[m, _, _]| m)),
        ];
        for (name, kind, help, value) in series {
            let lines: Vec<String> = (self.pools.iter())
                .filter_map(|p| Some(format!("{name}{{pool=\"{}\"}} {}", p.name, value(p)?)))
                .collect();
            if !lines.is_empty() {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{}",
                    lines.join("\n")
                );
            }
        }
    }

    /// The Prometheus text exposition of the status.
    pub fn metrics(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP espalier_pool_running 1 when the pool runs, 0 when stopped\n# TYPE espalier_pool_running gauge"
        );
        for p in &self.pools {
            let _ = writeln!(
                out,
                "espalier_pool_running{{pool=\"{}\"}} {}",
                p.name,
                u8::from(p.state == PoolState::Running)
            );
        }
        self.pool_limits_metrics(&mut out);
        for (name, kind, help, value) in WORKER_METRICS {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for p in &self.pools {
                for w in &p.workers {
                    // An app pool's slot has two processes (the app and its front worker):
                    // the role keeps their series apart.
                    let _ = writeln!(
                        out,
                        "{name}{{pool=\"{}\",index=\"{}\",role=\"{}\"}} {}",
                        p.name,
                        w.index,
                        w.role.as_str(),
                        value(w)
                    );
                }
            }
        }
        let sites: Vec<super::meters::Series<'_>> = self
            .pools
            .iter()
            .flat_map(|p| {
                p.workers
                    .iter()
                    .flat_map(move |w| w.meters.iter().map(move |m| (p.name.as_str(), w.index, m)))
            })
            .collect();
        super::meters::render(&mut out, &sites);
        self.upstream_metrics(&mut out);
        self.certificate_metrics(&mut out);
        self.cluster_metrics(&mut out);
        out
    }
}

mod parts_metrics;
mod query;
pub use query::{StatusQuery, MAX_PER_PAGE};

#[cfg(test)]
mod tests;
