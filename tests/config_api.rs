//! The configuration API (#57): a hosting panel's session through `/config` on the admin
//! endpoint and `espalier config` — sites and pools added, changed and removed one at a time,
//! each answered by the server as soon as the write returns; a bad write refused with
//! `check`'s message and nothing changed; two writers of one version, one refused; another
//! site's worker, app and open connection untouched throughout; the files rewritten one site
//! per file, and a restart serving the same sites. Every process a test starts, the test
//! stops.

use crate::common::*;
use espalier::server::admin::request_with_body;
use espalier::server::status::Role;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One configuration API request with the server's token: (status, version, JSON body).
fn call(
    admin: SocketAddr,
    (method, path): (&str, &str),
    fields: &[(&str, &str)],
    body: serde_json::Value,
) -> (u16, String, serde_json::Value) {
    let token = std::fs::read_to_string(espalier::server::admin::token_file(admin)).unwrap();
    let body = if body.is_null() {
        Vec::new()
    } else {
        body.to_string().into_bytes()
    };
    let (status, version, answer) = request_with_body(
        admin,
        (method, path),
        Some(token.trim()),
        None,
        fields,
        &body,
    )
    .unwrap();
    let answer = serde_json::from_slice(&answer).unwrap_or(serde_json::Value::Null);
    (status, version.unwrap_or_default(), answer)
}

/// An upstream server answering `upstream` to every request until dropped.
struct Upstream {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            // Blocking: the drop's own connection wakes the last accept.
            for s in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut s) = s else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nupstream\n",
                );
            }
        });
        Upstream { addr, stop }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

/// The pids of pool `name`'s processes.
fn pids_of(server: &Server, name: &str) -> Vec<(Role, u32)> {
    let status = server.status();
    let pool = status.pools.into_iter().find(|p| p.name == name).unwrap();
    pool.workers
        .iter()
        .map(|w| (w.role, w.pid.unwrap_or(0)))
        .collect()
}

#[test]
fn a_panel_drives_the_sites_through_the_configuration_api() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (www, text) in [("www1", "one\n"), ("www2", "two\n")] {
        std::fs::create_dir(d.join(www)).unwrap();
        std::fs::write(d.join(www).join("index.html"), text).unwrap();
    }
    std::fs::create_dir(d.join("sites.d")).unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "include = [\"sites.d/*.toml\"]\n[server]\nworker_header = true\n[[pool]]\nname = \"keep\"\ncommand = [\"python3\", \"{}\"]\n[[site]]\nname = \"keep\"\nbindings = [\"http://127.0.0.1:{port}:keep.example\"]\n[[site.app]]\npool = \"keep\"\n[[pool]]\nname = \"seed\"\n{}",
            test_app().display(),
            // A second site from the start: the address is shared (dispatched) already, as
            // a hoster's is; the first site added to an address alone changes its pool.
            dynamic_site(port, "seed", "seed"),
        ),
    );
    let admin: SocketAddr = server.admin.as_deref().unwrap().parse().unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // Another site's connection, open through everything below.
    let mut kept = Conn::open(addr);
    let ask_kept = |c: &mut Conn| {
        c.send(b"GET /kept HTTP/1.1\r\nHost: keep.example\r\n\r\n");
        c.read_response(false).expect("the kept connection answers")
    };
    assert_eq!(ask_kept(&mut kept).status, 200);
    let keep_before = pids_of(&server, "keep");
    assert!(
        keep_before.iter().any(|(r, _)| *r == Role::App),
        "{keep_before:?}"
    );

    // 50 sites, each on a pool of its own, answered as each write returns; the dispatcher
    // is told each one's host, not replaced.
    let dispatcher = server.dispatcher_workers();
    assert_eq!(dispatcher.len(), 1, "{dispatcher:?}");
    let site = |n: usize, root: &str| {
        serde_json::json!({
            "bindings": [format!("http://127.0.0.1:{port}:s{n}.example")],
            "root": root,
            "app": [{"pool": format!("p{n}")}],
        })
    };
    for n in 0..50 {
        let pool = serde_json::json!({"start": "on-demand"});
        let (status, _, answer) = call(admin, ("PUT", &format!("/config/pools/p{n}")), &[], pool);
        assert_eq!(status, 201, "{answer}");
        let (status, _, answer) = call(
            admin,
            ("PUT", &format!("/config/sites/s{n}")),
            &[],
            site(n, "www1"),
        );
        assert_eq!(
            (status, answer["message"].as_str()),
            (201, Some(&*format!("site s{n} created"))),
            "{answer}"
        );
        // Each from an address of its own: one client wakes at most 8 sleeping pools a
        // minute (see docs/reference.md, `on_demand_running`).
        let from = format!("127.0.0.{}", n + 10);
        let r = get_host_from(&from, addr, &format!("s{n}.example"), "/");
        let r = r.unwrap_or_else(|| panic!("s{n}: no answer; log:\n{}", server.log_text()));
        assert_eq!((r.status, r.text()), (200, "one\n".to_string()), "s{n}");
    }
    assert_eq!(
        server.dispatcher_workers(),
        dispatcher,
        "the dispatcher was replaced; log:\n{}",
        server.log_text()
    );
    // One site per file, as a hoster keeps them.
    let s7 = std::fs::read_to_string(d.join("sites.d/s7.toml")).unwrap();
    assert!(s7.starts_with("[[site]]\nname = \"s7\"\n"), "{s7}");
    assert!(d.join("sites.d/p7.pool.toml").exists());
    server.wait_for_log(
        "config: PUT /config/sites/s7 by the admin token's holder at 127.0.0.1: site s7 created",
        Duration::from_secs(5),
    );

    // A root changed by a merge patch.
    let patch = serde_json::json!({"root": "www2"});
    let (status, _, answer) = call(admin, ("PATCH", "/config/sites/s0"), &[], patch);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(get_host(addr, "s0.example", "/").text(), "two\n");

    // A path to an upstream group, added in two writes.
    let upstream = Upstream::start();
    // (An upstream group no path names is refused, as check refuses it; a path naming a
    // group not there too: the two go in one batch.)
    let group = serde_json::json!({"servers": [upstream.addr.to_string()]});
    let (status, _, answer) = call(admin, ("PUT", "/config/upstreams/api"), &[], group.clone());
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("named by no site's path"),
        "{answer}"
    );
    let apps = serde_json::json!({"app": [{"pool": "p1"}, {"path": "/api/", "pool": "p1", "upstream": "api"}]});
    let batch = serde_json::json!([
        {"method": "PUT", "path": "/upstreams/api", "value": group},
        {"method": "PATCH", "path": "/sites/s1", "value": apps},
    ]);
    let (status, _, answer) = call(admin, ("POST", "/config/batch"), &[], batch);
    assert_eq!(
        (status, answer["message"].as_str()),
        (201, Some("upstream api created, site s1 changed")),
        "{answer}"
    );
    assert_eq!(get_host(addr, "s1.example", "/api/x").text(), "upstream\n");
    assert_eq!(get_host(addr, "s1.example", "/").text(), "one\n");

    // One removed: its file goes, its host no longer answers.
    let (status, _, answer) = call(
        admin,
        ("DELETE", "/config/sites/s49"),
        &[],
        serde_json::Value::Null,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(!d.join("sites.d/s49.toml").exists());
    assert_ne!(get_host(addr, "s49.example", "/").status, 200);

    // A bad key: check's message, nothing changed.
    let files_before = std::fs::read_to_string(d.join("sites.d/s2.toml")).unwrap();
    let bad = serde_json::json!({"roots": "www2", "bindings": [format!("http://127.0.0.1:{port}:s2.example")]});
    let (status, version, answer) = call(admin, ("PUT", "/config/sites/s2"), &[], bad);
    let message = answer["message"].as_str().unwrap_or_default();
    assert_eq!(status, 400, "{answer}");
    assert!(
        message.contains("s2.toml") && message.contains("roots"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("sites.d/s2.toml")).unwrap(),
        files_before
    );
    assert_eq!(get_host(addr, "s2.example", "/").text(), "one\n");

    // Two writers of the one version they read: the second is refused.
    let (status, read, _) = call(
        admin,
        ("GET", "/config/sites/s3"),
        &[],
        serde_json::Value::Null,
    );
    assert_eq!((status, &read), (200, &version));
    let if_match = format!("\"{read}\"");
    let first = serde_json::json!({"root": "www2"});
    let (status, _, answer) = call(
        admin,
        ("PATCH", "/config/sites/s3"),
        &[("If-Match", &if_match)],
        first,
    );
    assert_eq!(status, 200, "{answer}");
    let second = serde_json::json!({"root": "www1"});
    let (status, _, answer) = call(
        admin,
        ("PATCH", "/config/sites/s3"),
        &[("If-Match", &if_match)],
        second,
    );
    assert_eq!(status, 412, "{answer}");
    assert_eq!(get_host(addr, "s3.example", "/").text(), "two\n");

    // Without the token, or from another web page: refused.
    let (status, _) = espalier::server::admin::request(admin, "GET", "/config").unwrap();
    assert_eq!(status, 401);
    let (status, _, answer) = call(
        admin,
        ("PUT", "/config/sites/s4"),
        &[("Origin", "http://shop.example")],
        site(4, "www2"),
    );
    assert_eq!(status, 403, "{answer}");

    // The command line, with a TOML file.
    let toml = d.join("cli.toml");
    std::fs::write(&toml, format!("bindings = [\"http://127.0.0.1:{port}:cli.example\"]\nroot = \"www2\"\n[[app]]\npool = \"p5\"\n")).unwrap();
    let config = d.join("espalier.toml");
    let c = config.to_str().unwrap();
    let said = espalier_ok(&[
        "config",
        "add",
        "sites/cli",
        toml.to_str().unwrap(),
        "-c",
        c,
    ]);
    assert!(said.starts_with("site cli created (version "), "{said}");
    assert_eq!(get_host(addr, "cli.example", "/").text(), "two\n");
    let again = espalier(&[
        "config",
        "add",
        "sites/cli",
        toml.to_str().unwrap(),
        "-c",
        c,
    ]);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is there already"),
        "{again:?}"
    );
    let got: serde_json::Value =
        serde_json::from_str(&espalier_ok(&["config", "get", "sites/cli", "-c", c])).unwrap();
    assert_eq!(got["root"], "www2");
    espalier_ok(&["config", "rm", "sites/cli", "-c", c]);

    // The other site: the same worker and app, its connection still open and answered.
    assert_eq!(pids_of(&server, "keep"), keep_before);
    assert_eq!(ask_kept(&mut kept).status, 200);
    let status = server.status();
    let state = status.config.expect("the config's version in /status");
    let (_, now, _) = call(
        admin,
        ("GET", "/config/server"),
        &[],
        serde_json::Value::Null,
    );
    assert_eq!(state.version, now, "/status and the ETag name one version");
    assert!(state.changed_by.unwrap().contains("127.0.0.1"));
    drop(kept);
    drop(server);

    // A restart serves what the API wrote.
    let mut again = Server::start(&["-c", c], d);
    again.admin = Some(admin.to_string());
    for (host, text) in [
        ("s0.example", "two\n"),
        ("s48.example", "one\n"),
        ("s3.example", "two\n"),
    ] {
        assert_eq!(get_host(addr, host, "/").text(), text, "{host}");
    }
    assert_ne!(get_host(addr, "s49.example", "/").status, 200);
    let (_, _, whole) = call(admin, ("GET", "/config"), &[], serde_json::Value::Null);
    assert_eq!(
        whole["site"].as_array().unwrap().len(),
        51,
        "keep, seed and s0–s48"
    );
}

/// What a client controls in a write is bounded: a body past 32 MiB is 413 before it is read,
/// a chunked one 411, JSON nested past serde_json's depth 400, and a batch of more than 1,000
/// changes 413 — nothing changed by any.
#[test]
fn hostile_writes_are_refused_with_their_status() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &format!("[[pool]]\nname = \"p\"\n{}", dynamic_site(port, "s", "p")),
    );
    let admin: SocketAddr = server.admin.as_deref().unwrap().parse().unwrap();
    let token = std::fs::read_to_string(espalier::server::admin::token_file(admin)).unwrap();
    let config_before = std::fs::read_to_string(dir.path().join("espalier.toml")).unwrap();
    let head = |extra: &str| {
        format!("PUT /config/sites/s HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {}\r\n{extra}\r\n", token.trim())
    };
    for (extra, status) in [
        ("Content-Length: 33554433\r\n", 413),
        ("Transfer-Encoding: chunked\r\n", 411),
    ] {
        let mut c = Conn::open(admin);
        c.send(head(extra).as_bytes());
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, status, "{extra}");
        assert!(c.closed(), "{extra}: the connection is closed");
    }
    let deep = "[".repeat(100_000).into_bytes();
    let (status, _, answer) = request_with_body(
        admin,
        ("PUT", "/config/sites/s"),
        Some(token.trim()),
        None,
        &[],
        &deep,
    )
    .unwrap();
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&answer));
    assert!(String::from_utf8_lossy(&answer).contains("not JSON"));
    let change = serde_json::json!({"method": "DELETE", "path": "/sites/s"});
    let batch = serde_json::Value::Array(vec![change; 1001]);
    let (status, _, answer) = call(admin, ("POST", "/config/batch"), &[], batch);
    assert_eq!(status, 413, "{answer}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("espalier.toml")).unwrap(),
        config_before
    );
    assert_eq!(
        get_host(SocketAddr::from(([127, 0, 0, 1], port)), "s.example", "/").status,
        200
    );
}
