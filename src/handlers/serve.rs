//! The engine's contract ([`Service`]) as a worker thread's service keeps it: routing
//! through the site's chain, answering here, lending to the app's dispatch, and the log.
//!
//! Owns: that glue, each method a call into the part that does it. Must not touch: the
//! parts themselves (`route`, `answer`, `verified`, the proxy's dispatch).

use super::*;

impl Service for ThreadService {
    type Target = ProxyTarget;
    type Lent = Dispatch;

    fn route(&self, group: usize, req: &Request<'_>, may_hand_off: bool) -> Route<ProxyTarget> {
        let mut route = self.decide(group, req, may_hand_off);
        if let Some(traced) = &self.traced {
            traced.begin(&mut route, req);
        }
        route
    }

    async fn ask(
        &self,
        question: crate::http::ask::Question,
        route: Route<ProxyTarget>,
    ) -> Route<ProxyTarget> {
        // The path the route chose: its verifier.
        let app = match route
            .ctx()
            .map(|c| (c.site.and_then(|id| self.site(id)), &c.decided))
        {
            Some((Some(s), crate::http::service::Decided::App { app, .. })) => s.apps.get(*app),
            _ => None,
        };
        verified::asked(app.and_then(|a| a.asks.as_ref()), question, route).await
    }

    fn call(
        &self,
        _group: usize,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        self.served.set(self.served.get() + 1);
        self.respond(ctx, req, resp)
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
        let signed_in;
        let head = match (&ctx.user, &ctx.granted, &ctx.trace) {
            (None, None, None) => head,
            (user, granted, trace) => {
                signed_in = LentHead {
                    remote_user: user.as_deref().or(head.remote_user),
                    granted: granted.as_deref(),
                    trace: trace.as_deref(),
                    ..*head
                };
                &signed_in
            }
        };
        match ctx.rewrite.as_deref() {
            Some(t) => Dispatch::new(target, &req.retargeted(t), head, codings),
            None => Dispatch::new(target, req, head, codings),
        }
    }

    async fn lend<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        &self,
        lent: Dispatch,
        conn: LentConnection<'_, C>,
    ) -> Outcome {
        lent.run(conn).await
    }

    fn streams(&self, lent: &Dispatch) -> bool {
        lent.streams()
    }

    async fn lend_stream(&self, lent: Dispatch, stream: crate::http::h2::LentStream<'_>) {
        lent.run_stream(stream).await
    }

    fn shared(&self, group: usize) -> bool {
        self.groups.get(group).is_some_and(|g| g.shared)
    }

    fn hand_off_name(&self, group: usize, name: Option<&str>) -> Option<Handoff> {
        let g = self.groups.get(group)?;
        // No site of this pool's (behind the dispatcher: another pool's name, or none).
        let Some(site) = g
            .only
            .or_else(|| g.hosts.site(name))
            .filter(|&s| s < self.sites.len())
        else {
            return self.hand_off_elsewhere(group);
        };
        // The sites of an https address are each served by one pool (checked with the config).
        let Whole::Other(Some(k)) = self.sites.get(site)?.whole else {
            return None;
        };
        self.handoff_to(group, k)
    }

    fn hand_off_h2c(&self, group: usize) -> Option<Handoff> {
        let site = self.groups.get(group)?.h2c_site?;
        let Whole::Other(Some(k)) = self.sites.get(site)?.whole else {
            return None;
        };
        self.handoff_to(group, k)
    }

    fn group_of(&self, addr: std::net::SocketAddr) -> Option<usize> {
        self.groups.iter().position(|g| g.addr == addr)
    }

    fn proxy_protocol(&self, group: usize, peer: Option<std::net::IpAddr>) -> bool {
        self.groups.get(group).is_some_and(|g| {
            g.proxy_protocol
                && (g.proxy_protocol_from.is_empty()
                    || peer.is_some_and(|ip| g.proxy_protocol_from.iter().any(|c| c.contains(ip))))
        })
    }

    fn tls(&self, group: usize) -> Option<&tokio_rustls::TlsAcceptor> {
        self.tls.get(group)?.as_ref()
    }

    fn held(&self, group: usize) -> Option<&crate::tls::Held> {
        self.held.get(group)?.as_ref()
    }

    fn ktls(&self) -> crate::os::ktls::KernelSupport {
        self.ktls
    }

    fn logging(&self) -> bool {
        self.logging || self.traced.is_some()
    }

    fn log(&self, ctx: &RequestCtx, entry: &access_log::Entry<'_>) {
        let Some(site) = ctx.site.and_then(|s| self.site(s)) else {
            return;
        };
        if let Some(meter) = &site.meter {
            meter.record(entry);
        }
        let entry = &access_log::Entry {
            trace: ctx.trace.as_deref(),
            ..*entry
        };
        if let Some(log) = &site.log {
            log.record(entry, &self.clock, &self.identity);
        }
        if let Some(traced) = &self.traced {
            let route = match &ctx.decided {
                crate::http::service::Decided::App { app, .. } => site.apps.get(*app),
                _ => None,
            };
            let route = route.map(|a| {
                if a.path.is_empty() {
                    "/"
                } else {
                    a.path.as_str()
                }
            });
            traced.record(ctx, entry, &site.name, route);
        }
    }
}
