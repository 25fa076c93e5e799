//! An app's answer body on its way to the client, as the app framed it (a length, chunked,
//! or until the close) and as the client needs it (rechunked for HTTP/1.1, unchunked for
//! HTTP/1.0), through one fixed buffer — read from the app's connection or from its spool
//! ([`super::spool`]), and compressed by [`super::encode`] where it is; and the tunnel after
//! `101 Switching Protocols`.
//!
//! Owns: those relays. Must not touch: the answer's head ([`super::forward`](mod@super::forward)) or a
//! compressed relay ([`super::encode`]).

use super::upstream::Conn;
use super::wire::{read_timeout, to_client, BodyKind};
use crate::http::access_log::Report;
use crate::http::ChunkedDecoder;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Transfer buffer of each direction, at most.
pub(super) const BUF: usize = 64 << 10;
/// A body relay's buffer starts at this and doubles (to [`BUF`]) each time a read filled it
/// and the client took it all: a client that takes nothing (an HTTP/2 stream with a zero
/// window, behind a 16 KiB pipe) holds 16 KiB here, not 64 (640 such streams held 30 MiB
/// more); a download reaches 64 KiB after three reads.
const FIRST_BUF: usize = 8 << 10;

/// Doubles `buf` after a read of `n` bytes that filled it was delivered.
fn grow(buf: &mut Vec<u8>, n: usize) {
    if n == buf.len() && buf.len() < BUF {
        buf.resize((buf.len() * 2).min(BUF), 0);
    }
}

/// Relays the response body to the client. `Ok(clean)`: whether the app connection ended
/// exactly at the body's end (and may be reused).
pub(super) async fn relay_body<R: AsyncRead + Unpin, C: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut R,
    client: &mut C,
    report: &Report,
    ubuf: Vec<u8>,
    kind: BodyKind,
    (rechunk, dechunk): (bool, bool),
    timeouts: (Duration, Duration),
) -> Result<bool, ()> {
    let ends = Ends {
        conn,
        client,
        report,
        timeouts,
    };
    match kind {
        BodyKind::None => Ok(ubuf.is_empty()),
        BodyKind::Length(total) => ends.length(ubuf, total).await,
        BodyKind::Chunked => ends.chunked(ubuf, dechunk).await,
        BodyKind::UntilClose => ends.until_close(ubuf, rechunk).await,
    }
}

/// How an answer's body is relayed to its client.
pub(super) struct BodyFraming {
    pub(super) kind: BodyKind,
    /// Chunked for an HTTP/1.1 client (the app's length unknown).
    pub(super) rechunk: bool,
    /// The app's chunked body unchunked for an HTTP/1.0 client.
    pub(super) plain_for_old_client: bool,
    /// A compressed body goes chunked (an HTTP/1.1 client) rather than until the close.
    pub(super) chunked: bool,
}

impl BodyFraming {
    /// Relays the body from `source` (the app's connection, or its spool), `first` its
    /// start, compressed by `encoder` where there is one. `Ok(clean)` as [`relay_body`].
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn relay<R: AsyncRead + Unpin, C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        source: &mut R,
        stream: &mut C,
        report: &Report,
        first: Vec<u8>,
        encoder: Option<crate::compress::Stream>,
        timeouts: (Duration, Duration),
    ) -> Result<bool, ()> {
        match encoder {
            // Boxed: the compressing relay's state (its encoder, its buffers) would grow every
            // relay's future, and so every lent request's, for answers never compressed.
            Some(encoder) => {
                let (kind, chunked) = (self.kind, self.chunked);
                Box::pin(super::encode::relay(
                    source, stream, report, first, kind, encoder, chunked, timeouts,
                ))
                .await
            }
            None => {
                let framing = (self.rechunk, self.plain_for_old_client);
                relay_body(source, stream, report, first, self.kind, framing, timeouts).await
            }
        }
    }
}

/// Both ends of a body's relay: the app's connection and the client, with their time limits
/// (the app's, the client's).
struct Ends<'a, R, C> {
    conn: &'a mut R,
    client: &'a mut C,
    report: &'a Report,
    timeouts: (Duration, Duration),
}

impl<R: AsyncRead + Unpin, C: AsyncRead + AsyncWrite + Unpin> Ends<'_, R, C> {
    /// Bytes to the client, counted.
    async fn send(&mut self, data: &[u8]) -> Result<(), ()> {
        to_client(self.client, self.report, data, self.timeouts.1)
            .await
            .map_err(|_| ())
    }

    /// A read from the app: 0 at its close.
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, ()> {
        read_timeout(self.conn, buf, self.timeouts.0)
            .await
            .map_err(|_| ())
    }

    /// A body of `total` bytes, `ubuf` holding its start.
    async fn length(mut self, ubuf: Vec<u8>, total: u64) -> Result<bool, ()> {
        let have = (ubuf.len() as u64).min(total) as usize;
        let extra = ubuf.len() > have;
        if have > 0 {
            self.send(&ubuf[..have]).await?;
        }
        let mut left = total - have as u64;
        // The head's buffer is done with: a stalled body holds only the transfer buffer.
        drop(ubuf);
        let mut buf = Vec::new();
        if left > 0 {
            buf.resize(FIRST_BUF, 0);
        }
        while left > 0 {
            let want = (left as usize).min(buf.len());
            let n = match self.read(&mut buf[..want]).await? {
                0 => return Err(()),
                n => n,
            };
            self.send(&buf[..n]).await?;
            left -= n as u64;
            grow(&mut buf, n);
        }
        Ok(!extra)
    }

    /// A chunked body, `ubuf` holding its start: passed as it is, or unchunked (`dechunk`,
    /// for an HTTP/1.0 client).
    async fn chunked(mut self, ubuf: Vec<u8>, dechunk: bool) -> Result<bool, ()> {
        // Responses are not bounded by the client's request limits.
        let mut decoder = ChunkedDecoder::with_bounds(u64::MAX, 64 << 10);
        let mut pending = ubuf;
        let mut buf = vec![0; FIRST_BUF];
        let mut last = 0;
        loop {
            let d = if dechunk {
                let d = decoder.decode(&mut pending).map_err(|_| ())?;
                self.send(&pending[..d.produced]).await?;
                d
            } else {
                let d = decoder.skip(&pending).map_err(|_| ())?;
                self.send(&pending[..d.consumed]).await?;
                d
            };
            if d.done {
                return Ok(d.consumed == pending.len());
            }
            grow(&mut buf, last);
            pending.clear();
            let n = match self.read(&mut buf).await? {
                0 => return Err(()),
                n => n,
            };
            last = n;
            pending.extend_from_slice(&buf[..n]);
        }
    }

    /// A body that ends when the app closes, `ubuf` holding its start: chunked for an
    /// HTTP/1.1 client (`rechunk`). Never clean: the app's connection is over.
    async fn until_close(mut self, ubuf: Vec<u8>, rechunk: bool) -> Result<bool, ()> {
        let mut pending = ubuf;
        let mut buf = vec![0; FIRST_BUF];
        let mut last = 0;
        loop {
            if !pending.is_empty() {
                if rechunk {
                    let size = format!("{:x}\r\n", pending.len());
                    self.send(size.as_bytes()).await?;
                    pending.extend_from_slice(b"\r\n");
                }
                self.send(&pending).await?;
            }
            grow(&mut buf, last);
            pending.clear();
            match self.read(&mut buf).await? {
                0 => break,
                n => {
                    last = n;
                    pending.extend_from_slice(&buf[..n]);
                }
            }
        }
        if rechunk {
            self.send(b"0\r\n\r\n").await?;
        }
        Ok(false)
    }
}

/// After `101 Switching Protocols`: bytes both ways until either side closes, or until the
/// app has sent nothing for `idle` (`body_timeout`: as nginx's `proxy_read_timeout` closes
/// a WebSocket whose server is silent; an app that pings keeps it open, and a client that
/// only listens is not cut while the app speaks).
pub(super) async fn tunnel<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    report: &Report,
    rbuf: &mut Vec<u8>,
    (mut conn, ubuf): (Conn, Vec<u8>),
    idle: Duration,
) {
    if !rbuf.is_empty() && conn.write_all(rbuf).await.is_err() {
        return;
    }
    rbuf.clear();
    if !ubuf.is_empty() && (client.write_all(&ubuf).await.is_err() || client.flush().await.is_err())
    {
        return;
    }
    report.bytes.set(report.bytes.get() + ubuf.len() as u64);
    let heard = std::cell::Cell::new(tokio::time::Instant::now());
    let mut app = AppSide {
        conn: &mut conn,
        heard: &heard,
        report,
    };
    let copying = tokio::io::copy_bidirectional(client, &mut app);
    tokio::pin!(copying);
    // A bound past what an Instant holds (a `body_timeout` of centuries) is none.
    let quiet_until = |heard: tokio::time::Instant| heard.checked_add(idle);
    loop {
        let Some(until) = quiet_until(heard.get()) else {
            let _ = copying.await;
            return;
        };
        tokio::select! {
            _ = &mut copying => return,
            () = tokio::time::sleep_until(until) => {
                if quiet_until(heard.get()).is_some_and(|u| u <= tokio::time::Instant::now()) {
                    return;
                }
            }
        }
    }
}

/// The app's side of a tunnel: what it sends is counted to the client's bytes and marks when
/// it was last heard from.
struct AppSide<'a> {
    conn: &'a mut Conn,
    heard: &'a std::cell::Cell<tokio::time::Instant>,
    report: &'a Report,
}

impl AsyncRead for AppSide<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut *self.conn).poll_read(cx, buf);
        let got = (buf.filled().len() - before) as u64;
        if got > 0 {
            self.heard.set(tokio::time::Instant::now());
            self.report.bytes.set(self.report.bytes.get() + got);
        }
        polled
    }
}

impl AsyncWrite for AppSide<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.conn).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.conn).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.conn).poll_shutdown(cx)
    }
}
