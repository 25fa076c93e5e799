//! What a stressed machine and a hurried operator do to a running server, on the real binary:
//! a master paused past `ping_response_time`, a log on a full disk, an app that sends
//! `100 Continue` for ever, and a burst of reloads under a load that never retries.

use crate::common;

use common::*;
use std::io::Write;
use std::process::Command;
use std::time::Duration;

fn dynamic(port: u16, pool_extra: &str, site_extra: &str) -> String {
    format!(
        "[[pool]]\nname = \"p\"\n{pool_extra}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n{site_extra}\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    )
}

/// A master stopped (SIGSTOP, a frozen VM) for longer than `ping_response_time` once killed
/// every healthy worker when it resumed: their pongs had waited unread.
#[test]
fn a_paused_master_does_not_kill_its_workers_when_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &dynamic(
            port,
            "ping_interval = \"1s\"\nping_response_time = \"2s\"",
            "",
        ),
    );
    let before = server.workers();
    server.signal(libc::SIGSTOP);
    // The pause is the condition under test — longer than ping_response_time — not a wait
    // in place of an event.
    std::thread::sleep(Duration::from_secs(6));
    server.signal(libc::SIGCONT);
    server.wait_for_log("the master was paused", Duration::from_secs(30));
    // Well past another ping_response_time: three rounds of pings answered after the
    // resume (each seen as the request before it counted in /status, which the workers'
    // pongs carry), and the same workers serve.
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for round in 1..=3 {
        let taken = server.requests_taken();
        assert_eq!(get(addr, "/", "").status, 200);
        server.wait_until(
            &format!("pong round {round}"),
            Duration::from_secs(30),
            |s| s.requests_taken() > taken,
        );
    }
    assert_eq!(server.workers(), before, "{}", server.log_text());
    assert!(!server.log_text().contains("missed its pings"));
}

/// A log that cannot be written (a full disk: `/dev/full`) is said once, not dropped silently.
#[test]
fn an_access_log_on_a_full_disk_is_said_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &dynamic(
            port,
            "",
            "access_log = { path = \"/dev/full\", format = \"common\" }",
        ),
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..5 {
        assert_eq!(get(addr, "/", "").status, 200);
    }
    let line = server.wait_for_log("cannot write /dev/full", Duration::from_secs(30));
    assert!(line.contains("line(s) lost"), "{line}");
    for _ in 0..5 {
        assert_eq!(get(addr, "/", "").status, 200);
    }
    // Two heartbeats later (each seen as a request counted in /status), the lines of those
    // five requests have met the full disk too.
    for beat in 1..=2 {
        let taken = server.requests_taken();
        assert_eq!(get(addr, "/", "").status, 200);
        server.wait_until(&format!("heartbeat {beat}"), Duration::from_secs(30), |s| {
            s.requests_taken() > taken
        });
    }
    let said = server.log_text().matches("cannot write /dev/full").count();
    assert!(said <= 2, "said {said} times (once per thread at most)");
}

/// Sends `100 Continue` every 10 ms and never an answer.
const CONTINUING_APP: &str = r#"
import socket, os, time, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
s.listen(64)
def serve(c):
    try:
        c.recv(65536)
        while True:
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            time.sleep(0.01)
    except OSError:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

#[test]
fn interim_answers_do_not_hold_a_client_past_the_response_timeout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.py"), CONTINUING_APP).unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &format!(
            "[[pool]]\nname = \"p\"\ncommand = [\"python3\", \"app.py\"]\nresponse_timeout = \"1s\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\n"
        ),
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // The answer is the event; the bound is generous (it was never, before).
    let mut c = Conn::open(addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = c.read_response(false).expect("an answer");
    assert_eq!(r.status, 504, "{}", server.log_text());
}

/// Twenty reloads in two seconds, each changing the pool (so its workers are replaced),
/// under `wrk`, which never retries: no request fails.
#[test]
fn a_burst_of_reloads_fails_no_request() {
    need_tools("wrk:wrk", "wrk");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = |n: u32| {
        dynamic(
            port,
            &format!(
                "processes = 2\n[pool.recycle]\nrequests = {}",
                1_000_000_000 + n
            ),
            "",
        )
    };
    let (first, admin) = with_own_admin(&config(0));
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, &first).unwrap();
    let mut server = Server::start(&["-c", "espalier.toml"], dir.path());
    server.admin = Some(admin.clone());
    let url = format!("http://127.0.0.1:{port}/");
    // Until the reloads are done: wrk stops and reports at SIGINT.
    let load = Command::new("wrk")
        .args(["-t1", "-c10", "-d300s", &url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    server.wait_until("the load running", Duration::from_secs(30), |s| {
        s.requests_taken() > 50
    });
    for n in 1..=20 {
        let (text, _) = with_own_admin(&config(n).replacen(
            "[[pool]]",
            &format!("[server]\nadmin = \"{admin}\"\n[[pool]]"),
            1,
        ));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        drop(f);
        server.signal(libc::SIGHUP);
        // Each reload done before the next file is written (signals sent faster coalesce).
        server.wait_until(&format!("reload {n}"), Duration::from_secs(60), |s| {
            s.log_text().matches("reloaded ").count() >= n as usize
        });
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(load.id() as i32, libc::SIGINT) };
    let out = load.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("requests in"), "{text}");
    assert!(
        !text.contains("Socket errors"),
        "{text}\n{}",
        server.log_text()
    );
    assert!(!text.contains("Non-2xx"), "{text}\n{}", server.log_text());
    server.wait_for_log("reloaded", std::time::Duration::from_secs(10));
}

/// Two servers, one admin address (issue #39, item 7): the second refuses to start in one
/// line naming `server.admin` and the fix (`check` warns first); commands given the second's
/// file reach the first and are refused, never acted on it; `serve --admin` gives the second
/// an endpoint of its own.
#[test]
fn commands_given_another_servers_file_are_refused_not_acted_on() {
    let dir = tempfile::tempdir().unwrap();
    let (port_a, port_b, admin) = (free_port(), free_port(), free_port());
    let a_file = dir.path().join("a.toml");
    let b_file = dir.path().join("b.toml");
    let server_line = format!("[server]\nadmin = \"127.0.0.1:{admin}\"\n");
    std::fs::write(&a_file, format!("{server_line}{}", dynamic(port_a, "", ""))).unwrap();
    std::fs::write(&b_file, format!("{server_line}{}", dynamic(port_b, "", ""))).unwrap();
    let a = Server::start(&["-c", "a.toml"], dir.path());
    let (a_path, b_path) = (a_file.to_str().unwrap(), b_file.to_str().unwrap());

    let check = espalier(&["check", "-c", b_path]);
    let warned = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(warned.contains("warning: key `server.admin`"), "{warned}");

    // Bounded: were it to start, `timeout` ends it (and the code is not 1).
    let second = Command::new("timeout")
        .args(["20", env!("CARGO_BIN_EXE_espalier"), "serve", "-c", b_path])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("b.toml: key `server.admin`: cannot listen on 127.0.0.1:")
            && last.contains("serve --admin ADDR"),
        "{err}"
    );

    // `status` and `reload` with b.toml reach a's endpoint: refused, naming both files.
    for args in [["status", "-c", b_path], ["reload", "-c", b_path]] {
        let out = espalier(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is the server of")
                && err.contains("a.toml")
                && err.contains("not of")
                && err.contains("b.toml"),
            "{err}"
        );
    }
    assert!(!a.log_text().contains("reloaded"), "{}", a.log_text());
    // With its own file, the same commands act.
    assert!(espalier_ok(&["status", "-c", a_path]).contains("p "));
    assert!(espalier_ok(&["reload", "-c", a_path]).contains("reloaded"));

    // The second, on an admin address of its own.
    let own = format!("127.0.0.1:{}", free_port());
    let b = Server::start(&["-c", "b.toml", "--admin", &own], dir.path());
    let status = espalier_ok(&["status", "--admin", &own, "--json"]);
    assert!(status.contains(&format!("127.0.0.1:{port_b}")), "{status}");
    // `reload -c b.toml` reaches a's address (b.toml's own): the refusal says how to reach
    // b; `-c` with `--admin` does (the file names the server meant, the address where).
    let out = espalier(&["reload", "-c", b_path]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin ADDR beside -c"), "{err}");
    assert!(espalier_ok(&["reload", "-c", b_path, "--admin", &own]).contains("reloaded"));
    drop(b);
}
