//! HTTP/2 over TLS (ALPN `h2`), and on cleartext with prior knowledge (h2c: a connection
//! that opens with the HTTP/2 preface), with the `h2` crate: framing, flow control, HPACK and the
//! protocol's attack limits are its; each stream is answered by the same service as an
//! HTTP/1.1 request — espalier's own handlers write their answer as they always do, and a
//! proxied application gets an HTTP/1.1 request through the same forwarder (but a gRPC
//! call to an app spoken to in HTTP/2, which HTTP/1.1 cannot carry: see `lent`).
//!
//! Owns: the connection, its limits and its streams — each stream's head and body made into
//! a [`Request`], answered at once or by a task; the answer's way back onto the stream is
//! `answer`'s (through `send`'s translation and window waits), a proxied request's body
//! streams to its app by `body`, and a stream its app takes as a stream of its own (an
//! HTTP/2 upstream, for gRPC) is lent whole by `lent`; a WebSocket's stream is `tunnel`'s. Must not touch:
//! routing or content (the [`Service`] decides), or HTTP/1.1 framing (the connection loop
//! in [`super::conn`]).
//!
//! Cost: a stream without a body is answered in the connection's own loop — the service's
//! answer translated (its field values sharing one buffer) and queued on the stream, the h2
//! crate sending it as windows allow — with no task of its own. Only what must wait (a body
//! to read, an application's answer, a file's pieces) gets a task, its large future boxed.
//! A task per stream, its future moved whole at spawn, cost three times the rest of a
//! request's user-space instructions (callgrind: 118 831 → 34 109 per request under
//! `h2load -c10 -m10`; nginx 1.22 spends 32 320). The answers to the streams one read
//! brought leave in one write (`held`): one TLS record and one syscall for ten requests
//! rather than ten, which took the server's CPU per request from 1.06 to 0.68 of nginx's.
//!
//! Limits against the known HTTP/2 attacks: at most [`MAX_STREAMS`] concurrent streams; a
//! header list bounded by `max_header_size` (HPACK bombs and CONTINUATION floods end there,
//! the crate enforcing it while decoding); streams reset by the client before being answered
//! are bounded (rapid reset, CVE-2023-44487: past the bound the connection gets GOAWAY
//! `ENHANCE_YOUR_CALM`), as are the streams this side resets; windows and send buffers are
//! bounded per stream and per connection; a body beyond `max_body_size` is refused with 413;
//! a client that opens no window for `body_timeout` has its stream reset, and a connection
//! closed for idleness is dropped `body_timeout` later if its answers are still not taken
//! (slow reading).

mod answer;
mod body;
mod held;
mod lent;
mod send;
mod tunnel;

pub use crate::http::service::{LentStream, StreamReply};
pub use send::send_data;

use super::access_log::{Entry, OwnedFacts, Report, HTTP2};
use super::service::{client_text, ConnEnv, FileBody, LentHead, RequestCtx, Route, Service};
use super::{Framing, Method, Request, MAX_HEADERS};
use crate::handoff::Carried;
use crate::http::stream_forward::{exchange, Arriving};
use crate::http::streams::{answer_here, request_of, send_file, Written};
use crate::http::websocket;
use answer::{send_error, H2Out};
use body::Body;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use send::{send_answer, SEND_BUFFER};
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// Concurrent streams a client may open on one connection (nginx's default is 128).
pub const MAX_STREAMS: u32 = 128;
/// Streams the client may reset before they are answered, pending at once (rapid reset).
const MAX_PENDING_RESETS: usize = 32;
/// Streams this side may reset over a connection's life for the client's errors.
const MAX_LOCAL_RESETS: usize = 1024;
/// Flow-control windows: per stream and per connection.
const STREAM_WINDOW: u32 = 256 << 10;
const CONNECTION_WINDOW: u32 = 1 << 20;

/// Serves an HTTP/2 connection (TLS with ALPN `h2`) until it closes or the worker drains.
pub async fn serve<S: Service + 'static, T: AsyncRead + AsyncWrite + Unpin + 'static>(
    io: T,
    group: usize,
    env: Rc<ConnEnv<S>>,
    carried: Carried,
    https: bool,
) {
    let client: Rc<str> = Rc::from(client_text(carried.client).as_str());
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(env.limits.max_header_size.min(u32::MAX as usize) as u32)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: WebSocket over HTTP/2 (RFC 8441, `websocket`).
        .enable_connect_protocol();
    let (io, holding) = held::HeldWrites::new(io);
    let Ok(Ok(mut conn)) =
        tokio::time::timeout(env.timeouts.header, builder.handshake::<_, Bytes>(io)).await
    else {
        return;
    };
    let connection = Rc::new(Connection {
        env: Rc::clone(&env),
        group,
        peer: carried.client,
        https,
        client,
        client_cert: carried.client_cert,
        open: std::cell::Cell::new(0),
    });
    // One timer for the connection's idleness, checked when it fires rather than moved at
    // every stream: a connection with no stream open for the keep-alive timeout is closed.
    let mut last_active = Instant::now();
    let idle_timer = tokio::time::sleep(env.timeouts.keepalive);
    tokio::pin!(idle_timer);
    let mut draining = false;
    // Closed for idleness: the answers still queued (for a client that does not read them)
    // get the body timeout, then the connection is dropped.
    let mut idle_closing = false;
    loop {
        let next = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified(), if !draining => {
                draining = true;
                conn.graceful_shutdown();
                continue;
            }
            _ = &mut idle_timer, if !draining || idle_closing => {
                if idle_closing {
                    return;
                }
                let quiet_until = last_active + env.timeouts.keepalive;
                if connection.open.get() > 0 || quiet_until > Instant::now() {
                    idle_timer.as_mut().reset(tokio::time::Instant::from_std(
                        quiet_until.max(Instant::now()) + Duration::from_millis(1),
                    ));
                    if connection.open.get() > 0 {
                        last_active = Instant::now();
                    }
                } else {
                    draining = true;
                    idle_closing = true;
                    conn.graceful_shutdown();
                    idle_timer.as_mut().reset(tokio::time::Instant::now() + env.timeouts.body);
                }
                continue;
            }
            next = held::accept_held(&mut conn, &holding) => next,
        };
        match next {
            Some(Ok((req, respond))) => {
                last_active = Instant::now();
                if env.shutdown.started.get() && !draining {
                    draining = true;
                    conn.graceful_shutdown();
                }
                connection.take(req, respond, last_active);
            }
            Some(Err(_)) | None => return,
        }
    }
}

/// What a connection's streams share.
struct Connection<S> {
    env: Rc<ConnEnv<S>>,
    group: usize,
    /// The client, and its address as text (formatted once per connection).
    peer: Option<std::net::SocketAddr>,
    /// Over TLS (h2), or cleartext with prior knowledge (h2c).
    https: bool,
    client: Rc<str>,
    /// The subject of its verified client certificate, if it gave one.
    client_cert: Option<String>,
    /// Streams being answered by a task.
    open: std::cell::Cell<usize>,
}

/// A stream's counted place among the open ones (its connection's and its thread's), given
/// back however its task ends.
struct Open<'a>(&'a std::cell::Cell<usize>, &'a std::cell::Cell<usize>);

impl<'a> Open<'a> {
    fn take(open: &'a std::cell::Cell<usize>, thread: &'a std::cell::Cell<usize>) -> Self {
        open.set(open.get() + 1);
        thread.set(thread.get() + 1);
        Open(open, thread)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
        self.1.set(self.1.get() - 1);
    }
}

/// How a stream with a body was routed on its head (see `Connection::route_head`).
type Routed<T> = Result<(T, RequestCtx, Option<OwnedFacts>), Option<RequestCtx>>;

/// What answering a stream at once left for a task.
enum Work<T> {
    /// The request is lent to what the service routed it to (an application), through the
    /// forwarder. Its context travels with it, to its added fields and its log line.
    Forward(Box<Lending<T>>),
    /// The head is sent; the file's pieces follow as the client's window allows.
    File(SendStream<Bytes>, FileBody),
    /// Its path's verifier is asked first (see [`crate::http::ask`]); then it is answered.
    Ask(Box<Asking<T>>),
}

/// A stream without a body waiting for its verifier's verdict.
struct Asking<T> {
    question: crate::http::ask::Question,
    route: Route<T>,
    respond: SendResponse<Bytes>,
    arrived: Instant,
}

/// A stream lent to what the service routed it to: where, its context, its stream, and what
/// its log line will want.
struct Lending<T> {
    target: T,
    ctx: RequestCtx,
    respond: SendResponse<Bytes>,
    facts: Option<OwnedFacts>,
    arrived: Instant,
}

impl<S: Service + 'static> Connection<S> {
    /// Takes a stream the client opened: one without a body is answered here, without a
    /// task, unless an app or a file's pieces must be waited for; one with a body gets a
    /// task. An extended CONNECT becomes the WebSocket's upgrade request here, at the edge;
    /// one that ends its stream at once has no tunnel to carry (400).
    fn take(
        self: &Rc<Self>,
        req: http::Request<RecvStream>,
        mut respond: SendResponse<Bytes>,
        arrived: Instant,
    ) {
        let (mut parts, recv) = req.into_parts();
        let protocol = parts.extensions.remove::<h2::ext::Protocol>();
        let refused = match websocket::take(&mut parts, protocol.as_ref().map(|p| p.as_str())) {
            Err(status) => Some(status),
            Ok(()) if recv.is_end_stream() && websocket::is_tunnel(&parts) => Some(400),
            Ok(()) => None,
        };
        if let Some(status) = refused {
            return send_error(&mut respond, &self.env, status);
        }
        let connection = Rc::clone(self);
        if !recv.is_end_stream() {
            tokio::task::spawn_local(connection.with_body(parts, recv, respond));
        } else if let Some(work) = self.answer(&parts, &[], respond, arrived, None) {
            tokio::task::spawn_local(connection.finish(work, parts, Vec::new()));
        }
    }

    /// A stream with a body: streamed to its application as it arrives when the request is
    /// proxied; read whole (bounded) first for espalier's own handlers, which take a whole
    /// request, and for a FastCGI app when the client declared no length.
    async fn with_body(
        self: Rc<Self>,
        parts: http::request::Parts,
        mut recv: RecvStream,
        mut respond: SendResponse<Bytes>,
    ) {
        let _open = Open::take(&self.open, &self.env.streams);
        let env = &self.env;
        let arrived = Instant::now();
        let routed = match self.route_head(&parts).await {
            Ok(routed) => routed,
            Err(status) => return send_error(&mut respond, env, status),
        };
        let framing = body::framing_of(&parts, recv.is_end_stream());
        if framing == Framing::None {
            return self.tunnel(routed, parts, recv, respond, arrived).await;
        }
        // FastCGI tells its app the body's length before the body (CONTENT_LENGTH): one the
        // client did not declare is read whole first, as nginx does — lent where it was
        // routed, once (routing again would count it twice against its client's limit).
        let (routed, lent_whole) = match routed {
            Ok((target, ctx, facts))
                if framing == Framing::Chunked && env.service.needs_length(&target) =>
            {
                (Err(None), Some((target, ctx, facts)))
            }
            routed => (routed, None),
        };
        let routed_here = match routed {
            Err(here) => here,
            Ok((target, ctx, facts)) => {
                // A body declared too large is refused before any of it is taken, as HTTP/1.1's
                // is; one undeclared is bounded by the forwarder's chunked decoder.
                let bound = ctx.body_bound(env.limits.max_body_size);
                if matches!(framing, Framing::Length(n) if n > bound) {
                    return body::refuse_too_large(&mut respond, &mut recv, env).await;
                }
                let work = Work::Forward(Box::new(Lending {
                    target,
                    ctx,
                    respond,
                    facts,
                    arrived,
                }));
                let expects_continue = body::expects_continue(&parts);
                let arriving = Body::Arriving(recv, framing, expects_continue);
                Box::pin(self.run(work, &parts, arriving)).await;
                return;
            }
        };
        // Read whole here: bounded by its path's `max_body_size` as routed.
        let bound = lent_whole
            .as_ref()
            .map(|(_, ctx, _)| ctx)
            .or(routed_here.as_ref())
            .map_or(env.limits.max_body_size, |ctx| {
                ctx.body_bound(env.limits.max_body_size)
            });
        if body::expects_continue(&parts) {
            let _ = respond.send_informational(crate::http::streams::continue_response());
        }
        let Some(body) = body::whole(&mut recv, &mut respond, env, bound).await else {
            return;
        };
        let work = match lent_whole {
            Some((target, ctx, facts)) => Some(Work::Forward(Box::new(Lending {
                target,
                ctx,
                respond,
                facts,
                arrived,
            }))),
            None => self.answer(
                &parts,
                &body,
                respond,
                arrived,
                routed_here.map(Route::Here),
            ),
        };
        if let Some(work) = work {
            Box::pin(self.run(work, &parts, Body::Whole(&body))).await;
        }
    }

    /// A stream with a body routed on its head: lent (its target, context and what its log
    /// line wants), or to be answered here once the body is in (`Err(Some)`: routing again
    /// then would run the site's chain twice, a limit counted twice); the status refusing
    /// its head.
    async fn route_head(&self, parts: &http::request::Parts) -> Result<Routed<S::Target>, u16> {
        let env = &self.env;
        let mut headers = Vec::with_capacity(parts.headers.len() + 1);
        let max_headers = MAX_HEADERS.min(env.limits.max_headers);
        let request = request_of(
            parts,
            &mut headers,
            &[],
            (&self.client, self.peer),
            max_headers,
        )?;
        // No hand-off: an HTTP/2 connection stays with the pool that took it.
        let mut route = env.service.route(self.group, &request, false);
        if let Some(question) = crate::http::ask::Question::of(route.asks(), &request, self.https) {
            route = Box::pin(env.service.ask(question, route)).await;
        }
        Ok(match route {
            Route::Lend(target, ctx) => {
                let facts = ctx.logged.then(|| OwnedFacts::of(&request));
                Ok((target, ctx, facts))
            }
            Route::Here(ctx) => Err(Some(ctx)),
            Route::HandOff(_) => Err(None),
        })
    }

    /// The work [`Self::answer`] left, in a task of its own.
    async fn finish(
        self: Rc<Self>,
        work: Work<S::Target>,
        parts: http::request::Parts,
        body: Vec<u8>,
    ) {
        let _open = Open::take(&self.open, &self.env.streams);
        // Boxed, as in `with_body`: a task's future is moved whole when spawned, and the
        // forwarder's is large; measured, copying it cost more than answering the request.
        Box::pin(self.run(work, &parts, Body::Whole(&body))).await;
    }

    async fn run(&self, work: Work<S::Target>, parts: &http::request::Parts, body: Body<'_>) {
        match work {
            Work::Ask(asking) => {
                let Asking {
                    question,
                    route,
                    respond,
                    arrived,
                } = *asking;
                let route = Box::pin(self.env.service.ask(question, route)).await;
                let whole = match body {
                    Body::Whole(whole) => whole,
                    Body::Arriving(..) => &[],
                };
                if let Some(work) = self.answer(parts, whole, respond, arrived, Some(route)) {
                    Box::pin(self.run(work, parts, Body::Whole(whole))).await;
                }
            }
            Work::File(send, file) => {
                let mut out = H2Out::sending(send);
                let _ = send_file(&mut out, file, self.env.timeouts.body).await;
            }
            Work::Forward(lending) => {
                let mut headers = Vec::with_capacity(parts.headers.len() + 1);
                let whole = match body {
                    Body::Whole(whole) => whole,
                    Body::Arriving(..) => &[],
                };
                let Ok(request) = request_of(
                    parts,
                    &mut headers,
                    whole,
                    (&self.client, self.peer),
                    usize::MAX,
                ) else {
                    return;
                };
                let report = Report::default();
                let Lending {
                    target,
                    ctx,
                    respond,
                    facts,
                    arrived,
                } = *lending;
                self.forward(&request, body, target, &ctx, &report, respond)
                    .await;
                if let Some(facts) = facts {
                    let mut req = facts.facts();
                    req.minor_version = HTTP2;
                    let entry = Entry::reported(req, &report, Some(arrived), &self.client);
                    self.env.service.log(&ctx, &entry);
                }
            }
        }
    }

    /// Answers a whole request at once: the service's answer is translated and queued on the
    /// stream (the h2 crate sends it as the client's windows allow). What cannot be done at
    /// once — an application's answer, a file's pieces — is returned for a task.
    fn answer(
        &self,
        parts: &http::request::Parts,
        body: &[u8],
        mut respond: SendResponse<Bytes>,
        arrived: Instant,
        routed: Option<Route<S::Target>>,
    ) -> Option<Work<S::Target>> {
        let env = &self.env;
        let mut headers: Vec<httparse::Header<'_>> = Vec::with_capacity(parts.headers.len() + 1);
        let max_headers = MAX_HEADERS.min(env.limits.max_headers);
        let request = match request_of(
            parts,
            &mut headers,
            body,
            (&self.client, self.peer),
            max_headers,
        ) {
            Ok(r) => r,
            Err(status) => {
                send_error(&mut respond, env, status);
                return None;
            }
        };
        let head_only = request.method == Method::Head;
        // Routed already when its body was read (see `with_body`), or its verifier asked.
        let routed = match routed {
            Some(route) => route,
            None => {
                let route = env.service.route(self.group, &request, false);
                if let Some(question) =
                    crate::http::ask::Question::of(route.asks(), &request, self.https)
                {
                    let asking = Asking {
                        question,
                        route,
                        respond,
                        arrived,
                    };
                    return Some(Work::Ask(Box::new(asking)));
                }
                route
            }
        };
        let ctx = match routed {
            Route::Here(ctx) => ctx,
            Route::Lend(target, ctx) => {
                let facts = ctx.logged.then(|| OwnedFacts::of(&request));
                return Some(Work::Forward(Box::new(Lending {
                    target,
                    ctx,
                    respond,
                    facts,
                    arrived,
                })));
            }
            // Not asked for (see `with_body`): a request of another pool's is misdirected.
            Route::HandOff(_) => {
                send_error(&mut respond, env, 421);
                return None;
            }
        };
        let Written {
            out,
            index,
            file,
            refused,
        } = answer_here(
            env,
            self.group,
            &ctx,
            &request,
            (arrived, &self.client, HTTP2),
        );
        if refused {
            // HTTP/2's "no answer": this stream is refused; the connection's others go on.
            respond.send_reset(h2::Reason::REFUSED_STREAM);
            return None;
        }
        let send = send_answer(&mut respond, (out, &index), file.is_some(), head_only)?;
        match (send, file) {
            (Some(send), Some(file)) if !head_only => Some(Work::File(send, file)),
            _ => None,
        }
    }

    /// A request of a proxied application: its gRPC stream lent as it is, or exchanged with
    /// the forwarder through a pipe as HTTP/3's are (see `stream_forward`).
    async fn forward(
        &self,
        request: &Request<'_>,
        body: Body<'_>,
        target: S::Target,
        ctx: &RequestCtx,
        report: &Report,
        mut respond: SendResponse<Bytes>,
    ) {
        let env = &self.env;
        let head_only = request.method == Method::Head;
        let (framing, expect_continue) = match &body {
            Body::Whole(whole) => (Framing::Length(whole.len() as u64), false),
            Body::Arriving(_, framing, expects) => (*framing, *expects),
        };
        let head = LentHead {
            framing,
            keep_alive: false,
            expect_continue,
            client: self.peer,
            client_text: &self.client,
            local: None,
            https: self.https,
            remote_user: None,
            granted: None,
            trace: None,
            client_cert: self.client_cert.as_deref(),
        };
        let lent = env.service.prepare(target, ctx, request, &head);
        if env.service.streams(&lent) {
            return self.lend_stream(lent, body, ctx, report, respond).await;
        }
        // A client that waits for 100 Continue before its body gets it from the forwarder
        // (as an HTTP/1.1 one does), turned into an informational response by `relay`.
        let (whole, mut arriving) = match body {
            Body::Whole(whole) => (whole.to_vec(), None),
            Body::Arriving(recv, ..) => (Vec::new(), Some(recv)),
        };
        let arriving = arriving.as_mut().map(|rest| Arriving {
            first: None,
            rest,
            framing,
        });
        let mut out = H2Out::answering(&mut respond);
        exchange(
            env,
            (lent, ctx, report),
            whole,
            arriving,
            &mut out,
            head_only,
        )
        .await;
    }
}
