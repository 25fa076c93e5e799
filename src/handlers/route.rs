//! A site's request chain as one worker thread runs it (see `chain`; the order, and why, is
//! [`RequestStep::ORDER`]'s): once per request, by `route` — for HTTP/1.1 and HTTP/2, for a
//! request answered here and one lent to an app alike. What it decides
//! goes into the request's context ([`Decided`], the rewrite, the held limit slot, the
//! signed-in user); the answer and the lent request's head read it and never decide again.
//!
//! Owns: [`ThreadService`]'s `decide`, which steps a site configures, the route (app, normal-form path, a
//! FastCGI path's script or file, another pool's path handed off), and each step's glue to
//! its data — the rules' [`Rules`](crate::routing::rules), the access lists', the limits'
//! and the sign-ins' code live beside their data in `crate::routing`. Must not touch: the
//! answers (see `answer`) or the service's data (the parent's).

use super::app::{App, AppHandler};
use super::front::{self, Front};
use super::{static_files, Site, ThreadService, Whole};
use crate::config::chain::RequestStep;
use crate::handoff::Handoff;
use crate::http::service::{Decided, RequestCtx, Route, Service, SiteRef};
use crate::http::Request;
use crate::proxy::ProxyTarget;
use crate::routing::access::{self, DenyAction};
use crate::routing::auth;
use crate::routing::limits::{Held, Verdict};
use crate::routing::rules::{RuleOutcome, Seen};
use crate::routing::under_prefix;
use std::borrow::Cow;
use std::rc::Rc;

impl Site {
    /// Whether the site has the data `step` acts with.
    pub(super) fn configures(&self, step: RequestStep) -> bool {
        match step {
            RequestStep::AcmeChallenge => self.acme.is_some(),
            RequestStep::Rules => !self.rules.is_empty(),
            RequestStep::ToHttps => self.to_https.is_some(),
            RequestStep::Access => self.access.is_some(),
            RequestStep::Limit => self.limits.is_some(),
            RequestStep::Auth => self.app_auth,
            RequestStep::Route | RequestStep::Answer => true,
        }
    }
}

/// Where the route sends a request within its site.
enum Way {
    /// Answered here, by its app's handler.
    Here,
    /// Lent to the pool's application.
    Lend(ProxyTarget),
}

impl ThreadService {
    /// Runs the request chain of `req`'s site, received on `group`, once: where it goes,
    /// with the context it carries there.
    pub(super) fn decide(
        &self,
        group: usize,
        req: &Request<'_>,
        may_hand_off: bool,
    ) -> Route<ProxyTarget> {
        let site = self.site_of(group, req);
        let Some(s) = site.and_then(|id| self.site(id)) else {
            // Another pool's host, behind the dispatcher.
            if let Some(handoff) = self.hand_off_elsewhere(group).filter(|_| may_hand_off) {
                return Route::HandOff(handoff);
            }
            return Route::Here(RequestCtx::default());
        };
        let tls = self.groups.get(group).is_some_and(|g| g.tls);
        let here = |decided: Decided, rewrite: Option<Rc<str>>| {
            Route::Here(self.context(site, s, None, tls, decided, rewrite))
        };
        let (normal, rewrite) = match self.before_route(s, req, tls) {
            Ok(before) => before,
            Err(outcome) => return here(Decided::Answer(Rc::new(outcome)), None),
        };
        // The route: from here on every step sees the rewritten target.
        let retargeted = rewrite.as_deref().map(|t| req.retargeted(t));
        let req = retargeted.as_ref().unwrap_or(req);
        if may_hand_off && self.shared(group) {
            if let Whole::Other(k) = s.whole {
                if let Some(handoff) = k.and_then(|k| self.handoff_to(group, k)) {
                    return Route::HandOff(handoff);
                }
            }
        }
        let path = match normal.filter(|_| rewrite.is_none()) {
            Some(path) => path,
            // Apps are chosen on the normalized path (`/%61pi/x` and `/a/../api/x` are under
            // `/api`), as nginx chooses locations: a spelling must not pick another app.
            None => match static_files::normal_form(req.path) {
                Ok(path) => path,
                Err(status) => return here(Decided::Status(status), rewrite.clone()),
            },
        };
        let Some(k) = s.apps.iter().position(|a| under_prefix(&path, &a.path)) else {
            return here(Decided::Status(404), rewrite.clone());
        };
        let app = &s.apps[k];
        let way = match self.way(group, app, req, &path, may_hand_off, tls) {
            Ok(way) => way,
            Err(Ok(handoff)) => return Route::HandOff(handoff),
            Err(Err(status)) => return here(Decided::Status(status), rewrite.clone()),
        };
        let normal = match path {
            Cow::Borrowed(_) => None,
            Cow::Owned(path) => Some(path.into()),
        };
        let decided = Decided::App { app: k, normal };
        let mut ctx = self.context(site, s, Some(app), tls, decided, rewrite.clone());
        for step in s.chain.after.iter() {
            let admitted = match step {
                RequestStep::Access => self.access(s, app, req),
                // Lent, it stays in flight: its slot of the client's limit is held with it.
                RequestStep::Limit => self
                    .limited(s, req, matches!(way, Way::Lend(_)))
                    .map(|held| ctx.held = held.map(Rc::new)),
                RequestStep::Auth => self
                    .signed_in(tls, app, req)
                    .map(|user| ctx.user = user)
                    .and_then(|()| super::verified::mark(app.asks.as_ref(), &mut ctx)),
                _ => Ok(()),
            };
            if let Err(outcome) = admitted {
                ctx.held = None;
                ctx.decided = Decided::Answer(Rc::new(outcome));
                return Route::Here(ctx);
            }
        }
        match way {
            Way::Here => Route::Here(ctx),
            Way::Lend(target) => {
                self.served.set(self.served.get() + 1);
                Route::Lend(target, ctx)
            }
        }
    }

    /// The steps before the route (rules, https): the path in normal form when a step
    /// computed it, and the target a rule rewrote the request to; `Err` with a step's answer.
    #[allow(clippy::type_complexity)]
    fn before_route<'p>(
        &self,
        s: &Site,
        req: &Request<'p>,
        tls: bool,
    ) -> Result<(Option<Cow<'p, [u8]>>, Option<Rc<str>>), RuleOutcome> {
        let (mut normal, mut rewrite) = (None, None);
        for step in s.chain.before.iter() {
            match step {
                RequestStep::AcmeChallenge => {
                    if let Some(answer) = s.acme.as_deref().and_then(|d| acme_answer(d, req.path)) {
                        return Err(answer);
                    }
                }
                RequestStep::Rules => match self.rules(s, req) {
                    (_, Some(RuleOutcome::Rewrite(target))) => rewrite = Some(target.into()),
                    (path, None) => normal = path,
                    (_, Some(outcome)) => return Err(outcome),
                },
                RequestStep::ToHttps => {
                    if let (Some(port), false) = (s.to_https, tls) {
                        return Err(RuleOutcome::Redirect {
                            status: 308,
                            location: https_location(req, port),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok((normal, rewrite))
    }

    /// How `app`'s handler takes `req` (on `path`, its normal form): `Err` with a hand-off to
    /// the pool that serves it, or the status that answers it.
    fn way(
        &self,
        group: usize,
        app: &App,
        req: &Request<'_>,
        path: &[u8],
        may_hand_off: bool,
        tls: bool,
    ) -> Result<Way, Result<Handoff, u16>> {
        Ok(match &app.handler {
            AppHandler::Elsewhere(k) => {
                if may_hand_off && self.shared(group) {
                    if let Some(handoff) = k.and_then(|k| self.handoff_to(group, k)) {
                        return Err(Ok(handoff));
                    }
                }
                // Over TLS a connection belongs to the pool its handshake's name chose, and
                // an HTTP/2 one (h2c on a cleartext address) to the pool that took it, its
                // streams together: a request naming another pool's site or path came to the
                // wrong connection (RFC 9110 §15.5.20).
                if req.http2 || tls {
                    return Err(Err(421));
                }
                Way::Here
            }
            AppHandler::Proxy(route, uses, files) => {
                if files
                    .as_ref()
                    .is_some_and(|f| front::is_file(f, req.path, path))
                {
                    Way::Here
                } else {
                    Way::Lend(ProxyTarget::Http(Rc::clone(route), *uses))
                }
            }
            AppHandler::FastCgi(route, uses, scripts, files) => {
                match front::fastcgi(scripts, files.as_ref(), req.path, path) {
                    Front::Run(script) => {
                        Way::Lend(ProxyTarget::FastCgi(Rc::clone(route), *uses, script))
                    }
                    Front::Files => Way::Here,
                    Front::Answer(status) => return Err(Err(status)),
                }
            }
            _ => Way::Here,
        })
    }

    /// The hand-off of a connection on `group` to the pool of hand-off target `k`.
    /// Behind the dispatcher, a request for a host this pool does not serve: back to the
    /// dispatcher, which knows every host of the address.
    pub(super) fn hand_off_elsewhere(&self, group: usize) -> Option<Handoff> {
        let k = self.groups.get(group)?.dispatcher?;
        self.handoff_to(group, k)
    }

    pub(super) fn handoff_to(&self, group: usize, k: usize) -> Option<Handoff> {
        Some(Handoff {
            targets: Rc::clone(self.handoff.get(k)?),
            addr: self.groups.get(group)?.addr,
            hops: 0,
            client: None,
        })
    }

    /// The context a request of `s` (numbered `site`) carries: its decision, and its site's
    /// (or `app`'s) edits, pages and codings.
    fn context(
        &self,
        site: Option<SiteRef>,
        s: &Site,
        app: Option<&App>,
        tls: bool,
        decided: Decided,
        rewrite: Option<Rc<str>>,
    ) -> RequestCtx {
        let chains = app.and_then(|a| a.response.as_ref()).unwrap_or(&s.response);
        RequestCtx {
            site,
            logged: s.log.is_some() || s.meter.is_some(),
            response: chains[usize::from(tls)].clone(),
            decided,
            rewrite,
            codings: s.codings.clone(),
            held: None,
            user: None,
            ask: None,
            granted: None,
            trace: None,
            max_body: app.and_then(|a| a.max_body).or(s.max_body),
        }
    }

    /// The rules step: what the site's rules make of `req`, with its path in normal form
    /// (for the route to reuse). A path that is not in normal form is left to the route,
    /// which refuses it.
    fn rules<'p>(
        &self,
        s: &Site,
        req: &Request<'p>,
    ) -> (Option<Cow<'p, [u8]>>, Option<RuleOutcome>) {
        let Ok(path) = static_files::normal_form(req.path) else {
            return (None, None);
        };
        let outcome = s.rules.apply(&Seen {
            host: if s.rules.need_host() {
                req.host()
            } else {
                None
            },
            method: req.method_text,
            path: &path,
            raw_path: req.path,
            raw_query: req.query,
        });
        (Some(path), outcome)
    }

    /// The access step: `Err` with what a client the site's (or `app`'s) lists refuse gets.
    /// The client is the connection's (or its PROXY protocol header's), or the one a trusted
    /// proxy named in `X-Forwarded-For`.
    fn access(&self, s: &Site, app: &App, req: &Request<'_>) -> Result<(), RuleOutcome> {
        let Some(a) = s.access.as_deref() else {
            return Ok(());
        };
        let permitted = match client_of(s, req) {
            // No address to check (none should reach here): only an allow list decides.
            None => a.list.allow.is_empty(),
            Some(ip) => {
                a.list.permits(ip)
                    && (!a.per_path || app.access.as_ref().is_none_or(|l| l.permits(ip)))
            }
        };
        if permitted {
            return Ok(());
        }
        Err(match a.action {
            DenyAction::Status(status) => RuleOutcome::Answer {
                status,
                body: String::new(),
            },
            DenyAction::Close => RuleOutcome::Refuse,
        })
    }

    /// The limit step: whether the site's `limit` lets `req`'s client in now — `Ok` with its
    /// in-flight slot when `hold` (the request is lent and stays in flight) and the site
    /// limits that; `Err` with what a limited client gets.
    fn limited(
        &self,
        s: &Site,
        req: &Request<'_>,
        hold: bool,
    ) -> Result<Option<Held>, RuleOutcome> {
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
                Err(match action {
                    DenyAction::Close => RuleOutcome::Refuse,
                    DenyAction::Status(status) => RuleOutcome::Limited {
                        status,
                        retry_after,
                    },
                })
            }
        }
    }

    /// The sign-in step: whether `req` may have `app`'s path — `Ok` with the user it signed
    /// in as (`None` for a path without `auth`); `Err` with its answer: 401 asking to sign
    /// in, or 403 on cleartext for a path whose passwords must not travel in the clear.
    fn signed_in(
        &self,
        tls: bool,
        app: &App,
        req: &Request<'_>,
    ) -> Result<Option<Rc<str>>, RuleOutcome> {
        let Some(auth) = &app.auth else {
            return Ok(None);
        };
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

/// The same URL over https on `port` (a `redirect_to_https` site's cleartext request).
fn https_location(req: &Request<'_>, port: u16) -> String {
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
    location
}

/// The key authorization an ACME directory's HTTP-01 request for `path` asks for, when it
/// names a token of an order under way (a file the master wrote into `dir`); `None` for any
/// other request, which goes on through the site.
fn acme_answer(dir: &std::path::Path, path: &str) -> Option<RuleOutcome> {
    let token = path.strip_prefix("/.well-known/acme-challenge/")?;
    // A token is base64url (RFC 8555 §8.3): nothing else is looked up, no path escapes.
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if token.is_empty() || token.len() > 256 || !token.bytes().all(word) {
        return None;
    }
    let body = std::fs::read_to_string(dir.join(token)).ok()?;
    Some(RuleOutcome::Answer { status: 200, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_token_of_an_order_under_way_is_answered_and_nothing_else_is_looked_up() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok-EN_1"), "tok-EN_1.thumb").unwrap();
        std::fs::write(dir.path().join("secret"), "not a token's").unwrap();
        let at = |path: &str| acme_answer(dir.path(), path);
        assert!(matches!(
            at("/.well-known/acme-challenge/tok-EN_1"),
            Some(RuleOutcome::Answer { status: 200, body }) if body == "tok-EN_1.thumb"
        ));
        // Unknown tokens, and anything that is no token, go on through the site.
        let long = format!("/.well-known/acme-challenge/{}", "a".repeat(257));
        for path in [
            "/.well-known/acme-challenge/unknown",
            "/.well-known/acme-challenge/",
            "/.well-known/acme-challenge/../secret",
            "/.well-known/acme-challenge/%2e%2e%2fsecret",
            "/.well-known/acme-challenge/tok-EN_1/x",
            "/.well-known/acme-challenge/tok-EN_1?x",
            "/other/tok-EN_1",
            long.as_str(),
        ] {
            assert!(at(path).is_none(), "{path}");
        }
    }
}
