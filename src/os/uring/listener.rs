//! A listening socket on the thread's ring: one multishot accept takes every connection the
//! kernel queues, with no `epoll_wait` wake-up, `accept4` or `epoll_ctl` per connection (a
//! connection that goes on the ring afterwards never enters tokio's epoll at all).
//!
//! The accepted descriptors wait in the listener's queue until its owner takes them. Stopping
//! (a draining worker) cancels the accept; what the kernel handed over before the cancel took
//! effect is still given out, so no connection accepted here is dropped unserved.
//!
//! Owns: that queue and the accept's life. Must not touch: what is done with a connection.

use super::{user_data, Listening, Ring, State, ACCEPT};
use io_uring::{cqueue, opcode, types};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::task::{Context, Poll};

/// A listening TCP socket whose connections come through `ring`.
pub struct RingListener {
    ring: Rc<Ring>,
    key: usize,
}

impl RingListener {
    /// Takes a listening socket onto the ring (it must not be in tokio's epoll); the accept
    /// starts with the first call to [`RingListener::accept`].
    pub fn new(ring: &Rc<Ring>, listener: std::net::TcpListener) -> Self {
        let key = ring.state.borrow_mut().listeners.insert(Listening {
            fd: OwnedFd::from(listener),
            accepted: VecDeque::new(),
            error: None,
            armed: false,
            stopping: false,
            orphan: false,
            waiter: None,
        });
        RingListener {
            ring: Rc::clone(ring),
            key,
        }
    }

    /// The next connection (non-blocking, close-on-exec); an error once when the accept
    /// failed (the next call tries again); `None` once stopped and every connection taken.
    pub async fn accept(&mut self) -> Option<io::Result<std::net::TcpStream>> {
        std::future::poll_fn(|cx| self.poll_accept(cx)).await
    }

    fn poll_accept(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<std::net::TcpStream>>> {
        let mut state = self.ring.state.borrow_mut();
        let listening = &mut state.listeners[self.key];
        if let Some(fd) = listening.accepted.pop_front() {
            return Poll::Ready(Some(Ok(std::net::TcpStream::from(fd))));
        }
        if let Some(e) = listening.error.take() {
            return Poll::Ready(Some(Err(io::Error::from_raw_os_error(e))));
        }
        if !listening.armed {
            if listening.stopping {
                return Poll::Ready(None);
            }
            state.arm_accept(self.key);
        }
        state.listeners[self.key].waiter = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Stops accepting: connections the kernel still queues stay there (for whoever else
    /// listens on the address); those accepted already are still given out.
    pub fn stop(&mut self) {
        self.ring.state.borrow_mut().stop_accept(self.key);
    }
}

impl Drop for RingListener {
    fn drop(&mut self) {
        let mut state = self.ring.state.borrow_mut();
        state.stop_accept(self.key);
        let listening = &mut state.listeners[self.key];
        listening.orphan = true;
        listening.accepted.clear();
        if !listening.armed {
            state.listeners.remove(self.key);
        }
    }
}

impl State {
    fn arm_accept(&mut self, key: usize) {
        let listening = &mut self.listeners[key];
        listening.armed = true;
        let entry = opcode::AcceptMulti::new(types::Fd(listening.fd.as_raw_fd()))
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data(key, ACCEPT));
        self.push(entry);
    }

    fn stop_accept(&mut self, key: usize) {
        let listening = &mut self.listeners[key];
        if listening.stopping {
            return;
        }
        listening.stopping = true;
        if listening.armed {
            self.cancel(key, ACCEPT);
        }
    }

    /// An accept's completion: a connection, or the accept's end (cancelled, or an error).
    pub(super) fn accepted(&mut self, key: usize, result: i32, flags: u32) {
        // SAFETY: a non-negative result of an accept is a new descriptor, ours alone.
        let fd = (result >= 0).then(|| unsafe { OwnedFd::from_raw_fd(result) });
        let Some(listening) = self.listeners.get_mut(key) else {
            return;
        };
        if !cqueue::more(flags) {
            listening.armed = false;
        }
        match fd {
            Some(fd) if !listening.orphan => listening.accepted.push_back(fd),
            Some(_) => {}
            None if -result == libc::ECANCELED => {}
            None => listening.error = Some(-result),
        }
        if let Some(w) = listening.waiter.take() {
            self.wake.push(w);
        }
        if listening.orphan && !listening.armed {
            self.listeners.remove(key);
        }
    }
}
