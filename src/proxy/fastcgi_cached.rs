//! `cache_responses` on a FastCGI pool: the same cache as an HTTP app's (`super::cached`,
//! the rules of `super::cache`), fed from CGI answers.
//!
//! - A request is looked up as the client asked it, through the client's side of a
//!   [`ForwardRequest`] ([`client_side`]: nothing of it goes to an app), so a hit is given by
//!   the very code that gives an HTTP app's kept answers.
//! - A CGI answer that may be kept is read to its last STDOUT record (within the entry
//!   bound, at the child's speed: the child is free at once) and kept as the HTTP answer it
//!   stands for ([`http_head`]: its status line, its fields but `Status`, and its length), then
//!   given from memory as a hit is. One longer than the bound goes on to the client as any.
//! - A stale answer's validators go to the child as the CGI variables of the conditional
//!   fields ([`ask_if_changed`]), in one more PARAMS record; its `Status: 304` renews the
//!   entry as an HTTP app's `304` does. `stale-if-error` stands in as for any app.
//! - Not done here: `stale-while-revalidate`'s refresh in the background — that request has
//!   no client, and FastCGI's exchange is this module's caller's; the child is asked (with
//!   the validators) in the client's time instead.
//!
//! Owns: that view and that keeping. Must not touch: the records' framing
//! (`super::fastcgi_records`) or the client head's steps (`super::head`).

use super::cache::{CacheRequest, Stored};
use super::cached;
use super::cgi::FastCgiRequest;
use super::fastcgi_records::read_record;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::upstream::Conn;
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
        head: Vec::new(),
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

/// The HTTP/1.1 head a CGI answer of `status` with `fields` stands for, its body `length`
/// long: how it is kept (the fields that framed it in CGI are the length's now).
pub(super) fn http_head<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    head.extend_from_slice(b" \r\n");
    let framing = ["status", "content-length", "transfer-encoding"];
    for (name, value) in fields {
        if framing.iter().any(|f| name.eq_ignore_ascii_case(f)) {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head
}

/// Reads the rest of the answer's STDOUT from `conn` onto `body` (what came with the CGI
/// head), record by record, to its end (`END_REQUEST`) within the store's entry bound and
/// `timeout` a record: whether all of it is there. `false` leaves what was read in `body`,
/// and `conn` at a record's start, for the relay to go on from.
pub(super) async fn read_whole(
    conn: &mut Conn,
    body: &mut Vec<u8>,
    route: &ProxyRoute,
    (timeout, who): (Duration, &Endpoint),
) -> bool {
    let Some(store) = route.cache.as_ref() else {
        return false;
    };
    let bound = store.entry_bound() as usize;
    while body.len() <= bound {
        let Ok(r) = read_record(conn, timeout).await else {
            return false;
        };
        match r.kind {
            super::cgi::STDOUT => body.extend_from_slice(&r.content),
            super::cgi::STDERR => super::fastcgi_records::log_stderr(who, &r.content),
            super::cgi::END_REQUEST => return true,
            _ => {}
        }
    }
    false
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

/// Keeps the whole answer (`head` from [`http_head`], `body`) for `view`'s request as
/// `keeping` says, and gives it to the client from memory as a hit is given.
pub(super) async fn keep_and_send<C: AsyncRead + AsyncWrite + Unpin>(
    (stream, body_timeout): (&mut C, Duration),
    (mut head, body, endpoint): (Vec<u8>, Vec<u8>, Endpoint),
    keeping: super::answer::Keeping,
    (view, route, own): (&ForwardRequest, &ProxyRoute, &OwnAnswers<'_>),
) -> Outcome {
    let (Some(store), Some(asked)) = (route.cache.as_ref(), view.cache.as_ref()) else {
        return Outcome::Close;
    };
    head.extend_from_slice(b"Content-Length: ");
    head.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
    let head_len = head.len();
    head.extend_from_slice(&body);
    let (keep, validators) = keeping;
    let raw = bytes::Bytes::from(head);
    let stored = Arc::new(Stored::new(raw, head_len, endpoint, keep, validators));
    store.put(asked, stored.clone());
    let said = CacheRequest::status(asked, true);
    let said = (crate::http::access_log::CacheSeen::Miss, said);
    cached::replay((stream, body_timeout), &stored, view, route, own, said).await
}
