//! A forwarded request's client side while the app is asked: its body sent on as it arrives
//! (a length as it is, a chunked one decoded by the engine's strict decoder and framed again,
//! so the app sees exactly what espalier validated), and the client watched while the
//! answer is awaited, so that an abandoned request ends its exchange.
//!
//! A body may instead be read whole first ([`take_body`], where answers are buffered) and
//! sent from there ([`send_taken_body`]).
//!
//! Owns: [`send_body`], [`take_body`], [`send_taken_body`] and [`client_gone`]. Must not touch: the app's answer (see
//! [`super::forward`](mod@super::forward)) or the connection to the app (`super::upstream`).

use super::relay::BUF;
use super::spool::Spool;
use super::upstream::Conn;
use super::wire::{read_timeout, write_timeout, Fail};
use super::Endpoint;
use crate::http::{ChunkedDecoder, Framing, ProtocolError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// The most a client may send past its request while the app is asked (its next pipelined
/// requests): kept for after the answer; past it the client is no longer watched.
const MAX_PIPELINED_WHILE_ASKED: usize = 64 << 10;

/// Ends when the client closes its connection (or it fails) while its answer is awaited —
/// as nginx notices a client's close during a proxied wait. What the client sends meanwhile
/// (a pipelined request) is kept in `rbuf`; past [`MAX_PIPELINED_WHILE_ASKED`] it is no
/// longer read, and this never ends.
pub(super) async fn client_gone<C: AsyncRead + Unpin>(stream: &mut C, rbuf: &mut Vec<u8>) {
    while rbuf.len() < MAX_PIPELINED_WHILE_ASKED {
        if rbuf.capacity() - rbuf.len() < 1024 {
            rbuf.reserve(4096);
        }
        match stream.read_buf(rbuf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
    std::future::pending().await
}

/// Sends the request body to the app as it arrives from the client: first what the client
/// buffer holds, then through one fixed buffer. Leaves in `rbuf` only what follows the body.
pub(super) async fn send_body<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    rbuf: &mut Vec<u8>,
    conn: &mut Conn,
    framing: Framing,
    (max_body, max_framing): (u64, usize),
    (client_timeout, upstream_timeout): (Duration, Duration),
    endpoint: &Endpoint,
) -> Result<(), Fail> {
    let upstream_failed = |_| Fail::app(502, endpoint, "did not take the request's body");
    match framing {
        Framing::None => Ok(()),
        Framing::Length(total) => {
            let have = (rbuf.len() as u64).min(total) as usize;
            write_timeout(conn, &rbuf[..have], upstream_timeout)
                .await
                .map_err(upstream_failed)?;
            rbuf.drain(..have);
            let mut left = total - have as u64;
            let mut buf = vec![0u8; BUF.min(left as usize)];
            while left > 0 {
                let want = (left as usize).min(buf.len());
                let n = match read_timeout(client, &mut buf[..want], client_timeout).await {
                    Ok(0) | Err(_) => return Err(Fail::Close),
                    Ok(n) => n,
                };
                write_timeout(conn, &buf[..n], upstream_timeout)
                    .await
                    .map_err(upstream_failed)?;
                left -= n as u64;
            }
            Ok(())
        }
        // Decoded and framed again, as nginx does: the client's chunk extensions and
        // trailer fields stay behind (a trailer `Host`, `Content-Length` or
        // `X-Forwarded-For` would otherwise reach the app beside the head's).
        Framing::Chunked => {
            let mut decoder = ChunkedDecoder::with_bounds(max_body, max_framing);
            let mut out = Vec::new();
            let d = decoder
                .decode(rbuf)
                .map_err(|e: ProtocolError| Fail::Client(e.status()))?;
            chunk_again(&mut out, &rbuf[..d.produced], d.done);
            write_timeout(conn, &out, upstream_timeout)
                .await
                .map_err(upstream_failed)?;
            rbuf.drain(..d.consumed);
            if d.done {
                return Ok(());
            }
            let mut buf = vec![0u8; BUF];
            loop {
                let n = match read_timeout(client, &mut buf, client_timeout).await {
                    Ok(0) | Err(_) => return Err(Fail::Close),
                    Ok(n) => n,
                };
                let d = decoder
                    .decode(&mut buf[..n])
                    .map_err(|e: ProtocolError| Fail::Client(e.status()))?;
                out.clear();
                chunk_again(&mut out, &buf[..d.produced], d.done);
                write_timeout(conn, &out, upstream_timeout)
                    .await
                    .map_err(upstream_failed)?;
                if d.done {
                    // A pipelined request after the body stays for the connection's loop.
                    rbuf.extend_from_slice(&buf[d.consumed..n]);
                    return Ok(());
                }
            }
        }
    }
}

/// Reads the client's request body whole before any app is asked (`buffer`): a sync app's
/// process is not held by a slow upload. In memory up to `memory` bytes, then in the spool's
/// unnamed file while the worker's files hold less than `disk` (past it, `503`: the disk is
/// not filled by uploads). A chunked body is decoded here by the same strict decoder; what
/// follows the body stays in `rbuf`.
pub(super) async fn take_body<C: AsyncRead + Unpin>(
    client: &mut C,
    rbuf: &mut Vec<u8>,
    framing: Framing,
    (memory, disk): (u64, u64),
    (max_body, max_framing): (u64, usize),
    timeout: Duration,
) -> Result<Spool, Fail> {
    let spool = Spool::new(memory, disk);
    let mut decoder = ChunkedDecoder::with_bounds(max_body, max_framing);
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut pending = std::mem::take(rbuf);
    loop {
        let done = match framing {
            Framing::None => true,
            Framing::Length(_) => {
                let have = (pending.len() as u64).min(left) as usize;
                spool.push(&pending[..have]);
                pending.drain(..have);
                left -= have as u64;
                left == 0
            }
            Framing::Chunked => {
                let d = decoder
                    .decode(&mut pending)
                    .map_err(|e: ProtocolError| Fail::Client(e.status()))?;
                spool.push(&pending[..d.produced]);
                pending.drain(..d.consumed);
                d.done
            }
        };
        if spool.without_file() {
            let cause = "no temporary file for a request body past `buffer.request` (set TMPDIR to a writable folder)";
            return Err(Fail::Unconnected(503, Some(cause.into())));
        }
        if !done && !spool.has_room() {
            let cause = "a request body past `buffer.request`, and the worker's temporary files hold `buffer.disk` already";
            return Err(Fail::Unconnected(503, Some(cause.into())));
        }
        if done {
            // A pipelined request after the body stays for the connection's loop.
            *rbuf = pending;
            spool.end(true);
            return Ok(spool);
        }
        // Read onto `pending` (empty here but for a part of a chunk's framing): its room is
        // made once, and only for a body not whole yet.
        pending.reserve(BUF);
        match tokio::time::timeout(timeout, client.read_buf(&mut pending)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err(Fail::Close),
        }
    }
}

/// [`take_body`] where `route` buffers (`buffer`) and `req` has a body, `req`'s head then
/// saying its length; `None` where the body is to stream.
pub(super) async fn take_buffered<C: AsyncRead + Unpin>(
    client: &mut C,
    rbuf: &mut Vec<u8>,
    req: &mut super::request::ForwardRequest,
    route: &super::route::ProxyRoute,
    bounds: (u64, usize),
    timeout: Duration,
) -> Result<Option<Spool>, Fail> {
    let Some(b) = route
        .buffer(req.buffered)
        .filter(|_| req.body != Framing::None)
    else {
        return Ok(None);
    };
    let spool = take_body(client, rbuf, req.body, (b.request, b.disk), bounds, timeout).await?;
    req.framed_by_length(spool.bytes_held());
    Ok(Some(spool))
}

/// Sends a body [`take_body`] read to the app, as it is: its head says its length (see
/// `ForwardRequest::framed_by_length`).
pub(super) async fn send_taken_body(
    spool: &Spool,
    conn: &mut Conn,
    timeout: Duration,
) -> std::io::Result<()> {
    let mut reader = spool.reader();
    let mut buf = vec![0u8; BUF.min(spool.bytes_held() as usize).max(1)];
    loop {
        match reader.read(&mut buf).await? {
            0 => return Ok(()),
            n => write_timeout(conn, &buf[..n], timeout).await?,
        }
    }
}

/// `data` as one chunk (none when empty), and the last chunk with no trailers when `done`.
fn chunk_again(out: &mut Vec<u8>, data: &[u8], done: bool) {
    if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    if done {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_request_body_is_framed_again_without_its_trailers() {
        let mut decoder = ChunkedDecoder::with_bounds(1 << 20, 4096);
        let mut body =
            b"5;ext=1\r\nhello\r\n0\r\nHost: evil\r\nX-Forwarded-For: 1.2.3.4\r\n\r\nGET".to_vec();
        let d = decoder.decode(&mut body).unwrap();
        assert!(d.done);
        let mut out = Vec::new();
        chunk_again(&mut out, &body[..d.produced], d.done);
        assert_eq!(out, b"5\r\nhello\r\n0\r\n\r\n");
        assert_eq!(&body[d.consumed..], b"GET");
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// `sent` from a client after `rbuf`, taken by [`take_body`] with 8 bytes of memory:
    /// the body as held, and what stayed in `rbuf`.
    fn taken(
        framing: Framing,
        rbuf: &[u8],
        sent: &'static [u8],
    ) -> Result<(Vec<u8>, Vec<u8>), u16> {
        run(async {
            let mut rbuf = rbuf.to_vec();
            let mut client = sent;
            let bounds = (1 << 20, 4096);
            let spool = take_body(
                &mut client,
                &mut rbuf,
                framing,
                (8, 1 << 20),
                bounds,
                Duration::from_secs(5),
            )
            .await
            .map_err(|f| match f {
                Fail::Client(status) => status,
                _ => 0,
            })?;
            let mut held = Vec::new();
            spool.reader().read_to_end(&mut held).await.unwrap();
            Ok((held, rbuf))
        })
    }

    #[test]
    fn a_body_is_taken_whole_before_the_app_and_what_follows_it_stays() {
        // A length: part in the client's buffer, the rest from the connection, past the
        // memory's 8 bytes into the file.
        let (held, rest) = taken(Framing::Length(20), b"0123456789", b"abcdefghijGET /").unwrap();
        assert_eq!(held, b"0123456789abcdefghij");
        assert_eq!(rest, b"GET /");
        // Chunked: decoded (its extensions and trailers left behind), and the pipelined
        // request after it kept.
        let (held, rest) = taken(
            Framing::Chunked,
            b"5;x=1\r\nhello\r\n",
            b"6\r\n world\r\n0\r\nA: b\r\n\r\nGET",
        )
        .unwrap();
        assert_eq!(held, b"hello world");
        assert_eq!(rest, b"GET");
        // A client that closes before its body's end, or frames it badly.
        assert!(taken(Framing::Length(20), b"short", b"").is_err());
        assert_eq!(taken(Framing::Chunked, b"zz\r\n", b""), Err(400));
    }
}
