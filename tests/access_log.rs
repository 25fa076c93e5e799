//! Access logs on the real binary: the three formats, hostile client bytes, a proxied app's
//! upstream time, logrotate's SIGUSR1 and the flush at exit.

use crate::common;

use common::*;
use std::path::Path;
use std::time::Duration;

/// A slow request of site a in flight while b's requests are answered: on connections of
/// their own over HTTP/1.1, then as streams of one h2c connection (their paths marked `h2`).
/// `slow` is a's (host, path); `fast` b's (host, path, expected status); `arrived` says
/// whether the app has the slow request with that path (b's wait for it: in flight).
fn behind_a_slow_request(
    port: u16,
    slow: (&'static str, &'static str),
    fast: &[(&'static str, &'static str, u16)],
    arrived: &dyn Fn(&str) -> bool,
) {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let in_flight = std::thread::spawn(move || get_host(addr, slow.0, slow.1).status);
    wait_for(
        "the slow request at its app",
        Duration::from_secs(30),
        || arrived(slow.1),
    );
    for &(host, path, status) in fast {
        assert_eq!(get_host(addr, host, path).status, status, "{host}{path}");
    }
    assert_eq!(in_flight.join().unwrap(), 200);
    let h2_path = |path: &str| {
        let mark = if path.contains('?') { "&h2" } else { "?h2" };
        format!("{path}{mark}")
    };
    let slow_h2 = h2_path(slow.1);
    block_on(async {
        let mut h2 = h2c(port).await;
        let slow_url = format!("http://{}{}", slow.0, slow_h2);
        let in_flight = h2_get(&mut h2, &slow_url).await;
        wait_for_async(
            "the slow stream at its app",
            Duration::from_secs(30),
            || arrived(&slow_h2),
        )
        .await;
        for &(host, path, status) in fast {
            let url = format!("http://{host}{}", h2_path(path));
            let answer = h2_get(&mut h2, &url).await.await.unwrap();
            assert_eq!(answer.status(), status, "{url}");
        }
        assert_eq!(in_flight.await.unwrap().status(), 200);
    });
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn every_format_logs_every_request_and_logrotate_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hi\n").unwrap();
    let raw_app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/raw_app.py");
    let (p1, p2, p3, p4) = (free_port(), free_port(), free_port(), free_port());
    let config = format!(
        r#"
[server]
worker_header = true
[[pool]]
name = "web"
[[pool]]
name = "app"
command = ["python3", "{app}"]
health = "/healthz"
[[site]]
name = "common"
bindings = ["http://127.0.0.1:{p1}"]
root = "www"
access_log = {{ path = "logs/common.log", format = "common" }}
[[site.app]]
pool = "web"
[[site]]
name = "combined"
bindings = ["http://127.0.0.1:{p2}"]
root = "www"
access_log = {{ path = "logs/combined.log" }}
[[site.app]]
pool = "web"
[[site]]
name = "json"
bindings = ["http://127.0.0.1:{p3}"]
root = "www"
access_log = {{ path = "logs/json.log", format = "json" }}
[[site.app]]
pool = "web"
[[site]]
name = "proxied"
bindings = ["http://127.0.0.1:{p4}"]
access_log = {{ path = "logs/proxied.log", format = "json" }}
[[site.app]]
pool = "app"
"#,
        app = raw_app.display()
    );
    let mut server = Server::with_config(dir.path(), &config);
    let addr = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
    let logs = dir.path().join("logs");
    assert_eq!(get(addr(p1), "/", "").status, 200);
    assert_eq!(get(addr(p1), "/missing", "").status, 404);
    // What a client sends cannot forge or break a line.
    let hostile = "User-Agent: evil\" 200 \\x é\r\nReferer: http://r/\r\n";
    assert_eq!(get(addr(p2), "/index.html?q=1", hostile).status, 200);
    assert_eq!(
        get(addr(p3), "/?a=\"b\"", "User-Agent: é\"\r\n").status,
        200
    );
    assert_eq!(get(addr(p4), "/until-close", "").status, 200);
    server.wait_until("the lines are written", Duration::from_secs(5), |_| {
        lines(&logs.join("common.log")).len() == 2
            && lines(&logs.join("combined.log")).len() == 1
            && lines(&logs.join("json.log")).len() == 1
            && lines(&logs.join("proxied.log")).len() == 1
    });
    // Each worker thread writes through its own buffer, so two requests served by two threads
    // may reach the file in either order.
    let mut common = lines(&logs.join("common.log"));
    common.sort_by_key(|l| l.contains("/missing"));
    for (line, status) in common.iter().zip(["200", "404"]) {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[..3], ["127.0.0.1", "-", "-"], "{line}");
        assert!(
            fields[3].starts_with('[') && fields[4] == "+0000]",
            "{line}"
        );
        assert_eq!(fields[8], status, "{line}");
        // The body's size (Apache's %b, nginx's $body_bytes_sent), not the head's with it.
        if status == "200" {
            assert_eq!(fields[9], "3", "index.html is 3 bytes: {line}");
        } else {
            assert!(fields[9].parse::<u64>().unwrap() > 0, "{line}");
        }
        assert_eq!(fields.len(), 10, "CLF has ten fields: {line}");
    }
    let combined = &lines(&logs.join("combined.log"))[0];
    assert!(
        combined.contains(r#""GET /index.html?q=1 HTTP/1.1" 200 3 "#),
        "{combined}"
    );
    assert!(
        combined.contains(r#" "http://r/" "evil\x22 200 \x5Cx \xC3\xA9" "#),
        "{combined}"
    );
    let tail: Vec<&str> = combined.rsplitn(4, ' ').collect();
    assert!(
        tail[2].parse::<u64>().is_ok(),
        "request time in µs: {combined}"
    );
    assert!(tail[1].starts_with("web/0/cpu"), "worker: {combined}");
    assert_eq!(tail[0], "-", "no upstream: {combined}");
    let json: serde_json::Value = serde_json::from_str(&lines(&logs.join("json.log"))[0]).unwrap();
    assert_eq!(json["status"], 200);
    assert_eq!(json["query"], "a=\"b\"");
    assert_eq!(json["user_agent"], "é\"");
    assert!(json["request_us"].as_u64().is_some());
    assert!(json["upstream_us"].is_null());
    let proxied: serde_json::Value =
        serde_json::from_str(&lines(&logs.join("proxied.log"))[0]).unwrap();
    assert_eq!(proxied["status"], 200);
    assert_eq!(proxied["path"], "/until-close");
    assert!(proxied["upstream_us"].as_u64().is_some(), "{proxied}");
    // 17 bytes of body, chunked again for the HTTP/1.1 client: the framing counts, the head
    // does not.
    let bytes = proxied["bytes"].as_u64().unwrap();
    assert!((17..64).contains(&bytes), "{proxied}");
    assert!(proxied["worker"].as_str().unwrap().starts_with("app/0/cpu"));

    // logrotate: the file is moved, SIGUSR1 reopens, new lines go to the new file.
    std::fs::rename(logs.join("common.log"), logs.join("common.log.1")).unwrap();
    server.signal(libc::SIGUSR1);
    server.wait_for_log("reopen their access logs", Duration::from_secs(5));
    // The workers reopen at their next flush, a fraction of a second away.
    server.wait_until("the reopened log is used", Duration::from_secs(10), |_| {
        get(addr(p1), "/", "");
        std::thread::sleep(Duration::from_millis(250));
        !lines(&logs.join("common.log")).is_empty()
    });
    assert_eq!(lines(&logs.join("common.log.1")).len(), 2);

    // Stopping flushes what is buffered.
    let before = lines(&logs.join("combined.log")).len();
    for _ in 0..5 {
        get(addr(p2), "/", "");
    }
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0));
    assert_eq!(lines(&logs.join("combined.log")).len(), before + 5);
}

#[test]
fn a_log_rotated_under_load_loses_no_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"web\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\naccess_log = {{ path = \"logs/s.log\", format = \"common\" }}\n[[site.app]]\npool = \"web\"\nhandler = \"dynamic\"\n"
    );
    let mut server = Server::with_config(dir.path(), &config);
    let logs = dir.path().join("logs");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Two clients on keep-alive connections, each request answered before the next; the
    // log is moved and reopened three times while they run.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let progress = Counter::default();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            let progress = progress.clone();
            std::thread::spawn(move || {
                let mut c = Conn::open(addr);
                let mut answered = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                    assert_eq!(c.read_response(false).expect("an answer").status, 200);
                    answered += 1;
                    progress.bump();
                }
                answered
            })
        })
        .collect();
    // Each rotation once the load has moved on (a hundred answers) and the log of the last
    // reopening is in use (the workers reopen at their next flush), and the load goes on past
    // the last one: every file gets lines, whatever the machine's speed.
    let in_use = || {
        wait_for("the reopened log in use", Duration::from_secs(30), || {
            !lines(&logs.join("s.log")).is_empty()
        })
    };
    for k in 1..=3 {
        progress.wait_more(100, "the load answered");
        in_use();
        std::fs::rename(logs.join("s.log"), logs.join(format!("s.log.{k}"))).unwrap();
        server.signal(libc::SIGUSR1);
    }
    progress.wait_more(100, "the load answered after the last rotation");
    in_use();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0));
    let files = ["s.log.1", "s.log.2", "s.log.3", "s.log"];
    let counts: Vec<usize> = files.iter().map(|f| lines(&logs.join(f)).len()).collect();
    assert!(answered > 100, "{answered}");
    assert_eq!(
        counts.iter().sum::<usize>() as u64,
        answered,
        "lines per file {counts:?}"
    );
    // Every file got lines: the rotations happened under load.
    assert!(counts.iter().all(|&n| n > 0), "{counts:?}");
}

#[test]
fn a_log_folder_that_does_not_exist_is_one_line_at_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.toml");
    std::fs::write(
        &path,
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\naccess_log = { path = \"nowhere/s.log\" }\n[[site.app]]\npool = \"p\"\n",
    )
    .unwrap();
    let out = espalier(&["check", "-c", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(":6: key `site[0].access_log.path`"), "{err}");
    assert!(err.contains("does not exist; create it"), "{err}");
}

/// Two sites served by one thread of one proxied pool. A slow request of a is in flight when
/// b's requests arrive; each line must land in its own
/// site's log (a's once went to b's: the thread's "last routed site" was read after the
/// proxied request's `.await`). Over HTTP/1.1 and HTTP/2 (h2c).
#[test]
fn each_request_is_logged_in_its_own_sites_log_whatever_was_routed_meanwhile() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            r#"
[[pool]]
name = "one"
cpus = "0"
command = ["python3", "{slow_app}"]
environment = {{ RECORD = "seen.log", SLOW_SECONDS = "2" }}
[[site]]
name = "a"
bindings = ["http://127.0.0.1:{port}:a.example"]
access_log = {{ path = "logs/a.log", format = "common" }}
[[site.app]]
pool = "one"
[[site]]
name = "b"
bindings = ["http://127.0.0.1:{port}:b.example"]
access_log = {{ path = "logs/b.log", format = "common" }}
[[site.app]]
pool = "one"
"#,
            slow_app = test_app().display()
        ),
    );
    let seen = d.join("seen.log");
    behind_a_slow_request(
        port,
        ("a.example", "/slow-from-a"),
        &[
            ("b.example", "/fast-from-b-again", 200),
            ("b.example", "/fast-from-b", 200),
        ],
        &|path| recorded(&seen).iter().any(|p| p == path),
    );
    let (a, b) = (d.join("logs/a.log"), d.join("logs/b.log"));
    server.wait_until("every line written", Duration::from_secs(30), |_| {
        lines(&a).len() + lines(&b).len() >= 6
    });
    let (a, b) = (lines(&a), lines(&b));
    assert_eq!(a.len(), 2, "a.log: {a:?}\nb.log: {b:?}");
    assert!(a.iter().all(|l| l.contains("/slow-from-a")), "a.log: {a:?}");
    assert_eq!(b.len(), 4, "b.log: {b:?}");
    assert!(b.iter().all(|l| l.contains("fast-from-b")), "b.log: {b:?}");
}

/// Two sites of one FastCGI pool on one thread. A slow script of a runs while b's requests
/// are answered by espalier itself (a path that is no script: 404, never sent to the app) and
/// by b's own script: each line lands in its own site's log, over HTTP/1.1 and HTTP/2 (h2c).
#[test]
fn a_request_answered_here_behind_another_sites_slow_script_is_logged_in_its_own_log() {
    let fpm = common::apps::php_fpm();
    let app = common::apps::serve(
        &r#"
[[pool]]
name = "php"
cpus = "0"
command = ["{fpm}", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
directory = "php"
transport = "fastcgi"
[[site]]
name = "a"
bindings = ["http://{listen}:a.example"]
root = "php/www"
access_log = { path = "a.log", format = "common" }
[[site.app]]
pool = "php"
[[site]]
name = "b"
bindings = ["http://{listen}:b.example"]
root = "php/www"
access_log = { path = "b.log", format = "common" }
[[site.app]]
pool = "php"
"#
        .replace("{fpm}", &fpm),
    );
    let d = app._dir.path();
    std::fs::write(
        d.join("php/www/slow.php"),
        "<?php file_put_contents(__DIR__ . '/arrived.log', $_SERVER['REQUEST_URI'] . \"\\n\", FILE_APPEND); usleep(1500000); echo \"slow\\n\";",
    )
    .unwrap();
    let arrived = d.join("php/www/arrived.log");
    behind_a_slow_request(
        app.addr.port(),
        ("a.example", "/slow.php"),
        &[
            ("b.example", "/missing-from-b.txt", 404),
            ("b.example", "/index.php?from-b", 200),
        ],
        &|path| recorded(&arrived).iter().any(|p| p == path),
    );
    let (a, b) = (d.join("a.log"), d.join("b.log"));
    app.server
        .wait_until("every line written", Duration::from_secs(30), |_| {
            lines(&a).len() + lines(&b).len() >= 6
        });
    let (a, b) = (lines(&a), lines(&b));
    assert_eq!(a.len(), 2, "a.log: {a:?}\nb.log: {b:?}");
    assert!(a.iter().all(|l| l.contains("/slow.php")), "a.log: {a:?}");
    assert_eq!(b.len(), 4, "a.log: {a:?}\nb.log: {b:?}");
    assert!(b.iter().all(|l| l.contains("from-b")), "b.log: {b:?}");
    assert_eq!(
        b.iter().filter(|l| l.contains("\" 404 ")).count(),
        2,
        "{b:?}"
    );
}
