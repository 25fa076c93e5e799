//! `stale-while-revalidate` (RFC 5861 §3): a kept answer past its lifetime but within that
//! window is given to its client at once, while one request of the cache's own asks the app
//! for a new one in the background — a task of the engine thread with no client, holding
//! the URL's fill (so the clients that come meanwhile are given the stale answer too, and
//! the app is asked once).
//!
//! The request is the client's as it went to the app, its own conditional fields taken out
//! and the kept answer's validators put in: a `304` renews the entry, a new keepable answer
//! (read whole within the entry bound) replaces it, one that may not be kept takes it out,
//! and a failure (5xx, no answer) leaves it for its window (and `stale-if-error`) — said in
//! the log as any failure of the app's. The app's connection is closed after: the refresh
//! is rare, and a connection pooled from here would not be counted by its client's thread.
//!
//! Owns: that background request. Must not touch: the client's connection (it was answered
//! before this started) or the rules of caching (`super::cache`).

use super::answer::refreshed;
use super::cache::Stored;
use super::cache_store::FillGuard;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::wire::write_timeout;
use super::Endpoint;
use std::rc::Rc;
use std::sync::Arc;

/// Starts the background refresh of `stale`, kept for `req` on `route`, holding the URL's
/// fill `hold` until it ends.
pub(super) fn behind(
    route: &Rc<ProxyRoute>,
    req: &ForwardRequest,
    stale: Arc<Stored>,
    hold: FillGuard,
) {
    let Some(asked) = req.cache.clone() else {
        return;
    };
    let mut head = req.head.clone();
    let conditional = |n: &[u8]| {
        n.eq_ignore_ascii_case(b"if-none-match") || n.eq_ignore_ascii_case(b"if-modified-since")
    };
    let validators = stale.validator_fields().unwrap_or_default();
    crate::features::head::replace_fields(&mut head, 0, conditional, validators.as_bytes());
    let (route, choose) = (Rc::clone(route), req.choose);
    tokio::task::spawn_local(async move {
        let _hold = hold;
        if let Err((endpoint, status, cause)) = refresh(&route, &head, choose, &asked, &stale).await
        {
            let cause = format!("{cause} (refreshing a kept answer in the background)");
            route.log_failure(endpoint.as_ref(), status, &cause);
        }
    });
}

/// A failure of the refresh: the app asked (when one was), the status a client would have
/// had, and why.
type Failed = (Option<Endpoint>, u16, String);

/// Asks the app for `head` and keeps what it says of `stale` for `asked`.
async fn refresh(
    route: &ProxyRoute,
    head: &[u8],
    choose: super::group::Choose,
    asked: &super::cache::CacheRequest,
    stale: &Stored,
) -> Result<(), Failed> {
    let Some(store) = route.cache.as_ref() else {
        return Ok(());
    };
    let timeout = route.settings().response_timeout;
    let (endpoint, mut conn, _slot) = route
        .connection(None, &choose)
        .await
        .map_err(|(status, cause)| (None, status, cause.unwrap_or_default()))?;
    let failed = |status: u16, cause: &str| (Some(endpoint.clone()), status, cause.to_string());
    write_timeout(&mut conn, head, timeout)
        .await
        .map_err(|_| failed(502, "did not take the request's head"))?;
    let mut ubuf = Vec::with_capacity(8 << 10);
    let sent = std::time::Instant::now();
    let reading = super::answer_read::read_whole_head(&mut conn, &mut ubuf);
    let head_len = match tokio::time::timeout(timeout, reading).await {
        Ok(Ok(len)) => len,
        Ok(Err(_)) => return Err(failed(502, "answered no readable response head")),
        Err(_) => {
            route.failed(&endpoint, 504, "did not answer within response_timeout");
            return Err(failed(504, "did not answer within response_timeout"));
        }
    };
    let report = crate::http::access_log::Report::default();
    route.answered(&endpoint, &report, sent, &ubuf[..head_len]);
    let Some((status, kind, keep)) = refreshed(&ubuf[..head_len]) else {
        return Err(failed(502, "answered a response head that does not parse"));
    };
    match (status, keep) {
        (304, _) => store.put(asked, stale.confirmed(None)),
        (_, Some((keep, validators))) => {
            let whole = (head_len, kind);
            if super::answer_read::read_whole(&mut conn, &mut ubuf, whole, route, timeout).await {
                ubuf.shrink_to_fit();
                let raw = bytes::Bytes::from(ubuf);
                store.put(
                    asked,
                    Stored::new(raw, head_len, endpoint, keep, validators),
                );
            } else {
                store.invalidate(asked);
            }
        }
        (500.., None) => return Err(failed(status, "answered an error; the stale answer stays")),
        (_, None) => store.invalidate(asked),
    }
    Ok(())
}
