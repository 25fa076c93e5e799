//! The forwarder's side of `cache_responses` (the rules and the stores are
//! [`super::cache`]'s): a request answered from a kept answer before any app is asked, and an
//! answer the app gave that may be kept read to its end first — within the entry bound, at
//! the app's speed, so that its process is free as with `buffer` — then kept and sent from
//! memory. Either way the answer goes through the same head and response steps as any of
//! the app's ([`super::answer::answer_head`]: the site's fields, error pages, compression),
//! with `Age` and `Cache-Status` (RFC 9211) said.
//!
//! Owns: [`answer`] (a hit — a stale one within `stale-while-revalidate` too, its refresh
//! started, see [`super::cache_refresh`] — or how the app is asked: [`Asking`]), a stale
//! answer's validators sent ([`ask_if_changed`]) and its use in the app's place
//! ([`instead_of_app`]), [`keep`], [`replay`] and [`send`] (an answer from memory), and the
//! `Cache-Status` line of an answer the app gave ([`mark`]). Must not touch: the app's
//! connections (the forwarder pools them; `super::answer_read` reads the whole answer) or
//! the rules of caching.

use super::answer::{answer_head, Relay};
use super::cache::{CacheRequest, Keep, Stored, Use, Validators};
use super::cache_refresh::Again;
use super::cache_store::{FillGuard, Filling, Lookup};
use super::head::{Then, ToClient};
use super::relay::BodyFraming;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::wire::{head_to_client, BodyKind, OwnAnswers};
use super::Endpoint;
use crate::features::head::ClientHead;
use crate::http::access_log::CacheSeen as Seen;
use crate::http::service::Outcome;
use bytes::Bytes;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// How the app is asked when the cache did not answer: this request's hold on its URL (when
/// it is the one asking for it), and a stale answer kept for it — which the app is asked to
/// confirm (`confirming`: its validators sent), or which stands in for the app's error.
#[derive(Default)]
pub(super) struct Asking {
    _hold: Option<FillGuard>,
    stale: Option<Arc<Stored>>,
    confirming: bool,
}

/// Answers `req` from its route's store when it holds a fresh answer (`Ok`) — or a stale
/// one within `stale-while-revalidate`, the request `again` makes sent in the background
/// (none: not refreshed now). Else the app is to be asked (`Err`, how): a request that
/// finds another asking for its URL already waits for that one's answer (within the
/// route's `response_timeout`) and looks again.
pub(super) async fn answer<C: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut C,
    (req, again): (&ForwardRequest, impl FnOnce() -> Option<Again>),
    route: &Rc<ProxyRoute>,
    own: &OwnAnswers<'_>,
    body_timeout: Duration,
) -> Result<Outcome, Asking> {
    let (Some(store), Some(asked)) = (route.cache.as_ref(), req.cache.as_ref()) else {
        return Err(Asking::default());
    };
    if asked.use_ != Use::Read {
        return Err(Asking::default());
    }
    let to = (stream, body_timeout);
    let stale = match store.look(asked) {
        Lookup::Fresh(stored) => return Ok(replay(to, &stored, req, route, own, HIT).await),
        // Given at once; the app is asked in the background, by the first to find it so.
        Lookup::Stale(stale)
            if !req.head_only && stale.serves_while_revalidating(Instant::now()) =>
        {
            // The request is copied only by the one that starts the refresh.
            if let Filling::Asks(hold) = store.fill(asked) {
                if let Some(again) = again() {
                    super::cache_refresh::behind(route, asked, again, stale.clone(), hold);
                }
            }
            store.given_stale();
            let past = stale.past_lifetime(Instant::now()).as_secs();
            let said = format!("espalier; hit; ttl=-{past}; detail=stale-while-revalidate");
            return Ok(replay(to, &stale, req, route, own, (Seen::Stale, &said)).await);
        }
        Lookup::Stale(stale) => Some(stale),
        Lookup::Missing => None,
    };
    let hold = match store.fill(asked) {
        Filling::Asks(guard) => Some(guard),
        Filling::Waits(mut under_way) => {
            let wait = route.settings().response_timeout;
            let _ = tokio::time::timeout(wait, under_way.changed()).await;
            if let Some(stored) = store.get(asked) {
                return Ok(replay(to, &stored, req, route, own, HIT).await);
            }
            None
        }
    };
    let confirming = false;
    Err(Asking {
        _hold: hold,
        stale,
        confirming,
    })
}

impl Asking {
    /// Whether a stale answer is kept for the request (to confirm, or to stand in).
    pub(super) fn has_stale(&self) -> bool {
        self.stale.is_some()
    }

    /// The stale answer kept for the request whose cache view is `asked`, for the app to be
    /// asked whether it changed (RFC 9111 §4.3.1) — counted as asked — when it has a
    /// validator and the client sent none of its own (whose answer is the client's).
    pub(super) fn confirmable(&mut self, asked: &CacheRequest) -> Option<&Stored> {
        let stale = self.stale.as_ref()?;
        if asked.conditional() || stale.validators() == (None, None) {
            return None;
        }
        self.confirming = true;
        Some(stale)
    }
}

/// An answer given from the cache while fresh, and its `Cache-Status`.
const HIT: (Seen, &str) = (Seen::Hit, "espalier; hit");

/// Asks the app whether the stale answer kept for `req` changed (RFC 9111 §4.3.1): its
/// validators go with the request — unless the client sent its own, whose answer is its.
pub(super) fn ask_if_changed(req: &mut ForwardRequest, asking: &mut Asking) {
    let Some(asked) = &req.cache else {
        return;
    };
    let Some((name, value)) = asking.confirmable(asked).and_then(Stored::validator_field) else {
        return;
    };
    req.head.field(name, value.as_bytes());
}

/// Answers from the stale answer kept for the request instead of the app's answer with
/// `status` (`None`: its failure, unanswered) where that is its place: the app confirmed it
/// (`304` to the validators sent) — kept again as new — or failed within its
/// `stale-if-error`. `None`: the app's answer goes on.
pub(super) async fn instead_of_app<C: AsyncRead + AsyncWrite + Unpin>(
    (stream, body_timeout): (&mut C, Duration),
    status: Option<u16>,
    asking: &Asking,
    (req, route, own): (&ForwardRequest, &ProxyRoute, &OwnAnswers<'_>),
) -> Option<Outcome> {
    let stale = asking.stale.as_ref()?;
    let to = (stream, body_timeout);
    if status == Some(304) && asking.confirming {
        let (store, asked) = (route.cache.as_ref()?, req.cache.as_ref()?);
        let confirmed = Arc::new(stale.confirmed(None));
        store.put(asked, confirmed.clone());
        let said = "espalier; fwd=stale; fwd-status=304; stored";
        return Some(replay(to, &confirmed, req, route, own, (Seen::Miss, said)).await);
    }
    let now = Instant::now();
    if status.is_none_or(|s| s >= 500) && stale.stands_in_for_errors(now) {
        if let Some(store) = &route.cache {
            store.given_stale();
        }
        let past = stale.past_lifetime(now).as_secs();
        let said = format!("espalier; hit; ttl=-{past}; detail=stale-if-error");
        return Some(replay(to, stale, req, route, own, (Seen::Stale, &said)).await);
    }
    None
}

/// Sends the kept answer `stored` to `req`'s client, its `Age` and `Cache-Status` (`said`,
/// and what the cache did, for the site's figures).
pub(super) async fn replay<C: AsyncRead + AsyncWrite + Unpin>(
    (stream, body_timeout): (&mut C, Duration),
    stored: &Stored,
    req: &ForwardRequest,
    route: &ProxyRoute,
    own: &OwnAnswers<'_>,
    (seen, said): (Seen, &str),
) -> Outcome {
    let Some(asked) = req.cache.as_ref() else {
        return Outcome::Close;
    };
    own.report.cache.set(Some(seen));
    let age = stored.age(Instant::now()).as_secs();
    let lines = format!("Age: {age}\r\nCache-Status: {said}\r\n");
    let head = &stored.raw[..stored.head_len];
    // A client's own conditional request: `304`, with the kept answer's validators.
    let (mut head, body) = if stored.not_modified_for(asked) {
        (not_modified(head), Bytes::new())
    } else {
        (head.to_vec(), stored.raw.slice(stored.head_len..))
    };
    let said = |n: &[u8]| n.eq_ignore_ascii_case(b"age") || n.eq_ignore_ascii_case(b"cache-status");
    crate::features::head::replace_fields(&mut head, 0, said, lines.as_bytes());
    let (out, relay) = match answer_head((&head, false), &stored.endpoint, req, route, own) {
        Ok(made) => made,
        Err(instead) => return own.instead(stream, route, instead).await,
    };
    send(stream, (out, body), relay, req, own, body_timeout).await
}

/// The fields a `304` carries of the answer it stands for (RFC 9110 §15.4.5).
const NOT_MODIFIED_FIELDS: [&str; 6] = [
    "cache-control",
    "content-location",
    "date",
    "etag",
    "expires",
    "vary",
];

/// A `304` head made from the kept answer's `head`: its validators and caching fields.
fn not_modified(head: &[u8]) -> Vec<u8> {
    let mut out = b"HTTP/1.1 304 Not Modified\r\n".to_vec();
    let lines = head.split(|b| *b == b'\n').skip(1);
    for line in lines {
        let name = line.split(|b| *b == b':').next().unwrap_or_default();
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        if NOT_MODIFIED_FIELDS.contains(&name.trim()) || name.trim() == "last-modified" {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Keeps the app's whole answer `raw` (head `head_len` bytes, from `endpoint`) for `req`.
pub(super) fn keep(
    route: &ProxyRoute,
    req: &ForwardRequest,
    (raw, head_len, endpoint): (Bytes, usize, Endpoint),
    (keep, validators): (Keep, Validators),
) {
    if let (Some(store), Some(asked)) = (&route.cache, &req.cache) {
        store.put(
            asked,
            Stored::new(raw, head_len, endpoint, keep, validators),
        );
    }
}

/// Puts the `Cache-Status` of an answer the app gave (`stored`: kept) into the client's
/// head `out`, for a request the cache looked at.
pub(super) fn mark(out: &mut ClientHead, req: &ForwardRequest, own: &OwnAnswers<'_>, stored: bool) {
    let Some(asked) = req.cache.as_ref().filter(|a| a.use_ != Use::Invalidate) else {
        return;
    };
    own.report.cache.set(Some(Seen::Miss));
    out.add_lines(asked.status_line(stored).as_bytes());
}

/// Sends the client's head `out` and the answer's whole `body` from memory, framed and
/// compressed as `relay` says: the outcome of the client's connection.
pub(super) async fn send<C: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut C,
    (out, body): (ClientHead, Bytes),
    relay: Relay,
    req: &ForwardRequest,
    own: &OwnAnswers<'_>,
    body_timeout: Duration,
) -> Outcome {
    let report = own.report;
    report.head.set(out.head_len() as u64);
    let done = match relay.then {
        Then::KeepAlive => Outcome::KeepAlive,
        _ => Outcome::Answered,
    };
    // Sent as it is (by its length, not compressed): with its head, in one write.
    let mut body = body;
    let as_is =
        relay.encoder.is_none() && matches!(relay.kind, BodyKind::Length(_) | BodyKind::None);
    let more: &[u8] = if as_is { &body } else { &[] };
    if head_to_client(stream, own, (out, more), body_timeout)
        .await
        .is_err()
    {
        return Outcome::Close;
    }
    if as_is {
        body = Bytes::new();
    }
    if body.is_empty() && relay.encoder.is_none() {
        return done;
    }
    let framing = BodyFraming {
        kind: relay.kind,
        rechunk: relay.to_client == ToClient::Chunked,
        plain_for_old_client: relay.kind == BodyKind::Chunked && req.client_minor == 0,
        chunked: req.client_minor == 1,
    };
    let timeouts = (body_timeout, body_timeout);
    let mut nothing_more = tokio::io::empty();
    let first = body.to_vec();
    match framing
        .relay(
            &mut nothing_more,
            stream,
            report,
            first,
            relay.encoder,
            timeouts,
        )
        .await
    {
        Ok(_) => done,
        Err(()) => Outcome::Close,
    }
}

/// The cache's view of `req` for `route` (`None` where it keeps nothing).
pub(super) fn request_of(
    route: &ProxyRoute,
    req: &crate::http::Request<'_>,
    lent: &crate::http::service::LentHead<'_>,
) -> Option<CacheRequest> {
    route.cache.as_ref()?;
    let parts = (route.settings().cache.as_ref()).map_or(&[][..], |c| &c.key[..]);
    CacheRequest::of(req, (lent.https, lent.framing.carries_nothing()), parts)
}
