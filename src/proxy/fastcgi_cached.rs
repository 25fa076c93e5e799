//! `cache_responses` on a FastCGI pool: the same cache as an HTTP app's (`super::cached`,
//! the rules of `super::cache`), fed from CGI answers.
//!
//! - A request is looked up as the client asked it, through the client's side of a
//!   [`ForwardRequest`] ([`client_side`]: nothing of it goes to an app), so a hit is given by
//!   the very code that gives an HTTP app's kept answers.
//! - A CGI answer that may be kept is read to its last STDOUT record (within the entry
//!   bound, at the child's speed: the child is free at once) and kept as the HTTP answer it
//!   stands for ([`super::cgi_answer::http_head`]: its status line, its fields but `Status`, and its length), then
//!   given from memory as a hit is. One longer than the bound goes on to the client as any.
//! - A stale answer's validators go to the child as the CGI variables of the conditional
//!   fields ([`ask_if_changed`]), in one more PARAMS record; its `Status: 304` renews the
//!   entry as an HTTP app's `304` does. `stale-if-error` stands in as for any app.
//! - `stale-while-revalidate`'s background refresh sends the child the request's records
//!   again ([`again`], `super::cache_refresh`), with the validators — where the client sent
//!   none of its own (a CGI variable cannot be taken out of the records); such a client is
//!   given the stale answer, and the next one starts the refresh.
//!
//! Owns: that view and that keeping. Must not touch: the records' framing
//! (`super::fastcgi_records`) or the client head's steps (`super::head`).

use super::cache::{CacheRequest, Stored};
use super::cached;
use super::cgi::FastCgiRequest;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::wire::OwnAnswers;
use super::Endpoint;
use crate::http::service::Outcome;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// The client's side of `req` as the response cache sees it (its view taken out of `req`):
/// `None` where the route keeps nothing or the cache has nothing to do with the request.
pub(super) fn client_side(req: &mut FastCgiRequest) -> Option<ForwardRequest> {
    let cache = req.cache.take()?;
    Some(ForwardRequest {
        head: super::forward_head::ForwardHead::none(),
        body: crate::http::Framing::None,
        retryable: false,
        head_only: req.head_only,
        upgrade: false,
        client_minor: req.client_minor,
        keep_alive: req.keep_alive,
        expect_continue: false,
        compress: req.compress,
        choose: Default::default(),
        trailers: false,
        cache: Some(cache),
        buffered: req.buffered,
    })
}

/// The request a background refresh of `view`'s kept answer sends the child (see
/// `super::cache_refresh`): `req`'s records, where the client sent no conditional fields of
/// its own — a CGI variable cannot be taken out of them, and the cache's would meet them.
pub(super) fn again(
    req: &FastCgiRequest,
    view: &ForwardRequest,
) -> Option<super::cache_refresh::Again> {
    let asked = view.cache.as_ref()?;
    let records = req.records.clone();
    (!asked.conditional()).then_some(super::cache_refresh::Again::FastCgi { records })
}

/// Asks the child whether the stale answer kept for `view`'s request changed, where it is
/// to ([`cached::Asking::confirmable`]): its validator goes as the CGI variable of the field
/// a conditional request would carry (`HTTP_IF_NONE_MATCH`, else `HTTP_IF_MODIFIED_SINCE`).
pub(super) fn ask_if_changed(
    req: FastCgiRequest,
    view: Option<&ForwardRequest>,
    asking: &mut cached::Asking,
) -> FastCgiRequest {
    let Some(asked) = view.and_then(|v| v.cache.as_ref()) else {
        return req;
    };
    match asking.confirmable(asked).map(Stored::validators) {
        Some((Some(etag), _)) => req.with_param(b"HTTP_IF_NONE_MATCH", etag),
        Some((None, Some(modified))) => {
            let since = httpdate::fmt_http_date(modified);
            req.with_param(b"HTTP_IF_MODIFIED_SINCE", since.as_bytes())
        }
        _ => req,
    }
}

/// Answers from the stale answer kept for `view`'s request instead of the child's answer
/// with `status` (`None`: its failure) where `stale-if-error` allows (see
/// [`cached::instead_of_app`]).
pub(super) async fn stale_instead<C: AsyncRead + AsyncWrite + Unpin>(
    to: (&mut C, Duration),
    status: Option<u16>,
    (asking, view, route, own): (
        &cached::Asking,
        Option<&ForwardRequest>,
        &ProxyRoute,
        &OwnAnswers<'_>,
    ),
) -> Option<Outcome> {
    cached::instead_of_app(to, status, asking, (view?, route, own)).await
}

/// Keeps the whole answer (`head` from [`super::cgi_answer::http_head`], `body`) for `view`'s request as
/// `keeping` says, and gives it to the client from memory as a hit is given.
pub(super) async fn keep_and_send<C: AsyncRead + AsyncWrite + Unpin>(
    (stream, body_timeout): (&mut C, Duration),
    (head, body, endpoint): (Vec<u8>, Vec<u8>, Endpoint),
    keeping: super::answer::Keeping,
    (view, route, own): (&ForwardRequest, &ProxyRoute, &OwnAnswers<'_>),
) -> Outcome {
    let (Some(store), Some(asked)) = (route.cache.as_ref(), view.cache.as_ref()) else {
        return Outcome::Close;
    };
    let stored = Arc::new(super::cgi_answer::stored((head, body, endpoint), keeping));
    store.put(asked, stored.clone());
    let said = CacheRequest::status(asked, true);
    let said = (crate::http::access_log::CacheSeen::Miss, said);
    cached::replay((stream, body_timeout), &stored, view, route, own, said).await
}
