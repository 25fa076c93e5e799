//! espalier under systemd, without systemd: the test plays the service manager — it creates
//! the notify socket, starts `serve` with `NOTIFY_SOCKET`, and reads what the master says
//! through a reload and a stop.

mod common;

use common::*;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

fn next_message(sock: &UnixDatagram, within: Duration) -> String {
    sock.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn the_master_speaks_sd_notify_through_start_reload_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&notify_path).unwrap();
    let port = free_port();
    let (config, _) = with_own_admin(&format!(
        "[[pool]]\nname = \"web\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"web\"\n"
    ));
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let mut server = Server::start_env(
        &["-c", path.to_str().unwrap()],
        dir.path(),
        &[("NOTIFY_SOCKET", notify_path.to_str().unwrap())],
    );
    let ready = next_message(&sock, Duration::from_secs(10));
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains("STATUS=1 process(es) serving in 1 pool(s)"),
        "{ready}"
    );
    // Only the master speaks: its workers do not inherit the socket.
    let worker = server.log_text();
    let pid: u32 = worker
        .lines()
        .find_map(|l| l.split("started: pid ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .expect("a worker pid in the log");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("NOTIFY_SOCKET"));

    let before = Instant::now();
    server.signal(libc::SIGHUP);
    let reloading = next_message(&sock, Duration::from_secs(10));
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    let usec: u64 = reloading
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .unwrap()
        .parse()
        .unwrap();
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now = ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000;
    assert!(
        usec <= now && now - usec <= before.elapsed().as_micros() as u64 + 1_000_000,
        "MONOTONIC_USEC={usec}, now {now}"
    );
    let ready = next_message(&sock, Duration::from_secs(10));
    assert!(ready.starts_with("READY=1\n"), "{ready}");

    server.signal(libc::SIGTERM);
    let stopping = next_message(&sock, Duration::from_secs(10));
    assert!(stopping.starts_with("STOPPING=1\n"), "{stopping}");
    assert_eq!(server.wait_exit(Duration::from_secs(15)), Some(0));
}

#[test]
fn the_unit_file_asks_for_what_the_master_does() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dist/espalier.service"
    ))
    .unwrap();
    for line in [
        "Type=notify",
        "NotifyAccess=main",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Delegate=yes",
        "LimitNOFILE=",
        "ExecStartPre=/usr/local/bin/espalier check",
    ] {
        assert!(unit.lines().any(|l| l.starts_with(line)), "{line} missing");
    }
    // Placement is espalier's: the unit must not pin the service itself.
    for forbidden in ["CPUAffinity=", "NUMAPolicy=", "NUMAMask="] {
        assert!(
            !unit.lines().any(|l| l.starts_with(forbidden)),
            "{forbidden}"
        );
    }
}
