//! Forwarding one request to an app process and its response back, streamed both ways.
//!
//! Owns: sending a request ([`super::request`] rewrote its head; [`super::route`] chose the
//! process) and its body as it arrives, reading the response head and writing the client's
//! (the site's field edits, error pages and compression applied), and choosing the error
//! answers: `502` when the app is down or answers garbage, `503` when no process is ready,
//! `504` when it does not answer in `response_timeout`. The body then goes by
//! [`super::relay`] (or [`super::encode`], compressed). Must not touch: the client
//! connection's loop (it hands the request here and takes the connection back when the
//! answer says it may go on).
//!
//! Bodies never sit whole in memory: each direction goes through one fixed buffer, so a 50 MB
//! upload costs a worker 64 KiB. A chunked body is checked by the same decoder the engine uses
//! (strict framing, bounded extensions and trailers) and passed on as it was sent, so the app
//! sees exactly the framing espalier validated — no request smuggling between the two.
//!
//! Retry: a request whose head could not be written is sent again, once, on a new connection
//! (to another process where there is one) whatever its method — it never reached an app
//! whole. A request that is idempotent and has no body is also sent again once when its
//! connection was closed before any byte of a response — a keep-alive connection the app
//! closed as it was reused, or a process that died. Anything else that fails after being
//! sent is answered 502, never repeated.

use super::answer::{answer_head, Relay};
use super::answer_read::{read_whole, read_whole_head, HeadError};
use super::cached;
use super::head::{Then, ToClient};
use super::relay::{tunnel, BodyFraming};
use super::request::ForwardRequest;
use super::request_body::{client_gone, send_body, send_taken_body, take_buffered};
use super::route::ProxyRoute;
use super::spool::{self, Filling, Spool};
use super::upstream::Conn;
use super::wire::{head_to_client, send_continue, BodyKind, Fail, OwnAnswers};
use super::Endpoint;
use crate::features::head::ClientHead;
pub(super) use crate::http::service::{LentConnection, Outcome};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// A request sent whole to an app, its answer's head read.
struct Asked {
    endpoint: Endpoint,
    conn: Conn,
    /// The answer as read so far: its head (`head_len` bytes), perhaps the body's start.
    ubuf: Vec<u8>,
    head_len: usize,
    /// What the request holds at its server (its share, its slot or its count in flight),
    /// until the answer is read.
    slot: super::route::Held,
}

/// Forwards the request to an app process and relays its answer to the client, in named
/// steps: connect (with one retry) and send, read the head ([`ask`]); parse it; write the
/// client's head ([`super::head`]); relay the body. Every failure is a [`Fail`] that one
/// place answers ([`OwnAnswers::fail`]).
pub async fn forward<C: AsyncRead + AsyncWrite + Unpin>(
    client: LentConnection<'_, C>,
    mut req: ForwardRequest,
    route: &std::rc::Rc<ProxyRoute>,
) -> Outcome {
    let LentConnection {
        stream,
        rbuf,
        clock,
        max_body,
        max_framing,
        body_timeout,
        report,
        response,
        heads,
    } = client;
    let own = OwnAnswers {
        report,
        clock,
        client_minor: req.client_minor,
        head_only: req.head_only,
        response,
        heads,
    };
    if !send_continue(stream, &own, req.expect_continue, body_timeout).await {
        return Outcome::Close;
    }
    // A fresh answer kept by the route's response cache: no app is asked. Else, where this
    // request asks for its URL, the others wait for it until this ends (`asking`), and a
    // stale answer kept is the app's to confirm.
    let mut asking = cached::Asking::default();
    if req.cache.is_some() {
        // Boxed, as every cache step here, and in a statement of its own (a temporary of
        // the awaiting statement is kept across its await): their states would grow this
        // future, moved into its box on every lent request, for routes without a cache too.
        let again = || Some(super::cache_refresh::Again::http(&req));
        let answering = Box::pin(cached::answer(
            stream,
            (&req, again),
            route,
            &own,
            body_timeout,
        ));
        match answering.await {
            Ok(outcome) => return outcome,
            Err(how) => asking = how,
        }
        cached::ask_if_changed(&mut req, &mut asking);
    }
    let bounds = (max_body, max_framing);
    // Where answers are buffered, so is the body: read whole before an app is asked.
    let taken = match take_buffered(stream, rbuf, &mut req, route, bounds, body_timeout).await {
        Ok(taken) => taken,
        Err(fail) => return own.fail(stream, route, fail).await,
    };
    let asked = match ask(
        stream,
        rbuf,
        &req,
        route,
        (bounds, taken.as_ref()),
        body_timeout,
        report,
        clock,
    )
    .await
    {
        Ok(asked) => asked,
        Err(fail) => {
            let kept = (&req, &**route, &own);
            let to = (&mut *stream, body_timeout);
            let instead = Box::pin(cached::instead_of_app(to, None, &asking, kept));
            if let Some(outcome) = instead.await {
                return outcome;
            }
            return own.fail(stream, route, fail).await;
        }
    };
    // The stale answer kept, confirmed by the app or standing in for its error.
    if req.cache.is_some() {
        let status = crate::http::status_of(&asked.ubuf[..asked.head_len]);
        let (kept, to) = ((&req, &**route, &own), (&mut *stream, body_timeout));
        let instead = Box::pin(cached::instead_of_app(to, status, &asking, kept));
        if let Some(outcome) = instead.await {
            return outcome;
        }
    }
    let Asked {
        endpoint,
        conn,
        ubuf,
        head_len,
        slot,
    } = asked;
    // On the site's page for an app's error, the app's body is left unread: its connection
    // is dropped, not pooled.
    let head = (&ubuf[..head_len], true);
    let (mut out, mut relay) = match answer_head(head, &endpoint, &req, route, &own) {
        Ok(head) => head,
        Err(instead) => return own.instead(stream, route, instead).await,
    };
    let mut answered = Answered {
        endpoint,
        conn,
        ubuf,
        head_len,
        slot,
    };
    // An answer the route's cache may keep is read whole first (within its entry bound):
    // kept, then sent from memory; a longer one goes on as any.
    if let Some(keeping) = relay.keep.take() {
        let (conn, ubuf) = (&mut answered.conn, &mut answered.ubuf);
        let timeout = route.settings().response_timeout;
        let whole = Box::pin(read_whole(
            conn,
            ubuf,
            (head_len, relay.kind),
            route,
            timeout,
        ));
        if whole.await {
            let to = (stream, body_timeout);
            let kept =
                Box::pin(answered.keep_and_send(keeping, (out, relay), to, &req, route, &own));
            return kept.await;
        }
    }
    cached::mark(&mut out, &req, &own, false);
    answered
        .relay(out, relay, stream, rbuf, &req, route, &own, body_timeout)
        .await
}

/// An app's answer whose head was read, its client's head written.
struct Answered {
    endpoint: Endpoint,
    conn: Conn,
    ubuf: Vec<u8>,
    head_len: usize,
    /// What the request holds at its server, until the app's answer is read.
    slot: super::route::Held,
}

impl Answered {
    /// Keeps the whole answer read (`ubuf`) in the route's response cache, its connection
    /// pooled, and sends it from memory.
    async fn keep_and_send<C: AsyncRead + AsyncWrite + Unpin>(
        self,
        keeping: (super::cache::Keep, super::cache::Validators),
        (mut out, relay): (ClientHead, Relay),
        (stream, body_timeout): (&mut C, Duration),
        req: &ForwardRequest,
        route: &ProxyRoute,
        own: &OwnAnswers<'_>,
    ) -> Outcome {
        let Answered {
            endpoint,
            conn,
            ubuf,
            head_len,
            slot,
        } = self;
        if !relay.upstream_closes {
            route.pool.put(&endpoint, conn);
        }
        drop(slot);
        // Kept as long as it is, not as the reads' buffer grew (a 2 KiB answer in 64 KiB).
        let mut ubuf = ubuf;
        ubuf.shrink_to_fit();
        let raw = bytes::Bytes::from(ubuf);
        let body = raw.slice(head_len..);
        cached::keep(route, req, (raw, head_len, endpoint), keeping);
        cached::mark(&mut out, req, own, true);
        cached::send(stream, (out, body), relay, req, own, body_timeout).await
    }

    /// Sends the client's head `out` and relays the body (or the tunnel): the outcome of the
    /// client's connection. The app's connection goes back to its pool when the answer ended
    /// cleanly and the app keeps it.
    #[allow(clippy::too_many_arguments)]
    async fn relay<C: AsyncRead + AsyncWrite + Unpin>(
        self,
        out: ClientHead,
        relay: Relay,
        stream: &mut C,
        rbuf: &mut Vec<u8>,
        req: &ForwardRequest,
        route: &ProxyRoute,
        own: &OwnAnswers<'_>,
        body_timeout: Duration,
    ) -> Outcome {
        let Answered {
            endpoint,
            mut conn,
            mut ubuf,
            head_len,
            slot,
        } = self;
        let report = own.report;
        report.head.set(out.head_len() as u64);
        ubuf.drain(..head_len);
        // A small answer read whole goes out with its head in one write; nothing is left.
        let mut kind = relay.kind;
        let whole =
            matches!((kind, &relay.encoder), (BodyKind::Length(n), None) if ubuf.len() as u64 == n);
        let more: &[u8] = if whole { &ubuf } else { &[] };
        if head_to_client(stream, own, (out, more), body_timeout)
            .await
            .is_err()
        {
            return Outcome::Close;
        }
        if whole {
            ubuf.clear();
            kind = BodyKind::None;
        }
        if relay.then == Then::Upgrade {
            // Boxed, as every rarer branch here: its state would grow the future every
            // request's is moved in with (see `Box::pin` of the lent request).
            Box::pin(tunnel(stream, report, rbuf, (conn, ubuf), body_timeout)).await;
            return Outcome::Close;
        }
        let timeouts = (route.settings().response_timeout, body_timeout);
        let reusable = !relay.upstream_closes && !matches!(kind, BodyKind::UntilClose);
        let framing = BodyFraming {
            kind,
            rechunk: relay.to_client == ToClient::Chunked,
            plain_for_old_client: matches!(kind, BodyKind::Chunked) && req.client_minor == 0,
            chunked: req.client_minor == 1,
        };
        let buffer = route.buffer(req.buffered);
        let relayed = match buffer.filter(|_| !relay.streams && kind != BodyKind::None) {
            Some(bounds) => {
                let spool = Spool::new(bounds.response, bounds.disk);
                let filling = Filling {
                    route,
                    endpoint,
                    conn,
                    slot,
                    reusable,
                };
                let filling = filling.run(spool.clone(), ubuf, kind, timeouts.0);
                let mut reader = spool.reader();
                let relaying = framing.relay(
                    &mut reader,
                    stream,
                    report,
                    Vec::new(),
                    relay.encoder,
                    timeouts,
                );
                Box::pin(spool::alongside(relaying, filling))
                    .await
                    .map(|_| ())
            }
            None => {
                let relayed = framing
                    .relay(&mut conn, stream, report, ubuf, relay.encoder, timeouts)
                    .await;
                if relayed == Ok(true) && reusable {
                    route.pool.put(&endpoint, conn);
                }
                drop(slot);
                relayed.map(|_| ())
            }
        };
        match relayed {
            // The body was sent whole before the answer was read (`send_body`).
            Ok(()) => match relay.then {
                Then::KeepAlive => Outcome::KeepAlive,
                _ => Outcome::Answered,
            },
            Err(()) => Outcome::Close,
        }
    }
}

/// Connects to an app process (another, once, when a retryable request's connection failed
/// before any answer), sends the request's head and body, and reads the answer's head.
#[allow(clippy::too_many_arguments)]
async fn ask<C: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut C,
    rbuf: &mut Vec<u8>,
    req: &ForwardRequest,
    route: &ProxyRoute,
    (bounds, taken): ((u64, usize), Option<&Spool>),
    body_timeout: Duration,
    report: &crate::http::access_log::Report,
    clock: &crate::http::clock::Clock,
) -> Result<Asked, Fail> {
    let response_timeout = route.settings().response_timeout;
    let mut avoid: Option<Endpoint> = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let (endpoint, mut conn, slot) = route
            .connection(avoid.take(), &req.choose)
            .await
            .map_err(|(status, cause)| Fail::Unconnected(status, cause))?;
        if let Err(e) = conn.send_head(&req.head, response_timeout).await {
            // A request the connection cannot carry (an upgrade to an HTTP/2 server) says
            // why; it would fail the same way anywhere.
            if e.kind() == std::io::ErrorKind::InvalidInput {
                return Err(Fail::app(502, &endpoint, e.to_string()));
            }
            // A head that could not be written never reached the app whole — a kept
            // connection the app closed as it was reused, most often — so no app acted on
            // it: sent once more on a new connection whatever its method (its body is not
            // sent yet), as nginx passes a request not yet sent to the next server.
            if tries < 2 {
                avoid = Some(endpoint);
                continue;
            }
            return Err(Fail::app(502, &endpoint, "did not take the request's head"));
        }
        let timeouts = (body_timeout, response_timeout);
        match taken {
            Some(spool) => send_taken_body(spool, &mut conn, response_timeout)
                .await
                .map_err(|_| Fail::app(502, &endpoint, "did not take the request's body"))?,
            None => {
                send_body(
                    stream, rbuf, &mut conn, req.body, bounds, timeouts, &endpoint,
                )
                .await?
            }
        }
        let mut ubuf = Vec::with_capacity(8 << 10);
        let asked = std::time::Instant::now();
        let waited = tokio::select! {
            r = read_head(&mut conn, &mut ubuf, clock, response_timeout) => r,
            () = client_gone(stream, rbuf) => {
                // Its exchange ends with the client: the connection to the app is closed,
                // not kept busy until the answer or response_timeout.
                route.abandoned(&endpoint, asked.elapsed());
                report.status.set(499);
                return Err(Fail::Close);
            }
        };
        let cause = match waited {
            Ok(head_len) => {
                report.hop.set(Some(crate::http::access_log::Hop {
                    asked,
                    addr: None,
                    resends: tries - 1,
                }));
                route.answered(&endpoint, report, asked, &ubuf[..head_len]);
                return Ok(Asked {
                    endpoint,
                    conn,
                    ubuf,
                    head_len,
                    slot,
                });
            }
            Err(HeadError::ClosedEarly) if req.retryable && tries < 2 => {
                avoid = Some(endpoint);
                continue;
            }
            Err(HeadError::Timeout) => {
                let cause =
                    format!("did not answer within response_timeout ({response_timeout:?})");
                // An idempotent request without a body goes to another server of a group
                // once (nginx's `proxy_next_upstream timeout`): a frozen server, whose
                // kernel still takes connections, costs its client one wait, not an error.
                // A group of one would be asked the same again: a second wait for nothing.
                if req.retryable && tries < 2 && route.has_other_server() {
                    route.failed(&endpoint, 504, &cause);
                    route.log_failure(
                        Some(&endpoint),
                        504,
                        &format!("{cause}; sent to another server"),
                    );
                    avoid = Some(endpoint);
                    continue;
                }
                return Err(Fail::app(504, &endpoint, cause));
            }
            Err(HeadError::ClosedEarly) => "closed the connection without answering",
            Err(HeadError::Garbage) => {
                "answered a malformed, cut-off or over-64-KiB HTTP/1.x response head"
            }
        };
        return Err(Fail::app(502, &endpoint, cause));
    }
}

/// Reads the app's response head into `ubuf` (skipping interim 1xx answers other than 101);
/// returns the head's length. `timeout` bounds the whole wait, interim answers included: an
/// app sending `100 Continue` every few milliseconds does not hold the client past it.
async fn read_head(
    conn: &mut Conn,
    ubuf: &mut Vec<u8>,
    clock: &crate::http::clock::Clock,
    timeout: Duration,
) -> Result<usize, HeadError> {
    // The whole wait, in the thread's clock's list of waits (no timer per request).
    match clock.within(timeout, read_whole_head(conn, ubuf)).await {
        Ok(r) => r,
        Err(()) => Err(HeadError::Timeout),
    }
}
