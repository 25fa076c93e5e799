//! Request handlers and the router in front of them.
//!
//! The service behind the engine: routing and the handlers.
//!
//! Owns: routing a request to a site (by listener group and `Host`, with
//! [`crate::routing::hosts`]) and through the site's request chain once (`chain`, run by `route`: rules, the
//! app by path prefix, access, limit, sign-in — by another service `verified`'s — in the order of [`crate::config::chain`]),
//! and the context the request carries from there (what the chain decided, its log, its
//! field edits, error pages and codings); the answer (`answer`): here by a handler
//! ([`static_files`], [`dynamic`], [`cpu`], a front controller's files), by an application
//! process (the connection lent to [`crate::proxy`]'s dispatch), or by another pool on a
//! shared address (the connection handed there, see [`crate::handoff`]). This file holds the
//! service's data; `serve` keeps the engine's contract ([`Service`]) with it, `app` builds
//! each path's handler, `front` decides which of a forwarded path's requests are files,
//! [`mime`] names content types, and `traced` gives requests their traces and spans.
//! One [`ThreadService`] per worker thread; nothing in it is shared with another thread.
//! Must not touch: sockets or the protocols' framing (that is [`crate::http`]; what it knows
//! of a protocol is that an HTTP/2 or TLS connection cannot change pools, so a request of
//! another pool there is misdirected: 421). Not pure: the static handler does blocking
//! `stat`/`open`/`read` on the thread's event loop, as nginx does without thread pools (they
//! wait on the disk or page cache only, never on a peer).

mod answer;
mod app;
pub use app::ProxyRoutes;
mod chain;
pub mod cpu;
pub mod dynamic;
mod front;
pub mod mime;
mod route;
mod serve;
pub mod static_files;
mod traced;
mod verified;

use crate::config::SiteSpec;
use crate::handoff::{Handoff, PoolTargets};
use crate::http::access_log;
use crate::http::clock::Clock;
use crate::http::service::{
    LentConnection, LentHead, Outcome, Reply, RequestCtx, Route, Service, SiteRef,
};
use crate::http::{Request, Responder};
use crate::proxy::{Dispatch, ProxyRoute, ProxyTarget};
use crate::routing::hosts::HostTable;
use crate::routing::limits::{Accounts, ThreadLimits};
use crate::routing::rules::Rules;
use crate::routing::GroupRoutes;
use app::{App, AppHandler};
use chain::Chain;
use std::cell::Cell;
use std::rc::Rc;

struct Site {
    /// Its name, for its spans (`[server.tracing]`).
    name: Rc<str>,
    apps: Vec<App>,
    /// Whether its https bindings take their certificates from the store (espalier orders
    /// them when `[server.acme]` is set).
    from_store: bool,
    /// With `[server.acme]`, on such a site: the folder the master writes HTTP-01 key
    /// authorizations into (see [`ThreadService::with_acme`]).
    acme: Option<Rc<std::path::Path>>,
    /// Its request chain: the steps it configures, in the one order (see [`chain`]).
    chain: Chain,
    /// This thread's writer of the site's access log.
    log: Option<access_log::AccessLog>,
    /// Which pool serves the site, when one serves all of it: a hand-off is then decided by
    /// host alone, without choosing the app.
    whole: Whole,
    /// Its response chains (error pages, `headers`, HSTS over TLS, its response keys), by
    /// scheme.
    response: app::Chains,
    /// Whether an app path asks who the client is (`auth`): only then is a lent request's
    /// path looked at for it.
    app_auth: bool,
    /// With `redirect_to_https`: the https port its cleartext requests are sent to.
    to_https: Option<u16>,
    /// Its redirect and rewrite rules, compiled for this thread.
    rules: Rules,
    /// The codings it offers (`None`: it compresses nothing).
    codings: Option<Rc<[crate::compress::Coding]>>,
    /// Its `allow`/`deny` lists and those of its paths (`None`: everyone may come in).
    access: Option<Box<SiteAccess>>,
    /// Proxies whose `X-Forwarded-For` names the client, for its lists and limits.
    trusted: Box<[crate::routing::access::Cidr]>,
    /// Its `limit`, as this thread counts it (`None`: unlimited; see [`ThreadService::with_limits`]).
    limits: Option<ThreadLimits>,
    /// This thread's figures of it, with `metrics` (see [`ThreadService::with_meters`]).
    meter: Option<std::sync::Arc<crate::http::meters::SiteMeter>>,
    /// The largest body its requests may carry: its `max_body_size`, else the server's (see
    /// [`ThreadService::with_body_default`]).
    max_body: Option<u64>,
}

impl Site {
    /// Site `s` as a thread of `pool` serves it: `routes` its ways to forwarded paths' servers,
    /// `target_of` the hand-off target of each other pool by name, `identity` the thread's
    /// name in the log.
    fn new(
        pool: &str,
        s: &SiteSpec,
        routes: &ProxyRoutes,
        target_of: &std::collections::HashMap<&str, usize>,
        identity: &str,
    ) -> Site {
        // Checked by the config; a failure here would be a bug, said once.
        let pages = app::error_pages(s, identity);
        let mut apps: Vec<App> = s
            .apps
            .iter()
            .map(|a| App {
                path: a.path.trim_end_matches('/').to_string(),
                handler: AppHandler::new(pool, s, a, routes, target_of),
                response: (!a.headers.is_empty() || a.response != Default::default())
                    .then(|| app::response_chains(s, Some(a), &pages)),
                access: (!a.access.is_empty()).then(|| a.access.clone()),
                auth: a.auth.clone().map(crate::routing::auth::ThreadAuth::new),
                asks: (a.auth_request.as_ref())
                    .map(|spec| verified::Asks::of(spec, &routes.upstreams, &routes.verifiers)),
                max_body: a.max_body_size,
            })
            .collect();
        // Longest prefix first.
        apps.sort_by_key(|a| std::cmp::Reverse(a.path.len()));
        // The master opened every log once at start (a log it cannot open stops
        // `serve` with the reason); a later failure costs the lines, not the site.
        // A site is logged by the pools that serve it, each its own requests.
        let serves = s.served_by(pool);
        let log = s.access_log.as_ref().filter(|_| serves).and_then(|spec| {
            access_log::AccessLog::open(spec)
                .map_err(|e| {
                    crate::os::log(
                        identity,
                        format!("cannot open access log {}: {e}", spec.path.display()),
                    )
                })
                .ok()
        });
        // Static paths without a pool go with the connection: they never split a site,
        // and a site whose other paths are another pool's goes to it whole.
        let mut named = s.apps.iter().filter(|a| !a.any_pool());
        let first = named.next().map(|a| a.pool.as_str());
        let one_pool = named.all(|a| Some(a.pool.as_str()) == first);
        let whole = match first {
            None => Whole::Mine,
            Some(p) if one_pool && p == pool => Whole::Mine,
            Some(p) if one_pool => Whole::Other(target_of.get(p).copied()),
            Some(_) => Whole::Split,
        };
        let to_https = s
            .bindings
            .iter()
            .find(|b| b.tls)
            .filter(|_| s.redirect_to_https)
            .map(|b| b.addr.port());
        let per_path = apps.iter().any(|a| a.access.is_some());
        let access = (per_path || !s.access.is_empty()).then(|| {
            Box::new(SiteAccess {
                list: s.access.clone(),
                action: s.deny_action,
                per_path,
            })
        });
        let mut site = Site {
            name: s.name.as_str().into(),
            from_store: s.tls.is_none() && s.bindings.iter().any(|b| b.tls),
            acme: None,
            chain: Chain::default(),
            access,
            trusted: s.trusted_proxies.as_slice().into(),
            limits: None,
            meter: None,
            max_body: s.max_body_size,
            app_auth: apps.iter().any(|a| a.auth.is_some() || a.asks.is_some()),
            apps,
            log,
            whole,
            response: app::response_chains(s, None, &pages),
            to_https,
            codings: (!s.compress.is_empty()).then(|| s.compress.as_slice().into()),
            rules: Rules::new(&s.rules).unwrap_or_else(|(k, why)| {
                crate::os::log(
                    identity,
                    format!("site {}: rule {k} ignored: {why}", s.name),
                );
                Rules::default()
            }),
        };
        site.chain = Chain::of(|step| site.configures(step));
        site
    }
}

/// Who may reach a site, as a thread checks it.
struct SiteAccess {
    list: crate::routing::access::AccessList,
    action: crate::routing::access::DenyAction,
    /// Some path has lists of its own: the path is looked at.
    per_path: bool,
}

/// Whether one pool serves every app of a site.
#[derive(Clone, Copy)]
enum Whole {
    /// This thread's pool.
    Mine,
    /// Another pool (its index in the hand-off targets, if any).
    Other(Option<usize>),
    /// Its apps are in several pools: the path decides.
    Split,
}

/// A listener group as a thread routes on it.
struct Group {
    addr: std::net::SocketAddr,
    hosts: HostTable,
    /// The one site when the address has nothing but a default site.
    only: Option<usize>,
    /// Whether another pool serves some of its sites' apps (only then is a request's
    /// route checked for a hand-off).
    shared: bool,
    /// Where this thread serves none of the address's sites (it is the dispatcher's): the
    /// site whose pool an h2c connection goes to — the default site's, else the first's.
    h2c_site: Option<usize>,
    /// Behind the dispatcher (its hosts are this pool's alone): the hand-off target of the
    /// dispatcher, where a request for any other host goes (see `GroupRoutes::dispatched`).
    dispatcher: Option<usize>,
    proxy_protocol: bool,
    /// The peers that send the header; empty: every peer.
    proxy_protocol_from: Vec<crate::routing::access::Cidr>,
    tls: bool,
}

/// Everything one worker thread needs to answer requests.
pub struct ThreadService {
    sites: Vec<Site>,
    groups: Vec<Group>,
    /// Per other pool this thread may hand connections to: its threads, nearest first.
    handoff: Vec<std::rc::Rc<PoolTargets>>,
    clock: Rc<Clock>,
    /// `<pool>/<index>/cpu<N>`, shown by the dynamic page.
    identity: String,
    served: Cell<u64>,
    /// This thread's way to its pool's application, for its counters.
    route: Option<Rc<ProxyRoute>>,
    /// Whether any site logs its requests: only then does the engine measure them.
    logging: bool,
    /// Per group: its TLS acceptor on an https address (see [`Self::with_tls`]).
    tls: Vec<Option<tokio_rustls::TlsAcceptor>>,
    /// By group: with `[server.acme] on_demand`, its handshakes held for a certificate.
    held: Vec<Option<crate::tls::Held>>,
    /// Which HTTPS/1.1 connections go to the kernel's TLS after the handshake.
    ktls: crate::os::ktls::KernelSupport,
    /// `[server.tracing]`: each request's trace, its spans (see `traced`).
    traced: Option<traced::Traced>,
}

impl ThreadService {
    /// The service of a thread of pool `pool`: `sites` are all the config's sites (routes
    /// name them by index); the apps of other pools are reached through `handoff`, by pool
    /// name.
    pub fn new(
        pool: &str,
        sites: &[std::sync::Arc<SiteSpec>],
        groups: Vec<GroupRoutes>,
        clock: Rc<Clock>,
        identity: String,
        routes: ProxyRoutes,
        handoff: Vec<Rc<PoolTargets>>,
    ) -> Self {
        let dispatcher = handoff
            .iter()
            .position(|t| t.pool() == crate::routing::DISPATCHER);
        let groups: Vec<Group> = groups
            .into_iter()
            .map(|g| {
                let hosts = HostTable::new(&g.hosts);
                let shared = g.dispatched
                    || g.hosts.iter().any(|(_, site)| {
                        sites
                            .get(*site)
                            .is_some_and(|s| s.apps.iter().any(|a| !a.answered_by(pool)))
                    });
                let serves_none = g.hosts.iter().all(|(_, site)| {
                    sites
                        .get(*site)
                        .is_none_or(|s| s.apps.iter().all(|a| !a.answered_by(pool)))
                });
                let h2c_site = serves_none
                    .then(|| hosts.site(None).or(g.hosts.first().map(|&(_, s)| s)))
                    .flatten();
                Group {
                    addr: g.addr,
                    h2c_site,
                    dispatcher: dispatcher.filter(|_| g.dispatched),
                    only: hosts.only_default(),
                    hosts,
                    shared,
                    proxy_protocol: g.proxy_protocol,
                    proxy_protocol_from: g.proxy_protocol_from.clone(),
                    tls: g.tls,
                }
            })
            .collect();
        // Other pools by name, looked up once per site (thousands on a hoster's port); behind
        // the dispatcher, a pool this thread has no target of is reached through it.
        let mut target_of: std::collections::HashMap<&str, usize> = handoff
            .iter()
            .enumerate()
            .map(|(k, t)| (t.pool(), k))
            .collect();
        if let Some(k) = dispatcher {
            for a in sites.iter().flat_map(|s| &s.apps) {
                target_of.entry(a.pool.as_str()).or_insert(k);
            }
        }
        let sites: Vec<Site> = sites
            .iter()
            .map(|s| Site::new(pool, s, &routes, &target_of, &identity))
            .collect();
        ThreadService {
            groups,
            handoff,
            clock,
            identity,
            served: Cell::new(0),
            route: routes.app,
            logging: sites.iter().any(|s: &Site| s.log.is_some()),
            sites,
            tls: Vec::new(),
            held: Vec::new(),
            ktls: crate::os::ktls::KernelSupport::NONE,
            traced: None,
        }
    }

    /// With `[server.acme]`: the sites whose certificates come from the store answer the
    /// HTTP-01 requests of the orders under way from `challenges` (their chains compiled again
    /// with the step).
    pub fn with_acme(mut self, challenges: Option<&std::path::Path>) -> Self {
        let Some(dir) = challenges else { return self };
        let dir: Rc<std::path::Path> = Rc::from(dir);
        for site in self.sites.iter_mut().filter(|s| s.from_store) {
            site.acme = Some(Rc::clone(&dir));
            site.chain = Chain::of(|step| site.configures(step));
        }
        self
    }

    /// The TLS configurations of its groups (`None` for cleartext ones), built by the worker
    /// and shared by its threads.
    pub fn with_tls(
        mut self,
        configs: &[Option<(
            std::sync::Arc<rustls::ServerConfig>,
            Option<crate::tls::Held>,
        )>],
        ktls: crate::os::ktls::KernelSupport,
    ) -> Self {
        self.ktls = ktls;
        self.tls = configs
            .iter()
            .map(|c| {
                c.as_ref()
                    .map(|(c, _)| tokio_rustls::TlsAcceptor::from(c.clone()))
            })
            .collect();
        self.held = configs
            .iter()
            .map(|c| c.as_ref().and_then(|(_, held)| held.clone()))
            .collect();
        self
    }

    /// The accounts of the sites' `limit`s (by site index; `None` for an unlimited site),
    /// made by the worker and shared by its threads.
    pub fn with_limits(mut self, accounts: &[Option<std::sync::Arc<Accounts>>]) -> Self {
        for (site, accounts) in self.sites.iter_mut().zip(accounts) {
            site.limits = accounts.clone().map(ThreadLimits::new);
            site.chain = Chain::of(|step| site.configures(step));
        }
        self
    }

    /// The server's `max_body_size`, for the sites without one of their own.
    pub fn with_body_default(mut self, max: u64) -> Self {
        for site in &mut self.sites {
            site.max_body.get_or_insert(max);
        }
        self
    }

    /// This thread's meters of the sites with `metrics` (by site index), which the worker's
    /// main thread adds up for the master.
    pub fn with_meters(
        mut self,
        meters: &[Option<std::sync::Arc<crate::http::meters::SiteMeter>>],
    ) -> Self {
        for (site, meter) in self.sites.iter_mut().zip(meters) {
            site.meter = meter.clone();
        }
        self.logging = self
            .sites
            .iter()
            .any(|s| s.log.is_some() || s.meter.is_some());
        self
    }

    /// With `[server.tracing]`: traces and spans, the exporter's task on this thread.
    pub fn with_tracing(
        mut self,
        spec: Option<&crate::config::tracing::TracingSpec>,
        pool: &str,
    ) -> Self {
        self.traced = spec.map(|spec| traced::Traced::start(spec, pool, &self.identity));
        self
    }

    /// Writes every log's buffer (the thread's heartbeat, and its last act).
    pub fn flush_logs(&self) {
        for log in self.sites.iter().filter_map(|s| s.log.as_ref()) {
            log.flush();
        }
    }

    /// Requests answered by this thread so far.
    pub fn served(&self) -> u64 {
        self.served.get()
    }

    /// Requests this thread forwarded to an app process on another node (none of its own
    /// node's was ready).
    pub fn remote_forwards(&self) -> u64 {
        self.route.as_ref().map_or(0, |r| r.remote.get())
    }

    /// The site of `req` on `group` (by its host, unless the address has one site only).
    fn site_of(&self, group: usize, req: &Request<'_>) -> Option<SiteRef> {
        let g = self.groups.get(group)?;
        let site = g.only.or_else(|| g.hosts.site(req.host()))?;
        Some(SiteRef(site as u32))
    }

    /// The site `site` names, if any.
    fn site(&self, site: SiteRef) -> Option<&Site> {
        self.sites.get(site.0 as usize)
    }
}
