//! Who may come in (issue #29, item 1): `allow` and `deny` per site and per path, with IPv4
//! and IPv6 clients (bound to 127.0.0.2 and ::1), behind the PROXY protocol, and behind a
//! trusted proxy's `X-Forwarded-For` (an untrusted one's ignored); `deny_action = "close"`
//! answers nothing (a reset; on HTTP/2 a refused stream).

use crate::common;

use common::*;
use std::net::SocketAddr;

fn ask(from: &str, addr: SocketAddr, raw: &str) -> Option<Response> {
    let mut c = Conn::open_from(from, addr);
    c.send(raw.as_bytes());
    c.read_response(false)
}

fn status_from(from: &str, addr: SocketAddr, path: &str, extra: &str) -> u16 {
    ask(
        from,
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n"),
    )
    .expect("an answer")
    .status
}

#[test]
fn allow_and_deny_by_address_on_sites_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www/admin")).unwrap();
    std::fs::write(d.join("www/index.html"), "<p>home\n").unwrap();
    std::fs::write(d.join("www/admin/index.html"), "<p>admin\n").unwrap();
    std::fs::write(d.join("denied.html"), "<h1>not for you</h1>\n").unwrap();
    let (v4, v6, proxied, behind, closing) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let site = |name: &str, binding: String, keys: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"{binding}\"]\nroot = \"www\"\n{keys}\n[[site.app]]\npath = \"/\"\npool = \"files\"\n")
    };
    let config = format!(
        "[[pool]]\nname = \"files\"\n{}[[site.app]]\npath = \"/admin/\"\npool = \"files\"\nallow = [\"127.0.0.1\"]\n{}{}{}{}",
        site("v4", format!("http://127.0.0.1:{v4}"), "deny = [\"127.0.0.2\"]\nerrors = { 403 = \"denied.html\" }\n[[site.rule]]\nmatch = \"^/door/(.*)$\"\nrewrite = \"/admin/$1\""),
        site("v6", format!("http://[::1]:{v6}"), "deny = [\"2001:db8::/32\", \"::1\"]"),
        site("proxied", format!("http://127.0.0.1:{proxied}"), "proxy_protocol = true\ndeny = [\"192.0.2.0/24\"]"),
        site("behind", format!("http://127.0.0.1:{behind}"), "trusted_proxies = [\"127.0.0.1\"]\ndeny = [\"192.0.2.0/24\"]\ndeny_action = 404"),
        site("closing", format!("http://127.0.0.1:{closing}"), "deny = [\"127.0.0.2\"]\ndeny_action = \"close\""),
    );
    let server = Server::with_config(d, &config);
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    // IPv4: 127.0.0.2 is denied (the site's page for 403), 127.0.0.1 served; the path's own
    // allow list keeps 127.0.0.3 out of /admin/ only.
    assert_eq!(
        status_from("127.0.0.1", at(v4), "/", ""),
        200,
        "{}",
        server.log_text()
    );
    let r = ask("127.0.0.2", at(v4), "GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert_eq!(
        (r.status, r.text().as_str()),
        (403, "<h1>not for you</h1>\n")
    );
    assert_eq!(status_from("127.0.0.3", at(v4), "/", ""), 200);
    assert_eq!(status_from("127.0.0.3", at(v4), "/admin/", ""), 403);
    assert_eq!(
        status_from("127.0.0.3", at(v4), "/%61dmin/", ""),
        403,
        "spelled another way"
    );
    assert_eq!(status_from("127.0.0.1", at(v4), "/admin/", ""), 200);
    // Lists apply to the path a rule rewrote the request to (the chain's order: rules, the
    // route, then access), so a rewrite is no way around /admin/'s list.
    assert_eq!(
        status_from("127.0.0.3", at(v4), "/door/", ""),
        403,
        "rewritten"
    );
    assert_eq!(status_from("127.0.0.1", at(v4), "/door/", ""), 200);
    // IPv6: ::1 is denied there.
    let v6_addr: SocketAddr = format!("[::1]:{v6}").parse().unwrap();
    assert_eq!(status_from("::1", v6_addr, "/", ""), 403);
    // The PROXY protocol's client is the one checked.
    for (client, status) in [("192.0.2.9", 403), ("198.51.100.4", 200)] {
        let r = ask(
            "127.0.0.1",
            at(proxied),
            &format!("PROXY TCP4 {client} 127.0.0.1 40001 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        )
        .unwrap();
        assert_eq!(r.status, status, "{client}");
    }
    // X-Forwarded-For from the trusted proxy (127.0.0.1) is believed; from another address
    // it is ignored; a client's forged entry before the proxy's is not believed either.
    let xff = |v: &str| format!("X-Forwarded-For: {v}\r\n");
    assert_eq!(
        status_from("127.0.0.1", at(behind), "/", &xff("192.0.2.5")),
        404
    );
    assert_eq!(
        status_from("127.0.0.1", at(behind), "/", &xff("198.51.100.7")),
        200
    );
    assert_eq!(
        status_from(
            "127.0.0.1",
            at(behind),
            "/",
            &xff("192.0.2.5, 198.51.100.7")
        ),
        200
    );
    assert_eq!(
        status_from("127.0.0.2", at(behind), "/", &xff("192.0.2.5")),
        200
    );
    // deny_action = "close": nothing answered, the connection closed.
    assert!(ask(
        "127.0.0.2",
        at(closing),
        "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
    )
    .is_none());
    assert_eq!(status_from("127.0.0.1", at(closing), "/", ""), 200);
    // Over HTTP/2 the same: the site's 403 page, and a refused stream for "close".
    let h2 = |from: &str, port: u16| {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--http2-prior-knowledge",
                "--interface",
                from,
            ])
            .args(["-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://127.0.0.1:{port}/"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(h2("127.0.0.2", v4), (true, "403".to_string()));
    assert_eq!(h2("127.0.0.1", v4), (true, "200".to_string()));
    assert!(!h2("127.0.0.2", closing).0, "a refused stream is no answer");
    assert_eq!(h2("127.0.0.1", closing), (true, "200".to_string()));
    drop(server);
}

/// Behind HAProxy with `option forwardfor`, which adds its own `X-Forwarded-For` line after
/// whatever the client sent: the client's forged first line must not pass the allow list
/// (nginx's `realip` reads the lines as one list too). Issue #39, item 4.
#[test]
fn a_forged_forwarded_for_line_before_haproxys_does_not_pass_the_allow_list() {
    need_tools("haproxy:haproxy", "HAProxy");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "<p>members\n").unwrap();
    let (front, back) = (free_port(), free_port());
    // Only 192.0.2.0/24 and 127.0.0.6 may come in; HAProxy (connecting from 127.0.0.1, not
    // itself allowed) is trusted to say who the client is.
    let config = format!(
        "[[pool]]\nname = \"files\"\n[[site]]\nname = \"members\"\nbindings = [\"http://127.0.0.1:{back}\"]\nroot = \"www\"\ntrusted_proxies = [\"127.0.0.1\"]\nallow = [\"192.0.2.0/24\", \"127.0.0.6\"]\n[[site.app]]\npool = \"files\"\n"
    );
    let server = Server::with_config(d, &config);
    let haproxy_cfg = format!(
        "global\n    maxconn 100\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\nfrontend web\n    bind 127.0.0.1:{front}\n    option forwardfor\n    default_backend members\nbackend members\n    server s 127.0.0.1:{back} source 127.0.0.1\n"
    );
    std::fs::write(d.join("haproxy.cfg"), haproxy_cfg).unwrap();
    let _haproxy = Stopped(
        std::process::Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(d.join("haproxy.cfg"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("haproxy"),
    );
    let lb = SocketAddr::from(([127, 0, 0, 1], front));
    wait_listening(lb, std::time::Duration::from_secs(10));
    // The client's own address is refused, with or without a forged line of its own.
    assert_eq!(
        status_from("127.0.0.5", lb, "/", ""),
        403,
        "{}",
        server.log_text()
    );
    assert_eq!(
        status_from("127.0.0.5", lb, "/", "X-Forwarded-For: 192.0.2.7\r\n"),
        403,
        "a forged first line was believed"
    );
    assert_eq!(
        status_from(
            "127.0.0.5",
            lb,
            "/",
            "X-Forwarded-For: 192.0.2.7, 127.0.0.1\r\n"
        ),
        403,
        "a forged trusted entry walked the list past HAProxy's own"
    );
    // A client in the list, as HAProxy names it, is let in whatever it forged before.
    assert_eq!(
        status_from("127.0.0.6", lb, "/", "X-Forwarded-For: 10.9.9.9\r\n"),
        200,
        "{}",
        server.log_text()
    );
    assert_eq!(
        status_from(
            "127.0.0.5",
            SocketAddr::from(([127, 0, 0, 1], back)),
            "/",
            "X-Forwarded-For: 192.0.2.7\r\n"
        ),
        403,
        "straight to espalier from an untrusted peer, the header is ignored"
    );
}
