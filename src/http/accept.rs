//! A new connection's steps before HTTP: the PROXY protocol header, where its address expects
//! one (it comes first, before any TLS), then on an https address the ClientHello's name
//! (where it picks the pool, or a certificate ordered on demand is waited for: see
//! `crate::tls::on_demand`) and the TLS handshake, then the
//! connection loop ([`super::conn::serve`]) over whichever stream results — moved onto the
//! thread's io_uring when the thread has one (cleartext, or TLS by rustls; a connection the
//! kernel's TLS may take stays on tokio's socket).
//!
//! Owns: that order, each step bounded by the header timeout. Must not touch: HTTP, or the
//! certificates (the service's TLS acceptor holds them, see `crate::tls`).

use super::conn::serve;
use super::service::{ConnEnv, Service};
use super::sni::Rewind;
use crate::handoff::Carried;
use crate::os::uring::RingSocket;
use std::rc::Rc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// An accepted socket: in tokio's epoll already (accepted there), or in no event loop yet
/// (accepted on the ring, or handed over) — then a connection that goes on the ring never
/// enters epoll (an `epoll_ctl` to add it and one to take it out saved).
pub enum Accepted {
    Registered(TcpStream),
    Unregistered(std::net::TcpStream),
}

impl Accepted {
    pub fn socket(&self) -> socket2::SockRef<'_> {
        match self {
            Accepted::Registered(s) => socket2::SockRef::from(s),
            Accepted::Unregistered(s) => socket2::SockRef::from(s),
        }
    }

    /// On tokio's epoll (the socket must be non-blocking).
    pub fn into_tokio(self) -> std::io::Result<TcpStream> {
        match self {
            Accepted::Registered(s) => Ok(s),
            Accepted::Unregistered(s) => TcpStream::from_std(s),
        }
    }

    fn onto_ring(self, ring: &Rc<crate::os::uring::Ring>) -> std::io::Result<RingSocket> {
        match self {
            Accepted::Registered(s) => RingSocket::from_tokio(ring, s),
            Accepted::Unregistered(s) => Ok(RingSocket::new(ring, s)),
        }
    }
}

/// Serves a connection accepted on `group` (or handed over, with what it brings): a cleartext
/// one on a thread with a ring goes there straight.
pub async fn serve_accepted<S: Service + 'static>(
    socket: Accepted,
    group: usize,
    env: Rc<ConnEnv<S>>,
    mut carried: Carried,
) {
    // A connection the master passed on (an on-demand pool's first) carries no peer: ask the
    // socket, for the address's list of who may send a PROXY header.
    let peer = carried.client.or_else(|| {
        let asked = (!carried.header_read).then(|| socket.socket().peer_addr().ok());
        asked.flatten().and_then(|a| a.as_socket())
    });
    let proxy_header =
        !carried.header_read && env.service.proxy_protocol(group, peer.map(|a| a.ip()));
    if let (Some(ring), None, false) = (&env.ring, env.service.tls(group), proxy_header) {
        if let Ok(socket) = socket.onto_ring(ring) {
            serve(socket, group, env, carried).await
        }
        return;
    }
    let Ok(mut stream) = socket.into_tokio() else {
        return;
    };
    if proxy_header {
        match super::proxy_header::read(&mut stream, env.timeouts.header).await {
            Ok(named) => {
                carried.client = named.or(carried.client);
                carried.header_read = true;
            }
            Err(()) => return,
        }
    }
    match env.service.tls(group) {
        None => match env.ring.clone() {
            Some(ring) => {
                if let Ok(socket) = RingSocket::from_tokio(&ring, stream) {
                    serve(socket, group, env, carried).await
                }
            }
            None => serve(stream, group, env, carried).await,
        },
        Some(acceptor) => {
            let acceptor = acceptor.clone();
            // Boxed: the handshake's and HTTP/2's futures are four times a cleartext
            // connection's, and every connection's task would carry (and move) their size.
            Box::pin(serve_https(stream, acceptor, group, env, carried)).await
        }
    }
}

/// An https address's connection: handed to another pool by its ClientHello's name on a
/// shared address, else the handshake and the protocol ALPN chose.
async fn serve_https<S: Service + 'static>(
    mut stream: TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    group: usize,
    env: Rc<ConnEnv<S>>,
    mut carried: Carried,
) {
    // TLS bytes read before (by a pool that handed the connection here) are replayed.
    let mut read = std::mem::take(&mut carried.unread);
    let (shared, held) = (env.service.shared(group), env.service.held(group));
    if shared || held.is_some() {
        let Ok(hello) = super::sni::client_hello(&mut stream, &mut read, env.timeouts.header).await
        else {
            return;
        };
        // Another pool's site? Decided by the ClientHello's name, before the handshake.
        let handoff = shared.then(|| env.service.hand_off_name(group, hello.name.as_deref()));
        if let Some(mut handoff) = handoff.flatten() {
            handoff.hops = carried.hops + 1;
            handoff.client = carried.client;
            if handoff.hops <= crate::handoff::MAX_HOPS {
                let _ = handoff.send(&stream, &read).await;
            }
            // Handed over, or closed: nothing can be answered before a handshake.
            return;
        }
        // A name of this pool's sites with no certificate yet, ordered on demand: the
        // handshake waits for it (never a directory's validation, answered with its own).
        if let (Some(held), Some(name), false) = (held, &hello.name, hello.acme) {
            held.wait(name).await;
        }
    }
    let kernel = env.service.ktls();
    let timeout = env.timeouts.header;
    match (kernel.is_empty(), env.ring.clone()) {
        // The kernel's TLS may take it later: tokio's socket, records followed.
        (false, _) => {
            let rewind = super::sni::Rewind::tracking_records(read, stream);
            if let Some(tls) = handshake(&acceptor, rewind, timeout, &mut carried).await {
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    super::h2::serve(tls, group, env, carried, true).await
                } else {
                    let https = super::ktls::Https::Rustls(tls);
                    serve(https, group, env, carried).await
                }
            }
        }
        (true, Some(ring)) => {
            let Ok(socket) = RingSocket::from_tokio(&ring, stream) else {
                return;
            };
            let rewind = super::sni::Rewind::new(read, socket);
            if let Some(tls) = handshake(&acceptor, rewind, timeout, &mut carried).await {
                serve_tls(tls, group, env, carried).await
            }
        }
        (true, None) => {
            let rewind = super::sni::Rewind::new(read, stream);
            if let Some(tls) = handshake(&acceptor, rewind, timeout, &mut carried).await {
                serve_tls(tls, group, env, carried).await
            }
        }
    }
}

/// The TLS handshake, bounded by `timeout` (a failed one was answered with its alert by
/// rustls); a client certificate it verified names the client to its apps.
async fn handshake<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &tokio_rustls::TlsAcceptor,
    rewind: Rewind<S>,
    timeout: std::time::Duration,
    carried: &mut Carried,
) -> Option<TlsStream<Rewind<S>>> {
    let tls = tokio::time::timeout(timeout, acceptor.accept(rewind))
        .await
        .ok()?
        .ok()?;
    // An ACME directory's TLS-ALPN-01 validation: the handshake was the whole answer (RFC
    // 8737 §3: nothing is exchanged after it), so the connection ends here.
    if tls.get_ref().1.alpn_protocol() == Some(crate::tls::ACME_TLS_ALPN) {
        return None;
    }
    carried.client_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| crate::certs::subject_of(leaf));
    Some(tls)
}

/// ALPN chose the protocol: HTTP/2, or the HTTP/1.1 engine.
async fn serve_tls<S: Service + 'static, T>(
    tls: TlsStream<Rewind<T>>,
    group: usize,
    env: Rc<ConnEnv<S>>,
    carried: Carried,
) where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    TlsStream<Rewind<T>>: super::stream::ClientStream,
{
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        super::h2::serve(tls, group, env, carried, true).await
    } else {
        serve(tls, group, env, carried).await
    }
}
