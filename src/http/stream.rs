//! The client connection as the engine sees it: a plain TCP socket, or TLS over one.
//!
//! Owns: [`ClientStream`], what the connection loop, its writes and the proxy need of a
//! connection beyond reading and writing (the kernel-TLS stream is `super::ktls`'s). Must not touch: TLS itself (rustls, through
//! `tokio-rustls`) or what is read and written.

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A client connection: bytes in and out, and the socket beneath.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// The TCP socket beneath (addresses, options, the graceful-stop registry).
    fn socket(&self) -> &TcpStream;

    /// The socket itself when what is written to it reaches the client as it is (cleartext):
    /// only then may a file go by `sendfile`, a write skip the async machinery, and the
    /// connection be handed to another pool.
    fn cleartext(&self) -> Option<&TcpStream>;

    /// The plain TCP socket itself, for a cleartext connection that turns out to speak
    /// HTTP/2 (h2c with prior knowledge); a TLS stream is given back.
    fn into_tcp(self) -> Result<TcpStream, Self>
    where
        Self: Sized;

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
    fn socket(&self) -> &TcpStream {
        self
    }

    fn cleartext(&self) -> Option<&TcpStream> {
        Some(self)
    }

    fn into_tcp(self) -> Result<TcpStream, Self> {
        Ok(self)
    }
}

impl ClientStream for tokio_rustls::server::TlsStream<super::sni::Rewind> {
    fn socket(&self) -> &TcpStream {
        self.get_ref().0.get_ref()
    }

    fn cleartext(&self) -> Option<&TcpStream> {
        None
    }

    fn into_tcp(self) -> Result<TcpStream, Self> {
        Err(self)
    }
}
