//! A routed request's answer, as one worker thread writes it: a handler's (static files,
//! the built-in pages, a front controller's files), a redirect, a rule's fixed answer or an
//! error — then the site's error page for its status and its field edits over it.
//!
//! Owns: [`ThreadService`]'s `respond`, `answer_routed` and `answer`, and the redirects'
//! form. Must not touch: where the request goes (`routed`) or the service's data (the
//! parent's).

use super::app::{App, AppHandler};
use super::front::{self, Front};
use super::{cpu, dynamic, Routed, ThreadService};
use crate::http::service::{Reply, RequestCtx};
use crate::http::{Request, Responder};

impl ThreadService {
    /// Answers a routed request into `resp`, with the field edits its context carries.
    pub(super) fn respond(
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
    pub(super) fn answer_routed(
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
            Routed::Challenge(realm) => {
                resp.status(401)
                    .header(
                        "WWW-Authenticate",
                        &format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
                    )
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .body(b"401 Unauthorized\n");
                return Reply::Done;
            }
            Routed::Limited(status, retry_after) => {
                limited(resp, status, retry_after);
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

    /// The app's own answer.
    pub(super) fn answer(
        &self,
        app: &App,
        path: &[u8],
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        match &app.handler {
            AppHandler::Static(files) => files.serve(req, path, resp, &self.clock),
            AppHandler::Dynamic => {
                let ctx = dynamic::PageContext {
                    worker: &self.identity,
                    served: self.served.get(),
                    unix_seconds: self.clock.unix_seconds(),
                };
                dynamic::respond(req, &ctx, resp);
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
        .header("Location", &crate::http::local_location(location))
        .header("Content-Type", "text/plain; charset=utf-8")
        .body(text.as_bytes());
}

/// A client over its site's limit: the status, with `Retry-After` where it means something
/// (429, 503) — the site's page for the status replaces the text, keeping that field.
fn limited(resp: &mut Responder<'_>, status: u16, retry_after: u32) {
    let kept = if matches!(status, 429 | 503) {
        format!("Retry-After: {retry_after}\r\n")
    } else {
        String::new()
    };
    resp.error_keeping(status, kept.as_bytes());
}
