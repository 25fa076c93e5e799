//! Application pools with real applications: gunicorn and uvicorn by socket activation, Node
//! behind espalier's proxy, all from Debian's packages (installed by the test setup, as the
//! QEMU test installs QEMU). Every server and app a test starts, the test stops.

mod common;

use common::*;
use espalier::server::status::{Role, Status, WorkerState};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Installs gunicorn, uvicorn and node from Debian's packages when missing.
fn need_runtimes() {
    let out = Command::new("bash")
        .args([
            "-c",
            ". bench/common.sh; need_tools gunicorn:gunicorn node:nodejs -:python3-uvicorn",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "these tests need gunicorn, uvicorn and node: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
}

/// A temporary folder holding the example apps, and a server started there from `config`
/// (where `{listen}` is the site's address; `{port}` is left for espalier, which puts each
/// proxied app process's own port there).
struct AppServer {
    server: Server,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

fn serve(config: &str) -> AppServer {
    need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        dir.path(),
    );
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &config.replace("{listen}", &format!("127.0.0.1:{port}")),
    );
    AppServer {
        server,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    }
}

/// (pid, node, cpus) of the running processes of `role`.
fn procs(status: &Status, role: Role) -> Vec<(u32, u32, u32, String)> {
    status
        .pools
        .iter()
        .flat_map(|p| &p.workers)
        .filter(|w| w.role == role && w.state == WorkerState::Running)
        .map(|w| {
            let cpus = espalier::cpuset::CpuSet::from_ids(w.cpus.iter().copied());
            (
                w.index,
                w.pid.unwrap_or(0),
                w.node.unwrap_or(u32::MAX),
                cpus.to_string(),
            )
        })
        .collect()
}

fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    after
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

#[test]
fn gunicorn_by_activation_answers_placed_per_process() {
    let app = serve(
        r#"
[[pool]]
name = "wsgi"
processes = 2
command = ["gunicorn", "--workers", "1", "app:app"]
directory = "wsgi"
transport = "activation"
health = "/healthz"

[[site]]
name = "shop"
bindings = ["http://{listen}"]
[[site.app]]
pool = "wsgi"
"#,
    );
    let status = app.server.status();
    let apps = procs(&status, Role::App);
    assert_eq!(apps.len(), 2, "{status:?}");
    for (_, pid, node, cpus) in &apps {
        // Placement read back from the kernel, as the plan says.
        let p = Path::new("/proc").join(pid.to_string());
        assert_eq!(&status_field(&p, "Cpus_allowed_list"), cpus);
        assert_eq!(status_field(&p, "Mems_allowed_list"), node.to_string());
        // Socket activation exactly as systemd does it: LISTEN_PID is the app's own pid.
        let env = environ(*pid);
        assert!(env.contains(&format!("LISTEN_PID={pid}")), "{env:?}");
        assert!(env.contains(&"LISTEN_FDS=1".to_string()), "{env:?}");
        assert!(env.contains(&"LISTEN_FDNAMES=shop".to_string()), "{env:?}");
    }
    for _ in 0..20 {
        let r = get(app.addr, "/", "");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().starts_with("hello from gunicorn"), "{}", r.text());
        // The answer came from a gunicorn worker whose arbiter is one of the pool's processes,
        // and it runs where its arbiter was placed.
        let worker: u32 = r.header("x-app-pid").unwrap().parse().unwrap();
        let arbiter = parent_of(worker);
        let (_, _, _, cpus) = apps
            .iter()
            .find(|(_, pid, _, _)| *pid == arbiter)
            .unwrap_or_else(|| panic!("worker {worker}'s parent {arbiter} is no app of {apps:?}"));
        let w = Path::new("/proc").join(worker.to_string());
        assert_eq!(&status_field(&w, "Cpus_allowed_list"), cpus);
    }
}

#[test]
fn uvicorn_by_activation_answers() {
    let app = serve(
        r#"
[[pool]]
name = "asgi"
command = ["/usr/bin/python3", "-m", "uvicorn", "--fd", "3", "--no-access-log", "app:app"]
directory = "asgi"
transport = "activation"

[[site]]
name = "asgi"
bindings = ["http://{listen}"]
[[site.app]]
pool = "asgi"
"#,
    );
    let mut c = Conn::open(app.addr);
    for _ in 0..10 {
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = c.read_response(false).expect("answer");
        assert_eq!(r.status, 200);
        assert!(r.text().starts_with("hello from uvicorn"), "{}", r.text());
    }
    let apps = procs(&app.server.status(), Role::App);
    assert_eq!(apps.len(), 1);
    let answered: u32 = get(app.addr, "/", "")
        .header("x-app-pid")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        answered, apps[0].1,
        "uvicorn answers in the process espalier started"
    );
}

const NODE_POOL: &str = r#"
[server]
worker_header = true
[server.limits]
max_body_size = "100MiB"

[[pool]]
name = "node"
processes = 2
command = ["node", "server.js"]
directory = "node"
health = "/healthz"
response_timeout = "1s"

[[site]]
name = "node"
bindings = ["http://{listen}"]
[[site.app]]
pool = "node"
"#;

#[test]
fn node_behind_the_proxy_is_reached_on_the_threads_node() {
    let app = serve(NODE_POOL);
    let status = app.server.status();
    let apps = procs(&status, Role::App);
    let fronts = procs(&status, Role::Front);
    assert_eq!((apps.len(), fronts.len()), (2, 2), "{status:?}");
    for (_, pid, _, _) in &apps {
        let env = environ(*pid);
        assert!(env.iter().any(|v| v.starts_with("PORT=")), "{env:?}");
    }
    let mut c = Conn::open(app.addr);
    for _ in 0..40 {
        c.send(b"GET /who HTTP/1.1\r\nHost: shop.example\r\n\r\n");
        let r = c.read_response(false).expect("answer");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains("forwarded for 127.0.0.1"), "{}", r.text());
        // `node/<index>/cpu<N>`: the front thread that forwarded it …
        let worker = r.header("x-espalier-worker").expect("worker header");
        let index: u32 = worker.split('/').nth(1).unwrap().parse().unwrap();
        let front_node = fronts.iter().find(|f| f.0 == index).unwrap().2;
        // … and the app process that answered: on the same node.
        let pid: u32 = r.header("x-app-pid").unwrap().parse().unwrap();
        let app_node = apps
            .iter()
            .find(|a| a.1 == pid)
            .unwrap_or_else(|| panic!("pid {pid} is no app of {apps:?}"))
            .2;
        assert_eq!(front_node, app_node, "{worker} forwarded to pid {pid}");
    }
}

fn rss_kib(pid: u32) -> u64 {
    status_field(&Path::new("/proc").join(pid.to_string()), "VmRSS")
        .trim_end_matches(" kB")
        .parse()
        .unwrap()
}

#[test]
fn fifty_megabytes_stream_both_ways_without_the_worker_growing() {
    let app = serve(NODE_POOL);
    let fronts = procs(&app.server.status(), Role::Front);
    let before: Vec<u64> = fronts.iter().map(|f| rss_kib(f.1)).collect();
    const SIZE: usize = 50 << 20;
    // Upload, sized.
    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(
        format!("POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {SIZE}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let block = vec![b'u'; 1 << 16];
    for _ in 0..SIZE / block.len() {
        s.write_all(&block).unwrap();
    }
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.contains(&format!("received {SIZE} bytes")),
        "{answer}"
    );
    // Upload, chunked (10 MiB in 64 KiB chunks).
    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .unwrap();
    for _ in 0..160 {
        s.write_all(format!("{:x}\r\n", block.len()).as_bytes())
            .unwrap();
        s.write_all(&block).unwrap();
        s.write_all(b"\r\n").unwrap();
    }
    s.write_all(b"0\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.contains(&format!("received {} bytes", 160 << 16)),
        "{answer}"
    );
    // Download: the app sends chunked; an HTTP/1.0 client gets it plain, to the close.
    let mut s = TcpStream::connect(app.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /download?mb=50 HTTP/1.0\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut got = 0usize;
    let mut head = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if head.len() < 4 || !head.windows(4).any(|w| w == b"\r\n\r\n") {
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                got += head.len() - (i + 4);
                head.truncate(i + 4);
            }
        } else {
            got += n;
        }
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    assert_eq!(got, SIZE);
    // And with curl over HTTP/1.1, chunked as the app sent it.
    let curl = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{size_download}"])
        .arg(format!("http://{}/download?mb=50", app.addr))
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&curl.stdout), SIZE.to_string());
    for (f, b) in fronts.iter().zip(before) {
        let grown = rss_kib(f.1).saturating_sub(b);
        assert!(grown < 8 << 10, "front {} grew by {grown} KiB", f.0);
    }
}

#[test]
fn websocket_echo_through_the_proxy() {
    let app = serve(NODE_POOL);
    let mut c = Conn::open(app.addr);
    c.send(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    let r = c.read_response(true).expect("101");
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    // The RFC 6455 example key's accept value.
    assert_eq!(
        r.header("sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    );
    for text in ["hello espalier", "second frame"] {
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | text.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        c.stream.write_all(&frame).unwrap();
        let mut echo = vec![0u8; 2 + text.len()];
        c.stream.read_exact(&mut echo).unwrap();
        assert_eq!(&echo[..2], &[0x81, text.len() as u8]);
        assert_eq!(&echo[2..], text.as_bytes());
    }
}

#[test]
fn a_hanging_app_gets_504_and_others_are_served_meanwhile() {
    let app = serve(NODE_POOL);
    let addr = app.addr;
    let slow = std::thread::spawn(move || get(addr, "/slow?ms=3000", ""));
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let r = get(app.addr, "/who", "");
    assert_eq!(r.status, 200);
    assert!(started.elapsed() < Duration::from_millis(900));
    let r = slow.join().unwrap();
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(get(app.addr, "/who", "").status, 200);
}

/// A client that sends GETs on keep-alive connections until told to stop, as a browser does:
/// a request whose reused connection was closed before any answer byte is sent again on a new
/// connection. Returns (answered, failed).
fn keep_alive_load(addr: SocketAddr, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let mut answered = 0;
    let mut failed = Vec::new();
    let mut conn: Option<Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let reused = conn.is_some();
        let c = conn.get_or_insert_with(|| Conn::open(addr));
        let sent = c
            .stream
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .is_ok();
        match sent.then(|| c.read_response(false)).flatten() {
            Some(r) if r.status == 200 => {
                answered += 1;
                if r.header("connection") == Some("close") {
                    conn = None;
                }
            }
            Some(r) => {
                failed.push(format!("{} {}", r.status, r.text()));
                conn = None;
            }
            None if reused => conn = None,
            None => {
                failed.push("connection closed without an answer".into());
                conn = None;
            }
        }
    }
    (answered, failed)
}

fn recycles_under_load(config: &str, pool: &str) {
    let app = serve(config);
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (addr, stop) = (app.addr, Arc::clone(&stop));
            std::thread::spawn(move || keep_alive_load(addr, stop))
        })
        .collect();
    let admin: SocketAddr = app.server.admin.as_ref().unwrap().parse().unwrap();
    for round in 0..10 {
        let before = procs(&app.server.status(), Role::App);
        let (code, body) =
            espalier::server::admin::request(admin, "POST", &format!("/pools/{pool}/recycle"))
                .unwrap();
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        app.server
            .wait_until(&format!("recycle {round}"), Duration::from_secs(20), |s| {
                let now = procs(&s.status(), Role::App);
                now.len() == before.len() && now.iter().all(|n| before.iter().all(|b| b.1 != n.1))
            });
    }
    stop.store(true, Ordering::Relaxed);
    let mut answered = 0;
    for c in clients {
        let (n, failed) = c.join().unwrap();
        assert!(
            failed.is_empty(),
            "failed requests: {failed:?}\n{}",
            app.server.log_text()
        );
        answered += n;
    }
    assert!(answered > 20, "only {answered} answered");
    let recycled = app.server.log_text().matches("(recycled)").count();
    assert!(recycled >= 10, "{}", app.server.log_text());
}

#[test]
fn ten_overlapped_recycles_under_load_fail_no_request_with_activation() {
    recycles_under_load(
        r#"
[[pool]]
name = "wsgi"
command = ["gunicorn", "--workers", "1", "--threads", "4", "--keep-alive", "5", "app:app"]
directory = "wsgi"
transport = "activation"
health = "/healthz"

[[site]]
name = "wsgi"
bindings = ["http://{listen}"]
[[site.app]]
pool = "wsgi"
"#,
        "wsgi",
    );
}

#[test]
fn ten_overlapped_recycles_under_load_fail_no_request_with_the_proxy() {
    recycles_under_load(NODE_POOL, "node");
}

#[test]
fn a_killed_app_process_is_replaced_and_requests_go_on() {
    let app = serve(NODE_POOL);
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let client = {
        let (addr, stop, failures, answered) = (
            app.addr,
            Arc::clone(&stop),
            Arc::clone(&failures),
            Arc::clone(&answered),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut c = Conn::open(addr);
                c.send(b"GET /who HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
                match c.read_response(false) {
                    Some(r) if r.status == 200 => answered.fetch_add(1, Ordering::Relaxed),
                    _ => failures.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let victim = procs(&app.server.status(), Role::App)[0].clone();
    unsafe { libc::kill(victim.1 as i32, libc::SIGKILL) };
    app.server.wait_until(
        "the slot runs a new app process",
        Duration::from_secs(15),
        |s| {
            procs(&s.status(), Role::App)
                .iter()
                .any(|a| a.0 == victim.0 && a.1 != victim.1)
        },
    );
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    client.join().unwrap();
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "{}",
        app.server.log_text()
    );
    assert!(answered.load(Ordering::Relaxed) > 10);
    app.server.wait_for_log(
        &format!("app node/{} (pid {}) exited: signal 9", victim.0, victim.1),
        Duration::from_secs(1),
    );
}

#[test]
fn a_crashing_app_stops_its_pool_by_rapid_fail_and_its_site_gets_503() {
    let app = serve(
        r#"
[[pool]]
name = "flaky"
command = ["sh", "-c", "sleep 1.5; echo cannot reach the database >&2; exit 3"]
transport = "activation"
rapid_fail = { max_crashes = 2, interval = "1m" }

[[site]]
name = "flaky"
bindings = ["http://{listen}"]
[[site.app]]
pool = "flaky"
"#,
    );
    app.server
        .wait_for_log("POOL flaky STOPPED by rapid-fail", Duration::from_secs(20));
    let log = app.server.log_text();
    assert!(
        log.contains("said last: cannot reach the database"),
        "{log}"
    );
    let r = get(app.addr, "/", "");
    assert_eq!(r.status, 503);
}

fn serve_fails(config: &str) -> String {
    need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        dir.path(),
    );
    let port = free_port();
    let (config, _) = with_own_admin(&config.replace("{listen}", &format!("127.0.0.1:{port}")));
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_app_that_exits_at_once_stops_serve_with_its_last_words() {
    let err = serve_fails(
        r#"
[[pool]]
name = "broken"
command = ["sh", "-c", "echo no module named shop >&2; exit 1"]
transport = "activation"
[[site]]
name = "s"
bindings = ["http://{listen}"]
[[site.app]]
pool = "broken"
"#,
    );
    let last = err.lines().last().unwrap();
    assert!(last.contains("app broken/0"), "{err}");
    assert!(last.contains("exited while starting: exit code 1"), "{err}");
    assert!(last.contains("no module named shop"), "{err}");
}

#[test]
fn an_app_that_never_becomes_healthy_hits_startup_time_limit() {
    // A real server on its PORT ({port} in the command), whose health URL is missing.
    let err = serve_fails(
        r#"
[[pool]]
name = "sick"
command = ["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", "{port}"]
health = "/healthz"
startup_time_limit = "2s"
[[site]]
name = "s"
bindings = ["http://{listen}"]
[[site.app]]
pool = "sick"
"#,
    );
    assert!(err.contains("sick/0"), "{err}");
    assert!(err.contains("within 2s (startup_time_limit)"), "{err}");
}

#[test]
fn check_names_the_key_of_a_program_that_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notexec.sh"), "#!/bin/sh\n").unwrap();
    for (command, expect) in [
        (
            r#"["no-such-program-espalier", "x"]"#,
            "is not an executable program on PATH",
        ),
        (r#"["./notexec.sh"]"#, "not executable; chmod +x it"),
        (r#"[]"#, "is empty"),
    ] {
        let config = format!(
            "[[pool]]\nname = \"p\"\ncommand = {command}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\n"
        );
        let path = dir.path().join("e.toml");
        std::fs::write(&path, config).unwrap();
        let out = espalier(&["check", "-c", path.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(":3: key `pool[0].command`"), "{err}");
        assert!(err.contains(expect), "{err}");
    }
}

#[test]
fn the_python_audio_app_answers_what_the_cpu_handler_does() {
    let native_port = free_port();
    let app = serve(
        &r#"
[[pool]]
name = "audio"
command = ["gunicorn", "--workers", "1", "app:app"]
directory = "audio"
transport = "activation"

[[pool]]
name = "native"

[[site]]
name = "audio"
bindings = ["http://{listen}"]
[[site.app]]
pool = "audio"

[[site]]
name = "native"
bindings = ["http://127.0.0.1:{native}"]
[[site.app]]
pool = "native"
handler = "cpu"
"#
        .replace("{native}", &native_port.to_string()),
    );
    let native = SocketAddr::from(([127, 0, 0, 1], native_port));
    for ms in [0, 10, 50] {
        let py = get(app.addr, &format!("/?ms={ms}"), "");
        let rs = get(native, &format!("/?ms={ms}"), "");
        assert_eq!((py.status, rs.status), (200, 200));
        assert_eq!(py.text(), rs.text(), "ms={ms}");
    }
}

/// Debian's php-fpm binary (`php-fpm8.2` on Debian 12), installed when missing.
fn php_fpm() -> String {
    let out = Command::new("bash")
        .args(["-c", ". bench/common.sh; need_tools -:php-fpm"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "this test needs php-fpm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found: Vec<String> = std::fs::read_dir("/usr/sbin")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("php-fpm"))
        .map(|n| format!("/usr/sbin/{n}"))
        .collect();
    found.sort();
    found.pop().expect("php-fpm installed in /usr/sbin")
}

#[test]
fn php_fpm_by_fastcgi_answers_with_cgi_semantics() {
    let fpm = php_fpm();
    let app = serve(
        &r#"
[server.limits]
max_body_size = "8MiB"

[[pool]]
name = "php"
command = ["{fpm}", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
directory = "php"
transport = "fastcgi"

[[site]]
name = "php"
bindings = ["http://{listen}"]
root = "php/www"
[[site.app]]
pool = "php"
"#
        .replace("{fpm}", &fpm),
    );
    let mut c = Conn::open(app.addr);
    for _ in 0..5 {
        c.send(b"GET / HTTP/1.1\r\nHost: shop.example\r\n\r\n");
        let r = c.read_response(false).expect("answer");
        assert_eq!(r.status, 200, "{}", app.server.log_text());
        let text = r.text();
        assert!(text.starts_with("hello from PHP"), "{text}");
        assert!(text.contains("espalier worker php/0"), "{text}");
        assert!(
            text.contains("script /index.php, path info , host shop.example"),
            "{text}"
        );
    }
    c.send(b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = c.read_response(true).expect("answer to HEAD");
    assert_eq!(r.status, 200);
    c.send(b"GET /index.php/a/b HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = c
        .read_response(false)
        .expect("answer after HEAD on the same connection");
    assert!(r.text().contains("path info /a/b"), "{}", r.text());
    let r = get(app.addr, "/?missing=1", "");
    assert_eq!((r.status, r.text().as_str()), (404, "nothing here\n"));
    let r = get(app.addr, "/?away=1", "");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/elsewhere"));
    assert_eq!(get(app.addr, "/nope.php", "").status, 404);
    // A traversal is normalized before the script is looked for: never outside the root.
    assert_ne!(get(app.addr, "/../../../etc/passwd", "").status, 200);
    let r = get(app.addr, "/?big=1", "");
    assert_eq!(r.body.len(), 1 << 20);
    // A body streams in as STDIN records; a chunked one is refused (FastCGI needs its length).
    let body = vec![b'b'; 3 << 20];
    let mut c = Conn::open(app.addr);
    c.send(
        format!(
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    c.send(&body);
    let r = c.read_response(false).expect("answer to POST");
    assert_eq!(r.text(), format!("posted {} bytes\n", body.len()));
    let mut c = Conn::open(app.addr);
    c.send(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    assert_eq!(c.read_response(false).expect("411").status, 411);
    // The PHP process runs where the plan put it.
    let apps = procs(&app.server.status(), Role::App);
    assert_eq!(apps.len(), 1);
    let p = Path::new("/proc").join(apps[0].1.to_string());
    assert_eq!(status_field(&p, "Cpus_allowed_list"), apps[0].3);
}

#[test]
fn a_unix_socket_upstream_carries_the_requests() {
    let app = serve(&NODE_POOL.replace(
        "response_timeout = \"1s\"",
        "response_timeout = \"1s\"\nupstream = \"unix\"",
    ));
    let status = app.server.status();
    let endpoints: Vec<String> = status
        .pools
        .iter()
        .flat_map(|p| &p.workers)
        .filter_map(|w| w.endpoint.clone())
        .collect();
    assert_eq!(endpoints.len(), 2, "{status:?}");
    assert!(
        endpoints.iter().all(|e| e.starts_with("unix:")),
        "{endpoints:?}"
    );
    for _ in 0..10 {
        let r = get(app.addr, "/who", "");
        assert_eq!(r.status, 200);
        assert!(r.text().starts_with("hello from node"), "{}", r.text());
    }
}

#[test]
fn reload_with_a_changed_environment_replaces_the_app_processes() {
    let app = serve(
        r#"
[[pool]]
name = "wsgi"
command = ["gunicorn", "--workers", "1", "app:app"]
directory = "wsgi"
transport = "activation"
health = "/healthz"
environment = { STAGE = "one" }

[[site]]
name = "wsgi"
bindings = ["http://{listen}"]
[[site.app]]
pool = "wsgi"
"#,
    );
    let before = procs(&app.server.status(), Role::App)[0].1;
    assert!(environ(before).contains(&"STAGE=one".to_string()));
    let path = app._dir.path().join("espalier.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("STAGE = \"one\"", "STAGE = \"two\"")).unwrap();
    app.server.signal(libc::SIGHUP);
    app.server.wait_until(
        "the reloaded app is running",
        Duration::from_secs(20),
        |s| {
            procs(&s.status(), Role::App)
                .first()
                .is_some_and(|a| a.1 != before && environ(a.1).contains(&"STAGE=two".to_string()))
        },
    );
    assert_eq!(get(app.addr, "/", "").status, 200);
    app.server
        .wait_until("the old app is gone", Duration::from_secs(10), |_| {
            !pid_alive(before)
        });
}

#[test]
fn a_cpu_limit_and_hard_affinity_reach_the_app_and_its_children() {
    let app = serve(
        r#"
[[pool]]
name = "capped"
affinity = "hard"
cpu_limit = "50%"
command = ["gunicorn", "--workers", "2", "app:app"]
directory = "wsgi"
transport = "activation"
health = "/healthz"

[[site]]
name = "capped"
bindings = ["http://{listen}"]
[[site.app]]
pool = "capped"
"#,
    );
    let status = app.server.status();
    let pool = &status.pools[0];
    let Some(group) = pool.cgroup.clone() else {
        // No writable cpu controller here: the one-line warning says so; nothing to check.
        assert!(app.server.log_text().contains("cpu_limit is not applied"));
        return;
    };
    let (_, arbiter, _, cpus) = procs(&status, Role::App)[0].clone();
    let worker: u32 = get(app.addr, "/", "")
        .header("x-app-pid")
        .unwrap()
        .parse()
        .unwrap();
    for pid in [arbiter, worker] {
        let p = Path::new("/proc").join(pid.to_string());
        assert_eq!(status_field(&p, "Cpus_allowed_list"), cpus, "pid {pid}");
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        // `…/espalier-<master pid>/capped`, under whichever hierarchy holds the cpu controller.
        let tail: Vec<&str> = group.rsplitn(3, '/').take(2).collect();
        let leaf = format!("/{}/{}", tail[1], tail[0]);
        assert!(
            cgroup.lines().any(|l| l.ends_with(&leaf)),
            "pid {pid} is not in {group}: {cgroup}"
        );
    }
}
