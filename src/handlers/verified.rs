//! The sign-in step by another service (`auth = { request }`) as a worker thread runs it:
//! the route marks a request of a path with a verifier (its context's `ask`), the engine
//! awaits [`asked`] before the request is answered or lent — on HTTP/1.1,
//! HTTP/2 and HTTP/3 alike — and the verdict becomes the request's way on: the same route
//! with the verifier's identity fields for the app, or an answer here (the verifier's
//! refusal, or 503 when it cannot say).
//!
//! Owns: a path's [`Asks`] on this thread and the verdict's mapping onto the route. Must not
//! touch: the exchange (`crate::proxy::verify`) or the step's data
//! (`crate::routing::auth_request`).

use crate::http::ask::Question;
use crate::http::service::{Decided, RequestCtx, Route};
use crate::proxy::verify::{Verdict, Verifier};
use crate::proxy::ProxyTarget;
use crate::routing::auth_request::AuthRequestSpec;
use crate::routing::rules::RuleOutcome;
use std::rc::Rc;

/// A path's verifier as this thread reaches it.
pub(super) enum Asks {
    Verifier(Rc<Verifier>),
    /// Its group is not among this worker's (a path it does not answer): its requests fail
    /// closed, never through unasked.
    Unreachable,
}

/// A thread's verifiers by their settings.
pub type Verifiers = std::collections::HashMap<AuthRequestSpec, Rc<Verifier>>;

impl Asks {
    /// The path's verifier on a thread whose upstream groups are `routes`: one per setting
    /// and thread, so that its remembered let-ins and its logged cause are the thread's,
    /// not each path's.
    pub(super) fn of(
        spec: &AuthRequestSpec,
        upstreams: &std::collections::HashMap<String, Rc<crate::proxy::ProxyRoute>>,
        verifiers: &std::cell::RefCell<Verifiers>,
    ) -> Asks {
        let Some(route) = upstreams.get(&spec.group) else {
            return Asks::Unreachable;
        };
        let mut made = verifiers.borrow_mut();
        let verifier = made
            .entry(spec.clone())
            .or_insert_with(|| Rc::new(Verifier::new(Rc::clone(route), spec.clone())));
        Asks::Verifier(Rc::clone(verifier))
    }
}

/// The request step: a request of a path that `asks` is marked to be asked (the engine asks
/// it, see [`crate::http::ask`]); `Err` with 503 where the verifier cannot be reached from
/// here.
pub(super) fn mark(asks: Option<&Asks>, ctx: &mut RequestCtx) -> Result<(), RuleOutcome> {
    match asks {
        None => Ok(()),
        Some(Asks::Verifier(v)) => {
            ctx.ask = Some(Rc::clone(v.spec()));
            Ok(())
        }
        Some(Asks::Unreachable) => Err(RuleOutcome::Answer {
            status: 503,
            body: String::new(),
        }),
    }
}

/// Asks the verifier of `route`'s path (`asks`, its path's) about `question`: the route on,
/// or an answer here.
pub(super) async fn asked(
    asks: Option<&Asks>,
    question: Question,
    route: Route<ProxyTarget>,
) -> Route<ProxyTarget> {
    let (target, mut ctx) = match route {
        Route::Here(ctx) => (None, ctx),
        Route::Lend(target, ctx) => (Some(target), ctx),
        other => return other,
    };
    ctx.ask = None;
    let verdict = match asks {
        Some(Asks::Verifier(v)) => v.ask(&question).await,
        _ => Verdict::Failed,
    };
    let answer = match verdict {
        Verdict::Let(granted) => {
            ctx.granted = granted;
            return match target {
                Some(target) => Route::Lend(target, ctx),
                None => Route::Here(ctx),
            };
        }
        Verdict::Refused {
            status,
            fields,
            body,
        } => Decided::Answer(Rc::new(RuleOutcome::Passed {
            status,
            fields,
            body,
        })),
        Verdict::Failed => Decided::Status(503),
    };
    // Refused: its slot of the client's limit is given back now, as for a step's answer.
    ctx.held = None;
    ctx.decided = answer;
    Route::Here(ctx)
}
