//! Pools on demand (IIS `startMode = OnDemand`, `idleTimeout`) on the real binary: a pool
//! has no process until its first connection, which is answered by the process it starts;
//! it sleeps again when idle and wakes again; on a shared port a host wakes its own pool
//! through the hand-off; and from 100 pools on, pools start on demand unless they say so.

mod common;

use common::*;
use espalier::server::status::{PoolState, WorkerState};
use std::net::SocketAddr;
use std::time::Duration;

fn worker_of(r: &Response) -> String {
    r.header("x-espalier-worker").unwrap_or("-").to_string()
}

fn state_of(server: &Server, pool: &str) -> (PoolState, Vec<(WorkerState, Option<u32>)>) {
    let status = server.status();
    let p = status
        .pools
        .iter()
        .find(|p| p.name == pool)
        .expect("the pool");
    (
        p.state,
        p.workers.iter().map(|w| (w.state, w.pid)).collect(),
    )
}

fn get_host(addr: SocketAddr, host: &str) -> Response {
    let mut c = Conn::open(addr);
    c.send(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes());
    c.read_response(false).expect("an answer")
}

#[test]
fn an_on_demand_pool_starts_on_its_first_connection_and_sleeps_again_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (lazy, awake) = (free_port(), free_port());
    let server = Server::with_config(
        dir.path(),
        &format!(
            r#"
[server]
worker_header = true
[[pool]]
name = "lazy"
start = "on-demand"
idle_timeout = "2s"
[[pool]]
name = "awake"
[[site]]
name = "lazy"
bindings = ["http://127.0.0.1:{lazy}"]
[[site.app]]
pool = "lazy"
handler = "dynamic"
[[site]]
name = "awake"
bindings = ["http://127.0.0.1:{awake}"]
[[site.app]]
pool = "awake"
handler = "dynamic"
"#
        ),
    );
    // Nobody visited it: no process.
    assert_eq!(
        state_of(&server, "lazy"),
        (PoolState::Idle, vec![(WorkerState::Idle, None)])
    );
    assert!(server.workers().iter().all(|w| !w.0.starts_with("lazy/")));
    // The first connection waits for the process it starts, and is answered by it.
    let addr = SocketAddr::from(([127, 0, 0, 1], lazy));
    let first = get(addr, "/", "");
    assert_eq!(first.status, 200, "{}", server.log_text());
    assert!(
        worker_of(&first).starts_with("lazy/0/"),
        "{}",
        worker_of(&first)
    );
    let (state, workers) = state_of(&server, "lazy");
    assert_eq!(
        (state, workers[0].0),
        (PoolState::Running, WorkerState::Running)
    );
    let pid = workers[0].1.expect("a pid");
    // Idle for its idle_timeout: stopped, its process gone.
    server.wait_until("the idle pool asleep again", Duration::from_secs(60), |s| {
        state_of(s, "lazy").0 == PoolState::Idle && !pid_alive(pid)
    });
    assert!(server
        .log_text()
        .contains("served nothing for 2s (idle_timeout)"));
    // And woken again by the next connection, by a new process.
    let again = get(addr, "/", "");
    assert_eq!(again.status, 200);
    let new_pid = state_of(&server, "lazy").1[0].1.expect("a pid");
    assert_ne!(new_pid, pid);
    // The pool that always runs never slept.
    assert_eq!(state_of(&server, "awake").0, PoolState::Running);
}

/// Two on-demand pools share a port by host: a request for b's host is answered by b, even
/// when it reached a socket of a (a wakes, routes, hands it to b's socket, and that wakes b).
#[test]
fn on_a_shared_port_a_host_wakes_its_own_pool() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &format!(
            r#"
[server]
worker_header = true
[[pool]]
name = "a"
start = "on-demand"
[[pool]]
name = "b"
start = "on-demand"
[[site]]
name = "a"
bindings = ["http://127.0.0.1:{port}:a.example"]
[[site.app]]
pool = "a"
handler = "dynamic"
[[site]]
name = "b"
bindings = ["http://127.0.0.1:{port}:b.example"]
[[site.app]]
pool = "b"
handler = "dynamic"
"#
        ),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..3 {
        let r = get_host(addr, "b.example");
        assert_eq!(r.status, 200, "{}", server.log_text());
        assert!(worker_of(&r).starts_with("b/"), "{}", worker_of(&r));
    }
    let r = get_host(addr, "a.example");
    assert!(worker_of(&r).starts_with("a/"), "{}", worker_of(&r));
}

/// From 100 pools on, a pool starts on demand unless it says `start = "always"` (IIS 8.5
/// activates sites dynamically from 100 on): 120 sites start no process but the one that
/// asked to always run, and any of them answers on its first connection.
#[test]
fn from_a_hundred_pools_on_pools_start_on_demand_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = String::from("[server]\nworker_header = true\n");
    for i in 0..120 {
        let start = if i == 0 { "start = \"always\"\n" } else { "" };
        config.push_str(&format!(
            "[[pool]]\nname = \"p{i}\"\n{start}[[site]]\nname = \"s{i}\"\nbindings = [\"http://127.0.0.1:{port}:s{i}.example\"]\n[[site.app]]\npool = \"p{i}\"\nhandler = \"dynamic\"\n"
        ));
    }
    let server = Server::with_config(dir.path(), &config);
    let status = server.status();
    let running: Vec<&str> = status
        .pools
        .iter()
        .filter(|p| p.state == PoolState::Running)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(running, vec!["p0"]);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for i in [0, 57, 119] {
        let r = get_host(addr, &format!("s{i}.example"));
        assert_eq!(r.status, 200, "s{i}: {}", server.log_text());
        assert!(
            worker_of(&r).starts_with(&format!("p{i}/")),
            "{}",
            worker_of(&r)
        );
    }
}
