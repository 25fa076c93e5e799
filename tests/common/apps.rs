//! Helpers of the application-pool tests: the runtimes from Debian, a server started beside
//! copies of examples/apps, and reading processes back from status and /proc.

use super::*;
use espalier::server::status::{Role, Status, WorkerState};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Installs gunicorn, uvicorn and node from Debian's packages when missing.
/// The endpoints of a server's app processes, asserted to be `count` unix sockets.
pub fn unix_endpoints(status: &Status, count: usize) -> Vec<String> {
    let endpoints: Vec<String> = (status.pools.iter())
        .flat_map(|p| &p.workers)
        .filter_map(|w| w.endpoint.clone())
        .collect();
    assert_eq!(endpoints.len(), count, "{status:?}");
    assert!(
        endpoints.iter().all(|e| e.starts_with("unix:")),
        "{endpoints:?}"
    );
    endpoints
}

pub fn need_runtimes() {
    need_tools(
        "gunicorn:gunicorn node:nodejs -:python3-uvicorn",
        "gunicorn, uvicorn and node",
    );
}

/// A temporary folder holding the example apps, and a server started there from `config`
/// (where `{listen}` is the site's address; `{port}` is left for espalier, which puts each
/// proxied app process's own port there).
pub struct AppServer {
    pub server: Server,
    pub addr: SocketAddr,
    pub _dir: tempfile::TempDir,
}

/// A folder holding copies of the example apps, a port for the site, and `config` with
/// `{listen}` replaced by its address.
pub fn prepare(config: &str) -> (tempfile::TempDir, u16, String) {
    need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        dir.path(),
    );
    let port = free_port();
    let config = config.replace("{listen}", &format!("127.0.0.1:{port}"));
    (dir, port, config)
}

pub fn serve(config: &str) -> AppServer {
    let (dir, port, config) = prepare(config);
    let server = Server::with_config(dir.path(), &config);
    AppServer {
        server,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    }
}

/// (pid, node, cpus) of the running processes of `role`.
pub fn procs(status: &Status, role: Role) -> Vec<(u32, u32, u32, String)> {
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

pub fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

pub fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    after
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

pub const NODE_POOL: &str = r#"
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
# Generous: a loaded CI machine can keep Node from answering for over a second, and a 504
# would count as a failed request (the hanging-app test sets its own short bound).
response_timeout = "30s"

[[site]]
name = "node"
bindings = ["http://{listen}"]
[[site.app]]
pool = "node"
"#;

pub fn rss_kib(pid: u32) -> u64 {
    status_field(&Path::new("/proc").join(pid.to_string()), "VmRSS")
        .trim_end_matches(" kB")
        .parse()
        .unwrap()
}

/// A client that sends GETs on keep-alive connections until told to stop, as a browser does:
/// a request whose reused connection was closed before any answer byte is sent again on a new
/// connection. Returns (answered, failed).
pub fn keep_alive_load(addr: SocketAddr, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    keep_alive_load_host(addr, "a", stop, Counter::default())
}

/// As [`keep_alive_load`], naming `host`, bumping `progress` at every answer (what a test
/// waits on: the load started, or went on).
pub fn keep_alive_load_host(
    addr: SocketAddr,
    host: &str,
    stop: Arc<AtomicBool>,
    progress: Counter,
) -> (u64, Vec<String>) {
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let mut answered = 0;
    let mut failed = Vec::new();
    let mut conn: Option<Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let reused = conn.is_some();
        if conn.is_none() {
            // A refused connection is a failure to report with the rest, not a panic: a
            // panic here, in a thread, would outlive a test that failed for another reason
            // and bury its message under this one's.
            match std::net::TcpStream::connect(addr) {
                Ok(stream) => conn = Some(Conn::over(stream)),
                Err(e) => {
                    failed.push(format!("connect: {e}"));
                    return (answered, failed);
                }
            }
        }
        let c = conn.as_mut().expect("connected above");
        let sent = c.stream.write_all(request.as_bytes()).is_ok();
        match sent.then(|| c.read_response(false)).flatten() {
            Some(r) if r.status == 200 => {
                answered += 1;
                progress.bump();
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

pub fn serve_fails(config: &str) -> String {
    let (dir, _, config) = prepare(config);
    let (config, _) = with_own_admin(&config);
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "-c", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Debian's php-fpm binary (`php-fpm8.2` on Debian 12), installed when missing.
pub fn php_fpm() -> String {
    need_tools("-:php-fpm", "php-fpm");
    let mut found: Vec<String> = std::fs::read_dir("/usr/sbin")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("php-fpm"))
        .map(|n| format!("/usr/sbin/{n}"))
        .collect();
    found.sort();
    found.pop().expect("php-fpm installed in /usr/sbin")
}

/// Sets its flag when dropped: a test that fails stops its load threads, which would
/// otherwise go on against a server already stopped.
pub struct StopOnDrop(pub Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Ten overlapped recycles of `pool` while two keep-alive clients load it: no request fails.
pub fn recycles_under_load(config: &str, pool: &str) {
    let app = serve(config);
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_unwind = StopOnDrop(Arc::clone(&stop));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (addr, stop) = (app.addr, Arc::clone(&stop));
            std::thread::spawn(move || keep_alive_load(addr, stop))
        })
        .collect();
    for round in 0..10 {
        let before = procs(&app.server.status(), Role::App);
        let (code, body) = app.server.post(&format!("/pools/{pool}/recycle"));
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        app.server
            .wait_until(&format!("recycle {round}"), Duration::from_secs(60), |s| {
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
    // The log comes through a pipe: the last start's line may arrive after the status that
    // showed its process (CI saw 9 of 10 once).
    app.server.wait_until(
        "ten recycled starts in the log",
        Duration::from_secs(10),
        |s| s.log_text().matches("(recycled)").count() >= 10,
    );
}
