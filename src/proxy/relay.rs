//! An app's answer body on its way to the client, as the app framed it (a length, chunked,
//! or until the close) and as the client needs it (rechunked for HTTP/1.1, unchunked for
//! HTTP/1.0), through one fixed buffer; and the tunnel after `101 Switching Protocols`.
//!
//! Owns: those relays. Must not touch: the answer's head ([`super::forward`]) or a
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
pub(super) async fn relay_body<C: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn,
    client: &mut C,
    report: &Report,
    mut ubuf: Vec<u8>,
    kind: BodyKind,
    (rechunk, dechunk): (bool, bool),
    (upstream_timeout, client_timeout): (Duration, Duration),
) -> Result<bool, ()> {
    // The transfer buffer, only for a body that did not come with the head.
    let mut buf = Vec::new();
    match kind {
        BodyKind::None => Ok(ubuf.is_empty()),
        BodyKind::Length(total) => {
            let have = (ubuf.len() as u64).min(total) as usize;
            let extra = ubuf.len() > have;
            if have > 0 {
                to_client(client, report, &ubuf[..have], client_timeout)
                    .await
                    .map_err(|_| ())?;
            }
            let mut left = total - have as u64;
            // The head's buffer is done with: a stalled body holds only the transfer buffer.
            drop(ubuf);
            if left > 0 {
                buf.resize(FIRST_BUF, 0);
            }
            while left > 0 {
                let want = (left as usize).min(buf.len());
                let n = match read_timeout(conn, &mut buf[..want], upstream_timeout).await {
                    Ok(0) | Err(_) => return Err(()),
                    Ok(n) => n,
                };
                to_client(client, report, &buf[..n], client_timeout)
                    .await
                    .map_err(|_| ())?;
                left -= n as u64;
                grow(&mut buf, n);
            }
            Ok(!extra)
        }
        BodyKind::Chunked => {
            // Responses are not bounded by the client's request limits.
            let mut decoder = ChunkedDecoder::with_bounds(u64::MAX, 64 << 10);
            let mut pending = std::mem::take(&mut ubuf);
            buf.resize(FIRST_BUF, 0);
            let mut last = 0;
            loop {
                let d = if dechunk {
                    let d = decoder.decode(&mut pending).map_err(|_| ())?;
                    to_client(client, report, &pending[..d.produced], client_timeout)
                        .await
                        .map_err(|_| ())?;
                    d
                } else {
                    let d = decoder.skip(&pending).map_err(|_| ())?;
                    to_client(client, report, &pending[..d.consumed], client_timeout)
                        .await
                        .map_err(|_| ())?;
                    d
                };
                if d.done {
                    return Ok(d.consumed == pending.len());
                }
                grow(&mut buf, last);
                pending.clear();
                let n = match read_timeout(conn, &mut buf, upstream_timeout).await {
                    Ok(0) | Err(_) => return Err(()),
                    Ok(n) => n,
                };
                last = n;
                pending.extend_from_slice(&buf[..n]);
            }
        }
        BodyKind::UntilClose => {
            let mut pending = ubuf;
            buf.resize(FIRST_BUF, 0);
            let mut last = 0;
            loop {
                if !pending.is_empty() {
                    if rechunk {
                        let size = format!("{:x}\r\n", pending.len());
                        to_client(client, report, size.as_bytes(), client_timeout)
                            .await
                            .map_err(|_| ())?;
                        pending.extend_from_slice(b"\r\n");
                    }
                    to_client(client, report, &pending, client_timeout)
                        .await
                        .map_err(|_| ())?;
                }
                grow(&mut buf, last);
                pending.clear();
                match read_timeout(conn, &mut buf, upstream_timeout).await {
                    Ok(0) => break,
                    Err(_) => return Err(()),
                    Ok(n) => {
                        last = n;
                        pending.extend_from_slice(&buf[..n]);
                    }
                }
            }
            if rechunk {
                to_client(client, report, b"0\r\n\r\n", client_timeout)
                    .await
                    .map_err(|_| ())?;
            }
            Ok(false)
        }
    }
}

/// After `101 Switching Protocols`: bytes both ways until either side closes.
pub(super) async fn tunnel<C: AsyncRead + AsyncWrite + Unpin>(
    client: &mut C,
    report: &Report,
    rbuf: &mut Vec<u8>,
    mut conn: Conn,
    ubuf: Vec<u8>,
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
    if let Ok((_, to_client)) = tokio::io::copy_bidirectional(client, &mut conn).await {
        report.bytes.set(report.bytes.get() + to_client);
    }
}
