//! Request handlers and the router in front of them.
//!
//! The service behind the engine: routing and the handlers.
//!
//! Owns: routing a request to a site (by listener group and `Host`, with
//! [`crate::routing::hosts`]) and to an app (by path prefix), and the context the request
//! carries from there (its site, its log, its HSTS line); the answer: here by a handler
//! ([`static_files`], [`dynamic`], [`cpu`]), by an application process (the connection lent
//! to [`crate::proxy`]'s dispatch), or by another pool on a shared address (the connection
//! handed there, see [`crate::handoff`]). One [`ThreadService`] per worker thread; nothing in
//! it is shared with another thread.
//! Must not touch: sockets or the protocols' framing (that is [`crate::http`]; what it knows
//! of a protocol is that an HTTP/2 or TLS connection cannot change pools, so a request of
//! another pool there is misdirected: 421). Not pure: the static handler does blocking
//! `stat`/`open`/`read` on the thread's event loop, as nginx does without thread pools (they
//! wait on the disk or page cache only, never on a peer).

mod app;
pub mod cpu;
pub mod dynamic;
mod front;
pub mod mime;
pub mod static_files;

use crate::config::SiteSpec;
use crate::handoff::{Handoff, PoolTargets};
use crate::http::access_log;
use crate::http::clock::Clock;
use crate::http::error_pages::ErrorPages;
use crate::http::service::{
    LentConnection, LentHead, Outcome, Reply, RequestCtx, Route, Service, SiteRef,
};
use crate::http::{Request, Responder};
use crate::proxy::{Dispatch, ProxyRoute, ProxyTarget};
use crate::routing::hosts::HostTable;
use crate::routing::rules::{RuleOutcome, Rules, Seen};
use crate::routing::{under_prefix, GroupRoutes};
use app::{App, AppHandler};
use front::Front;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

struct Site {
    apps: Vec<App>,
    /// This thread's writer of the site's access log.
    log: Option<access_log::AccessLog>,
    /// Which pool serves the site, when one serves all of it: a hand-off is then decided by
    /// host alone, without choosing the app.
    whole: Whole,
    /// Its field edits (`headers`, and HSTS over TLS), by scheme.
    fields: app::Edits,
    /// Whether an app path has edits of its own: only then is the path looked at to choose.
    app_fields: bool,
    /// With `redirect_to_https`: the https port its cleartext requests are sent to.
    to_https: Option<u16>,
    /// Its redirect and rewrite rules, compiled for this thread.
    rules: Rules,
    /// Its own error pages, read at the thread's start.
    pages: Option<Rc<ErrorPages>>,
    /// The codings it offers (`None`: it compresses nothing).
    codings: Option<Rc<[crate::compress::Coding]>>,
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
    proxy_protocol: bool,
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
    page: RefCell<Vec<u8>>,
    /// Whether any app forwards to an application: only then does a request's head go
    /// through [`Service::proxy_route`]'s routing before the engine's own.
    proxies: bool,
    /// This thread's way to its pool's application, for its counters.
    route: Option<Rc<ProxyRoute>>,
    /// Whether any site logs its requests: only then does the engine measure them.
    logging: bool,
    /// Per group: its TLS acceptor on an https address (see [`Self::with_tls`]).
    tls: Vec<Option<tokio_rustls::TlsAcceptor>>,
    /// Which HTTPS/1.1 connections go to the kernel's TLS after the handshake.
    ktls: crate::os::ktls::KernelSupport,
}

impl ThreadService {
    /// The service of a thread of pool `pool`: `sites` are all the config's sites (routes
    /// name them by index); the apps of other pools are reached through `handoff`, by pool
    /// name.
    pub fn new(
        pool: &str,
        sites: &[SiteSpec],
        groups: Vec<GroupRoutes>,
        clock: Rc<Clock>,
        identity: String,
        proxy: Option<Rc<ProxyRoute>>,
        handoff: Vec<(String, Rc<PoolTargets>)>,
    ) -> Self {
        let groups: Vec<Group> = groups
            .into_iter()
            .map(|g| {
                let hosts = HostTable::new(&g.hosts);
                let shared = g.hosts.iter().any(|(_, site)| {
                    sites
                        .get(*site)
                        .is_some_and(|s| s.apps.iter().any(|a| !a.answered_by(pool)))
                });
                Group {
                    addr: g.addr,
                    only: hosts.only_default(),
                    hosts,
                    shared,
                    proxy_protocol: g.proxy_protocol,
                    tls: g.tls,
                }
            })
            .collect();
        // Other pools by name, looked up once per site (thousands on a hoster's port).
        let target_of: std::collections::HashMap<&str, usize> = handoff
            .iter()
            .enumerate()
            .map(|(k, (p, _))| (p.as_str(), k))
            .collect();
        let sites: Vec<Site> = sites
            .iter()
            .map(|s| {
                let mut apps: Vec<App> = s
                    .apps
                    .iter()
                    .map(|a| App {
                        path: a.path.trim_end_matches('/').to_string(),
                        handler: AppHandler::new(pool, s, a, proxy.as_ref(), &target_of),
                        fields: (!a.headers.is_empty()).then(|| app::field_edits(s, Some(a))),
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
                                &identity,
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
                Site {
                    app_fields: apps.iter().any(|a| a.fields.is_some()),
                    apps,
                    log,
                    whole,
                    fields: app::field_edits(s, None),
                    to_https,
                    // Checked by the config; a failure here would be a bug, said once.
                    pages: app::error_pages(s, &identity),
                    codings: (!s.compress.is_empty()).then(|| s.compress.as_slice().into()),
                    rules: Rules::new(&s.rules).unwrap_or_else(|(k, why)| {
                        crate::os::log(
                            &identity,
                            format!("site {}: rule {k} ignored: {why}", s.name),
                        );
                        Rules::default()
                    }),
                }
            })
            .collect();
        ThreadService {
            groups,
            handoff: handoff.into_iter().map(|(_, t)| t).collect(),
            clock,
            identity,
            served: Cell::new(0),
            page: RefCell::new(Vec::with_capacity(2048)),
            proxies: proxy.is_some(),
            route: proxy,
            logging: sites.iter().any(|s: &Site| s.log.is_some()),
            sites,
            tls: Vec::new(),
            ktls: crate::os::ktls::KernelSupport::NONE,
        }
    }

    /// The TLS configurations of its groups (`None` for cleartext ones), built by the worker
    /// and shared by its threads.
    pub fn with_tls(
        mut self,
        configs: &[Option<std::sync::Arc<rustls::ServerConfig>>],
        ktls: crate::os::ktls::KernelSupport,
    ) -> Self {
        self.ktls = ktls;
        self.tls = configs
            .iter()
            .map(|c| c.clone().map(tokio_rustls::TlsAcceptor::from))
            .collect();
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

    /// The context `req` carries to its answer and log line, routed to `site` on `group`.
    fn context(&self, group: usize, site: Option<SiteRef>, req: &Request<'_>) -> RequestCtx {
        let Some(s) = site.and_then(|id| self.site(id)) else {
            return RequestCtx::default();
        };
        let tls = usize::from(self.groups.get(group).is_some_and(|g| g.tls));
        let mut fields = &s.fields;
        if s.app_fields {
            if let Routed::App(app, _) = self.routed(group, site, req) {
                fields = app.fields.as_ref().unwrap_or(fields);
            }
        }
        RequestCtx {
            site,
            logged: s.log.is_some(),
            fields: fields[tls].clone(),
            rule: None,
            pages: s.pages.clone(),
            codings: s.codings.clone(),
        }
    }

    /// What the site's rules make of `req`, when it has rules and one matches (a path that
    /// is not in normal form is left to routing, which refuses it).
    fn rule_for(&self, site: Option<SiteRef>, req: &Request<'_>) -> Option<Rc<RuleOutcome>> {
        let s = self.site(site?)?;
        if s.rules.is_empty() {
            return None;
        }
        let path = static_files::normal_form(req.path).ok()?;
        s.rules
            .apply(&Seen {
                host: if s.rules.need_host() {
                    req.host()
                } else {
                    None
                },
                method: req.method_text,
                path: &path,
                raw_path: req.path,
                raw_query: req.query,
            })
            .map(Rc::new)
    }

    /// The site `site` names, if any.
    fn site(&self, site: SiteRef) -> Option<&Site> {
        self.sites.get(site.0 as usize)
    }
}

/// Where a request goes: an app, with the normalized path it was chosen on; or an answer.
enum Routed<'s, 'p> {
    App(&'s App, std::borrow::Cow<'p, [u8]>),
    Answer(u16),
    UnknownHost,
    /// A cleartext request of a site with `redirect_to_https`: 308 to this https port.
    ToHttps(u16),
    /// A site rule's redirect: this status to this location.
    Redirect(u16, &'s str),
    /// A site rule's fixed answer: this status and text (empty: the status's own).
    Fixed(u16, &'s str),
}

impl ThreadService {
    /// Where `req`, of `site` (`None`: an unknown host), goes within its site.
    fn routed<'p>(&self, group: usize, site: Option<SiteRef>, req: &Request<'p>) -> Routed<'_, 'p> {
        let Some(site) = site.and_then(|id| self.site(id)) else {
            return Routed::UnknownHost;
        };
        if let Some(port) = site.to_https {
            if !self.groups.get(group).is_some_and(|g| g.tls) {
                return Routed::ToHttps(port);
            }
        }
        // Apps are chosen on the normalized path (`/%61pi/x` and `/a/../api/x` are under
        // `/api`), as nginx chooses locations: a spelling must not pick another app.
        let path = match static_files::normal_form(req.path) {
            Ok(p) => p,
            Err(status) => return Routed::Answer(status),
        };
        match site.apps.iter().find(|a| under_prefix(&path, &a.path)) {
            Some(app) => Routed::App(app, path),
            None => Routed::Answer(404),
        }
    }

    /// On a shared address: the pool `req` (of `site`) belongs to, when it is another's.
    fn hand_off(&self, group: usize, site: Option<SiteRef>, req: &Request<'_>) -> Option<Handoff> {
        let k = match self.site(site?)?.whole {
            Whole::Mine => return None,
            Whole::Other(k) => k?,
            Whole::Split => {
                let Routed::App(app, _) = self.routed(group, site, req) else {
                    return None;
                };
                let AppHandler::Elsewhere(Some(k)) = app.handler else {
                    return None;
                };
                k
            }
        };
        Some(Handoff {
            targets: Rc::clone(self.handoff.get(k)?),
            addr: self.groups.get(group)?.addr,
            hops: 0,
            client: None,
        })
    }

    /// The application `req` goes to, when its app forwards to one (a FastCGI app only for a
    /// script it may run: any other path is answered here, see `answer`).
    fn proxy_target(
        &self,
        group: usize,
        site: Option<SiteRef>,
        req: &Request<'_>,
    ) -> Option<ProxyTarget> {
        let Routed::App(app, path) = self.routed(group, site, req) else {
            return None;
        };
        match &app.handler {
            AppHandler::Proxy(route, files) => {
                if files
                    .as_ref()
                    .is_some_and(|f| front::is_file(f, req.path, &path))
                {
                    return None;
                }
                Some(ProxyTarget::Http(Rc::clone(route)))
            }
            AppHandler::FastCgi(route, scripts, files) => {
                match front::fastcgi(scripts, files.as_ref(), req.path, &path) {
                    Front::Run(script) => Some(ProxyTarget::FastCgi(Rc::clone(route), script)),
                    Front::Files | Front::Answer(_) => None,
                }
            }
            _ => None,
        }
    }

    /// Answers a routed request into `resp`, with the field edits its context carries.
    fn respond(
        &self,
        group: usize,
        routed: Routed<'_, '_>,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        let mark = resp.mark();
        let reply = self.answer_routed(group, routed, req, resp);
        // espalier's own error text gives way to the site's page for the status.
        if let Some(pages) = &ctx.pages {
            resp.brand_error(mark, pages);
        }
        // The site's and path's fields (HSTS over TLS) go into whatever it answered.
        if let Some(edits) = &ctx.fields {
            resp.edit_fields(mark, edits);
        }
        reply
    }

    /// The answer of a routed request, before the site's edits.
    fn answer_routed(
        &self,
        group: usize,
        routed: Routed<'_, '_>,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        let (app, path) = match routed {
            Routed::App(app, path) => (app, path),
            Routed::UnknownHost => {
                // No site of this address has that name and none is its default: 421, the
                // status RFC 9110 gives a request sent to a server that does not serve it.
                resp.error(421);
                return Reply::Done;
            }
            Routed::Answer(status) => {
                resp.error(status);
                return Reply::Done;
            }
            Routed::ToHttps(port) => {
                redirect_to_https(req, port, resp);
                return Reply::Done;
            }
            Routed::Redirect(status, location) => {
                redirect(resp, status, location);
                return Reply::Done;
            }
            Routed::Fixed(status, "") => {
                resp.error(status);
                return Reply::Done;
            }
            Routed::Fixed(status, body) => {
                resp.simple(status, "text/plain; charset=utf-8", body.as_bytes());
                return Reply::Done;
            }
        };
        // Over TLS a connection belongs to the pool its handshake's name chose, and an
        // HTTP/2 one (h2c on a cleartext address) to the pool that took it, its streams
        // together: a request naming another pool's site or path came to the wrong
        // connection (RFC 9110 §15.5.20).
        if matches!(app.handler, AppHandler::Elsewhere(_))
            && (req.http2 || self.groups.get(group).is_some_and(|g| g.tls))
        {
            resp.error(421);
            return Reply::Done;
        }
        self.answer(app, &path, req, resp)
    }
}

impl Service for ThreadService {
    type Target = ProxyTarget;
    type Lent = Dispatch;

    fn route(&self, group: usize, req: &Request<'_>, may_hand_off: bool) -> Route<ProxyTarget> {
        let site = self.site_of(group, req);
        // The site's rules first: a redirect or a fixed answer is answered here whoever
        // serves the path; a rewrite is routed as its new target (another pool handed the
        // connection applies the same rules to the same request).
        let rule = self.rule_for(site, req);
        let rewritten;
        let req = match rule.as_deref() {
            None => req,
            Some(RuleOutcome::Rewrite(target)) => {
                rewritten = rewritten_request(req, target);
                &rewritten
            }
            Some(_) => {
                let mut ctx = self.context(group, site, req);
                ctx.rule = rule;
                return Route::Here(ctx);
            }
        };
        if may_hand_off && self.shared(group) {
            if let Some(handoff) = self.hand_off(group, site, req) {
                return Route::HandOff(handoff);
            }
        }
        let mut ctx = self.context(group, site, req);
        ctx.rule = rule.clone();
        if self.proxies {
            if let Some(target) = self.proxy_target(group, site, req) {
                self.served.set(self.served.get() + 1);
                return Route::Lend(target, ctx);
            }
        }
        Route::Here(ctx)
    }

    fn call(
        &self,
        group: usize,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        self.served.set(self.served.get() + 1);
        let rewritten;
        let (routed, req) = match ctx.rule.as_deref() {
            None => (self.routed(group, ctx.site, req), req),
            Some(RuleOutcome::Rewrite(target)) => {
                rewritten = rewritten_request(req, target);
                (self.routed(group, ctx.site, &rewritten), &rewritten)
            }
            Some(RuleOutcome::Redirect { status, location }) => {
                (Routed::Redirect(*status, location), req)
            }
            Some(RuleOutcome::Answer { status, body }) => (Routed::Fixed(*status, body), req),
        };
        self.respond(group, routed, ctx, req, resp)
    }

    fn needs_length(&self, target: &ProxyTarget) -> bool {
        target.needs_length()
    }

    fn prepare(
        &self,
        target: ProxyTarget,
        ctx: &RequestCtx,
        req: &Request<'_>,
        head: &LentHead<'_>,
    ) -> Dispatch {
        // A rewritten request goes to the app as its new target (the log keeps the original).
        let codings = ctx.codings.as_deref().unwrap_or_default();
        match ctx.rule.as_deref() {
            Some(RuleOutcome::Rewrite(t)) => {
                Dispatch::new(target, &rewritten_request(req, t), head, codings)
            }
            _ => Dispatch::new(target, req, head, codings),
        }
    }

    async fn lend<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        &self,
        lent: Dispatch,
        conn: LentConnection<'_, C>,
    ) -> Outcome {
        lent.run(conn).await
    }

    fn shared(&self, group: usize) -> bool {
        self.groups.get(group).is_some_and(|g| g.shared)
    }

    fn hand_off_name(&self, group: usize, name: Option<&str>) -> Option<Handoff> {
        let g = self.groups.get(group)?;
        let site = g.only.or_else(|| g.hosts.site(name))?;
        // The sites of an https address are each served by one pool (checked with the config).
        let Whole::Other(Some(k)) = self.sites.get(site)?.whole else {
            return None;
        };
        Some(Handoff {
            targets: Rc::clone(self.handoff.get(k)?),
            addr: g.addr,
            hops: 0,
            client: None,
        })
    }

    fn group_of(&self, addr: std::net::SocketAddr) -> Option<usize> {
        self.groups.iter().position(|g| g.addr == addr)
    }

    fn proxy_protocol(&self, group: usize) -> bool {
        self.groups.get(group).is_some_and(|g| g.proxy_protocol)
    }

    fn tls(&self, group: usize) -> Option<&tokio_rustls::TlsAcceptor> {
        self.tls.get(group)?.as_ref()
    }

    fn ktls(&self) -> crate::os::ktls::KernelSupport {
        self.ktls
    }

    fn logging(&self) -> bool {
        self.logging
    }

    fn log(&self, ctx: &RequestCtx, entry: &access_log::Entry<'_>) {
        let site = ctx.site.and_then(|s| self.site(s));
        if let Some(log) = site.and_then(|s| s.log.as_ref()) {
            log.record(entry, &self.clock, &self.identity);
        }
    }
}

/// `308 Permanent Redirect` to the same URL over https (the method and body are kept).
fn redirect_to_https(req: &Request<'_>, port: u16, resp: &mut Responder<'_>) {
    // The host matched one of the site's names (or it is the default site's, unnamed).
    let host = req.host().unwrap_or("localhost");
    let mut location = String::with_capacity(16 + host.len() + req.path.len() + req.query.len());
    location.push_str("https://");
    location.push_str(host);
    if port != 443 {
        location.push(':');
        location.push_str(itoa::Buffer::new().format(port));
    }
    location.push_str(req.path);
    if !req.query.is_empty() {
        location.push('?');
        location.push_str(req.query);
    }
    redirect(resp, 308, &location);
}

/// A redirect: `status` (3xx) to `location`, with a one-line text body.
fn redirect(resp: &mut Responder<'_>, status: u16, location: &str) {
    let text = format!("{status} {}\n", crate::http::reason(status));
    resp.status(status)
        .header("Location", location)
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(text.as_bytes());
}

/// `req` as a rule rewrote it: `target` is its new `path?query`.
fn rewritten_request<'r>(req: &Request<'r>, target: &'r str) -> Request<'r> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Request {
        path,
        query,
        ..*req
    }
}

impl ThreadService {
    /// The app's own answer.
    fn answer(&self, app: &App, path: &[u8], req: &Request<'_>, resp: &mut Responder<'_>) -> Reply {
        match &app.handler {
            AppHandler::Static(files) => files.serve(req, path, resp, &self.clock),
            AppHandler::Dynamic => {
                let ctx = dynamic::PageContext {
                    worker: &self.identity,
                    served: self.served.get(),
                    unix_seconds: self.clock.unix_seconds(),
                };
                dynamic::respond(req, &ctx, &mut self.page.borrow_mut(), resp);
                Reply::Done
            }
            AppHandler::Cpu => {
                cpu::respond(req.query, resp);
                Reply::Done
            }
            // What the front controller keeps here (`route` took every other request).
            AppHandler::FastCgi(_, scripts, files) => {
                match (
                    front::fastcgi(scripts, files.as_ref(), req.path, path),
                    files,
                ) {
                    (Front::Files, Some(files)) => files.serve(req, path, resp, &self.clock),
                    (Front::Answer(status), _) => {
                        resp.error(status);
                        Reply::Done
                    }
                    (Front::Run(_) | Front::Files, _) => {
                        resp.error(502);
                        Reply::Done
                    }
                }
            }
            // A file under the root, with `try_files` (`route` took every other request).
            AppHandler::Proxy(_, Some(files)) => files.serve(req, path, resp, &self.clock),
            // Reached only when the route was not taken whole (see `route`).
            AppHandler::Proxy(_, None) | AppHandler::Unreachable => {
                resp.error(502);
                Reply::Done
            }
            // Reached only when no thread of the app's pool took the connection.
            AppHandler::Elsewhere(_) => {
                resp.unavailable();
                Reply::Done
            }
        }
    }
}
