//! A binary upgrade under load (#57, item 3): `espalier upgrade` starts the binary now on disk
//! as a new master on the running one's sockets; the old one drains and exits once the new
//! one serves. Paced keep-alive and new-connection requests run throughout; a slow request to
//! an app, a half-sent upload and a WebSocket are in flight at the moment of the upgrade, and
//! each finishes with the old master: none fails. A broken binary (it exits
//! at once) is refused and the running master goes on. Every process a test starts, the test
//! stops (the new master outlives the one the harness started: a guard stops it).

use crate::common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Stops the master of `pid` (the one an upgrade started) when dropped, and waits for it.
struct Master(Option<u32>);

impl Drop for Master {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            wait_for("the new master to stop", Duration::from_secs(20), || {
                !pid_alive(pid)
            });
        }
    }
}

/// Requests every 2 ms until `stop`, on a kept-alive connection (a new one when the server
/// closes it, as a draining worker does) and, every tenth, on a fresh one. A request on a
/// reused connection the server closed before answering is sent again on a new connection,
/// as browsers do; a fresh connection's request that is not answered 200 is a failure. The
/// requests answered (also counted in `served`, for the test to wait on), those sent again,
/// and the failures.
fn paced(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
) -> (u64, u64, Vec<String>) {
    let (mut answered, mut again, mut failed) = (0, 0, Vec::new());
    let mut kept: Option<Conn> = None;
    let ask = |c: &mut Conn| {
        c.send(b"GET / HTTP/1.1\r\nHost: web.example\r\n\r\n");
        c.read_response(false)
    };
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let reused = kept.is_some() && n % 10 != 0;
        let mut conn = match kept.take().filter(|_| reused) {
            Some(c) => c,
            None => Conn::open(addr),
        };
        let mut answer = ask(&mut conn);
        if answer.is_none() && reused {
            again += 1;
            conn = Conn::open(addr);
            answer = ask(&mut conn);
        }
        match answer {
            Some(r) if r.status == 200 => {
                answered += 1;
                served.fetch_add(1, Ordering::Relaxed);
                let closing = r
                    .header("connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                if !closing {
                    kept = Some(conn);
                }
            }
            Some(r) => failed.push(format!("request {n}: {}", r.status)),
            None => failed.push(format!("request {n}: no answer")),
        }
        // The load's pace (a request every 2 ms), not a wait for an event.
        std::thread::sleep(Duration::from_millis(2));
    }
    (answered, again, failed)
}

/// A WebSocket to the Node example app's echo, open: the 101 read.
fn websocket(addr: SocketAddr) -> Conn {
    let mut c = Conn::open(addr);
    c.send(b"GET /ws HTTP/1.1\r\nHost: ws.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    let switched = c.read_response(true).expect("the 101");
    assert_eq!(switched.status, 101);
    c
}

/// Sends `text` as a masked text frame and reads the echo's payload.
fn echo(c: &mut Conn, text: &str) -> String {
    use std::io::Read;
    let mask = [7u8, 1, 2, 3];
    let mut frame = vec![0x81, 0x80 | text.len() as u8];
    frame.extend(mask);
    frame.extend(text.bytes().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    c.send(&frame);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = [0u8; 2];
    c.stream.read_exact(&mut head).expect("an echo");
    let mut payload = vec![0u8; (head[1] & 0x7f) as usize];
    c.stream.read_exact(&mut payload).expect("its payload");
    String::from_utf8_lossy(&payload).into_owned()
}

#[test]
fn a_new_binary_takes_over_under_load_and_a_broken_one_is_refused() {
    need_tools("node:nodejs", "node");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "hello\n").unwrap();
    std::fs::create_dir_all(d.join("bin")).unwrap();
    let bin = d.join("bin/espalier");
    copy_espalier(&bin);
    let port = free_port();
    let (config, admin) = with_own_admin(&format!(
        "[[pool]]\nname = \"web\"\n[[pool]]\nname = \"py\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ SLOW_SECONDS = \"3\", RECORD = \"{}\" }}\n[[site]]\nname = \"web\"\nbindings = [\"http://127.0.0.1:{port}:web.example\"]\nroot = \"www\"\n[[site.app]]\npool = \"web\"\n[[site]]\nname = \"py\"\nbindings = [\"http://127.0.0.1:{port}:py.example\"]\n[[site.app]]\npool = \"py\"\n[[pool]]\nname = \"ws\"\ncommand = [\"node\", \"server.js\"]\ndirectory = \"{}\"\n[[site]]\nname = \"ws\"\nbindings = [\"http://127.0.0.1:{port}:ws.example\"]\n[[site.app]]\npool = \"ws\"\n[[pool]]\nname = \"up\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ MARKS = \"{}\" }}\n[[site]]\nname = \"up\"\nbindings = [\"http://127.0.0.1:{port}:up.example\"]\n[[site.app]]\npool = \"up\"\n",
        test_app().display(),
        d.join("asked.txt").display(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/apps/node")
            .display(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/apps/upload_app.py")
            .display(),
        d.display()
    ));
    let path = d.join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let c = path.to_str().unwrap();
    let mut server = Server::start_program(&bin, &[], &["-c", c], d, &[]);
    server.admin = Some(admin.clone());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let before: Vec<u32> = server.workers().iter().map(|w| w.1).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || paced(addr, stop, served))
    };
    wait_for("the load to be answered", Duration::from_secs(20), || {
        served.load(Ordering::Relaxed) >= 50
    });
    // A WebSocket open across the upgrade: its old worker keeps it while it drains.
    let mut ws = websocket(addr);
    assert_eq!(echo(&mut ws, "before"), "before");
    // An upload half sent, its first bytes at the app.
    let mut upload = Conn::open(addr);
    upload.send(b"POST /upload HTTP/1.1\r\nHost: up.example\r\nContent-Length: 200000\r\nX-Mark-After: 1000\r\n\r\n");
    upload.send(&[b'u'; 100_000]);
    wait_for(
        "the upload to reach the app",
        Duration::from_secs(20),
        || d.join("upload").exists(),
    );
    let slow = std::thread::spawn(move || get_host(addr, "py.example", "/slow"));
    // In flight at the old master's app when the upgrade starts.
    wait_for(
        "the app to take the slow request",
        Duration::from_secs(20),
        || std::fs::read_to_string(d.join("asked.txt")).is_ok_and(|t| t.contains("/slow")),
    );
    // The new binary: a copy put in place as a package would (written beside, renamed over).
    copy_espalier(&d.join("bin/espalier.new"));
    std::fs::rename(d.join("bin/espalier.new"), &bin).unwrap();
    let said = espalier_ok(&["upgrade", "-c", c]);
    let pid: u32 = said
        .split("(pid ")
        .nth(1)
        .and_then(|p| p.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    let _new = Master(Some(pid));
    // The new master serves; the old one drains, the WebSocket still its own, until it ends.
    assert_eq!(echo(&mut ws, "across"), "across");
    ws.send(&[0x88, 0x80, 0, 0, 0, 0]);
    drop(ws);
    // The upload's second half, to the old worker and app that took the first.
    upload.send(&[b'u'; 100_000]);
    let uploaded = upload.read_response(false).expect("the upload's answer");
    assert_eq!(uploaded.status, 200);
    assert!(
        uploaded.text().starts_with("len=200000 "),
        "{}",
        uploaded.text()
    );
    assert_eq!(
        server.wait_exit(Duration::from_secs(30)),
        Some(0),
        "{}",
        server.log_text()
    );
    let slow = slow.join().unwrap();
    assert_eq!(
        (slow.status, slow.text()),
        (200, "app\n".into()),
        "in flight across the upgrade"
    );
    // The load goes on against the new master for a moment, then stops.
    let before_stop = served.load(Ordering::Relaxed);
    wait_for(
        "the new master to answer the load",
        Duration::from_secs(20),
        || served.load(Ordering::Relaxed) >= before_stop + 50,
    );
    stop.store(true, Ordering::Relaxed);
    let (answered, again, failed) = load.join().unwrap();
    assert!(
        failed.is_empty(),
        "{failed:?} of {answered}; log:\n{}",
        server.log_text()
    );
    assert!(answered > 100, "{answered} answered");
    eprintln!("upgrade under load: {answered} requests answered ({again} sent again on a new connection after a kept one closed unanswered), none failed");
    let after: Vec<u32> = server.workers().iter().map(|w| w.1).collect();
    assert!(
        after.iter().all(|p| !before.contains(p)),
        "{before:?} → {after:?}"
    );
    server.wait_for_log(
        "upgrade: serving on the previous master's sockets",
        Duration::from_secs(5),
    );

    // A broken binary: refused, and the new master goes on serving with the same workers.
    std::fs::write(
        d.join("bin/broken"),
        "#!/bin/sh\necho broken binary >&2\nexit 3\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.join("bin/broken"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(d.join("bin/broken"), &bin).unwrap();
    let refused = espalier(&["upgrade", "-c", c]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("upgrade refused: the new master exited before it served"),
        "{err}"
    );
    assert_eq!(get_host(addr, "web.example", "/").text(), "hello\n");
    assert_eq!(
        server.workers().iter().map(|w| w.1).collect::<Vec<_>>(),
        after
    );
    assert!(pid_alive(pid));
}
