//! Application pools with real applications by socket activation — gunicorn and uvicorn from
//! Debian's packages (installed by the test setup, as the QEMU test installs QEMU) — and what
//! every app pool shares: recycling, rapid-fail, reload, cgroups, and the failures a user
//! meets. Every server and app a test starts, the test stops.

use crate::common;

use common::apps::*;
use common::*;
use espalier::server::status::Role;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

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
    // The exited process is not taken for one that would not stop (its pid is reaped).
    assert!(!err.contains("did not stop in time"), "{err}");
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

#[test]
fn reload_with_a_changed_environment_replaces_the_app_processes() {
    let app = serve(
        r#"
[[pool]]
name = "wsgi"
command = ["gunicorn", "--workers", "1", "--graceful-timeout", "2", "app:app"]
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
    // gunicorn stops gracefully on SIGTERM, within its graceful_timeout (2 s here, 30 s by
    // default): its worker may sit in accept() on the (blocking, as systemd passes them)
    // socket after the new process won a connection it was woken for, until the next one
    // comes or that timeout.
    app.server
        .wait_until("the old app is gone", Duration::from_secs(90), |_| {
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
        app.server.wait_for_log(
            "cpu_limit is not applied",
            std::time::Duration::from_secs(10),
        );
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

#[test]
fn gunicorn_given_a_socket_path_is_reached_on_it_without_saying_so() {
    // No `upstream` key: the command names {socket}, so the pool listens on unix sockets.
    let app = serve(
        r#"
[[pool]]
name = "wsgi"
processes = 2
command = ["gunicorn", "--workers", "1", "--bind", "unix:{socket}", "app:app"]
directory = "wsgi"
transport = "proxy"
health = "/healthz"

[[site]]
name = "shop"
bindings = ["http://{listen}"]
[[site.app]]
pool = "wsgi"
"#,
    );
    unix_endpoints(&app.server.status(), 2);
    for _ in 0..10 {
        let r = get(app.addr, "/", "");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().starts_with("hello from gunicorn"), "{}", r.text());
    }
}
