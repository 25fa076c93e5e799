//! A connection two workers keep handing to each other (an old and a new worker disagreeing
//! about a host during an overlapped reload) ends in a 503 after `MAX_HOPS`, instead of
//! bouncing forever; and a connection whose requests are answered between hand-offs is never
//! cut off, however many times it moves. Real sockets, the real connection loop: the "other
//! worker" is this test, which takes each handed-over connection from a unix socket and serves
//! it again with the hops it carried.

use espalier::handoff::{Carried, Handoff, Peers, PoolSlots, PoolTargets, Receiver, MAX_HOPS};
use espalier::http::clock::Clock;
use espalier::http::conn::{self, Shutdown};
use espalier::http::service::{
    ConnEnv, LentConnection, LentHead, Outcome, Reply, RequestCtx, Route, Service, Timeouts,
};
use espalier::http::{HeadLimits, Request, Responder};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// The key both ends share (a master's, made at random in `serve`).
const KEY: espalier::handoff::Key = espalier::handoff::Key([5; 16]);

/// A worker that answers the requests naming `mine` and hands the others on.
struct Bouncer {
    mine: &'static str,
    targets: Rc<PoolTargets>,
    addr: SocketAddr,
}

impl Service for Bouncer {
    /// Nothing is lent: the bouncer answers or hands over.
    type Target = std::convert::Infallible;
    type Lent = std::convert::Infallible;

    fn route(&self, _group: usize, req: &Request<'_>, may_hand_off: bool) -> Route<Self::Target> {
        if may_hand_off && req.host() != Some(self.mine) {
            return Route::HandOff(Handoff {
                targets: Rc::clone(&self.targets),
                addr: self.addr,
                hops: 0,
                client: None,
            });
        }
        Route::Here(RequestCtx::default())
    }
    fn call(
        &self,
        _group: usize,
        _ctx: &RequestCtx,
        _req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        resp.simple(200, "text/plain", b"here\n");
        Reply::Done
    }
    fn prepare(
        &self,
        target: Self::Target,
        _ctx: &RequestCtx,
        _req: &Request<'_>,
        _head: &LentHead<'_>,
    ) -> Self::Lent {
        match target {}
    }
    async fn lend<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        &self,
        lent: Self::Lent,
        _conn: LentConnection<'_, C>,
    ) -> Outcome {
        match lent {}
    }
    fn shared(&self, _group: usize) -> bool {
        true
    }
}

/// Runs `client` against two workers, the first answering `mine[0]`, the second `mine[1]`,
/// each handing what is not its own to the other; returns what the client read and how many
/// times the connection was handed over.
fn bounce(
    mine: [&'static str; 2],
    client: impl FnOnce(SocketAddr) -> Vec<u8> + Send + 'static,
) -> (Vec<u8>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let path = espalier::handoff::slot_path(dir.path(), "other", 0, 0);
    let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || client(addr));
    let (stream, _) = listener.accept().unwrap();
    stream.set_nonblocking(true).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let handed = local.block_on(&rt, async move {
        let clock = Rc::new(Clock::new(String::new()));
        tokio::task::spawn_local(Rc::clone(&clock).run());
        let table = std::sync::Arc::new(Peers {
            dir: dir.path().to_path_buf(),
            pools: vec![PoolSlots("other".into(), vec![(0, 0, None)])],
            distances: Vec::new(),
            wake: None,
        });
        let targets = Peers::targets(&table, "me", (0, None), KEY).remove(0);
        let envs: Vec<Rc<ConnEnv<Bouncer>>> = mine
            .into_iter()
            .map(|mine| {
                Rc::new(ConnEnv {
                    service: Bouncer {
                        mine,
                        targets: Rc::clone(&targets),
                        addr,
                    },
                    clock: Rc::clone(&clock),
                    limits: HeadLimits {
                        max_request_line: 1024,
                        max_header_size: 4096,
                        max_headers: 16,
                        max_body_size: 0,
                    },
                    timeouts: Timeouts {
                        header: Duration::from_secs(2),
                        body: Duration::from_secs(2),
                        keepalive: Duration::from_millis(500),
                    },
                    shutdown: Rc::new(Shutdown::default()),
                    streams: std::cell::Cell::new(0),
                    ring: None,
                })
            })
            .collect();
        let mut receiver = Receiver::new(socket.into(), Vec::new(), KEY).unwrap();
        let stream = tokio::net::TcpStream::from_std(stream).unwrap();
        let mut task = tokio::task::spawn_local(conn::serve(
            stream,
            0,
            Rc::clone(&envs[0]),
            Carried::default(),
        ));
        let mut handed = 0;
        loop {
            tokio::select! {
                _ = &mut task => {
                    // This run of the loop ended: the connection was handed over or closed.
                    match tokio::time::timeout(Duration::from_millis(300), receiver.next()).await {
                        Ok(Ok(got)) => {
                            handed += 1;
                            assert_eq!(got.addr, addr);
                            // The other worker takes it.
                            let env = Rc::clone(&envs[(handed % 2) as usize]);
                            let stream = tokio::net::TcpStream::from_std(got.stream).unwrap();
                            task = tokio::task::spawn_local(conn::serve(stream, 0, env, got.carried));
                        }
                        _ => return handed,
                    }
                }
            }
        }
    });
    (client.join().unwrap(), handed)
}

fn exchange(addr: SocketAddr, requests: &[u8]) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(requests).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

#[test]
fn a_connection_bounced_between_workers_ends_in_a_503() {
    // Neither worker thinks the host is its own.
    let (out, handed) = bounce(["one.example", "two.example"], |addr| {
        exchange(
            addr,
            b"GET / HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n",
        )
    });
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 503 "), "{text}");
    assert_eq!(
        handed,
        u32::from(MAX_HOPS),
        "handed on MAX_HOPS times, then refused"
    );
}

#[test]
fn answered_requests_between_hand_offs_reset_the_count() {
    // here, elsewhere, here, elsewhere, …: each worker answers one and hands the next to the
    // other, so the connection moves far more than MAX_HOPS times and every request is
    // answered.
    let rounds = 2 * usize::from(MAX_HOPS);
    let (out, handed) = bounce(["here.example", "elsewhere.example"], move |addr| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answered = Vec::new();
        for k in 0..2 * rounds {
            let host = if k % 2 == 0 {
                "here.example"
            } else {
                "elsewhere.example"
            };
            s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
                .unwrap();
            // One answer (its body is `here\n`) before the next request.
            while String::from_utf8_lossy(&answered).matches("here\n").count() <= k {
                let mut buf = [0u8; 4096];
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return answered,
                    Ok(n) => answered.extend_from_slice(&buf[..n]),
                }
            }
        }
        answered
    });
    let text = String::from_utf8_lossy(&out);
    assert_eq!(text.matches("HTTP/1.1 200 ").count(), 2 * rounds, "{text}");
    assert!(!text.contains(" 503 "), "{text}");
    assert!(handed as usize >= 2 * rounds - 1, "handed {handed} times");
}
