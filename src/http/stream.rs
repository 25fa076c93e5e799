//! The client connection as the engine sees it: a plain TCP socket on tokio's epoll, one on
//! the thread's io_uring ([`RingSocket`]), or TLS over one.
//!
//! Owns: [`ClientStream`], what the connection loop, its writes and the proxy need of a
//! connection beyond reading and writing (the kernel-TLS stream is `super::ktls`'s). Must not
//! touch: TLS itself (rustls, through `tokio-rustls`), the ring (`crate::os::uring`), or what
//! is read and written.

use crate::os::uring::RingSocket;
use socket2::SockRef;
use std::future::Future;
use std::io;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A cleartext connection as a tokio socket, with the bytes it had received and nobody read
/// (a ring's receive buffers); or why it cannot be one.
pub enum IntoTcp<C> {
    Tcp(TcpStream, Vec<u8>),
    /// TLS: the stream as it was.
    Tls(C),
    /// Taking it off the ring failed (the socket is gone).
    Lost,
}

/// A client connection: bytes in and out, and the socket beneath.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// The TCP socket beneath (addresses, options, the graceful-stop registry).
    fn sock(&self) -> SockRef<'_>;

    /// The socket itself when what is written to it reaches the client as it is and tokio
    /// watches it (cleartext, not on the ring): a file may go by `sendfile` and a write skip
    /// the async machinery.
    fn cleartext(&self) -> Option<&TcpStream>;

    /// Whether the connection is TLS (then it cannot change pools or turn to h2c).
    fn is_tls(&self) -> bool {
        self.cleartext().is_none()
    }

    /// The plain TCP socket itself, for a cleartext connection handed to another pool or
    /// that turns out to speak HTTP/2 (h2c with prior knowledge); a TLS stream is given back.
    /// The caller bounds the wait (a ring's socket first sends what it queued).
    fn into_tcp(self) -> impl Future<Output = IntoTcp<Self>>
    where
        Self: Sized;

    /// Queues or writes `buf` without waiting: `None` when this stream cannot (TLS through
    /// rustls: the async write encrypts); else how much was taken, or `WouldBlock`.
    fn try_send(&mut self, buf: &[u8]) -> Option<io::Result<usize>> {
        let written = self.sendable()?.try_write(buf);
        if let Ok(n) = written {
            self.sent(n);
        }
        Some(written)
    }

    /// For `sendfile` on the socket: ready when what was written before is out and the
    /// socket may take more, then `Some(fd)`; `None` when a file cannot go by `sendfile` here
    /// (rustls's TLS, or the kernel's near its key's limit).
    fn poll_file_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<i32>>> {
        use std::os::fd::AsRawFd;
        match self.sendable() {
            None => Poll::Ready(Ok(None)),
            Some(socket) => socket
                .poll_write_ready(cx)
                .map_ok(|()| Some(socket.as_raw_fd())),
        }
    }

    /// `sendfile` on the socket met a full buffer: the readiness tokio had seen is stale.
    fn file_would_block(&mut self) {
        if let Some(socket) = self.sendable() {
            // Clears the readiness so the next `poll_file_writable` waits for the kernel.
            let _ = socket.try_io(tokio::io::Interest::WRITABLE, || {
                Err::<(), _>(io::ErrorKind::WouldBlock.into())
            });
        }
    }

    /// The socket, when what the engine writes to it reaches the client as it should (as it
    /// is, or encrypted by the kernel's TLS): writes may skip the async machinery and a file
    /// may go by `sendfile`. Each such write is reported with [`Self::sent`].
    fn sendable(&self) -> Option<&TcpStream> {
        self.cleartext()
    }

    /// `bytes` went out through [`Self::sendable`].
    fn sent(&mut self, _bytes: usize) {}

    /// Whether the connection may serve another request after the current one (false once
    /// the kernel's TLS keys near their use limit).
    fn may_keep_alive(&self) -> bool {
        true
    }

    /// Before a large file: the same connection, its TLS handed to the kernel where `support`
    /// (what the kernel takes) allows (see `super::ktls`), so the file may go by `sendfile`. Plaintext the TLS layer
    /// decrypted but the engine has not read is appended to `unread`.
    fn offloaded(self, _support: crate::os::ktls::KernelSupport, _unread: &mut Vec<u8>) -> Self
    where
        Self: Sized,
    {
        self
    }
}

impl ClientStream for TcpStream {
    fn sock(&self) -> SockRef<'_> {
        SockRef::from(self)
    }

    fn cleartext(&self) -> Option<&TcpStream> {
        Some(self)
    }

    async fn into_tcp(self) -> IntoTcp<Self> {
        IntoTcp::Tcp(self, Vec::new())
    }
}

/// TLS by rustls over tokio's socket or over one on the thread's ring (the kernel's TLS,
/// which needs tokio's socket, is `super::ktls`'s own stream).
impl<S> ClientStream for tokio_rustls::server::TlsStream<super::sni::Rewind<S>>
where
    S: AsyncRead + AsyncWrite + Unpin + std::os::fd::AsFd,
{
    fn sock(&self) -> SockRef<'_> {
        SockRef::from(self.get_ref().0.get_ref())
    }

    fn cleartext(&self) -> Option<&TcpStream> {
        None
    }

    async fn into_tcp(self) -> IntoTcp<Self> {
        IntoTcp::Tls(self)
    }
}

/// A cleartext connection on the thread's ring: writes are queued (never a timer, never a
/// wait unless the queue is full), and a file goes by `sendfile` once the ring says the
/// socket is writable.
impl ClientStream for RingSocket {
    fn sock(&self) -> SockRef<'_> {
        SockRef::from(self)
    }

    fn cleartext(&self) -> Option<&TcpStream> {
        None
    }

    fn is_tls(&self) -> bool {
        false
    }

    async fn into_tcp(self) -> IntoTcp<Self> {
        match self.into_std().await {
            Ok((std, unread)) => match TcpStream::from_std(std) {
                Ok(tcp) => IntoTcp::Tcp(tcp, unread),
                Err(_) => IntoTcp::Lost,
            },
            Err(_) => IntoTcp::Lost,
        }
    }

    fn try_send(&mut self, buf: &[u8]) -> Option<io::Result<usize>> {
        Some(RingSocket::try_send(self, buf))
    }

    fn poll_file_writable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<i32>>> {
        use std::os::fd::AsRawFd;
        self.poll_writable(cx).map_ok(|()| Some(self.as_raw_fd()))
    }

    fn file_would_block(&mut self) {
        self.would_block();
    }
}
