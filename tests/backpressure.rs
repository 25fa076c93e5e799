//! Backpressure for apps (issue #29, item 4): gunicorn with one sync worker behind
//! `max_requests_per_process = 1` — one request held at the app, the next ones wait in
//! espalier's queue (shown in /metrics), those beyond `queue_length` get 503 with
//! `Retry-After` while the others wait, and the waiting ones are answered once the app is
//! free; gunicorn with threads, which would take many at once, never sees two.

use crate::common;

use common::apps::need_runtimes;
use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How long an event may take to be seen on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

fn ask(addr: SocketAddr, path: &str) -> std::thread::JoinHandle<Option<Response>> {
    let path = path.to_string();
    std::thread::spawn(move || {
        let mut c = Conn::open(addr);
        c.stream
            .set_read_timeout(Some(Duration::from_secs(90)))
            .unwrap();
        c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
        c.read_response(false)
    })
}

/// The most requests the app had at once, from its record.
fn most_at_once(record: &Path) -> usize {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let (mut now, mut most) = (0i32, 0i32);
    for line in text.lines() {
        now += if line == "start" { 1 } else { -1 };
        most = most.max(now);
    }
    most as usize
}

fn metric(server: &Server, name: &str, pool: &str) -> u64 {
    let admin: SocketAddr = server.admin.as_ref().unwrap().parse().unwrap();
    let (_, text) = espalier::server::admin::request(admin, "GET", "/metrics").unwrap();
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| {
            l.starts_with(&format!("{name}{{pool=\"{pool}\"")) && l.contains("role=\"front\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_sync_app_gets_one_request_at_a_time_and_the_rest_wait_or_are_refused() {
    need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/hold_app.py"),
        d.join("hold_app.py"),
    )
    .unwrap();
    let (sync_port, threads_port) = (free_port(), free_port());
    let pool = |name: &str, workers: &str, keys: &str| {
        format!("[[pool]]\nname = \"{name}\"\ncommand = [\"gunicorn\", \"--bind\", \"127.0.0.1:{{port}}\", \"--workers\", \"1\", {workers}\"hold_app:app\"]\nhealth = \"/healthz\"\nenvironment = {{ RECORD = \"{name}.log\", RELEASE = \"{name}.release\" }}\n{keys}\n")
    };
    let site = |name: &str, port: u16| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"{name}\"\n")
    };
    let config = format!(
        "{}{}{}{}",
        pool(
            "sync",
            "",
            "max_requests_per_process = 1\nqueue_length = 8\nqueue_timeout = \"90s\""
        ),
        pool(
            "threads",
            "\"--threads\", \"8\", ",
            "max_requests_per_process = 1"
        ),
        site("sync", sync_port),
        site("threads", threads_port),
    );
    let server = Server::with_config(d, &config);
    let sync = SocketAddr::from(([127, 0, 0, 1], sync_port));
    // One request held at the app...
    let first = ask(sync, "/hold");
    server.wait_until("the app has the first request", WAIT, |_| {
        most_at_once(&d.join("sync.log")) == 1
    });
    // ... eight wait in espalier's queue, and eleven more find it full: 503 at once.
    let rest: Vec<_> = (0..19).map(|_| ask(sync, "/hold")).collect();
    server.wait_until("eight requests queued (in /metrics)", WAIT, |server| {
        metric(server, "espalier_worker_queue_waiting", "sync") == 8
    });
    server.wait_until("eleven refused", WAIT, |server| {
        metric(server, "espalier_worker_queue_rejected_total", "sync") == 11
    });
    let (mut refused, mut waiting) = (0, Vec::new());
    for h in rest {
        if h.is_finished() {
            let r = h.join().unwrap().expect("an answer");
            assert_eq!(r.status, 503);
            assert_eq!(r.header("retry-after"), Some("1"));
            refused += 1;
        } else {
            waiting.push(h);
        }
    }
    assert_eq!(refused, 11, "{}", server.log_text());
    assert_eq!(most_at_once(&d.join("sync.log")), 1, "the app had two");
    // Released, the app answers them one by one.
    std::fs::write(d.join("sync.release"), "").unwrap();
    assert_eq!(first.join().unwrap().unwrap().status, 200);
    for h in waiting {
        assert_eq!(h.join().unwrap().expect("an answer").status, 200);
    }
    let record = std::fs::read_to_string(d.join("sync.log")).unwrap();
    assert_eq!(record.matches("start").count(), 9, "{record}");
    assert_eq!(most_at_once(&d.join("sync.log")), 1);
    server.wait_until("the queue's figures", WAIT, |server| {
        metric(server, "espalier_worker_queued_total", "sync") >= 8
            && metric(server, "espalier_worker_queue_waiting", "sync") == 0
    });
    // gunicorn with eight threads would take twenty at once: it is given one at a time.
    let threads = SocketAddr::from(([127, 0, 0, 1], threads_port));
    let all: Vec<_> = (0..20).map(|_| ask(threads, "/work?0.05")).collect();
    for h in all {
        assert_eq!(h.join().unwrap().expect("an answer").status, 200);
    }
    assert_eq!(
        most_at_once(&d.join("threads.log")),
        1,
        "the app had two at once"
    );
    drop(server);
}
