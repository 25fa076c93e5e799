//! A front worker thread's way to its pool's application processes: the pool's proxy
//! settings, the tiers of processes the master publishes (nearest node first), and the
//! thread's own view of them — round-robin position, idle connections, counters.
//!
//! Owns: choosing a process (or a group's server) for a request and getting a connection to
//! it — a pool's processes in `processes`. Must not touch:
//! what is sent on the connection (see [`super::forward`](mod@super::forward) and [`super::fastcgi`]).

use super::h2_exchange::H2Exchange;
use super::queue::{Backpressure, Gate, Queue, Slot};
use super::upstream::{Conn, Pool};
use super::Endpoint;
/// The app processes of a pool, nearest first.
type Tiers = crate::topology::nearest::Tiers<Endpoint>;
use std::cell::{Cell, RefCell};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a request waits for a first app process to be ready (a restart) before it is
/// answered 503, at most, unless the pool says otherwise (see [`ProxySettings::wait_for_ready`]).
pub const WAIT_FOR_READY: Duration = Duration::from_secs(5);

fn default_wait_for_ready() -> Duration {
    WAIT_FOR_READY
}

/// A pool's proxy timeouts.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ProxySettings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
    /// Speak FastCGI to the app processes instead of HTTP/1.1.
    #[serde(default)]
    pub fastcgi: bool,
    /// FastCGI: the extensions of the scripts the app may run.
    #[serde(default)]
    pub script_extensions: Vec<String>,
    /// Speak HTTP/2 to the app processes or servers (h2c, or ALPN `h2` over TLS).
    #[serde(default)]
    pub http2: bool,
    /// How long a request waits for a first ready app process: an on-demand pool's visitor
    /// waits for the app its arrival started (its pool's `startup_time_limit`), as IIS holds
    /// a request in its queue while the worker process starts.
    #[serde(default = "default_wait_for_ready")]
    pub wait_for_ready: Duration,
    /// Requests in flight per app process and the queue beyond (`None`: unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backpressure: Option<Backpressure>,
    /// Client fields whose names hold `_` go on (`pass_underscored_fields`).
    #[serde(default)]
    pub pass_underscored_fields: bool,
    /// Answers read at the app's speed (`buffer`; see [`super::spool`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<crate::config::Buffering>,
    /// Cacheable answers kept (`cache_responses`; see [`super::cache`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::config::upstream::ResponseCache>,
}

/// The tiers of a front worker, replaced by its main thread when the master sends new ones
/// and read by its engine threads: a version check (one atomic load) per request, the lock
/// only when the version moved.
///
/// It also carries the other way what the master must hear: the app processes that let
/// [`UNRESPONSIVE_AFTER`] requests in a row of one thread time out (written only then, read
/// at the master's ping).
#[derive(Default)]
pub struct SharedTiers {
    version: AtomicU64,
    tiers: Mutex<(Arc<Tiers>, Arc<Gates>)>,
    unresponsive: Mutex<Vec<Endpoint>>,
    /// Requests waiting for an app process under `max_requests_per_process`.
    pub queue: Arc<Queue>,
    /// Poked by a request that finds no ready app process: the worker's main thread tells
    /// the master, which starts the app if it sleeps (an on-demand pool's app starts at its
    /// front's first request).
    pub app_wanted: tokio::sync::Notify,
}

/// Each app process's gate (its requests in flight from this worker), kept across the
/// master's updates for the processes that stay.
type Gates = std::collections::HashMap<Endpoint, Arc<Gate>>;

/// Requests in a row that timed out waiting for one app process before a thread reports it.
pub const UNRESPONSIVE_AFTER: u32 = 3;

impl SharedTiers {
    pub fn publish(&self, tiers: Tiers) {
        let mut current = self.tiers.lock().unwrap_or_else(|e| e.into_inner());
        let gates: Gates = tiers
            .tiers
            .iter()
            .flatten()
            .map(|e| (e.clone(), current.1.get(e).cloned().unwrap_or_default()))
            .collect();
        *current = (Arc::new(tiers), Arc::new(gates));
        self.version.fetch_add(1, Ordering::Release);
    }

    fn report_unresponsive(&self, endpoint: &Endpoint) {
        let mut list = self.unresponsive.lock().unwrap_or_else(|e| e.into_inner());
        if !list.contains(endpoint) {
            list.push(endpoint.clone());
        }
    }

    /// The app processes reported unresponsive since the last call.
    pub fn take_unresponsive(&self) -> Vec<Endpoint> {
        std::mem::take(&mut *self.unresponsive.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// One engine thread's way to the servers of a proxied path: a pool's application
/// processes, or an upstream group's servers. Its idle connections, counters and log bound
/// are the thread's own. Never shared with another thread.
pub struct ProxyRoute {
    pub(super) settings: ProxySettings,
    pub(super) pool: Pool,
    /// Requests forwarded to a process off this thread's node (none of its own was ready).
    pub remote: Cell<u64>,
    /// Requests this thread answered 502 or 504 for the app, for the log's bound.
    failures: Cell<u64>,
    source: Source,
    /// Requests of this thread at its servers now, within their share.
    share: super::share::Share,
    /// Its kept answers (`cache_responses`), shared by the process's threads.
    pub(super) cache: Option<std::sync::Arc<super::cache_store::Store>>,
}

/// Where a route's servers come from.
enum Source {
    Pool(Processes),
    Group(super::group::GroupSource),
}

/// A thread's view of its pool's application processes: the master's tiers, its
/// round-robin position, and the processes that let its requests time out.
pub(super) struct Processes {
    shared: Arc<SharedTiers>,
    seen: RefCell<(u64, Arc<Tiers>, Arc<Gates>)>,
    next: Cell<usize>,
    /// Requests in a row that timed out, per app process (this thread's view; empty while
    /// every app answers, so an answer costs one check).
    silent: RefCell<Vec<(Endpoint, u32)>>,
}

/// What a request holds at its server until it is done: its count in the route's share,
/// and its place under `max_requests_per_process` or its count in flight in the group's
/// balancer.
pub(super) struct Held {
    _share: super::share::Counted,
    _at: Option<At>,
}

pub(super) enum At {
    Slot(#[allow(dead_code)] Slot),
    InFlight(#[allow(dead_code)] super::group::InFlight),
}

impl ProxyRoute {
    pub fn new(settings: ProxySettings, shared: Arc<SharedTiers>) -> Self {
        ProxyRoute {
            settings,
            pool: Pool::default(),
            remote: Cell::new(0),
            failures: Cell::new(0),
            share: Default::default(),
            cache: None,
            source: Source::Pool(Processes {
                shared,
                seen: RefCell::new((u64::MAX, Arc::default(), Arc::default())),
                next: Cell::new(0),
                silent: RefCell::new(Vec::new()),
            }),
        }
    }

    /// This route keeping its cacheable answers (`cache_responses`) in the process's store
    /// named `name` (`pool:NAME`, `upstream:NAME`), when its settings say so.
    pub fn keeping_answers(mut self, name: &str) -> Self {
        let bounds = self.settings.cache.clone();
        self.cache = bounds.map(|bounds| super::cache_store::store(name, bounds));
        self
    }

    /// A thread's way to an upstream group.
    pub fn to_group(group: super::group::GroupSource) -> Self {
        let spec = group.spec();
        let settings = ProxySettings {
            connect_timeout: spec.connect_timeout,
            response_timeout: spec.response_timeout,
            fastcgi: false,
            script_extensions: Vec::new(),
            http2: spec.protocol == crate::config::upstream::Protocol::Http2,
            wait_for_ready: Duration::ZERO,
            backpressure: None,
            pass_underscored_fields: spec.pass_underscored_fields,
            buffer: spec.buffer,
            cache: spec.cache_responses.clone(),
        };
        ProxyRoute {
            settings,
            pool: Pool::default(),
            remote: Cell::new(0),
            failures: Cell::new(0),
            share: Default::default(),
            cache: None,
            source: Source::Group(group),
        }
    }

    /// What of `req` its group chooses a server by (nothing for a pool's processes).
    pub(super) fn choose(&self, req: &crate::http::Request<'_>) -> super::group::Choose {
        match &self.source {
            Source::Group(g) => g.choose(req),
            Source::Pool(_) => Default::default(),
        }
    }

    /// The `Set-Cookie` line that keeps the client to `endpoint`, when its group is sticky
    /// and the request did not name that server already.
    pub(super) fn sticky_line(
        &self,
        endpoint: &Endpoint,
        choose: &super::group::Choose,
    ) -> Option<String> {
        let Source::Group(g) = &self.source else {
            return None;
        };
        g.sticky_line(g.index_of(endpoint)?, choose)
    }

    /// Logs why a request was answered `status` (502, 503 or 504) for the app at `endpoint`:
    /// the client's page cannot say, and an access log (off by default) gives only the status.
    /// Bounded by [`crate::os::nth_worth_logging`] per thread, so a dead app cannot flood it.
    pub(super) fn log_failure(&self, endpoint: Option<&Endpoint>, status: u16, cause: &str) {
        let n = self.failures.get() + 1;
        self.failures.set(n);
        if crate::os::nth_worth_logging(n) {
            let app = match &self.source {
                Source::Group(g) => g.describe(endpoint),
                Source::Pool(_) => {
                    endpoint.map_or_else(|| "the app".to_string(), |e| format!("the app at {e}"))
                }
            };
            crate::os::log(
                "proxy",
                format_args!("answered {status}: {app} {cause} (failure {n} of this thread; later ones are logged at powers of two)"),
            );
        }
    }

    /// `endpoint` answered a request sent at `asked` with `head` (its answer's head): its
    /// wait goes to the access log's `report`, and its run of timeouts or failures, if any,
    /// is over.
    pub(super) fn answered(
        &self,
        endpoint: &Endpoint,
        report: &crate::http::access_log::Report,
        asked: std::time::Instant,
        head: &[u8],
    ) {
        let waited = asked.elapsed();
        report.upstream_micros.set(Some(waited.as_micros() as u64));
        let addr = match endpoint {
            Endpoint::Tcp(a) => Some(*a),
            Endpoint::Unix(_) => None,
        };
        let resends = report.hop.get().map_or(0, |h| h.resends);
        report.hop.set(Some(crate::http::access_log::Hop {
            asked,
            addr,
            resends,
        }));
        match &self.source {
            Source::Pool(p) => {
                let mut silent = p.silent.borrow_mut();
                if !silent.is_empty() {
                    silent.retain(|(e, _)| e != endpoint);
                }
            }
            Source::Group(g) => {
                if let Some(i) = g.index_of(endpoint) {
                    g.answered(i, waited, crate::http::status_of(head));
                }
            }
        }
    }

    /// `endpoint` failed a request with `status` (502: garbled or no answer; 504: none in
    /// time). A pool's process that lets [`UNRESPONSIVE_AFTER`] requests in a row time out
    /// is reported to the master (through the worker's next pong), which replaces it; a
    /// group's server counts it toward its ejection.
    pub(super) fn failed(&self, endpoint: &Endpoint, status: u16, cause: &str) {
        match &self.source {
            Source::Pool(p) if status == 504 => p.timed_out(endpoint),
            Source::Pool(_) => {}
            Source::Group(g) => {
                if let Some(i) = g.index_of(endpoint) {
                    g.failed(i, cause);
                }
            }
        }
    }

    /// A client gave up on its request to `endpoint` after `waited`: for a group's
    /// server, a sample of its answer time (at least that long) for the balancer.
    pub(super) fn abandoned(&self, endpoint: &Endpoint, waited: std::time::Duration) {
        if let Source::Group(g) = &self.source {
            if let Some(i) = g.index_of(endpoint) {
                g.abandoned(i, waited);
            }
        }
    }

    /// Whether requests go to an upstream group of more than one server (not a pool's
    /// processes).
    pub(super) fn has_other_server(&self) -> bool {
        matches!(&self.source, Source::Group(g) if g.health.servers.len() > 1)
    }

    /// The name `endpoint` is written by in its group (what a request to it names in `Host`);
    /// `None` for a pool's process.
    pub(super) fn server_name(&self, endpoint: &Endpoint) -> Option<&str> {
        let Source::Group(g) = &self.source else {
            return None;
        };
        Some(g.spec().servers.get(g.index_of(endpoint)?)?.name.as_str())
    }

    /// Whether the app speaks FastCGI.
    pub fn fastcgi(&self) -> bool {
        self.settings.fastcgi
    }

    pub fn settings(&self) -> &ProxySettings {
        &self.settings
    }

    /// Its buffering (`buffer`) for a request whose path takes it (`path_takes`: a path's
    /// `buffer = false` turns it off there).
    pub(super) fn buffer(&self, path_takes: bool) -> Option<crate::config::Buffering> {
        self.settings.buffer.filter(|_| path_takes)
    }

    /// A connection to a server other than `avoid` when there is one, and what the request
    /// holds there until done. Fails with the status to answer and, when it is worth a log
    /// line, why.
    pub(super) async fn connection(
        &self,
        avoid: Option<Endpoint>,
        choose: &super::group::Choose,
    ) -> Result<(Endpoint, Conn, Held), (u16, Option<String>)> {
        let share = self.share.take()?;
        let (endpoint, conn, at) = match &self.source {
            Source::Pool(p) => self.process_connection(p, avoid).await,
            Source::Group(g) => self.group_connection(g, avoid, choose).await,
        }?;
        let held = Held {
            _share: share,
            _at: at,
        };
        Ok((endpoint, conn, held))
    }

    /// Caps this thread's requests at the route's servers to its share of the thread's
    /// `connections` (see [`super::share`]).
    pub fn share_of(&self, connections: usize) {
        self.share.of(connections);
    }

    /// A connection to `endpoint` the thread holds already: an idle HTTP/1.1 one, or a
    /// request on its HTTP/2 connection.
    fn idle(&self, endpoint: &Endpoint) -> Option<Conn> {
        if self.settings.http2 {
            let sender = self.pool.shared_h2(endpoint)?;
            return Some(Conn::H2(Box::new(H2Exchange::new(
                sender,
                self.tls_to(endpoint),
            ))));
        }
        self.pool.take(endpoint)
    }

    /// A new connection to `endpoint` made ready for requests: as it is in HTTP/1.1; in
    /// HTTP/2, its handshake made and the connection kept for the thread's next requests.
    async fn opened(
        &self,
        endpoint: &Endpoint,
        conn: Conn,
        timeout: Duration,
    ) -> Result<Conn, String> {
        if !self.settings.http2 {
            return Ok(conn);
        }
        let https = matches!(conn, Conn::Tls(_));
        // Boxed, as the TLS handshake below: an HTTP/2 handshake's state is kilobytes, and
        // inline it would grow every lent request's future, which is moved into its box.
        let sender = Box::pin(conn.into_h2(timeout)).await?;
        self.pool.share_h2(endpoint, sender.clone());
        Ok(Conn::H2(Box::new(H2Exchange::new(sender, https))))
    }

    /// Whether `endpoint` is spoken to over TLS (a group's `https://` server).
    fn tls_to(&self, endpoint: &Endpoint) -> bool {
        let Source::Group(g) = &self.source else {
            return false;
        };
        g.index_of(endpoint)
            .is_some_and(|i| g.health.spec.servers[i].tls_name.is_some())
    }

    /// A connection to one of the group's servers: an idle one, or a new one — a server
    /// that refuses or does not answer the connect in time is counted as failing and
    /// another is tried, up to the group's `tries` servers within `try_for`.
    async fn group_connection(
        &self,
        g: &super::group::GroupSource,
        avoid: Option<Endpoint>,
        choose: &super::group::Choose,
    ) -> Result<(Endpoint, Conn, Option<At>), (u16, Option<String>)> {
        let key = choose.hash;
        // The server a sticky cookie names comes first, while it is up.
        let named = choose.sticky.flatten();
        let spec = g.spec();
        let started = tokio::time::Instant::now();
        let mut tried: Vec<usize> = avoid.iter().filter_map(|e| g.index_of(e)).collect();
        let mut causes: Vec<String> = Vec::new();
        let mut timed_out = false;
        while causes.len() < spec.tries as usize {
            let left = spec.try_for.saturating_sub(started.elapsed());
            if left.is_zero() {
                causes.push(format!("try_for ({:?}) ran out", spec.try_for));
                break;
            }
            // A request sent again (its connection closed before any answer) goes to another
            // server when there is one, else to the same on a new connection.
            let again = || (causes.is_empty() && avoid.is_some()).then(|| g.pick(&[], key));
            let sticky = || named.and_then(|i| g.pick_named(i, &tried));
            let picked = sticky().or_else(|| g.pick(&tried, key));
            let Some((i, endpoint, held)) = picked.or_else(|| again().flatten()) else {
                break;
            };
            tried.push(i);
            // A request sent again goes on a new connection (as `process_connection` says).
            if let Some(c) = avoid.is_none().then(|| self.idle(&endpoint)).flatten() {
                return Ok((endpoint, c, Some(At::InFlight(held))));
            }
            let timeout = self.settings.connect_timeout.min(left);
            let connected = match Conn::connect(&endpoint, timeout).await {
                Ok(c) => match g.health.tls_for(i) {
                    None => self.opened(&endpoint, c, timeout).await,
                    Some(Ok((config, name))) => {
                        match Box::pin(c.into_tls(config, &name, timeout)).await {
                            Ok(c) => self.opened(&endpoint, c, timeout).await,
                            Err(e) => Err(e),
                        }
                    }
                    Some(Err(e)) => Err(e),
                },
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    timed_out = true;
                    Err("connect timed out".to_string())
                }
                Err(e) => Err(format!("connect failed: {e}")),
            };
            match connected {
                Ok(c) => return Ok((endpoint, c, Some(At::InFlight(held)))),
                Err(cause) => {
                    g.failed(i, &cause);
                    causes.push(format!("{}: {cause}", spec.servers[i].name));
                }
            }
        }
        if causes.is_empty() {
            return Err((
                503,
                Some(format!("has no server up ({})", g.health.summary())),
            ));
        }
        let status = if timed_out { 504 } else { 502 };
        Err((
            status,
            Some(format!("could not be reached ({})", causes.join("; "))),
        ))
    }
}

mod processes;
