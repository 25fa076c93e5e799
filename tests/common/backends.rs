//! Helpers of the upstream tests: backend servers espalier did not start
//! (tests/apps/upstream_backend.py, real Python processes on 127.0.0.2–.4), and the configs
//! that put a site in front of them.

use super::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A backend server (tests/apps/upstream_backend.py), stopped when dropped.
pub struct Backend {
    pub child: Child,
    pub addr: SocketAddr,
    pub record: PathBuf,
}

impl Backend {
    pub fn start(dir: &Path, ip: &str, name: &str) -> Backend {
        Backend::start_with(dir, ip, name, &[])
    }

    /// As [`Backend::start`], with the script's further arguments (TLS files).
    pub fn start_with(dir: &Path, ip: &str, name: &str, extra: &[&Path]) -> Backend {
        let addr: SocketAddr = format!("{ip}:{}", free_port()).parse().unwrap();
        Backend::start_at(dir, addr, name, extra)
    }

    pub fn start_at(dir: &Path, addr: SocketAddr, name: &str, extra: &[&Path]) -> Backend {
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
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    pub fn kill(&mut self) {
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
pub fn two_backends() -> (tempfile::TempDir, Backend, Backend) {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start(dir.path(), "127.0.0.2", "a");
    let b = Backend::start(dir.path(), "127.0.0.3", "b");
    (dir, a, b)
}

/// The server that answered (its `X-Server`), or the status when none did.
pub fn served_by(addr: SocketAddr, path: &str, headers: &str) -> String {
    let r = get(addr, path, headers);
    match r.header("x-server") {
        Some(name) if r.status == 200 => name.to_string(),
        _ => format!("status {}", r.status),
    }
}

/// A site on a free port forwarding `/` to upstream `api` (defined by `upstream`).
pub fn front(upstream: &str) -> (String, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    (front_at(upstream, addr), addr)
}

pub fn front_at(upstream: &str, addr: SocketAddr) -> String {
    format!(
        "{upstream}\n[[site]]\nname = \"front\"\nbindings = [\"http://{addr}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"api\"\n"
    )
}

/// Writes `config` as the running `server`'s file (its admin address kept) and reloads it.
pub fn reload(server: &Server, dir: &Path, config: &str) {
    let admin = server.admin.clone().unwrap();
    let text = format!("[server]\nadmin = \"{admin}\"\n{config}");
    std::fs::write(dir.join("espalier.toml"), text).unwrap();
    espalier_ok(&["reload", "--admin", &admin]);
}

/// An upstream group `api` of `servers`, balanced by `balance`.
pub fn group(servers: &[&Backend], balance: &str) -> String {
    let list: Vec<String> = servers.iter().map(|b| format!("\"{}\"", b.addr)).collect();
    format!(
        "[[upstream]]\nname = \"api\"\nservers = [{}]\nbalance = \"{balance}\"\n",
        list.join(", ")
    )
}

pub fn count(names: &[String], name: &str) -> usize {
    names.iter().filter(|n| *n == name).count()
}

/// The example Node app (examples/apps/node/server.js: pages, uploads, a WebSocket echo at
/// `/ws`) as a server espalier did not start, on a free port of 127.0.0.1: stopped when
/// dropped, with its address.
pub fn node_server() -> (Stopped, SocketAddr) {
    need_tools("node:nodejs", "node");
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps/node/server.js");
    let node = Stopped::listening(
        Command::new("node")
            .arg(app)
            .env("PORT", addr.port().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        addr,
    );
    (node, addr)
}
