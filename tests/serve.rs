//! The real binary serving real HTTP on loopback: placement applied, static conformance,
//! keep-alive and pipelining, limits and timeouts, steering, handlers, shutdown, worker death.
//! Every server a test starts is stopped by the test (the harness's Drop), and every request
//! loop is bounded.

use crate::common;

use common::*;
use espalier::cpuset::CpuSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn online_cpus() -> CpuSet {
    CpuSet::parse(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap()).unwrap()
}

/// A document root with the files the static tests need.
fn docroot() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("sub")).unwrap();
    std::fs::write(www.join("index.html"), "<h1>home</h1>\n").unwrap();
    std::fs::write(www.join("hello.txt"), "hello, world\n").unwrap();
    std::fs::write(www.join("style.css"), "body{}\n").unwrap();
    std::fs::write(www.join("sub/index.html"), "<p>sub</p>\n").unwrap();
    let big: Vec<u8> = (0..(1u32 << 20) + 7).map(|i| (i % 251) as u8).collect();
    std::fs::write(www.join("big.bin"), &big).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", www.join("escape")).unwrap();
    std::os::unix::fs::symlink("hello.txt", www.join("inside-link.txt")).unwrap();
    dir
}

fn site_config(port: u16, extra_server: &str, pool: &str) -> String {
    format!(
        "[server]\nworker_header = true\n{extra_server}\n[[pool]]\nname = \"web\"\n{pool}\n\
         [[site]]\nname = \"web\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n\
         [[site.app]]\npath = \"/\"\npool = \"web\"\n\
         [[site.app]]\npath = \"/dynamic\"\npool = \"web\"\nhandler = \"dynamic\"\n\
         [[site.app]]\npath = \"/cpu\"\npool = \"web\"\nhandler = \"cpu\"\n"
    )
}

fn tasks(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn placement_is_applied_to_every_thread_and_matches_the_plan() {
    let dir = docroot();
    let port = free_port();
    // A hard-affinity web garden with one worker per core of this machine, and its plan.
    let online = online_cpus();
    let n = online.len();
    let config = site_config(port, "", &format!("processes = {n}\naffinity = \"hard\""));
    std::fs::write(dir.path().join("espalier.toml"), &config).unwrap();
    let plan = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "--dry-run", "--json", "-c", "espalier.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let server = Server::with_config(dir.path(), &config);
    let workers = server.workers();
    assert_eq!(workers.len(), n, "{}", server.log_text());
    for (name, pid, cpus) in &workers {
        let planned = plan["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| name == &format!("web/{}", w["index"]))
            .expect("a planned worker");
        let planned_cpus: CpuSet = planned["cpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(
            cpus,
            &planned_cpus.to_string(),
            "the log names the planned CPUs"
        );
        let node = planned["node"].as_u64().unwrap();
        let mut engine_cpus = CpuSet::new();
        for task in tasks(*pid) {
            let allowed = CpuSet::parse(&status_field(&task, "Cpus_allowed_list")).unwrap();
            assert!(
                allowed.is_subset(&planned_cpus),
                "{task:?} runs on {allowed}, outside {planned_cpus}"
            );
            let mems = CpuSet::parse(&status_field(&task, "Mems_allowed_list")).unwrap();
            assert!(
                mems.contains(node as u32),
                "{task:?} may use memory of node {node}: {mems}"
            );
            if allowed.len() == 1 {
                engine_cpus = engine_cpus.union(&allowed);
            }
        }
        // Hard affinity: every planned CPU has a thread pinned to it alone.
        assert_eq!(engine_cpus, planned_cpus, "worker {name}");
        // The memory policy is bound to the home node (numa_maps shows the task policy).
        let maps = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).unwrap();
        assert!(
            maps.lines().any(|l| l.contains(&format!("bind:{node}"))),
            "numa_maps of {name}:\n{}",
            &maps[..maps.len().min(500)]
        );
    }
}

#[test]
fn soft_affinity_threads_may_use_the_whole_home_node() {
    let dir = docroot();
    let port = free_port();
    let server = Server::with_config(dir.path(), &site_config(port, "", "processes = \"auto\""));
    let (_, pid, cpus) = &server.workers()[0];
    let planned = CpuSet::parse(cpus).unwrap();
    for task in tasks(*pid) {
        assert_eq!(
            CpuSet::parse(&status_field(&task, "Cpus_allowed_list")).unwrap(),
            planned
        );
    }
    let maps = std::fs::read_to_string(format!("/proc/{pid}/numa_maps")).unwrap();
    assert!(
        maps.contains("prefer:"),
        "soft affinity prefers the home node"
    );
}

#[test]
fn static_files_conform() {
    let dir = docroot();
    let port = free_port();
    let _server = Server::with_config(dir.path(), &site_config(port, "", ""));
    let a = addr(port);

    let r = get(a, "/hello.txt", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello, world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.header("server"), Some("espalier"));
    assert!(r
        .header("date")
        .is_some_and(|d| httpdate::parse_http_date(d).is_ok()));
    assert_eq!(
        get(a, "/style.css", "").header("content-type"),
        Some("text/css; charset=utf-8")
    );
    assert_eq!(get(a, "/", "").text(), "<h1>home</h1>\n", "index file");
    assert_eq!(get(a, "/sub/", "").text(), "<p>sub</p>\n");

    let r = get(a, "/sub?x=1", "");
    assert_eq!(r.status, 301, "directory without slash");
    assert_eq!(r.header("location"), Some("/sub/?x=1"));

    // HEAD: same headers, no body.
    let mut c = Conn::open(a);
    c.send(b"HEAD /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let h = c.read_response(true).unwrap();
    assert_eq!((h.status, h.header("content-length")), (200, Some("13")));
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        c.read_response(false).unwrap().text(),
        "hello, world\n",
        "no stray body bytes after HEAD"
    );

    let r = get(a, "/hello.txt", "");
    let etag = r.header("etag").unwrap().to_string();
    let modified = r.header("last-modified").unwrap().to_string();
    assert_eq!(
        get(a, "/hello.txt", &format!("If-None-Match: {etag}\r\n")).status,
        304
    );
    assert_eq!(
        get(
            a,
            "/hello.txt",
            &format!("If-None-Match: W/{etag}, \"other\"\r\n")
        )
        .status,
        304
    );
    assert_eq!(
        get(a, "/hello.txt", "If-None-Match: \"other\"\r\n").status,
        200
    );
    assert_eq!(
        get(
            a,
            "/hello.txt",
            &format!("If-Modified-Since: {modified}\r\n")
        )
        .status,
        304
    );
    assert_eq!(
        get(
            a,
            "/hello.txt",
            "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
        )
        .status,
        200
    );

    let r = get(a, "/hello.txt", "Range: bytes=0-4\r\n");
    assert_eq!(
        (r.status, r.text().as_str(), r.header("content-range")),
        (206, "hello", Some("bytes 0-4/13"))
    );
    let r = get(a, "/hello.txt", "Range: bytes=-6\r\n");
    assert_eq!(r.text(), "world\n");
    let r = get(a, "/hello.txt", "Range: bytes=100-\r\n");
    assert_eq!(
        (r.status, r.header("content-range")),
        (416, Some("bytes */13"))
    );
    let r = get(
        a,
        "/hello.txt",
        "Range: bytes=0-4\r\nIf-Range: \"stale\"\r\n",
    );
    assert_eq!(
        r.status, 200,
        "If-Range that does not match sends the whole file"
    );

    // A large file goes out with sendfile, whole and in ranges.
    let big = std::fs::read(dir.path().join("www/big.bin")).unwrap();
    let r = get(a, "/big.bin", "");
    assert_eq!((r.status, r.body.len()), (200, big.len()));
    assert!(r.body == big);
    let r = get(a, "/big.bin", "Range: bytes=1000000-1000099\r\n");
    assert_eq!((r.status, &r.body[..]), (206, &big[1_000_000..1_000_100]));

    // Methods.
    let mut c = Conn::open(a);
    c.send(b"DELETE /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));

    // Traversal and bad paths never leave the root.
    for (path, want) in [
        ("/../../../../etc/passwd", 400),
        ("/%2e%2e/%2e%2e/etc/passwd", 400),
        ("/sub/%2E%2E/%2E%2E/etc/passwd", 400),
        ("/..%2fetc%2fpasswd", 400),
        ("/hello.txt%00.html", 400),
        ("/escape", 404),
        ("/missing.txt", 404),
    ] {
        let mut c = Conn::open(a);
        c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, want, "{path}");
        assert!(!r.text().contains("root:"), "{path} leaked a file");
    }
    assert_eq!(
        get(a, "/inside-link.txt", "").text(),
        "hello, world\n",
        "a symlink inside the root is fine"
    );
    assert_eq!(get(a, "/sub/../hello.txt", "").status, 200);

    // The per-thread cache notices a changed file within a second or so.
    std::fs::write(dir.path().join("www/hello.txt"), "changed!\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = get(a, "/hello.txt", "");
        if r.text() == "changed!\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cache never noticed the change"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn keep_alive_and_pipelining() {
    let dir = docroot();
    let port = free_port();
    let _server = Server::with_config(dir.path(), &site_config(port, "", ""));
    let mut c = Conn::open(addr(port));
    // Three requests in one write, answered in order on one connection.
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nGET /style.css HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().text(), "hello, world\n");
    assert_eq!(c.read_response(false).unwrap().text(), "body{}\n");
    assert_eq!(
        c.read_response(true).unwrap().header("content-length"),
        Some("14")
    );
    // A request split across writes, then a body with chunked framing.
    c.send(b"GET /hel");
    c.wait_read();
    c.send(b"lo.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    c.send(b"POST /dynamic HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    let r = c.read_response(false).unwrap();
    assert!(
        r.text().contains("<tr><th>body bytes</th><td>11</td></tr>"),
        "{}",
        r.text()
    );
    c.send(
        b"POST /dynamic HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(c.read_response(false).unwrap().status, 100);
    c.send(b"abc");
    assert!(c
        .read_response(false)
        .unwrap()
        .text()
        .contains("<td>3</td>"));
    // HTTP/1.0 closes unless asked to keep alive.
    let mut c = Conn::open(addr(port));
    c.send(b"GET /hello.txt HTTP/1.0\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    assert!(c.closed());
}

/// A client whose request says it is its last is closed at once, as nginx does: by the time
/// it sees the server's end, the server holds no socket for it (a lingering close would
/// still hold it, shut for writing, waiting for the client's end). The answer arrives whole.
#[test]
fn a_clients_last_request_is_closed_at_once() {
    let dir = docroot();
    let port = free_port();
    let server = Server::with_config(dir.path(), &site_config(port, "", ""));
    let pids: Vec<u32> = server.workers().iter().map(|w| w.1).collect();
    for (request, file) in [
        (
            &b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
            true,
        ),
        (&b"GET /hello.txt HTTP/1.0\r\n\r\n"[..], true),
        (
            &b"GET /dynamic HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"[..],
            false,
        ),
    ] {
        let mut c = Conn::open(addr(port));
        let client = c.stream.local_addr().unwrap();
        c.send(request);
        let r = c.read_response(false).expect("an answer");
        assert_eq!(r.status, 200);
        if file {
            assert_eq!(r.text(), "hello, world\n");
        }
        assert!(c.closed(), "the server's end after the answer");
        assert!(
            !server_end_held(port, client, &pids),
            "the server still held the connection after its end: {}",
            String::from_utf8_lossy(request)
        );
    }
}

#[test]
fn limits_and_timeouts_answer_and_close() {
    let dir = docroot();
    let port = free_port();
    let limits = "[server.limits]\nmax_request_line = 100\nmax_header_size = 400\nmax_headers = 8\nmax_body_size = 16\nheader_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\nbody_timeout = \"1s\"\n";
    let _server = Server::with_config(dir.path(), &site_config(port, limits, ""));
    let a = addr(port);
    let cases: Vec<(String, u16)> = vec![
        (
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(200)),
            414,
        ),
        (
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
                "b".repeat(500)
            ),
            431,
        ),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "H: v\r\n".repeat(10)),
            431,
        ),
        (
            "POST /dynamic HTTP/1.1\r\nHost: x\r\nContent-Length: 17\r\n\r\n".to_string(),
            413,
        ),
        (
            "POST /dynamic HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n"
                .to_string(),
            413,
        ),
        ("GET / HTTP/1.1\r\n\r\n".to_string(), 400),
        ("NOT HTTP AT ALL\r\n\r\n".to_string(), 400),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: br\r\n\r\n".to_string(),
            501,
        ),
    ];
    for (raw, want) in cases {
        let mut c = Conn::open(a);
        c.send(raw.as_bytes());
        let r = c
            .read_response(false)
            .unwrap_or_else(|| panic!("no response to {raw:?}"));
        assert_eq!(r.status, want, "{raw:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.closed(), "closed after {want}");
    }
    // A request head that stops arriving: 408 after the header timeout.
    let mut c = Conn::open(a);
    c.send(b"GET / HTTP/1.1\r\nHo");
    let r = c.read_response(false).unwrap();
    assert_eq!(r.status, 408);
    // An idle keep-alive connection is closed after its timeout, without a response.
    let mut c = Conn::open(a);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().status, 200);
    assert!(
        c.closed(),
        "idle connection closed by the keep-alive timeout"
    );
}

/// Pins the calling thread to one CPU (and returns the previous set).
fn pin(cpu: u32) -> CpuSet {
    let before = espalier::os::numa::thread_affinity(0).unwrap();
    espalier::os::numa::set_thread_affinity(0, &CpuSet::from_ids([cpu])).unwrap();
    before
}

#[test]
fn connection_limit_answers_503() {
    let dir = docroot();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &site_config(
            port,
            "[server.limits]\nmax_connections = 1\n",
            "processes = 1\ncpus = \"0\"",
        ),
    );
    assert_eq!(server.workers()[0].2, "0");
    let a = addr(port);
    let mut held = Conn::open(a);
    held.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(held.read_response(false).unwrap().status, 200);
    let mut extra = Conn::open(a);
    let r = extra.read_response(false).unwrap();
    assert_eq!(r.status, 503);
    assert!(extra.closed());
    drop(held);
}

#[test]
fn connections_are_steered_to_the_thread_on_the_clients_cpu() {
    let dir = docroot();
    let port = free_port();
    let _server = Server::with_config(dir.path(), &site_config(port, "", "processes = \"auto\""));
    let a = addr(port);
    let online = online_cpus();
    let results = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for cpu in online.iter() {
            pin(cpu);
            for _ in 0..10 {
                let r = get(a, "/hello.txt", "");
                seen.push((cpu, r.header("x-espalier-worker").unwrap_or("").to_string()));
            }
        }
        seen
    })
    .join()
    .unwrap();
    for (cpu, worker) in results {
        assert!(
            worker.ends_with(&format!("/cpu{cpu}")),
            "client on CPU {cpu} was served by {worker}"
        );
    }
}

#[test]
fn dynamic_and_cpu_handlers() {
    let dir = docroot();
    let port = free_port();
    let _server = Server::with_config(dir.path(), &site_config(port, "", ""));
    let a = addr(port);
    let mut c = Conn::open(a);
    let mut counters = Vec::new();
    for _ in 0..2 {
        c.send(b"GET /dynamic/page?q=%3Cb%3E&x=<script> HTTP/1.1\r\nHost: example.test\r\nUser-Agent: tester <1>\r\n\r\n");
        let r = c.read_response(false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let page = r.text();
        assert!(
            page.contains("<td>GET</td>") && page.contains("<td>/dynamic/page</td>"),
            "{page}"
        );
        assert!(
            page.contains("<td>q=%3Cb%3E&amp;x=&lt;script&gt;</td>"),
            "query is escaped: {page}"
        );
        assert!(
            page.contains("<td>tester &lt;1&gt;</td>") && page.contains("<td>example.test</td>")
        );
        let served = page
            .split("requests served by this thread</th><td>")
            .nth(1)
            .unwrap();
        counters.push(served.split('<').next().unwrap().parse::<u64>().unwrap());
    }
    assert_eq!(
        counters[1],
        counters[0] + 1,
        "the per-thread counter counts"
    );

    for ms in [0u32, 50, 250] {
        let r = get(a, &format!("/cpu?ms={ms}"), "");
        assert_eq!(r.status, 200);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let want = espalier::handlers::cpu::transcode(ms);
        assert_eq!(v["samples"], want.samples);
        assert_eq!(v["encoded_bytes"], want.encoded_bytes);
        assert_eq!(v["checksum"], format!("{:016x}", want.checksum));
    }
    assert_eq!(get(a, "/cpu?ms=99999", "").status, 400);
}

#[test]
fn hosting_sites_on_their_own_ports_and_pools() {
    let dir = docroot();
    let (p1, p2) = (free_port(), free_port());
    let config = format!(
        "[server]\nworker_header = true\n[[pool]]\nname = \"alpha\"\n[[pool]]\nname = \"beta\"\n\
         [[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:{p1}\"]\nroot = \"www\"\n[[site.app]]\npool = \"alpha\"\n\
         [[site]]\nname = \"b\"\nbindings = [\"http://127.0.0.1:{p2}\"]\n[[site.app]]\npool = \"beta\"\nhandler = \"dynamic\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(server.workers().len(), 2);
    let r = get(addr(p1), "/hello.txt", "");
    assert!(r
        .header("x-espalier-worker")
        .unwrap()
        .starts_with("alpha/0/"));
    let r = get(addr(p2), "/", "");
    assert!(r
        .header("x-espalier-worker")
        .unwrap()
        .starts_with("beta/0/"));
    assert!(r.text().contains("Hello from beta/0/"));
}

#[test]
fn host_header_routing_on_one_port() {
    let dir = docroot();
    std::fs::create_dir_all(dir.path().join("other")).unwrap();
    std::fs::write(dir.path().join("other/hello.txt"), "other site\n").unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"p\"\n\
         [[site]]\nname = \"main\"\nbindings = [\"http://127.0.0.1:{port}:main.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n\
         [[site]]\nname = \"other\"\nbindings = [\"http://127.0.0.1:{port}:other.test\"]\nroot = \"other\"\n[[site.app]]\npool = \"p\"\n"
    );
    let _server = Server::with_config(dir.path(), &config);
    let a = addr(port);
    let mut c = Conn::open(a);
    c.send(b"GET /hello.txt HTTP/1.1\r\nHost: OTHER.test:8080\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: main.test\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: nobody.test\r\n\r\n");
    assert_eq!(c.read_response(false).unwrap().text(), "other site\n");
    assert_eq!(c.read_response(false).unwrap().text(), "hello, world\n");
    assert_eq!(
        c.read_response(false).unwrap().status,
        421,
        "no site of the address names it and none is its default"
    );
}

#[test]
fn graceful_stop_finishes_in_flight_requests_and_leaves_no_process() {
    let dir = docroot();
    let port = free_port();
    let mut server = Server::with_config(dir.path(), &site_config(port, "", "processes = 2"));
    let pids: Vec<u32> = server.workers().iter().map(|w| w.1).collect();
    assert_eq!(pids.len(), 2);
    // An idle keep-alive connection is closed at once, not kept until a timeout.
    let mut idle = Conn::open(addr(port));
    idle.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(idle.read_response(false).unwrap().status, 200);
    // A request half sent when the stop begins still gets its answer (with Connection: close).
    let mut c = Conn::open(addr(port));
    c.send(b"GET /hello.txt HTTP/1.1\r\n");
    // The readiness endpoint a load balancer's health check asks: ready while serving …
    let admin: std::net::SocketAddr = server.admin.as_deref().unwrap().parse().unwrap();
    let ready = || espalier::server::admin::request(admin, "GET", "/ready").unwrap();
    assert_eq!(ready(), (200, b"ready\n".to_vec()));
    // That the worker has read those bytes (a connection with nothing read yet counts as
    // idle and would be closed by the stop): the kernel's socket table says so.
    c.wait_read();
    server.signal(libc::SIGTERM);
    // The stop has begun in the worker once it closes the idle connection.
    assert!(idle.closed(), "the idle connection is closed by the stop");
    // … and 503 from the moment the drain starts, while in-flight requests finish.
    assert_eq!(ready(), (503, b"draining\n".to_vec()));
    c.send(b"Host: x\r\n\r\n");
    let r = c
        .read_response(false)
        .expect("the in-flight request is answered");
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert_eq!(
        server.wait_exit(Duration::from_secs(15)),
        Some(0),
        "{}",
        server.log_text()
    );
    for pid in pids {
        assert!(!pid_alive(pid), "worker {pid} outlived the master");
    }
    server.wait_for_log(
        "espalier[master]: stopped",
        std::time::Duration::from_secs(10),
    );
    // The port is free again.
    std::net::TcpListener::bind(addr(port)).expect("port released");
}

#[test]
fn a_killed_worker_does_not_take_the_master_down() {
    let dir = docroot();
    let port = free_port();
    let server = Server::with_config(dir.path(), &site_config(port, "", "processes = 2"));
    let workers = server.workers();
    unsafe { libc::kill(workers[0].1 as i32, libc::SIGKILL) };
    let line = server.wait_for_log("exited: signal 9 (SIGKILL)", Duration::from_secs(5));
    assert!(line.contains(&workers[0].0));
    server.wait_until("the killed worker replaced", Duration::from_secs(10), |s| {
        let now = s.workers();
        now.len() == 2 && now.iter().all(|w| w.1 != workers[0].1)
    });
    assert!(pid_alive(server.pid()), "the master is still running");
    assert!(pid_alive(workers[1].1), "the other worker is still running");
}

#[test]
fn no_config_serves_the_welcome_page_or_a_root() {
    let empty = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    {
        let _server = Server::start(&["--listen", &listen], empty.path());
        let r = get(addr(port), "/", "");
        assert_eq!(r.status, 200);
        assert!(r.text().contains("espalier is running"));
    }
    let dir = docroot();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _server = Server::start(&["--listen", &listen, "--root", "www"], dir.path());
    assert_eq!(get(addr(port), "/hello.txt", "").text(), "hello, world\n");
}

#[test]
fn a_port_in_use_is_one_clear_line() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("espalier: ")
            && last.contains("cannot listen on http://127.0.0.1:")
            && last.contains("stop it or change the port"),
        "{err}"
    );
}

/// A port held by a process that is ending (the server a restart replaces, still closing) is
/// waited for a moment, as nginx does, and taken once free: the server says it waits, and
/// serves as soon as the holder lets go.
#[test]
fn a_port_freed_while_the_server_starts_is_taken() {
    use std::io::BufRead;
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let admin = format!("127.0.0.1:{}", free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin",
            &admin,
        ])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Stopped however the test ends.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = child.stderr.take().unwrap();
    let _stop = Stop(child);
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| loop {
        // Ends: the server either logs the line or exits (closing its stderr).
        match lines.next() {
            Some(Ok(l)) if l.contains(needle) => return,
            Some(Ok(l)) => seen.push(l),
            _ => panic!("no line with {needle:?}; log:\n{}", seen.join("\n")),
        }
    };
    wait_for("trying again for a moment");
    drop(holder);
    wait_for("serving");
    assert_eq!(get(addr(port), "/", "").status, 200);
}

/// Reads a whole response to a `Connection: close` request slowly (the server meets a full
/// socket buffer, and must wait for room on either path), returning its body.
fn slow_read_body(port: u16, path: &str) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr(port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // A small window: the file cannot be in flight whole.
    let _ = socket2::SockRef::from(&s).set_recv_buffer_size(16 << 10);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    let mut piece = [0u8; 16 << 10];
    let mut reads = 0;
    loop {
        let n = s.read(&mut piece).unwrap();
        if n == 0 {
            break;
        }
        all.extend_from_slice(&piece[..n]);
        reads += 1;
        if reads < 20 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    all.split_off(at)
}

#[test]
fn each_io_path_is_said_at_start_and_serves_the_same() {
    let dir = docroot();
    // Larger than a socket's send buffer can grow to (4 MiB).
    let big: Vec<u8> = (0..(9u32 << 20)).map(|i| (i % 253) as u8).collect();
    std::fs::write(dir.path().join("www/huge.bin"), &big).unwrap();
    let mut paths = vec![("epoll", "epoll ([server] io = \"epoll\")")];
    match espalier::os::uring::probe() {
        Ok(_) => paths.push(("uring", "io_uring ([server] io = \"uring\"; kernel ")),
        Err(why) => eprintln!("io_uring unusable here ({why}): only epoll is tried"),
    }
    for (io, said) in paths {
        let port = free_port();
        let server = Server::with_config(
            dir.path(),
            // A body timeout longer than the slow reader's read timeout: a send that waits
            // for room and is never woken fails the read, not just the clock.
            &site_config(
                port,
                &format!("io = \"{io}\"\n[server.limits]\nbody_timeout = \"120s\""),
                "",
            ),
        );
        server.wait_for_log(&format!("connections' I/O: {said}"), Duration::from_secs(5));
        // Pipelined requests, a request split over writes, a chunked upload.
        let mut c = Conn::open(addr(port));
        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nHEAD /style.css HTTP/1.1\r\nHost: x\r\n\r\n");
        let first = c.read_response(false);
        let first =
            first.unwrap_or_else(|| panic!("{io}: no answer in 10 s: {}", server.log_text()));
        assert_eq!(first.text(), "hello, world\n");
        assert_eq!(c.read_response(true).unwrap().status, 200);
        c.send(b"POST /dynamic HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel");
        c.wait_read();
        c.send(b"lo\r\n0\r\n\r\n");
        assert!(c
            .read_response(false)
            .unwrap()
            .text()
            .contains("<td>5</td>"));
        // A 9 MiB file to a slow reader: `sendfile` meets a full buffer and waits for room.
        assert!(
            slow_read_body(port, "/huge.bin") == big,
            "{io}: the file arrived whole"
        );
        // h2c with prior knowledge: the connection leaves the ring for the HTTP/2 engine.
        let out = run_ok(std::process::Command::new("curl").args([
            "-s",
            "--http2-prior-knowledge",
            &format!("http://127.0.0.1:{port}/hello.txt"),
        ]));
        assert_eq!(out.stdout, b"hello, world\n", "{io}: h2c");
        // Many connections at once, each with a few requests.
        let clients: Vec<_> = (0..32)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut c = Conn::open(addr(port));
                    for _ in 0..5 {
                        c.send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
                        assert_eq!(c.read_response(false).unwrap().status, 200);
                    }
                })
            })
            .collect();
        for t in clients {
            t.join().unwrap();
        }
    }
}

#[test]
fn a_bad_io_override_is_one_clear_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .env("ESPALIER_IO", "aio")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().last().unwrap_or(""),
        "espalier: ESPALIER_IO=aio: use auto, uring or epoll (or unset it)",
        "{err}"
    );
}

/// A site with a `root` and no `[[site.app]]` serves its files from `/` (as `serve --root`
/// does); one with neither is refused by `check`, its hint naming a pool that exists.
#[test]
fn a_site_with_only_a_root_serves_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "just files\n").unwrap();
    let port = free_port();
    let config = format!(
        "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n"
    );
    let server = Server::with_config(d, &config);
    let r = get(addr(port), "/", "");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"just files\n"[..]));
    drop(server);
    let err = check_refuses(
        d,
        "[[pool]]\nname = \"py\"\ncommand = [\"/bin/true\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n",
    );
    assert!(
        err.contains("site `s` serves nothing") && err.contains("pool = \"py\""),
        "{err}"
    );
}
