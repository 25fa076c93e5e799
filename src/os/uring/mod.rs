//! io_uring for the engine's and the load generator's connections: one ring per event-loop
//! thread, driven from inside the thread's tokio runtime, so everything built on tokio's
//! `AsyncRead`/`AsyncWrite` (TLS, HTTP/2, the proxy) runs over it unchanged.
//!
//! Why by hand, on the `io-uring` crate, rather than a runtime built on it (tokio-uring,
//! monoio, glommio, compio): each of those is its own executor, and the engine's every other
//! part (timers, rustls, h2, the control socket) is tokio's; a second executor per thread
//! would split the thread's work in two loops. This driver adds one task to the thread's
//! tokio loop instead: the ring's descriptor is watched by tokio's epoll, and the driver
//! submits what the connections queued *after* the tasks that were ready have run — every
//! connection's send of one loop turn in one `io_uring_enter`.
//!
//! What a connection costs in system calls: a multishot receive armed once per connection
//! (armed again only when a connection holds [`MAX_HELD`] unread buffers, or the buffers ran
//! out — then a connection receives into a buffer of its own until they come back, so one
//! that never reads cannot stall the others) fills provided buffers without a call per
//! request; sends are queued in the connection
//! ([`RingSocket`]) and submitted together; so a loop turn that serves N requests costs one
//! `epoll_wait` and one `io_uring_enter` — 2/N calls per request.
//!
//! Connections come from a multishot accept ([`RingListener`]): none enters tokio's epoll, and
//! their descriptors are closed by the ring too. A dropped connection's queued bytes still go
//! out (bounded by the ring's orphan send limit), as they would from a closed socket's kernel
//! buffer.
//!
//! Owns: the ring, its provided buffers ([`buffers`]), each connection's and listener's
//! operations in flight and whom their completions wake (`completions`: what each kind of
//! completion does); [`probe`]: whether this kernel can.
//! Must not touch: HTTP, or what the bytes are.

mod buffers;
mod completions;
mod listener;
mod socket;

pub use listener::RingListener;
pub use socket::RingSocket;

use buffers::Buffers;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use tokio::io::unix::AsyncFd;

/// Submission queue entries (the completion queue is twice as long; the kernel keeps what
/// overflows it).
const ENTRIES: u32 = 1024;
/// Provided buffers per thread, and their size: 4 MiB of address space, touched as used.
const BUFFERS: u16 = 1024;
const BUFFER_SIZE: usize = 4096;
/// A connection holding this many unread buffers stops receiving until it reads some: the
/// kernel must not pull a slow reader's upload into memory (TCP's window holds the rest).
const MAX_HELD: usize = 8;
/// Bytes a connection may queue behind a send in flight before a write waits: a client that
/// stops reading holds at most two such buffers here (queued and in flight; their capacity
/// at most twice this each), beside the engine's own output buffer — the kernel's socket
/// buffer holds the rest.
const MAX_QUEUED: usize = 64 << 10;

/// What an operation was, in the low bits of its `user_data` (the connection's key above).
const RECV: u64 = 0;
const SEND: u64 = 1;
const CANCEL: u64 = 2;
const POLL: u64 = 3;
const RECV_OWN: u64 = 4;
/// A listener's multishot accept (its key is in `State::listeners`).
const ACCEPT: u64 = 5;
/// A connection's descriptor closed on the ring (no key: nothing waits for it).
const CLOSE: u64 = 6;
/// The bound on a dropped connection's last sends ([`State::orphan_limit`]).
const TIMER: u64 = 7;
const KIND_BITS: u32 = 3;

fn user_data(key: usize, kind: u64) -> u64 {
    ((key as u64) << KIND_BITS) | kind
}

/// Whether io_uring can carry connections here, and if not, why: `Ok` names what was found.
/// Needs multishot receive (6.0), provided-buffer rings (5.19), and the ring not refused
/// (`kernel.io_uring_disabled`, a container's seccomp policy). Asked once per process.
pub fn probe() -> Result<String, String> {
    static FOUND: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(probe_kernel).clone()
}

fn probe_kernel() -> Result<String, String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|r| r.trim().to_string());
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        if s.trim() == "2" {
            return Err("io_uring is disabled (/proc/sys/kernel/io_uring_disabled = 2)".into());
        }
    }
    let (major, minor) = release.as_deref().map(kernel_version).unwrap_or((0, 0));
    if (major, minor) < (6, 0) {
        return Err(format!(
            "kernel {major}.{minor} has no multishot receive (6.0 or later needed)"
        ));
    }
    let ring: IoUring = IoUring::new(8).map_err(|e| {
        format!(
            "the kernel refused a ring ({e}): io_uring_disabled, or a container's seccomp policy"
        )
    })?;
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("cannot probe io_uring's operations: {e}"))?;
    for (code, name) in [
        (opcode::RecvMulti::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::AsyncCancel::CODE, "async cancel"),
        (opcode::PollAdd::CODE, "poll"),
        (opcode::AcceptMulti::CODE, "accept"),
        (opcode::Close::CODE, "close"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("io_uring here has no {name} operation"));
        }
    }
    Buffers::new(&ring.submitter(), 0, 8, 64)
        .map_err(|e| format!("provided-buffer rings are refused: {e}"))?;
    Ok(format!(
        "kernel {}: multishot accept and receive, provided buffers",
        release.unwrap_or_default()
    ))
}

/// `6.18.44-foo` → (6, 18).
fn kernel_version(release: &str) -> (u32, u32) {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor)
}

/// Where a connection's multishot receive stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Receiving {
    Idle,
    /// The multishot receive, into provided buffers.
    Armed,
    /// One receive into the connection's own buffer: the provided buffers had run out (held
    /// by connections that do not read), and a connection must not wait for them.
    Own,
    /// Asked to stop (its final completion has not come).
    Cancelling,
}

/// One connection's state in the driver.
struct Sock {
    /// Closed once the entry is removed: the operations in flight hold the socket until then,
    /// so its number is never reused under them.
    fd: Option<OwnedFd>,
    /// Its `RingSocket` is gone: nothing more is sent, and the entry goes once idle.
    orphan: bool,
    /// Filled buffers not yet read (buffer id, length), the first read up to `first_read`.
    received: VecDeque<(u16, u32)>,
    first_read: usize,
    receiving: Receiving,
    /// What the last receive into the connection's own buffer brought, read up to `own_read`
    /// (allocated the first time the provided buffers run out).
    own: Vec<u8>,
    own_len: usize,
    own_read: usize,
    eof: bool,
    recv_error: Option<i32>,
    reader: Option<Waker>,
    /// Bytes written since the send in flight began, and the send in flight (`flying` from
    /// `flown` on).
    queued: Vec<u8>,
    flying: Vec<u8>,
    flown: usize,
    sending: bool,
    send_error: Option<i32>,
    /// A poll for writability in flight, and whether it found the socket writable.
    polling: bool,
    poll_cancelled: bool,
    writable: bool,
    writer: Option<Waker>,
    /// Dropped with bytes to send: the [`State::orphan_limit`] timer is in flight.
    timing: bool,
}

impl Sock {
    fn idle(&self) -> bool {
        self.receiving == Receiving::Idle && !self.sending && !self.polling && !self.timing
    }

    fn raw(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }
}

/// A listener's state in the driver (see [`RingListener`]).
struct Listening {
    fd: OwnedFd,
    accepted: VecDeque<OwnedFd>,
    /// The error that ended the last accept (out of descriptors, of memory): given to the
    /// owner once, who decides when to try again.
    error: Option<i32>,
    /// The multishot accept is in flight (its final completion has not come).
    armed: bool,
    /// Asked to stop: not armed again.
    stopping: bool,
    /// Its `RingListener` is gone: connections still arriving are closed.
    orphan: bool,
    waiter: Option<Waker>,
}

/// Field order matters: `uring` is dropped before `buffers` (the kernel's reference to the
/// buffers' memory goes with the ring).
struct State {
    uring: IoUring,
    buffers: Buffers,
    socks: slab::Slab<Sock>,
    listeners: slab::Slab<Listening>,
    /// Something was queued since the last submission; the driver is woken once for it.
    submit_wanted: bool,
    driver: Option<Waker>,
    /// Completions taken from the queue, reused between turns.
    reaped: Vec<(u64, i32, u32)>,
    /// Completions taken early, to make room when the kernel would not take a full queue.
    backlog: Vec<(u64, i32, u32)>,
    wake: Vec<Waker>,
    /// How long the bytes a dropped connection had queued may take to go out (as the kernel
    /// sends what a closed socket's buffer holds): past it they are dropped and the socket
    /// closed, so a client that never reads cannot keep its entry and descriptor. The
    /// server's `body_timeout`: a client's last answer, closed at once without a lingering
    /// shutdown (`http::conn`), gets as long as that shutdown's wait would have given it. Read
    /// by the kernel when a timeout entry is submitted, so it lives here, with the ring.
    orphan_limit: types::Timespec,
}

/// A ring closed with operations in flight is torn down by the kernel after `close` returns:
/// a receive or send it has not cancelled yet could still touch their memory. So the memory
/// of those operations (the provided buffers, a send's bytes, a receive's own buffer) is left
/// to the process rather than freed under them; this happens once, when a thread's runtime
/// ends with connections open.
impl Drop for State {
    fn drop(&mut self) {
        // The closes still queued: their descriptors would stay open otherwise.
        let _ = self.uring.submit();
        let mut in_flight = false;
        for (_, sock) in self.socks.iter_mut() {
            if !sock.idle() {
                in_flight = true;
                std::mem::forget(std::mem::take(&mut sock.flying));
                std::mem::forget(std::mem::take(&mut sock.own));
            }
        }
        self.buffers.leak = in_flight;
    }
}

/// The ring's descriptor, for tokio's epoll to watch.
struct RingFd(RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// One thread's ring. Made inside the thread's runtime (its descriptor joins tokio's epoll);
/// its driver task runs until the runtime ends.
pub struct Ring {
    /// First: deregistered before the ring's descriptor closes.
    ready: AsyncFd<RingFd>,
    state: RefCell<State>,
}

impl Ring {
    /// Sets up the ring and spawns its driver on the current `LocalSet`. A dropped
    /// connection's queued bytes get `orphan_send_limit` to go out (see
    /// [`State::orphan_limit`]).
    pub fn start(orphan_send_limit: std::time::Duration) -> io::Result<Rc<Ring>> {
        Self::start_with(BUFFERS, ENTRIES, orphan_send_limit)
    }

    fn start_with(
        buffer_count: u16,
        entries: u32,
        orphan_send_limit: std::time::Duration,
    ) -> io::Result<Rc<Ring>> {
        // Completions are made ready when the thread next enters the kernel (its next
        // `epoll_wait` or submission) rather than by interrupting it: fewer interruptions
        // under load. Only this thread submits.
        let uring: IoUring = IoUring::builder()
            .setup_cqsize(entries * 4)
            .setup_clamp()
            .setup_coop_taskrun()
            .setup_single_issuer()
            .build(entries)?;
        let buffers = Buffers::new(&uring.submitter(), 0, buffer_count, BUFFER_SIZE)?;
        // SAFETY: the descriptor is the ring's, which `Ring` holds and drops after `ready`
        // (field order).
        let ready = unsafe {
            AsyncFd::register_with_interest(
                RingFd(uring.as_raw_fd()),
                tokio::io::Interest::READABLE,
            )?
        };
        let ring = Rc::new(Ring {
            ready,
            state: RefCell::new(State {
                uring,
                buffers,
                socks: slab::Slab::with_capacity(64),
                listeners: slab::Slab::new(),
                submit_wanted: false,
                driver: None,
                reaped: Vec::with_capacity(256),
                backlog: Vec::new(),
                wake: Vec::with_capacity(64),
                orphan_limit: types::Timespec::from(orphan_send_limit),
            }),
        });
        tokio::task::spawn_local(Driver(Rc::clone(&ring)));
        Ok(ring)
    }

    /// Takes a connected socket (non-blocking) onto the ring.
    fn insert(&self, fd: OwnedFd) -> usize {
        self.state.borrow_mut().socks.insert(Sock {
            fd: Some(fd),
            orphan: false,
            received: VecDeque::new(),
            first_read: 0,
            receiving: Receiving::Idle,
            own: Vec::new(),
            own_len: 0,
            own_read: 0,
            eof: false,
            recv_error: None,
            reader: None,
            queued: Vec::new(),
            flying: Vec::new(),
            flown: 0,
            sending: false,
            send_error: None,
            polling: false,
            poll_cancelled: false,
            writable: false,
            writer: None,
            timing: false,
        })
    }

    /// Submits what was queued and hands completions to their connections, until the ring's
    /// descriptor has nothing more to say.
    fn drive(&self, cx: &mut Context<'_>) {
        loop {
            {
                let mut state = self.state.borrow_mut();
                match &state.driver {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => state.driver = Some(cx.waker().clone()),
                }
                if state.submit_wanted {
                    state.submit_wanted = false;
                    // EBUSY/EAGAIN: the kernel is short of room for completions; what was not
                    // taken stays queued and goes with the next submission.
                    let _ = state.uring.submit();
                }
            }
            self.reap();
            // Completions the full queue could not take wait in the kernel, and no readiness
            // will say so: an enter flushes them (the crate asks for them when the flag is up).
            {
                let mut state = self.state.borrow_mut();
                if state.uring.submission().cq_overflow() {
                    state.submit_wanted = true;
                    continue;
                }
            }
            match self.ready.poll_read_ready(cx) {
                Poll::Ready(Ok(mut guard)) => guard.clear_ready(),
                Poll::Ready(Err(_)) | Poll::Pending => return,
            }
        }
    }

    /// Takes every completion and acts on it; wakes whom they concern.
    fn reap(&self) {
        let mut guard = self.state.borrow_mut();
        let state = &mut *guard;
        let mut reaped = std::mem::take(&mut state.reaped);
        reaped.append(&mut state.backlog);
        reaped.extend(
            state
                .uring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(data, result, flags) in &reaped {
            let key = (data >> KIND_BITS) as usize;
            match data & ((1 << KIND_BITS) - 1) {
                RECV => state.received(key, result, flags),
                RECV_OWN => state.received_own(key, result),
                SEND => state.sent(key, result),
                POLL => state.polled(key),
                TIMER => state.orphan_timed_out(key, result),
                ACCEPT => {
                    state.accepted(key, result, flags);
                    continue;
                }
                CLOSE => continue,
                _ => {}
            }
            state.remove_if_done(key);
        }
        reaped.clear();
        state.reaped = reaped;
        let mut wake = std::mem::take(&mut state.wake);
        drop(guard);
        for w in wake.drain(..) {
            w.wake();
        }
        self.state.borrow_mut().wake = wake;
    }
}

impl State {
    /// Queues an operation; a full queue is submitted first. Where the kernel will not take
    /// it (its completion queue full: EBUSY), completions are taken aside (handled at the
    /// driver's next turn) to make room.
    fn push(&mut self, entry: squeue::Entry) {
        // SAFETY: every entry's buffers (`Sock::flying`, the provided buffers) live until its
        // completion: a `Sock` is removed only when idle, and `State` drops the ring first.
        let mut stuck = 0;
        while unsafe { self.uring.submission().push(&entry) }.is_err() {
            if self.uring.submit().is_err() {
                let before = self.backlog.len();
                let taken = self
                    .uring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags()));
                self.backlog.extend(taken);
                if self.backlog.len() == before {
                    // Nothing to make room with: the kernel is short of memory. Wait a
                    // moment; past a bound the operation is lost, and its connection ends
                    // by its timeout.
                    stuck += 1;
                    if stuck > 1000 {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            }
        }
        if !self.submit_wanted {
            self.submit_wanted = true;
            if let Some(driver) = &self.driver {
                driver.wake_by_ref();
            }
        }
    }

    /// Starts receiving: the multishot receive, or while the provided buffers are all held,
    /// one receive into the connection's own buffer.
    fn arm(&mut self, key: usize) {
        let sock = &mut self.socks[key];
        let entry = if self.buffers.available > 0 {
            sock.receiving = Receiving::Armed;
            opcode::RecvMulti::new(types::Fd(sock.raw()), self.buffers.group)
                .build()
                .user_data(user_data(key, RECV))
        } else {
            sock.receiving = Receiving::Own;
            sock.own.resize(BUFFER_SIZE, 0);
            let fd = types::Fd(sock.raw());
            opcode::Recv::new(fd, sock.own.as_mut_ptr(), sock.own.len() as u32)
                .build()
                .user_data(user_data(key, RECV_OWN))
        };
        self.push(entry);
    }

    /// Asks the kernel to stop `key`'s operation of `kind` (its own completion says when).
    fn cancel(&mut self, key: usize, kind: u64) {
        let entry = opcode::AsyncCancel::new(user_data(key, kind))
            .build()
            .user_data(user_data(key, CANCEL));
        self.push(entry);
    }

    fn cancel_receive(&mut self, key: usize) {
        let kind = match self.socks[key].receiving {
            Receiving::Armed => RECV,
            Receiving::Own => RECV_OWN,
            Receiving::Idle | Receiving::Cancelling => return,
        };
        self.socks[key].receiving = Receiving::Cancelling;
        self.cancel(key, kind);
    }

    /// Stops a poll for writability (once: its completion ends `polling`).
    fn cancel_poll(&mut self, key: usize) {
        let sock = &mut self.socks[key];
        if !sock.polling || sock.poll_cancelled {
            return;
        }
        sock.poll_cancelled = true;
        self.cancel(key, POLL);
    }

    fn start_send(&mut self, key: usize) {
        let sock = &mut self.socks[key];
        std::mem::swap(&mut sock.queued, &mut sock.flying);
        sock.flown = 0;
        sock.sending = true;
        self.send_rest(key);
    }

    fn send_rest(&mut self, key: usize) {
        let sock = &self.socks[key];
        let rest = &sock.flying[sock.flown..];
        let entry = opcode::Send::new(types::Fd(sock.raw()), rest.as_ptr(), rest.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(key, SEND));
        self.push(entry);
    }
}

/// The ring's task: submits and reaps whenever woken (by a queued operation, or by the
/// ring's descriptor turning readable). Never finishes; ends with the runtime.
struct Driver(Rc<Ring>);

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.drive(cx);
        Poll::Pending
    }
}

#[cfg(test)]
mod tests;
