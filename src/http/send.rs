//! Writing a connection's answers: whole buffers and file bodies, each bounded by the body
//! timeout, and the lingering close after a final response.
//!
//! Owns: those writes. Must not touch: what is written (see [`super::conn`]).

use super::service::{ConnEnv, FileBody};
use super::stream::ClientStream;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// Writes `buf` whole, or fails when the peer stops reading for the body timeout. On a plain
/// socket the first attempt needs no timer: the socket buffer (or a ring socket's queue)
/// almost always takes a whole response. Over TLS the records are flushed.
pub(super) async fn write_all<S, C: ClientStream>(
    stream: &mut C,
    buf: &[u8],
    env: &ConnEnv<S>,
) -> std::io::Result<()> {
    let written = match stream.try_send(buf) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Some(Err(e)) => return Err(e),
    };
    if written == buf.len() {
        return Ok(());
    }
    let rest = async {
        stream.write_all(&buf[written..]).await?;
        stream.flush().await
    };
    match tokio::time::timeout(env.timeouts.body, rest).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// Sends a file range after its head: by `sendfile` on a plain socket (epoll's or the
/// ring's) or one whose TLS is the kernel's; over rustls, read and written in pieces.
pub(super) async fn send_file<S, C: ClientStream>(
    stream: &mut C,
    f: FileBody,
    env: &ConnEnv<S>,
) -> std::io::Result<()> {
    let mut offset = f.offset;
    let end = f.offset + f.len;
    while offset < end {
        let want = (end - offset).min(1 << 30) as usize;
        let writable = std::future::poll_fn(|cx| stream.poll_file_writable(cx));
        let fd = match tokio::time::timeout(env.timeouts.body, writable).await {
            Ok(Ok(Some(fd))) => fd,
            Ok(Ok(None)) if offset == f.offset => return copy_file(stream, f, env).await,
            // The kernel's TLS reached its key's limit mid-file.
            Ok(Ok(None)) => return Err(std::io::ErrorKind::BrokenPipe.into()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        };
        // The stream's own socket, open for as long as `stream` is borrowed here.
        match crate::os::net::sendfile(&fd, &*f.file, &mut offset, want) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => stream.sent(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => stream.file_would_block(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A file range read in pieces and written through the stream (TLS).
async fn copy_file<S, C: ClientStream>(
    stream: &mut C,
    f: FileBody,
    env: &ConnEnv<S>,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (64 << 10).min(f.len as usize)];
    let mut offset = f.offset;
    let end = f.offset + f.len;
    while offset < end {
        let want = ((end - offset) as usize).min(buf.len());
        // A page-cache read: the handlers' files are served from memory or disk, never a peer.
        let n = f.file.read_at(&mut buf[..want], offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        write_all(stream, &buf[..n], env).await?;
        offset += n as u64;
    }
    Ok(())
}

/// How long a closing connection may go on being read, all told (nginx's `lingering_time`
/// is 30 s), and how much of it.
const LINGER_FOR: Duration = Duration::from_secs(5);
const LINGER_BYTES: usize = 16 << 20;

/// Closes after a final response without destroying it: stop sending, then read and discard
/// what the client still sends, so the kernel does not answer it with a reset that could
/// overtake our response — a client still sending a body refused 413 would see "connection
/// reset" instead of the 413 (curl: "Failed sending data to the peer"). Bounded as nginx's
/// lingering close is: a second at most without a byte (or the header timeout, if shorter),
/// [`LINGER_FOR`] and [`LINGER_BYTES`] in all; a client that closes its end at our FIN, as
/// clients do, ends it at once.
pub(super) async fn linger_close<S, C: ClientStream>(mut stream: C, env: &ConnEnv<S>) {
    // Bounded: a ring's socket first sends what it queued, to a client that may not read.
    let _ = tokio::time::timeout(env.timeouts.body, stream.shutdown()).await;
    let idle = Duration::from_secs(1).min(env.timeouts.header);
    let deadline = Instant::now() + LINGER_FOR;
    let mut sink = [0u8; 4096];
    let mut left = LINGER_BYTES;
    while left > 0 {
        let until = deadline.min(Instant::now() + idle);
        match tokio::time::timeout_at(until, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}
