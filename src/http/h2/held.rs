//! The answers to the streams one read brought, leaving in one write: the h2 crate flushes
//! its frames whenever its connection is polled, which is once per stream accepted, so a
//! client's ten requests read together went back as ten writes — over TLS ten records, each
//! sealed, and ten syscalls (strace under `h2load -m10`: one `writev` per request, as nginx's
//! one `write` per request). While the connection's loop takes streams that are already read,
//! their frames are held in a buffer; when no stream is left to take, everything goes out
//! together.
//!
//! Owns: [`HeldWrites`], the buffer between the h2 crate and the connection, and
//! [`accept_held`], the loop's way to take the next stream. Must not touch: HTTP/2 itself
//! (framing, flow control and HPACK are the crate's) or TLS.

use bytes::Bytes;
use h2::server::{Connection, SendResponse};
use h2::RecvStream;
use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, BufWriter, ReadBuf};

/// What is held at most: one TLS record's plaintext. Beyond it the buffer is written out
/// anyway, and a file's large frames go straight through.
const HELD: usize = 16 << 10;

/// A connection's bytes out, held while `holding` is set: writes gather in the buffer and a
/// flush leaves them there. Shutting down always writes them out.
pub(super) struct HeldWrites<T> {
    io: BufWriter<T>,
    holding: Rc<Cell<bool>>,
}

impl<T: AsyncRead + AsyncWrite> HeldWrites<T> {
    /// `io` and the switch the connection's loop holds its writes with.
    pub(super) fn new(io: T) -> (Self, Rc<Cell<bool>>) {
        let holding = Rc::new(Cell::new(false));
        let held = HeldWrites {
            io: BufWriter::with_capacity(HELD, io),
            holding: Rc::clone(&holding),
        };
        (held, holding)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeldWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HeldWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.holding.get() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A stream the client opened, with its way to answer.
pub(super) type Accepted =
    Option<Result<(http::Request<RecvStream>, SendResponse<Bytes>), h2::Error>>;

/// The connection's next stream. Its writes are held while a stream is there to take; when
/// none is, the connection is polled once more with them released, which writes out all
/// that was held (the crate flushes whenever it has nothing left to read) and leaves the
/// connection waiting for the socket.
pub(super) async fn accept_held<T: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Connection<HeldWrites<T>, Bytes>,
    holding: &Cell<bool>,
) -> Accepted {
    std::future::poll_fn(|cx| {
        holding.set(true);
        let taken = conn.poll_accept(cx);
        holding.set(false);
        match taken {
            Poll::Pending => conn.poll_accept(cx),
            taken => taken,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// Each write the connection's socket would see, as it came.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncRead for Writes {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn run(f: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn writes_held_leave_together_when_released() {
        run(async {
            let (mut held, holding) = HeldWrites::new(Writes::default());
            holding.set(true);
            for answer in [&b"first"[..], b"second", b"third"] {
                held.write_all(answer).await.unwrap();
                held.flush().await.unwrap();
            }
            assert!(held.io.get_ref().0.is_empty(), "nothing leaves while held");
            holding.set(false);
            held.flush().await.unwrap();
            assert_eq!(held.io.get_ref().0, vec![b"firstsecondthird".to_vec()]);
        });
    }

    #[test]
    fn a_large_write_and_a_shutdown_are_not_held() {
        run(async {
            let (mut held, holding) = HeldWrites::new(Writes::default());
            holding.set(true);
            held.write_all(b"head").await.unwrap();
            let frame = vec![7u8; HELD + 1];
            held.write_all(&frame).await.unwrap();
            assert_eq!(held.io.get_ref().0, vec![b"head".to_vec(), frame]);
            held.write_all(b"goaway").await.unwrap();
            held.shutdown().await.unwrap();
            assert_eq!(held.io.get_ref().0.last().unwrap(), b"goaway");
        });
    }
}
