//! One HTTP/1.1 connection: read, parse every complete request in the buffer, answer them all
//! in one write, repeat — with the head, body, idle and send timeouts and a clean close.
//!
//! Owns: the connection's buffers and life cycle. Must not touch: routing and content (the
//! [`Service`] decides), or other connections (nothing here is shared across threads).
//!
//! Syscalls per keep-alive request: one `read` (tokio skips the extra read that would return
//! EAGAIN after a short read) and one `write` per batch of pipelined responses.

use super::{
    decode_chunked, parse_head, Framing, Head, HeadLimits, Method, ProtocolError, Request,
    Responder, MAX_HEADERS,
};
use crate::http::clock::Clock;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

/// A file body to send after the response head (large static files), with `sendfile`.
pub struct FileBody {
    pub file: Rc<std::fs::File>,
    pub offset: u64,
    pub len: u64,
}

/// What a service did with a request.
pub enum Reply {
    /// The whole response is in the output buffer.
    Done,
    /// The head is in the output buffer; this file range follows.
    File(FileBody),
}

/// The application behind the engine: routes and answers requests.
pub trait Service {
    /// Answers `req`, received on a listener of `group`, into `resp`.
    fn call(&self, group: usize, req: &Request<'_>, resp: &mut Responder<'_>) -> Reply;
}

/// Timeouts of a connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub keepalive: Duration,
}

/// The thread's graceful-shutdown signal: once set, idle connections close and busy ones close
/// after their current response.
///
/// Idle connections are found through a registry rather than each one waiting on a `Notify`:
/// registering a waiter on every keep-alive wait would cost a lock per request, while the
/// registry costs a `Cell` write. At shutdown, each idle connection's read side is shut, so its
/// pending read ends at once.
#[derive(Default)]
pub struct Shutdown {
    pub started: Cell<bool>,
    /// Wakes the accept loops.
    pub notify: Notify,
    idle: RefCell<HashMap<RawFd, Rc<Cell<bool>>>>,
}

impl Shutdown {
    /// Stops accepting; every response from now on says `Connection: close`.
    pub fn begin(&self) {
        self.started.set(true);
        self.notify.notify_waiters();
    }

    /// Ends the connections that are waiting for a request. A client may be sending one at
    /// that very moment and see the close instead of an answer — HTTP/1.1's keep-alive race —
    /// so the drain first gives busy clients a moment to get a `Connection: close` answer.
    pub fn close_idle(&self) {
        for (&fd, idle) in self.idle.borrow().iter() {
            if idle.get() {
                crate::os::net::shutdown_read(fd);
            }
        }
    }

    fn register(&self, fd: RawFd) -> Rc<Cell<bool>> {
        let flag = Rc::new(Cell::new(false));
        self.idle.borrow_mut().insert(fd, Rc::clone(&flag));
        flag
    }

    fn unregister(&self, fd: RawFd) {
        self.idle.borrow_mut().remove(&fd);
    }
}

/// Removes a connection from the shutdown registry however its task ends.
struct Registered<'a> {
    shutdown: &'a Shutdown,
    fd: RawFd,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.shutdown.unregister(self.fd);
    }
}

/// What every connection of a thread shares (single-threaded: `Rc`, never `Arc`).
pub struct ConnEnv<S> {
    pub service: S,
    pub clock: Rc<Clock>,
    pub limits: HeadLimits,
    pub timeouts: Timeouts,
    pub shutdown: Rc<Shutdown>,
}

const READ_RESERVE: usize = 4096;
/// Output above this is written before more pipelined requests are answered.
const WRITE_HIGH_WATER: usize = 256 << 10;

enum Wait {
    Idle,
    Head,
    Body,
}

/// Serves one connection until it closes.
pub async fn serve<S: Service>(mut stream: TcpStream, group: usize, env: Rc<ConnEnv<S>>) {
    let fd = stream.as_raw_fd();
    let idle = env.shutdown.register(fd);
    let _registered = Registered {
        shutdown: &env.shutdown,
        fd,
    };
    let mut rbuf: Vec<u8> = Vec::with_capacity(READ_RESERVE);
    let mut wbuf: Vec<u8> = Vec::with_capacity(READ_RESERVE);
    let sleep = tokio::time::sleep_until(env.clock.now() + env.timeouts.keepalive);
    tokio::pin!(sleep);
    let mut armed = sleep.deadline();
    // When the request now in the buffer began arriving.
    let mut request_started = env.clock.now();
    let mut continue_sent = false;

    loop {
        // Answer every complete request already received.
        let mut consumed = 0;
        let mut close = false;
        let mut file = None;
        let mut wait = Wait::Idle;
        {
            let common = env.clock.common();
            while consumed < rbuf.len() {
                let mut headers: [MaybeUninit<httparse::Header<'_>>; MAX_HEADERS] =
                    [const { MaybeUninit::uninit() }; MAX_HEADERS];
                let head = match parse_head(&rbuf[consumed..], &env.limits, &mut headers) {
                    Ok(h) => h,
                    Err(e) => {
                        Responder::new(&mut wbuf, &common, false, 1, false).error(e.status());
                        close = true;
                        break;
                    }
                };
                let Head::Complete {
                    mut request,
                    len,
                    framing,
                    keep_alive,
                    expect_continue,
                } = head
                else {
                    wait = Wait::Head;
                    break;
                };
                let body_start = consumed + len;
                let chunked_body;
                let body_end = match framing {
                    Framing::None => body_start,
                    Framing::Length(n) => {
                        let end = body_start as u64 + n;
                        if (rbuf.len() as u64) < end {
                            wait = Wait::Body;
                        } else {
                            request.body = &rbuf[body_start..end as usize];
                        }
                        end as usize
                    }
                    Framing::Chunked => {
                        match decode_chunked(&rbuf[body_start..], env.limits.max_body_size) {
                            Ok(Some((used, body))) => {
                                chunked_body = body;
                                request.body = &chunked_body;
                                body_start + used
                            }
                            Ok(None) => {
                                wait = Wait::Body;
                                body_start
                            }
                            Err(e) => {
                                Responder::new(
                                    &mut wbuf,
                                    &common,
                                    false,
                                    request.minor_version,
                                    false,
                                )
                                .error(e.status());
                                close = true;
                                break;
                            }
                        }
                    }
                };
                if matches!(wait, Wait::Body) {
                    if expect_continue && !continue_sent {
                        wbuf.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                        continue_sent = true;
                    }
                    break;
                }
                let keep = keep_alive && !env.shutdown.started.get();
                let mut resp = Responder::new(
                    &mut wbuf,
                    &common,
                    keep,
                    request.minor_version,
                    request.method == Method::Head,
                );
                let reply = env.service.call(group, &request, &mut resp);
                consumed = body_end;
                continue_sent = false;
                request_started = env.clock.now();
                if let Reply::File(f) = reply {
                    file = Some(f);
                }
                if !keep {
                    close = true;
                    break;
                }
                if file.is_some() || wbuf.len() > WRITE_HIGH_WATER {
                    break;
                }
            }
        }
        if consumed > 0 {
            rbuf.drain(..consumed);
        }
        if !wbuf.is_empty() {
            if write_all(&mut stream, &wbuf, &env).await.is_err() {
                return;
            }
            wbuf.clear();
        }
        if let Some(f) = file {
            if send_file(&stream, f, &env).await.is_err() {
                return;
            }
            if !close {
                continue;
            }
        }
        if close {
            linger_close(stream, &env).await;
            return;
        }
        if consumed > 0 && !rbuf.is_empty() && matches!(wait, Wait::Idle) {
            continue;
        }

        // Wait for more bytes, bounded by the timeout of the state we are in.
        if rbuf.is_empty() {
            wait = Wait::Idle;
            if env.shutdown.started.get() {
                return;
            }
        }
        let deadline = match wait {
            Wait::Idle => env.clock.now() + env.timeouts.keepalive,
            Wait::Head => request_started + env.timeouts.header,
            Wait::Body => request_started + env.timeouts.header + env.timeouts.body,
        };
        if deadline != armed {
            sleep.as_mut().reset(deadline);
            armed = deadline;
        }
        let was_empty = rbuf.is_empty();
        if rbuf.capacity() - rbuf.len() < READ_RESERVE / 4 {
            rbuf.reserve(READ_RESERVE);
        }
        idle.set(was_empty);
        tokio::select! {
            biased;
            r = stream.read_buf(&mut rbuf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    idle.set(false);
                    if was_empty {
                        request_started = env.clock.now();
                    }
                }
            },
            _ = &mut sleep => {
                if !rbuf.is_empty() {
                    let common = env.clock.common().clone();
                    Responder::new(&mut wbuf, &common, false, 1, false).error(ProtocolError::Timeout.status());
                    let _ = write_all(&mut stream, &wbuf, &env).await;
                    linger_close(stream, &env).await;
                }
                return;
            }
        }
    }
}

/// Writes `buf` whole, or fails when the peer stops reading for the body timeout. The first
/// attempt needs no timer: the socket buffer almost always takes a whole response.
async fn write_all<S>(stream: &mut TcpStream, buf: &[u8], env: &ConnEnv<S>) -> std::io::Result<()> {
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

async fn send_file<S>(stream: &TcpStream, f: FileBody, env: &ConnEnv<S>) -> std::io::Result<()> {
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
async fn linger_close<S>(mut stream: TcpStream, env: &ConnEnv<S>) {
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
