//! An upstream group as a front worker reaches it: servers espalier did not start, chosen per
//! request by the thread's own balancer, taken out for a while when traffic shows them
//! failing, and out while the master's active check says they are down.
//!
//! Owns: [`GroupHealth`] (each server's state, shared by a worker process's threads: written
//! only when a server fails, is ejected or changes state — never per request) and
//! [`GroupSource`] (a thread's view: its balancer, its requests in flight, the failures it
//! logged). Must not touch: what is sent (the forwarder's), or the choice itself
//! (`crate::routing::balance`, pure).
//!
//! Passive checks as Envoy's outlier detection: `failures` in a row (refused or timed-out
//! connections, timed-out or garbled answers, 5xx when `on_5xx`) eject a server for
//! `eject_for` × its ejections so far (at most 10×), unless it is the group's last server up
//! — a group whose servers all fail still tries them rather than refuse at once.

use super::Endpoint;
use crate::config::upstream::{HashKey, ServerAddress, UpstreamSpec};
use crate::routing::balance::{Balancer, Policy, Server};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest ejection, in multiples of `eject_for` (30 s by default): a server that failed
/// for a long time is back in use at most this long after it recovered, even with no active
/// check to say so (Envoy's 10× kept a recovered server idle for minutes).
const MAX_EJECTION_FACTOR: u32 = 3;

/// A server's state, shared by a worker process's threads.
#[derive(Default)]
pub struct ServerHealth {
    /// Down by the active check (set by the master's `upstream-health` messages).
    pub checked_down: AtomicBool,
    /// Ejected until this many milliseconds after the group's epoch (0: not ejected).
    ejected_until_ms: AtomicU64,
    ejections: AtomicU32,
    /// Failures in a row seen by any thread.
    failures: AtomicU32,
}

/// A group's servers' states in one worker process.
pub struct GroupHealth {
    pub spec: Arc<UpstreamSpec>,
    epoch: Instant,
    pub servers: Vec<ServerHealth>,
    /// Its `https://` servers' TLS client configuration (made once per process, while the
    /// worker may still read its files), or why it could not be made.
    tls: Option<Result<Arc<rustls::ClientConfig>, String>>,
}

impl GroupHealth {
    pub fn new(spec: Arc<UpstreamSpec>) -> Self {
        GroupHealth {
            servers: (spec.servers.iter())
                .map(|_| ServerHealth::default())
                .collect(),
            tls: (spec.tls.as_ref()).map(|t| client_config(t, spec.protocol).map(Arc::new)),
            spec,
            epoch: Instant::now(),
        }
    }

    /// How server `i` is spoken to over TLS: the client configuration and the name sent and
    /// verified; `None` for a cleartext server.
    pub fn tls_for(&self, i: usize) -> Option<Result<TlsTo<'_>, String>> {
        let server = &self.spec.servers[i];
        let own = server.tls_name.as_deref()?;
        let named = self
            .spec
            .tls
            .as_ref()
            .and_then(|t| t.server_name.as_deref());
        let name = named.unwrap_or(own);
        Some(match &self.tls {
            Some(Ok(config)) => rustls::pki_types::ServerName::try_from(name.to_string())
                .map(|n| (config, n))
                .map_err(|e| format!("`{name}` is no TLS server name: {e}")),
            Some(Err(e)) => Err(e.clone()),
            None => Err("the group has no TLS settings".into()),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether server `i` may take requests now.
    pub fn up(&self, i: usize, now_ms: u64) -> bool {
        let s = &self.servers[i];
        !s.checked_down.load(Ordering::Relaxed)
            && s.ejected_until_ms.load(Ordering::Relaxed) <= now_ms
    }

    /// The active check says server `i` is down (`true`) or up: a server coming up is
    /// back from any ejection at once, its count of ejections reset.
    pub fn set_checked(&self, i: usize, down: bool) {
        let s = &self.servers[i];
        let was_down = s.checked_down.swap(down, Ordering::Relaxed);
        if was_down && !down {
            s.ejected_until_ms.store(0, Ordering::Relaxed);
            s.ejections.store(0, Ordering::Relaxed);
            s.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Whether no server may take requests now (every one down or ejected): then the group
    /// sends to all of them rather than to none (Envoy's panic routing) — a check that fails
    /// against servers that answer traffic must not take the whole group down.
    pub fn all_out(&self, now_ms: u64) -> bool {
        !(0..self.servers.len()).any(|i| self.up(i, now_ms))
    }

    /// How the group stands, for a log line: `2 down by the health check, 1 ejected`.
    pub fn summary(&self) -> String {
        let now = self.now_ms();
        let down = (self.servers.iter())
            .filter(|s| s.checked_down.load(Ordering::Relaxed))
            .count();
        let ejected = (self.servers.iter())
            .filter(|s| s.ejected_until_ms.load(Ordering::Relaxed) > now)
            .count();
        format!(
            "{} servers: {down} down by the health check, {ejected} ejected after failures",
            self.servers.len()
        )
    }

    /// A request of server `i` ended well: its run of failures is over.
    fn succeeded(&self, i: usize) {
        let f = &self.servers[i].failures;
        // Read first: the common case writes nothing shared.
        if f.load(Ordering::Relaxed) != 0 {
            f.store(0, Ordering::Relaxed);
        }
    }

    /// A failure of server `i`; `Some(for)` when it ejected the server, for how long.
    fn failed(&self, i: usize) -> Option<Duration> {
        let passive = &self.spec.passive;
        if passive.failures == 0 {
            return None;
        }
        let s = &self.servers[i];
        let n = s.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < passive.failures {
            return None;
        }
        let now = self.now_ms();
        let others_up = (0..self.servers.len()).any(|k| k != i && self.up(k, now));
        if !others_up || s.ejected_until_ms.load(Ordering::Relaxed) > now {
            return None;
        }
        s.failures.store(0, Ordering::Relaxed);
        let times = (s.ejections.fetch_add(1, Ordering::Relaxed) + 1).min(MAX_EJECTION_FACTOR);
        let span = passive.eject_for * times;
        s.ejected_until_ms
            .store(now + span.as_millis() as u64, Ordering::Relaxed);
        Some(span)
    }

    /// The servers this process has ejected now (for the master's `status`).
    pub fn ejected_now(&self) -> impl Iterator<Item = usize> + '_ {
        let now = self.now_ms();
        (0..self.servers.len())
            .filter(move |&i| self.servers[i].ejected_until_ms.load(Ordering::Relaxed) > now)
    }
}

/// A TLS server's client configuration and the name sent and verified.
pub type TlsTo<'a> = (
    &'a Arc<rustls::ClientConfig>,
    rustls::pki_types::ServerName<'static>,
);

/// The TLS client configuration `[upstream.tls]` says: its authorities (or none checked with
/// `verify = false`), its client certificate, the group's `protocol` by ALPN.
pub fn client_config(
    tls: &crate::config::upstream::UpstreamTls,
    protocol: crate::config::upstream::Protocol,
) -> Result<rustls::ClientConfig, String> {
    use crate::tls::client::Trust;
    let trust = match (&tls.ca, tls.verify) {
        (_, false) => Trust::Insecure,
        (Some(ca), true) => Trust::CaFiles(vec![ca.clone()]),
        (None, true) => Trust::System,
    };
    let cert = (tls.client_cert.as_ref()).map(|(c, k)| (c.as_path(), k.as_path()));
    let alpn = match protocol {
        crate::config::upstream::Protocol::Http1 => b"http/1.1".to_vec(),
        crate::config::upstream::Protocol::Http2 => b"h2".to_vec(),
    };
    crate::tls::client::client_config(&trust, cert, vec![alpn])
}

/// The endpoint a server is reached at.
pub fn endpoint_of(address: &ServerAddress) -> Endpoint {
    match address {
        ServerAddress::Tcp(a) => Endpoint::Tcp(*a),
        ServerAddress::Unix(p) => Endpoint::Unix(p.clone()),
    }
}

/// One engine thread's way to a group.
pub struct GroupSource {
    pub health: Arc<GroupHealth>,
    endpoints: Vec<Endpoint>,
    balancer: Rc<RefCell<Balancer>>,
    /// Each server's value in the sticky cookie (empty for a group without one), made once.
    sticky_ids: Vec<String>,
    /// Every server was out at this thread's last pick (said once per spell, in the log).
    all_out: std::cell::Cell<bool>,
}

impl GroupSource {
    /// The thread on `node` (`seed` tells threads apart) reaching the group `health` is of.
    pub fn new(health: Arc<GroupHealth>, node: Option<u32>, seed: u64) -> Self {
        let spec = &health.spec;
        let policy = match spec.balance {
            crate::config::upstream::Balance::LeastTime => Policy::LeastTime,
            crate::config::upstream::Balance::RoundRobin => Policy::RoundRobin,
            crate::config::upstream::Balance::LeastRequests => Policy::LeastRequests,
            crate::config::upstream::Balance::Hash(_) => Policy::Hash,
        };
        let servers = (spec.servers.iter())
            .map(|s| Server {
                key: s.address.to_string(),
                weight: s.weight,
                backup: s.backup,
                local: node.is_some() && s.node == node,
            })
            .collect();
        let endpoints: Vec<Endpoint> = (spec.servers.iter())
            .map(|s| endpoint_of(&s.address))
            .collect();
        let sticky_ids = match spec.sticky {
            Some(_) => endpoints.iter().map(sticky_id).collect(),
            None => Vec::new(),
        };
        GroupSource {
            endpoints,
            sticky_ids,
            balancer: Rc::new(RefCell::new(Balancer::new(policy, servers, seed))),
            health,
            all_out: std::cell::Cell::new(false),
        }
    }

    pub fn spec(&self) -> &UpstreamSpec {
        &self.health.spec
    }

    /// What a hash group balances on, when it is one.
    pub fn hash_key(&self) -> Option<&HashKey> {
        match &self.health.spec.balance {
            crate::config::upstream::Balance::Hash(key) => Some(key),
            _ => None,
        }
    }

    pub fn index_of(&self, endpoint: &Endpoint) -> Option<usize> {
        self.endpoints.iter().position(|e| e == endpoint)
    }

    /// What of `req` the group chooses a server by: its hash key's hash, and for a sticky
    /// group the server its cookie names (`Some(None)`: none, or one no longer in the group).
    pub fn choose(&self, req: &crate::http::Request<'_>) -> Choose {
        Choose {
            hash: self.hash_key().map(|k| key_hash(k, req)),
            sticky: self.health.spec.sticky.as_deref().map(|name| {
                let value = req.cookie(name)?;
                self.sticky_ids.iter().position(|id| id.as_bytes() == value)
            }),
        }
    }

    /// The `Set-Cookie` line that keeps the client to server `i`, when the group is sticky
    /// and the request's cookie named another (or none).
    pub fn sticky_line(&self, i: usize, choose: &Choose) -> Option<String> {
        let name = self.health.spec.sticky.as_deref()?;
        (choose.sticky != Some(Some(i))).then(|| {
            let id = &self.sticky_ids[i];
            format!("Set-Cookie: {name}={id}; Path=/; HttpOnly; SameSite=Lax\r\n")
        })
    }

    /// Server `i`, which a sticky cookie names, when it is up and not in `tried`, counted in
    /// flight as [`Self::pick`]'s.
    pub fn pick_named(&self, i: usize, tried: &[usize]) -> Option<(usize, Endpoint, InFlight)> {
        let up = self.health.up(i, self.health.now_ms());
        (up && !tried.contains(&i)).then(|| self.hold(i))
    }

    /// A server for a request, none of `tried`, counted in flight until the [`InFlight`]
    /// is dropped; `None` when no server may be used. When every server is out (down by
    /// the check or ejected), any of them may be.
    pub fn pick(&self, tried: &[usize], key: Option<u64>) -> Option<(usize, Endpoint, InFlight)> {
        let now_us = self.health.epoch.elapsed().as_micros() as u64;
        let now = now_us / 1000;
        let mut balancer = self.balancer.borrow_mut();
        let picked = balancer.pick(|i| self.health.up(i, now), tried, key, now_us);
        let all_out = picked.is_none() && self.health.all_out(now);
        let was_out = self.all_out.replace(all_out);
        if all_out && !was_out {
            crate::os::log(
                "proxy",
                format_args!(
                    "every server of upstream `{}` is out ({}): sending to all of them rather than to none",
                    self.health.spec.name,
                    self.health.summary()
                ),
            );
        }
        let i = match picked {
            Some(i) => i,
            None if all_out => balancer.pick(|_| true, tried, key, now_us)?,
            None => return None,
        };
        drop(balancer);
        Some(self.hold(i))
    }

    /// Server `i`, its request counted in flight until the [`InFlight`] is dropped.
    fn hold(&self, i: usize) -> (usize, Endpoint, InFlight) {
        self.balancer.borrow_mut().start(i);
        let held = InFlight {
            balancer: Rc::clone(&self.balancer),
            server: i,
        };
        (i, self.endpoints[i].clone(), held)
    }

    /// Server `i` answered a request's head after `waited`: its latency, and its run of
    /// failures over (unless `status` is a 5xx counted as one).
    pub fn answered(&self, i: usize, waited: Duration, status: Option<u16>) {
        let now_us = self.health.epoch.elapsed().as_micros() as u64;
        (self.balancer.borrow_mut()).observe(i, waited.as_micros() as u64, now_us);
        match status {
            Some(s) if s >= 500 && self.health.spec.passive.on_5xx => {
                self.failed(i, &format!("answered {s}"))
            }
            _ => self.health.succeeded(i),
        }
    }

    /// A client gave up on its request to server `i` after `waited`: the server's answer
    /// takes at least that long, for the balancer (not a failure: the server may be sound
    /// and the client impatient).
    pub fn abandoned(&self, i: usize, waited: Duration) {
        let now_us = self.health.epoch.elapsed().as_micros() as u64;
        (self.balancer.borrow_mut()).abandoned(i, waited.as_micros() as u64, now_us);
    }

    /// Server `i` failed a request for `cause`: counted toward its ejection, and, for the
    /// least-time balancer, as a slow answer.
    pub fn failed(&self, i: usize, cause: &str) {
        let now_us = self.health.epoch.elapsed().as_micros() as u64;
        self.balancer.borrow_mut().penalize(i, now_us);
        if let Some(span) = self.health.failed(i) {
            let spec = &self.health.spec;
            crate::os::log(
                "proxy",
                format_args!(
                    "upstream `{}`: server {} ejected for {span:?} after {} failures in a row (the last: {cause})",
                    spec.name, spec.servers[i].name, spec.passive.failures
                ),
            );
        }
    }

    /// Names server `endpoint` in a log line.
    pub fn describe(&self, endpoint: Option<&Endpoint>) -> String {
        let spec = &self.health.spec;
        match endpoint.and_then(|e| self.index_of(e)) {
            Some(i) => format!(
                "server {} of upstream `{}`",
                spec.servers[i].name, spec.name
            ),
            None => format!("upstream `{}`", spec.name),
        }
    }
}

/// A request counted in flight at a server of the thread's balancer, until dropped.
pub struct InFlight {
    balancer: Rc<RefCell<Balancer>>,
    server: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.balancer.borrow_mut().finish(self.server);
    }
}

/// What of a request an upstream group chooses its server by.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Choose {
    /// Its hash key's hash, under `balance = "hash …"`.
    pub hash: Option<u64>,
    /// For a sticky group: the server its cookie names, if any.
    pub sticky: Option<Option<usize>>,
}

/// The hash of a request's key, computed where the request is read, with nothing copied. A
/// missing header or cookie hashes as empty, so such requests keep to one server, as
/// nginx's do.
pub fn key_hash(key: &HashKey, req: &crate::http::Request<'_>) -> u64 {
    use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};
    match key {
        HashKey::Client => xxh3_64(req.client.as_bytes()),
        HashKey::Uri if req.query.is_empty() => xxh3_64(req.path.as_bytes()),
        // The query hashed with the path's hash as its seed: `/a?b` and `/a` differ.
        HashKey::Uri => xxh3_64_with_seed(req.query.as_bytes(), xxh3_64(req.path.as_bytes())),
        HashKey::Header(name) => xxh3_64(req.header(name).unwrap_or_default().as_bytes()),
        HashKey::Cookie(name) => xxh3_64(req.cookie(name).unwrap_or_default()),
    }
}

/// A server's value in a sticky cookie: a hash of its address, the same in every process
/// and across reloads, that says nothing of the address itself.
fn sticky_id(endpoint: &Endpoint) -> String {
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(endpoint.to_string().as_bytes())
    )
}
