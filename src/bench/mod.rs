//! `espalier bench`: an HTTP/1.1, HTTP/2 and HTTP/3 load generator, over TCP, TLS or QUIC — the case study's WCAT and the static
//! benchmark's weighttp, cheap enough never to be the bottleneck.
//!
//! Owns: generating load and measuring it. Each client thread has its own single-threaded
//! event loop, connections, histogram and counters; results are merged once at the end, so
//! nothing is shared while measuring (the only cross-thread value is a progress counter that
//! its own thread stores and the progress printer reads).
//!
//! - Closed loop (default): each connection sends a request when the previous response has
//!   arrived (`--pipeline K`: K at a time). `-n N` runs exactly N measured requests,
//!   `-d` runs for a time.
//! - Open loop (`--rate R`): requests are scheduled at R per second over all connections and
//!   latency is measured from each request's *scheduled* start, which corrects for
//!   coordinated omission (wrk2's method): a stalled server is charged for the requests it
//!   kept from being sent.
//! - `--warmup` and `--cooldown` run load before and after the measured window without
//!   counting it.
//!
//! Must not touch: servers (it only talks to URLs) or the system's CPUs beyond pinning its own
//! threads (`--cpus`).

//!
//! The files: [`options`] (what to load), `run` (the threads and the measured window), `state`
//! (what a thread's connections share), `transport` (TCP and TLS), `connection` (one
//! HTTP/1.1 connection's loop), `h2` (one HTTP/2 connection's streams), `h3` (one HTTP/3
//! connection's streams, over QUIC), `response` (the
//! response scanner), [`result`] (counts, errors and the histogram, printable and mergeable).

mod connection;
mod h2;
mod h3;
pub mod options;
mod response;
pub mod result;
mod run;
mod state;
mod transport;

pub use options::{parse_sweep, parse_tls_groups, BenchOptions, Target, Trust};
pub use run::run;

#[cfg(test)]
mod tests {
    use super::response::*;
    use super::*;

    #[test]
    fn targets_parse() {
        let t = Target::parse("http://127.0.0.1:8080/a?b", 1).unwrap();
        assert_eq!(
            (t.addr.port(), t.path.as_str(), t.host_header.as_str()),
            (8080, "/a?b", "127.0.0.1:8080")
        );
        let t = Target::parse("http://127.0.0.1", 2).unwrap();
        assert_eq!((t.addr.port(), t.path.as_str(), t.weight), (80, "/", 2));
        let t = Target::parse("http://[::1]:81/x", 1).unwrap();
        assert_eq!(t.addr, "[::1]:81".parse().unwrap());
        let t = Target::parse("https://127.0.0.1/x", 1).unwrap();
        assert_eq!(
            (t.addr.port(), t.tls, t.host.as_str()),
            (443, true, "127.0.0.1")
        );
        let t = Target::parse("https://[::1]:8443/", 1).unwrap();
        assert_eq!((t.addr.port(), t.host.as_str()), (8443, "::1"));
        assert!(Target::parse("ftp://x/", 1).is_err());
        assert!(Target::parse("http:///", 1).is_err());
    }

    #[test]
    fn responses_parse_by_framing() {
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, 40, false))
        ));
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(500, 37, false))
        ));
        assert!(b.is_empty());
        let mut b = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi".to_vec();
        assert!(parse_response(&mut b).is_none());
        let mut b = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(204, _, _))
        ));
        let mut b = b"garbage\r\n\r\n".to_vec();
        assert!(matches!(parse_response(&mut b), Some(ReadOutcome::Failed)));
        let mut b = b"HTTP/1.1 200 OK\r\ncontent-LENGTH: x\r\n\r\n".to_vec();
        assert!(
            matches!(parse_response(&mut b), Some(ReadOutcome::Failed)),
            "a bad length is not HTTP"
        );
        let mut b = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec();
        assert!(
            matches!(
                parse_response(&mut b),
                Some(ReadOutcome::Response(200, _, true))
            ),
            "HTTP/1.0 closes"
        );
        let mut b = b"HTTP/1.1 200 OK\r\nCache-Control: x\r\nConnection: close\r\nContent-Length: 1\r\n\r\n!".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        assert!(matches!(scan_head(b"HTTP/1.1 20"), Ok(None)));
        assert_eq!(
            close_delimited(b"HTTP/1.1 200 OK\r\n\r\nbody until close"),
            Some((200, 35))
        );
        // Lowercase names and chunked framing take the line-by-line path.
        let mut b =
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        assert!(b.is_empty());
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n".to_vec();
        assert!(
            matches!(
                parse_response(&mut b),
                Some(ReadOutcome::Response(200, _, false))
            ),
            "Transfer-Encoding wins over Content-Length"
        );
        assert!(b.is_empty());
    }

    #[test]
    fn sweeps() {
        assert_eq!(parse_sweep("10:50:10").unwrap(), vec![10, 20, 30, 40, 50]);
        assert_eq!(parse_sweep("10:1000:10").unwrap().len(), 100);
        assert!(parse_sweep("0:10:1").is_err());
        assert!(parse_sweep("10:5:1").is_err());
        assert!(parse_sweep("a:b").is_err());
    }
}
