use super::*;

#[test]
fn a_loopback_endpoint_answers_to_addresses_and_localhost_only() {
    let lo: SocketAddr = "127.0.0.1:9180".parse().unwrap();
    for ok in [
        "127.0.0.1:9180",
        "localhost:9180",
        "LOCALHOST",
        "[::1]:9180",
        "10.0.0.1",
    ] {
        assert!(host_allowed(ok, lo), "{ok}");
    }
    for bad in [
        "evil.example:9180",
        "evil.example",
        "127.0.0.1.evil.example",
        "[evil]",
    ] {
        assert!(!host_allowed(bad, lo), "{bad}");
    }
    let open: SocketAddr = "0.0.0.0:9180".parse().unwrap();
    assert!(host_allowed("server.example:9180", open));
}

#[test]
fn routes() {
    use crate::server::status::{PoolState, StatusQuery};
    let all = StatusQuery::default();
    assert_eq!(
        route(Method::Get, "/status", ""),
        Ok(Some((AdminCommand::Status(all.clone()), false)))
    );
    assert_eq!(
        route(Method::Get, "/metrics", ""),
        Ok(Some((AdminCommand::Status(all), true)))
    );
    // A scrape of ten thousand pools may ask for the running ones only.
    let running = StatusQuery {
        state: Some(PoolState::Running),
        ..StatusQuery::default()
    };
    assert_eq!(
        route(Method::Get, "/metrics", "state=running"),
        Ok(Some((AdminCommand::Status(running), true)))
    );
    let q = StatusQuery {
        pool: Some("shop-*".into()),
        state: Some(PoolState::Running),
        page: 3,
        per_page: Some(50),
    };
    assert_eq!(
        route(
            Method::Get,
            "/live",
            "pool=shop-*&state=running&page=3&per_page=50"
        ),
        Ok(Some((AdminCommand::Live(q.clone()), false)))
    );
    assert_eq!(StatusQuery::parse(&q.to_query()), Ok(q));
    assert!(route(Method::Get, "/status", "state=asleep").is_err());
    assert!(route(Method::Get, "/status", "per_page=0").is_err());
    assert!(route(Method::Get, "/status", "pool=%3Cscript%3E").is_err());
    assert!(route(Method::Get, "/status", "colour=red").is_err());
    assert_eq!(
        route(Method::Post, "/pools/web/recycle", ""),
        Ok(Some((AdminCommand::Recycle("web".into()), false)))
    );
    assert_eq!(
        route(Method::Get, "/pools/web/recycle", ""),
        Ok(None),
        "actions are POSTs"
    );
    assert_eq!(
        route(Method::Post, "/reload/", ""),
        Ok(Some((AdminCommand::Reload, false)))
    );
    assert_eq!(route(Method::Get, "/", ""), Ok(None));
}

#[test]
fn a_status_query_matches_names_and_states_and_pages() {
    use crate::server::status::{PoolState, StatusQuery};
    let q = StatusQuery::parse("pool=shop-*-eu").unwrap();
    assert!(q.matches("shop-12-eu", PoolState::Idle));
    assert!(q.matches("shop--eu", PoolState::Running));
    assert!(!q.matches("shop-12-us", PoolState::Running));
    let q = StatusQuery::parse("pool=12&state=idle").unwrap();
    assert!(q.matches("shop-12-eu", PoolState::Idle));
    assert!(!q.matches("shop-12-eu", PoolState::Running));
    // A pathological pattern stays fast (no exponential backtracking).
    let q = StatusQuery::parse(&format!("pool={}b", "*a".repeat(30))).unwrap();
    assert!(!q.matches(&"a".repeat(64), PoolState::Idle));
    let q = StatusQuery::parse(&format!("pool={}b", "*a".repeat(2000))).unwrap();
    assert!(!q.matches(&"a".repeat(64), PoolState::Idle));
    // A page past the end, however large, is empty (no overflow).
    let q = StatusQuery::parse(&format!("page={}&per_page=1000", usize::MAX)).unwrap();
    assert_eq!(q.window(10_000), 10_000..10_000);
    assert!(StatusQuery::parse("page=99999999999999999999999").is_err());
    let q = StatusQuery::parse("page=3&per_page=50").unwrap();
    assert_eq!(q.window(120), 100..120);
    assert_eq!(q.window(90), 90..90);
    assert_eq!(StatusQuery::default().window(7), 0..7);
}

/// An endpoint that closes its first `closes` connections without answering, then answers
/// each with `200 ok`; how many connections it took, once the client is done.
fn closing_then_answering(closes: usize) -> (SocketAddr, std::thread::JoinHandle<usize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let served = std::thread::spawn(move || {
        let mut taken = 0;
        // Bounded: the client makes three connections at most.
        for stream in listener.incoming().take(3) {
            let Ok(mut stream) = stream else { break };
            taken += 1;
            if taken <= closes {
                // Closed unanswered, its request unread (a reset, or an end before any
                // byte, whichever the client meets first: both are "closed").
                drop(stream);
                continue;
            }
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
            break;
        }
        taken
    });
    (addr, served)
}

#[test]
fn a_read_whose_connection_was_reset_is_asked_again_and_a_write_never() {
    let (addr, served) = closing_then_answering(1);
    let (status, body) = request(addr, "GET", "/status").unwrap();
    assert_eq!((status, body.as_slice()), (200, &b"ok"[..]));
    assert_eq!(served.join().unwrap(), 2);
    // A write whose connection was closed is not sent again: it may have been applied.
    let (addr, served) = closing_then_answering(1);
    let e = request(addr, "POST", "/reload").unwrap_err();
    assert!(e.contains("closed the connection before answering;"), "{e}");
    // Its listener is still waiting for a second connection: end it with one.
    drop(std::net::TcpStream::connect(addr));
    assert_eq!(served.join().unwrap(), 2);
}
