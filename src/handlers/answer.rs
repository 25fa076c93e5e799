//! A request's answer here, as one worker thread writes it from what its request chain
//! decided (see `chain`): a handler's (static files, the built-in pages, a front
//! controller's files), a redirect, a rule's fixed answer or an error — then the response
//! steps of espalier's own answers: the site's error page for its status, and its field
//! edits over it.
//!
//! Owns: [`ThreadService`]'s `respond` and `answer`, and the redirects' form. Must not
//! touch: where the request goes (`chain` decided it; nothing here decides again) or the
//! service's data (the parent's).

use super::app::{App, AppHandler};
use super::{cpu, dynamic, ThreadService};
use crate::http::response_chain::Whose;
use crate::http::service::{Decided, Reply, RequestCtx};
use crate::http::{Request, Responder};
use crate::routing::rules::RuleOutcome;

impl ThreadService {
    /// Answers a request as its context decided into `resp`, then runs the response steps
    /// over it: error page, then field edits.
    pub(super) fn respond(
        &self,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        let mark = resp.mark();
        resp.index_fields(ctx.response.is_some());
        let reply = self.answer_decided(ctx, req, resp);
        // espalier's own error text gives way to the site's page for the status; the site's
        // and path's fields (HSTS over TLS) go into whatever it answered.
        resp.response_steps(mark, ctx.response.as_deref(), Whose::Own);
        reply
    }

    /// The answer the chain decided, before the response steps.
    fn answer_decided(
        &self,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        match &ctx.decided {
            // No site of this address has that name and none is its default: 421, the
            // status RFC 9110 gives a request sent to a server that does not serve it.
            Decided::NoSite => resp.error(421),
            Decided::Status(status) => resp.error(*status),
            Decided::Answer(outcome) => return answer_outcome(outcome, resp),
            Decided::App { app, normal } => {
                let site = ctx.site.and_then(|id| self.site(id));
                let Some(app) = site.and_then(|s| s.apps.get(*app)) else {
                    resp.error(500);
                    return Reply::Done;
                };
                // A rewritten request is answered as its new target.
                let retargeted = ctx.rewrite.as_deref().map(|t| req.retargeted(t));
                let req = retargeted.as_ref().unwrap_or(req);
                let path = normal.as_deref().unwrap_or(req.path.as_bytes());
                return self.answer(app, path, req, resp);
            }
        }
        Reply::Done
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
            // A file under the root, the front controller's (the route lent every script and
            // answered every status it decided).
            AppHandler::FastCgi(_, _, _, Some(files)) | AppHandler::Proxy(_, _, Some(files)) => {
                files.serve(req, path, resp, &self.clock)
            }
            // Reached only when the route was not taken whole (see `chain`).
            AppHandler::FastCgi(_, _, _, None)
            | AppHandler::Proxy(_, _, None)
            | AppHandler::Unreachable => {
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

/// A step's answer (a rule's, a refused, limited or unsigned client's); a refusal is none.
fn answer_outcome(outcome: &RuleOutcome, resp: &mut Responder<'_>) -> Reply {
    match outcome {
        RuleOutcome::Redirect { status, location } => redirect(resp, *status, location),
        RuleOutcome::Answer { status, body } if body.is_empty() => resp.error(*status),
        RuleOutcome::Answer { status, body } => {
            resp.simple(*status, "text/plain; charset=utf-8", body.as_bytes())
        }
        RuleOutcome::Limited {
            status,
            retry_after,
        } => limited(resp, *status, *retry_after),
        RuleOutcome::Unauthorized { realm } => {
            resp.status(401)
                .header(
                    "WWW-Authenticate",
                    &format!("Basic realm=\"{realm}\", charset=\"UTF-8\""),
                )
                .header("Content-Type", "text/plain; charset=utf-8")
                .body(b"401 Unauthorized\n");
        }
        RuleOutcome::Passed {
            status,
            fields,
            body,
        } => {
            let r = resp.status(*status);
            for (name, value) in fields {
                if let Ok(value) = std::str::from_utf8(value) {
                    r.header(name, value);
                }
            }
            r.body(body);
        }
        // Not an answer: the chain routed the rewritten target (none reaches here).
        RuleOutcome::Refuse | RuleOutcome::Rewrite(_) => return Reply::Refuse,
    }
    Reply::Done
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
