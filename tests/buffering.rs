//! Buffering for slow clients (issue #61, item 2), on the real binary with gunicorn's sync
//! workers: a client that reads nothing of a 32 MiB answer no longer holds the only app
//! process (it did: the next request waited for it, and got 503 from the queue); an answer
//! past `buffer.response` goes to an unnamed temporary file no larger than `buffer.disk`,
//! then at the client's speed, and arrives whole; a slow upload is read whole before the
//! app is asked (it held the process too); server-sent events still stream.

use crate::common;

use common::apps::{need_runtimes, php_fpm};
use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How long an event may take to be seen on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

/// gunicorn with one sync worker running tests/apps/buffer_app.py, in one pool with `keys`,
/// behind one site: the server, its address and the pool's front worker's pid.
fn sync_app(d: &Path, keys: &str) -> (Server, SocketAddr, u32) {
    need_runtimes();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/buffer_app.py"),
        d.join("buffer_app.py"),
    )
    .unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"sync\"\ncpus = \"0\"\ncommand = [\"gunicorn\", \"--bind\", \"127.0.0.1:{{port}}\", \"--workers\", \"1\", \"--timeout\", \"120\", \"buffer_app:app\"]\nmax_requests_per_process = 1\n{keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nmax_body_size = \"8MiB\"\n[[site.app]]\npool = \"sync\"\n"
        ),
    );
    let front = server.front_pid();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    (server, addr, front)
}

/// A client that asks for `path` and reads nothing yet.
fn asked(addr: SocketAddr, path: &str) -> Conn {
    let mut c = Conn::open(addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    c
}

fn get(addr: SocketAddr, path: &str) -> Response {
    asked(addr, path).read_response(false).expect("an answer")
}

/// The sizes of the unnamed temporary files the process `pid` holds open.
fn temporary_files(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|to| to.to_string_lossy().ends_with("(deleted)"))
        })
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .collect()
}

#[test]
fn a_client_that_reads_nothing_no_longer_holds_a_sync_apps_only_process() {
    // Unbuffered (as before): the slow client's answer holds the one process, so the next
    // request waits in the queue for it and is refused when its wait is over.
    let dir = tempfile::tempdir().unwrap();
    let (server, addr, _) = sync_app(dir.path(), "buffer = false\nqueue_timeout = \"1s\"");
    let slow = asked(addr, "/big?mb=32");
    server.wait_until("the slow answer under way", WAIT, |s| {
        s.requests_taken() >= 1
    });
    assert_eq!(
        get(addr, "/small").status,
        503,
        "the process was free without buffering"
    );
    drop(slow);
    drop(server);

    // Buffered (the default of a sync pool): the app's answer is read at its speed, the
    // process is free for the next request, and the slow client still gets every byte.
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, front) = sync_app(dir.path(), "queue_timeout = \"60s\"");
    let mut slow = asked(addr, "/big?mb=32");
    let next = get(addr, "/small");
    assert_eq!((next.status, next.body.as_slice()), (200, &b"ok"[..]));
    // Past 1 MiB in memory, the rest waits in a temporary file.
    assert!(
        temporary_files(front).iter().any(|&len| len > 0),
        "no temporary file held: {:?}",
        temporary_files(front)
    );
    let whole = slow.read_response(false).expect("the slow client's answer");
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body.len(), 32 << 20);
    assert!(whole.body.iter().all(|&b| b == b'b'));
    // Read, the file is gone.
    wait_for("the temporary file closed", WAIT, || {
        temporary_files(front).is_empty()
    });
}

/// A client that sends `/upload` the head and half of a 2 MiB body, and waits.
fn half_an_upload(addr: SocketAddr) -> Conn {
    let mut c = Conn::open(addr);
    c.stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    c.send(
        format!(
            "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
            2 << 20
        )
        .as_bytes(),
    );
    c.send(&vec![b'u'; 1 << 20]);
    c
}

#[test]
fn a_slow_upload_no_longer_holds_a_sync_apps_only_process() {
    // Unbuffered: the app's one process reads the body as it comes, held by the client.
    let dir = tempfile::tempdir().unwrap();
    let (server, addr, _) = sync_app(dir.path(), "buffer = false\nqueue_timeout = \"1s\"");
    let upload = half_an_upload(addr);
    server.wait_until("the upload taken", WAIT, |s| s.requests_taken() >= 1);
    assert_eq!(
        get(addr, "/small").status,
        503,
        "the process was free without buffering"
    );
    drop(upload);
    drop(server);

    // Buffered (the default of a sync pool): the body is read whole first.
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, front) = sync_app(dir.path(), "buffer = { request = \"64KiB\" }");
    let mut upload = half_an_upload(addr);
    // Past 64 KiB in memory, the body waits in a temporary file, and the app is free.
    wait_for("the body's start in a temporary file", WAIT, || {
        temporary_files(front).iter().any(|&len| len > 0)
    });
    let next = get(addr, "/small");
    assert_eq!((next.status, next.body.as_slice()), (200, &b"ok"[..]));
    upload.send(&vec![b'u'; 1 << 20]);
    let answer = upload.read_response(false).expect("the upload's answer");
    assert_eq!(
        String::from_utf8_lossy(&answer.body),
        format!("got {}", 2 << 20)
    );
}

/// An HTTP/2 upload that says no length reaches the app with one: read whole, its length is
/// known (the WSGI app reads `CONTENT_LENGTH` alone, and got 0 of a chunked body).
#[test]
fn an_http2_upload_reaches_a_buffered_app_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, _) = sync_app(dir.path(), "");
    let text = block_on(async move {
        let mut send = h2c(addr.port()).await.ready().await.unwrap();
        let req = http::Request::post("http://a/upload").body(()).unwrap();
        let (response, mut body) = send.send_request(req, false).unwrap();
        body.send_data(bytes::Bytes::from(vec![b'u'; 2 << 20]), true)
            .unwrap();
        let mut answer = response.await.unwrap().into_body();
        let mut text = Vec::new();
        while let Some(piece) = answer.data().await {
            let piece = piece.unwrap();
            let _ = answer.flow_control().release_capacity(piece.len());
            text.extend_from_slice(&piece);
        }
        String::from_utf8(text).unwrap()
    });
    assert_eq!(text, format!("got {}", 2 << 20));
}

#[test]
fn an_upstream_groups_answer_is_held_for_a_client_that_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("files")).unwrap();
    std::fs::write(d.join("files/big.bin"), vec![b'f'; 32 << 20]).unwrap();
    // A server espalier did not start: Python's http.server on the folder.
    let served = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _files = Stopped::listening(
        std::process::Command::new("python3")
            .args(["-m", "http.server", &served.port().to_string()])
            .args(["--bind", "127.0.0.1"])
            .current_dir(d.join("files"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
        served,
    );
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[upstream]]\nname = \"g\"\nservers = [\"{served}\"]\nbuffer = true\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\nupstream = \"g\"\n"
        ),
    );
    let workers: Vec<u32> = server.workers().iter().map(|w| w.1).collect();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut slow = asked(addr, "/big.bin");
    wait_for("the answer held in a temporary file", WAIT, || {
        workers
            .iter()
            .any(|&pid| temporary_files(pid).iter().any(|&len| len > 0))
    });
    let whole = slow.read_response(false).expect("the answer");
    assert_eq!(whole.body.len(), 32 << 20);
    assert!(whole.body.iter().all(|&b| b == b'f'));
}

/// An answer past memory stops at `disk` in its file (the worker's files together hold at
/// most that; that spools share it is the spool's unit test), then goes at its client's
/// speed, and arrives whole.
#[test]
fn an_answer_past_memory_and_disk_bounds_waits_for_its_client_and_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    let keys = "buffer = { response = \"1MiB\", disk = \"8MiB\" }";
    let (_server, addr, front) = sync_app(dir.path(), keys);
    let mut slow = asked(addr, "/big?mb=100");
    // The file fills to its bound and no further while the client reads nothing.
    wait_for("the temporary file at its bound", WAIT, || {
        let files = temporary_files(front);
        assert!(
            files.iter().all(|&len| len <= 8 << 20),
            "past the bound: {files:?}"
        );
        files.contains(&(8 << 20))
    });
    let whole = slow.read_response(false).expect("the answer");
    assert_eq!(whole.body.len(), 100 << 20);
    assert!(whole.body.iter().all(|&b| b == b'b'));
}

#[test]
fn server_sent_events_still_stream_from_a_buffered_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, front) = sync_app(dir.path(), "buffer = true");
    let mut events = asked(addr, "/events");
    // The first event arrives while the app keeps its stream open.
    let mut seen = Vec::new();
    let mut piece = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: one") {
        use std::io::Read;
        let n = events.stream.read(&mut piece).expect("the first event");
        assert!(n > 0, "closed before the first event");
        seen.extend_from_slice(&piece[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).contains("text/event-stream"));
    assert!(temporary_files(front).is_empty());
}

/// php-fpm with one child, its scripts answering `/big.php` with 32 MiB and `/small.php`
/// with "ok", in a FastCGI pool with `keys`: the server, its address, its front's pid.
fn one_php_child(d: &Path, keys: &str) -> (Server, SocketAddr, u32) {
    let fpm = php_fpm();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(
        d.join("www/big.php"),
        "<?php header('Content-Type: application/octet-stream'); $p = str_repeat('p', 65536); for ($i = 0; $i < 512; $i++) { echo $p; }",
    )
    .unwrap();
    std::fs::write(d.join("www/small.php"), "<?php echo 'ok';").unwrap();
    std::fs::write(
        d.join("php-fpm.conf"),
        "[global]\nerror_log = /proc/self/fd/2\ndaemonize = no\n[www]\nlisten = 127.0.0.1:${PORT}\npm = static\npm.max_children = 1\n",
    )
    .unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"php\"\ncpus = \"0\"\ncommand = [\"{fpm}\", \"--nodaemonize\", \"--allow-to-run-as-root\", \"--fpm-config\", \"php-fpm.conf\"]\ntransport = \"fastcgi\"\n{keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"php\"\n"
        ),
    );
    let front = server.front_pid();
    (server, SocketAddr::from(([127, 0, 0, 1], port)), front)
}

#[test]
fn a_php_child_is_free_while_a_slow_client_reads_its_answer() {
    // Unbuffered: the one child writes at the client's speed; the next request waits for
    // it past response_timeout.
    let dir = tempfile::tempdir().unwrap();
    let keys = "buffer = false\nresponse_timeout = \"2s\"";
    let (server, addr, _) = one_php_child(dir.path(), keys);
    let slow = asked(addr, "/big.php");
    server.wait_until("the slow answer under way", WAIT, |s| {
        s.requests_taken() >= 1
    });
    assert_eq!(
        get(addr, "/small.php").status,
        504,
        "the child was free without buffering"
    );
    drop(slow);
    // Nor is a chunked body read whole: FastCGI's CONTENT_LENGTH is unknown, so 411.
    let mut c = Conn::open(addr);
    c.send(b"POST /small.php HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(c.read_response(false).expect("411").status, 411);
    drop(server);

    // Buffered (a FastCGI pool's default): the child is free once it has answered.
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr, front) = one_php_child(dir.path(), "response_timeout = \"60s\"");
    let mut slow = asked(addr, "/big.php");
    wait_for("the answer's start in a temporary file", WAIT, || {
        temporary_files(front).iter().any(|&len| len > 0)
    });
    let next = get(addr, "/small.php");
    assert_eq!((next.status, next.body.as_slice()), (200, &b"ok"[..]));
    let whole = slow.read_response(false).expect("the slow client's answer");
    assert_eq!(whole.body.len(), 32 << 20);
}

#[test]
fn check_refuses_buffer_where_it_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    for (keys, says) in [
        ("protocol = \"http2\"\nbuffer = true", "pool[0].buffer"),
        ("buffer = { response = \"1KiB\" }", "4KiB or more"),
        (
            "buffer = { memory = \"1MiB\" }",
            "`memory` is not a key of buffer",
        ),
        ("buffer = \"yes\"", "buffer = false"),
    ] {
        let config = format!("[[pool]]\nname = \"p\"\ncommand = [\"python3\", \"-m\", \"http.server\", \"{{port}}\"]\n{keys}\n");
        let said = check_refuses(dir.path(), &config);
        assert!(said.contains(says), "{keys}: {said}");
    }
    // A pool without an application has no answers to hold.
    let static_pool = "[[pool]]\nname = \"web\"\nbuffer = true\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:9\"]\nroot = \".\"\n[[site.app]]\npool = \"web\"\n";
    let said = check_refuses(dir.path(), static_pool);
    assert!(
        said.contains("pool[0].buffer") && said.contains("runs an application"),
        "{said}"
    );
    let group = "[[upstream]]\nname = \"g\"\nservers = [\"127.0.0.1:9\"]\nprotocol = \"http2\"\nbuffer = true\n";
    let said = check_refuses(dir.path(), group);
    assert!(said.contains("upstream[0].buffer"), "{said}");
}
