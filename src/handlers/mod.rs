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
//! service's data; `serve` keeps the engine's contract ([`Service`]) with it, `site` makes
//! each site for the thread at its first request, `app` builds each path's handler, `front` decides which of a forwarded path's requests are files,
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
mod site;
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
use crate::routing::limits::Accounts;
use crate::routing::GroupRoutes;
use site::{Site, Sites, Whole};
use std::cell::Cell;
use std::rc::Rc;

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
    sites: Sites,
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
        let targets = (handoff.iter().enumerate()).map(|(k, t)| (t.pool().to_string(), k));
        let route = routes.app.clone();
        let sites = Sites::new(pool, sites, (routes, &identity), targets, dispatcher);
        ThreadService {
            groups,
            handoff,
            clock,
            identity,
            served: Cell::new(0),
            route,
            logging: sites.logging(),
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
        self.sites.acme = challenges.map(Rc::from);
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
        self.sites.limits = accounts.to_vec();
        self
    }

    /// The server's `max_body_size`, for the sites without one of their own.
    pub fn with_body_default(mut self, max: u64) -> Self {
        self.sites.body_default = Some(max);
        self
    }

    /// This thread's meters of the sites with `metrics` (by site index), which the worker's
    /// main thread adds up for the master.
    pub fn with_meters(
        mut self,
        meters: &[Option<std::sync::Arc<crate::http::meters::SiteMeter>>],
    ) -> Self {
        self.sites.meters = meters.to_vec();
        self.logging = self.sites.logging();
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
        for log in self.sites.made().filter_map(|s| s.log.as_ref()) {
            log.flush();
        }
    }

    /// Requests answered by this thread so far.
    pub fn served(&self) -> u64 {
        self.served.get()
    }

    /// Goes on counting from `before`, the service this one replaces on the thread (a
    /// dispatcher's new hosts): its figures stay the thread's.
    pub fn count_from(&self, before: &ThreadService) {
        self.served.set(before.served.get());
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
