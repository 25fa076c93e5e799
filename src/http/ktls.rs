//! An HTTPS/1.1 connection that hands its records to the kernel's TLS (kTLS) when it is about
//! to send a large file: from then on the kernel encrypts what the engine writes and decrypts
//! what it reads, so the file goes by `sendfile` — never copied into user space — as on a
//! cleartext connection.
//!
//! Owns: [`Https`], the stream the engine serves on kTLS-capable kernels, the hand-over
//! (nothing rustls holds may be lost: unsent records, part of a received record, decrypted
//! bytes not yet read) and [`KernelTls`]. Must not touch: the socket options (`os::ktls`),
//! which suites the kernel may continue (`tls::kernel`), the handshake, or HTTP.
//!
//! Why only before a large file, not after every handshake: `sendfile` is the one place the
//! kernel's TLS can save work (no copy through user space). For a small answer it only
//! replaces rustls's AEAD with the kernel's, and every connection handed over would pay the
//! hand-over. So a connection stays with rustls until a file of [`OFFLOAD_MIN_FILE`] or more
//! is to be sent, and then stays with the kernel. It is off unless `[server] ktls = "auto"`:
//! `bench/ktls.sh`, which could only run in an emulated guest here, did not show it cheaper
//! than rustls for espalier (docs/guide/https.md has the figures).
//!
//! What the kernel then does not do: it cannot take a TLS 1.3 `KeyUpdate` from the client
//! (rare; browsers do not send one), and a record that is not application data — that, or the
//! client's `close_notify` — makes the next read fail with `EIO`, which ends the connection
//! as a close would. HTTP/2 connections stay with rustls: the `h2` crate copies every frame
//! through user space anyway.

use super::sni::Rewind;
use super::stream::ClientStream;
use crate::os::ktls::KernelSupport;
use crate::os::ktls::{attach, install_secrets, send_close_notify, Direction};
use crate::tls::kernel::RecordBudget;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A connection whose TLS records the kernel makes and opens.
pub struct KernelTls {
    socket: TcpStream,
    budget: RecordBudget,
    close_notified: bool,
}

/// A file body at least this large hands the connection to the kernel: the static handler
/// keeps smaller files in memory, and a small range of a large file gains nothing.
pub const OFFLOAD_MIN_FILE: u64 = 256 << 10;

/// An HTTPS/1.1 connection on a kernel with kTLS: rustls's until [`ClientStream::offloaded`]
/// hands it over.
// Large: the stream moves by value, as it would into `serve`; a box would allocate for it.
#[allow(clippy::large_enum_variant)]
pub enum Https {
    Rustls(TlsStream<Rewind>),
    Kernel(KernelTls),
    /// The secrets were taken but the kernel refused them (the probe makes this a kernel's
    /// change of mind): the connection cannot go on, and its socket is shut both ways, so
    /// nothing can leave it in cleartext.
    Broken(TcpStream),
}

crate::async_io::delegate_async_io!(Https {
    Rustls,
    Kernel,
    Broken
});

impl Https {
    /// Hands a rustls connection to the kernel when `support` covers what its handshake
    /// agreed and rustls holds nothing that would be lost. Plaintext rustls decrypted but the
    /// engine has not read is appended to `unread` first.
    fn hand_over(self, support: KernelSupport, unread: &mut Vec<u8>) -> Https {
        let Https::Rustls(mut tls) = self else {
            return self;
        };
        let (rewind, conn) = tls.get_ref();
        let agreed = conn
            .protocol_version()
            .zip(conn.negotiated_cipher_suite())
            .and_then(|(version, suite)| crate::tls::kernel::offload_of(version, suite.suite()));
        let Some(offload) = agreed.filter(|o| support.has(*o)) else {
            return Https::Rustls(tls);
        };
        // Part of a record read by rustls would be lost to the kernel, which reads on from
        // the socket.
        if !rewind.at_record_boundary() {
            return Https::Rustls(tls);
        }
        let conn = tls.get_mut().1;
        let Ok(state) = conn.process_new_packets() else {
            return Https::Rustls(tls);
        };
        // Records rustls has yet to send (unflushed, or an answer to what it processed just
        // now, such as a key update's own) would go out after the kernel's.
        if state.peer_has_closed() || state.tls_bytes_to_write() > 0 {
            return Https::Rustls(tls);
        }
        let waiting = state.plaintext_bytes_to_read();
        if waiting > 0 {
            let start = unread.len();
            unread.resize(start + waiting, 0);
            if conn.reader().read_exact(&mut unread[start..]).is_err() {
                unread.truncate(start);
                return Https::Rustls(tls);
            }
        }
        let fd = tls.get_ref().0.get_ref().as_raw_fd();
        if attach(fd).is_err() {
            return Https::Rustls(tls);
        }
        let (rewind, conn) = tls.into_inner();
        let socket = rewind.into_inner();
        let installed = conn.dangerous_extract_secrets().is_ok_and(|secrets| {
            let (tx_seq, tx) = &secrets.tx;
            let (rx_seq, rx) = &secrets.rx;
            install_secrets(fd, Direction::Transmit, offload, tx, *tx_seq).is_ok()
                && install_secrets(fd, Direction::Receive, offload, rx, *rx_seq).is_ok()
        });
        if !installed {
            crate::os::net::shutdown_both(fd);
            return Https::Broken(socket);
        }
        Https::Kernel(KernelTls {
            socket,
            budget: RecordBudget::default(),
            close_notified: false,
        })
    }
}

impl AsyncRead for KernelTls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // A record that is not application data fails the read (EIO): see the module's doc.
        Pin::new(&mut self.socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for KernelTls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !self.budget.may_send() {
            return Poll::Ready(Err(io::Error::other(
                "the TLS keys' record limit is reached",
            )));
        }
        let n = std::task::ready!(Pin::new(&mut self.socket).poll_write(cx, buf))?;
        self.budget.spend(n);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.close_notified {
            self.close_notified = true;
            // As rustls would, before the FIN; a client that sees none may call the response
            // truncated. Skipped when the socket's buffer is full.
            let _ = send_close_notify(self.socket.as_raw_fd());
        }
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

impl ClientStream for Https {
    fn sock(&self) -> socket2::SockRef<'_> {
        match self {
            Https::Rustls(tls) => tls.sock(),
            Https::Kernel(k) => socket2::SockRef::from(&k.socket),
            Https::Broken(socket) => socket2::SockRef::from(socket),
        }
    }

    /// Never cleartext: it is HTTPS to the service and cannot change pools.
    fn cleartext(&self) -> Option<&TcpStream> {
        None
    }

    async fn into_tcp(self) -> super::stream::IntoTcp<Self> {
        super::stream::IntoTcp::Tls(self)
    }

    fn sendable(&self) -> Option<&TcpStream> {
        match self {
            Https::Kernel(k) => k.budget.may_send().then_some(&k.socket),
            _ => None,
        }
    }

    fn sent(&mut self, bytes: usize) {
        if let Https::Kernel(k) = self {
            k.budget.spend(bytes);
        }
    }

    fn may_keep_alive(&self) -> bool {
        match self {
            Https::Kernel(k) => k.budget.may_keep_alive(),
            Https::Rustls(_) => true,
            Https::Broken(_) => false,
        }
    }

    fn offloaded(self, support: KernelSupport, unread: &mut Vec<u8>) -> Self {
        self.hand_over(support, unread)
    }
}
