//! A connection leaving the HTTP/1.1 loop for good: handed to another pool's thread with its
//! unanswered bytes (a shared address's request for a host another pool serves), or served
//! as HTTP/2 from its preface on (h2c with prior knowledge) — or closed.
//!
//! Owns: [`Connection::hand_off`], [`Connection::h2c`], and the close (lingering, plain
//! after a last request, or a reset). Must not touch: the loop's steps.

use super::super::send::{linger_close, write_all};
use super::super::service::Service;
use super::super::stream::{ClientStream, IntoTcp};
use super::super::Responder;
use super::{is_head, Connection};

impl<S: Service + 'static, C: ClientStream> Connection<S, C> {
    /// Hands the connection to another pool with the unanswered bytes (the buffer starts with
    /// the head of the request that belongs there). Our descriptor closes on return, without
    /// a shutdown: the connection lives on in the receiver. Past `MAX_HOPS` in a row (two
    /// workers disagreeing about a host), or when no thread takes it: 503.
    pub(super) async fn hand_off(mut self, mut handoff: crate::handoff::Handoff) {
        handoff.hops = self.hops + 1;
        handoff.client = self.peer.addr;
        let common = self.env.clock.common().clone();
        let head_only = is_head(&self.rbuf);
        Responder::new(&mut self.wbuf, &common, false, 1, head_only).unavailable();
        // Always cleartext here (see `may_hand_off`); off the ring first, if on it.
        let taken = tokio::time::timeout(self.env.timeouts.body, self.stream.into_tcp()).await;
        match taken {
            Ok(IntoTcp::Tcp(mut tcp, unread)) => {
                self.rbuf.extend_from_slice(&unread);
                if handoff.hops <= crate::handoff::MAX_HOPS && handoff.send(&tcp, &self.rbuf).await
                {
                    return;
                }
                let _ = write_all(&mut tcp, &self.wbuf, &self.env).await;
                linger_close(tcp, &self.env).await;
            }
            Ok(IntoTcp::Tls(mut tls)) => {
                let _ = write_all(&mut tls, &self.wbuf, &self.env).await;
                linger_close(tls, &self.env).await;
            }
            Ok(IntoTcp::Lost) | Err(_) => {}
        }
    }

    /// The connection speaks HTTP/2 (h2c with prior knowledge): served by `super::h2` from
    /// the preface on. HTTP/2 has its own graceful stop (GOAWAY on `shutdown.notify`).
    pub(super) async fn h2c(mut self) {
        if let Some(handoff) = self.env.service.hand_off_h2c(self.group) {
            return self.hand_off(handoff).await;
        }
        let taken = tokio::time::timeout(self.env.timeouts.body, self.stream.into_tcp()).await;
        match taken {
            Ok(IntoTcp::Tcp(tcp, unread)) => {
                self.rbuf.extend_from_slice(&unread);
                let replay = super::super::sni::Rewind::new(self.rbuf, tcp);
                let carried = crate::handoff::Carried {
                    client: self.peer.addr,
                    header_read: true,
                    ..Default::default()
                };
                Box::pin(super::super::h2::serve(
                    replay, self.group, self.env, carried, false,
                ))
                .await;
            }
            Ok(IntoTcp::Tls(tls)) => linger_close(tls, &self.env).await,
            Ok(IntoTcp::Lost) | Err(_) => {}
        }
    }

    /// Closes after the last answer. A client whose request said it was its last, with
    /// nothing after it, gets a plain close, as from nginx: the reset a lingering close
    /// guards against comes only from bytes the client sends after its last request, and this
    /// one said it would send none (RFC 9112 §9.6). It saves the shutdown, the wait for the
    /// client's end and its timer: about a tenth of a connection-per-request's CPU time
    /// (docs/performance.md, "The connections' I/O paths, measured"). The bytes queued before it still go
    /// out (the kernel's, or the ring's, send queue), then the FIN. A request lent to an app
    /// counts when its body and answer were whole ([`Outcome::Answered`](super::super::service::Outcome::Answered)). TLS ends with its
    /// `close_notify` (a shutdown) all the same; every other close lingers.
    pub(super) async fn close(self) {
        if self.client_ended && !self.stream.is_tls() {
            return;
        }
        linger_close(self.stream, &self.env).await;
    }

    /// Closes at once with a reset (`SO_LINGER` 0): a refused client is told nothing.
    pub(super) fn reset(self) {
        let _ = self
            .stream
            .sock()
            .set_linger(Some(std::time::Duration::ZERO));
    }
}
