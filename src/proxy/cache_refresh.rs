//! `stale-while-revalidate` (RFC 5861 §3): a kept answer past its lifetime but within that
//! window is given to its client at once, while one request of the cache's own asks the app
//! for a new one in the background — a task of the engine thread with no client, holding
//! the URL's fill (so the clients that come meanwhile are given the stale answer too, and
//! the app is asked once).
//!
//! The request is the client's as it went to the app ([`Again`]: an HTTP app's head, a
//! FastCGI child's records) with the kept answer's validators in place of the client's own
//! conditional fields: a `304` renews the entry, a new keepable answer (read whole within
//! the entry bound) replaces it, one that may not be kept takes it out, and a failure (5xx,
//! no answer) leaves it for its window (and `stale-if-error`) — said in the log as any
//! failure of the app's. The app's connection is closed after: the refresh is rare, and a
//! connection pooled from here would not be counted by its client's thread.
//!
//! Owns: that background request. Must not touch: the client's connection (it was answered
//! before this started) or the rules of caching (`super::cache`).

use super::answer::refreshed;
use super::answer_read::read_whole;
use super::cache::{CacheRequest, Stored};
use super::cache_store::FillGuard;
use super::cgi_answer::{read_cgi_head, read_stdout_whole};
use super::fastcgi_records::read_record;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::upstream::Conn;
use super::wire::write_timeout;
use super::Endpoint;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The request a background refresh sends again, as it went to the app.
pub(super) enum Again {
    /// An HTTP app's: its head, and what its group chose a server by.
    Http {
        head: super::forward_head::ForwardHead,
        choose: super::group::Choose,
    },
    /// A FastCGI child's: BEGIN_REQUEST and the PARAMS records (of a request that carried
    /// no conditional fields of its own: a CGI variable cannot be taken out of them).
    FastCgi { records: Vec<u8> },
}

impl Again {
    /// `req`'s, to an HTTP app.
    pub(super) fn http(req: &ForwardRequest) -> Again {
        Again::Http {
            head: req.head.clone(),
            choose: req.choose,
        }
    }

    /// The request with `stale`'s validators in place of the client's conditional fields.
    fn asking_if_changed(self, stale: &Stored) -> Again {
        match self {
            Again::Http { mut head, choose } => {
                head.remove_fields(|n| {
                    n.eq_ignore_ascii_case("if-none-match")
                        || n.eq_ignore_ascii_case("if-modified-since")
                });
                if let Some((name, value)) = stale.validator_field() {
                    head.field(name, value.as_bytes());
                }
                Again::Http { head, choose }
            }
            Again::FastCgi { mut records } => {
                match stale.validators() {
                    (Some(etag), _) => {
                        super::cgi::add_param(&mut records, b"HTTP_IF_NONE_MATCH", etag)
                    }
                    (None, Some(modified)) => {
                        let since = httpdate::fmt_http_date(modified);
                        super::cgi::add_param(
                            &mut records,
                            b"HTTP_IF_MODIFIED_SINCE",
                            since.as_bytes(),
                        )
                    }
                    (None, None) => {}
                }
                // No body: the empty STDIN record ends the request.
                super::cgi::record(&mut records, super::cgi::STDIN, &[]);
                Again::FastCgi { records }
            }
        }
    }
}

/// Starts the background refresh of `stale`, kept for `asked` on `route`, by sending
/// `again`, holding the URL's fill `hold` until it ends.
pub(super) fn behind(
    route: &Rc<ProxyRoute>,
    asked: &CacheRequest,
    again: Again,
    stale: Arc<Stored>,
    hold: FillGuard,
) {
    let again = again.asking_if_changed(&stale);
    let (route, asked) = (Rc::clone(route), asked.clone());
    tokio::task::spawn_local(async move {
        let _hold = hold;
        let asking = Asking {
            route: &route,
            asked: &asked,
            stale: &stale,
        };
        if let Err((endpoint, status, cause)) = asking.send(again).await {
            let cause = format!("{cause} (refreshing a kept answer in the background)");
            route.log_failure(endpoint.as_ref(), status, &cause);
        }
    });
}

/// A failure of the refresh: the app asked (when one was), the status a client would have
/// had, and why.
type Failed = (Option<Endpoint>, u16, String);

/// A refresh under way: its route, what the cache sees of the request, the stale answer.
struct Asking<'a> {
    route: &'a ProxyRoute,
    asked: &'a CacheRequest,
    stale: &'a Stored,
}

impl Asking<'_> {
    /// Sends `again` to the app and keeps what its answer says of the stale answer.
    async fn send(&self, again: Again) -> Result<(), Failed> {
        let Some(store) = self.route.cache.as_ref() else {
            return Ok(());
        };
        let choose = match &again {
            Again::Http { choose, .. } => *choose,
            Again::FastCgi { .. } => Default::default(),
        };
        let (endpoint, mut conn, _slot) = (self.route.connection(None, &choose).await)
            .map_err(|(status, cause)| (None, status, cause.unwrap_or_default()))?;
        let timeout = self.route.settings().response_timeout;
        let failed =
            |(status, cause): (u16, &str)| (Some(endpoint.clone()), status, cause.to_string());
        let sent = match &again {
            Again::Http { head, .. } => conn.send_head(head, timeout).await,
            Again::FastCgi { records } => write_timeout(&mut conn, records, timeout).await,
        };
        sent.map_err(|_| failed((502, "did not take the request")))?;
        let answered = match again {
            Again::Http { .. } => self.http_answer(&mut conn, &endpoint, timeout).await,
            Again::FastCgi { .. } => self.cgi_answer(&mut conn, &endpoint, timeout).await,
        };
        let (status, fresh) = answered.map_err(failed)?;
        match (status, fresh) {
            (304, _) => store.put(self.asked, self.stale.confirmed(None)),
            (_, Some(fresh)) => store.put(self.asked, fresh),
            (500.., None) => {
                return Err(failed((
                    status,
                    "answered an error; the stale answer stays",
                )))
            }
            // Not keepable, or over the entry bound: the old answer is outdated.
            (_, None) => store.invalidate(self.asked),
        }
        Ok(())
    }

    /// An HTTP app's answer: its status, and the answer to keep (read whole) if it may be.
    async fn http_answer(
        &self,
        conn: &mut Conn,
        endpoint: &Endpoint,
        timeout: Duration,
    ) -> Result<(u16, Option<Stored>), (u16, &'static str)> {
        let mut ubuf = Vec::with_capacity(8 << 10);
        let sent = std::time::Instant::now();
        let reading = super::answer_read::read_whole_head(conn, &mut ubuf);
        let head_len = match tokio::time::timeout(timeout, reading).await {
            Ok(Ok(len)) => len,
            Ok(Err(_)) => return Err((502, "answered no readable response head")),
            Err(_) => {
                let cause = "did not answer within response_timeout";
                self.route.failed(endpoint, 504, cause);
                return Err((504, cause));
            }
        };
        let report = crate::http::access_log::Report::default();
        self.route
            .answered(endpoint, &report, sent, &ubuf[..head_len]);
        let Some((status, kind, keep)) = refreshed(&ubuf[..head_len]) else {
            return Err((502, "answered a response head that does not parse"));
        };
        let Some((keep, validators)) = keep else {
            return Ok((status, None));
        };
        let whole = (head_len, kind);
        if !read_whole(conn, &mut ubuf, whole, self.route, timeout).await {
            return Ok((status, None));
        }
        ubuf.shrink_to_fit();
        let raw = bytes::Bytes::from(ubuf);
        let endpoint = endpoint.clone();
        Ok((
            status,
            Some(Stored::new(raw, head_len, endpoint, keep, validators)),
        ))
    }

    /// A FastCGI child's answer: its status, and the answer to keep (its STDOUT read whole,
    /// as the HTTP answer it stands for) if it may be.
    async fn cgi_answer(
        &self,
        conn: &mut Conn,
        endpoint: &Endpoint,
        timeout: Duration,
    ) -> Result<(u16, Option<Stored>), (u16, &'static str)> {
        let first = read_record(conn, timeout)
            .await
            .map_err(|e| (super::cgi_answer::status_of(e), "did not answer"))?;
        let (head, head_len) = read_cgi_head(conn, first, timeout, endpoint)
            .await
            .map_err(|status| {
                (
                    status,
                    "ended or broke its answer before a whole CGI header block",
                )
            })?;
        let (status, kept) = super::cgi_answer::kept(&head[..head_len], self.route, self.asked)
            .ok_or((502, "answered a CGI header block that does not parse"))?;
        let Some(((keep, validators), kept_head)) = kept else {
            return Ok((status, None));
        };
        let mut body = head[head_len..].to_vec();
        if !read_stdout_whole(conn, &mut body, self.route, (timeout, endpoint)).await {
            return Ok((status, None));
        }
        let answer = (kept_head, body, endpoint.clone());
        Ok((
            status,
            Some(super::cgi_answer::stored(answer, (keep, validators))),
        ))
    }
}
