//! What `espalier bench` loads and how: targets (resolved URLs with weights), connections,
//! threads, duration or count, open or closed loop, HTTP/1.1 or HTTP/2, which certificates to
//! trust over TLS — and the sweep syntax.
//!
//! Owns: the options and their validation. Must not touch: running the load.

use crate::cpuset::CpuSet;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// What to load and how.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub targets: Vec<Target>,
    /// Connections in all, spread over targets by weight and over threads evenly.
    pub connections: usize,
    pub threads: usize,
    /// CPUs to pin client threads to (thread i on the i-th CPU, cycling).
    pub cpus: Option<CpuSet>,
    pub requests: Option<u64>,
    pub duration: Duration,
    pub warmup: Duration,
    pub cooldown: Duration,
    pub keepalive: bool,
    pub pipeline: usize,
    /// Open-loop requests per second over all connections.
    pub rate: Option<f64>,
    pub timeout: Duration,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Print a live progress line to stderr.
    pub progress: bool,
    /// Begin the load at this wall-clock time (`--start-at`), so runs on several client
    /// machines begin together; `None` = at once.
    pub start_at: Option<std::time::SystemTime>,
    /// Speak HTTP/2: over TLS by ALPN, over cleartext with prior knowledge (h2c). Each
    /// connection carries `pipeline` concurrent streams.
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (https targets only).
    pub h3: bool,
    /// Which server certificates to believe over `https://`.
    pub trust: Trust,
    /// The TLS key exchange groups offered, in order (`--tls-groups`, see
    /// [`parse_tls_groups`]); `None`: espalier's own (X25519MLKEM768, X25519, P-256, P-384).
    pub tls_groups: Option<Vec<rustls::NamedGroup>>,
    /// A new TLS connection resumes the session of an earlier one where the server lets it
    /// (as browsers do); `false` (`--no-resumption`): every handshake is a full one.
    pub resume: bool,
    /// Send again, uncounted, a request the server did not take (as browsers do); `false`
    /// (`--no-retry`) counts it as an error, as wrk and h2load do.
    pub retry_unanswered: bool,
    /// Cleartext connections go through each thread's io_uring (`--io`), not tokio's epoll.
    pub uring: bool,
    /// Which I/O path, and why (said before the run).
    pub io_path: String,
}

pub use crate::tls::client::Trust;

/// One URL to load, resolved.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub host_header: String,
    pub path: String,
    pub weight: u32,
    /// `https://`: TLS to the server.
    pub tls: bool,
    /// The host of the URL, without port or brackets: the TLS server name.
    pub host: String,
}

impl Target {
    /// Parses `http[s]://host[:port]/path` and resolves the host once.
    pub fn parse(url: &str, weight: u32) -> Result<Target, String> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(format!("`{url}`: give an http:// or https:// URL")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("`{url}` has no host"));
        }
        // Add the default port unless one is given (`[v6]:port` or `host:port`).
        let has_port = match authority.strip_prefix('[') {
            Some(v6) => v6.contains("]:"),
            None => authority.contains(':'),
        };
        let with_port = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("`{url}`: cannot resolve `{authority}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{url}`: `{authority}` has no address"))?;
        Ok(Target {
            url: url.to_string(),
            addr,
            host_header: authority.to_string(),
            path: path.to_string(),
            weight: weight.max(1),
            tls,
            host: host_of(authority).to_string(),
        })
    }
}

/// The host of an authority (`host`, `host:port`, `[v6]:port`), without port or brackets.
pub(crate) fn host_of(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
}

impl BenchOptions {
    /// Options with the defaults of the command line.
    pub fn new(targets: Vec<Target>) -> Self {
        BenchOptions {
            targets,
            connections: 50,
            threads: 1,
            cpus: None,
            requests: None,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
            keepalive: true,
            pipeline: 1,
            rate: None,
            timeout: Duration::from_secs(10),
            method: "GET".into(),
            headers: Vec::new(),
            body: Vec::new(),
            progress: false,
            start_at: None,
            h2: false,
            h3: false,
            trust: Trust::System,
            tls_groups: None,
            resume: true,
            retry_unanswered: true,
            uring: false,
            io_path: "epoll".into(),
        }
    }

    /// The name a target's server is asked for over TLS (SNI) and its certificate checked
    /// against: a `-H 'Host: …'` names the site, as it does for the request, so
    /// `https://127.0.0.1:8443/ -H 'Host: shop.example'` loads shop's certificate and pages.
    pub(super) fn server_name<'a>(&'a self, t: &'a Target) -> &'a str {
        host_of(self.authority(t))
    }

    /// The site a target's requests name: a `-H 'Host: …'` (as with wrk and curl), or the
    /// URL's authority.
    pub(super) fn authority<'a>(&'a self, t: &'a Target) -> &'a str {
        self.given_host().unwrap_or(&t.host_header)
    }

    /// The value of a `-H 'Host: …'`, if one was given.
    fn given_host(&self) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map(|(_, v)| v.as_str())
    }

    /// The request bytes for a target, built once.
    pub(super) fn request_bytes(&self, t: &Target) -> Vec<u8> {
        let mut r = format!("{} {} HTTP/1.1\r\n", self.method, t.path);
        // One Host header, not two: a `-H 'Host: …'` goes out with the other headers.
        if self.given_host().is_none() {
            r.push_str(&format!("Host: {}\r\n", t.host_header));
        }
        if !self.keepalive {
            r.push_str("Connection: close\r\n");
        }
        for (n, v) in &self.headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" || self.method == "PUT" {
            r.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        r.push_str("\r\n");
        let mut bytes = r.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// The key exchange groups `names` (rustls's names, any case: `X25519MLKEM768`, `X25519`,
/// `secp256r1`, `secp384r1`), each one espalier's TLS offers; `Err` names one it does not.
pub fn parse_tls_groups(names: &[String]) -> Result<Vec<rustls::NamedGroup>, String> {
    let ours: Vec<rustls::NamedGroup> = (crate::certs::provider().kx_groups.iter())
        .map(|g| g.name())
        .collect();
    let known = || {
        (ours.iter())
            .map(|g| format!("{g:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    (names.iter())
        .map(|name| {
            (ours.iter())
                .find(|g| format!("{g:?}").eq_ignore_ascii_case(name))
                .copied()
                .ok_or_else(|| {
                    format!(
                        "--tls-groups: `{name}` is no group espalier offers ({})",
                        known()
                    )
                })
        })
        .collect()
}

/// Parses a sweep `FROM:TO:STEP` into the concurrency levels.
pub fn parse_sweep(text: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("--sweep `{text}`: write it as FROM:TO:STEP, like 10:1000:10");
    let parts: Vec<usize> = text
        .split(':')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    match parts.as_slice() {
        [from, to, step] if *from >= 1 && to >= from && *step >= 1 => {
            Ok((*from..=*to).step_by(*step).collect())
        }
        _ => Err(bad()),
    }
}
