//! A worker thread's graceful stop, as its connections see it: the flag every response
//! checks, and the registry of connections waiting for a request, woken when the stop begins.
//!
//! Owns: that state. Must not touch: the connections' protocol (see [`super::conn`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long, once a drain begins, an HTTP/1.1 connection waiting for its next request is
/// kept for one: that request is answered with `Connection: close` (HAProxy's
/// `idle-close-on-response`). Closing an idle connection at once races a client that is
/// sending on it at that moment — it sees the close instead of an answer (a non-retrying
/// client such as wrk counts an error) — while a client that keeps a connection busy sends
/// within this. One idle longer is closed, which every HTTP client must expect (RFC 9112
/// §9.5).
pub const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// The thread's graceful-shutdown signal: once set, every response says `Connection: close`,
/// and a connection waiting for a request gets [`DRAIN_IDLE`] to send one.
///
/// Waiting connections are found through a registry rather than each one waiting on a
/// `Notify`: registering a waiter on every keep-alive wait would cost a lock per request,
/// while the registry keeps each connection's waker in a `Cell`, stored once per connection
/// (see [`DrainBegun`]). At the drain's start each one is woken, and waits on with the
/// drain's deadline instead of its keep-alive timeout.
#[derive(Default)]
pub struct Shutdown {
    pub started: Cell<bool>,
    /// Wakes the accept loops (and HTTP/2 connections, which send GOAWAY).
    pub notify: Notify,
    /// Until when a waiting HTTP/1.1 connection is kept, once the drain began.
    idle_until: Cell<Option<Instant>>,
    waiting: RefCell<HashMap<RawFd, Rc<IdleWait>>>,
}

/// A connection's place in the registry: the waker of its task, as last seen waiting.
#[derive(Default)]
pub(super) struct IdleWait {
    waker: Cell<Option<Waker>>,
}

impl Shutdown {
    /// Stops accepting; every response from now on says `Connection: close`; connections
    /// waiting for a request are woken to wait [`DRAIN_IDLE`] more at most.
    pub fn begin(&self) {
        self.started.set(true);
        self.idle_until.set(Some(Instant::now() + DRAIN_IDLE));
        self.notify.notify_waiters();
        for wait in self.waiting.borrow().values() {
            if let Some(w) = wait.waker.take() {
                w.wake();
            }
        }
    }

    /// Once the drain began: how long a waiting connection may still wait for a request.
    pub fn idle_until(&self) -> Option<Instant> {
        self.idle_until.get()
    }

    pub(super) fn register(&self, fd: RawFd) -> Rc<IdleWait> {
        let wait = Rc::new(IdleWait::default());
        self.waiting.borrow_mut().insert(fd, Rc::clone(&wait));
        wait
    }

    pub(super) fn unregister(&self, fd: RawFd) {
        self.waiting.borrow_mut().remove(&fd);
    }
}

/// Resolves when the drain has begun; while it has not, leaves the task's waker with the
/// registry (cloned only when the task's waker changed, so a keep-alive wait costs a
/// comparison).
pub(super) struct DrainBegun<'a> {
    pub(super) shutdown: &'a Shutdown,
    pub(super) wait: &'a IdleWait,
}

impl Future for DrainBegun<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.shutdown.started.get() {
            return Poll::Ready(());
        }
        let kept = self.wait.waker.take();
        let waker = match kept {
            Some(w) if w.will_wake(cx.waker()) => w,
            _ => cx.waker().clone(),
        };
        self.wait.waker.set(Some(waker));
        Poll::Pending
    }
}

/// Removes a connection from the shutdown registry however its task ends.
pub(super) struct Registered<'a> {
    pub(super) shutdown: &'a Shutdown,
    pub(super) fd: RawFd,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.shutdown.unregister(self.fd);
    }
}
