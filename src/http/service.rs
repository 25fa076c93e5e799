//! What the engine asks of the application behind it, and what a request carries.
//!
//! Owns: the [`Service`] contract (route a request, answer it, or take its connection for a
//! while), the request's context ([`RequestCtx`], made by routing and carried to the answer
//! and the log line), what a lent connection is ([`LentConnection`]) and what every connection
//! of a thread shares ([`ConnEnv`]). Must not touch: any protocol step (that is
//! [`super::conn`] for HTTP/1.1 and [`super::h2`]) or what a service does — the engine never
//! names the proxy; a service that forwards to applications says so through
//! [`Service::Target`] and [`Service::lend`].
//!
//! Why a context and not the thread's state: one worker thread interleaves many requests
//! across `.await`s, so anything "current" kept in the thread (a last routed site) is
//! overwritten by the next request routed meanwhile. A slow proxied request of site A was once
//! logged in site B's log that way, and an HTTP/2 stream took B's HSTS line.

use super::access_log::{Entry, Report};
use super::clock::Clock;
use super::shutdown::Shutdown;
use super::{Framing, HeadLimits, Request, Responder};
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// A file body to send after the response head (large static files), with `sendfile`.
pub struct FileBody {
    pub file: Rc<std::fs::File>,
    pub offset: u64,
    pub len: u64,
}

/// What a service did with a request.
pub enum Reply {
    /// The whole response is in the output buffer.
    Done,
    /// The head is in the output buffer; this file range follows.
    File(FileBody),
    /// No answer: the connection is closed (reset where the transport allows; on HTTP/2 the
    /// stream alone is refused).
    Refuse,
}

/// The site a request was routed to, as the service numbers its sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRef(pub u32);

/// A request's own context, made by [`Service::route`] and carried with the request to its
/// answer and its log line (on HTTP/1.1 by the connection loop, on HTTP/2 by the stream's
/// task) — as nginx's request carries its location's configuration.
#[derive(Clone, Debug, Default)]
pub struct RequestCtx {
    /// The site it was routed to (`None`: no site has its host).
    pub site: Option<SiteRef>,
    /// Whether its site logs or meters its requests (only then is an entry made).
    pub logged: bool,
    /// The response chain of its site and path for its scheme, run on its answer, whoever
    /// gives it (error pages, `headers`, HSTS over TLS, `status_headers`); `None` for none.
    pub response: Option<Rc<super::response_chain::ResponseChain>>,
    /// What its site's request chain decided (run once, by [`Service::route`]): the answer
    /// reads it, never deciding again.
    pub decided: Decided,
    /// The target a rule rewrote it to (which its answer and a lent request's head use; its
    /// log line keeps the original); `None` for none.
    pub rewrite: Option<Rc<str>>,
    /// The codings its site offers, its preference first (`None`: it compresses nothing).
    pub codings: Option<Rc<[crate::compress::Coding]>>,
    /// Its slot of its client's in-flight limit, given back when the last copy of the
    /// context is dropped (the request's answer done).
    pub held: Option<Rc<crate::routing::limits::Held>>,
    /// The user its path's basic authentication let in, told to the app.
    pub user: Option<Rc<str>>,
    /// Its path's verifier, still to be asked before it is answered or lent (see
    /// [`super::ask`]); `None` once asked, or for a path without one.
    pub ask: Option<Rc<crate::routing::auth_request::AuthRequestSpec>>,
    /// What the verifier's let-in passes to the app (its identity fields).
    pub granted: Option<Rc<crate::routing::auth_request::Granted>>,
    /// Its trace (`[server.tracing]`): its hop's `traceparent` and its spans.
    pub trace: Option<Rc<super::trace::TraceCtx>>,
    /// The largest body it may carry: its path's or site's `max_body_size`, or the server's
    /// (`None` for a request no site takes: the connection's bound, [`HeadLimits`]').
    pub max_body: Option<u64>,
}

impl RequestCtx {
    /// The largest body the request may carry, `ceiling` being the connection's bound.
    pub fn body_bound(&self, ceiling: u64) -> u64 {
        self.max_body.unwrap_or(ceiling)
    }
}

/// What a site's request chain decided of a request, for its answer.
#[derive(Clone, Debug, Default)]
pub enum Decided {
    /// No site of its address has its host, and none is the default: 421.
    #[default]
    NoSite,
    /// Its site's path number `app` (the service's numbering) answers it, on the path in
    /// normal form `normal` (`None`: the target's own path is in normal form).
    App {
        app: usize,
        normal: Option<Rc<[u8]>>,
    },
    /// espalier's own answer for this status (404 for no path, 400 for a path that cannot
    /// be put in normal form, 421 for another pool's path on a connection that cannot move).
    Status(u16),
    /// A step's answer: a rule's redirect or fixed answer, a refused client's, a limited
    /// one's, a sign-in's (never a rewrite: that goes on to the route).
    Answer(Rc<crate::routing::rules::RuleOutcome>),
}

/// Where routing sends a request whose head is complete (its body not read yet).
pub enum Route<T> {
    /// The service answers it ([`Service::call`]) once its body is in.
    Here(RequestCtx),
    /// The connection is lent to `T` (an application), the body streaming there.
    Lend(T, RequestCtx),
    /// Another pool's: the connection goes there, from this request on.
    HandOff(crate::handoff::Handoff),
}

impl<T> Route<T> {
    /// Its context, where it has one (not a connection handed off).
    pub fn ctx_mut(&mut self) -> Option<&mut RequestCtx> {
        match self {
            Route::Here(ctx) | Route::Lend(_, ctx) => Some(ctx),
            Route::HandOff(_) => None,
        }
    }

    /// Its context, where it has one (not a connection handed off).
    pub fn ctx(&self) -> Option<&RequestCtx> {
        match self {
            Route::Here(ctx) | Route::Lend(_, ctx) => Some(ctx),
            Route::HandOff(_) => None,
        }
    }

    /// The verifier its path asks before it goes on (see [`super::ask`]), still to be asked.
    pub fn asks(&self) -> Option<&Rc<crate::routing::auth_request::AuthRequestSpec>> {
        self.ctx()?.ask.as_ref()
    }
}

/// What a lent request's head needs of its connection: the client, and how it framed and
/// asked for this request (and, set by the service, the user it signed in as).
#[derive(Clone, Copy)]
pub struct LentHead<'a> {
    pub framing: Framing,
    /// The connection may carry another request after this one.
    pub keep_alive: bool,
    pub expect_continue: bool,
    /// The client's address (or whom a PROXY header named), and as text ("" for none).
    pub client: Option<std::net::SocketAddr>,
    pub client_text: &'a str,
    /// The connection's own address, when known.
    pub local: Option<std::net::SocketAddr>,
    pub https: bool,
    /// The user basic authentication let in (`None` from the connection; the service sets
    /// it from the request's context).
    pub remote_user: Option<&'a str>,
    /// The subject of the client certificate the connection's handshake verified.
    pub client_cert: Option<&'a str>,
    /// The fields a verifier's let-in passes (`None` from the connection; the service sets
    /// it from the request's context).
    pub granted: Option<&'a crate::routing::auth_request::Granted>,
    /// Its trace, whose hop span the app's `traceparent` names (set by the service).
    pub trace: Option<&'a super::trace::TraceCtx>,
}

/// A connection lent by the engine for one request, given back when the answer is done.
pub struct LentConnection<'a, C> {
    pub stream: &'a mut C,
    /// Bytes received after the request head: the body's start, perhaps the next request.
    /// On return it holds only what follows the body.
    pub rbuf: &'a mut Vec<u8>,
    /// The thread's clock: its `Server`/`Date` lines head espalier's own error answers.
    pub clock: &'a Clock,
    pub max_body: u64,
    pub max_framing: usize,
    /// Between reads of the body, and for writes to the client.
    pub body_timeout: Duration,
    /// What was answered, for the access log.
    pub report: &'a Report,
    /// The response chain of the request's site and path (see [`RequestCtx::response`]).
    pub response: Option<&'a super::response_chain::ResponseChain>,
    /// A stream's: where the answer's heads go, structured (`None`: an HTTP/1.1 client's
    /// connection, which gets them as text).
    pub heads: Option<&'a super::heads::AnswerHeads>,
}

/// An HTTP/2 stream lent for its request's forwarding as a stream of its own (see
/// [`Service::lend_stream`]); its sending is `http::h2`'s.
pub struct LentStream<'a> {
    /// Its body still arriving (`None`: it had none, or it was read whole into `whole`).
    pub body: Option<h2::RecvStream>,
    pub whole: bytes::Bytes,
    /// The largest body it may carry.
    pub max_body: u64,
    pub reply: StreamReply<'a>,
    /// The thread's clock, for espalier's own answers.
    pub clock: &'a Clock,
    /// The response chain of the request's site and path.
    pub response: Option<&'a crate::http::response_chain::ResponseChain>,
}

/// The answer's way back on a lent stream.
pub struct StreamReply<'a> {
    pub(crate) respond: &'a mut h2::server::SendResponse<bytes::Bytes>,
    pub(crate) send: Option<h2::SendStream<bytes::Bytes>>,
    /// A client that opens no window for this long gets the stream reset.
    pub timeout: Duration,
    /// What was answered, for the access log.
    pub report: &'a Report,
}

/// Whether a lent connection may carry another request, and how it closes when not.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request, its body and its answer are whole: the next request may follow.
    KeepAlive,
    /// The request, its body and its answer are whole, and the connection ends (the client
    /// or the answer's framing said so): when the client said this request was its last and
    /// sent nothing after it, the close is plain, as for an answer given in the worker.
    Answered,
    /// Ended otherwise (an error, a body left unread, a tunnel): the close lingers.
    Close,
}

/// The application behind the engine: routes and answers requests.
pub trait Service {
    /// Where a lent request goes, as routing found it.
    type Target;
    /// A lent request ready to go: its head built for where it goes, its body to follow.
    type Lent;

    /// Where `req`, received on a listener of `group`, goes — decided once its head is
    /// complete. `may_hand_off`: the connection can move to another pool (a cleartext
    /// HTTP/1.1 one), when the address is shared.
    fn route(&self, group: usize, req: &Request<'_>, may_hand_off: bool) -> Route<Self::Target>;

    /// Asks the verifier of a request's path (`question`, made by [`super::ask::Question::of`]
    /// where its context says so) before it is answered or lent: `route` as it goes on once
    /// let in, or routed here with the verifier's refusal (or a 503 when it cannot say).
    fn ask(
        &self,
        _question: super::ask::Question,
        route: Route<Self::Target>,
    ) -> impl Future<Output = Route<Self::Target>> {
        async { route }
    }

    /// Answers a request routed [`Route::Here`], with its whole body, into `resp`.
    fn call(
        &self,
        group: usize,
        ctx: &RequestCtx,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply;

    /// Whether `target` must know the body's length before the body (an undeclared one is
    /// then read whole first, where the protocol allows).
    fn needs_length(&self, _target: &Self::Target) -> bool {
        false
    }

    /// Builds the lent request's head for `target`, as routing made it (`ctx`: its rewritten
    /// target, if a rule rewrote it).
    fn prepare(
        &self,
        target: Self::Target,
        ctx: &RequestCtx,
        req: &Request<'_>,
        head: &LentHead<'_>,
    ) -> Self::Lent;

    /// Answers a lent request: its body is read from, and the answer written to, `conn`.
    fn lend<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        lent: Self::Lent,
        conn: LentConnection<'_, C>,
    ) -> impl Future<Output = Outcome>;

    /// Whether a lent HTTP/2 stream goes to its app as a stream of its own
    /// ([`Self::lend_stream`]) rather than through [`Self::lend`] as an HTTP/1.1 exchange:
    /// for an app spoken to in HTTP/2, when the client takes trailers (gRPC).
    fn streams(&self, _lent: &Self::Lent) -> bool {
        false
    }

    /// Answers a lent request on its HTTP/2 stream, both ways streaming.
    fn lend_stream(&self, _lent: Self::Lent, _stream: LentStream<'_>) -> impl Future<Output = ()> {
        async {}
    }

    /// Whether requests on `group` may belong to another pool (a shared address).
    fn shared(&self, _group: usize) -> bool {
        false
    }

    /// The group of the address a handed-over connection was accepted on.
    fn group_of(&self, _addr: std::net::SocketAddr) -> Option<usize> {
        None
    }

    /// Whether a connection from `peer` on `group` starts with a PROXY protocol header (see
    /// [`super::proxy_header`]): the address says so, for every peer or for those it names.
    fn proxy_protocol(&self, _group: usize, _peer: Option<std::net::IpAddr>) -> bool {
        false
    }

    /// Which of the kernel's TLS offloads HTTPS/1.1 connections may use.
    fn ktls(&self) -> crate::os::ktls::KernelSupport {
        crate::os::ktls::KernelSupport::NONE
    }

    /// On an https address: its TLS acceptor (certificates chosen by SNI).
    fn tls(&self, _group: usize) -> Option<&tokio_rustls::TlsAcceptor> {
        None
    }

    /// On an https address with certificates ordered on demand: its held handshakes.
    fn held(&self, _group: usize) -> Option<&crate::tls::Held> {
        None
    }

    /// On a shared https address: `Some` when the name a TLS client asked for (SNI) belongs
    /// to another pool's site, before the handshake.
    fn hand_off_name(&self, _group: usize, _name: Option<&str>) -> Option<crate::handoff::Handoff> {
        None
    }

    /// On a shared address this thread serves no site of (the dispatcher's): `Some` for an
    /// HTTP/2 connection with prior knowledge (h2c), whose streams may name any host and which
    /// cannot be split — it goes whole to one pool, which answers another pool's streams 421.
    fn hand_off_h2c(&self, _group: usize) -> Option<crate::handoff::Handoff> {
        None
    }

    /// Whether some site logs its requests: only then does the engine time them.
    fn logging(&self) -> bool {
        false
    }

    /// Logs an answered request in its site's log and meters (`ctx.logged` is true).
    fn log(&self, _ctx: &RequestCtx, _entry: &Entry<'_>) {}
}

/// Timeouts of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub keepalive: Duration,
}

/// What every connection of a thread shares (single-threaded: `Rc`, never `Arc`).
pub struct ConnEnv<S> {
    pub service: S,
    pub clock: Rc<Clock>,
    pub limits: HeadLimits,
    pub timeouts: Timeouts,
    pub shutdown: Rc<Shutdown>,
    /// HTTP/2 streams being answered by a task on this thread (they may outlive their
    /// connection by a timeout): with the connections, what the thread holds memory for.
    pub streams: std::cell::Cell<usize>,
    /// The thread's io_uring, when its I/O path is the ring (`[server] io`): cleartext
    /// connections are read and written through it; TLS ones stay on tokio's epoll.
    pub ring: Option<Rc<crate::os::uring::Ring>>,
}

/// A client's address as logs and `X-Forwarded-For` write it (an IPv4-mapped IPv6 address as
/// IPv4; "" for none), formatted once per connection.
pub fn client_text(client: Option<std::net::SocketAddr>) -> String {
    client.map_or_else(String::new, |a| {
        let ip = match a.ip() {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
            v4 => v4,
        };
        ip.to_string()
    })
}
