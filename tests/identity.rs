//! A separate identity per pool, on the real binary started as root: each pool's workers and
//! app processes run as its `user`/`group` with `NoNewPrivs`, so a worker or app of pool A
//! cannot read pool B's files; connections are still handed between the pools of a shared
//! port (their users differ), and the access log the master creates belongs to its pool's user.
//! Uses Debian's stock accounts `nobody` and `daemon`.

use crate::common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

fn status_line(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

#[test]
fn each_pool_runs_as_its_user_and_cannot_read_anothers_files() {
    if espalier::os::identity::effective_uid() != 0 {
        skip("changing identity needs root");
        return;
    }
    let nobody = espalier::os::identity::lookup("nobody", None).unwrap();
    let daemon = espalier::os::identity::lookup("daemon", None).unwrap();
    let www_data = espalier::os::identity::lookup("root", Some("www-data")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Pool a's files (readable by all); pool b's, for daemon alone.
    std::fs::create_dir(d.join("a")).unwrap();
    std::fs::write(d.join("a/index.html"), "a's page\n").unwrap();
    std::fs::create_dir(d.join("b")).unwrap();
    std::fs::write(d.join("b/secret.txt"), "b's secret\n").unwrap();
    std::fs::set_permissions(d.join("b"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(
        d.join("b/secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    chown(&d.join("b"), daemon.uid, daemon.gid);
    chown(&d.join("b/secret.txt"), daemon.uid, daemon.gid);
    // A path in a's tree that leads to b's secret: only the file system's permissions stop it.
    std::os::unix::fs::symlink(d.join("b/secret.txt"), d.join("a/peek.txt")).unwrap();
    std::fs::create_dir(d.join("logs")).unwrap();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/whoami_app.py");
    let port = free_port();
    let config = format!(
        r#"
[[pool]]
name = "a"
user = "nobody"
group = "www-data"
[[pool]]
name = "b"
user = "daemon"
[[pool]]
name = "app"
user = "nobody"
command = ["python3", "{app}"]
environment = {{ SECRET = "{secret}" }}
health = "/healthz"

[[site]]
name = "a"
bindings = ["http://127.0.0.1:{port}:a.test"]
root = "a"
follow_symlinks = true
access_log = {{ path = "logs/a.log", format = "common" }}
[[site.app]]
pool = "a"
[[site]]
name = "b"
bindings = ["http://127.0.0.1:{port}:b.test"]
root = "b"
[[site.app]]
pool = "b"
[[site]]
name = "app"
bindings = ["http://127.0.0.1:{port}:app.test"]
[[site.app]]
pool = "app"
"#,
        app = app.display(),
        secret = d.join("b/secret.txt").display()
    );
    let server = Server::with_config(d, &config);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let get_host = |host: &str, path: &str| {
        let mut c = Conn::open(addr);
        c.send(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        c.read_response(false).expect("an answer")
    };

    // Every worker runs as its pool's user and group, with no way back to root.
    let workers = server.workers();
    let names: Vec<&str> = workers.iter().map(|w| w.0.as_str()).collect();
    for pool in ["a/", "b/", "app/"] {
        assert!(names.iter().any(|n| n.starts_with(pool)), "{names:?}");
    }
    for (name, pid, _) in workers {
        let (uid, gid, groups) = if name.starts_with("a/") || name.starts_with("app/") {
            (
                nobody.uid,
                if name.starts_with("a/") {
                    www_data.gid
                } else {
                    nobody.gid
                },
                None,
            )
        } else {
            (daemon.uid, daemon.gid, Some(daemon.gid))
        };
        let all = |id: u32| format!("{id} {id} {id} {id}");
        assert_eq!(status_line(pid, "Uid"), all(uid), "{name}");
        assert_eq!(status_line(pid, "Gid"), all(gid), "{name}");
        assert_eq!(status_line(pid, "NoNewPrivs"), "1", "{name}");
        if let Some(g) = groups {
            assert_eq!(status_line(pid, "Groups"), g.to_string(), "{name}");
        }
    }

    // The dispatcher in front of the shared port, which reads every visitor's request head,
    // is no pool's user and no root: `[server] dispatcher_user`, `nobody` by default.
    let dispatcher = server.dispatcher_workers();
    assert!(!dispatcher.is_empty(), "a shared port has the dispatcher");
    for (name, pid, _) in dispatcher {
        let all = |id: u32| format!("{id} {id} {id} {id}");
        assert_eq!(status_line(pid, "Uid"), all(nobody.uid), "{name}");
        assert_eq!(status_line(pid, "NoNewPrivs"), "1", "{name}");
    }

    // Each pool serves its own files, handed its connections by the dispatcher.
    for _ in 0..4 {
        let r = get_host("a.test", "/");
        assert_eq!((r.status, r.text()), (200, "a's page\n".to_string()));
        let r = get_host("b.test", "/secret.txt");
        assert_eq!((r.status, r.text()), (200, "b's secret\n".to_string()));
    }
    // Pool a's worker cannot read b's file, even by a path in its own tree.
    let r = get_host("a.test", "/peek.txt");
    assert!(
        matches!(r.status, 403 | 404),
        "a read b's secret: {}",
        r.status
    );
    assert!(!r.text().contains("secret"));
    // Neither can pool app's application, running as nobody.
    let r = get_host("app.test", "/");
    let text = r.text();
    assert!(
        text.starts_with(&format!("uid={} gid={} ", nobody.uid, nobody.gid)),
        "{text}"
    );
    assert!(
        text.contains("no_new_privs=1") && text.contains("secret=denied"),
        "{text}"
    );

    // The access log was created for pool a's user, who writes to it.
    let log = d.join("logs/a.log");
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), nobody.uid);
    server.wait_until("a's lines in its log", Duration::from_secs(5), |_| {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 5)
    });
}
