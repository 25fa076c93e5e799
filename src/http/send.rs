//! Writing a connection's answers: whole buffers and file bodies, each bounded by the body
//! timeout, and the lingering close after a final response.
//!
//! Owns: those writes. Must not touch: what is written (see [`super::conn`]).

use super::conn::{ConnEnv, FileBody};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Writes `buf` whole, or fails when the peer stops reading for the body timeout. The first
/// attempt needs no timer: the socket buffer almost always takes a whole response.
pub(super) async fn write_all<S>(
    stream: &mut TcpStream,
    buf: &[u8],
    env: &ConnEnv<S>,
) -> std::io::Result<()> {
    let written = match stream.try_write(buf) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    if written == buf.len() {
        return Ok(());
    }
    match tokio::time::timeout(env.timeouts.body, stream.write_all(&buf[written..])).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

pub(super) async fn send_file<S>(
    stream: &TcpStream,
    f: FileBody,
    env: &ConnEnv<S>,
) -> std::io::Result<()> {
    let mut offset = f.offset;
    let end = f.offset + f.len;
    while offset < end {
        let want = (end - offset).min(1 << 30) as usize;
        match stream.try_io(Interest::WRITABLE, || {
            crate::os::net::sendfile(stream, &*f.file, &mut offset, want)
        }) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(env.timeouts.body, stream.writable()).await {
                    Ok(r) => r?,
                    Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes after a final response without destroying it: stop sending, then read and discard
/// what the client still sends (bounded), so the kernel does not answer it with a reset that
/// could overtake our response.
pub(super) async fn linger_close<S>(mut stream: TcpStream, env: &ConnEnv<S>) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + Duration::from_secs(1).min(env.timeouts.header);
    let mut sink = [0u8; 4096];
    let mut left: usize = 1 << 20;
    while left > 0 {
        match tokio::time::timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            _ => break,
        }
    }
}
