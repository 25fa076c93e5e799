//! The typed configuration of an `[[upstream]]`: a group of servers espalier did not start
//! (nginx's `upstream`, HAProxy's `backend`, Caddy's `reverse_proxy` upstreams), how a
//! request chooses one, and how their health is told.
//!
//! Owns: the group's types and defaults, and the server line's grammar
//! (`"10.0.0.5:8080 weight=3 backup node=1"`). Must not touch: choosing a server (that is
//! `crate::routing::balance`) or connecting (`crate::proxy`).

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The most servers a group may have: a consistent-hash ring holds `HASH_POINTS × weight`
/// points per server, and every pick looks at each server at most twice.
pub const MAX_SERVERS: usize = 256;

/// The largest `weight`.
pub const MAX_WEIGHT: u32 = 100;

/// `buffer`: a slow client costs its app or server nothing. An answer is held for the
/// client — in memory (`response`), then in an unnamed temporary file (`disk`; past both,
/// the rest goes at the client's speed) — so the app is free as soon as it has answered; a
/// request's body is read whole before the app is asked — in memory (`request`), then in a
/// file (bounded by the site's `max_body_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffering {
    pub response: u64,
    pub request: u64,
    pub disk: u64,
}

/// `buffer`'s bounds where it is on without them (a sync pool's default): 1 MiB of an answer
/// and of a request body in memory, and 1 GiB of an answer on disk — nginx's
/// `proxy_buffers`, `client_body_buffer_size` and `proxy_max_temp_file_size` in spirit.
pub const DEFAULT_BUFFERING: Buffering = Buffering {
    response: 1 << 20,
    request: 1 << 20,
    disk: 1 << 30,
};

/// `cache_responses`: an app's or a server's answers kept in memory and given again while
/// HTTP caching says they are fresh (see `proxy::cache`): at most `size` bytes in all, per
/// worker process, and no answer over `entry` bytes; answers told apart by their URL and the
/// request's parts `key` names besides. Answers put out of memory for room go to a file of
/// at most `disk` bytes (0: none) in `folder` (the temporary folder when `None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseCache {
    pub size: u64,
    pub entry: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<CacheKeyPart>,
    #[serde(default)]
    pub disk: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<std::path::PathBuf>,
}

/// A part of the request an answer is kept by besides its URL (`cache_responses.key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheKeyPart {
    /// A request field's values (its name lowercase): `"X-Tenant"`.
    Field(String),
    /// A cookie's value: `"cookie:currency"`.
    Cookie(String),
}

/// `cache_responses = true`: 64 MiB per worker process, answers of up to 1 MiB.
pub const DEFAULT_RESPONSE_CACHE: ResponseCache = ResponseCache {
    size: 64 << 20,
    entry: 1 << 20,
    key: Vec::new(),
    disk: 0,
    folder: None,
};

/// One `[[upstream]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSpec {
    pub name: String,
    /// Its servers, host names resolved (one entry per address a name resolved to).
    pub servers: Vec<ServerSpec>,
    pub balance: Balance,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Servers a request may be sent to, the first included (`tries`, default 3).
    pub tries: u32,
    /// The time all of a request's tries may take, from its first connect (`try_for`,
    /// default 10 s): no new try starts after it.
    pub try_for: Duration,
    /// Active checks, when `health` is set.
    pub health: Option<ActiveCheck>,
    pub passive: PassiveCheck,
    /// Its servers' host names are resolved again this often (`resolve`); `None`: at
    /// `check`, `serve` and each reload only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<Duration>,
    /// A client keeps to the server that first answered it by this cookie (`sticky`), while
    /// that server is up; `None`: every request is balanced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<String>,
    /// How its `https://` servers are spoken to (`[upstream.tls]`); `None` when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<UpstreamTls>,
    /// The HTTP its servers are spoken to in (`protocol`).
    #[serde(default)]
    pub protocol: Protocol,
    /// Client fields whose names hold `_` go on to its servers (`pass_underscored_fields`);
    /// by default they are dropped.
    #[serde(default)]
    pub pass_underscored_fields: bool,
    /// Its servers' answers read at their speed (`buffer`); `None`: streamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<Buffering>,
    /// Its servers' cacheable answers kept (`cache_responses`); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_responses: Option<ResponseCache>,
}

/// The HTTP an app or a server is spoken to in (`protocol`): HTTP/1.1, one request per
/// connection at a time (kept alive), or HTTP/2 — over cleartext with prior knowledge (h2c)
/// or agreed by ALPN over TLS — its requests multiplexed on one connection per thread and
/// server, trailers and streaming both ways passed through (gRPC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    #[default]
    Http1,
    Http2,
}

impl Protocol {
    /// The key's values, as `choice` takes them.
    pub const CHOICES: [(&'static str, Protocol); 2] =
        [("http1", Protocol::Http1), ("http2", Protocol::Http2)];
}

/// `[upstream.tls]`: TLS to a group's `https://` servers, their certificates verified by
/// default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamTls {
    /// The authorities the servers' certificates must chain to (PEM); `None`: the system's
    /// (Debian's `/etc/ssl/certs/ca-certificates.crt`).
    pub ca: Option<PathBuf>,
    /// `false` only when said (`verify = false`): any certificate is taken.
    pub verify: bool,
    /// The name sent (SNI) and verified, over each server's own host name.
    pub server_name: Option<String>,
    /// A client certificate and its key, for servers that ask for one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// The system's authorities, where Debian keeps them.
pub const SYSTEM_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

impl UpstreamSpec {
    /// A group of `servers` with every default (a path's `upstream = "ADDRESS"`).
    pub fn of_servers(name: String, servers: Vec<ServerSpec>) -> Self {
        UpstreamSpec {
            name,
            servers,
            balance: Balance::LeastTime,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(60),
            tries: 3,
            try_for: Duration::from_secs(10),
            health: None,
            passive: PassiveCheck::default(),
            resolve: None,
            sticky: None,
            tls: None,
            protocol: Protocol::Http1,
            pass_underscored_fields: false,
            buffer: None,
            cache_responses: None,
        }
    }
}

impl UpstreamSpec {
    /// Its servers with their host names resolved again now: each name written (with its
    /// options) stands for every address it resolves to; addresses and sockets stay. `Err`
    /// when a name resolves to nothing (the servers stay as they are).
    pub fn resolved_again(&self) -> Result<Vec<ServerSpec>, String> {
        let mut out: Vec<ServerSpec> = Vec::new();
        let mut done: Vec<&str> = Vec::new();
        for s in &self.servers {
            if !s.is_host_name() {
                out.push(s.clone());
                continue;
            }
            if done.contains(&s.name.as_str()) {
                continue;
            }
            done.push(&s.name);
            let addrs = resolve(&s.name).map_err(|e| format!("{} {e}", s.name))?;
            out.extend(addrs.into_iter().map(|a| ServerSpec {
                address: ServerAddress::Tcp(a),
                ..s.clone()
            }));
        }
        Ok(out)
    }
}

/// The addresses `host:port` resolves to, sorted, each once; `Err` says why none (to follow
/// the name as written: `` `NAME` does not resolve (…)``).
pub fn resolve(written: &str) -> Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;
    let mut addrs: Vec<SocketAddr> = (written.to_socket_addrs())
        .map_err(|e| format!("does not resolve ({e})"))?
        .collect();
    addrs.sort();
    addrs.dedup();
    if addrs.is_empty() {
        return Err("resolves to no address".into());
    }
    Ok(addrs)
}

/// A server of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSpec {
    /// As written (`api.internal:8080`), for logs and `status`.
    pub name: String,
    pub address: ServerAddress,
    pub weight: u32,
    /// Used only while no other server of the group is up.
    pub backup: bool,
    /// The NUMA node it runs on, when said (`node=1`) or found (a local process's CPUs).
    pub node: Option<u32>,
    /// Spoken to over TLS (`https://`), with this name sent and verified (its host as
    /// written; the group's `tls.server_name` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_name: Option<String>,
}

impl ServerSpec {
    /// Whether it was written as a host name (resolved), not an address or a socket.
    pub fn is_host_name(&self) -> bool {
        matches!(self.address, ServerAddress::Tcp(_)) && self.name.parse::<SocketAddr>().is_err()
    }
}

/// Where a server accepts connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ServerAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerAddress::Tcp(a) => write!(f, "{a}"),
            ServerAddress::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// How a request chooses a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Balance {
    /// Two servers drawn at random, the one with the lower latency (a moving average of
    /// its answer times) × requests in flight taken — Finagle's and Linkerd's "P2C + peak
    /// EWMA": a slow server gets less at once, without a central view. The default.
    LeastTime,
    /// In turn, by weight (nginx's smooth weighted round robin).
    RoundRobin,
    /// The fewest requests in flight for its weight.
    LeastRequests,
    /// A key's hash on a ring of the servers (consistent: removing one server moves only
    /// its own keys).
    Hash(HashKey),
}

impl Balance {
    pub fn name(&self) -> String {
        match self {
            Balance::LeastTime => "least_time".into(),
            Balance::RoundRobin => "round_robin".into(),
            Balance::LeastRequests => "least_requests".into(),
            Balance::Hash(key) => format!("hash {}", key.name()),
        }
    }
}

/// What a hash balances on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashKey {
    /// The client's address (after a trusted PROXY header).
    Client,
    /// The request target (path and query).
    Uri,
    /// A request header's value (lower case).
    Header(String),
    /// A cookie's value.
    Cookie(String),
}

impl HashKey {
    pub fn name(&self) -> String {
        match self {
            HashKey::Client => "client".into(),
            HashKey::Uri => "uri".into(),
            HashKey::Header(h) => format!("header:{h}"),
            HashKey::Cookie(c) => format!("cookie:{c}"),
        }
    }
}

/// `[upstream.health]`: a request sent to every server on an interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveCheck {
    pub path: String,
    /// The `Host` it is sent with (default the server as written).
    pub host: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    /// The statuses that count as up (default 200–399).
    pub status: (u16, u16),
    /// Text the body must contain, when set.
    pub body: Option<String>,
    /// Checks passed in a row before a down server is up again.
    pub rise: u32,
    /// Checks failed in a row before an up server is down.
    pub fall: u32,
    /// Set: the check speaks gRPC's health protocol (`grpc.health.v1.Health/Check`) about
    /// this service (`""`: the server as a whole) instead of a `GET`; up when it answers
    /// `SERVING`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_service: Option<String>,
}

/// How failures seen in traffic take a server out for a while (Envoy's outlier detection):
/// `failures` in a row (refused or timed-out connections, timed-out answers, 5xx when
/// `on_5xx`) eject it for `eject_for` × the times it was ejected before (at most 10×); the
/// last server up is never ejected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassiveCheck {
    /// 0: never.
    pub failures: u32,
    pub eject_for: Duration,
    pub on_5xx: bool,
}

impl Default for PassiveCheck {
    fn default() -> Self {
        PassiveCheck {
            failures: 5,
            eject_for: Duration::from_secs(10),
            on_5xx: false,
        }
    }
}

/// A server line's words after the address, parsed: `weight=3`, `backup`, `node=1`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ServerOptions {
    pub weight: Option<u32>,
    pub backup: bool,
    pub node: Option<u32>,
}

/// Splits a server line into its address and options, or says what is wrong.
pub fn parse_server_line(line: &str) -> Result<(&str, ServerOptions), String> {
    let mut words = line.split_whitespace();
    let address = words
        .next()
        .ok_or("is empty; write an address like \"127.0.0.1:9001\" or \"unix:/run/api.sock\"")?;
    let mut opts = ServerOptions::default();
    for word in words {
        match word.split_once('=') {
            None if word == "backup" => opts.backup = true,
            Some(("weight", n)) => match n.parse::<u32>() {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => opts.weight = Some(w),
                _ => {
                    return Err(format!(
                        "`{word}`: a weight is a whole number from 1 to {MAX_WEIGHT}"
                    ))
                }
            },
            Some(("node", n)) => match n.parse::<u32>() {
                Ok(k) => opts.node = Some(k),
                _ => return Err(format!("`{word}`: node is a NUMA node's number")),
            },
            _ => {
                return Err(format!(
                    "`{word}` is not an option; a server's options are weight=N, backup and node=N"
                ))
            }
        }
    }
    Ok((address, opts))
}

/// The balance key's grammar: `"least_time"`, `"round_robin"`, `"least_requests"`,
/// `"hash client"`, `"hash uri"`, `"hash header:X-User"`, `"hash cookie:session"`.
pub fn parse_balance(text: &str) -> Result<Balance, String> {
    const HELP: &str = "write \"least_time\" (the default), \"round_robin\", \"least_requests\", or \"hash KEY\" with KEY one of client, uri, header:NAME, cookie:NAME";
    let mut words = text.split_whitespace();
    let balance = match (words.next(), words.next(), words.next()) {
        (Some("least_time"), None, _) => Balance::LeastTime,
        (Some("round_robin"), None, _) => Balance::RoundRobin,
        (Some("least_requests"), None, _) => Balance::LeastRequests,
        (Some("hash"), Some(key), None) => Balance::Hash(match key.split_once(':') {
            None if key == "client" => HashKey::Client,
            None if key == "uri" => HashKey::Uri,
            Some(("header", h)) if !h.is_empty() => HashKey::Header(h.to_ascii_lowercase()),
            Some(("cookie", c)) if !c.is_empty() => HashKey::Cookie(c.to_string()),
            _ => return Err(format!("`{key}` is no hash key; {HELP}")),
        }),
        _ => return Err(format!("`{text}` is not a way to balance; {HELP}")),
    };
    Ok(balance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_line_has_an_address_and_options() {
        let (addr, o) = parse_server_line("10.0.0.5:8080 weight=3 backup node=1").unwrap();
        assert_eq!(addr, "10.0.0.5:8080");
        assert_eq!(
            o,
            ServerOptions {
                weight: Some(3),
                backup: true,
                node: Some(1)
            }
        );
        assert!(parse_server_line("a:1 weight=0").is_err());
        assert!(parse_server_line("a:1 weight=101").is_err());
        assert!(parse_server_line("a:1 slow").is_err());
        assert!(parse_server_line("  ").is_err());
    }

    #[test]
    fn balance_is_written_in_words() {
        assert_eq!(parse_balance("least_time"), Ok(Balance::LeastTime));
        assert_eq!(
            parse_balance("hash header:X-User"),
            Ok(Balance::Hash(HashKey::Header("x-user".into())))
        );
        assert_eq!(
            parse_balance("hash cookie:sid"),
            Ok(Balance::Hash(HashKey::Cookie("sid".into())))
        );
        assert!(parse_balance("hash").is_err());
        assert!(parse_balance("hash header:").is_err());
        assert!(parse_balance("random").is_err());
    }
}
