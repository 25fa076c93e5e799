//! The PROXY protocol on the real binary: versions 1 and 2 name the client that the dynamic
//! page, the access log and a proxied app (`X-Forwarded-For`, a real Node process) see, also
//! after a hand-off to another pool of a shared address; a connection without a valid header
//! is closed unanswered; a balancer's `LOCAL` health check keeps its own address.

use crate::common;

use common::apps::serve;
use common::*;
use std::io::Write;
use std::time::Duration;

const CONFIG: &str = r#"
[[pool]]
name = "web"
processes = 1
[[pool]]
name = "other"
processes = 1
[[pool]]
name = "node"
processes = 1
command = ["node", "server.js"]
directory = "node"
health = "/healthz"

[[site]]
name = "a"
bindings = ["http://{listen}:a.example"]
proxy_protocol = true
access_log = { path = "a.log", format = "json" }
[[site.app]]
pool = "web"
handler = "dynamic"

[[site]]
name = "b"
bindings = ["http://{listen}:b.example"]
proxy_protocol = true
[[site.app]]
pool = "other"
handler = "dynamic"

[[site]]
name = "app"
bindings = ["http://{listen}:app.example"]
proxy_protocol = true
[[site.app]]
pool = "node"
"#;

/// A version 2 header (`command` 1 = PROXY, 0 = LOCAL) for a TCP client `from` → `to`.
fn v2(command: u8, from: std::net::SocketAddr, to: std::net::SocketAddr) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x20 | command);
    let mut addrs = Vec::new();
    match (from, to) {
        (std::net::SocketAddr::V6(f), std::net::SocketAddr::V6(t)) => {
            h.push(0x21);
            addrs.extend_from_slice(&f.ip().octets());
            addrs.extend_from_slice(&t.ip().octets());
        }
        (std::net::SocketAddr::V4(f), std::net::SocketAddr::V4(t)) => {
            h.push(0x11);
            addrs.extend_from_slice(&f.ip().octets());
            addrs.extend_from_slice(&t.ip().octets());
        }
        _ => panic!("one family"),
    }
    addrs.extend_from_slice(&from.port().to_be_bytes());
    addrs.extend_from_slice(&to.port().to_be_bytes());
    h.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    h.extend_from_slice(&addrs);
    h
}

fn request(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
}

/// The dynamic page's `client` cell.
fn client_on_page(body: &str) -> String {
    let start = body.find("<th>client</th><td>").expect("a client row") + 19;
    body[start..].split('<').next().unwrap().to_string()
}

#[test]
fn the_balancers_header_names_the_client_everywhere() {
    let app = serve(CONFIG);
    let addr = app.addr;

    // Version 1, then two keep-alive requests: the page, then the other pool's site (the
    // connection is handed over with its client), then the Node app.
    let mut c = Conn::open(addr);
    c.send(b"PROXY TCP4 192.0.2.77 127.0.0.1 40001 80\r\n");
    c.send(&request("a.example", "/"));
    let r = c.read_response(false).expect("an answer after a v1 header");
    assert_eq!(r.status, 200);
    assert_eq!(client_on_page(&r.text()), "192.0.2.77");
    c.send(&request("b.example", "/"));
    let r = c
        .read_response(false)
        .expect("an answer from the other pool");
    assert_eq!(client_on_page(&r.text()), "192.0.2.77", "after a hand-off");
    c.send(&request("app.example", "/"));
    let r = c.read_response(false).expect("an answer from the app");
    assert!(
        r.text().contains("forwarded for 192.0.2.77"),
        "{}",
        r.text()
    );

    // Version 2 over IPv6, the header and the request in one write, straight to the other pool.
    let from: std::net::SocketAddr = "[2001:db8::9]:5555".parse().unwrap();
    let to: std::net::SocketAddr = "[2001:db8::1]:80".parse().unwrap();
    let mut c = Conn::open(addr);
    let mut bytes = v2(1, from, to);
    bytes.extend_from_slice(&request("b.example", "/"));
    c.send(&bytes);
    let r = c.read_response(false).expect("an answer after a v2 header");
    assert_eq!(client_on_page(&r.text()), "2001:db8::9");

    // A header arriving in pieces is waited for.
    let mut c = Conn::open(addr);
    c.send(b"PROXY TCP4 198.51");
    c.stream.flush().unwrap();
    c.wait_read();
    c.send(b".100.4 127.0.0.1 1 80\r\n");
    c.send(&request("a.example", "/"));
    let r = c
        .read_response(false)
        .expect("an answer after a split header");
    assert_eq!(client_on_page(&r.text()), "198.51.100.4");

    // A health check of the balancer itself (LOCAL): the peer's own address stands.
    let mut c = Conn::open(addr);
    let mut bytes = v2(0, from, to);
    bytes.extend_from_slice(&request("a.example", "/"));
    c.send(&bytes);
    let r = c.read_response(false).expect("an answer after LOCAL");
    assert_eq!(client_on_page(&r.text()), "127.0.0.1");

    // No header, or a forged one: closed without a byte of answer.
    for bad in [
        request("a.example", "/"),
        b"PROXY TCP4 not-an-ip 127.0.0.1 1 80\r\n".to_vec(),
    ] {
        let mut c = Conn::open(addr);
        c.send(&bad);
        assert!(c.closed(), "{}", String::from_utf8_lossy(&bad));
    }

    // The access log has the client, not the balancer.
    let log = app._dir.path().join("a.log");
    app.server
        .wait_until("the log lines", Duration::from_secs(5), |_| {
            std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() == 3)
        });
    // Each thread writes through its own buffer: the order of lines is not the order sent.
    let mut remotes: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["remote"].as_str().unwrap().to_string()
        })
        .collect();
    remotes.sort();
    assert_eq!(remotes, ["127.0.0.1", "192.0.2.77", "198.51.100.4"]);
}

/// `proxy_protocol_from` (issue #39, item 15): only the balancer's address may name a
/// client; any other peer speaks plain HTTP on the same port, and a PROXY header from it is
/// a bad request, never believed.
#[test]
fn only_the_listed_peers_may_send_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"web\"\nprocesses = 1\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:{port}\"]\nproxy_protocol = true\nproxy_protocol_from = [\"127.0.0.2/32\"]\n[[site.app]]\npool = \"web\"\nhandler = \"dynamic\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // The balancer (127.0.0.2) names the client.
    let mut c = Conn::open_from("127.0.0.2", addr);
    c.send(b"PROXY TCP4 192.0.2.77 127.0.0.1 40001 80\r\n");
    c.send(&request("a", "/"));
    let r = c.read_response(false).expect("an answer to the balancer");
    assert_eq!(
        client_on_page(&r.text()),
        "192.0.2.77",
        "{}",
        server.log_text()
    );
    // Without a header, the balancer is refused as before: it must send one.
    let mut c = Conn::open_from("127.0.0.2", addr);
    c.send(&request("a", "/"));
    assert!(c.closed());
    // Anyone else is served as a plain HTTP client, under its own address…
    let mut c = Conn::open_from("127.0.0.3", addr);
    c.send(&request("a", "/"));
    let r = c
        .read_response(false)
        .expect("an answer to a direct client");
    assert_eq!(client_on_page(&r.text()), "127.0.0.3");
    // …and a header it forges is a bad request, its address never taken.
    let mut c = Conn::open_from("127.0.0.3", addr);
    c.send(b"PROXY TCP4 192.0.2.77 127.0.0.1 40001 80\r\n");
    c.send(&request("a", "/"));
    let r = c.read_response(false).expect("a refusal");
    assert_eq!(r.status, 400);
}
