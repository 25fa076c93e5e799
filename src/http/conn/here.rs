//! A whole request answered on the connection by the service (not lent), and its log line.
//!
//! Owns: that one call and its entry. Must not touch: the connection's state (the parent's).

use super::super::access_log::{Entry, Facts};
use super::super::service::{ConnEnv, Reply, RequestCtx, Service};
use super::super::{Request, Responder};

/// Answers a whole request routed here into `out`, and logs it when its site logs
/// (`timed`: the thread times requests, this one from then).
pub(super) fn answer_here<S: Service>(
    env: &ConnEnv<S>,
    group: usize,
    out: &mut Vec<u8>,
    ctx: &RequestCtx,
    request: &Request<'_>,
    keep: bool,
    timed: Option<Option<std::time::Instant>>,
) -> Reply {
    let answer_start = out.len();
    let reply = {
        let common = env.clock.common();
        let head_only = request.method == super::super::Method::Head;
        let mut resp = Responder::new(out, &common, keep, request.minor_version, head_only);
        env.service.call(group, ctx, request, &mut resp)
    };
    if let (Some(arrived), true) = (timed, ctx.logged) {
        let (file_len, answer) = match &reply {
            Reply::File(f) => (f.len, &out[answer_start..]),
            Reply::Done => (0, &out[answer_start..]),
            Reply::Refuse => (0, super::super::access_log::REFUSED),
        };
        let entry = Entry::answered(
            Facts::of(request),
            answer,
            file_len,
            arrived,
            request.client,
        );
        env.service.log(ctx, &entry);
    }
    reply
}
