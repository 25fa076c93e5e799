//! HTTP/3 (RFC 9114) over QUIC (RFC 9000), with quinn and h3: each request stream is
//! answered by the same service and the same request chain as HTTP/1.1 and HTTP/2 —
//! espalier's own answers written as they always are, an application's through the same
//! forwarder as an HTTP/1.1 request — and sent back through `streams`' relay.
//!
//! Owns: a QUIC connection's HTTP/3 streams, their limits, and each stream's request made
//! into a [`super::Request`] and answered (its body: [`body`]; a request in 0-RTT: [`early`];
//! the answer sent on its stream: [`answer`]).
//! Must not touch: the QUIC endpoints and their UDP sockets
//! (see `server::quic`), routing or content (the [`Service`] decides).
//!
//! Why quinn and h3: quinn is the QUIC stack of the Rust ecosystem with the most users (and
//! rustls, which espalier already uses, is its TLS: the same certificates, the same resolver
//! by SNI, the same client-certificate checks); h3 is hyper's project, made for quinn through
//! h3-quinn. h3 0.0.x calls itself experimental: it is held behind this module alone, and
//! its interoperability is tested against two independent clients (ngtcp2's and aioquic).
//! Its QPACK coder cost a third of a small request's instructions; espalier builds h3 0.0.8
//! vendored with a faster one (`vendor/h3/PATCH.md`) until a release carries an equivalent.
//! quiche (tokio-quiche) was the other choice: it brings BoringSSL, a second TLS library
//! whose certificates and resolver would be written twice.
//!
//! A request's body streams to its app as it arrives, as over HTTP/2 ([`body`]); for an
//! answer made here, or an app that must know its length first (FastCGI) when the client did
//! not say it, it is read whole, bounded by its path's `max_body_size`.
//!
//! Limits: at most [`super::h2::MAX_STREAMS`] concurrent request streams per connection and
//! a few unidirectional ones (QUIC's stream credit: a client cannot open more), a field
//! section bounded by `max_header_size` (QPACK's decoder refuses more), the connection idle
//! for `keepalive_timeout` closed by QUIC's idle timeout, a head not complete within
//! `header_timeout` and a body or an answer stalled for `body_timeout` ending their stream.

use super::access_log::{Entry, OwnedFacts, Report, HTTP3};
use super::service::{client_text, ConnEnv, LentHead, RequestCtx, Route, Service};
use super::stream_forward::{exchange, Arriving};
use super::streams::{answer_here, own_error, request_of};
use super::websocket;
use super::{Framing, Method, MAX_HEADERS};
use bytes::Bytes;
use h3::error::Code;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod answer;
mod body;
mod early;

use answer::{send_written, H3Out, Stream};

pub use early::HandshakeEnd;

/// A request routed to an application: where, as routing made it, and when it came.
struct Lending<'a, T> {
    target: T,
    ctx: &'a crate::http::service::RequestCtx,
    arrived: Instant,
    parts: &'a http::request::Parts,
}

/// What a connection's streams share.
struct Connection<S> {
    env: Rc<ConnEnv<S>>,
    group: usize,
    peer: std::net::SocketAddr,
    client: Rc<str>,
    /// The subject of its verified client certificate, if it gave one.
    client_cert: Option<String>,
    handshake: Rc<early::Handshake>,
}

/// Serves one QUIC connection's HTTP/3 requests until it closes or the worker drains (then
/// GOAWAY: the requests it has go on, new ones go elsewhere).
///
/// `handshake` is under way when the connection was taken in 0.5-RTT (with
/// `http3_early_data`; never on an address that asks for client certificates, which come
/// with the handshake).
pub async fn serve<S: Service + 'static>(
    conn: quinn::Connection,
    group: usize,
    env: Rc<ConnEnv<S>>,
    handshake: Option<HandshakeEnd>,
) {
    let handshake = match handshake {
        Some(accepted) => early::Handshake::pending(accepted),
        None => early::Handshake::complete(),
    };
    let client_cert = conn
        .peer_identity()
        .and_then(|id| {
            id.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| {
            chain
                .first()
                .and_then(|leaf| crate::certs::subject_of(leaf))
        });
    let peer = conn.remote_address();
    let quic = conn.clone();
    let settings = settings(&env);
    let built = settings.build::<_, Bytes>(h3_quinn::Connection::new(conn));
    let Ok(Ok(mut h3)) = tokio::time::timeout(env.timeouts.header, built).await else {
        return;
    };
    let connection = Rc::new(Connection {
        client: Rc::from(client_text(Some(peer)).as_str()),
        env: Rc::clone(&env),
        group,
        peer,
        client_cert,
        handshake,
    });
    // Once draining: when the connection may close (see `goaway_grace`), once its requests
    // are answered.
    let mut draining: Option<tokio::time::Instant> = None;
    let mut grace_over = false;
    let answering = Rc::new(Answering::default());
    // h3's accept also says "no more" at once, every time it is asked, once the client sent a
    // GOAWAY of its own and no request is open (sending another GOAWAY each time): at most
    // the client's stream credit of refusals is waited for, never a loop the client holds.
    let mut refusals_left = super::h2::MAX_STREAMS;
    loop {
        if draining.is_none() && env.shutdown.started.get() {
            draining = Some(tokio::time::Instant::now() + goaway_grace(quic.rtt()));
            // GOAWAY: the streams accepted so far are answered, no new one is.
            if h3.shutdown(0).await.is_err() {
                return;
            }
        }
        let accepted = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified(), if draining.is_none() => continue,
            accepted = h3.accept() => accepted,
            _ = sleep_until_some(draining), if !grace_over => {
                grace_over = true;
                continue;
            }
            _ = answering.none(), if grace_over => return linger(&quic).await,
        };
        match accepted {
            // Every accepted request answered, but requests the client sent before it read
            // the GOAWAY may still be on their way: each is refused with H3_REQUEST_REJECTED
            // (which a client may send again) until the grace ends, not cut by a close.
            Ok(None) if draining.is_some() && refusals_left > 0 => {
                refusals_left -= 1;
                continue;
            }
            Ok(None) => {
                answering.none().await;
                return linger(&quic).await;
            }
            Ok(Some(resolver)) => {
                let connection = Rc::clone(&connection);
                let answering = Answering::take(&answering);
                let came_early = connection.handshake.under_way();
                // Boxed whole: tokio copies a task's future when it spawns it and again when it
                // ends (its stage), and this one's state is a few kilobytes (a third of the
                // spawn's cost was that copy, callgrind).
                tokio::task::spawn_local(Box::pin(async move {
                    let _answering = answering;
                    let _open = Streams::take(&connection.env.streams);
                    let head = connection.env.timeouts.header;
                    if let Ok(Ok((request, stream))) =
                        tokio::time::timeout(head, resolver.resolve_request()).await
                    {
                        connection.answer(request, stream, came_early).await;
                    }
                }));
            }
            Err(_) => return,
        }
    }
}

/// The HTTP/3 settings a connection offers: a field section bounded by `max_header_size`,
/// and extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL) for WebSocket (RFC 9220).
fn settings<S>(env: &ConnEnv<S>) -> h3::server::Builder {
    let mut builder = h3::server::builder();
    builder
        .max_field_section_size(env.limits.max_header_size as u64)
        .enable_extended_connect(true);
    builder
}

/// How long a drained connection stays open after its GOAWAY for the requests the client
/// sent before reading it: what an HTTP/1.1 connection gets to send its next request
/// ([`DRAIN_IDLE`](crate::http::shutdown::DRAIN_IDLE)), or four round trips where that is
/// longer, at most 2 s; a client that read the GOAWAY closes the connection sooner itself.
/// Closing at once made such requests fail with the connection (`H3_NO_ERROR`), where a
/// client cannot tell they were not processed; four round trips alone (100 ms here) were
/// missed by a client the machine's load kept from running that long (1 recycle test in 4
/// under the whole suite).
fn goaway_grace(rtt: Duration) -> Duration {
    (rtt * 4).clamp(crate::http::shutdown::DRAIN_IDLE, Duration::from_secs(2))
}

/// Waits, once a connection's requests are answered, for the client to close it, or four
/// round trips (100 ms to 2 s): the last answers' bytes may be written to quinn but not yet
/// sent or acknowledged, and quinn's close drops whatever it has not sent (the client would
/// see its request fail with the connection's `H3_NO_ERROR`). A client that read the GOAWAY
/// and its answers closes the connection itself; TCP's lingering close waits likewise.
async fn linger(quic: &quinn::Connection) {
    let flight = (quic.rtt() * 4).clamp(Duration::from_millis(100), Duration::from_secs(2));
    let _ = tokio::time::timeout(flight, quic.closed()).await;
}

/// A connection's requests being answered, and a wake-up when the last one is.
#[derive(Default)]
struct Answering {
    count: std::cell::Cell<usize>,
    done: tokio::sync::Notify,
}

/// One request's place in its connection's [`Answering`], given back however it ends.
struct AnsweringOne(Rc<Answering>);

impl Answering {
    fn take(this: &Rc<Answering>) -> AnsweringOne {
        this.count.set(this.count.get() + 1);
        AnsweringOne(Rc::clone(this))
    }

    /// Returns once no request is being answered.
    async fn none(&self) {
        while self.count.get() > 0 {
            self.done.notified().await;
        }
    }
}

impl Drop for AnsweringOne {
    fn drop(&mut self) {
        self.0.count.set(self.0.count.get() - 1);
        if self.0.count.get() == 0 {
            self.0.done.notify_waiters();
        }
    }
}

/// Waits until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A stream task's place among the thread's open streams, given back however it ends.
struct Streams<'a>(&'a std::cell::Cell<usize>);

impl<'a> Streams<'a> {
    fn take(open: &'a std::cell::Cell<usize>) -> Self {
        open.set(open.get() + 1);
        Streams(open)
    }
}

impl Drop for Streams<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl<S: Service + 'static> Connection<S> {
    /// Answers one request stream: routed on its head; its body streamed to its app as it
    /// arrives, or read whole (bounded) for an answer made here; then answered.
    async fn answer(&self, request: http::Request<()>, mut stream: Stream, came_early: bool) {
        let env = &self.env;
        let arrived = Instant::now();
        let (mut parts, ()) = request.into_parts();
        if !early::admit(&mut parts, came_early, &self.handshake).await {
            return;
        }
        // An extended CONNECT becomes the WebSocket's upgrade request here, at the edge.
        let protocol = parts.extensions.remove::<h3::ext::Protocol>();
        if let Err(status) = websocket::take(&mut parts, protocol.as_ref().map(|p| p.as_str())) {
            return self.error(&mut stream, status).await;
        }
        let tunnel = websocket::is_tunnel(&parts);
        // Its framing checked before anything else, as HTTP/1.1's is.
        let declared = match body::declared_length(&parts) {
            Ok(declared) => declared,
            Err(status) => return self.error(&mut stream, status).await,
        };
        // Routed on its head; kept to be answered from when no body follows (a GET).
        let mut head_fields = Vec::with_capacity(parts.headers.len() + 1);
        let max_headers = MAX_HEADERS.min(env.limits.max_headers);
        let head = match request_of(&parts, &mut head_fields, &[], self.client(), max_headers) {
            Ok(request) => request,
            Err(status) => return self.error(&mut stream, status).await,
        };
        let mut route = env.service.route(self.group, &head, false);
        if let Some(question) = crate::http::ask::Question::of(route.asks(), &head, true) {
            route = Box::pin(env.service.ask(question, route)).await;
        }
        let (target, ctx) = match route {
            Route::Here(ctx) => (None, ctx),
            Route::Lend(target, ctx) => (Some(target), ctx),
            // A QUIC connection stays with the pool that took it (`check` refuses HTTP/3
            // where pools share an address): a request of another pool's is misdirected.
            Route::HandOff(_) => return self.error(&mut stream, 421).await,
        };
        let bound = ctx.body_bound(env.limits.max_body_size);
        if declared.is_some_and(|n| n > bound) {
            return self.too_large(&mut stream).await;
        }
        let to_fastcgi = target.as_ref().map(|t| env.service.needs_length(t));
        if tunnel && websocket::nowhere(to_fastcgi, &ctx.decided) {
            return self.error(&mut stream, 501).await;
        }
        let timeout = env.timeouts.body;
        if body::expects_continue(&parts) && !tunnel {
            H3Out::continuing(&mut stream, timeout).await;
        }
        // Whether a body follows shows only at its first piece (HTTP/3's head says nothing
        // of it): a GET's stream ends at once.
        let first = match declared {
            // A WebSocket's client sends nothing before its answer: its stream is the tunnel.
            _ if tunnel => None,
            Some(0) => None,
            _ => match body::piece(&mut stream, timeout).await {
                Ok(first) => first,
                Err(()) => return,
            },
        };
        let Some(target) = target else {
            let Some(body) = self.whole(first, &mut stream, bound).await else {
                return;
            };
            return self
                .answer_here(head, &parts, &body, &ctx, arrived, stream)
                .await;
        };
        // A body for an app streams to it as it arrives (as over HTTP/2), but to one that
        // must know its length first (FastCGI) when the client did not say it; a
        // WebSocket's stream is its tunnel.
        let streamed =
            (first.is_some() && (declared.is_some() || to_fastcgi == Some(false))) || tunnel;
        let lending = Lending {
            target,
            ctx: &ctx,
            arrived,
            parts: &parts,
        };
        match first {
            first if streamed => {
                let (first, framing) = match first {
                    _ if tunnel => (Bytes::new(), Framing::None),
                    first => (
                        first.unwrap_or_default(),
                        declared.map_or(Framing::Chunked, Framing::Length),
                    ),
                };
                let (mut send, mut recv) = stream.split();
                let arriving = body::Arriving {
                    first,
                    recv: &mut recv,
                    framing,
                };
                self.forward(lending, Vec::new(), Some(arriving), &mut send)
                    .await;
            }
            first => {
                let Some(body) = self.whole(first, &mut stream, bound).await else {
                    return;
                };
                self.forward(lending, body, None, &mut stream).await;
            }
        }
    }

    /// Answers here a request whose body (`body`, read whole) is in, `head` being the
    /// request as routed from its head alone.
    async fn answer_here(
        &self,
        head: super::Request<'_>,
        parts: &http::request::Parts,
        body: &[u8],
        ctx: &RequestCtx,
        arrived: Instant,
        mut stream: Stream,
    ) {
        let mut headers = Vec::new();
        let request = match body.is_empty() {
            true => head,
            false => match request_of(parts, &mut headers, body, self.client(), usize::MAX) {
                Ok(request) => request,
                Err(_) => return,
            },
        };
        let head_only = request.method == Method::Head;
        let facts = (arrived, &*self.client, HTTP3);
        let written = answer_here(&self.env, self.group, ctx, &request, facts);
        send_written(&mut stream, written, head_only, self.env.timeouts.body).await
    }

    fn client(&self) -> (&str, Option<std::net::SocketAddr>) {
        (&self.client, Some(self.peer))
    }

    /// The body read whole from its `first` piece on, at most `bound` bytes (413 past it).
    async fn whole(
        &self,
        first: Option<Bytes>,
        stream: &mut Stream,
        bound: u64,
    ) -> Option<Vec<u8>> {
        let Some(first) = first else {
            return Some(Vec::new());
        };
        match body::rest(first, stream, bound, self.env.timeouts.body).await {
            Ok(body) => Some(body),
            Err(body::Cut::TooLarge) => {
                self.too_large(stream).await;
                None
            }
            Err(body::Cut::Gone) => None,
        }
    }

    /// A request lent to its app through the forwarder (HTTP/1.1, as from a client at the
    /// far end of a pipe): its body `whole`, or `arriving` and pumped in as it comes; the
    /// answer relayed onto `out`, and the log line written.
    async fn forward<T: h3::quic::SendStream<Bytes>>(
        &self,
        lending: Lending<'_, S::Target>,
        whole: Vec<u8>,
        arriving: Option<body::Arriving<'_>>,
        out: &mut h3::server::RequestStream<T, Bytes>,
    ) {
        let env = &self.env;
        let Lending {
            target,
            ctx,
            arrived,
            parts,
        } = lending;
        let mut headers = Vec::with_capacity(parts.headers.len() + 1);
        let Ok(request) = request_of(parts, &mut headers, &whole, self.client(), usize::MAX) else {
            return;
        };
        let head_only = request.method == Method::Head;
        let timeout = env.timeouts.body;
        let report = Report::default();
        let facts = ctx.logged.then(|| OwnedFacts::of(&request));
        let framing = match &arriving {
            Some(a) => a.framing,
            None => Framing::Length(whole.len() as u64),
        };
        let head = LentHead {
            framing,
            keep_alive: false,
            expect_continue: false,
            client: Some(self.peer),
            client_text: &self.client,
            local: None,
            https: true,
            remote_user: None,
            granted: None,
            trace: None,
            client_cert: self.client_cert.as_deref(),
        };
        let lent = env.service.prepare(target, ctx, &request, &head);
        let arriving = arriving.map(|a| Arriving {
            first: Some(a.first),
            rest: a.recv,
            framing: a.framing,
        });
        let mut out = H3Out {
            stream: out,
            timeout,
        };
        exchange(
            env,
            (lent, ctx, &report),
            whole,
            arriving,
            &mut out,
            head_only,
        )
        .await;
        if let Some(facts) = facts {
            let mut req = facts.facts();
            req.minor_version = HTTP3;
            let entry = Entry::reported(req, &report, Some(arrived), &self.client);
            env.service.log(ctx, &entry);
        }
    }

    /// 413, and the rest of the body refused.
    async fn too_large(&self, stream: &mut Stream) {
        stream.stop_sending(Code::H3_NO_ERROR);
        self.error(stream, 413).await;
    }

    /// espalier's own error answer on a stream, written as its handlers' are.
    async fn error(&self, stream: &mut Stream, status: u16) {
        let written = own_error(&self.env.clock.common(), status);
        send_written(stream, written, false, self.env.timeouts.body).await;
    }
}
