//! A new connection's steps before HTTP: the PROXY protocol header, where its address expects
//! one (it comes first, before any TLS), then the TLS handshake on an https address, then the
//! connection loop ([`super::conn::serve`]) over whichever stream results — a cleartext one
//! moved onto the thread's io_uring when the thread has one.
//!
//! Owns: that order, each step bounded by the header timeout. Must not touch: HTTP, or the
//! certificates (the service's TLS acceptor holds them, see `crate::tls`).

use super::conn::serve;
use super::service::{ConnEnv, Service};
use crate::handoff::Carried;
use std::rc::Rc;
use tokio::net::TcpStream;

/// Serves a connection accepted on `group` (or handed over, with what it brings).
pub async fn serve_accepted<S: Service + 'static>(
    mut stream: TcpStream,
    group: usize,
    env: Rc<ConnEnv<S>>,
    mut carried: Carried,
) {
    if !carried.header_read && env.service.proxy_protocol(group) {
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
                // Off tokio's epoll, onto the ring (a failure closes the socket).
                if let Ok(std) = stream.into_std() {
                    let socket = crate::os::uring::RingSocket::new(&ring, std);
                    serve(socket, group, env, carried).await
                }
            }
            None => serve(stream, group, env, carried).await,
        },
        Some(acceptor) => {
            let acceptor = acceptor.clone();
            // TLS bytes read before (by a pool that handed the connection here) are replayed.
            let mut read = std::mem::take(&mut carried.unread);
            if env.service.shared(group) {
                // Another pool's site? Decided by the ClientHello's name, before the handshake.
                let Ok(name) =
                    super::sni::client_hello_name(&mut stream, &mut read, env.timeouts.header)
                        .await
                else {
                    return;
                };
                if let Some(mut handoff) = env.service.hand_off_name(group, name.as_deref()) {
                    handoff.hops = carried.hops + 1;
                    handoff.client = carried.client;
                    if handoff.hops <= crate::handoff::MAX_HOPS {
                        let _ = handoff.send(&stream, &read).await;
                    }
                    // Handed over, or closed: nothing can be answered before a handshake.
                    return;
                }
            }
            let kernel = env.service.ktls();
            let rewind = if kernel.is_empty() {
                super::sni::Rewind::new(read, stream)
            } else {
                super::sni::Rewind::tracking_records(read, stream)
            };
            let handshake = acceptor.accept(rewind);
            // A failed handshake was answered with its alert by rustls.
            if let Ok(Ok(tls)) = tokio::time::timeout(env.timeouts.header, handshake).await {
                // A client certificate the handshake verified names the client to its apps.
                carried.client_cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| crate::certs::subject_of(leaf));
                // ALPN chose the protocol: HTTP/2, or the HTTP/1.1 engine — able to hand the
                // connection to the kernel's TLS where the kernel has it.
                if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    super::h2::serve(tls, group, env, carried, true).await
                } else if kernel.is_empty() {
                    serve(tls, group, env, carried).await
                } else {
                    serve(super::ktls::Https::Rustls(tls), group, env, carried).await
                }
            }
        }
    }
}
