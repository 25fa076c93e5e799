//! A worker thread's graceful stop, as its connections see it: the flag every response
//! checks, and the registry of idle connections closed when the stop begins.
//!
//! Owns: that state. Must not touch: the connections' protocol (see [`super::conn`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::rc::Rc;
use tokio::sync::Notify;

/// The thread's graceful-shutdown signal: once set, idle connections close and busy ones close
/// after their current response.
///
/// Idle connections are found through a registry rather than each one waiting on a `Notify`:
/// registering a waiter on every keep-alive wait would cost a lock per request, while the
/// registry costs a `Cell` write. At shutdown, each idle connection's read side is shut, so its
/// pending read ends at once.
#[derive(Default)]
pub struct Shutdown {
    pub started: Cell<bool>,
    /// Wakes the accept loops.
    pub notify: Notify,
    idle: RefCell<HashMap<RawFd, Rc<Cell<bool>>>>,
}

impl Shutdown {
    /// Stops accepting; every response from now on says `Connection: close`.
    pub fn begin(&self) {
        self.started.set(true);
        self.notify.notify_waiters();
    }

    /// Ends the connections that are waiting for a request. A client may be sending one at
    /// that very moment and see the close instead of an answer — HTTP/1.1's keep-alive race —
    /// so the drain first gives busy clients a moment to get a `Connection: close` answer.
    pub fn close_idle(&self) {
        for (&fd, idle) in self.idle.borrow().iter() {
            if idle.get() {
                crate::os::net::shutdown_read(fd);
            }
        }
    }

    pub(super) fn register(&self, fd: RawFd) -> Rc<Cell<bool>> {
        let flag = Rc::new(Cell::new(false));
        self.idle.borrow_mut().insert(fd, Rc::clone(&flag));
        flag
    }

    pub(super) fn unregister(&self, fd: RawFd) {
        self.idle.borrow_mut().remove(&fd);
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
