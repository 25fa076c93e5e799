//! An engine thread's way in: connections accepted on its listening sockets (by tokio, or by
//! a multishot accept on its io_uring) or handed over by other pools' threads on a shared
//! address, each admitted under the thread's share of the worker's `max_connections` — past
//! it, a 503 and close — and served in a task of its own.
//!
//! Owns: accepting, receiving hand-offs, and admission. Must not touch: what a connection
//! says (`conn_task` serves it) or the listeners' life (the master owns the sockets).

use crate::handlers::ThreadService;
use crate::http::accept::Accepted;
use crate::http::service::ConnEnv;
use crate::http::Responder;
use crate::server::conn_task::{self, Slot};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// What a thread needs to take a connection in, accepted or handed over.
pub(super) struct Admission {
    /// The environment new connections get: replaced when a dispatcher takes new hosts
    /// (connections already open keep theirs).
    pub(super) env: RefCell<Rc<ConnEnv<ThreadService>>>,
    pub(super) open: Rc<Cell<usize>>,
    pub(super) max_conns: usize,
    pub(super) panics: Arc<AtomicU64>,
    pub(super) who: Rc<str>,
    /// The thread's CPU, and the connections it accepted, and of those received on it.
    pub(super) cpu: u32,
    pub(super) accepted: Cell<u64>,
    pub(super) steered: Cell<u64>,
}

impl Admission {
    /// The environment a connection admitted now gets.
    pub(super) fn env(&self) -> Rc<ConnEnv<ThreadService>> {
        Rc::clone(&self.env.borrow())
    }

    /// Its connections open, accepted, and accepted on the thread's own CPU.
    pub(super) fn figures(&self) -> (u64, u64, u64) {
        (
            self.open.get() as u64,
            self.accepted.get(),
            self.steered.get(),
        )
    }

    /// Serves `stream` on listener group `group` in a contained task, with what a handed-over
    /// connection brings; over the thread's connection limit, or with no group (an address
    /// this worker no longer has), a 503 and close.
    fn admit(&self, stream: Accepted, group: Option<usize>, carried: crate::handoff::Carried) {
        let _ = stream.socket().set_nodelay(true);
        let Some(group) = group.filter(|_| self.open.get() < self.max_conns) else {
            let mut answer = Vec::with_capacity(256);
            let env = self.env();
            Responder::new(&mut answer, &env.clock.common(), false, 1, false).unavailable();
            tokio::task::spawn_local(reject_busy(stream, answer));
            return;
        };
        tokio::task::spawn_local(conn_task::serve(
            stream,
            group,
            carried,
            self.env(),
            Slot::take(&self.open),
            Arc::clone(&self.panics),
            Rc::clone(&self.who),
        ));
    }
}

/// A thread's listening socket: accepted by tokio, or by a multishot accept on the thread's
/// ring (then the connections skip tokio's epoll, see [`Accepted`]).
pub(super) enum Listener {
    Epoll(tokio::net::TcpListener),
    Ring(crate::os::uring::RingListener),
}

impl Listener {
    pub(super) fn new(
        listener: std::net::TcpListener,
        ring: Option<&Rc<crate::os::uring::Ring>>,
    ) -> std::io::Result<Self> {
        Ok(match ring {
            Some(ring) => Listener::Ring(crate::os::uring::RingListener::new(ring, listener)),
            None => Listener::Epoll(tokio::net::TcpListener::from_std(listener)?),
        })
    }

    /// The next connection and its peer; `None` once stopped and drained.
    async fn accept(
        &mut self,
    ) -> Option<std::io::Result<(Accepted, Option<std::net::SocketAddr>)>> {
        match self {
            Listener::Epoll(l) => Some(
                l.accept()
                    .await
                    .map(|(stream, peer)| (Accepted::Registered(stream), Some(peer))),
            ),
            // The ring's accept does not say who connected: one getpeername.
            Listener::Ring(l) => l.accept().await.map(|r| {
                r.map(|stream| {
                    let peer = stream.peer_addr().ok();
                    (Accepted::Unregistered(stream), peer)
                })
            }),
        }
    }
}

/// Accepts on one listener until the worker drains: tokio's accept stops at once (the kernel
/// keeps what is queued for the successor), the ring's once its cancel took effect, serving
/// what it had already taken.
pub(super) async fn accept_loop(mut listener: Listener, group: usize, admission: Rc<Admission>) {
    // One for the thread's life, whichever environment new connections get.
    let shutdown = Rc::clone(&admission.env().shutdown);
    let mut stopping = false;
    loop {
        if !stopping && shutdown.started.get() {
            match &mut listener {
                Listener::Epoll(_) => return,
                Listener::Ring(l) => l.stop(),
            }
            stopping = true;
        }
        let accepted = tokio::select! {
            biased;
            _ = shutdown.notify.notified(), if !stopping => continue,
            r = listener.accept() => r,
        };
        match accepted {
            None => return,
            Some(Ok((stream, peer))) => {
                // Where the kernel received it: one getsockopt per connection, for the
                // admin page's steering figure.
                let received_on = stream.socket().cpu_affinity().ok();
                admission.accepted.set(admission.accepted.get() + 1);
                if received_on == Some(admission.cpu as usize) {
                    admission.steered.set(admission.steered.get() + 1);
                }
                let carried = crate::handoff::Carried {
                    client: peer,
                    ..Default::default()
                };
                admission.admit(stream, Some(group), carried)
            }
            // Out of descriptors or memory: back off briefly rather than spin.
            Some(Err(_)) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Serves the connections other pools' threads hand to this one, as if accepted here; stops
/// taking them when the worker drains (its successor in the slot takes the rest).
pub(super) async fn receive_loop(mut receiver: crate::handoff::Receiver, admission: Rc<Admission>) {
    use crate::http::service::Service;
    let shutdown = Rc::clone(&admission.env().shutdown);
    loop {
        if shutdown.started.get() {
            return;
        }
        let received = tokio::select! {
            biased;
            _ = shutdown.notify.notified() => return,
            r = receiver.next() => r,
        };
        match received {
            Ok(got) => {
                let group = admission.env().service.group_of(got.addr);
                admission.admit(Accepted::Unregistered(got.stream), group, got.carried);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Over the connection limit: the 503 and close.
async fn reject_busy(stream: Accepted, answer: Vec<u8>) {
    let Ok(mut stream) = stream.into_tokio() else {
        return;
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(&answer)).await;
    let _ = stream.shutdown().await;
}
