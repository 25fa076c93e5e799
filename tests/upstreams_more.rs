//! Upstream groups, continued (see `upstreams.rs`): `https://` servers and their
//! certificates, a name resolved again on its interval, sticky cookies, HTTP/2 clients, a
//! WebSocket through an upstream (a real Node server), and `check`'s refusals.

use crate::common::backends::*;
use crate::common::*;
use std::net::SocketAddr;
use std::time::Duration;

/// Over HTTP/2 too, the answer's head is the servers' as the site's steps left it: its
/// fields (the stream's response is made from the head's index, not its text), the site's
/// `headers` and `status_headers` edits, and the sticky cookie put in after them.
#[test]
fn http2_clients_reach_an_upstream_as_http_1_1_ones_do() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "{}sticky = \"srv\"\n",
        group(&[&a, &b], "round_robin")
    ));
    let edits = "headers = { X-Frame-Options = \"DENY\", Server = \"\" }\n\
                 status_headers = { \"2xx\" = { Cache-Control = \"no-store\" } }\n[[site.app]]";
    let config = config.replacen("[[site.app]]", edits, 1);
    let _server = Server::with_config(dir.path(), &config);
    let names = block_on(async move {
        let mut h2 = h2c(addr.port()).await;
        let mut names = Vec::new();
        for k in 0..10 {
            let url = format!("http://{addr}/h2/{k}");
            let response = h2_get(&mut h2, &url).await.await.unwrap();
            assert_eq!(response.status(), 200);
            let fields = response.headers();
            assert_eq!(fields["x-frame-options"], "DENY", "{fields:?}");
            assert_eq!(fields["cache-control"], "no-store", "{fields:?}");
            assert!(fields.get("server").is_none(), "{fields:?}");
            assert!(fields.get("date").is_some(), "{fields:?}");
            let cookie = fields["set-cookie"].to_str().unwrap();
            assert!(cookie.starts_with("srv="), "{cookie}");
            let name = fields["x-server"].to_str().unwrap().to_string();
            let mut body = response.into_body();
            let mut text = Vec::new();
            while let Some(chunk) = body.data().await {
                text.extend_from_slice(&chunk.unwrap());
            }
            assert_eq!(
                String::from_utf8(text).unwrap(),
                format!("{name} /h2/{k}\n")
            );
            names.push(name);
        }
        names
    });
    assert_eq!(
        (count(&names, "a"), count(&names, "b")),
        (5, 5),
        "{names:?}"
    );
}

/// A line of /etc/hosts of the test's own, at its end, taken out when dropped. The other
/// lines are never rewritten (other tests resolve names meanwhile): the line is appended,
/// moved by rewriting its own bytes in place (its addresses have one length), and cut off.
struct HostsLine {
    name: String,
    /// Where the line starts.
    at: u64,
}

impl HostsLine {
    /// Points `name` at `ip` with a new last line; `None` when /etc/hosts cannot be written.
    fn add(name: &str, ip: &str) -> Option<HostsLine> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open("/etc/hosts")
            .ok()?;
        let at = f.metadata().ok()?.len();
        f.write_all(format!("{ip} {name}\n").as_bytes()).ok()?;
        Some(HostsLine {
            name: name.to_string(),
            at,
        })
    }

    /// Points it at `ip` instead (an address as long as the first).
    fn point(&self, ip: &str) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open("/etc/hosts")
            .unwrap();
        f.write_all_at(format!("{ip} {}\n", self.name).as_bytes(), self.at)
            .unwrap();
    }
}

impl Drop for HostsLine {
    fn drop(&mut self) {
        if let Ok(f) = std::fs::OpenOptions::new().write(true).open("/etc/hosts") {
            let _ = f.set_len(self.at);
        }
    }
}

#[test]
fn a_name_resolved_again_on_its_interval_moves_the_group_to_its_new_addresses() {
    need_tools("python3:python3", "python3");
    let name = format!("espalier-resolve-{}.test", std::process::id());
    let Some(line) = HostsLine::add(&name, "127.0.0.2") else {
        skip("/etc/hosts cannot be written here (a name of the test's own moves between two addresses in it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let a = Backend::start_at(
        dir.path(),
        format!("127.0.0.2:{port}").parse().unwrap(),
        "a",
        &[],
    );
    let b = Backend::start_at(
        dir.path(),
        format!("127.0.0.3:{port}").parse().unwrap(),
        "b",
        &[],
    );
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{name}:{port}\"]\nresolve = \"1s\"\n"
    ));
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(served_by(addr, "/", ""), "a");
    line.point("127.0.0.3");
    server.wait_for_log(
        &format!(
            "upstream `api`: its names now resolve to 127.0.0.3:{port} (were 127.0.0.2:{port})"
        ),
        Duration::from_secs(20),
    );
    server.wait_for_log(
        "reloaded upstream `api` resolved again: 0 pool(s) unchanged, 1 changed or new",
        Duration::from_secs(20),
    );
    let mut moved = false;
    wait_for("b to answer", Duration::from_secs(20), || {
        moved = served_by(addr, "/", "") == "b";
        moved
    });
    drop((a, b, line));
}

#[test]
fn a_sticky_cookie_keeps_a_client_to_its_server_while_it_is_up() {
    let (dir, a, b) = two_backends();
    let mut backends = [a, b];
    let (config, addr) = front(&format!(
        "{}sticky = \"srv\"\n",
        group(&[&backends[0], &backends[1]], "round_robin")
    ));
    let _server = Server::with_config(dir.path(), &config);
    let first = get(addr, "/", "");
    let chosen = first.header("x-server").unwrap().to_string();
    let cookie = first
        .header("set-cookie")
        .expect("a sticky cookie")
        .to_string();
    assert!(
        cookie.starts_with("srv=") && cookie.ends_with("; Path=/; HttpOnly; SameSite=Lax"),
        "{cookie}"
    );
    let value = cookie.split(';').next().unwrap().to_string();
    // Round robin alone would alternate: the cookie keeps every request on one server.
    for _ in 0..20 {
        let r = get(addr, "/", &format!("Cookie: theme=dark; {value}\r\n"));
        assert_eq!(r.header("x-server"), Some(chosen.as_str()));
        assert_eq!(
            r.header("set-cookie"),
            None,
            "a client already kept is told nothing"
        );
    }
    // Its server gone, the client is balanced to the other and told so.
    let k = if chosen == "a" { 0 } else { 1 };
    backends[k].kill();
    let r = get(addr, "/", &format!("Cookie: {value}\r\n"));
    assert_eq!(r.status, 200);
    assert_ne!(r.header("x-server"), Some(chosen.as_str()));
    let moved = r.header("set-cookie").expect("a new cookie");
    assert!(
        moved.starts_with("srv=") && !moved.starts_with(&value),
        "{moved}"
    );
}

#[test]
fn a_websocket_is_tunnelled_to_an_upstream_server() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, target) = node_server();
    let site_port = free_port();
    let config = format!(
        "[[site]]\nname = \"ws\"\nbindings = [\"http://127.0.0.1:{site_port}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"{target}\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let mut conn = Conn::open(SocketAddr::from(([127, 0, 0, 1], site_port)));
    conn.send(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
    let r = conn.read_response(true).expect("an answer");
    assert_eq!(r.status, 101, "{}", server.log_text());
    // A masked text frame "hi", echoed back unmasked.
    conn.send(&[0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2]);
    let mut echoed = [0u8; 4];
    std::io::Read::read_exact(&mut conn.stream, &mut echoed).unwrap();
    assert_eq!(echoed, [0x81, 0x02, b'h', b'i']);
}

#[test]
fn https_servers_are_verified_by_their_authority_and_may_be_asked_for_a_client_certificate() {
    need_tools("python3:python3 openssl:openssl", "python3 and openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::common::tls::openssl_cert(d, "backend", "backend.test");
    crate::common::tls::openssl_cert(d, "stranger", "backend.test");
    crate::common::tls::openssl_cert(d, "client", "front.test");
    let (cert, key, client) = (
        d.join("backend.pem"),
        d.join("backend.key"),
        d.join("client.pem"),
    );
    let a = Backend::start_with(d, "127.0.0.2", "a", &[&cert, &key]);
    let b = Backend::start_with(d, "127.0.0.3", "b", &[&cert, &key, &client]);
    let site = |addr: SocketAddr, path: &str, group: &str| {
        format!("[[site.app]]\npath = \"{path}\"\nupstream = \"{group}\"\n")
            .replace("{addr}", &addr.to_string())
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let group = |name: &str, server: &Backend, tls: &str| {
        format!(
            "[[upstream]]\nname = \"{name}\"\nservers = [\"https://{}\"]\n[upstream.tls]\n{tls}\n",
            server.addr
        )
    };
    let config = [
        group("trusted", &a, "ca = \"backend.pem\"\nserver_name = \"backend.test\""),
        group("checked", &a, "ca = \"backend.pem\"\nserver_name = \"backend.test\"\n[upstream.health]\npath = \"/health\"\ninterval = \"300ms\""),
        group("strange", &a, "ca = \"stranger.pem\"\nserver_name = \"backend.test\""),
        group("unverified", &a, "verify = false"),
        group("with_cert", &b, "ca = \"backend.pem\"\nserver_name = \"backend.test\"\ncert = \"client.pem\"\nkey = \"client.key\""),
        group("without_cert", &b, "ca = \"backend.pem\"\nserver_name = \"backend.test\""),
        format!("[[site]]\nname = \"front\"\nbindings = [\"http://{addr}\"]\n"),
        site(addr, "/trusted/", "trusted"),
        site(addr, "/checked/", "checked"),
        site(addr, "/strange/", "strange"),
        site(addr, "/unverified/", "unverified"),
        site(addr, "/with_cert/", "with_cert"),
        site(addr, "/without_cert/", "without_cert"),
    ]
    .concat();
    let server = Server::with_config(d, &config);
    assert_eq!(served_by(addr, "/trusted/x", ""), "a");
    assert_eq!(served_by(addr, "/unverified/x", ""), "a");
    assert_eq!(served_by(addr, "/with_cert/x", ""), "b");
    // Another authority's certificate: refused in the handshake, 502, and the log says why.
    assert_eq!(served_by(addr, "/strange/x", ""), "status 502");
    let log = server.wait_for_log(
        "TLS handshake failed: invalid peer certificate",
        Duration::from_secs(5),
    );
    assert!(
        log.contains("upstream `strange` could not be reached"),
        "{log}"
    );
    // A server that asks for a client certificate, given none.
    assert_eq!(served_by(addr, "/without_cert/x", ""), "status 502");
    // The active check speaks TLS too.
    server.wait_until("the TLS check passing", Duration::from_secs(20), |s| {
        s.status()
            .upstreams
            .iter()
            .any(|u| u.name == "checked" && u.servers[0].state == "up")
    });
    assert!(a.requests().iter().any(|r| r == "GET /health"));
}

#[test]
fn check_refuses_what_an_upstream_cannot_be_and_says_how_to_reach_a_running_service() {
    let dir = tempfile::tempdir().unwrap();
    let check = |config: &str| check_refuses(dir.path(), config);
    // The first try: an address as a pool's `upstream`.
    let err = check("[[pool]]\nname = \"p\"\ncommand = [\"/bin/true\"]\nupstream = \"127.0.0.1:30900\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\n");
    assert!(err.contains("to forward to a server espalier does not start, write upstream = \"127.0.0.1:30900\" on the site's [[site.app]]"), "{err}");
    let err = check("[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"apy\"\n[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9\"]\n");
    assert!(
        err.contains("no upstream is named `apy`; use one of: api"),
        "{err}"
    );
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"https://127.0.0.1:9\"]\n[upstream.tls]\nca = \"no-such-ca.pem\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\n");
    assert!(err.contains("no-such-ca.pem cannot be read"), "{err}");
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9\"]\n[upstream.tls]\nverify = false\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\n");
    assert!(err.contains("has no https:// server"), "{err}");
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9\"]\nresolve = \"5s\"\nsticky = \"a b\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\n");
    assert!(
        err.contains("every server of upstream `api` is an address or a socket"),
        "{err}"
    );
    assert!(err.contains("`a b` is not a cookie name"), "{err}");
    // What could not act, or would be cut silently, is refused.
    let err = check("[[upstream]]\nname = \"spare\"\nservers = [\"127.0.0.1:9\"]\ntries = 17\nresolve = \"100ms\"\n[upstream.passive]\nfailures = 0\neject_for = \"1m\"\n[upstream.health]\nrise = 101\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nhandler = \"static\"\n");
    for wanted in [
        "upstream `spare` is named by no site's path",
        "17 is more than this takes; write a number from 1 to 16",
        "101 is more than this takes; write a number from 1 to 100",
        "failures = 0 ejects none",
        "write 1s or more",
    ] {
        assert!(err.contains(wanted), "{wanted}: {err}");
    }
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9 weight=0\"]\nbalance = \"fastest\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\nhandler = \"static\"\n");
    assert!(
        err.contains("a weight is a whole number from 1 to 100"),
        "{err}"
    );
    assert!(err.contains("`fastest` is not a way to balance"), "{err}");
    assert!(err.contains("remove `handler`"), "{err}");
}
