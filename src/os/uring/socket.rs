//! A TCP connection on the thread's ring: tokio's `AsyncRead` and `AsyncWrite` over a
//! multishot receive and queued sends, so whatever speaks over a tokio stream (the HTTP
//! engine, rustls, h2, the proxy's relay) speaks over it.
//!
//! A write is taken into the connection's queue and returns at once; the queue goes out in
//! one send when no send is in flight (sends on one socket are never in flight together:
//! the kernel may run two in either order). `poll_shutdown` waits for the queue to be out.
//!
//! Owns: that mapping. Must not touch: what the bytes are.

use super::{Receiving, Ring, MAX_QUEUED};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connected socket whose reads and writes go through `ring`.
pub struct RingSocket {
    ring: Rc<Ring>,
    pub(super) key: usize,
    /// The socket's number, for addresses and options (the driver owns the descriptor).
    fd: RawFd,
    /// Taken back by [`RingSocket::into_std`]: nothing to give up on drop.
    released: bool,
    /// A direct write (`sendfile`) found the socket's buffer full: wait for the ring's poll.
    blocked: bool,
}

impl RingSocket {
    /// Takes a connected, non-blocking TCP socket onto the ring.
    pub fn new(ring: &Rc<Ring>, socket: std::net::TcpStream) -> Self {
        let fd = socket.as_raw_fd();
        let key = ring.insert(OwnedFd::from(socket));
        RingSocket {
            ring: Rc::clone(ring),
            key,
            fd,
            released: false,
            blocked: false,
        }
    }

    /// Moves a socket tokio watches onto the ring (off tokio's epoll first); a failure there
    /// closes the socket.
    pub fn from_tokio(ring: &Rc<Ring>, socket: tokio::net::TcpStream) -> io::Result<Self> {
        Ok(RingSocket::new(ring, socket.into_std()?))
    }

    /// Queues `buf` to be sent, whole; `WouldBlock` when the queue is full, the error of an
    /// earlier send if one failed.
    pub fn try_send(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = self.ring.state.borrow_mut();
        let sock = &mut state.socks[self.key];
        if let Some(e) = sock.send_error {
            return Err(io::Error::from_raw_os_error(e));
        }
        let room = MAX_QUEUED.saturating_sub(sock.queued.len());
        if room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(room);
        sock.queued.extend_from_slice(&buf[..n]);
        if !sock.sending {
            state.start_send(self.key);
        }
        Ok(n)
    }

    /// Ready when everything queued is out (or failed).
    fn poll_sent(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = self.ring.state.borrow_mut();
        let sock = &mut state.socks[self.key];
        if let Some(e) = sock.send_error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if sock.sending || !sock.queued.is_empty() {
            sock.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    /// A direct write (`sendfile`) found the socket's buffer full.
    pub fn would_block(&mut self) {
        self.blocked = true;
    }

    /// Ready when what was queued is out and the socket may take more bytes by a direct
    /// write (`sendfile`): at once, unless the last one found the buffer full — then when a
    /// one-shot poll on the ring says it has room.
    pub fn poll_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_sent(cx))?;
        if !self.blocked {
            return Poll::Ready(Ok(()));
        }
        let mut state = self.ring.state.borrow_mut();
        let sock = &mut state.socks[self.key];
        if std::mem::take(&mut sock.writable) {
            self.blocked = false;
            return Poll::Ready(Ok(()));
        }
        sock.writer = Some(cx.waker().clone());
        if !sock.polling {
            sock.polling = true;
            let entry =
                io_uring::opcode::PollAdd::new(io_uring::types::Fd(self.fd), libc::POLLOUT as u32)
                    .build()
                    .user_data(super::user_data(self.key, super::POLL));
            state.push(entry);
        }
        Poll::Pending
    }

    /// The socket back from the ring, with the bytes it received and nobody
    /// read: the receive is cancelled and what was queued is sent first. The caller bounds
    /// the wait.
    pub async fn into_std(mut self) -> io::Result<(std::net::TcpStream, Vec<u8>)> {
        std::future::poll_fn(|cx| {
            {
                let mut state = self.ring.state.borrow_mut();
                state.cancel_receive(self.key);
                state.cancel_poll(self.key);
                let sock = &mut state.socks[self.key];
                if sock.receiving != Receiving::Idle || sock.polling {
                    sock.reader = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
            self.poll_sent(cx)
        })
        .await?;
        let mut state = self.ring.state.borrow_mut();
        let mut unread = Vec::new();
        let sock = &state.socks[self.key];
        let mut skip = sock.first_read;
        for &(id, len) in &sock.received {
            unread.extend_from_slice(&state.buffers.bytes(id, len as usize)[skip..]);
            skip = 0;
        }
        let sock = &state.socks[self.key];
        unread.extend_from_slice(&sock.own[sock.own_read..sock.own_len]);
        state.drop_received(self.key);
        let sock = state.socks.remove(self.key);
        self.released = true;
        let fd = sock
            .fd
            .expect("a socket's descriptor stays until it is taken");
        Ok((std::net::TcpStream::from(fd), unread))
    }
}

impl AsRawFd for RingSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for RingSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the driver keeps the descriptor open at least as long as this socket.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl AsyncRead for RingSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut guard = this.ring.state.borrow_mut();
        let state = &mut *guard;
        let sock = &mut state.socks[this.key];
        if sock.own_read < sock.own_len {
            let bytes = &sock.own[sock.own_read..sock.own_len];
            let n = bytes.len().min(buf.remaining());
            buf.put_slice(&bytes[..n]);
            sock.own_read += n;
            return Poll::Ready(Ok(()));
        }
        if !sock.received.is_empty() {
            while buf.remaining() > 0 {
                let Some(&(id, len)) = sock.received.front() else {
                    break;
                };
                let bytes = &state.buffers.bytes(id, len as usize)[sock.first_read..];
                let n = bytes.len().min(buf.remaining());
                buf.put_slice(&bytes[..n]);
                sock.first_read += n;
                if sock.first_read == len as usize {
                    sock.received.pop_front();
                    sock.first_read = 0;
                    state.buffers.give_back(id);
                }
            }
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = sock.recv_error {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if sock.eof {
            return Poll::Ready(Ok(()));
        }
        sock.reader = Some(cx.waker().clone());
        if sock.receiving == Receiving::Idle {
            state.arm(this.key);
        }
        Poll::Pending
    }
}

impl AsyncWrite for RingSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match this.try_send(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut state = this.ring.state.borrow_mut();
                state.socks[this.key].writer = Some(cx.waker().clone());
                Poll::Pending
            }
            r => Poll::Ready(r),
        }
    }

    /// Ready at once: what was written is queued and goes with the thread's next submission
    /// (a write waits when the queue is full; `shutdown`, a direct write and taking the
    /// socket back wait for the queue to be out). Waiting here would cost every proxied
    /// answer a loop turn for nothing.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let state = self.ring.state.borrow();
        Poll::Ready(match state.socks[self.key].send_error {
            Some(e) => Err(io::Error::from_raw_os_error(e)),
            None => Ok(()),
        })
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_sent(cx))?;
        Poll::Ready(socket2::SockRef::from(&*self).shutdown(std::net::Shutdown::Write))
    }
}

impl Drop for RingSocket {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let mut state = self.ring.state.borrow_mut();
        state.socks[self.key].orphan = true;
        state.drop_received(self.key);
        state.cancel_receive(self.key);
        state.cancel_poll(self.key);
        // What was written goes out before the close, as on a socket tokio closes.
        state.send_out_orphan(self.key);
        state.remove_if_done(self.key);
    }
}
