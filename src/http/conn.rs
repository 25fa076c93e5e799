//! One HTTP/1.1 connection: read, parse every complete request in the buffer, answer them all
//! in one write, repeat — with the head, body, idle and send timeouts and a clean close.
//!
//! Owns: the connection's buffers and life cycle, as a state ([`Connection`]) moved by named
//! steps: [`Connection::answer_batch`] frames bodies and answers every complete request the
//! buffer holds, and says in one [`Step`] what comes next — read more ([`Connection::wait`]),
//! send a file, lend the connection to what the service routed a request to
//! ([`Connection::lend`]: an application, its body streaming there), hand it to another pool
//! ([`Connection::hand_off`]), turn to HTTP/2 (h2c), or close (those three in `leave`; a
//! body's framing in `framing`; a request answered here, `here`), or first ask a path's
//! verifier (see [`super::ask`]). Must not touch: routing and
//! content (the [`Service`] decides; the engine never names the proxy), or other connections
//! (nothing here is shared across threads).
//!
//! A request's context ([`RequestCtx`]: its site, log, added fields) is made by routing and
//! carried with the request through every step — never kept in the thread (see
//! [`super::service`]); for a request whose body arrives after its head, in the connection's
//! `Reading` until the body is whole, so that its chain runs once.
//!
//! Syscalls per keep-alive request on tokio's epoll: one `read` (tokio skips the extra read
//! that would return EAGAIN after a short read) and one `write` per batch of pipelined
//! responses. On the thread's io_uring (`crate::os::uring::RingSocket`) none of its own: the
//! read is a multishot receive's buffer, the write joins the loop turn's one submission.

use super::access_log::{Entry, OwnedFacts, Report};
use super::body::{advance_body, Pending};
use super::send::{send_file, write_all};
use super::service::{
    client_text, ConnEnv, FileBody, LentConnection, LentHead, Outcome, Reply, RequestCtx, Route,
    Service,
};
pub use super::shutdown::Shutdown;
use super::shutdown::{DrainBegun, IdleWait, Registered};
use super::stream::ClientStream;
use super::{
    head_may_be_complete, parse_head, Framing, Head, ProtocolError, Responder, MAX_HEADERS,
};
use framing::{frame, Unframed};
use here::answer_here;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, Sleep};

/// The first line of HTTP/2's connection preface.
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

const READ_RESERVE: usize = 4096;
/// Output above this is written before more pipelined requests are answered.
const WRITE_HIGH_WATER: usize = 256 << 10;

/// What the connection waits for when it reads: each has its own deadline.
#[derive(Clone, Copy)]
enum Wait {
    Idle,
    Head,
    Body,
}

/// How waiting for bytes ended.
enum Waited {
    /// Bytes came (or the wait must begin again).
    Read,
    /// The client closed, or an idle connection's time is up.
    Gone,
    /// A request did not arrive whole in time: 408, then close.
    Late,
}

/// What the connection does after a batch of answers is written.
enum Step<L> {
    /// Read more bytes.
    Read(Wait),
    /// Answer again without reading: requests remain in the buffer.
    Again,
    /// Send this file range after the head; then close if `close`.
    File(FileBody, bool),
    /// Lend the connection to what the service routed the request to (its head is
    /// consumed, its body follows in the buffer and on the socket). Boxed: a step is returned
    /// for every request, and a lent request's head is large; only a lent one pays for it.
    Lend(Box<Lending<L>>),
    /// The request at the buffer's start belongs to another pool: the connection goes there.
    HandOff(crate::handoff::Handoff),
    /// Ask the verifier of the request at the buffer's start, then answer it again (its route,
    /// kept in the connection, runs its chain once).
    Ask(Box<super::ask::Question>),
    /// The connection opened with HTTP/2's preface (h2c with prior knowledge).
    H2c,
    /// Close (after what was answered, an error perhaps).
    Close,
    /// Close with a reset, the request unanswered (refused).
    Reset,
}

/// A request lent with its connection, and what its log line will want.
struct Lending<L> {
    lent: L,
    ctx: RequestCtx,
    facts: Option<OwnedFacts>,
    /// The request said it was the client's last (see [`Connection::close`]).
    said_last: bool,
}

/// Who is at the other end, asked of the kernel at most once.
struct Peer {
    /// The client: the peer, or whom a load balancer's PROXY header named (see `accept`).
    addr: Option<SocketAddr>,
    /// Its address as logs, apps and the dynamic page write it.
    text: String,
    /// The connection's own address, asked when a request first needs it.
    local: std::cell::Cell<Option<Option<SocketAddr>>>,
    https: bool,
    /// The subject of its verified client certificate, if it gave one.
    client_cert: Option<String>,
}

impl Peer {
    /// The connection's own address, asked of the kernel the first time only.
    fn local_addr(&self, socket: socket2::SockRef<'_>) -> Option<SocketAddr> {
        if let Some(local) = self.local.get() {
            return local;
        }
        let local = socket.local_addr().ok().and_then(|a| a.as_socket());
        self.local.set(Some(local));
        local
    }
}

/// Where reading a request stands between reads.
struct Reading {
    /// A request whose head is parsed and whose body is still arriving.
    pending: Option<Pending>,
    /// Bytes of a partial head (at the buffer's start) already parsed without completing it.
    head_scanned: usize,
    /// No request has been parsed yet on this connection (only then may it be h2c).
    fresh: bool,
    /// `100 Continue` was sent for the pending request.
    continue_sent: bool,
    /// When the request now in the buffer began arriving (its head and body deadlines).
    started: Instant,
    /// The same, for the access log (timed only when a site of the thread logs).
    arrived: Option<std::time::Instant>,
    /// The pending request's context, routed when its head first came: its head is parsed
    /// again as its body arrives (the buffer may move), but its chain runs once — a second
    /// run spent a second rate-limit token and hashed its password again.
    routed: Option<RequestCtx>,
}

/// One HTTP/1.1 connection's state.
struct Connection<S: Service, C> {
    stream: C,
    env: Rc<ConnEnv<S>>,
    group: usize,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    peer: Peer,
    reading: Reading,
    /// A TLS connection cannot change hands (its state is in this process): its pool was
    /// chosen by the handshake's name, and a request naming another pool's host is the
    /// service's to refuse (421). Whether the address is shared is the service's to know.
    may_hand_off: bool,
    /// Hand-offs in a row without an answer given here (see `handoff::MAX_HOPS`).
    hops: u8,
    /// Some site of the thread logs: requests are timed.
    logging: bool,
    /// The deadline the timer is set to.
    armed: Instant,
    /// The last request said it was the last (`Connection: close`, or HTTP/1.0 without
    /// keep-alive) and nothing followed it: see [`Connection::close`].
    client_ended: bool,
    /// The route of the request at the buffer's start, kept across its verifier's asking.
    asked: Option<Route<S::Target>>,
}

/// Whether a request that failed to parse was a HEAD request (its error has no body).
fn is_head(buf: &[u8]) -> bool {
    buf.starts_with(b"HEAD ")
}

/// Serves one connection until it closes (or is handed to another pool). `carried` is what a
/// handed-over connection brings: bytes already read from it, served first, and its hops.
pub async fn serve<S: Service + 'static, C: ClientStream>(
    stream: C,
    group: usize,
    env: Rc<ConnEnv<S>>,
    carried: crate::handoff::Carried,
) {
    let fd = stream.sock().as_raw_fd();
    let idle = env.shutdown.register(fd);
    let _registered = Registered {
        shutdown: &env.shutdown,
        fd,
    };
    let mut conn = Connection::new(stream, group, Rc::clone(&env), carried);
    let sleep = tokio::time::sleep_until(conn.armed);
    tokio::pin!(sleep);
    loop {
        let step = conn.answer_batch();
        if !conn.flush().await {
            return;
        }
        match step {
            Step::Read(wait) => match conn.wait(wait, sleep.as_mut(), &idle).await {
                Waited::Read => {}
                Waited::Gone => return,
                Waited::Late => {
                    conn.error(ProtocolError::Timeout.status(), false);
                    if conn.flush().await {
                        conn.close().await;
                    }
                    return;
                }
            },
            Step::Again => {}
            Step::File(file, close) => {
                conn = conn.offloaded_for(&file);
                if send_file(&mut conn.stream, file, &env).await.is_err() {
                    return;
                }
                if close {
                    return conn.close().await;
                }
            }
            Step::Lend(lending) => {
                if !conn.lend(lending).await {
                    return conn.close().await;
                }
            }
            Step::HandOff(handoff) => return conn.hand_off(handoff).await,
            Step::Ask(question) => {
                // Boxed: a connection's future would otherwise carry the asking's whole,
                // on every connection, of every site.
                if let Some(route) = conn.asked.take() {
                    conn.asked = Some(Box::pin(env.service.ask(*question, route)).await);
                }
            }
            Step::H2c => return conn.h2c().await,
            Step::Close => return conn.close().await,
            Step::Reset => return conn.reset(),
        }
    }
}

impl<S: Service + 'static, C: ClientStream> Connection<S, C> {
    fn new(stream: C, group: usize, env: Rc<ConnEnv<S>>, carried: crate::handoff::Carried) -> Self {
        let mut rbuf = carried.unread;
        if rbuf.capacity() < READ_RESERVE {
            rbuf.reserve(READ_RESERVE - rbuf.len());
        }
        let addr = carried
            .client
            .or_else(|| stream.sock().peer_addr().ok().and_then(|a| a.as_socket()));
        let https = stream.is_tls();
        let logging = env.service.logging();
        let now = env.clock.now();
        Connection {
            may_hand_off: !https,
            peer: Peer {
                addr,
                text: client_text(addr),
                local: std::cell::Cell::new(None),
                https,
                client_cert: carried.client_cert,
            },
            reading: Reading {
                pending: None,
                head_scanned: 0,
                fresh: true,
                continue_sent: false,
                started: now,
                arrived: (logging && !rbuf.is_empty()).then(std::time::Instant::now),
                routed: None,
            },
            armed: now + env.timeouts.keepalive,
            client_ended: false,
            asked: None,
            wbuf: Vec::with_capacity(READ_RESERVE),
            hops: carried.hops,
            logging,
            rbuf,
            stream,
            group,
            env,
        }
    }

    /// Frames the pending body, then answers every complete request in the buffer into the
    /// output buffer, and says what comes next.
    fn answer_batch(&mut self) -> Step<S::Lent> {
        match advance_body(&mut self.reading.pending, &mut self.rbuf) {
            Ok(true) => {}
            Ok(false) => return self.wait_for_body(),
            Err(e) => {
                self.error(e.status(), is_head(&self.rbuf));
                return Step::Close;
            }
        }
        let r = &self.reading;
        if r.pending.is_none()
            && r.head_scanned > 0
            && !head_may_be_complete(&self.rbuf, r.head_scanned, &self.env.limits)
        {
            return Step::Read(Wait::Head);
        }
        let mut consumed = 0;
        let step = loop {
            if consumed == self.rbuf.len() {
                break Step::Read(Wait::Idle);
            }
            match self.answer_one(consumed) {
                (next, None) => consumed = next,
                (next, Some(step)) => {
                    consumed = next;
                    break step;
                }
            }
        };
        if consumed > 0 {
            self.rbuf.drain(..consumed);
            // A request was answered here (or lent): the hand-offs so far were not a loop.
            self.hops = 0;
        }
        match step {
            Step::Read(Wait::Body) => self.wait_for_body(),
            step => step,
        }
    }

    /// A request's body is still arriving: `100 Continue` once, if its client waits for it.
    fn wait_for_body(&mut self) -> Step<S::Lent> {
        let r = &mut self.reading;
        if !r.continue_sent && r.pending.as_ref().is_some_and(Pending::expect_continue) {
            self.wbuf
                .extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            r.continue_sent = true;
        }
        Step::Read(Wait::Body)
    }

    /// Parses and answers (or routes away) the request at `at`: where the next one starts,
    /// and the step that ends the batch, if this one does.
    fn answer_one(&mut self, at: usize) -> (usize, Option<Step<S::Lent>>) {
        let mut headers: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
            [const { MaybeUninit::uninit() }; MAX_HEADERS];
        let head = match parse_head(&self.rbuf[at..], &self.env.limits, &mut headers) {
            Ok(h) => h,
            // HTTP/2's connection preface where the first request should be: h2c with prior
            // knowledge (RFC 9113 §3.3), taken on a cleartext connection.
            Err(_) if self.reading.fresh && at == 0 && self.rbuf.starts_with(H2_PREFACE_LINE) => {
                return (at, Some(Step::H2c));
            }
            Err(e) => {
                let head_only = is_head(&self.rbuf[at..]);
                let common = self.env.clock.common();
                Responder::new(&mut self.wbuf, &common, false, 1, head_only).error(e.status());
                return (at, Some(Step::Close));
            }
        };
        self.reading.fresh = false;
        let Head::Complete {
            mut request,
            len,
            framing,
            keep_alive,
            expect_continue,
        } = head
        else {
            self.reading.head_scanned = self.rbuf.len() - at;
            return (at, Some(Step::Read(Wait::Head)));
        };
        self.reading.head_scanned = 0;
        request.client = &self.peer.text;
        request.client_ip = self.peer.addr.map(|a| a.ip());
        let keep = keep_alive && !self.env.shutdown.started.get() && self.stream.may_keep_alive();
        let route = match (self.reading.routed.take(), self.asked.take()) {
            (Some(ctx), _) => Route::Here(ctx),
            (None, Some(asked)) => asked,
            (None, None) => {
                let route = (self.env.service).route(self.group, &request, self.may_hand_off);
                if let Some(q) = super::ask::Question::of(route.asks(), &request, self.peer.https) {
                    self.asked = Some(route);
                    return (at, Some(Step::Ask(Box::new(q))));
                }
                route
            }
        };
        let ctx = match route {
            Route::Here(ctx) => ctx,
            Route::HandOff(handoff) => return (at, Some(Step::HandOff(handoff))),
            Route::Lend(target, ctx) => {
                // A body declared over its path's bound is refused before the app sees any of
                // it; one undeclared is bounded by the forwarder's chunked decoder.
                if matches!(framing, Framing::Length(n) if n > ctx.body_bound(self.env.limits.max_body_size))
                {
                    self.error(ProtocolError::BodyTooLarge.status(), false);
                    return (at, Some(Step::Close));
                }
                let head = LentHead {
                    framing,
                    keep_alive: keep,
                    expect_continue,
                    client: self.peer.addr,
                    local: self.peer.local_addr(self.stream.sock()),
                    client_text: &self.peer.text,
                    https: self.peer.https,
                    remote_user: None,
                    granted: None,
                    trace: None,
                    client_cert: self.peer.client_cert.as_deref(),
                };
                let lending = Lending {
                    lent: self.env.service.prepare(target, &ctx, &request, &head),
                    facts: ctx.logged.then(|| OwnedFacts::of(&request)),
                    ctx,
                    said_last: !keep_alive,
                };
                return (at + len, Some(Step::Lend(Box::new(lending))));
            }
        };
        let body_end = match frame(
            &mut self.reading.pending,
            &self.rbuf,
            (at, len),
            framing,
            expect_continue,
            (
                ctx.body_bound(self.env.limits.max_body_size),
                self.env.limits.max_header_size,
            ),
        ) {
            Ok(end) => end,
            Err(Unframed::Arriving) => {
                self.reading.routed = Some(ctx);
                return (at, Some(Step::Read(Wait::Body)));
            }
            Err(Unframed::Chunked) => {
                self.reading.routed = Some(ctx);
                return (at, Some(Step::Again));
            }
            Err(Unframed::TooLarge) => {
                self.error(ProtocolError::BodyTooLarge.status(), false);
                return (at, Some(Step::Close));
            }
        };
        request.body = &self.rbuf[at + len..body_end];
        let timed = self.logging.then_some(self.reading.arrived);
        let reply = answer_here(
            &self.env,
            self.group,
            &mut self.wbuf,
            &ctx,
            &request,
            keep,
            timed,
        );
        self.reading.continue_sent = false;
        self.reading.started = self.env.clock.now();
        self.client_ended = !keep_alive && body_end == self.rbuf.len();
        let step = match reply {
            Reply::File(f) => Some(Step::File(f, !keep)),
            Reply::Refuse => Some(Step::Reset),
            Reply::Done if !keep => Some(Step::Close),
            // Written before more pipelined requests are answered.
            Reply::Done if self.wbuf.len() > WRITE_HIGH_WATER => Some(Step::Again),
            Reply::Done => None,
        };
        (body_end, step)
    }

    /// Writes what was answered; false when the client is gone.
    async fn flush(&mut self) -> bool {
        if self.wbuf.is_empty() {
            return true;
        }
        let ok = write_all(&mut self.stream, &self.wbuf, &self.env)
            .await
            .is_ok();
        self.wbuf.clear();
        ok
    }

    /// An error answer that ends the connection.
    fn error(&mut self, status: u16, head_only: bool) {
        let common = self.env.clock.common();
        Responder::new(&mut self.wbuf, &common, false, 1, head_only).error(status);
    }

    /// Waits for more bytes, bounded by the timeout of what it waits for. Draining, a connection waiting
    /// for its next request waits a moment more for it (it is answered with `Connection:
    /// close`), then closes.
    async fn wait(&mut self, wait: Wait, mut sleep: Pin<&mut Sleep>, idle: &IdleWait) -> Waited {
        let was_empty = self.rbuf.is_empty() && self.reading.pending.is_none();
        let wait = if was_empty { Wait::Idle } else { wait };
        let timeouts = &self.env.timeouts;
        let deadline = match wait {
            Wait::Idle => {
                let kept = self.env.clock.now() + timeouts.keepalive;
                let until = self.env.shutdown.idle_until();
                until.map_or(kept, |until| until.min(kept))
            }
            Wait::Head => self.reading.started + timeouts.header,
            Wait::Body => self.reading.started + timeouts.header + timeouts.body,
        };
        if deadline != self.armed {
            sleep.as_mut().reset(deadline);
            self.armed = deadline;
        }
        if self.rbuf.capacity() - self.rbuf.len() < READ_RESERVE / 4 {
            self.rbuf.reserve(READ_RESERVE);
        }
        let drain = DrainBegun {
            shutdown: &self.env.shutdown,
            wait: idle,
        };
        tokio::select! {
            biased;
            r = self.stream.read_buf(&mut self.rbuf) => match r {
                Ok(0) | Err(_) => Waited::Gone,
                Ok(_) => {
                    if was_empty {
                        self.reading.started = self.env.clock.now();
                        if self.logging {
                            self.reading.arrived = Some(std::time::Instant::now());
                        }
                    }
                    Waited::Read
                }
            },
            // The drain began while this connection waited: wait again, with its deadline.
            () = drain, if was_empty && !self.env.shutdown.started.get() => Waited::Read,
            _ = sleep => if was_empty { Waited::Gone } else { Waited::Late },
        }
    }

    /// Lends the connection to what the request was routed to, until its answer is done; then
    /// logs it. Whether the connection may carry another request.
    async fn lend(&mut self, lending: Box<Lending<S::Lent>>) -> bool {
        let lending = *lending;
        let report = Report::default();
        let env = &self.env;
        let conn = LentConnection {
            stream: &mut self.stream,
            rbuf: &mut self.rbuf,
            clock: &env.clock,
            max_body: lending.ctx.body_bound(env.limits.max_body_size),
            max_framing: env.limits.max_header_size,
            body_timeout: env.timeouts.body,
            report: &report,
            response: lending.ctx.response.as_deref(),
            heads: None,
        };
        // Boxed: the forwarding state lives on the heap only while a request is lent, so a
        // connection that serves files keeps a small future.
        let outcome = Box::pin(env.service.lend(lending.lent, conn)).await;
        if let Some(facts) = &lending.facts {
            let entry = Entry::reported(
                facts.facts(),
                &report,
                self.reading.arrived,
                &self.peer.text,
            );
            env.service.log(&lending.ctx, &entry);
        }
        self.reading.started = env.clock.now();
        // What follows the body is all `rbuf` holds now.
        self.client_ended =
            outcome == Outcome::Answered && lending.said_last && self.rbuf.is_empty();
        outcome == Outcome::KeepAlive
    }

    /// Before a large file: the connection's TLS handed to the kernel where it may be, so the
    /// file goes by `sendfile`.
    fn offloaded_for(mut self, file: &FileBody) -> Self {
        if file.len >= super::ktls::OFFLOAD_MIN_FILE {
            self.stream = self
                .stream
                .offloaded(self.env.service.ktls(), &mut self.rbuf);
        }
        self
    }
}

mod framing;
mod here;
mod leave;
