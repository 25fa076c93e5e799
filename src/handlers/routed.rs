//! Where a request goes within its site, as one worker thread decides it: the site's rules
//! first, then the app by the path in normal form, and from there another pool (a
//! hand-off), the pool's application (lent), or an answer here.
//!
//! Owns: those decisions ([`ThreadService`]'s `routed`, `hand_off`, `proxy_target` and
//! `rule_for`). Must not touch: the answers (see `answer`) or the service's data (the
//! parent's).

use super::app::{App, AppHandler};
use super::front::{self, Front};
use super::{static_files, Routed, Site, ThreadService, Whole};
use crate::handoff::Handoff;
use crate::http::service::SiteRef;
use crate::http::Request;
use crate::proxy::ProxyTarget;
use crate::routing::access::{self, DenyAction};
use crate::routing::auth;
use crate::routing::limits::{Held, Verdict};
use crate::routing::rules::{RuleOutcome, Seen};
use crate::routing::under_prefix;
use std::rc::Rc;

impl ThreadService {
    /// Where `req`, of `site` (`None`: an unknown host), goes within its site.
    pub(super) fn routed<'p>(
        &self,
        group: usize,
        site: Option<SiteRef>,
        req: &Request<'p>,
    ) -> Routed<'_, 'p> {
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
    pub(super) fn hand_off(
        &self,
        group: usize,
        site: Option<SiteRef>,
        req: &Request<'_>,
    ) -> Option<Handoff> {
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
    pub(super) fn proxy_target(
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

    /// What a client the site's (or the path's) lists refuse gets; `None` when it may come
    /// in. The client is the connection's (or its PROXY protocol header's), or the one a
    /// trusted proxy named in `X-Forwarded-For`.
    pub(super) fn refused(
        &self,
        group: usize,
        site: Option<SiteRef>,
        req: &Request<'_>,
    ) -> Option<DenyAction> {
        let s = self.site(site?)?;
        let a = s.access.as_deref()?;
        let Some(ip) = client_of(s, req) else {
            // No address to check (none should reach here): only an allow list decides.
            return (!a.list.allow.is_empty()).then_some(a.action);
        };
        let path_permits = || match self.routed(group, site, req) {
            Routed::App(app, _) => app.access.as_ref().is_none_or(|l| l.permits(ip)),
            _ => true,
        };
        let permitted = a.list.permits(ip) && (!a.per_path || path_permits());
        (!permitted).then_some(a.action)
    }

    /// Whether the site's `limit` lets `req`'s client in now: `Ok` with its in-flight slot
    /// when `hold` (the request is lent and stays in flight) and the site limits that; `Err`
    /// with what a limited client gets.
    pub(super) fn limited(
        &self,
        site: Option<SiteRef>,
        req: &Request<'_>,
        hold: bool,
    ) -> Result<Option<Held>, RuleOutcome> {
        let Some(s) = site.and_then(|id| self.site(id)) else {
            return Ok(None);
        };
        let (Some(limits), Some(ip)) = (&s.limits, client_of(s, req)) else {
            return Ok(None);
        };
        // The precise time, not the thread's coarse clock: threads' ticks are up to 100 ms
        // apart, more than a fast rate's spacing.
        match limits.admit(ip, std::time::Instant::now(), hold) {
            Verdict::Admit(held) => Ok(held),
            Verdict::Refuse {
                action,
                retry_after,
                table_full,
            } => {
                if let (true, Some(meter)) = (table_full, &s.meter) {
                    meter.count_limit_table_full();
                }
                match action {
                    DenyAction::Close => Err(RuleOutcome::Refuse),
                    DenyAction::Status(status) => Err(RuleOutcome::Limited {
                        status,
                        retry_after,
                    }),
                }
            }
        }
    }

    /// Whether `req` may have `app`'s path: `Ok` with the user it signed in as (`None` for a
    /// path without `auth`); `Err` with its answer — 401 asking to sign in, or 403 on
    /// cleartext for a path whose passwords must not travel in the clear.
    pub(super) fn signed_in(
        &self,
        group: usize,
        app: &App,
        req: &Request<'_>,
    ) -> Result<Option<Rc<str>>, RuleOutcome> {
        let Some(auth) = &app.auth else {
            return Ok(None);
        };
        let tls = self.groups.get(group).is_some_and(|g| g.tls);
        if !tls && !auth.cleartext() {
            return Err(RuleOutcome::Answer {
                status: 403,
                body: "403 Forbidden: this path asks for a password, so it is served over HTTPS only\n".into(),
            });
        }
        let now = std::time::Instant::now();
        match auth.check(req.header("authorization"), req.client_ip, now) {
            auth::Verdict::User(user) => Ok(Some(user)),
            auth::Verdict::Challenge => Err(RuleOutcome::Unauthorized {
                realm: auth.realm().to_string(),
            }),
            auth::Verdict::Refused {
                status,
                retry_after,
            } => Err(RuleOutcome::Limited {
                status,
                retry_after,
            }),
        }
    }

    /// [`Self::signed_in`] for a request about to be lent (its site has a path with `auth`).
    pub(super) fn lent_user(
        &self,
        group: usize,
        site: Option<SiteRef>,
        req: &Request<'_>,
    ) -> Result<Option<Rc<str>>, RuleOutcome> {
        if !site
            .and_then(|id| self.site(id))
            .is_some_and(|s| s.app_auth)
        {
            return Ok(None);
        }
        match self.routed(group, site, req) {
            Routed::App(app, _) => self.signed_in(group, app, req),
            _ => Ok(None),
        }
    }

    /// What the site's rules make of `req`, when it has rules and one matches (a path that
    /// is not in normal form is left to routing, which refuses it).
    pub(super) fn rule_for(
        &self,
        site: Option<SiteRef>,
        req: &Request<'_>,
    ) -> Option<Rc<RuleOutcome>> {
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
}

/// The client `req` is from as site `s` believes it: the connection's (or PROXY header's)
/// address, or the one its trusted proxies named.
fn client_of(s: &Site, req: &Request<'_>) -> Option<std::net::IpAddr> {
    let peer = req.client_ip?;
    if s.trusted.is_empty() {
        return Some(peer);
    }
    Some(access::client(
        peer,
        req.header_values("x-forwarded-for"),
        &s.trusted,
    ))
}
