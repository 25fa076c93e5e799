//! HTTP/3 (`[server] http3`), spoken to by two independent clients: ngtcp2's `gtlsclient`
//! (Debian's ngtcp2-client) and Python's aioquic (PyPI) — a static file byte-exact (also at
//! 5 % packet loss both ways), an app's answer and a POST body through its pool, site
//! features (a redirect, a header, a deny, a body over its bound), the access log's protocol,
//! `Alt-Svc` on the HTTP/2 answer; recycles under `bench --h3` load failing no request; a
//! reload turning HTTP/3 on; an on-demand pool woken over HTTP/3 alone; and `check`'s refusals
//! where HTTP/3 could not answer.

use crate::common::tls::{curl, openssl_cert};
use crate::common::{check_refuses, espalier, free_port, need_tools, skip, wait_for, Server};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A file's SHA-256, by `sha256sum` (the tests take no hashing crate for it).
fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// What one HTTP/3 request got.
pub(crate) struct Answer {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    /// The body's SHA-256 (hex) and, when short, its text.
    sha256: String,
    pub(crate) text: String,
    /// aioquic's: whether the server took the request in 0-RTT; with H3_HOLD_FINISHED,
    /// the probe's answer and whether the request was answered before it.
    pub(crate) early_data: bool,
    probe: Option<String>,
    answered_first: Option<bool>,
    /// aioquic's whole line (H3_MIGRATE's counts are there).
    json: serde_json::Value,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request by ngtcp2's client (`loss`: the share of datagrams it drops each way); the
/// body is downloaded into `dir` under the path's last segment.
fn ngtcp2(dir: &Path, port: u16, method: &str, path: &str, loss: f32) -> Answer {
    ngtcp2_to(dir, ("127.0.0.1", port), method, path, loss)
}

/// As [`ngtcp2`], to the address `ip`.
fn ngtcp2_to(dir: &Path, (ip, port): (&str, u16), method: &str, path: &str, loss: f32) -> Answer {
    let download = dir.join("dl");
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download).unwrap();
    let out = Command::new("timeout")
        .args([
            "60",
            "gtlsclient",
            "--no-quic-dump",
            "--exit-on-all-streams-close",
        ])
        .arg(format!("--download={}", download.display()))
        .args([
            "-m",
            method,
            "-t",
            &loss.to_string(),
            "-r",
            &loss.to_string(),
        ])
        .args([ip, &port.to_string()])
        .arg(format!("https://localhost:{port}{path}"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "gtlsclient failed:\n{log}");
    // `http: stream 0x0 [name: value]` for each field of the answer.
    let fields: Vec<(String, String)> = log
        .lines()
        .filter_map(|l| l.strip_prefix("http: stream 0x0 ["))
        .filter_map(|l| l.strip_suffix(']'))
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let status = (fields.iter())
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no status:\n{log}"));
    let file = download.join(path.rsplit('/').next().unwrap_or_default());
    let body = std::fs::read(&file).unwrap_or_default();
    Answer {
        status,
        headers: fields.into_iter().filter(|(n, _)| n != ":status").collect(),
        sha256: if file.exists() {
            sha256_hex(&file)
        } else {
            String::new()
        },
        text: String::from_utf8_lossy(&body).into_owned(),
        early_data: false,
        probe: None,
        answered_first: None,
        json: serde_json::Value::Null,
    }
}

/// aioquic, installed for the tests from PyPI (see [`crate::common::python_package`]).
pub(crate) fn aioquic() -> Option<std::path::PathBuf> {
    static READY: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| crate::common::python_package("aioquic", "h3-py"))
        .clone()
}

/// One request by aioquic's client (tests/apps/h3_client.py), with `body` for a POST; it runs
/// on the CPUs the calling thread may run on.
pub(crate) fn aioquic_request(
    lib: &Path,
    dir: &Path,
    port: u16,
    (method, path): (&str, &str),
    body: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Answer {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/h3_client.py");
    let mut cmd = Command::new("timeout");
    cmd.args(["60", "python3"])
        .arg(&client)
        .args([&port.to_string(), method, path])
        .env("PYTHONPATH", lib)
        .envs(env.iter().copied());
    if let Some(body) = body {
        let file = dir.join("body.bin");
        std::fs::write(&file, body).unwrap();
        cmd.arg(&file);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "aioquic failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    Answer {
        status: v["status"].as_u64().unwrap() as u16,
        headers: (v["headers"].as_array().unwrap().iter())
            .map(|p| {
                let s = |i: usize| p[i].as_str().unwrap().to_string();
                (s(0), s(1))
            })
            .collect(),
        sha256: v["sha256"].as_str().unwrap().to_string(),
        text: v["text"].as_str().unwrap().to_string(),
        early_data: v["early_data"].as_bool().unwrap_or(false),
        probe: v["probe"].as_str().map(str::to_string),
        answered_first: v["answered_first"].as_bool(),
        json: v.clone(),
    }
}

/// A site with static files, a header, a redirect, a denied path and an app in a pool.
fn site(dir: &Path) -> (Server, u16) {
    site_with(dir, "")
}

/// [`site`], with `server` added to its `[server]` table.
fn site_with(dir: &Path, server: &str) -> (Server, u16) {
    openssl_cert(dir, "site", "localhost");
    std::fs::create_dir_all(dir.join("www/static")).unwrap();
    std::fs::create_dir_all(dir.join("marks")).unwrap();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("www/static/big.bin"), &big).unwrap();
    std::fs::write(dir.join("www/static/hello.txt"), "hello over QUIC\n").unwrap();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/upload_app.py");
    let port = free_port();
    let config = format!(
        r#"
[server]
http3 = true
{server}
[[pool]]
name = "app"
command = ["python3", "{app}"]
environment = {{ MARKS = "{marks}" }}
health = "/healthz"
[[site]]
name = "s"
bindings = ["https://127.0.0.1:{port}", "https://[::1]:{port}"]
tls = {{ cert = "site.pem", key = "site.key" }}
root = "www"
max_body_size = "256KiB"
headers = {{ X-Site = "over-h3" }}
access_log = {{ path = "logs/s.log", format = "common" }}
[[site.rule]]
match = "^/old/(.*)$"
redirect = "/static/$1"
[[site.app]]
pool = "app"
[[site.app]]
path = "/static/"
handler = "static"
[[site.app]]
path = "/private/"
pool = "app"
deny = ["127.0.0.0/8"]
"#,
        app = app.display(),
        marks = dir.join("marks").display(),
    );
    (Server::with_config(dir, &config), port)
}

#[test]
fn a_site_over_http3_answers_ngtcp2_with_every_site_feature() {
    need_tools("gtlsclient:ngtcp2-client", "ngtcp2's HTTP/3 client");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, port) = site(d);
    let expected = sha256_hex(&d.join("www/static/big.bin"));
    // A static file, byte-exact, also with 5 % of the datagrams lost each way.
    for loss in [0.0, 0.05] {
        let r = ngtcp2(d, port, "GET", "/static/big.bin", loss);
        assert_eq!((r.status, r.sha256.as_str()), (200, expected.as_str()));
        assert_eq!(r.header("x-site"), Some("over-h3"));
    }
    // Over IPv6 too (each address family its own UDP sockets).
    let r = ngtcp2_to(d, ("::1", port), "GET", "/static/hello.txt", 0.0);
    assert_eq!((r.status, r.text.as_str()), (200, "hello over QUIC\n"));
    // The app's answer through its pool; a site rule's redirect; a path's deny.
    let r = ngtcp2(d, port, "GET", "/hello", 0.0);
    assert_eq!((r.status, r.text.as_str()), (200, "ok\n"));
    assert_eq!(r.header("x-site"), Some("over-h3"));
    let r = ngtcp2(d, port, "GET", "/old/hello.txt", 0.0);
    assert_eq!(r.status, 301, "{:?}", r.headers);
    assert_eq!(r.header("location"), Some("/static/hello.txt"));
    let r = ngtcp2(d, port, "GET", "/private/x", 0.0);
    assert_eq!(r.status, 403);
    // The log says which protocol each request came over.
    wait_for("the access log's line", Duration::from_secs(30), || {
        std::fs::read_to_string(d.join("logs/s.log"))
            .is_ok_and(|log| log.contains("\"GET /hello HTTP/3.0\" 200"))
    });
    // HTTP/2 (and HTTP/1.1) answers advertise HTTP/3 on the same port.
    let (code, _, verbose) = curl(
        d,
        "site.pem",
        "localhost",
        port,
        "/static/hello.txt",
        &["--http2"],
    );
    assert_eq!(code, 0, "{verbose}");
    assert!(verbose.contains("< HTTP/2 200"), "{verbose}");
    let alt = format!("< alt-svc: h3=\":{port}\"; ma=86400");
    assert!(verbose.contains(&alt), "{verbose}");
    // espalier's own load generator speaks HTTP/3 too: every request answered.
    let url = format!("https://127.0.0.1:{port}/static/hello.txt");
    let out = espalier(&[
        "bench",
        "--h3",
        "-k",
        "-n",
        "400",
        "-c",
        "2",
        "--streams",
        "4",
        &url,
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("400 requests in") && text.contains("errors: 0 "),
        "{text}"
    );
    drop(server);
}

#[test]
fn a_site_over_http3_answers_aioquic_and_bounds_its_bodies() {
    let Some(lib) = aioquic() else {
        return skip("aioquic cannot be installed from PyPI (python3 -m pip install failed)");
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, port) = site(d);
    let r = aioquic_request(&lib, d, port, ("GET", "/static/hello.txt"), None, &[]);
    assert_eq!((r.status, r.text.as_str()), (200, "hello over QUIC\n"));
    assert_eq!(r.header("x-site"), Some("over-h3"));
    let r = aioquic_request(&lib, d, port, ("GET", "/static/big.bin"), None, &[]);
    assert_eq!(r.sha256, sha256_hex(&d.join("www/static/big.bin")));
    // A POST body reaches the app whole.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("sent.bin"), &body).unwrap();
    let r = aioquic_request(&lib, d, port, ("POST", "/upload"), Some(&body), &[]);
    let want = format!(
        "len=200000 sha256={} framing=length\n",
        sha256_hex(&d.join("sent.bin"))
    );
    assert_eq!((r.status, r.text.as_str()), (200, want.as_str()));
    // A body streams to the app as it arrives: its first half reaches the app (which marks
    // it) while the client holds back the second — read whole first, it never would.
    let mark = d.join("marks/streamed");
    let wait_for = mark.display().to_string();
    let env = [
        ("H3_NO_LENGTH", "1"),
        ("H3_PAUSE_AT", "100000"),
        ("H3_WAIT_FOR", wait_for.as_str()),
        ("H3_FIELD", "x-mark-after: 100000"),
    ];
    let r = aioquic_request(&lib, d, port, ("POST", "/streamed"), Some(&body), &env);
    let want = format!(
        "len=200000 sha256={} framing=chunked\n",
        sha256_hex(&d.join("sent.bin"))
    );
    assert_eq!((r.status, r.text.as_str()), (200, want.as_str()));
    // One past the site's max_body_size is refused before the app sees it.
    let hostile = vec![b'x'; 256 * 1024 + 1];
    let r = aioquic_request(&lib, d, port, ("POST", "/upload"), Some(&hostile), &[]);
    assert_eq!(r.status, 413);
    // …and so is one that does not say its length, once it has sent one byte too many.
    let no_length = [("H3_NO_LENGTH", "1")];
    let r = aioquic_request(
        &lib,
        d,
        port,
        ("POST", "/upload"),
        Some(&hostile),
        &no_length,
    );
    assert_eq!(r.status, 413);
    // A Content-Length HTTP/1.1 would refuse is refused here too, not read another way: a
    // signed one, and two of them.
    let signed = [("H3_NO_LENGTH", "1"), ("H3_FIELD", "content-length: +5")];
    let r = aioquic_request(&lib, d, port, ("POST", "/upload"), Some(b"hello"), &signed);
    assert_eq!(r.status, 400);
    let twice = [("H3_FIELD", "content-length: 3")];
    let r = aioquic_request(&lib, d, port, ("POST", "/upload"), Some(b"hello"), &twice);
    assert_eq!(r.status, 400);
    // A field section past max_header_size: 431, before any of the site's steps.
    let big = format!("x-big: {}", "b".repeat(40 * 1024));
    let r = aioquic_request(
        &lib,
        d,
        port,
        ("GET", "/static/hello.txt"),
        None,
        &[("H3_FIELD", &big)],
    );
    assert_eq!(r.status, 431);
    // More fields than max_headers (100), each small: 431, as over HTTP/1.1 and HTTP/2; at
    // the bound, served.
    let get = ("GET", "/static/hello.txt");
    let r = aioquic_request(&lib, d, port, get, None, &[("H3_MANY_FIELDS", "150")]);
    assert_eq!(r.status, 431);
    let r = aioquic_request(&lib, d, port, get, None, &[("H3_MANY_FIELDS", "99")]);
    assert_eq!((r.status, r.text.as_str()), (200, "hello over QUIC\n"));
    drop(server);
}

/// A kernel figure of a process, in KiB (`VmRSS`, `VmHWM`).
fn vm_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches(" kB")
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// What a client sends that the server does not use is dropped as it comes (a reserved
/// frame of 32 MiB on a request stream once took a worker +155 MiB over a few), and a
/// client's packets from new addresses get nothing back (connection migration off: quinn
/// sent an unvalidated path 42× what it received).
#[test]
fn a_client_neither_makes_a_worker_hold_what_it_sends_nor_amplifies_through_new_paths() {
    let Some(lib) = aioquic() else {
        return skip("aioquic cannot be installed from PyPI (python3 -m pip install failed)");
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, port) = site(d);
    let pids: Vec<u32> = server.workers().iter().map(|w| w.1).collect();
    let before: Vec<u64> = pids.iter().map(|&p| vm_kib(p, "VmRSS")).collect();
    let frame = (32 << 20).to_string();
    let get = ("GET", "/static/hello.txt");
    let r = aioquic_request(&lib, d, port, get, None, &[("H3_RESERVED_FRAME", &frame)]);
    assert_eq!((r.status, r.text.as_str()), (200, "hello over QUIC\n"));
    for (&pid, &was) in pids.iter().zip(&before) {
        let peak = vm_kib(pid, "VmHWM");
        assert!(
            peak < was + 16 * 1024,
            "worker {pid}: {was} KiB before, a peak of {peak} KiB after 32 MiB of a reserved frame"
        );
    }
    let r = aioquic_request(&lib, d, port, get, None, &[("H3_MIGRATE", "20")]);
    let (sent, received) = (
        r.json["migrated_sent"].as_u64().unwrap(),
        r.json["migrated_received"].as_u64().unwrap(),
    );
    assert!(
        sent > 0 && received <= 3 * sent,
        "{sent} bytes sent from new ports, {received} back"
    );
    drop(server);
}

#[test]
fn check_refuses_http3_where_it_could_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_cert(d, "site", "localhost");
    let port = free_port();
    let err = check_refuses(
        d,
        &format!("[server]\nhttp3 = true\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\nhandler = \"static\"\n"),
    );
    assert!(
        err.contains("server.http3") && err.contains("no site has an https:// binding"),
        "{err}"
    );
    let err = check_refuses(
        d,
        &format!("[server]\nhttp3 = true\n[[pool]]\nname = \"a\"\n[[pool]]\nname = \"b\"\n[[site]]\nname = \"one\"\nbindings = [\"https://127.0.0.1:{port}:one.localhost\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\npool = \"a\"\n[[site]]\nname = \"two\"\nbindings = [\"https://127.0.0.1:{port}:two.localhost\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\npool = \"b\"\n"),
    );
    assert!(err.contains("pools a, b share it"), "{err}");
    let err = check_refuses(
        d,
        &format!("[server]\nhttp3 = true\n[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"app.py\"]\ntransport = \"activation\"\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:{port}\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\npool = \"app\"\n"),
    );
    assert!(err.contains("accepts its own connections"), "{err}");
}

/// A UDP port another program holds is refused at start with one line, as a TCP one is: the
/// workers' SO_REUSEPORT sockets would otherwise join that program's group and split its
/// datagrams.
#[test]
fn serve_refuses_a_udp_port_another_program_holds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_cert(d, "site", "localhost");
    let port = free_port();
    let _held = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    let (config, _) = crate::common::with_own_admin(&format!(
        "[server]\nhttp3 = true\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:{port}\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\nhandler = \"static\"\n"
    ));
    std::fs::write(d.join("espalier.toml"), config).unwrap();
    // Bounded: a server that wrongly starts is stopped after 30 s, and the test fails.
    let out = Command::new("timeout")
        .args(["30", env!("CARGO_BIN_EXE_espalier"), "serve", "-c"])
        .arg(d.join("espalier.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen for HTTP/3 on udp 127.0.0.1:{port}"))
            && err.contains("http3 = false"),
        "{err}"
    );
    // …and by a reload that adds the address: refused, the server going on as it was.
    let free = free_port();
    let server = Server::with_config(
        d,
        &format!("[server]\nhttp3 = true\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:{free}\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\nhandler = \"static\"\n"),
    );
    let path = d.join("espalier.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&format!("[[site]]\nname = \"t\"\nbindings = [\"https://127.0.0.1:{port}\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\nhandler = \"static\"\n"));
    std::fs::write(&path, config).unwrap();
    let (code, body) = server.post("/reload");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains(&format!("udp 127.0.0.1:{port}")), "{body}");
    assert_eq!(server.workers().len(), 1);
    drop(server);
}

/// The pids of a status's running espalier workers.
fn worker_pids(status: &espalier::server::status::Status) -> Vec<u32> {
    use espalier::server::status::{Role, WorkerState};
    (status.pools.iter().flat_map(|p| &p.workers))
        .filter(|w| w.role == Role::Worker && w.state == WorkerState::Running)
        .filter_map(|w| w.pid)
        .collect()
}

#[test]
fn recycles_under_http3_load_fail_no_request() {
    // Each recycle's successor reads the other UDP socket of each thread's pair while the
    // old worker finishes its connections on its own: the steering program sends every
    // datagram to the socket its connection ID names (see server::quic_steering). Without
    // it, the kernel's hash moved some connections' datagrams to the successor, which did
    // not know them: whole connections' requests failed.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let site = hello_site(d, port, "web");
    let config = format!("[server]\nhttp3 = true\n[[pool]]\nname = \"web\"\n{site}");
    let server = Server::with_config(d, &config);
    let recycles = 4;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Runs of `bench --h3` back to back (kept-alive connections, 4 streams each) until the
    // recycles are over: every run's every request answered.
    let load = {
        let done = std::sync::Arc::clone(&done);
        let url = format!("https://127.0.0.1:{port}/hello.txt");
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while runs.is_empty() || !done.load(std::sync::atomic::Ordering::SeqCst) {
                let args = [
                    "bench",
                    "--h3",
                    "-k",
                    "-n",
                    "600",
                    "-c",
                    "8",
                    "--streams",
                    "4",
                ];
                let out = espalier(&[&args[..], &[url.as_str()]].concat());
                runs.push(format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            runs
        })
    };
    for round in 0..recycles {
        let before = worker_pids(&server.status());
        let (code, body) = server.post("/pools/web/recycle");
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        server.wait_until(&format!("recycle {round}"), Duration::from_secs(30), |s| {
            let now = worker_pids(&s.status());
            !now.is_empty() && now.iter().all(|p| !before.contains(p))
        });
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let runs = load.join().unwrap();
    for run in &runs {
        assert!(
            run.contains("600 requests in") && run.contains("errors: 0 "),
            "a run of {} failed requests:\n{run}\n{}",
            runs.len(),
            server.log_text()
        );
    }
    assert!(
        server.log_text().matches("(recycled)").count() >= recycles,
        "{}",
        server.log_text()
    );
}

#[test]
fn a_reload_turns_http3_on_for_an_address_served_already() {
    need_tools("gtlsclient:ngtcp2-client", "ngtcp2's HTTP/3 client");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let site = hello_site(d, port, "web");
    let server = Server::with_config(d, &format!("[server]\n[[pool]]\nname = \"web\"\n{site}"));
    let path = d.join("espalier.toml");
    let before = std::fs::read_to_string(&path).unwrap();
    let with_http3 = before.replacen("[server]\n", "[server]\nhttp3 = true\n", 1);
    assert_ne!(before, with_http3);
    // Another program holds the UDP port: the reload is refused, naming it.
    let held = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    std::fs::write(&path, &with_http3).unwrap();
    let (code, body) = server.post("/reload");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains(&format!("udp 127.0.0.1:{port}")), "{body}");
    // Freed, the same reload gives the address its UDP sockets and HTTP/3 answers. (A child
    // another test forks at that moment holds the test's socket until it execs: the port is
    // free once that is over, so the reload is sent again until then.)
    drop(held);
    wait_for("the reload taken", Duration::from_secs(30), || {
        server.post("/reload").0 == 200
    });
    let r = ngtcp2(d, port, "GET", "/hello.txt", 0.0);
    assert_eq!((r.status, r.text.as_str()), (200, "hello over QUIC\n"));
    drop(server);
}

#[test]
fn early_data_answers_safe_requests_at_once_and_holds_others_for_the_handshake() {
    let Some(lib) = aioquic() else {
        return skip("aioquic cannot be installed from PyPI (python3 -m pip install failed)");
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, port) = site_with(d, "http3_early_data = true");
    // The client holds back the end of its handshake and sends a GET beside each request.
    let zero_rtt = [("H3_ZERO_RTT", "1"), ("H3_HOLD_FINISHED", "/early-data")];
    // A GET in the resumed connection's first flight: answered before the handshake ends,
    // and the app told it came early (it could answer 425).
    let r = aioquic_request(&lib, d, port, ("GET", "/hello"), None, &zero_rtt);
    assert!(r.early_data, "the server did not take 0-RTT");
    assert_eq!(r.probe.as_deref(), Some("early-data=1\n"));
    assert_eq!((r.status, r.text.as_str()), (200, "ok\n"));
    // A POST in 0-RTT waits for the handshake: the GET beside it was answered first, and
    // it reaches the app unmarked once the client's handshake ended — a replayed flight,
    // whose handshake never ends, never runs it.
    let r = aioquic_request(
        &lib,
        d,
        port,
        ("POST", "/early-data"),
        Some(b"x=1"),
        &zero_rtt,
    );
    assert!(r.early_data, "the server did not take 0-RTT");
    assert_eq!(r.probe.as_deref(), Some("early-data=1\n"));
    assert_eq!(
        r.answered_first,
        Some(false),
        "the POST was answered before the handshake"
    );
    assert_eq!((r.status, r.text.as_str()), (200, "early-data=-\n"));
    drop(server);
    // Off by default: the same client's early flight is refused, the request answered after.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (server, port) = site(d);
    let zero_rtt = [("H3_ZERO_RTT", "1")];
    let r = aioquic_request(&lib, d, port, ("GET", "/early-data"), None, &zero_rtt);
    assert_eq!((r.status, r.text.as_str()), (200, "early-data=-\n"));
    assert!(!r.early_data, "0-RTT taken where it is off");
    // check refuses it without http3, and with a site that asks for client certificates.
    let err = check_refuses(d, "[server]\nhttp3 = true\nhttp3_early_data = true\n[[site]]\nname = \"m\"\nbindings = [\"https://127.0.0.1:1\"]\ntls = { cert = \"site.pem\", key = \"site.key\" }\nclient_certs = { ca = \"site.pem\", mode = \"required\" }\n[[site.app]]\nhandler = \"static\"\n");
    assert!(
        err.contains("http3_early_data")
            && err.contains("site `m`")
            && err.contains("client certificates"),
        "{err}"
    );
    let err = check_refuses(d, "[server]\nhttp3_early_data = true\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nhandler = \"static\"\n");
    assert!(
        err.contains("http3_early_data") && err.contains("http3 = true"),
        "{err}"
    );
    drop(server);
}

/// A static site on `https://127.0.0.1:{port}`, served by `pool`, whose root holds
/// `hello.txt` ("hello over QUIC\n"): its `[[site]]` table, its certificate and file written
/// into `dir`.
fn hello_site(dir: &Path, port: u16, pool: &str) -> String {
    openssl_cert(dir, "site", "localhost");
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/hello.txt"), "hello over QUIC\n").unwrap();
    format!(
        r#"[[site]]
name = "s"
bindings = ["https://127.0.0.1:{port}"]
tls = {{ cert = "site.pem", key = "site.key" }}
root = "www"
[[site.app]]
pool = "{pool}"
handler = "static"
"#
    )
}

/// Bytes queued unread in the UDP sockets bound to `port` on 127.0.0.1, from /proc/net/udp
/// (`local_address` `0100007F:PORT`, `tx_queue:rx_queue` in hex).
fn udp_queued(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let local = format!("0100007F:{port:04X}");
    (table.lines().skip(1))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.get(1) == Some(&local.as_str()))
        .filter_map(|f| f.get(4)?.split(':').nth(1).map(String::from))
        .map(|rx| usize::from_str_radix(&rx, 16).unwrap_or(0))
        .sum()
}

/// The pid of `pool`'s first worker, when it has a process.
fn pid_of(server: &Server, pool: &str) -> Option<u32> {
    let status = server.status();
    let p = status.pools.iter().find(|p| p.name == pool)?;
    p.workers.first()?.pid
}

/// An on-demand pool asleep wakes for an HTTP/3 client as for a TCP one: the client's first
/// datagram waits in the UDP socket the steering sends it to, which the master watches and
/// the woken worker reads — from the start, and again once the pool slept when idle (its
/// drained worker's sockets join the watch as it exits).
#[test]
fn an_on_demand_pool_asleep_wakes_for_an_http3_client() {
    wakes_over_http3("stop");
}

/// A suspended pool's frozen worker is thawed by an HTTP/3 client alone: the master watches
/// the UDP socket the frozen process reads, and the thawed process answers.
#[test]
fn a_suspended_pool_thaws_for_an_http3_client() {
    wakes_over_http3("suspend");
}

fn wakes_over_http3(idle_action: &str) {
    use espalier::server::status::PoolState;
    need_tools("gtlsclient:ngtcp2-client", "ngtcp2's HTTP/3 client");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let site = hello_site(d, port, "lazy");
    let pool = format!("[[pool]]\nname = \"lazy\"\nstart = \"on-demand\"\nidle_timeout = \"2s\"\nidle_action = \"{idle_action}\"\n");
    let server = Server::with_config(d, &format!("[server]\nhttp3 = true\n{pool}{site}"));
    assert_eq!(pid_of(&server, "lazy"), None, "no process before a visitor");
    // Datagrams that cannot open a connection — a short one, and 1 300 bytes under a short
    // header — are dropped by the master's watch and wake nothing.
    let stray = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    stray.send_to(b"not quic", ("127.0.0.1", port)).unwrap();
    let mut short_header = vec![0x40u8; 1300];
    short_header[1..13].copy_from_slice(b"made-up id!!");
    stray.send_to(&short_header, ("127.0.0.1", port)).unwrap();
    server.wait_until(
        "the stray datagrams dropped",
        Duration::from_secs(20),
        |_| udp_queued(port) == 0,
    );
    assert_eq!(
        pid_of(&server, "lazy"),
        None,
        "a stray datagram woke the pool"
    );
    let first = ngtcp2(d, port, "GET", "/hello.txt", 0.0);
    assert_eq!(
        (first.status, first.text.as_str()),
        (200, "hello over QUIC\n")
    );
    server.wait_until("the woken worker's pid", Duration::from_secs(30), |s| {
        pid_of(s, "lazy").is_some()
    });
    let pid = pid_of(&server, "lazy").unwrap();
    let state = |s: &Server| {
        let status = s.status();
        status
            .pools
            .iter()
            .find(|p| p.name == "lazy")
            .map(|p| p.state)
    };
    if idle_action == "suspend" {
        server.wait_until("the idle pool suspended", Duration::from_secs(60), |s| {
            state(s) == Some(PoolState::Suspended)
        });
    } else {
        server.wait_until("the idle pool asleep again", Duration::from_secs(60), |s| {
            s.pool_gone("lazy", PoolState::Idle)
        });
    }
    // Over HTTP/3 alone (no TCP connection to wake it), its process answers: a new one, or
    // the same one thawed.
    let again = ngtcp2(d, port, "GET", "/hello.txt", 0.0);
    assert_eq!(
        (again.status, again.text.as_str()),
        (200, "hello over QUIC\n")
    );
    if idle_action == "suspend" {
        server.wait_for_log("worker lazy/0 thawed on demand", Duration::from_secs(30));
        assert_eq!(pid_of(&server, "lazy"), Some(pid));
    } else {
        server.wait_until("woken again", Duration::from_secs(30), |s| {
            pid_of(s, "lazy").is_some_and(|p| p != pid)
        });
    }
    drop(server);
}

/// The server's datagrams grow to what the link carries: over loopback (a 64 KiB MTU) past an
/// Ethernet frame's once path-MTU discovery has run, and no larger than ten fit one GSO send;
/// held to quinn's Ethernet-sized default (bench/h3.sh's comparison), none grows past 1 472
/// bytes. Measured by `espalier bench --h3`, whose endpoint takes datagrams that large, over
/// a 100 KB file; ngtcp2 (which takes 65 527) gets the file byte-exact at the grown size.
#[test]
fn datagrams_grow_to_what_the_link_carries() {
    need_tools("gtlsclient:ngtcp2-client", "ngtcp2's HTTP/3 client");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let config = format!(
        "[server]\nhttp3 = true\n[[pool]]\nname = \"p\"\n{}",
        hello_site(d, port, "p")
    );
    let page: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("www/page.bin"), &page).unwrap();
    let expected = sha256_hex(&d.join("www/page.bin"));
    std::fs::write(d.join("espalier.toml"), config).unwrap();
    let mean_datagram = |env: &[(&str, &str)]| {
        let server = Server::start_env(&["-c", "espalier.toml"], d, env);
        let url = format!("https://127.0.0.1:{port}/page.bin");
        let args = [
            "bench",
            "--h3",
            "-k",
            "-n",
            "300",
            "-c",
            "2",
            "--streams",
            "2",
        ];
        let out = espalier(&[&args[..], &[url.as_str()]].concat());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("errors: 0 "), "{text}");
        let r = ngtcp2(d, port, "GET", "/page.bin", 0.0);
        assert_eq!((r.status, r.sha256.as_str()), (200, expected.as_str()));
        drop(server);
        let line = (text.lines())
            .find_map(|l| l.strip_prefix("datagrams received: "))
            .unwrap_or_else(|| panic!("no datagram count: {text}"));
        let mean = line.split("mean ").nth(1).and_then(|m| m.split(' ').next());
        mean.and_then(|m| m.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no mean size: {line}"))
    };
    let grown = mean_datagram(&[]);
    let gso_send = espalier::server::quic_path::datagram_bound(65_536, false, true);
    assert!((1_473..=u32::from(gso_send)).contains(&grown), "{grown}");
    let ethernet = mean_datagram(&[("ESPALIER_QUIC_PATH_MTU", "off")]);
    assert!(ethernet <= 1_472, "{ethernet}");
}

/// A client that sent a GOAWAY of its own and holds its connection open does not hold a
/// draining worker: the worker closes the connection and exits (held, it would stay until
/// `shutdown_timeout`, 120 s here, and the wait below ends at 60 s). The client's request was
/// answered, and it sees the close.
#[test]
fn a_client_goaway_does_not_hold_a_draining_worker() {
    let Some(lib) = aioquic() else {
        skip("aioquic could not be installed from PyPI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let site = hello_site(d, port, "web");
    let config = format!(
        "[server]\nhttp3 = true\nshutdown_timeout = \"120s\"\n[[pool]]\nname = \"web\"\n{site}"
    );
    let server = Server::with_config(d, &config);
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/h3_client.py");
    let mut holder = Command::new("timeout")
        .args(["100", "python3"])
        .arg(&client)
        .args([&port.to_string(), "GET", "/hello.txt"])
        .env("PYTHONPATH", &lib)
        .env("H3_GOAWAY_AND_HOLD", "90")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "answered");
    let before = worker_pids(&server.status());
    let (code, body) = server.post("/pools/web/recycle");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    server.wait_until("the old worker gone", Duration::from_secs(60), |_| {
        (before.iter()).all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
    // The close reached the client, which then printed its answer and ended.
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = holder.wait().unwrap();
    assert!(status.success(), "{rest}");
    let v: serde_json::Value = serde_json::from_str(rest.trim()).unwrap();
    assert_eq!(v["status"], 200, "{rest}");
}
