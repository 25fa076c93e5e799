//! The hardening issue's findings, each as a regression test on the real binary: crafted
//! chunked bodies, ambiguous framing, chunk-extension floods, descriptors per path spelling,
//! stale content, FIFO races, stuck threads, a refused reload, configs that cannot work,
//! overflowing ranges and symlinked directories. Loopback only, bounded, every server stopped.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

struct Site {
    dir: tempfile::TempDir,
    port: u16,
    admin: String,
}

impl Site {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn www(&self) -> std::path::PathBuf {
        self.dir.path().join("www")
    }

    fn status(&self) -> serde_json::Value {
        status_json(&self.admin)
    }

    /// The pid of the pool's one worker, from the admin endpoint.
    fn worker_pid(&self) -> Option<u64> {
        self.status()["pools"][0]["workers"][0]["pid"].as_u64()
    }
}

/// One pool on CPU 0, one worker, one thread: what goes wrong shows at once.
fn one_thread_site(server_extra: &str, pool_extra: &str) -> (Site, Server) {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello\n").unwrap();
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(www.join("big.bin"), big).unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:{admin_port}\"\n{server_extra}\n\
         [[pool]]\nname = \"web\"\nprocesses = 1\ncpus = \"0\"\n{pool_extra}\n\
         [[site]]\nname = \"web\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n\
         [[site.app]]\npool = \"web\"\n\
         [[site.app]]\npath = \"/dyn\"\npool = \"web\"\nhandler = \"dynamic\"\n\
         [[site.app]]\npath = \"/cpu\"\npool = \"web\"\nhandler = \"cpu\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let site = Site {
        dir,
        port,
        admin: format!("127.0.0.1:{admin_port}"),
    };
    (site, server)
}

/// Sends `raw` on a fresh connection and reads until the server closes it (bounded).
fn exchange(addr: SocketAddr, raw: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn status_of(response: &[u8]) -> u16 {
    String::from_utf8_lossy(response)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn resident_kib(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn open_fds(pid: u64) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

const WRAPPING_CHUNK: &[u8] = b"POST /dyn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\nxxxxxxxxxxxxxxxxxxxxxxxx\r\n0\r\n\r\n";

#[test]
fn crafted_chunk_sizes_cannot_take_the_server_down() {
    // Few slots, so a leak of even a handful would show as 503s.
    let (site, _server) = one_thread_site("[server.limits]\nmax_connections = 8", "");
    for _ in 0..300 {
        let r = exchange(site.addr(), WRAPPING_CHUNK);
        assert_eq!(status_of(&r), 413, "{}", String::from_utf8_lossy(&r));
    }
    for _ in 0..20 {
        assert_eq!(
            get(site.addr(), "/", "").status,
            200,
            "slots all given back"
        );
    }
    let w = &site.status()["pools"][0]["workers"][0];
    assert_eq!(w["connection_panics"], 0, "{w}");
}

#[test]
fn ambiguous_framing_gets_400_and_a_close() {
    let (site, _server) = one_thread_site("", "");
    let cases: [(&[u8], u16); 5] = [
        (b"POST /dyn HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n0\r\n\r\nGET / HTTP/1.0\r\n\r\n", 400),
        (b"POST /dyn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    ];
    for (raw, want) in cases {
        let r = exchange(site.addr(), raw);
        let text = String::from_utf8_lossy(&r);
        assert_eq!(status_of(&r), want, "{text}");
        assert_eq!(
            text.matches("HTTP/1.").count(),
            1,
            "one answer, then close: {text}"
        );
        assert!(text.contains("Connection: close"), "{text}");
    }
    // A 400 to HEAD has no body.
    let r = exchange(
        site.addr(),
        b"HEAD / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&r);
    assert_eq!(status_of(&r), 400);
    assert!(
        text.ends_with("\r\n\r\n"),
        "no body after the head: {text:?}"
    );
}

#[test]
fn chunk_extension_floods_are_refused_without_buffering() {
    let (site, _server) = one_thread_site("", "");
    let pid = site.worker_pid().unwrap();
    // The site is made at its first request (`handlers::site`): measured from there.
    assert_eq!(get(site.addr(), "/", "").status, 200);
    let before = resident_kib(pid);
    let mut s = TcpStream::connect(site.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /dyn HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=")
        .unwrap();
    // Up to 64 MiB of extension; the server refuses well before and closes.
    let piece = vec![b'a'; 64 << 10];
    let mut sent = 0usize;
    while sent < 64 << 20 {
        if s.write_all(&piece).is_err() {
            break;
        }
        sent += piece.len();
        if sent % (1 << 20) == 0 {
            // Another client is answered meanwhile (within the client's read timeout: the
            // flood holds no thread).
            assert_eq!(get(site.addr(), "/", "").status, 200);
        }
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert_eq!(status_of(&out), 413, "{}", String::from_utf8_lossy(&out));
    // Refused at the extension's bound, then read and dropped as a lingering close reads
    // (at most 16 MiB, `http::send::linger_close`, so the client sees the 413, not a reset):
    // what the client got in is that and the sockets' buffers, never the whole flood.
    assert!(sent < 24 << 20, "refused after {sent} bytes");
    let after = resident_kib(pid);
    assert!(
        after < before + 8 * 1024,
        "the worker grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn path_spellings_share_one_cache_entry_and_descriptor() {
    let (site, _server) = one_thread_site("", "");
    let pid = site.worker_pid().unwrap();
    let before = open_fds(pid);
    let mut c = Conn::open(site.addr());
    for n in 1..=600 {
        let path = format!("{}big.bin", "/".repeat(n));
        c.send(format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let r = c.read_response(true).unwrap();
        assert_eq!(r.status, 200, "{path}");
    }
    for n in 0..200 {
        let path = format!("/{}big.bin", "./".repeat(n));
        c.send(format!("HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(c.read_response(true).unwrap().status, 200);
    }
    let after = open_fds(pid);
    assert!(
        after <= before + 2,
        "descriptors grew from {before} to {after}"
    );
}

#[test]
fn many_large_files_stay_within_the_descriptor_bound() {
    let (site, _server) = one_thread_site("", "");
    let big = std::fs::read(site.www().join("big.bin")).unwrap();
    for i in 0..300 {
        std::fs::write(site.www().join(format!("big{i}.bin")), &big[..300 << 10]).unwrap();
    }
    let pid = site.worker_pid().unwrap();
    let before = open_fds(pid);
    let mut c = Conn::open(site.addr());
    for i in 0..300 {
        c.send(format!("HEAD /big{i}.bin HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(c.read_response(true).unwrap().status, 200);
    }
    let after = open_fds(pid);
    assert!(
        after <= before + espalier::handlers::static_files::MAX_OPEN_FILES + 2,
        "descriptors grew from {before} to {after}"
    );
    // Past the bound, files are still served whole.
    c.send(b"GET /big299.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().body.len(), 300 << 10);
}

#[test]
fn a_file_rewritten_within_the_same_second_is_not_served_stale() {
    let (site, _server) = one_thread_site("", "");
    let path = site.www().join("page.txt");
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (i, content) in ["first version\n", "other version\n", "third version\n"]
        .iter()
        .enumerate()
    {
        // Same size, same modification time to the nanosecond: only ctime tells them apart.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        (&f).write_all(content.as_bytes()).unwrap();
        f.set_modified(when).unwrap();
        drop(f);
        // An entry is re-checked at most once a second: the new content within two.
        let deadline = Instant::now() + Duration::from_secs(3);
        while get(site.addr(), "/page.txt", "").text() != *content {
            assert!(
                Instant::now() < deadline,
                "still serving the old content ({i})"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_fifo_swapped_for_a_file_never_blocks_a_thread() {
    let (site, _server) = one_thread_site("", "");
    let www = site.www();
    std::fs::write(www.join("file.txt"), "a file\n").unwrap();
    let fifo = www.join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
    let r = get(site.addr(), "/fifo", "");
    assert_eq!(r.status, 404);
    // Swap file and FIFO back and forth while requests arrive.
    let swapping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let swapper = {
        let www = www.clone();
        let swapping = swapping.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while swapping.load(std::sync::atomic::Ordering::Relaxed) && n < 20_000 {
                let _ = std::fs::rename(www.join("fifo"), www.join("tmp"));
                let _ = std::fs::rename(www.join("file.txt"), www.join("fifo"));
                let _ = std::fs::rename(www.join("tmp"), www.join("file.txt"));
                n += 1;
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut answered = 0;
    while Instant::now() < deadline {
        for p in ["/fifo", "/file.txt"] {
            let r = get(site.addr(), p, "");
            assert!(matches!(r.status, 200 | 404), "{}", r.status);
            answered += 1;
        }
    }
    swapping.store(false, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(answered > 10);
    assert_eq!(get(site.addr(), "/index.html", "").status, 200);
}

/// The engine thread of a worker (named `<pool>-cpu<N>`).
fn engine_thread(pid: u64) -> i32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            comm.starts_with("web-cpu")
                .then(|| t.file_name().to_str()?.parse().ok())?
        })
        .next()
        .expect("an engine thread")
}

#[test]
fn a_worker_whose_threads_stop_turning_is_replaced() {
    let (site, server) =
        one_thread_site("", "ping_interval = \"200ms\"\nping_response_time = \"1s\"");
    let first = site.worker_pid().unwrap();
    // Stop its only engine thread, as a thread blocked in the kernel would be: ptrace stops
    // that one thread, and the worker's main thread still answers the master's pings.
    let tid = engine_thread(first);
    // SAFETY: plain syscalls on a thread of a process this test started.
    unsafe {
        assert_eq!(
            libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0),
            0,
            "ptrace seize"
        );
        assert_eq!(
            libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0),
            0,
            "ptrace interrupt"
        );
    }
    server.wait_for_log("have not turned", Duration::from_secs(6));
    let deadline = Instant::now() + Duration::from_secs(8);
    while site.worker_pid() == Some(first)
        || site.status()["pools"][0]["workers"][0]["state"] != "running"
    {
        assert!(
            Instant::now() < deadline,
            "not replaced: {}",
            server.log_text()
        );
        // Once the master kills the worker, its traced thread's exit is reported to this
        // tracer, which must collect it for the process to finish dying.
        let mut st = 0;
        // SAFETY: a non-blocking waitpid on the traced thread.
        unsafe { libc::waitpid(tid, &mut st, libc::__WALL | libc::WNOHANG) };
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(site.addr(), "/", "").status, 200);
    assert_eq!(
        server.log_text().matches("missed its pings").count(),
        1,
        "said once, however long the process takes to die"
    );
}

#[test]
fn a_refused_reload_keeps_every_listener() {
    let (site, server) = one_thread_site("", "");
    // Another program holds the port the new config wants.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().port();
    let config_path = site.dir.path().join("espalier.toml");
    let config = std::fs::read_to_string(&config_path).unwrap();
    let moved = config.replace(
        &format!("127.0.0.1:{}\"", site.port),
        &format!("127.0.0.1:{taken}\""),
    );
    assert_ne!(moved, config);
    std::fs::write(&config_path, moved).unwrap();
    let out = espalier(&["reload", "--admin", &site.admin]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("reload refused")
            && err.contains("site `web`")
            && err.contains(&taken.to_string()),
        "{err}"
    );
    // And the server's log says so, as for a refused SIGHUP.
    let logged = server.wait_for_log("reload refused", Duration::from_secs(10));
    assert!(logged.contains(&taken.to_string()), "{logged}");
    // The running configuration still serves, also after its worker is replaced.
    assert_eq!(get(site.addr(), "/", "").status, 200);
    std::fs::write(&config_path, config).unwrap();
    let first = site.worker_pid().unwrap();
    let out = espalier(&["recycle", "web", "--admin", &site.admin]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while site.worker_pid() == Some(first)
        || site.status()["pools"][0]["workers"][0]["state"] != "running"
    {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..20 {
        assert_eq!(
            get(site.addr(), "/", "").status,
            200,
            "{}",
            server.log_text()
        );
    }
    drop(holder);
}

#[test]
fn configs_that_cannot_work_are_refused_by_check() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    for (extra, root, key) in [
        ("", "missing-dir", "site[0].root"),
        ("", "afile", "site[0].root"),
        (
            "[server.limits]\nheader_timeout = 0\n",
            "",
            "server.limits.header_timeout",
        ),
        (
            "[server.limits]\nkeepalive_timeout = \"0s\"\n",
            "",
            "server.limits.keepalive_timeout",
        ),
        (
            "[server.limits]\nmax_headers = 1000\n",
            "",
            "server.limits.max_headers",
        ),
    ] {
        let root_line = if root.is_empty() {
            String::new()
        } else {
            format!("root = \"{root}\"\n")
        };
        let text = format!(
            "{extra}[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n{root_line}[[site.app]]\npool = \"p\"\n"
        );
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let out = espalier(&["check", "-c", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{key}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("key `{key}`")), "{err}");
    }
}

#[test]
fn overflowing_ranges_and_symlinked_directories() {
    let (site, _server) = one_thread_site("", "");
    let r = get(
        site.addr(),
        "/big.bin",
        "Range: bytes=1048570-99999999999999999999999\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body.len(), 6);
    assert_eq!(
        get(
            site.addr(),
            "/big.bin",
            "Range: bytes=99999999999999999999999-\r\n"
        )
        .status,
        416
    );
    // A symlink to a directory outside the root answers like a missing one.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("index.html"), "outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), site.www().join("out")).unwrap();
    for p in ["/out", "/out/", "/out/index.html", "/missing", "/missing/"] {
        assert_eq!(get(site.addr(), p, "").status, 404, "{p}");
    }
    assert!(!Path::new("/nonexistent-dir-for-espalier").exists());
}

#[test]
fn apps_are_chosen_on_the_normalized_path() {
    let (site, _server) = one_thread_site("", "");
    let dynamic = get(site.addr(), "/dyn", "");
    assert_eq!(dynamic.status, 200);
    assert!(dynamic.text().contains("<th>"), "the dynamic page");
    // Other spellings of /dyn reach the same app, not the static files of `/` (which has no
    // file named `dyn`: it would answer 404).
    for spelling in ["/%64yn", "//dyn", "/./dyn", "/x/../dyn"] {
        let r = get(site.addr(), spelling, "");
        assert_eq!(r.status, 200, "{spelling}");
        assert!(r.text().contains("<th>"), "{spelling}: {}", r.text());
    }
    // And a path that leaves /dyn is not served by it.
    let r = get(site.addr(), "/dyn/../index.html", "");
    assert_eq!((r.status, r.text()), (200, "hello\n".to_string()));
    assert_eq!(get(site.addr(), "/dyn/%2e%2e/%2e%2e/x", "").status, 400);
}

/// A client's own path never becomes a `Location` another host's: the directory redirect
/// and a rule's `$1` and `{path}` all give `/evil.example/`, not `//evil.example/` (scheme-relative,
/// an open redirect), for every spelling browsers read as one. Issue #39, item 14.
#[test]
fn redirects_built_from_a_clients_path_stay_on_the_site() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www/evil.example")).unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"web\"\nprocesses = 1\n[[site]]\nname = \"web\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n\
         [[site.rule]]\nmatch = \"^/go/(.*)$\"\nredirect = \"/$1\"\n[[site.rule]]\nmatch = \"here$\"\nredirect = \"{{path}}/\"\n[[site.app]]\npool = \"web\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for (path, expected) in [
        ("//evil.example", "/evil.example/"),
        ("///evil.example?x=1", "/evil.example/?x=1"),
        ("/evil.example", "/evil.example/"),
        ("/go//evil.example/", "/evil.example/"),
        ("/go/\\evil.example/", "/%5Cevil.example/"),
        ("/go/a//b", "/a/b"),
        ("//here", "/here/"),
    ] {
        let r = get(addr, path, "");
        assert!(
            r.status == 301 || r.status == 302,
            "{path}: {} {}",
            r.status,
            server.log_text()
        );
        assert_eq!(r.header("location"), Some(expected), "{path}");
    }
}

/// A client that goes on sending a body refused 413 is read for a while after the answer —
/// so that a client still uploading sees the 413, not a reset — but not forever: the server
/// stops reading and closes by itself after at most 16 MiB (and 5 s), however fast or slow
/// the client sends.
#[test]
fn a_client_that_never_stops_sending_a_refused_body_is_closed() {
    let (site, _server) = one_thread_site("", "");
    let mut c = TcpStream::connect(site.addr()).unwrap();
    c.write_all(b"POST /dyn HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        .unwrap();
    c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let chunk = vec![b'x'; 64 << 10];
    let (mut sent, started) = (0usize, Instant::now());
    // Generous: the server's own bound is 5 s; a minute means it never stopped.
    let closed = loop {
        if started.elapsed() > Duration::from_secs(60) {
            break false;
        }
        match c.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break true,
        }
    };
    assert!(closed, "still taking the body after {sent} bytes");
    assert!(sent < 64 << 20, "{sent} bytes taken after the 413");
    // The answer went out before the close: whatever the reset left of it is a 413.
    let mut answer = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.read_to_end(&mut answer);
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 413"),
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
    }
}
