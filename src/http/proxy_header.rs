//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer sends first on
//! each connection, naming the client it stands for. Read on the bindings of a site with
//! `proxy_protocol = true`, before any HTTP.
//!
//! Owns: reading that header from a new connection, bounded in size and time, and what it
//! says of the client. Must not touch: HTTP (the bytes after the header stay in the buffer for
//! the connection loop) or which bindings expect it (the config decides, per address). The
//! parsing itself is the `ppp` crate's.
//!
//! A connection on such a binding without a valid header is closed without an answer, as
//! HAProxy and nginx do: answering in HTTP would let a client that bypasses the balancer
//! speak with a forged address, and a balancer that sends no header is misconfigured. A
//! `LOCAL` header (the balancer's own health checks) or an `UNKNOWN`/unspecified family keeps
//! the connection's own peer as its client.

use ppp::{v1, v2, HeaderResult, PartialResult};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The longest header: version 2's 16 bytes and a 16-bit length (version 1's is 107 bytes).
const MAX_HEADER: usize = 16 + u16::MAX as usize;

/// What the start of a connection's bytes holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A header, `len` bytes long; `client` is the source it names (`None`: the connection's
    /// own peer stands, for `LOCAL` and unspecified addresses).
    Header {
        len: usize,
        client: Option<SocketAddr>,
    },
    /// Not yet a whole header: read more.
    Incomplete,
    /// Not a header, or a malformed one: close the connection.
    Invalid,
}

/// Version 1's longest line, CRLF included (the spec's 107 bytes).
const MAX_V1: usize = 107;

/// Parses a PROXY header at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    // Version 1 is one text line, judged once it is whole: a line cut anywhere (a balancer's
    // header in many small segments) is incomplete, not malformed, whatever the cut address
    // or port looks like so far.
    let v1 = b"PROXY ";
    if buf.starts_with(v1) || (buf.len() < v1.len() && v1.starts_with(buf)) {
        match memchr::memmem::find(buf, b"\r\n") {
            None if buf.len() < MAX_V1 => return Parsed::Incomplete,
            None => return Parsed::Invalid,
            Some(_) => {}
        }
    }
    let result = HeaderResult::parse(buf);
    if result.is_incomplete() {
        return if buf.len() >= MAX_HEADER {
            Parsed::Invalid
        } else {
            Parsed::Incomplete
        };
    }
    match result {
        HeaderResult::V1(Ok(h)) => Parsed::Header {
            len: h.header.len(),
            client: match h.addresses {
                v1::Addresses::Tcp4(a) => Some((a.source_address, a.source_port).into()),
                v1::Addresses::Tcp6(a) => Some((a.source_address, a.source_port).into()),
                v1::Addresses::Unknown => None,
            },
        },
        HeaderResult::V2(Ok(h)) => Parsed::Header {
            len: h.len(),
            client: match (h.command, h.addresses) {
                (v2::Command::Local, _) => None,
                (_, v2::Addresses::IPv4(a)) => Some((a.source_address, a.source_port).into()),
                (_, v2::Addresses::IPv6(a)) => Some((a.source_address, a.source_port).into()),
                (_, v2::Addresses::Unix(_) | v2::Addresses::Unspecified) => None,
            },
        },
        _ => Parsed::Invalid,
    }
}

/// Reads a connection's PROXY header within `timeout`, consuming exactly its bytes: what
/// follows (HTTP, or a TLS ClientHello) stays in the socket for whoever reads next. `Ok`
/// names the client as [`parse`] does; `Err` when the connection must be closed: no valid
/// header, a timeout, or the peer gone.
///
/// Bytes are looked at with `MSG_PEEK` and taken only once known to be header: all of them
/// while the header is incomplete, exactly its length once it is whole.
pub async fn read(stream: &mut TcpStream, timeout: Duration) -> Result<Option<SocketAddr>, ()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut header: Vec<u8> = Vec::with_capacity(128);
    let mut peeked = vec![0u8; 4096];
    loop {
        // Waits for bytes not yet taken (a partial header's are all taken).
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut peeked)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Err(()),
        };
        let had = header.len();
        header.extend_from_slice(&peeked[..n]);
        let (take, done) = match parse(&header) {
            Parsed::Header { len, client } => (len - had, Some(client)),
            Parsed::Incomplete => (n, None),
            Parsed::Invalid => return Err(()),
        };
        header.truncate(had + take);
        let mut sink = vec![0u8; take];
        if !matches!(
            tokio::time::timeout_at(deadline, stream.read_exact(&mut sink)).await,
            Ok(Ok(_))
        ) {
            return Err(());
        }
        if let Some(client) = done {
            return Ok(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&(addresses.len() as u16).to_be_bytes());
        h.extend_from_slice(addresses);
        h
    }

    #[test]
    fn a_version_1_header_cut_anywhere_is_incomplete() {
        let line = b"PROXY TCP6 2001:db8::5 2001:db8::1 55555 443\r\n";
        for cut in 1..line.len() {
            assert_eq!(parse(&line[..cut]), Parsed::Incomplete, "cut at {cut}");
        }
        assert!(matches!(parse(line), Parsed::Header { .. }));
        assert_eq!(parse(&[b'x'; 200][..]), Parsed::Invalid);
        let mut long = b"PROXY TCP4 ".to_vec();
        long.extend_from_slice(&[b'1'; 120]);
        assert_eq!(parse(&long), Parsed::Invalid);
    }

    #[test]
    fn version_1_names_the_client() {
        let text = b"PROXY TCP4 192.0.2.7 10.0.0.1 40000 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(text),
            Parsed::Header {
                len: 40,
                client: Some("192.0.2.7:40000".parse().unwrap())
            }
        );
        let six = b"PROXY TCP6 2001:db8::5 ::1 5555 443\r\n";
        assert_eq!(
            parse(six),
            Parsed::Header {
                len: six.len(),
                client: Some("[2001:db8::5]:5555".parse().unwrap())
            }
        );
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Parsed::Header {
                len: 15,
                client: None
            }
        );
    }

    #[test]
    fn version_2_names_the_client_unless_local() {
        let mut addrs = vec![198, 51, 100, 9, 10, 0, 0, 1];
        addrs.extend_from_slice(&1234u16.to_be_bytes());
        addrs.extend_from_slice(&80u16.to_be_bytes());
        let mut h = v2(1, 0x11, &addrs);
        let len = h.len();
        h.extend_from_slice(b"GET /");
        assert_eq!(
            parse(&h),
            Parsed::Header {
                len,
                client: Some("198.51.100.9:1234".parse().unwrap())
            }
        );
        // A health check of the balancer itself: LOCAL, no addresses.
        assert_eq!(
            parse(&v2(0, 0x00, &[])),
            Parsed::Header {
                len: 16,
                client: None
            }
        );
    }

    #[test]
    fn partial_headers_wait_and_anything_else_is_refused() {
        assert_eq!(parse(b"PROXY TCP4 192.0.2.7"), Parsed::Incomplete);
        assert_eq!(parse(b"\r\n\r\n\0\r\nQU"), Parsed::Incomplete);
        assert_eq!(parse(b"P"), Parsed::Incomplete);
        // Hostile lengths: a v1 line past its 107-byte bound without CRLF, and a v2 header
        // whose declared length is never sent are bounded (the first refused, the second
        // waited for only up to the header timeout and MAX_HEADER bytes).
        let mut long = b"PROXY TCP4 ".to_vec();
        long.extend_from_slice(&[b'1'; 200]);
        assert_eq!(parse(&long), Parsed::Invalid);
        let mut huge = v2(1, 0x11, &[0; 12]);
        huge[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(parse(&huge), Parsed::Incomplete);
        huge.resize(MAX_HEADER, 0);
        assert!(matches!(parse(&huge), Parsed::Header { len, .. } if len == MAX_HEADER));
        assert_eq!(parse(b"G"), Parsed::Invalid);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Parsed::Invalid);
        assert_eq!(
            parse(b"PROXY TCP4 banana 10.0.0.1 1 2\r\n"),
            Parsed::Invalid
        );
        // Version 2 with a bad version nibble.
        let mut bad = v2(1, 0x11, &[0; 12]);
        bad[12] = 0x31;
        assert_eq!(parse(&bad), Parsed::Invalid);
    }
}
