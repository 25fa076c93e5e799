//! Hardening, round two, on the real binary: what one tenant (a local user, or app code
//! running as a pool's user) could do to another, and what a careless operator's upgrade did.
//! Each test reproduces an attack that once worked: a runtime folder made beforehand by
//! another user, a hand-off message forged without espalier's key, uploads run by FastCGI,
//! a binary replaced on disk, and blocking-socket apps under activation.

use crate::common;

use common::apps::{php_fpm, serve};
use common::*;
use espalier::server::status::{Role, WorkerState};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn is_root() -> bool {
    espalier::os::identity::effective_uid() == 0
}

/// Two pools on one port by host name: each worker thread has a hand-off socket.
fn shared_port_config(port: u16) -> String {
    format!(
        r#"
[[pool]]
name = "a"
[[pool]]
name = "b"
[[site]]
name = "a"
bindings = ["http://127.0.0.1:{port}:a.test"]
[[site.app]]
pool = "a"
handler = "dynamic"
[[site]]
name = "b"
bindings = ["http://127.0.0.1:{port}:b.test"]
[[site.app]]
pool = "b"
handler = "dynamic"
"#
    )
}

#[test]
fn a_runtime_folder_made_beforehand_by_another_user_is_refused() {
    if !is_root() {
        skip("making another user's folder needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let port = free_port();
    let (config, _) = with_own_admin(&shared_port_config(port));
    let conf = tmp.join("espalier.toml");
    std::fs::write(&conf, config).unwrap();
    std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o644)).unwrap();
    // espalier runs as nobody; its runtime base is then `$TMPDIR/espalier-65534`. Made first
    // by root (another user), open to all: the server must refuse it, not use it.
    let nobody = espalier::os::identity::lookup("nobody", None).unwrap();
    let base = tmp.join(format!("espalier-{}", nobody.uid));
    std::fs::create_dir(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = [
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "--",
    ];
    let env = [("TMPDIR", tmp.to_str().unwrap()), ("XDG_RUNTIME_DIR", "")];
    let out = Command::new("timeout")
        .arg("30")
        .args(as_nobody)
        .arg(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "-c", conf.to_str().unwrap()])
        .envs(env)
        .current_dir(tmp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{} belongs to uid 0", base.display())),
        "{err}"
    );
    // Nothing of the server's was put in it.
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);

    // Without the plant, the server makes the base itself (its own, 0711) and its own
    // folder in it under a random name, holding the hand-off sockets, and removes that
    // folder when it stops.
    std::fs::remove_dir(&base).unwrap();
    let mut server = Server::start_with(&as_nobody, &["-c", conf.to_str().unwrap()], tmp, &env);
    let meta = std::fs::symlink_metadata(&base).unwrap();
    assert!(meta.is_dir());
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (nobody.uid, 0o711));
    let masters: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("master-")
        })
        .collect();
    assert_eq!(masters.len(), 1, "{masters:?}");
    let name = masters[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(!name.contains(&server.pid().to_string()), "{name}");
    let meta = std::fs::symlink_metadata(&masters[0]).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (nobody.uid, 0o711));
    let sockets = std::fs::read_dir(&masters[0])
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            n.to_str().unwrap().starts_with("handoff-")
        })
        .count();
    assert!(
        sockets >= 2,
        "no hand-off sockets in {}",
        masters[0].display()
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for host in ["a.test", "b.test"] {
        let r = get_host(addr, host);
        assert_eq!(r.status, 200, "{}", server.log_text());
    }
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(20)), Some(0));
    assert!(
        !masters[0].exists(),
        "{} is left behind",
        masters[0].display()
    );
}

fn get_host(addr: std::net::SocketAddr, host: &str) -> Response {
    let mut c = Conn::open(addr);
    c.send(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes());
    c.read_response(false).expect("a response")
}

/// The paths of the hand-off sockets the master `pid` holds (from its descriptors' inodes
/// and /proc/net/unix).
fn handoff_paths(pid: u32) -> Vec<PathBuf> {
    let mut inodes = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        if let Ok(link) = std::fs::read_link(e.unwrap().path()) {
            if let Some(ino) = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
            {
                inodes.push(ino.to_string());
            }
        }
    }
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (ino, path) = (f.get(6)?, f.get(7)?);
            (inodes.iter().any(|i| i == ino) && path.contains("/handoff-"))
                .then(|| PathBuf::from(path))
        })
        .collect()
}

#[test]
fn a_handoff_message_without_the_masters_key_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(dir.path(), &shared_port_config(port));
    let paths = handoff_paths(server.pid());
    assert!(paths.len() >= 2, "{paths:?}");
    // A connection of our own, to pass as if it were a client's: whatever answers on it
    // would show that the forged message was taken.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (passed, _) = listener.accept().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // What app code of a pool's user can write: the old message format, and the new one with
    // a guessed key, each naming a forged client.
    let forged = [
        format!("espalier-handoff/2 {addr} 0 203.0.113.7:4000\n"),
        format!(
            "espalier-handoff/3 {} {addr} 0 203.0.113.7:4000\n",
            "0".repeat(32)
        ),
    ];
    for path in &paths {
        let sender = std::os::unix::net::UnixDatagram::unbound().unwrap();
        sender.connect(path).unwrap();
        for header in &forged {
            let request = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
            espalier::os::fdpass::send_with_fd(
                sender.as_raw_fd(),
                passed.as_raw_fd(),
                &[header.as_bytes(), request],
            )
            .unwrap();
        }
    }
    drop(passed);
    // Every receiver dropped its copy: the connection ends with no answer.
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let n = client.read_to_end(&mut got).expect("closed, not timed out");
    assert_eq!(
        n,
        0,
        "a forged hand-off was served: {}",
        String::from_utf8_lossy(&got)
    );
    // The server serves on, its own hand-offs working.
    for host in ["a.test", "b.test"] {
        let r = get_host(addr, host);
        assert_eq!(r.status, 200, "{}", server.log_text());
    }
}

/// A FastCGI site whose root holds a script, uploads that hold PHP, a text file with PHP in
/// it and a symlink to a script outside the root; `php-cgi -b` runs whatever it is named, so
/// espalier must name it only scripts (tests/front_controller.rs has the front controller).
#[test]
fn fastcgi_runs_only_scripts_with_the_apps_extensions_under_root() {
    need_tools("php-cgi:php-cgi", "php-cgi");
    let evil = "<?php echo 'EXECUTED'; ?>\n";
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let root = d.join("www");
    std::fs::create_dir_all(root.join("uploads")).unwrap();
    std::fs::write(root.join("index.php"), "<?php echo 'index ran'; ?>\n").unwrap();
    std::fs::write(root.join("uploads/x.jpg"), evil).unwrap();
    std::fs::write(root.join("readme.txt"), evil).unwrap();
    std::fs::write(d.join("outside.php"), evil).unwrap();
    std::os::unix::fs::symlink(d.join("outside.php"), root.join("out.php")).unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            r#"
[[pool]]
name = "php"
command = ["php-cgi", "-b", "127.0.0.1:{{port}}"]
transport = "fastcgi"
[[site]]
name = "php"
bindings = ["http://127.0.0.1:{port}"]
root = "www"
[[site.app]]
pool = "php"
"#
        ),
    );
    let app = common::apps::AppServer {
        server,
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    };
    let r = get(app.addr, "/index.php", "");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "index ran"),
        "{}",
        app.server.log_text()
    );
    let r = get(app.addr, "/", "");
    assert_eq!(r.text(), "index ran");
    // Files under the root are files (sent as bytes, never run); folders without an index
    // script are the static handler's (403 without an index).
    for (path, status) in [
        ("/uploads/x.jpg", 200),
        ("/uploads/x.jpg/.php", 404),
        ("/uploads/x.jpg/a.php", 404),
        ("/uploads/x.jpg%00.php", 400),
        ("/uploads/%2e%2e/readme.txt", 200),
        ("/readme.txt", 200),
        ("/out.php", 403),
        ("/uploads/", 403),
    ] {
        let r = get(app.addr, path, "");
        let text = r.text();
        assert!(!ran_planted_script(&text), "{path} ran: {text}");
        assert_eq!(r.status, status, "{path}");
        if status == 200 {
            assert_eq!(text, evil, "{path} is sent as it is");
        }
    }
}

/// php-fpm with three children and eight keep-alive clients: a FastCGI connection held idle
/// between requests pinned a child each, and the clients beyond three got only 504s.
#[test]
fn kept_client_connections_do_not_starve_fastcgi_children() {
    let fpm = php_fpm();
    let app = serve(
        &r#"
[[pool]]
name = "php"
command = ["{fpm}", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
directory = "php"
transport = "fastcgi"
response_timeout = "5s"
[[site]]
name = "php"
bindings = ["http://{listen}"]
root = "php/www"
[[site.app]]
pool = "php"
"#
        .replace("{fpm}", &fpm),
    );
    let conf = app._dir.path().join("php/php-fpm.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("pm.max_children = 4"));
    std::fs::write(
        &conf,
        text.replace("pm.max_children = 4", "pm.max_children = 3"),
    )
    .unwrap();
    // Restart php-fpm with three children (a recycle reads its config again). The recycle
    // replaces the front worker as well as the app; both are waited for, by their pids, so
    // that no client below connects to a process about to drain.
    let pids = |s: &Server| -> Vec<Option<u32>> {
        let status = s.status();
        let workers = status.pools.iter().flat_map(|p| &p.workers);
        workers.map(|w| w.pid).collect()
    };
    let before = pids(&app.server);
    let (code, _) = app.server.post("/pools/php/recycle");
    assert_eq!(code, 200);
    // The old php-fpm (four children) and the old front worker drain and exit; only then are
    // three children all there is, and the front worker knows of the new process alone.
    app.server
        .wait_until("both processes replaced", Duration::from_secs(60), |s| {
            let status = s.status();
            let workers = status.pools.iter().flat_map(|p| &p.workers);
            let now = workers.clone().map(|w| w.pid).collect::<Vec<_>>();
            let apps = workers.clone().filter(|w| w.role == Role::App).count();
            apps == 1
                && now.len() == before.len()
                && now.iter().zip(&before).all(|(n, b)| n.is_some() && n != b)
                && workers
                    .clone()
                    .all(|w| w.draining.is_empty() && w.state == WorkerState::Running)
        });
    let mut conns: Vec<Conn> = (0..8).map(|_| Conn::open(app.addr)).collect();
    for round in 0..4 {
        for (k, c) in conns.iter_mut().enumerate() {
            c.send(b"GET /index.php HTTP/1.1\r\nHost: shop.example\r\n\r\n");
            let r = (c.read_response(false)).unwrap_or_else(|| {
                panic!(
                    "client {k}, round {round}: no answer; log:\n{}",
                    app.server.log_text()
                )
            });
            assert_eq!(r.status, 200, "client {k}, round {round}: {}", r.text());
        }
    }
}

#[test]
fn workers_start_after_the_binary_is_replaced_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bin = d.join("espalier");
    copy_espalier(&bin);
    let port = free_port();
    let (config, admin) = with_own_admin(&format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    ));
    std::fs::write(d.join("espalier.toml"), config).unwrap();
    let mut server = Server::start_program(&bin, &[], &["-c", "espalier.toml"], d, &[]);
    server.admin = Some(admin);
    // An upgrade: the file is replaced by another (here one that cannot run at all).
    let new = d.join("espalier.new");
    std::fs::write(&new, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&new, &bin).unwrap();
    let before = server.workers();
    assert_eq!(before.len(), 1);
    unsafe { libc::kill(before[0].1 as i32, libc::SIGKILL) };
    server.wait_until("a new worker", Duration::from_secs(60), |s| {
        s.workers().iter().any(|w| w.1 != before[0].1)
    });
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(addr, "/", "").status, 200, "{}", server.log_text());
    // Started from the held descriptor, it still shows the path it was installed at (for ps,
    // pgrep -f and service managers), not /proc/self/fd/N.
    let pid = server.workers()[0].1;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap();
    assert_eq!(argv0, bin.as_os_str().as_encoded_bytes());
}

/// An activated app that accepts in a blocking loop, as Perl's HTTP::Daemon does; it says
/// whether the socket it was passed is blocking.
const BLOCKING_APP: &str = r#"
import socket
s = socket.socket(fileno=3)
while True:
    c, _ = s.accept()
    c.recv(65536)
    body = b"blocking=%s\n" % str(s.getblocking()).encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    c.close()
"#;

#[test]
fn activated_apps_are_passed_blocking_sockets_as_systemd_passes_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("app.py"), BLOCKING_APP).unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            r#"
[[pool]]
name = "app"
command = ["python3", "app.py"]
transport = "activation"
[[site]]
name = "app"
bindings = ["http://127.0.0.1:{port}"]
[[site.app]]
pool = "app"
"#
        ),
    );
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..3 {
        let r = get(addr, "/", "");
        assert_eq!(
            (r.status, r.text().as_str()),
            (200, "blocking=True\n"),
            "{}",
            server.log_text()
        );
    }
    // The master answers for the pool when it is stopped: the shared socket is made
    // non-blocking again for it, so its event loop never blocks on accept.
    let (code, _) = server.post("/pools/app/stop");
    assert_eq!(code, 200);
    // Until it is gone, the signalled app still shares the listening socket: woken in accept
    // with a connection queued, a process already killed takes it and dies holding it (the
    // kernel looks at the queue before the signal) — as with systemd, inherent in activation.
    server.wait_until("the pool stopped", Duration::from_secs(30), |s| {
        s.pool_gone("app", espalier::server::status::PoolState::Stopped)
    });
    let r = get(addr, "/", "");
    assert_eq!(r.status, 503);
    let (code, _) = server.post("/pools/app/start");
    assert_eq!(code, 200);
    server.wait_until("the app back", Duration::from_secs(60), |_| {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out.ends_with("blocking=True\n")
    });
    assert_eq!(get(addr, "/", "").status, 200);
}

/// Idle admin connections of any local user once filled the master's descriptor table (at
/// `ulimit -n 512` a killed worker could not be restarted): now at most a few are held, each
/// for a bounded time, and the rest closed at once.
#[test]
fn idle_admin_connections_cannot_starve_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    );
    let (config, admin) = with_own_admin(&config);
    std::fs::write(dir.path().join("espalier.toml"), config).unwrap();
    let mut server = Server::start_with(
        &["prlimit", "--nofile=128:128", "--"],
        &["-c", "espalier.toml"],
        dir.path(),
        &[],
    );
    server.admin = Some(admin.clone());
    let admin: std::net::SocketAddr = admin.parse().unwrap();
    // Far more idle connections than the master's descriptors could hold.
    let mut idle: Vec<std::net::TcpStream> = (0..200)
        .filter_map(|_| std::net::TcpStream::connect(admin).ok())
        .collect();
    assert!(idle.len() >= 100, "{}", idle.len());
    let mut closed = 0;
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if matches!(c.read(&mut [0u8; 1]), Ok(0)) {
            closed += 1;
        }
    }
    assert!(
        closed >= idle.len() - 40,
        "only {closed} of {} closed",
        idle.len()
    );
    // With the bound full of idle connections, the operator still gets in: the oldest silent
    // one gives way (issue #39, item 13; before, every new connection was closed at once).
    // Fresh ones, so that none has reached its time limit when the commands run.
    let fresh: Vec<std::net::TcpStream> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(admin).ok())
        .collect();
    assert!(fresh.len() >= 40, "{}", fresh.len());
    for args in [
        ["status", "--admin", &admin.to_string()],
        ["reload", "--admin", &admin.to_string()],
    ] {
        let out = espalier(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(fresh);
    // With the others still open, a killed worker is replaced.
    let before = server.workers();
    unsafe { libc::kill(before[0].1 as i32, libc::SIGKILL) };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    server.wait_until("the worker replaced", Duration::from_secs(60), |_| {
        let log = server.log_text();
        // A connection the killed worker had taken gets no answer: asked again, not failed.
        let answered = || {
            let mut stream = std::net::TcpStream::connect(addr).ok()?;
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .ok()?;
            let ask = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
            stream.write_all(ask).ok()?;
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            Some(answer.starts_with(b"HTTP/1.1 200"))
        };
        log.matches("started: pid").count() >= 2 && answered() == Some(true)
    });
    assert!(
        !server.log_text().contains("Too many open files"),
        "{}",
        server.log_text()
    );
    drop(idle);
    // A web page whose name resolves to loopback (DNS rebinding) cannot read the status.
    let mut c = Conn::open(admin);
    c.send(b"GET /status HTTP/1.1\r\nHost: evil.example:9180\r\nConnection: close\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 421);
}

/// The admin endpoint holds each connection after its answer until the client closes (a
/// large answer is never left to an orphaned socket), but a client that asks and never
/// closes holds nothing against the operator: answered, its connection gives way as a
/// silent one does, and the endpoint closes it itself after its linger.
#[test]
fn clients_that_ask_and_never_close_cannot_keep_the_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"),
    );
    let admin: std::net::SocketAddr = server.admin.clone().unwrap().parse().unwrap();
    // Past the bound (32): each asks, reads its whole answer and keeps its connection.
    let mut holders: Vec<std::net::TcpStream> = Vec::new();
    for _ in 0..40 {
        let mut c = std::net::TcpStream::connect(admin).unwrap();
        c.write_all(b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut head = [0u8; 12];
        c.read_exact(&mut head).unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
        holders.push(c);
    }
    let out = espalier(&["status", "--admin", &admin.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The last holder was not given way (the older ones were): the endpoint ends it itself,
    // within its linger (10 s), once the client has everything.
    let last = holders.last_mut().unwrap();
    let mut rest = Vec::new();
    last.read_to_end(&mut rest).unwrap();
    assert!(String::from_utf8_lossy(&rest).contains("ready"), "{rest:?}");
}

/// The bundled php-fpm example run as a pool `user`: php-fpm opens its `error_log =
/// /proc/self/fd/2`, a pipe the root master made, which the pool's user could not reopen.
#[test]
fn the_php_fpm_example_starts_as_a_pool_user() {
    if !is_root() {
        skip("changing identity needs root");
        return;
    }
    let fpm = php_fpm();
    let app = serve(
        &r#"
[[pool]]
name = "php"
user = "www-data"
command = ["{fpm}", "--nodaemonize", "--fpm-config", "php-fpm.conf"]
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
    // The scripts' folder must be reachable by www-data (the test's temporary folder is not).
    std::fs::set_permissions(app._dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = get(app.addr, "/index.php", "");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), app.server.log_text());
    assert!(r.text().starts_with("hello from PHP"), "{}", r.text());
}

/// `check` says when another process holds a binding's port (once it said ok, and `serve`
/// then failed).
#[test]
fn check_warns_of_a_port_another_process_holds() {
    let dir = tempfile::tempdir().unwrap();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let conf = dir.path().join("espalier.toml");
    std::fs::write(&conf, format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n")).unwrap();
    let out = espalier(&["check", "-c", conf.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port} is in use by another process")),
        "{err}"
    );
    drop(holder);
    let out = espalier(&["check", "-c", conf.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("in use"));
}
