//! espalier under systemd, without systemd: the test plays the service manager — it creates
//! the notify socket, starts `serve` with `NOTIFY_SOCKET`, and reads what the master says
//! through a reload and a stop.

use crate::common;

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
        "ExecStartPre=/usr/bin/espalier check",
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

/// Starts `espalier serve -c config` as systemd would with a socket unit: `socket` as fd 3,
/// `LISTEN_FDS=1` and `LISTEN_PID` the server's own pid (set by the shell that execs it).
fn start_activated(config: &std::path::Path, socket: &socket2::Socket) -> std::process::Child {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = socket.as_raw_fd();
    let mut cmd = std::process::Command::new("sh");
    cmd.args([
        "-c",
        "LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec \"$0\" serve -c \"$1\"",
        env!("CARGO_BIN_EXE_espalier"),
        config.to_str().unwrap(),
    ])
    .stderr(std::process::Stdio::piped());
    // SAFETY: dup2 between fork and exec, on an fd this process owns.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec: clear it instead.
            let placed = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, 3)
            };
            if placed < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

#[test]
fn a_socket_passed_by_the_service_manager_serves_its_binding() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (config, _) = with_own_admin(&format!(
        "[[pool]]\nname = \"web\"\nprocesses = 2\n[[site]]\nname = \"s\"\nbindings = [\"http://{addr}\"]\n[[site.app]]\npool = \"web\"\n"
    ));
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    // As `ReusePort=yes` in a socket unit makes it.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&addr.into()).unwrap();
    socket.listen(128).unwrap();
    let mut child = start_activated(&path, &socket);
    drop(socket);
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = Vec::new();
    for line in stderr.lines().map_while(Result::ok) {
        let serving = line.contains("serving");
        log.push(line);
        if serving {
            break;
        }
    }
    let text = log.join("\n");
    assert!(
        text.contains(&format!(
            "http://{addr}: using the socket the service manager passed"
        )),
        "{text}"
    );
    assert!(
        text.contains("(2 sockets"),
        "the passed socket and one of its own: {text}"
    );
    let r = get(addr, "/", "");
    assert_eq!(r.status, 200);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{text}");
}

#[test]
fn a_passed_socket_without_reuseport_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (config, _) = with_own_admin(&format!(
        "[[pool]]\nname = \"web\"\n[[site]]\nname = \"s\"\nbindings = [\"http://{addr}\"]\n[[site.app]]\npool = \"web\"\n"
    ));
    let path = dir.path().join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&addr.into()).unwrap();
    socket.listen(128).unwrap();
    let child = start_activated(&path, &socket);
    drop(socket);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("has no SO_REUSEPORT") && last.contains("ReusePort=yes"),
        "{err}"
    );
}
