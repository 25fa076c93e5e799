//! One HTTP/1.1 connection: read, parse every complete request in the buffer, answer them all
//! in one write, repeat — with the head, body, idle and send timeouts and a clean close.
//!
//! Owns: the connection's buffers and life cycle. Must not touch: routing and content (the
//! [`Service`] decides), or other connections (nothing here is shared across threads). A
//! request the service routes to an application pool is lent, with the connection, to
//! [`crate::proxy`] as soon as its head is parsed (its body streams there), and the connection
//! comes back when the answer allows another request.
//!
//! Syscalls per keep-alive request: one `read` (tokio skips the extra read that would return
//! EAGAIN after a short read) and one `write` per batch of pipelined responses.

use super::send::{linger_close, send_file, write_all};
pub use super::shutdown::Shutdown;
use super::shutdown::{DrainBegun, Registered};
use super::stream::ClientStream;
use super::{
    head_may_be_complete, parse_head, ChunkedDecoder, Framing, Head, HeadLimits, Method,
    ProtocolError, Request, Responder, MAX_HEADERS,
};
use crate::http::access_log::{head_len, Entry, Facts, OwnedFacts};
use crate::http::clock::Clock;
use crate::proxy::{
    forward, Addresses, FastCgiRequest, ForwardRequest, Outcome, ProxyRoute, ProxyTarget, Report,
};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The first line of HTTP/2's connection preface.
const H2_PREFACE_LINE: &[u8] = b"PRI * HTTP/2.0\r\n";

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
}

/// The site a request was routed to, as the service numbers its sites. Routing returns it,
/// and the request carries it to its answer and its log line: nothing about "the current
/// request" is looked up in the thread's state after an `.await`, when another request may
/// have been routed on the thread meanwhile (a slow proxied request of site A was once
/// logged in site B's log, and an HTTP/2 stream took B's HSTS line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRef(pub u32);

impl SiteRef {
    /// No site (an unknown host): nothing of the request goes into a site's log.
    pub const NONE: SiteRef = SiteRef(u32::MAX);
}

/// The application behind the engine: routes and answers requests.
pub trait Service {
    /// Answers `req`, received on a listener of `group`, into `resp`; with the site it was
    /// routed to.
    fn call(&self, group: usize, req: &Request<'_>, resp: &mut Responder<'_>) -> (Reply, SiteRef);

    /// Called when a request's head is complete, before its body is read: `Some` takes the
    /// request (body and answer, streamed) to an application process instead of
    /// [`Self::call`], with the site it was routed to.
    fn proxy_route(&self, _group: usize, _req: &Request<'_>) -> Option<(ProxyTarget, SiteRef)> {
        None
    }

    /// The `Strict-Transport-Security` line of `site`, when `group` is TLS and the site has
    /// `hsts`: added to its answers, the proxied apps' too.
    fn hsts_line(&self, _group: usize, _site: SiteRef) -> Option<std::rc::Rc<[u8]>> {
        None
    }

    /// Whether requests on `group` may belong to another pool (a shared address): only then
    /// is [`Self::hand_off`] asked.
    fn shared(&self, _group: usize) -> bool {
        false
    }

    /// Called when a request's head is complete on a shared address: `Some` when another
    /// pool serves it, and the connection goes there from this request on.
    fn hand_off(&self, _group: usize, _req: &Request<'_>) -> Option<crate::handoff::Handoff> {
        None
    }

    /// The group of the address a handed-over connection was accepted on.
    fn group_of(&self, _addr: std::net::SocketAddr) -> Option<usize> {
        None
    }

    /// Whether connections on `group` start with a PROXY protocol header (see
    /// [`super::proxy_header`]).
    fn proxy_protocol(&self, _group: usize) -> bool {
        false
    }

    /// On an https address: its TLS acceptor (certificates chosen by SNI).
    fn ktls(&self) -> crate::tls::kernel::KernelSupport {
        crate::tls::kernel::KernelSupport::NONE
    }

    fn tls(&self, _group: usize) -> Option<&tokio_rustls::TlsAcceptor> {
        None
    }

    /// On a shared https address: `Some` when the name a TLS client asked for (SNI) belongs
    /// to another pool's site, before the handshake.
    fn hand_off_name(&self, _group: usize, _name: Option<&str>) -> Option<crate::handoff::Handoff> {
        None
    }

    /// Whether some site logs its requests: only then does the loop measure them.
    fn logging(&self) -> bool {
        false
    }

    /// Whether `site` logs its requests (only then is a line built).
    fn wants_log(&self, _site: SiteRef) -> bool {
        false
    }

    /// Logs an answered request in `site`'s log.
    fn log(&self, _site: SiteRef, _entry: &Entry<'_>) {}
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
}

const READ_RESERVE: usize = 4096;
/// Output above this is written before more pipelined requests are answered.
const WRITE_HIGH_WATER: usize = 256 << 10;

enum Wait {
    Idle,
    Head,
    Body,
}

/// A request whose head is parsed but whose body is still arriving. It is always the first
/// request in the read buffer, so offsets are from the buffer's start.
enum Pending {
    /// A sized body: the request is complete once the buffer holds `end` bytes.
    Length { end: usize, expect_continue: bool },
    /// A chunked body: `body_len` decoded bytes follow the `head_len` bytes of the head (the
    /// framing already decoded is dropped from the buffer as it goes).
    Chunked {
        head_len: usize,
        body_len: usize,
        decoder: ChunkedDecoder,
        done: bool,
        expect_continue: bool,
    },
}

impl Pending {
    fn expect_continue(&self) -> bool {
        match self {
            Pending::Length {
                expect_continue, ..
            }
            | Pending::Chunked {
                expect_continue, ..
            } => *expect_continue,
        }
    }
}

/// Moves a pending body forward with what the buffer holds: `Ok(true)` when the request at
/// the start of the buffer can be answered (or nothing is pending), `Ok(false)` when more
/// bytes are needed.
fn advance_body(pending: &mut Option<Pending>, rbuf: &mut Vec<u8>) -> Result<bool, ProtocolError> {
    match pending {
        None => Ok(true),
        Some(Pending::Length { end, .. }) => Ok(rbuf.len() >= *end),
        Some(Pending::Chunked { done: true, .. }) => Ok(true),
        Some(Pending::Chunked {
            head_len,
            body_len,
            decoder,
            done,
            ..
        }) => {
            let start = *head_len + *body_len;
            let d = decoder.decode(&mut rbuf[start..])?;
            // The framing just decoded is dropped, so the buffer holds head + body + the rest.
            rbuf.drain(start + d.produced..start + d.consumed);
            *body_len += d.produced;
            *done = d.done;
            Ok(d.done)
        }
    }
}

/// A client's address as logs and `X-Forwarded-For` write it (an IPv4-mapped IPv6 address as
/// IPv4), formatted once per connection.
pub(crate) fn ip_text(peer: Option<std::net::SocketAddr>) -> String {
    peer.map_or_else(String::new, |a| {
        let ip = match a.ip() {
            std::net::IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4),
            v4 => v4,
        };
        ip.to_string()
    })
}

/// The status code of a response written at the start of `out` (`HTTP/1.1 200 …`).
fn status_of(out: &[u8]) -> u16 {
    out.get(9..12)
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// A request taken by an application pool: its head consumed, its body still to come.
enum Proxied {
    Http(Rc<ProxyRoute>, ForwardRequest),
    FastCgi(Rc<ProxyRoute>, FastCgiRequest),
}

/// Whether a request that failed to parse was a HEAD request (its error has no body).
fn is_head(buf: &[u8]) -> bool {
    buf.starts_with(b"HEAD ")
}

/// Serves one connection until it closes (or is handed to another pool). `carried` is what a
/// handed-over connection brings: bytes already read from it, served first, and its hops.
pub async fn serve<S: Service + 'static, C: ClientStream>(
    mut stream: C,
    group: usize,
    env: Rc<ConnEnv<S>>,
    carried: crate::handoff::Carried,
) {
    let fd = stream.socket().as_raw_fd();
    let idle = env.shutdown.register(fd);
    let _registered = Registered {
        shutdown: &env.shutdown,
        fd,
    };
    let mut rbuf: Vec<u8> = carried.unread;
    // Hand-offs in a row without an answer given here (see `handoff::MAX_HOPS`).
    let mut hops = carried.hops;
    if rbuf.capacity() < READ_RESERVE {
        rbuf.reserve(READ_RESERVE - rbuf.len());
    }
    // The client: the peer, or whom a load balancer's PROXY header named (see `accept`).
    let client = carried.client.or_else(|| stream.socket().peer_addr().ok());
    let https = stream.cleartext().is_none();
    // Formatted once per connection, for the logs, the apps and the dynamic page.
    let client_text = ip_text(client);
    // Decided once per connection: an address served by one pool never looks for a hand-off.
    // A TLS connection cannot change hands (its state is in this process): its pool was
    // chosen by the handshake's name, and a request naming another pool's host is the
    // service's to refuse (421), as over HTTP/2.
    let shared = env.service.shared(group) && stream.cleartext().is_some();
    let mut wbuf: Vec<u8> = Vec::with_capacity(READ_RESERVE);
    let sleep = tokio::time::sleep_until(env.clock.now() + env.timeouts.keepalive);
    tokio::pin!(sleep);
    let mut armed = sleep.deadline();
    // When the request now in the buffer began arriving.
    let mut request_started = env.clock.now();
    let mut continue_sent = false;
    let mut pending: Option<Pending> = None;
    // No request has been parsed yet on this connection (only then may it be h2c).
    let mut fresh = true;
    // Bytes of a partial head (at the buffer's start) already parsed without completing it.
    let mut head_scanned = 0;
    // The connection's own address, asked of the kernel once, when a request first needs it.
    let mut local: Option<Option<std::net::SocketAddr>> = None;
    // Access logs: measured only when a site of this thread logs.
    let logging = env.service.logging();
    let mut arrived: Option<std::time::Instant> =
        (logging && !rbuf.is_empty()).then(std::time::Instant::now);

    loop {
        // Answer every complete request already received.
        let mut consumed = 0;
        let mut close = false;
        let mut file = None;
        let mut wait = Wait::Idle;
        // A chunked head was just parsed: decode its body before reading more.
        let mut decode_now = false;
        // A request taken by a proxied app: its head is consumed, its body follows.
        let mut proxied: Option<Proxied> = None;
        let mut proxied_facts: Option<(SiteRef, OwnedFacts)> = None;
        let mut proxied_fields: Option<Rc<[u8]>> = None;
        // The request at `consumed` belongs to another pool: the connection goes there.
        let mut handoff: Option<crate::handoff::Handoff> = None;
        // The connection opened with HTTP/2's preface (h2c).
        let mut h2c = false;
        match advance_body(&mut pending, &mut rbuf) {
            Ok(true) => {}
            Ok(false) => wait = Wait::Body,
            Err(e) => {
                let common = env.clock.common();
                Responder::new(&mut wbuf, &common, false, 1, is_head(&rbuf)).error(e.status());
                close = true;
            }
        }
        if pending.is_none()
            && head_scanned > 0
            && !head_may_be_complete(&rbuf, head_scanned, &env.limits)
        {
            wait = Wait::Head;
        }
        if matches!(wait, Wait::Idle) && !close {
            let common = env.clock.common();
            while consumed < rbuf.len() {
                let mut headers: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
                    [const { MaybeUninit::uninit() }; MAX_HEADERS];
                let head = match parse_head(&rbuf[consumed..], &env.limits, &mut headers) {
                    Ok(h) => h,
                    // HTTP/2's connection preface where the first request should be: h2c
                    // with prior knowledge (RFC 9113 §3.3), taken on a cleartext connection.
                    Err(_) if fresh && consumed == 0 && rbuf.starts_with(H2_PREFACE_LINE) => {
                        h2c = true;
                        break;
                    }
                    Err(e) => {
                        let head_only = is_head(&rbuf[consumed..]);
                        Responder::new(&mut wbuf, &common, false, 1, head_only).error(e.status());
                        close = true;
                        break;
                    }
                };
                fresh = false;
                let Head::Complete {
                    mut request,
                    len,
                    framing,
                    keep_alive,
                    expect_continue,
                } = head
                else {
                    wait = Wait::Head;
                    head_scanned = rbuf.len() - consumed;
                    break;
                };
                head_scanned = 0;
                request.client = &client_text;
                if shared {
                    if let Some(h) = env.service.hand_off(group, &request) {
                        handoff = Some(h);
                        break;
                    }
                }
                if let Some((target, site)) = env.service.proxy_route(group, &request) {
                    proxied_fields = env.service.hsts_line(group, site);
                    if logging && env.service.wants_log(site) {
                        proxied_facts = Some((site, OwnedFacts::of(&request)));
                    }
                    let keep = keep_alive && !env.shutdown.started.get() && stream.may_keep_alive();
                    proxied = Some(match target {
                        ProxyTarget::Http(route) => Proxied::Http(
                            route,
                            ForwardRequest::new(
                                &request,
                                framing,
                                keep,
                                expect_continue,
                                Some(client_text.as_str()).filter(|p| !p.is_empty()),
                                if https { "https" } else { "http" },
                            ),
                        ),
                        ProxyTarget::FastCgi(route, script) => {
                            let local =
                                *local.get_or_insert_with(|| stream.socket().local_addr().ok());
                            Proxied::FastCgi(
                                route,
                                FastCgiRequest::new(
                                    &request,
                                    &script,
                                    framing,
                                    keep,
                                    expect_continue,
                                    &Addresses {
                                        peer: client,
                                        local,
                                        https,
                                    },
                                ),
                            )
                        }
                    });
                    consumed += len;
                    break;
                }
                let body_start = consumed + len;
                let body_end = match framing {
                    Framing::None => body_start,
                    Framing::Length(n) => {
                        // n is within max_body_size; the sum is checked all the same.
                        let Some(end) = usize::try_from(n)
                            .ok()
                            .and_then(|n| body_start.checked_add(n))
                        else {
                            Responder::new(&mut wbuf, &common, false, 1, false)
                                .error(ProtocolError::BodyTooLarge.status());
                            close = true;
                            break;
                        };
                        if rbuf.len() < end {
                            pending = Some(Pending::Length {
                                end: end - consumed,
                                expect_continue,
                            });
                            wait = Wait::Body;
                            break;
                        }
                        end
                    }
                    Framing::Chunked => match &pending {
                        Some(Pending::Chunked {
                            done: true,
                            body_len,
                            ..
                        }) => body_start + body_len,
                        _ => {
                            pending = Some(Pending::Chunked {
                                head_len: len,
                                body_len: 0,
                                decoder: ChunkedDecoder::new(&env.limits),
                                done: false,
                                expect_continue,
                            });
                            decode_now = true;
                            break;
                        }
                    },
                };
                pending = None;
                request.body = &rbuf[body_start..body_end];
                let keep = keep_alive && !env.shutdown.started.get() && stream.may_keep_alive();
                let answer_start = wbuf.len();
                let mut resp = Responder::new(
                    &mut wbuf,
                    &common,
                    keep,
                    request.minor_version,
                    request.method == Method::Head,
                );
                let (reply, site) = env.service.call(group, &request, &mut resp);
                if logging && env.service.wants_log(site) {
                    let file_len = match &reply {
                        Reply::File(f) => f.len,
                        Reply::Done => 0,
                    };
                    env.service.log(
                        site,
                        &Entry {
                            req: Facts::of(&request),
                            status: status_of(&wbuf[answer_start..]),
                            bytes: (wbuf.len() - answer_start - head_len(&wbuf[answer_start..]))
                                as u64
                                + file_len,
                            micros: arrived.map_or(0, |a| a.elapsed().as_micros() as u64),
                            upstream_micros: None,
                            peer: &client_text,
                        },
                    );
                }
                consumed = body_end;
                continue_sent = false;
                request_started = env.clock.now();
                if let Reply::File(f) = reply {
                    file = Some(f);
                }
                if !keep {
                    close = true;
                    break;
                }
                if file.is_some() || wbuf.len() > WRITE_HIGH_WATER {
                    break;
                }
            }
        }
        if h2c {
            match stream.into_tcp() {
                Ok(tcp) => {
                    let replay = super::sni::Rewind::new(std::mem::take(&mut rbuf), tcp);
                    let carried = crate::handoff::Carried {
                        client,
                        header_read: true,
                        ..Default::default()
                    };
                    // HTTP/2 has its own graceful stop (GOAWAY on `shutdown.notify`).
                    let env = Rc::clone(&env);
                    return Box::pin(super::h2::serve(replay, group, env, carried, false)).await;
                }
                Err(tls) => return linger_close(tls, &env).await,
            }
        }
        if matches!(wait, Wait::Body)
            && !close
            && !continue_sent
            && pending.as_ref().is_some_and(Pending::expect_continue)
        {
            wbuf.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            continue_sent = true;
        }
        if consumed > 0 {
            rbuf.drain(..consumed);
        }
        if !wbuf.is_empty() {
            if write_all(&mut stream, &wbuf, &env).await.is_err() {
                return;
            }
            wbuf.clear();
        }
        if let Some(mut handoff) = handoff {
            // Answers to the requests before it are written; the rest of the buffer starts
            // with its head. Our descriptor closes on return, without a shutdown: the
            // connection lives on in the receiver.
            if consumed > 0 {
                hops = 0;
            }
            handoff.hops = hops + 1;
            handoff.client = client;
            // Always cleartext here (`shared` is false over TLS).
            if let Some(tcp) = stream.cleartext() {
                if handoff.hops <= crate::handoff::MAX_HOPS && handoff.send(tcp, &rbuf).await {
                    return;
                }
            }
            let common = env.clock.common().clone();
            Responder::new(&mut wbuf, &common, false, 1, is_head(&rbuf)).unavailable();
            let _ = write_all(&mut stream, &wbuf, &env).await;
            linger_close(stream, &env).await;
            return;
        }
        if consumed > 0 || proxied.is_some() {
            // A request was answered here: the hand-offs so far were not a loop.
            hops = 0;
        }
        if let Some(proxied) = proxied {
            let report = Report::default();
            let client = crate::proxy::Client {
                stream: &mut stream,
                rbuf: &mut rbuf,
                clock: &env.clock,
                max_body: env.limits.max_body_size,
                max_framing: env.limits.max_header_size,
                body_timeout: env.timeouts.body,
                report: &report,
                added_fields: proxied_fields.as_deref().unwrap_or_default(),
            };
            // Boxed: the forwarding state lives on the heap only while a request is proxied,
            // so a connection that serves files keeps a small future.
            let outcome = match proxied {
                Proxied::Http(route, fwd) => Box::pin(forward(client, fwd, &route)).await,
                Proxied::FastCgi(route, fwd) => {
                    Box::pin(crate::proxy::fastcgi::forward(client, fwd, &route)).await
                }
            };
            if let Some((site, facts)) = &proxied_facts {
                env.service.log(
                    *site,
                    &Entry {
                        req: facts.facts(),
                        status: report.status.get(),
                        bytes: report.bytes.get().saturating_sub(report.head.get()),
                        micros: arrived.map_or(0, |a| a.elapsed().as_micros() as u64),
                        upstream_micros: report.upstream_micros.get(),
                        peer: &client_text,
                    },
                );
            }
            if outcome == Outcome::Close {
                linger_close(stream, &env).await;
                return;
            }
            request_started = env.clock.now();
            continue;
        }
        if let Some(f) = file {
            if f.len >= super::ktls::OFFLOAD_MIN_FILE {
                stream = stream.offloaded(env.service.ktls(), &mut rbuf);
            }
            if send_file(&mut stream, f, &env).await.is_err() {
                return;
            }
            if !close {
                continue;
            }
        }
        if close {
            linger_close(stream, &env).await;
            return;
        }
        if decode_now || (consumed > 0 && !rbuf.is_empty() && matches!(wait, Wait::Idle)) {
            continue;
        }

        // Wait for more bytes, bounded by the timeout of the state we are in. Draining, a
        // connection waiting for its next request waits a moment more for it (it is answered
        // with `Connection: close`), then closes.
        if rbuf.is_empty() && pending.is_none() {
            wait = Wait::Idle;
        }
        let deadline = match wait {
            Wait::Idle => {
                let kept = env.clock.now() + env.timeouts.keepalive;
                env.shutdown
                    .idle_until()
                    .map_or(kept, |until| until.min(kept))
            }
            Wait::Head => request_started + env.timeouts.header,
            Wait::Body => request_started + env.timeouts.header + env.timeouts.body,
        };
        if deadline != armed {
            sleep.as_mut().reset(deadline);
            armed = deadline;
        }
        let was_empty = rbuf.is_empty() && pending.is_none();
        if rbuf.capacity() - rbuf.len() < READ_RESERVE / 4 {
            rbuf.reserve(READ_RESERVE);
        }
        let drain = DrainBegun {
            shutdown: &env.shutdown,
            wait: &idle,
        };
        tokio::select! {
            biased;
            r = stream.read_buf(&mut rbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if was_empty {
                        request_started = env.clock.now();
                        if logging {
                            arrived = Some(std::time::Instant::now());
                        }
                    }
                }
            },
            // The drain began while this connection waited: wait again, with its deadline.
            () = drain, if was_empty && !env.shutdown.started.get() => {}
            _ = &mut sleep => {
                if !rbuf.is_empty() || pending.is_some() {
                    let common = env.clock.common().clone();
                    Responder::new(&mut wbuf, &common, false, 1, false).error(ProtocolError::Timeout.status());
                    let _ = write_all(&mut stream, &wbuf, &env).await;
                    linger_close(stream, &env).await;
                }
                return;
            }
        }
    }
}
