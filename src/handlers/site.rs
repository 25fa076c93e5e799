//! One site as a worker thread serves it ([`Site`]: its paths' handlers, its request
//! chain, its response chains, its log), and the thread's sites made at their first
//! request ([`Sites`]).
//!
//! Owns: compiling a site for a thread. Must not touch: routing a request to it (`route`)
//! or answering it (`answer`).
//!
//! Why a site is made at its first request: the dispatcher of a hoster's port is told every
//! site of the port (in outline), 10,000 of them, and each of its threads made them all
//! before serving, at every start — and it starts again at every change of the port's
//! hosts. Made when first asked for, a thread starts in the time of its tables, and
//! compiles only the sites its visitors name. A pool's worker, with its few sites, makes
//! them at its first requests instead of at its start: the same work.

use super::app::{self, App, AppHandler, ProxyRoutes};
use super::chain::Chain;
use super::verified;
use crate::config::SiteSpec;
use crate::http::access_log;
use crate::routing::limits::{Accounts, ThreadLimits};
use crate::routing::rules::Rules;
use std::cell::OnceCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

pub(super) struct Site {
    /// Its name, for its spans (`[server.tracing]`).
    pub(super) name: Rc<str>,
    pub(super) apps: Vec<App>,
    /// Whether its https bindings take their certificates from the store (espalier orders
    /// them when `[server.acme]` is set).
    pub(super) from_store: bool,
    /// With `[server.acme]`, on such a site: the folder the master writes HTTP-01 key
    /// authorizations into (see [`super::ThreadService::with_acme`]).
    pub(super) acme: Option<Rc<std::path::Path>>,
    /// Its request chain: the steps it configures, in the one order (see [`super::chain`]).
    pub(super) chain: Chain,
    /// This thread's writer of the site's access log.
    pub(super) log: Option<access_log::AccessLog>,
    /// Which pool serves the site, when one serves all of it: a hand-off is then decided by
    /// host alone, without choosing the app.
    pub(super) whole: Whole,
    /// Its response chains (error pages, `headers`, HSTS over TLS, its response keys), by
    /// scheme.
    pub(super) response: app::Chains,
    /// Whether an app path asks who the client is (`auth`): only then is a lent request's
    /// path looked at for it.
    pub(super) app_auth: bool,
    /// With `redirect_to_https`: the https port its cleartext requests are sent to.
    pub(super) to_https: Option<u16>,
    /// Its redirect and rewrite rules, compiled for this thread.
    pub(super) rules: Rules,
    /// The codings it offers (`None`: it compresses nothing).
    pub(super) codings: Option<Rc<[crate::compress::Coding]>>,
    /// Its `allow`/`deny` lists and those of its paths (`None`: everyone may come in).
    pub(super) access: Option<Box<SiteAccess>>,
    /// Proxies whose `X-Forwarded-For` names the client, for its lists and limits.
    pub(super) trusted: Box<[crate::routing::access::Cidr]>,
    /// Its `limit`, as this thread counts it (`None`: unlimited; see [`super::ThreadService::with_limits`]).
    pub(super) limits: Option<ThreadLimits>,
    /// This thread's figures of it, with `metrics` (see [`super::ThreadService::with_meters`]).
    pub(super) meter: Option<std::sync::Arc<crate::http::meters::SiteMeter>>,
    /// The largest body its requests may carry: its `max_body_size`, else the server's (see
    /// [`super::ThreadService::with_body_default`]).
    pub(super) max_body: Option<u64>,
}

impl Site {
    /// Site `s` as a thread of `pool` serves it: `routes` its ways to forwarded paths' servers,
    /// `target_of` the hand-off target of each other pool by name, `identity` the thread's
    /// name in the log.
    pub(super) fn new(
        pool: &str,
        s: &SiteSpec,
        routes: &ProxyRoutes,
        target_of: &dyn Fn(&str) -> Option<usize>,
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
            Some(p) if one_pool => Whole::Other(target_of(p)),
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
pub(super) struct SiteAccess {
    pub(super) list: crate::routing::access::AccessList,
    pub(super) action: crate::routing::access::DenyAction,
    /// Some path has lists of its own: the path is looked at.
    pub(super) per_path: bool,
}

/// Whether one pool serves every app of a site.
#[derive(Clone, Copy)]
pub(super) enum Whole {
    /// This thread's pool.
    Mine,
    /// Another pool (its index in the hand-off targets, if any).
    Other(Option<usize>),
    /// Its apps are in several pools: the path decides.
    Split,
}

/// A thread's sites, each made at its first request from what the thread was given (see the
/// module doc): the specs, the ways to apps and upstreams, the other pools' hand-off targets,
/// and what the worker adds to every site (the ACME folder, the limits' accounts, the body
/// default, the meters).
pub(super) struct Sites {
    made: Vec<OnceCell<Box<Site>>>,
    specs: Vec<Arc<SiteSpec>>,
    pool: String,
    identity: String,
    routes: ProxyRoutes,
    /// Each other pool's hand-off target by name.
    target_of: HashMap<String, usize>,
    /// Behind the dispatcher: its target, which reaches every pool this thread has none of.
    dispatcher: Option<usize>,
    pub(super) acme: Option<Rc<std::path::Path>>,
    pub(super) limits: Vec<Option<Arc<Accounts>>>,
    pub(super) body_default: Option<u64>,
    pub(super) meters: Vec<Option<Arc<crate::http::meters::SiteMeter>>>,
}

impl Sites {
    /// `specs` as a thread of `pool` serves them; `targets` names each other pool's hand-off
    /// target, `dispatcher` is the dispatcher's (if the thread has one).
    pub(super) fn new(
        pool: &str,
        specs: &[Arc<SiteSpec>],
        (routes, identity): (ProxyRoutes, &str),
        targets: impl Iterator<Item = (String, usize)>,
        dispatcher: Option<usize>,
    ) -> Self {
        Sites {
            made: specs.iter().map(|_| OnceCell::new()).collect(),
            specs: specs.to_vec(),
            pool: pool.to_string(),
            identity: identity.to_string(),
            routes,
            target_of: targets.collect(),
            dispatcher,
            acme: None,
            limits: Vec::new(),
            body_default: None,
            meters: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.made.len()
    }

    /// Site `i`, made now if this is its first request.
    pub(super) fn get(&self, i: usize) -> Option<&Site> {
        let cell = self.made.get(i)?;
        Some(cell.get_or_init(|| Box::new(self.make(i))))
    }

    /// The sites made so far.
    pub(super) fn made(&self) -> impl Iterator<Item = &Site> {
        self.made.iter().filter_map(|c| c.get().map(|s| &**s))
    }

    /// Whether some site of this thread's pool keeps an access log, or has meters.
    pub(super) fn logging(&self) -> bool {
        let logs = (self.specs.iter()).any(|s| s.access_log.is_some() && s.served_by(&self.pool));
        logs || self.meters.iter().any(Option::is_some)
    }

    fn make(&self, i: usize) -> Site {
        let spec = &self.specs[i];
        let target_of = |pool: &str| self.target_of.get(pool).copied().or(self.dispatcher);
        let mut site = Site::new(&self.pool, spec, &self.routes, &target_of, &self.identity);
        if site.from_store {
            site.acme = self.acme.clone();
        }
        site.limits = (self.limits.get(i).cloned().flatten()).map(ThreadLimits::new);
        site.meter = self.meters.get(i).cloned().flatten();
        if let Some(max) = self.body_default {
            site.max_body.get_or_insert(max);
        }
        site.chain = Chain::of(|step| site.configures(step));
        site
    }
}
