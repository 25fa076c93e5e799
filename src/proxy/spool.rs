//! Buffering an app's answer for a slow client (`buffer` on a pool or an `[[upstream]]`,
//! nginx's `proxy_buffering`): the body is read at the app's speed into memory, up to
//! `response` bytes, then into an unnamed temporary file (a worker's files hold `disk` bytes
//! together at most), while the
//! client is sent what it takes; once the app has sent the last byte its connection goes
//! back to its pool and its slot is free — a sync app's process takes its next request
//! while a client on a slow link is still reading. Past both bounds the app is read as the
//! client takes it, as without buffering.
//!
//! The two sides run in the forwarder's own task: [`fill`] reads the app into the
//! [`Spool`], and the usual relay ([`super::relay`] or [`super::encode`]) reads the spool as
//! it would read the app's connection — so framing, rechunking and compression are the
//! relay's, unchanged. Nothing is held back: what the app sent reaches the client as soon as
//! it takes it (server-sent events would still flow; they are not buffered all the same, see
//! [`streams`]). The file is read and written with plain `pread`/`pwrite`: its pages are
//! the page cache's, as nginx's temporary files are without `aio`.
//!
//! Owns: the spool, the filling, and which answers are buffered. Must not touch: the answer's
//! head or its framing to the client.

use super::route::{Held, ProxyRoute};
use super::upstream::Conn;
use super::wire::{read_timeout, BodyKind};
use super::Endpoint;
use crate::http::ChunkedDecoder;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};

/// One read from the app, at most.
const READ: usize = 64 << 10;

/// Whether an answer with these fields streams by nature and is never buffered: server-sent
/// events, gRPC, or an app that asks for it (`X-Accel-Buffering: no`, nginx's field).
pub(super) fn streams<'h>(mut fields: impl Iterator<Item = (&'h str, &'h [u8])>) -> bool {
    fields.any(|(name, value)| {
        // Bytes, not text: an app's value need not be UTF-8, nor cut at a character.
        let value = value.trim_ascii();
        let starts = |t: &[u8]| {
            value
                .get(..t.len())
                .is_some_and(|v| v.eq_ignore_ascii_case(t))
        };
        (name.eq_ignore_ascii_case("content-type")
            && (starts(b"text/event-stream") || starts(b"application/grpc")))
            || (name.eq_ignore_ascii_case("x-accel-buffering") && value.eq_ignore_ascii_case(b"no"))
    })
}

/// What the app sent and the client has not taken yet: in memory first, then in the file.
/// Bytes go to memory only while the file holds none unread, so order is kept.
struct Unsent {
    /// Bytes held in memory at most, and in the file.
    most_in_memory: u64,
    most_on_disk: u64,
    /// What the process's spool files hold together ([`ON_DISK`]; a test's own).
    on_disk: &'static AtomicU64,
    pieces: VecDeque<Bytes>,
    in_memory: usize,
    file: Option<File>,
    /// The file's bytes: written up to `written`, read up to `read`.
    written: u64,
    read: u64,
    /// The file could not be made or written: memory only.
    no_file: bool,
    /// A write to the file failed behind bytes it held: the answer cannot go on in order.
    broken: bool,
    /// `Some(true)`: the app sent the whole body; `Some(false)`: its answer failed.
    ended: Option<bool>,
    reader: Option<Waker>,
    filler: Option<Waker>,
}

impl Drop for Unsent {
    fn drop(&mut self) {
        self.on_disk.fetch_sub(self.written, Ordering::Relaxed);
    }
}

/// The bytes the process's spool files hold together, against `buffer.disk`: one count for
/// all of a worker's threads (a total bound is what keeps the disk from filling).
static ON_DISK: AtomicU64 = AtomicU64::new(0);

/// The spool one answer goes through; [`Spool::reader`] is its relay's source.
#[derive(Clone)]
pub(super) struct Spool(Rc<RefCell<Unsent>>);

impl Spool {
    /// A spool holding at most `memory` bytes in memory and `disk` in its file.
    pub(super) fn new(memory: u64, disk: u64) -> Spool {
        Self::counted_in(memory, disk, &ON_DISK)
    }

    /// [`Spool::new`], its file counted in `on_disk`.
    fn counted_in(memory: u64, disk: u64, on_disk: &'static AtomicU64) -> Spool {
        Spool(Rc::new(RefCell::new(Unsent {
            most_in_memory: memory,
            most_on_disk: disk,
            on_disk,
            pieces: VecDeque::new(),
            in_memory: 0,
            file: None,
            written: 0,
            read: 0,
            no_file: false,
            broken: false,
            ended: None,
            reader: None,
            filler: None,
        })))
    }

    /// How many bytes may be added now: memory's room while the file holds nothing unread,
    /// else the files': the bound is on the disk the process's spools take together (a
    /// file's size counts, read or not, until it is read whole and starts over). Two spools
    /// at the bound may pass it by a read each.
    fn room(held: &Unsent) -> usize {
        if held.written == held.read && (held.in_memory as u64) < held.most_in_memory {
            return (held.most_in_memory as usize - held.in_memory).min(READ);
        }
        if held.no_file {
            return 0;
        }
        let on_disk = held.on_disk.load(Ordering::Relaxed);
        held.most_on_disk.saturating_sub(on_disk).min(READ as u64) as usize
    }

    /// Whether bytes may be added now (see [`Spool::room`]).
    pub(super) fn has_room(&self) -> bool {
        Self::room(&self.0.borrow()) > 0
    }

    /// Waits until there is room, and says how much.
    pub(super) async fn wait_room(&self) -> usize {
        std::future::poll_fn(|cx| {
            let mut held = self.0.borrow_mut();
            match Self::room(&held) {
                0 => {
                    held.filler = Some(cx.waker().clone());
                    Poll::Pending
                }
                n => Poll::Ready(n),
            }
        })
        .await
    }

    /// Adds `data` (at most [`Spool::room`]'s bytes, or a FastCGI record) after what is held.
    pub(super) fn push(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut held = self.0.borrow_mut();
        if held.broken {
            return;
        }
        let in_file = held.written - held.read;
        // Without a file, memory takes it past its bound (`room` then stops the filler).
        let fits = held.in_memory + data.len() <= held.most_in_memory as usize;
        if in_file == 0 && (fits || held.no_file) {
            held.in_memory += data.len();
            held.pieces.push_back(Bytes::copy_from_slice(data));
        } else if let Err(e) = Self::to_file(&mut held, data) {
            // Said once per process: every buffered answer would say it again.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                let dir = std::env::temp_dir();
                eprintln!("espalier: buffering answers: no temporary file in {} ({e}); answers past `buffer.response` go at the client's speed (set TMPDIR to a writable folder)", dir.display());
            }
            held.no_file = true;
            if in_file == 0 {
                // Read from the app, the bytes must not be lost: memory keeps them, this once.
                held.in_memory += data.len();
                held.pieces.push_back(Bytes::copy_from_slice(data));
            } else {
                // Behind bytes the file holds, memory would send them first: the answer is
                // cut, as an app's failure cuts it.
                held.broken = true;
            }
        }
        if let Some(w) = held.reader.take() {
            w.wake();
        }
    }

    fn to_file(held: &mut Unsent, data: &[u8]) -> io::Result<()> {
        if held.file.is_none() {
            held.file = Some(crate::os::temp_file::unnamed_in(&std::env::temp_dir())?);
        }
        let file = held.file.as_ref().expect("made above");
        file.write_all_at(data, held.written)?;
        held.written += data.len() as u64;
        held.on_disk.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The bytes held and not yet read.
    pub(super) fn bytes_held(&self) -> u64 {
        let held = self.0.borrow();
        held.in_memory as u64 + (held.written - held.read)
    }

    /// Whether a temporary file failed (what it should have held is in memory).
    pub(super) fn without_file(&self) -> bool {
        self.0.borrow().no_file
    }

    /// The app's answer ended: `whole`, or failed (the client's relay then fails too).
    pub(super) fn end(&self, whole: bool) {
        let mut held = self.0.borrow_mut();
        held.ended = Some(whole);
        if let Some(w) = held.reader.take() {
            w.wake();
        }
    }

    /// The spool as its relay reads it.
    pub(super) fn reader(&self) -> Reader {
        Reader(self.clone())
    }
}

/// The relay's side of a [`Spool`]: what is held, then the end (or the app's failure).
pub(super) struct Reader(Spool);

impl AsyncRead for Reader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut held = self.0 .0.borrow_mut();
        let held = &mut *held;
        if held.broken {
            return Poll::Ready(Err(io::Error::other("the spool's file failed")));
        }
        if let Some(front) = held.pieces.front_mut() {
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front.split_to(n));
            if front.is_empty() {
                held.pieces.pop_front();
            }
            held.in_memory -= n;
        } else if held.written > held.read {
            let file = held.file.as_ref().expect("written to");
            let want = ((held.written - held.read) as usize).min(buf.remaining());
            let n = file.read_at(buf.initialize_unfilled_to(want), held.read)?;
            buf.advance(n);
            held.read += n as u64;
            if held.read == held.written {
                // All read: the file starts over (its blocks given back).
                held.on_disk.fetch_sub(held.written, Ordering::Relaxed);
                (held.read, held.written) = (0, 0);
                file.set_len(0)?;
            }
        } else {
            return match held.ended {
                Some(true) => Poll::Ready(Ok(())),
                Some(false) => Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
                None => {
                    held.reader = Some(cx.waker().clone());
                    Poll::Pending
                }
            };
        }
        if let Some(w) = held.filler.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

/// Reads the app's body (`first`: what came with its head) into `spool`, until its framing's
/// end. `Ok(clean)`: the connection ended exactly at the body's end (it may be reused).
async fn fill(
    conn: &mut Conn,
    first: Vec<u8>,
    kind: BodyKind,
    spool: &Spool,
    timeout: Duration,
) -> Result<bool, ()> {
    let mut left = match kind {
        BodyKind::Length(n) => n,
        _ => u64::MAX,
    };
    let mut decoder = ChunkedDecoder::with_bounds(u64::MAX, 64 << 10);
    // One buffer: what came with the head, then each read (grown to a read's size once, and
    // no longer than what is left of a short answer).
    let mut got = first.len();
    let mut buf = first;
    loop {
        let piece = &buf[..got];
        // The body's bytes among those read, and whether they end it.
        let (body, done) = match kind {
            BodyKind::Length(_) => {
                let body = (got as u64).min(left) as usize;
                left -= body as u64;
                (body, left == 0)
            }
            BodyKind::Chunked => {
                let d = decoder.skip(piece).map_err(|_| ())?;
                (d.consumed, d.done)
            }
            BodyKind::UntilClose | BodyKind::None => (got, false),
        };
        spool.push(&piece[..body]);
        if done {
            return Ok(body == got);
        }
        let room = spool.wait_room().await;
        let want = match kind {
            BodyKind::Length(_) => room.min(left.min(READ as u64) as usize),
            _ => room,
        };
        if buf.len() < want {
            buf.resize(want, 0);
        }
        got = read_timeout(conn, &mut buf[..want], timeout)
            .await
            .map_err(|_| ())?;
        if got == 0 {
            // The close ends a body framed by it; any other is cut short.
            return match kind {
                BodyKind::UntilClose => Ok(false),
                _ => Err(()),
            };
        }
    }
}

/// What the filling gives back when the app has sent its answer.
pub(super) struct Filling<'a> {
    pub(super) route: &'a ProxyRoute,
    pub(super) endpoint: Endpoint,
    pub(super) conn: Conn,
    /// The request's slot at its app or server, freed with the app's connection.
    pub(super) slot: Held,
    /// The app keeps its connection after this answer (no `Connection: close`, framed).
    pub(super) reusable: bool,
}

impl Filling<'_> {
    /// Fills `spool` with the body (`first` and the rest, framed as `kind`), then gives the
    /// app's connection back (when it ended cleanly) and frees the slot — before the client
    /// has read it.
    pub(super) async fn run(
        mut self,
        spool: Spool,
        first: Vec<u8>,
        kind: BodyKind,
        timeout: Duration,
    ) {
        let filled = fill(&mut self.conn, first, kind, &spool, timeout).await;
        spool.end(filled.is_ok());
        if filled == Ok(true) && self.reusable {
            self.route.pool.put(&self.endpoint, self.conn);
        }
        drop(self.slot);
    }
}

/// Runs `relaying` (the client's side) with `filling` (the app's) and gives the relay's
/// outcome; a relay that ends first (its client gone) ends the filling with it, and the
/// app's connection is closed.
pub(super) async fn alongside<T>(
    relaying: impl std::future::Future<Output = T>,
    filling: impl std::future::Future<Output = ()>,
) -> T {
    let mut relaying = std::pin::pin!(relaying);
    let mut filling = std::pin::pin!(filling);
    let mut filled = false;
    loop {
        tokio::select! {
            out = &mut relaying => return out,
            () = &mut filling, if !filled => filled = true,
        }
    }
}

#[cfg(test)]
#[path = "spool_tests.rs"]
mod tests;
