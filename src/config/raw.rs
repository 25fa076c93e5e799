//! The config file exactly as written: serde structs that mirror the TOML, with every key
//! optional and unknown keys refused. Units and enumerations stay as text here so that
//! [`super::validate`] can say precisely what is wrong and how to fix it.
//!
//! Owns: the key names. Must not touch: defaults or meaning (that is `validate`).

use serde::Deserialize;

/// A value users may write as a string or a number (`processes = 4` or `"auto"`,
/// `interval = 90` or `"90s"`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Text(String),
    Bool(bool),
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub server: Option<RawServer>,
    /// Glob patterns of files with more pools and sites (see `super::include`).
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub pool: Vec<RawPool>,
    #[serde(default)]
    pub site: Vec<RawSite>,
    #[serde(default)]
    pub upstream: Vec<RawUpstream>,
}

/// `[[upstream]]`: servers espalier did not start.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub name: Option<String>,
    pub servers: Option<Vec<String>>,
    pub balance: Option<String>,
    pub connect_timeout: Option<Scalar>,
    pub response_timeout: Option<Scalar>,
    pub tries: Option<i64>,
    pub try_for: Option<Scalar>,
    pub health: Option<RawHealthCheck>,
    pub passive: Option<RawPassiveCheck>,
    pub resolve: Option<Scalar>,
    pub sticky: Option<String>,
    pub tls: Option<RawUpstreamTls>,
    pub protocol: Option<String>,
    pub pass_underscored_fields: Option<bool>,
    pub buffer: Option<toml::Value>,
    pub cache_responses: Option<toml::Value>,
}

/// `[server.acme]`: certificates ordered from an ACME directory into the store.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    pub directory: Option<String>,
    pub email: Option<String>,
    pub ca: Option<String>,
    pub eab_kid: Option<String>,
    pub eab_hmac_key: Option<String>,
    pub on_demand: Option<bool>,
    pub ask: Option<String>,
    pub on_demand_in_flight: Option<i64>,
    pub on_demand_per_hour: Option<i64>,
    pub timeout: Option<Scalar>,
    pub profile: Option<String>,
    pub dns: Option<RawAcmeDns>,
}

/// `[server.acme.dns]`: DNS-01, answered by espalier's own DNS server or by RFC 2136 updates.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcmeDns {
    pub listen: Option<String>,
    pub zone: Option<String>,
    pub update: Option<String>,
    pub tsig_key: Option<String>,
    pub names: Option<String>,
    pub resolver: Option<String>,
}

/// `[upstream.tls]`: how `https://` servers are verified.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    pub ca: Option<String>,
    pub verify: Option<bool>,
    pub server_name: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
}

/// `[upstream.health]`: the active check.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHealthCheck {
    pub path: Option<String>,
    pub host: Option<String>,
    pub interval: Option<Scalar>,
    pub timeout: Option<Scalar>,
    /// `200`, or `"2xx"`, or `"200-399"`.
    pub status: Option<Scalar>,
    pub body: Option<String>,
    pub rise: Option<i64>,
    pub fall: Option<i64>,
    /// The service a gRPC check asks about (`""`: the server as a whole).
    pub grpc_service: Option<String>,
}

/// `[upstream.passive]`: failures seen in traffic.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPassiveCheck {
    pub failures: Option<i64>,
    pub eject_for: Option<Scalar>,
    pub on_5xx: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub admin: Option<String>,
    pub admin_token: Option<String>,
    pub worker_header: Option<bool>,
    pub dispatcher_user: Option<String>,
    pub steering: Option<String>,
    pub ktls: Option<String>,
    pub http3: Option<bool>,
    pub http3_early_data: Option<bool>,
    pub io: Option<String>,
    pub certificates: Option<String>,
    pub backlog: Option<i64>,
    pub shutdown_timeout: Option<Scalar>,
    pub drain_delay: Option<Scalar>,
    pub on_demand_starting: Option<i64>,
    pub on_demand_running: Option<i64>,
    pub on_demand_memory_limit: Option<Scalar>,
    pub on_demand_pids_limit: Option<Scalar>,
    pub limits: Option<RawLimits>,
    pub acme: Option<RawAcme>,
    pub tracing: Option<RawTracing>,
    pub cluster: Option<RawCluster>,
}

/// `[server.cluster]`: `etcd = ["http://10.0.0.1:2379"]`, `prefix = "/espalier/prod"`,
/// `node`, `folder`, `user`, `password_file`, `ca`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub etcd: Option<Vec<String>>,
    pub prefix: Option<String>,
    pub node: Option<String>,
    pub folder: Option<String>,
    pub user: Option<String>,
    pub password_file: Option<String>,
    pub ca: Option<String>,
    pub secret_file: Option<String>,
}

/// `[server.tracing]`: `otlp = "http://127.0.0.1:4318"`, `sample = 0.01`,
/// `trust_incoming = true`, `service_name = "espalier"`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    pub otlp: Option<String>,
    pub sample: Option<Scalar>,
    pub trust_incoming: Option<bool>,
    pub service_name: Option<String>,
}

/// The keys of [`RawLimits`], for the hint when one is written outside `[server.limits]`
/// (`config::error`); a unit test holds the two equal.
pub const LIMIT_KEYS: [&str; 8] = [
    "max_request_line",
    "max_header_size",
    "max_headers",
    "max_body_size",
    "header_timeout",
    "body_timeout",
    "keepalive_timeout",
    "max_connections",
];

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_request_line: Option<Scalar>,
    pub max_header_size: Option<Scalar>,
    pub max_headers: Option<i64>,
    pub max_body_size: Option<Scalar>,
    pub header_timeout: Option<Scalar>,
    pub body_timeout: Option<Scalar>,
    pub keepalive_timeout: Option<Scalar>,
    pub max_connections: Option<i64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    pub name: Option<String>,
    pub processes: Option<Scalar>,
    pub placement: Option<String>,
    pub affinity: Option<String>,
    pub unit: Option<String>,
    pub cpus: Option<Scalar>,
    pub memory_policy: Option<String>,
    pub cpu_limit: Option<Scalar>,
    pub memory_limit: Option<Scalar>,
    pub swap_limit: Option<Scalar>,
    pub pids_limit: Option<i64>,
    pub io_weight: Option<i64>,
    pub load_balancer: Option<String>,
    pub startup_time_limit: Option<Scalar>,
    pub shutdown_time_limit: Option<Scalar>,
    pub ping_interval: Option<Scalar>,
    pub ping_response_time: Option<Scalar>,
    pub start: Option<String>,
    pub idle_timeout: Option<Scalar>,
    pub idle_action: Option<String>,
    pub warmup_page: Option<String>,
    pub recycle: Option<RawRecycle>,
    pub rapid_fail: Option<RawRapidFail>,
    pub command: Option<Vec<String>>,
    pub directory: Option<String>,
    pub environment: Option<std::collections::BTreeMap<String, String>>,
    pub transport: Option<String>,
    pub health: Option<String>,
    pub warmup: Option<Vec<String>>,
    pub upstream: Option<String>,
    pub connect_timeout: Option<Scalar>,
    pub response_timeout: Option<Scalar>,
    pub script_extensions: Option<Vec<String>>,
    pub protocol: Option<String>,
    pub pass_underscored_fields: Option<bool>,
    pub buffer: Option<toml::Value>,
    pub cache_responses: Option<toml::Value>,
    pub max_requests_per_process: Option<i64>,
    pub queue_length: Option<i64>,
    pub queue_timeout: Option<Scalar>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub isolation: Option<RawIsolation>,
}

/// `[pool.isolation]`: the filesystem an app's processes see.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIsolation {
    pub tmp: Option<String>,
    pub tmp_size: Option<Scalar>,
    pub system: Option<String>,
    pub home: Option<String>,
    pub paths: Option<std::collections::BTreeMap<String, String>>,
    pub landlock: Option<bool>,
    pub network: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecycle {
    pub requests: Option<i64>,
    pub interval: Option<Scalar>,
    pub schedule: Option<Vec<String>>,
    pub memory: Option<Scalar>,
    pub overlap: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRapidFail {
    pub enabled: Option<bool>,
    pub max_crashes: Option<i64>,
    pub interval: Option<Scalar>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSite {
    pub name: Option<String>,
    #[serde(default)]
    pub bindings: Vec<String>,
    pub root: Option<String>,
    pub index: Option<Vec<String>>,
    pub follow_symlinks: Option<bool>,
    /// `true`, or `{ dotfiles = true }`: folders without an index are listed.
    pub autoindex: Option<toml::Value>,
    pub access_log: Option<RawAccessLog>,
    pub proxy_protocol: Option<bool>,
    /// The peers that may send the PROXY header (`["10.0.0.0/8"]`); others speak HTTP.
    pub proxy_protocol_from: Option<Vec<String>>,
    pub tls: Option<RawTls>,
    pub client_certs: Option<RawClientCerts>,
    pub metrics: Option<bool>,
    pub hsts: Option<String>,
    pub redirect_to_https: Option<bool>,
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// A `Cache-Control` for every static file (`"7d"`), or by content type.
    pub cache: Option<toml::Value>,
    /// `{ 404 = "errors/404.html" }`: a page per status.
    pub errors: Option<std::collections::BTreeMap<String, String>>,
    pub replace_app_errors: Option<bool>,
    pub status_headers: Option<StatusTables>,
    /// `["zstd", "br", "gzip"]`: the codings offered, in order of preference.
    pub compress: Option<Vec<String>>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub trusted_proxies: Option<Vec<String>>,
    /// `403`, `404` or `"close"`.
    pub deny_action: Option<toml::Value>,
    pub limit: Option<RawLimit>,
    /// The largest request body its requests may carry (`"100MiB"`), over the server's.
    pub max_body_size: Option<Scalar>,
    /// Who lets its paths' requests in, where a path says none of its own.
    pub auth: Option<RawAuth>,
    #[serde(default)]
    pub app: Vec<RawApp>,
    #[serde(default)]
    pub rule: Vec<RawRule>,
}

/// `[[site.rule]]`: a match and one action.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    #[serde(rename = "match")]
    pub path: Option<String>,
    pub host: Option<String>,
    /// `"POST"` or `["GET", "HEAD"]`.
    pub method: Option<toml::Value>,
    pub redirect: Option<String>,
    pub status: Option<i64>,
    pub rewrite: Option<String>,
    pub answer: Option<i64>,
    pub body: Option<String>,
    pub query: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawApp {
    pub path: Option<String>,
    pub pool: Option<String>,
    /// An `[[upstream]]`'s name, or one server's address: the path is forwarded there.
    pub upstream: Option<String>,
    pub handler: Option<String>,
    pub try_files: Option<bool>,
    pub fallback: Option<String>,
    pub no_scripts: Option<Vec<String>>,
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    pub cache: Option<toml::Value>,
    pub alias: Option<String>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub auth: Option<RawAuth>,
    /// The largest request body the path takes, over its site's.
    pub max_body_size: Option<Scalar>,
    pub status_headers: Option<StatusTables>,
    /// `false`: the path's answers are not kept by its pool's or group's response cache.
    pub cache_responses: Option<bool>,
    /// `false`: the path's answers and bodies are not buffered by its pool or group.
    pub buffer: Option<bool>,
}

/// `status_headers = { "5xx" = { Cache-Control = "no-store" } }`: fields by status or class.
pub type StatusTables =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>;

/// The keys of the response steps that are modules of `crate::features`, as a site or a path
/// wrote them: taken out of [`RawSite`] or [`RawApp`] whole for the list to check
/// (`super::chain::ResponseKeys`). A feature's key is a field here and in both (serde cannot
/// flatten a struct that refuses unknown keys).
#[derive(Debug, Default)]
pub struct RawResponseKeys {
    pub status_headers: Option<StatusTables>,
}

impl RawSite {
    pub fn response_keys(&mut self) -> RawResponseKeys {
        RawResponseKeys {
            status_headers: self.status_headers.take(),
        }
    }
}

impl RawApp {
    pub fn response_keys(&mut self) -> RawResponseKeys {
        RawResponseKeys {
            status_headers: self.status_headers.take(),
        }
    }
}

/// A path's `auth = { htpasswd = "admin.htpasswd", realm = "Admin", cleartext = false }`, or
/// its sign-in by another service: `auth = { request = "http://127.0.0.1:9091/verify",
/// send = ["Cookie"], copy = ["X-User"], timeout = "5s", remember = "30s" }`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub htpasswd: Option<String>,
    pub realm: Option<String>,
    pub cleartext: Option<bool>,
    pub request: Option<String>,
    pub upstream: Option<String>,
    pub send: Option<Vec<String>>,
    pub copy: Option<Vec<String>>,
    pub timeout: Option<Scalar>,
    pub remember: Option<Scalar>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ocsp: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    pub path: Option<String>,
    pub format: Option<String>,
}

/// A site's `limit = { rate = "50/s", burst = 100, concurrent = 20, action = 429 }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimit {
    pub rate: Option<String>,
    pub burst: Option<i64>,
    pub concurrent: Option<i64>,
    pub action: Option<toml::Value>,
}

/// A site's `client_certs = { ca = "clients-ca.pem", mode = "required" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientCerts {
    pub ca: Option<String>,
    pub mode: Option<String>,
}
