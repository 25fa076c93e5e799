//! Upstream groups: servers espalier did not start, real Python (and Node) servers on
//! 127.0.0.2–.4, reached through `[[upstream]]` — the split by weight, a killed server's GETs
//! retried, a POST never repeated once sent, a stopped server taken out and back, every
//! server down, a hash key across a reload, a reload under load, a WebSocket, and `check`'s
//! refusals.

use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A backend server (tests/apps/upstream_backend.py), stopped when dropped.
struct Backend {
    child: Child,
    addr: SocketAddr,
    record: PathBuf,
}

impl Backend {
    fn start(dir: &Path, ip: &str, name: &str) -> Backend {
        Backend::start_with(dir, ip, name, &[])
    }

    /// As [`Backend::start`], with the script's further arguments (TLS files).
    fn start_with(dir: &Path, ip: &str, name: &str, extra: &[&Path]) -> Backend {
        let addr: SocketAddr = format!("{ip}:{}", free_port()).parse().unwrap();
        Backend::start_at(dir, addr, name, extra)
    }

    fn start_at(dir: &Path, addr: SocketAddr, name: &str, extra: &[&Path]) -> Backend {
        let ip = addr.ip().to_string();
        let ip = ip.as_str();
        let record = dir.join(format!("{name}.record"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/upstream_backend.py");
        let child = Command::new("python3")
            .arg(script)
            .args([ip, &addr.port().to_string(), name, record.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3");
        wait_listening(addr, Duration::from_secs(10));
        Backend {
            child,
            addr,
            record,
        }
    }

    /// The requests it received, `METHOD PATH` each.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    fn kill(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A folder, and backends `a` on 127.0.0.2 and `b` on 127.0.0.3 recording there.
fn two_backends() -> (tempfile::TempDir, Backend, Backend) {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start(dir.path(), "127.0.0.2", "a");
    let b = Backend::start(dir.path(), "127.0.0.3", "b");
    (dir, a, b)
}

/// The server that answered (its `X-Server`), or the status when none did.
fn served_by(addr: SocketAddr, path: &str, headers: &str) -> String {
    let r = get(addr, path, headers);
    match r.header("x-server") {
        Some(name) if r.status == 200 => name.to_string(),
        _ => format!("status {}", r.status),
    }
}

/// A site on a free port forwarding `/` to upstream `api` (defined by `upstream`).
fn front(upstream: &str) -> (String, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    (front_at(upstream, addr), addr)
}

fn front_at(upstream: &str, addr: SocketAddr) -> String {
    format!(
        "{upstream}\n[[site]]\nname = \"front\"\nbindings = [\"http://{addr}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"api\"\n"
    )
}

/// Writes `config` as the running `server`'s file (its admin address kept) and reloads it.
fn reload(server: &Server, dir: &Path, config: &str) {
    let admin = server.admin.clone().unwrap();
    let text = format!("[server]\nadmin = \"{admin}\"\n{config}");
    std::fs::write(dir.join("espalier.toml"), text).unwrap();
    espalier_ok(&["reload", "--admin", &admin]);
}

/// An upstream group `api` of `servers`, balanced by `balance`.
fn group(servers: &[&Backend], balance: &str) -> String {
    let list: Vec<String> = servers.iter().map(|b| format!("\"{}\"", b.addr)).collect();
    format!(
        "[[upstream]]\nname = \"api\"\nservers = [{}]\nbalance = \"{balance}\"\n",
        list.join(", ")
    )
}

fn count(names: &[String], name: &str) -> usize {
    names.iter().filter(|n| *n == name).count()
}

#[test]
fn round_robin_follows_the_weights_and_a_killed_servers_gets_are_sent_elsewhere() {
    let (dir, a, mut b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{} weight=1\", \"{} weight=2\"]\nbalance = \"round_robin\"\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    // Each server runs here: its node is found from its process's CPUs, as the status says.
    let topology =
        espalier::topology::sysfs::read(&espalier::topology::sysfs::SysfsPaths::live()).unwrap();
    let cpus = espalier::os::numa::thread_affinity(a.child.id() as i32).unwrap();
    let node = espalier::server::upstream_nodes::node_of(&cpus, &topology);
    assert!(node.is_some() || topology.nodes.len() > 1);
    let status = server.status();
    assert_eq!(status.upstreams[0].servers[0].node, node, "{status:?}");
    let names: Vec<String> = (0..300).map(|_| served_by(addr, "/x", "")).collect();
    // Each thread keeps the weights exactly over every three of its picks.
    let (na, nb) = (count(&names, "a"), count(&names, "b"));
    assert_eq!(na + nb, 300, "{names:?}");
    assert!((96..=104).contains(&na), "a {na}, b {nb}");

    // b dies: no GET fails — a refused connection is tried on a.
    b.kill();
    let after: Vec<String> = (0..60).map(|_| served_by(addr, "/y", "")).collect();
    assert_eq!(count(&after, "a"), 60, "{after:?}");
    server.wait_for_log(
        "ejected for 10s after 5 failures in a row",
        Duration::from_secs(10),
    );
    let log = server.log_text();
    assert!(
        log.contains(&format!("upstream `api`: server {}", b.addr)),
        "{log}"
    );
    // The worker tells the master at its next ping: /status shows it.
    server.wait_until("b shown ejected", Duration::from_secs(10), |s| {
        s.status().upstreams[0].servers[1].ejected_by == 1
    });
    assert_eq!(server.status().upstreams[0].servers[0].ejected_by, 0);
}

#[test]
fn a_post_is_never_repeated_once_sent_and_an_idempotent_get_is_sent_once_more() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    // /drop reads the request and closes without a byte of answer.
    let mut post = Conn::open(addr);
    post.send(b"POST /drop HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    let r = post.read_response(false).expect("an answer");
    assert_eq!(r.status, 502);
    let posts = |b: &Backend| b.requests().iter().filter(|l| *l == "POST /drop").count();
    assert_eq!(posts(&a) + posts(&b), 1, "the POST reached one server once");

    let r = get(addr, "/drop", "");
    assert_eq!(r.status, 502);
    let gets = |b: &Backend| b.requests().iter().filter(|l| *l == "GET /drop").count();
    assert_eq!(
        (gets(&a), gets(&b)),
        (1, 1),
        "the GET was sent once more, elsewhere"
    );
    let log = server.log_text();
    assert!(
        log.contains("answered 502: server")
            && log.contains("of upstream `api` closed the connection without answering"),
        "{log}"
    );
}

#[test]
fn a_stopped_server_is_taken_out_and_comes_back_after_its_checks_pass() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\nbalance = \"round_robin\"\nresponse_timeout = \"1s\"\n[upstream.passive]\nfailures = 2\n[upstream.health]\npath = \"/health\"\ninterval = \"300ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    let state = |s: &Server, k: usize| s.status().upstreams[0].servers[k].state.clone();
    server.wait_until("both servers checked up", Duration::from_secs(10), |s| {
        state(s, 0) == "up" && state(s, 1) == "up"
    });

    // b stops answering (SIGSTOP: its socket still completes handshakes).
    b.signal(libc::SIGSTOP);
    server.wait_until("b checked down", Duration::from_secs(20), |s| {
        state(s, 1) == "down"
    });
    let names: Vec<String> = (0..40).map(|_| served_by(addr, "/z", "")).collect();
    assert_eq!(count(&names, "a"), 40, "{names:?}");
    server.wait_for_log(
        "is down: the health check of /health failed (no answer within",
        Duration::from_secs(5),
    );

    b.signal(libc::SIGCONT);
    server.wait_until("b checked up again", Duration::from_secs(20), |s| {
        state(s, 1) == "up"
    });
    server.wait_for_log("is up: 2 checks passed in a row", Duration::from_secs(5));
    // Back in the rotation (once an ejection by this thread's timeouts, if any, ran out).
    let mut back = false;
    wait_for("b to serve again", Duration::from_secs(30), || {
        back |= served_by(addr, "/w", "") == "b";
        back
    });
}

#[test]
fn every_server_down_is_a_503_and_every_server_failing_a_502_both_naming_the_group() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start(dir.path(), "127.0.0.2", "a");
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\"]\n[upstream.health]\npath = \"/health\"\ninterval = \"300ms\"\n",
        a.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(served_by(addr, "/", ""), "a");
    std::fs::write(dir.path().join("a.record.sick"), "").unwrap();
    server.wait_until("a checked down", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers[0].state == "down"
    });
    let r = get(addr, "/", "");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    server.wait_for_log(
        "answered 503: upstream `api` has no server up (1 servers: 1 down by the health check, 0 ejected after failures)",
        Duration::from_secs(5),
    );
    assert_eq!(
        server.status().upstreams[0].servers[0]
            .last_failure
            .as_deref(),
        Some("answered 503")
    );
    // The same in /metrics and `espalier status`.
    let admin = server.admin.clone().unwrap();
    let (_, metrics) =
        espalier::server::admin::request(admin.parse().unwrap(), "GET", "/metrics").unwrap();
    let metrics = String::from_utf8_lossy(&metrics).to_string();
    let series = format!(
        "espalier_upstream_server_up{{upstream=\"api\",server=\"{}\"}} 0",
        a.addr
    );
    assert!(metrics.contains(&series), "{metrics}");
    let table = espalier_ok(&["status", "--admin", &admin]);
    assert!(
        table.contains("UPSTREAMS")
            && table.contains(&a.addr.to_string())
            && table.contains("down")
            && table.contains("last failure: answered 503"),
        "{table}"
    );
    drop(a);
    drop(server);

    // Without checks, servers that refuse: 502, with each server's cause.
    let (config, addr) =
        front("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.2:1\", \"127.0.0.3:1\"]\n");
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(get(addr, "/", "").status, 502);
    let log = server.wait_for_log(
        "answered 502: upstream `api` could not be reached",
        Duration::from_secs(5),
    );
    assert!(
        log.contains("127.0.0.2:1: connect failed") && log.contains("127.0.0.3:1: connect failed"),
        "{log}"
    );
}

#[test]
fn http2_clients_reach_an_upstream_as_http_1_1_ones_do() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&group(&[&a, &b], "round_robin"));
    let _server = Server::with_config(dir.path(), &config);
    let names = block_on(async move {
        let mut h2 = h2c(addr.port()).await;
        let mut names = Vec::new();
        for k in 0..10 {
            let url = format!("http://{addr}/h2/{k}");
            let response = h2_get(&mut h2, &url).await.await.unwrap();
            assert_eq!(response.status(), 200);
            let name = response.headers()["x-server"].to_str().unwrap().to_string();
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
fn a_hash_key_keeps_its_server_when_a_reload_removes_another() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(k, name)| Backend::start(dir.path(), &format!("127.0.0.{}", k + 2), name))
        .collect();
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    let hashed = "hash header:X-User";
    let (config, addr) = front(&group(&[a, b, c], hashed));
    let server = Server::with_config(dir.path(), &config);
    let user = |k: usize| format!("X-User: user-{k}\r\n");
    let before: Vec<String> = (0..60).map(|k| served_by(addr, "/", &user(k))).collect();
    for (k, name) in before.iter().enumerate() {
        assert_eq!(&served_by(addr, "/again", &user(k)), name, "user-{k}");
    }
    assert!(
        ["a", "b", "c"].iter().all(|n| count(&before, n) > 5),
        "{before:?}"
    );

    // c leaves the group.
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[a, b], hashed), addr),
    );
    server.wait_until("the reload done", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 2
    });
    server.wait_for_log("1 changed or new", Duration::from_secs(20));
    // The old worker drains: wait until the new one answers every request.
    wait_for("c out of every answer", Duration::from_secs(20), || {
        (0..10).all(|_| served_by(addr, "/", &user(0)) != "c")
            && before
                .iter()
                .enumerate()
                .filter(|(_, n)| *n == "c")
                .all(|(k, _)| served_by(addr, "/", &user(k)) != "c")
    });
    for (k, name) in before.iter().enumerate() {
        let now = served_by(addr, "/", &user(k));
        if name == "c" {
            assert!(now == "a" || now == "b", "user-{k}: {now}");
        } else {
            assert_eq!(&now, name, "user-{k} moved though its server stayed");
        }
    }
}

#[test]
fn a_reload_adding_and_removing_servers_under_load_fails_no_request() {
    let (dir, a, b) = two_backends();
    let c = Backend::start(dir.path(), "127.0.0.4", "c");
    let (config, addr) = front(&group(&[&a, &b], "round_robin"));
    let server = Server::with_config(dir.path(), &config);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Counter::default();
    let load = {
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let (mut failures, mut names) = (Vec::new(), Vec::new());
            let mut conn = Conn::open(addr);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let request = b"GET /load HTTP/1.1\r\nHost: x\r\n\r\n";
                conn.send(request);
                let mut answer = conn.read_response(false);
                if answer.is_none() {
                    // A kept-alive connection closed as the request went out (a draining
                    // worker's): a GET is sent again on a new one, as every client does.
                    conn = Conn::open(addr);
                    conn.send(request);
                    answer = conn.read_response(false);
                }
                match answer {
                    Some(r) if r.status == 200 => {
                        names.push(r.header("x-server").unwrap_or_default().to_string());
                        answered.bump();
                        if r.header("connection") == Some("close") {
                            conn = Conn::open(addr);
                        }
                    }
                    Some(r) => failures.push(format!("status {}", r.status)),
                    None => failures.push("no answer".into()),
                }
            }
            (failures, names)
        })
    };
    answered.wait_more(50, "the load to run");
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[&a, &b, &c], "round_robin"), addr),
    );
    server.wait_until("c in the group", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 3
    });
    answered.wait_more(100, "the load to go on after the first reload");
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[&b, &c], "round_robin"), addr),
    );
    server.wait_until("a out of the group", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 2
    });
    answered.wait_more(100, "the load to go on after the second reload");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (failures, names) = load.join().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(count(&names, "c") > 0, "c never served");
    // Once the old workers are gone, a gets nothing.
    server.wait_for_log("0 removed", Duration::from_secs(5));
    wait_for("a out of every answer", Duration::from_secs(20), || {
        (0..6).all(|_| served_by(addr, "/after", "") != "a")
    });
}

#[test]
fn a_websocket_is_tunnelled_to_an_upstream_server() {
    need_tools("node:nodejs", "node");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps/node/server.js");
    let node = Command::new("node")
        .arg(app)
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start node");
    let _node = Stopped(node);
    wait_listening(
        SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(10),
    );
    let target = format!("127.0.0.1:{port}");
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
    let check = |config: &str| {
        let path = dir.path().join("espalier.toml");
        std::fs::write(&path, config).unwrap();
        let out = espalier(&["check", "-c", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{config}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
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
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9 weight=0\"]\nbalance = \"fastest\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\nhandler = \"static\"\n");
    assert!(
        err.contains("a weight is a whole number from 1 to 100"),
        "{err}"
    );
    assert!(err.contains("`fastest` is not a way to balance"), "{err}");
    assert!(err.contains("remove `handler`"), "{err}");
}
