//! What the master sends a worker over its control socket, written whole and in order: each
//! line is queued and a task of the worker's own writes it out with `write_all`. Writing
//! straight with `try_write` could write part of a line when the socket's buffer was nearly
//! full (a burst of certificates a handshake waits for, a worker slow to read) — the rest
//! dropped, and the worker then reading half a line glued to the next.
//!
//! Owns: that queue, bounded ([`MOST_QUEUED`]: a worker that stops reading is replaced by
//! its pings' deadline long before). Must not touch: the messages (`server::control`) or who
//! is told what (the supervisor).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

/// The most bytes queued for one worker; past it, a line is refused.
const MOST_QUEUED: usize = 16 << 20;

/// A worker's control socket, as the master writes to it.
pub(super) struct Outbox {
    lines: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
}

impl Outbox {
    /// Takes the socket's writing half; its task ends when the outbox is dropped (after
    /// writing what was queued) or the worker is gone.
    pub(super) fn new(mut socket: OwnedWriteHalf) -> Outbox {
        let (lines, mut queue) = mpsc::unbounded_channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&queued);
        tokio::spawn(async move {
            while let Some(line) = queue.recv().await {
                if socket.write_all(&line).await.is_err() {
                    return;
                }
                counted.fetch_sub(line.len(), Ordering::Relaxed);
            }
        });
        Outbox { lines, queued }
    }

    /// Queues `line` whole (its length), or refuses it: the worker is gone, or
    /// [`MOST_QUEUED`] is reached.
    pub(super) fn try_write(&self, line: &[u8]) -> std::io::Result<usize> {
        let full =
            || std::io::Error::new(std::io::ErrorKind::WouldBlock, "the worker reads no more");
        if self.queued.load(Ordering::Relaxed) + line.len() > MOST_QUEUED {
            return Err(full());
        }
        self.queued.fetch_add(line.len(), Ordering::Relaxed);
        self.lines.send(line.to_vec()).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the worker is gone")
        })?;
        Ok(line.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn lines_arrive_whole_and_in_order_past_the_sockets_buffer() {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let (_, write) = ours.into_split();
        let outbox = Outbox::new(write);
        // Far more than a socket's buffer holds, sent before the reader reads a byte.
        let line = |i: usize| format!("certificate {i} {}\n", "x".repeat(4000));
        for i in 0..200 {
            assert!(outbox.try_write(line(i).as_bytes()).is_ok());
        }
        drop(outbox);
        let mut read = String::new();
        let mut theirs = theirs;
        theirs.read_to_string(&mut read).await.unwrap();
        let got: Vec<&str> = read.lines().collect();
        assert_eq!(got.len(), 200);
        for (i, l) in got.iter().enumerate() {
            assert_eq!(format!("{l}\n"), line(i));
        }
    }
}
