//! Choosing a TLS connection's pool before its handshake, by the name in its ClientHello
//! (SNI), so that sites of different pools can share one https address: the bytes read to
//! find the name are kept, and replayed to whichever thread does the handshake — here, or in
//! the pool the connection is handed to with them.
//!
//! Owns: reading a ClientHello (with rustls's `Acceptor`, which only parses it) and
//! [`Rewind`], the stream that replays the bytes read before (and, where the kernel has kTLS,
//! follows the TLS record boundaries of what it reads, for `super::ktls`). Must not touch: the handshake
//! itself (`tokio-rustls`, in `super::accept`) or which pool serves a name (the service).

use crate::tls::kernel::RecordCursor;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The longest ClientHello read before giving up (rustls's own bound on a handshake
/// message is 64 KiB).
const MAX_HELLO: usize = 64 << 10;

/// What a ClientHello asks for, as far as choosing before the handshake goes.
pub struct Hello {
    /// The name (SNI), if any.
    pub name: Option<String>,
    /// Whether it offers ALPN `acme-tls/1`: an ACME directory's TLS-ALPN-01 validation.
    pub acme: bool,
}

/// Reads from `stream` (after `read`, the bytes already read) until a whole ClientHello is
/// there; returns what it asks for. `Err` when the connection must be closed: not
/// TLS, a timeout, or the peer gone (an alert rustls wants sent is sent).
pub async fn client_hello(
    stream: &mut TcpStream,
    read: &mut Vec<u8>,
    timeout: Duration,
) -> Result<Hello, ()> {
    use tokio::io::AsyncWriteExt;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < read.len() {
            match acceptor.read_tls(&mut &read[fed..]) {
                Ok(n) => fed += n,
                Err(_) => return Err(()),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let hello = accepted.client_hello();
                let mut alpn = hello.alpn().into_iter().flatten();
                return Ok(Hello {
                    name: hello.server_name().map(str::to_owned),
                    acme: alpn.any(|p| p == crate::tls::ACME_TLS_ALPN),
                });
            }
            Ok(None) => {}
            Err((_, alert)) => {
                let mut out = Vec::new();
                let mut alert = alert;
                let _ = alert.write(&mut out);
                let _ = stream.write_all(&out).await;
                return Err(());
            }
        }
        if read.len() >= MAX_HELLO {
            return Err(());
        }
        read.reserve(4096);
        match tokio::time::timeout_at(deadline, stream.read_buf(read)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(()),
        }
    }
}

/// A TCP stream (tokio's, or one on the thread's ring) that first replays `prefix` (bytes
/// read from it before), then reads on.
pub struct Rewind<S = TcpStream> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
    /// Where the TLS records read so far end, for a connection that may be handed to the
    /// kernel's TLS (see `super::ktls`); `None` costs nothing per read.
    records: Option<RecordCursor>,
}

impl<S> Rewind<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Self {
        Rewind {
            prefix,
            at: 0,
            inner,
            records: None,
        }
    }

    /// A rewind that also follows the TLS record boundaries of what it reads.
    pub fn tracking_records(prefix: Vec<u8>, inner: S) -> Self {
        Rewind {
            records: Some(RecordCursor::default()),
            ..Rewind::new(prefix, inner)
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Whether everything read so far ends at a record boundary (and nothing is left to
    /// replay): only then does the reader hold no part of a record. `false` when untracked.
    pub fn at_record_boundary(&self) -> bool {
        self.prefix.is_empty() && self.records.as_ref().is_some_and(RecordCursor::at_boundary)
    }

    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
        } else {
            std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        }
        if let Some(records) = &mut self.records {
            records.advance(&buf.filled()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
