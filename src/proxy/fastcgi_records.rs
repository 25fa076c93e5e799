//! A FastCGI request's body sent as STDIN records ([`send_stdin`]), and its answer's
//! records as they are read (the record layer, see
//! [`super::fastcgi`] for why it is written here), and its STDOUT as the client's relay
//! takes it: straight from the app's records, or — where answers are buffered (`buffer`) —
//! from a spool that [`fill`] fills at the app's speed, so that a php-fpm child is free as
//! soon as it has answered, however slow the client.
//!
//! Owns: sending STDIN, reading records, and the two ways to STDOUT ([`Stdout`]). Must not touch: the CGI
//! head (read before, in [`super::fastcgi`]) or the client's framing.

use super::cgi::{record, END_REQUEST, MAX_RECORD, STDERR, STDIN, STDOUT, VERSION};
use super::route::Held;
use super::spool::{Reader, Spool};
use super::upstream::Conn;
use super::wire::{read_timeout, write_timeout, Fail};
use super::Endpoint;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Sends the request body as STDIN records, then the empty one that ends it: what the client
/// buffer holds first, then through one fixed buffer. Leaves in `rbuf` what follows the body.
pub(super) async fn send_stdin<C: AsyncRead + Unpin>(
    client: &mut C,
    rbuf: &mut Vec<u8>,
    conn: &mut Conn,
    total: u64,
    (client_timeout, upstream_timeout): (Duration, Duration),
    endpoint: &Endpoint,
) -> Result<(), Fail> {
    let mut out = Vec::with_capacity(
        MAX_RECORD.min(
            usize::try_from(total)
                .unwrap_or(usize::MAX)
                .saturating_add(64),
        ) + 16,
    );
    let have = (rbuf.len() as u64).min(total) as usize;
    for part in rbuf[..have].chunks(MAX_RECORD) {
        record(&mut out, STDIN, part);
    }
    rbuf.drain(..have);
    let mut left = total - have as u64;
    let mut buf = vec![0u8; if left > 0 { 32 << 10 } else { 0 }];
    loop {
        if left == 0 {
            record(&mut out, STDIN, &[]);
        }
        if !out.is_empty() {
            write_timeout(conn, &out, upstream_timeout)
                .await
                .map_err(|_| Fail::app(502, endpoint, "did not take the request's body"))?;
            out.clear();
        }
        if left == 0 {
            return Ok(());
        }
        let want = (left as usize).min(buf.len());
        let n = match read_timeout(client, &mut buf[..want], client_timeout).await {
            Ok(0) | Err(_) => return Err(Fail::Close),
            Ok(n) => n,
        };
        record(&mut out, STDIN, &buf[..n]);
        left -= n as u64;
    }
}

/// One record read from the app.
pub(super) struct Record {
    pub(super) kind: u8,
    pub(super) content: Vec<u8>,
}

async fn read_exact_timeout(conn: &mut Conn, buf: &mut [u8], timeout: Duration) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let n = read_timeout(conn, &mut buf[got..], timeout).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(())
}

/// The next record from the app, within `timeout` for each of its reads.
pub(super) async fn read_record(conn: &mut Conn, timeout: Duration) -> io::Result<Record> {
    let mut head = [0u8; 8];
    read_exact_timeout(conn, &mut head, timeout).await?;
    if head[0] != VERSION {
        return Err(io::Error::other("not a FastCGI record"));
    }
    let len = u16::from_be_bytes([head[4], head[5]]) as usize;
    let mut content = vec![0u8; len + head[6] as usize];
    read_exact_timeout(conn, &mut content, timeout).await?;
    content.truncate(len);
    Ok(Record {
        kind: head[1],
        content,
    })
}

/// An app's STDERR goes to espalier's log (the worker's stderr), line by line, named.
pub(super) fn log_stderr(who: &Endpoint, text: &[u8]) {
    for line in String::from_utf8_lossy(text)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        eprintln!("espalier[fastcgi {who}]: {line}");
    }
}

/// Where a relay takes an answer's STDOUT from.
pub(super) enum Stdout<'a> {
    /// The app's records, its STDERR logged on the way.
    App(&'a mut Conn, &'a Endpoint),
    /// A spool [`fill`] fills.
    Spooled(Reader),
}

impl Stdout<'_> {
    /// The next piece of STDOUT, `None` at the answer's end; `Err` when the app broke it
    /// off or went silent past `timeout`.
    pub(super) async fn next(&mut self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        match self {
            Stdout::App(conn, who) => loop {
                let r = read_record(conn, timeout).await?;
                match r.kind {
                    STDOUT => return Ok(Some(r.content)),
                    STDERR => log_stderr(who, &r.content),
                    END_REQUEST => return Ok(None),
                    _ => {}
                }
            },
            Stdout::Spooled(reader) => {
                let mut piece = vec![0u8; 16 << 10];
                let n = reader.read(&mut piece).await?;
                piece.truncate(n);
                Ok((n > 0).then_some(piece))
            }
        }
    }
}

/// Reads the app's records into `spool` until END_REQUEST, then lets the app's connection
/// and `slot` go: its child takes the next request while the client still reads. A record
/// is added whole once there is room, so the spool's bounds may be passed by one record
/// (64 KiB).
pub(super) async fn fill(
    mut conn: Conn,
    who: Endpoint,
    spool: Spool,
    slot: Held,
    timeout: Duration,
) {
    let whole = loop {
        spool.wait_room().await;
        let Ok(r) = read_record(&mut conn, timeout).await else {
            break false;
        };
        match r.kind {
            STDOUT => spool.push(&r.content),
            STDERR => log_stderr(&who, &r.content),
            END_REQUEST => break true,
            _ => {}
        }
    };
    spool.end(whole);
    drop(conn);
    drop(slot);
}
