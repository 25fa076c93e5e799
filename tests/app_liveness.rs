//! How the master tells a live app process from a dead or frozen one, on the real binary with
//! a real Python app: health requests come every `ping_interval` (not every second), and a
//! proxied app frozen with SIGSTOP — whose socket still completes TCP handshakes, so a
//! connect probe calls it healthy — is replaced once requests to it time out in a row.

use crate::common;

use common::*;
use std::time::{Duration, Instant};

/// Counts its `/healthz` requests; `/count` tells how many came, `/times` when (seconds on
/// a monotonic clock, one per line).
const COUNTING_APP: &str = r#"
import http.server, os, time
hits = 0
times = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global hits
        if self.path == "/healthz":
            hits += 1
            times.append(time.monotonic())
            body = b"ok\n"
        elif self.path == "/times":
            body = "".join("%f\n" % t for t in times).encode()
        else:
            body = b"%d\n" % hits
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

fn app_config(port: u16, extra: &str) -> String {
    format!(
        r#"
[[pool]]
name = "app"
command = ["python3", "app.py"]
{extra}
[[site]]
name = "app"
bindings = ["http://127.0.0.1:{port}"]
[[site.app]]
pool = "app"
"#
    )
}

#[test]
fn health_requests_come_every_ping_interval() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.py"), COUNTING_APP).unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &app_config(port, "health = \"/healthz\"\nping_interval = \"2s\""),
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Readiness takes one or a few probes; then one per ping_interval. Waited for — four
    // pings after readiness — they are on average at least most of the interval apart: a
    // slow machine spaces them more, never less (only a late first one can shorten one gap,
    // which the average over three absorbs). They once came every second whatever the
    // setting.
    let at_ready: usize = get(addr, "/count", "").text().trim().parse().unwrap();
    let times = || -> Vec<f64> {
        get(addr, "/times", "")
            .text()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    };
    wait_for(
        "four pings after readiness",
        Duration::from_secs(60),
        || times().len() >= at_ready + 4,
    );
    let pings = times();
    let after = &pings[at_ready..at_ready + 4];
    let mean_gap = (after[3] - after[0]) / 3.0;
    assert!(
        mean_gap >= 1.5,
        "health requests {mean_gap:.2} s apart on average with ping_interval = 2s: {pings:?}\n{}",
        server.log_text()
    );
}

#[test]
fn a_frozen_proxied_app_is_replaced_after_requests_time_out() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.py"), COUNTING_APP).unwrap();
    let port = free_port();
    // No `health`: the ping is a TCP connect, which a stopped process's socket still takes.
    let server = Server::with_config(dir.path(), &app_config(port, "response_timeout = \"1s\""));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(addr, "/count", "").status, 200);
    let app = server
        .status()
        .pools
        .iter()
        .flat_map(|p| p.workers.clone())
        .find(|w| w.role == espalier::server::status::Role::App)
        .and_then(|w| w.pid)
        .unwrap();
    unsafe { libc::kill(app as i32, libc::SIGSTOP) };
    // Each thread reports an app after three timeouts in a row; the requests spread over the
    // worker's threads, so a few more may be needed. Bounded either way.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut statuses = Vec::new();
    while !server.log_text().contains("in a row time out") {
        assert!(
            Instant::now() < deadline,
            "{statuses:?}\n{}",
            server.log_text()
        );
        statuses.push(get(addr, "/count", "").status);
    }
    // Timeouts until the report; then, while the process is replaced, 502 or 503 at most.
    let timeouts = statuses.iter().take_while(|&&s| s == 504).count();
    assert!(timeouts >= 3, "{statuses:?}");
    assert!(
        statuses[timeouts..]
            .iter()
            .all(|s| [200, 502, 503].contains(s)),
        "{statuses:?}"
    );
    // A new process answers.
    server.wait_until("a new app process serving", Duration::from_secs(60), |_| {
        get(addr, "/count", "").status == 200
    });
    unsafe { libc::kill(app as i32, libc::SIGCONT) };
}
