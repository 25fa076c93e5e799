//! The master's end of one worker's control socket: lines that reach the worker whole.
//!
//! Owns: writing control lines and what waits to be written. Must not touch: what the lines
//! say (see `server::control::Message`) or the worker's life.
//!
//! A bare `try_write` could take part of a line when the socket's buffer is nearly full (a
//! burst of certificates for held handshakes, a worker slow to read), leaving the worker half
//! a line glued to the next. Here a line is written at once when nothing waits before it —
//! the usual case: no task, no allocation — and otherwise queued, its unwritten part first,
//! for a task that writes the queue out as the socket drains and then ends. A task per
//! worker for its whole life was tried and dropped: it held the socket past the process.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::net::unix::OwnedWriteHalf;

/// What may wait for a worker that does not read: past it a line is refused (the caller's
/// retry or the worker's replacement follows), not held in the master's memory.
const MAX_WAITING: usize = 8 << 20;

/// One worker's control socket, as the master writes to it.
pub(super) struct ControlOut {
    shared: Arc<Shared>,
}

struct Shared {
    socket: OwnedWriteHalf,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    bytes: VecDeque<u8>,
    /// The task writing `bytes` out, while there is one.
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl ControlOut {
    pub(super) fn new(socket: OwnedWriteHalf) -> ControlOut {
        ControlOut {
            shared: Arc::new(Shared {
                socket,
                waiting: Mutex::new(Waiting::default()),
            }),
        }
    }

    /// Sends `line` (newline included): `true` when it was written or is queued behind what
    /// waits, `false` when the worker is gone or has `MAX_WAITING` unread.
    pub(super) fn send(&self, line: &str) -> bool {
        let line = line.as_bytes();
        let mut waiting = self.shared.lock();
        if !waiting.bytes.is_empty() {
            if waiting.bytes.len() + line.len() > MAX_WAITING {
                return false;
            }
            waiting.bytes.extend(line);
            return true;
        }
        let written = match self.shared.socket.try_write(line) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(_) => return false,
        };
        if written < line.len() {
            waiting.bytes.extend(&line[written..]);
            let shared = self.shared.clone();
            waiting.writer = Some(tokio::spawn(write_out(shared)));
        }
        true
    }
}

impl Drop for ControlOut {
    /// The process is forgotten: what waits for it is dropped with its socket.
    fn drop(&mut self) {
        if let Some(writer) = self.shared.lock().writer.take() {
            writer.abort();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writes what waits as the socket takes it, until nothing waits or the socket fails.
async fn write_out(shared: Arc<Shared>) {
    loop {
        if shared.socket.writable().await.is_err() {
            break;
        }
        let mut waiting = shared.lock();
        let (front, _) = waiting.bytes.as_slices();
        match shared.socket.try_write(front) {
            Ok(n) => {
                waiting.bytes.drain(..n);
                if waiting.bytes.is_empty() {
                    waiting.writer = None;
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    let mut waiting = shared.lock();
    waiting.bytes.clear();
    waiting.writer = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Lines far past the socket's buffer, sent with no reader, arrive whole and in order
    /// once the worker reads; past `MAX_WAITING` a line is refused, not half sent.
    #[tokio::test]
    async fn lines_past_a_full_buffer_arrive_whole_and_in_order() {
        let (master, worker) = tokio::net::UnixStream::pair().unwrap();
        let (_read, write) = master.into_split();
        let out = ControlOut::new(write);
        let line = |i: usize| format!("{i}:{}\n", "x".repeat(100_000));
        let mut sent = 0;
        while out.send(&line(sent)) {
            sent += 1;
            assert!(sent < 200, "never refused");
        }
        assert!(sent > 10, "{sent}");
        let mut got = Vec::new();
        let expected: usize = (0..sent).map(|i| line(i).len()).sum();
        let mut worker = worker;
        let mut buf = vec![0u8; 1 << 16];
        while got.len() < expected {
            let n = worker.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8(got).unwrap();
        for (i, l) in text.lines().enumerate() {
            assert_eq!(format!("{l}\n"), line(i));
        }
        // Drained: the next line goes out at once again.
        assert!(out.send("ping\n"));
    }
}
