//! Upstream servers that fail as real ones do, behind the default balancer (`least_time`):
//! one killed and started again is used again; one frozen (SIGSTOP: its kernel still takes
//! connections) costs an idempotent request a wait, not an error; a request its client
//! abandons frees its connection to the server at once; answers no HTTP/1.1 client may get
//! (a status outside 100–599) are a 502.

use crate::common::backends::*;
use crate::common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

#[test]
fn a_killed_server_started_again_takes_requests_again() {
    let (dir, a, mut b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\n",
        a.addr, b.addr
    ));
    let _server = Server::with_config(dir.path(), &config);
    let names: Vec<String> = (0..40).map(|_| served_by(addr, "/x", "")).collect();
    assert!(count(&names, "b") > 0, "{names:?}");
    // b dies: every GET is answered by a (a refused connection is tried elsewhere).
    let b_addr = b.addr;
    b.kill();
    let during: Vec<String> = (0..40).map(|_| served_by(addr, "/y", "")).collect();
    assert_eq!(count(&during, "a"), 40, "{during:?}");
    // b comes back at the same address: it takes requests again (its penalty ends; the
    // old balancer kept its failure as its answer time and never drew it again).
    let _b = Backend::start_at(dir.path(), b_addr, "b", &[]);
    let mut back = false;
    wait_for("b to serve again", Duration::from_secs(30), || {
        back |= served_by(addr, "/z", "") == "b";
        back
    });
}

#[test]
fn a_frozen_servers_gets_are_answered_by_another_server() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\nbalance = \"round_robin\"\nresponse_timeout = \"1s\"\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(get(addr, "/warm", "").status, 200);
    // b freezes: its kernel completes connections, nothing answers. Round robin sends it
    // every other GET until it is ejected (least_time, with two servers, may never draw it).
    b.signal(libc::SIGSTOP);
    let names: Vec<String> = (0..20).map(|_| served_by(addr, "/f", "")).collect();
    assert_eq!(count(&names, "a"), 20, "{names:?}\n{}", server.log_text());
    server.wait_for_log(
        "did not answer within response_timeout (1s); sent to another server",
        Duration::from_secs(5),
    );
}

/// A site in front of [`silent_server`]: (its folder, the server, the site's address, the
/// silent server's address, its connections' ends).
fn in_front_of_a_silent_server() -> (
    tempfile::TempDir,
    Server,
    SocketAddr,
    SocketAddr,
    std::sync::mpsc::Receiver<()>,
) {
    let dir = tempfile::tempdir().unwrap();
    let (silent, eof) = silent_server();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{silent}\"]\n"
    ));
    let server = Server::with_config(dir.path(), &config);
    (dir, server, addr, silent, eof)
}

/// The connections established to `addr` now (from `ss`).
fn connections_to(addr: SocketAddr) -> usize {
    let out = std::process::Command::new("ss")
        .args(["-Htn", "state", "established", "dst", &addr.to_string()])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A server that takes connections, reads a request head and never answers; `eof` says
/// when each connection's far end closed.
fn silent_server() -> (SocketAddr, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let at = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(4) {
            let Ok(mut conn) = conn else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(90)))
                    .unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        let _ = tx.send(());
                        return;
                    }
                }
            });
        }
    });
    (at, rx)
}

/// An HTTP/2 client cancels (RST_STREAM) a stream waiting on a silent server, and keeps
/// its connection: the stream's exchange with the server ends (its connection closed) —
/// 400 cancelled streams once kept 400 connections for response_timeout.
#[test]
fn an_http2_stream_its_client_cancels_closes_its_connection_to_the_server() {
    let (_dir, _server, addr, silent, eof) = in_front_of_a_silent_server();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
        let driving = tokio::spawn(async move {
            let _ = connection.await;
        });
        let get = http::Request::get(format!("http://{addr}/slow"))
            .body(())
            .unwrap();
        let (answer, mut stream) = client.send_request(get, false).unwrap();
        stream.send_data(bytes::Bytes::new(), true).unwrap();
        // Once the request waits on the server, the client gives up on it.
        let waiting = tokio::task::spawn_blocking(move || {
            wait_for(
                "the request to reach the server",
                Duration::from_secs(10),
                || connections_to(silent) > 0,
            )
        });
        waiting.await.unwrap();
        drop(answer);
        stream.send_reset(h2::Reason::CANCEL);
        let eof = tokio::task::spawn_blocking(move || eof.recv_timeout(Duration::from_secs(20)));
        eof.await
            .unwrap()
            .expect("the connection to the server closed when its stream was cancelled");
        drop(client);
        driving.abort();
    });
}

#[test]
fn a_request_its_client_abandons_closes_its_connection_to_the_server() {
    let (_dir, _server, addr, silent, eof) = in_front_of_a_silent_server();
    let mut c = Conn::open(addr);
    c.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
    // The request reached the server (it is waiting on it), then the client goes.
    wait_for("the request to be sent on", Duration::from_secs(10), || {
        connections_to(silent) > 0
    });
    drop(c);
    // Long before response_timeout (60 s): the server's connection is closed.
    eof.recv_timeout(Duration::from_secs(20))
        .expect("the connection to the server closed when its client went");
}

/// A server on 127.0.0.2 that reads each request's head and writes `answer(head)`, for up to
/// eight connections.
fn canned_server(answer: impl Fn(&[u8]) -> Vec<u8> + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.2:0").unwrap();
    let at = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut conn) = conn else { return };
            conn.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = conn.write_all(&answer(&head));
        }
    });
    at
}

/// A server that answers every request with this raw head.
fn raw_server(head: &'static str) -> SocketAddr {
    canned_server(move |_| head.as_bytes().to_vec())
}

#[test]
fn a_status_outside_100_to_599_is_a_502() {
    let dir = tempfile::tempdir().unwrap();
    for head in [
        "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
    ] {
        let upstream = raw_server(head);
        let (config, addr) = front(&format!(
            "[[upstream]]\nname = \"api\"\nservers = [\"{upstream}\"]\n"
        ));
        let server = Server::with_config(dir.path(), &config);
        assert_eq!(get(addr, "/", "").status, 502, "{head}");
        server.wait_for_log("answered a status outside 100–599", Duration::from_secs(5));
    }
}

/// A server that answers every request with its request head as the body.
fn echo_server() -> SocketAddr {
    canned_server(|head| {
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            head.len()
        )
        .into_bytes();
        answer.extend_from_slice(head);
        answer
    })
}

#[test]
fn an_app_never_sees_underscored_fields_nor_cookie_crumbs_and_forwarded_ends_with_ours() {
    need_tools("curl:curl", "curl");
    let dir = tempfile::tempdir().unwrap();
    let upstream = echo_server();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{upstream}\"]\n"
    ));
    let _server = Server::with_config(dir.path(), &config);
    let r = get(
        addr,
        "/",
        "X_Remote_User: admin\r\nX_Client_Subject: CN=root\r\nForwarded: for=10.9.9.9\r\n",
    );
    let seen = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        !seen.contains("X_Remote_User") && !seen.contains("X_Client"),
        "{seen}"
    );
    assert!(
        seen.contains("Forwarded: for=10.9.9.9, for=127.0.0.1;proto=http;host=\"localhost\"\r\n"),
        "{seen}"
    );
    // An HTTP/2 client's cookies, sent as separate fields, reach the app as one line.
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--http2-prior-knowledge"])
        .args(["-H", "Cookie: session=abc", "-H", "Cookie: csrftoken=xyz"])
        .arg(format!("http://{addr}/"))
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        seen.contains("Cookie: session=abc; csrftoken=xyz\r\n"),
        "{seen}"
    );
    assert_eq!(
        seen.to_ascii_lowercase().matches("cookie:").count(),
        1,
        "{seen}"
    );
}

/// A silent upstream holding every request sent to it takes at most half a thread's
/// connections: past it its site answers 503 at once, and another site on the same worker
/// still answers (once, every site of the worker answered 503 for the lack of descriptors).
#[test]
fn a_silent_upstream_takes_at_most_its_share_of_a_threads_connections() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "still here\n").unwrap();
    let (silent, _eof) = silent_server();
    let (slow, other) = (free_port(), free_port());
    let config = format!(
        "[server.limits]\nmax_connections = 8\n[[pool]]\nname = \"p\"\nprocesses = 1\ncpus = \"0\"\n\
         [[upstream]]\nname = \"api\"\nservers = [\"{silent}\"]\n\
         [[site]]\nname = \"slow\"\nbindings = [\"http://127.0.0.1:{slow}\"]\n[[site.app]]\npath = \"/\"\npool = \"p\"\nupstream = \"api\"\n\
         [[site]]\nname = \"other\"\nbindings = [\"http://127.0.0.1:{other}\"]\nroot = \"www\"\n[[site.app]]\npath = \"/\"\npool = \"p\"\n"
    );
    let server = Server::with_config(d, &config);
    // One thread, eight connections: the upstream's share is four.
    let held: Vec<Conn> = (0..4)
        .map(|_| {
            let mut c = Conn::open(SocketAddr::from(([127, 0, 0, 1], slow)));
            c.send(b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
            c
        })
        .collect();
    wait_for(
        "four requests at the server",
        Duration::from_secs(10),
        || connections_to(silent) == 4,
    );
    let r = get(SocketAddr::from(([127, 0, 0, 1], slow)), "/more", "");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    server.wait_for_log(
        "holds 4 requests at its servers on this thread, its share of the thread's connections",
        Duration::from_secs(5),
    );
    let r = get(SocketAddr::from(([127, 0, 0, 1], other)), "/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"still here\n"[..]));
    drop(held);
}
