//! Differential test: ambiguous requests — the hardening issue's classes and the well-known
//! smuggling gadgets (TE/CL conflicts, obs-fold, whitespace and case variants of `chunked`,
//! bare CR and LF, NUL) — sent to espalier and to nginx (Debian's package, installed by the
//! test if missing) in the same test. Each request is followed by a probe request on the same
//! connection, so a server that framed the first one differently answers a different number
//! of responses.
//!
//! The rule: espalier never accepts what nginx rejects, and where both accept, both frame the
//! bytes the same way (as many responses). The exceptions are listed in [`ALLOWED`] with
//! the reason, and in the README.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A request's fate at one server: the statuses of the responses it sent, in order, before
/// closing or going quiet.
type Answers = Vec<u16>;

/// Whether the first answer accepted the request (served it, or refused it for a reason that
/// is not its framing: 404, 405).
fn accepted(a: &Answers) -> bool {
    a.first()
        .is_some_and(|&s| (200..400).contains(&s) || s == 404 || s == 405)
}

/// Cases where espalier may differ from nginx, and why (the README repeats these).
const ALLOWED: &[(&str, &str)] = &[(
    "lowercase method",
    "a method is any token, case-sensitive (RFC 9110 §9.1): espalier answers `get` with 405 \
     and frames it exactly like GET; nginx refuses methods that are not upper-case letters",
)];

const PROBE: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n";

/// (name, raw request) — each is followed by [`PROBE`].
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let post = |headers: &str, body: &str| {
        format!("POST /index.html HTTP/1.1\r\nHost: x\r\n{headers}\r\n{body}").into_bytes()
    };
    let te = |value: &str| {
        post(
            &format!("Transfer-Encoding: {value}\r\n"),
            "3\r\nabc\r\n0\r\n\r\n",
        )
    };
    vec![
        ("plain GET", b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("sized body", post("Content-Length: 3\r\n", "abc")),
        ("chunked body", te("chunked")),
        ("CL then TE", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n")),
        ("TE then CL", post("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", "3\r\nabc\r\n0\r\n\r\n")),
        ("two equal CL", post("Content-Length: 3\r\nContent-Length: 3\r\n", "abc")),
        ("two different CL", post("Content-Length: 3\r\nContent-Length: 4\r\n", "abcd")),
        ("CL list", post("Content-Length: 3, 3\r\n", "abc")),
        ("CL plus sign", post("Content-Length: +3\r\n", "abc")),
        ("CL hex", post("Content-Length: 0x3\r\n", "abc")),
        ("CL negative", post("Content-Length: -3\r\n", "abc")),
        ("CL huge", post("Content-Length: 99999999999999999999\r\n", "abc")),
        ("CL space inside", post("Content-Length: 1 2\r\n", "abc")),
        ("TE upper case", te("CHUNKED")),
        ("TE trailing space", te("chunked ")),
        ("TE leading tab", te("\tchunked")),
        ("TE trailing tab", te("chunked\t")),
        ("CL leading tab", post("Content-Length:\t3\r\n", "abc")),
        ("Host leading tab", b"GET /index.html HTTP/1.1\r\nHost:\tx\r\n\r\n".to_vec()),
        ("TE xchunked", te("xchunked")),
        ("TE chunked, chunked", te("chunked, chunked")),
        ("TE gzip, chunked", te("gzip, chunked")),
        ("TE identity", te("identity")),
        ("TE on two lines", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n")),
        ("TE space before colon", post("Transfer-Encoding : chunked\r\n", "3\r\nabc\r\n0\r\n\r\n")),
        ("TE obs-fold", post("Transfer-Encoding:\r\n chunked\r\n", "3\r\nabc\r\n0\r\n\r\n")),
        ("TE vertical tab", te("\x0bchunked")),
        ("TE on HTTP/1.0", b"POST /index.html HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec()),
        ("chunk size 0x", post("Transfer-Encoding: chunked\r\n", "0x3\r\nabc\r\n0\r\n\r\n")),
        ("chunk size plus", post("Transfer-Encoding: chunked\r\n", "+3\r\nabc\r\n0\r\n\r\n")),
        ("chunk size negative", post("Transfer-Encoding: chunked\r\n", "-3\r\nabc\r\n0\r\n\r\n")),
        ("chunk size leading space", post("Transfer-Encoding: chunked\r\n", " 3\r\nabc\r\n0\r\n\r\n")),
        ("chunk size bare LF", post("Transfer-Encoding: chunked\r\n", "3\nabc\r\n0\r\n\r\n")),
        ("chunk data bare LF", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\n0\r\n\r\n")),
        ("chunk data too long", post("Transfer-Encoding: chunked\r\n", "3\r\nabcd\r\n0\r\n\r\n")),
        ("chunk size overflow", post("Transfer-Encoding: chunked\r\n", "1\r\na\r\nffffffffffffffff\r\nxx\r\n0\r\n\r\n")),
        ("chunk size 17 digits", post("Transfer-Encoding: chunked\r\n", "10000000000000003\r\nabc\r\n0\r\n\r\n")),
        ("chunk extension", post("Transfer-Encoding: chunked\r\n", "3;a=b\r\nabc\r\n0\r\n\r\n")),
        ("chunk extension NUL", post("Transfer-Encoding: chunked\r\n", "3;a\0\r\nabc\r\n0\r\n\r\n")),
        ("chunk extension bare CR", post("Transfer-Encoding: chunked\r\n", "3;a\rb\r\nabc\r\n0\r\n\r\n")),
        ("last chunk bare LF", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\n\r\n")),
        ("trailer", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\nX: y\r\n\r\n")),
        ("trailer obs-fold", post("Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\nX: y\r\n z\r\n\r\n")),
        ("two Host", b"GET /index.html HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec()),
        ("Host with slash", b"GET /index.html HTTP/1.1\r\nHost: a/b\r\n\r\n".to_vec()),
        ("Host with space", b"GET /index.html HTTP/1.1\r\nHost: a b\r\n\r\n".to_vec()),
        ("Host empty", b"GET /index.html HTTP/1.1\r\nHost: \r\n\r\n".to_vec()),
        ("Host dot dot", b"GET /index.html HTTP/1.1\r\nHost: a..b\r\n\r\n".to_vec()),
        ("no Host on 1.1", b"GET /index.html HTTP/1.1\r\n\r\n".to_vec()),
        ("bare LF head", b"GET /index.html HTTP/1.1\nHost: x\n\n".to_vec()),
        ("bare CR in value", b"GET /index.html HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n".to_vec()),
        ("NUL in value", b"GET /index.html HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n".to_vec()),
        ("NUL in path", b"GET /index\0.html HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("header without colon", b"GET /index.html HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n".to_vec()),
        ("space in header name", b"GET /index.html HTTP/1.1\r\nHost: x\r\nX Y: z\r\n\r\n".to_vec()),
        ("obs-fold in a header", b"GET /index.html HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n".to_vec()),
        ("double space in line", b"GET  /index.html HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("version 1.2", b"GET /index.html HTTP/1.2\r\nHost: x\r\n\r\n".to_vec()),
        ("version 2.0", b"GET /index.html HTTP/2.0\r\nHost: x\r\n\r\n".to_vec()),
        ("lowercase method", b"get /index.html HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("HTTP/0.9", b"GET /index.html\r\n\r\n".to_vec()),
        ("space in target", b"GET /index .html HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("GET with sized body", b"GET /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".to_vec()),
    ]
}

/// Sends `raw` then the probe, and reads responses until the server closes or goes quiet.
fn answers(addr: SocketAddr, raw: &[u8]) -> Answers {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let mut bytes = raw.to_vec();
    bytes.extend_from_slice(PROBE);
    let _ = s.write_all(&bytes);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    while Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    parse_statuses(&buf)
}

/// The status of each complete response in `buf` (bodies skipped by Content-Length).
fn parse_statuses(mut buf: &[u8]) -> Answers {
    let mut out = Vec::new();
    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let Some(status) = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()) else {
            break;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        out.push(status);
        buf = &buf[(end + 4 + len).min(buf.len())..];
    }
    out
}

/// nginx in the foreground, one process, serving the same files.
struct Nginx {
    child: Child,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_nginx(dir: &std::path::Path) -> Nginx {
    need_tools("nginx:nginx-light", "nginx");
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("nginx installed");
    let port = free_port();
    let conf = dir.join("nginx.conf");
    std::fs::create_dir_all(dir.join("nginx-tmp")).unwrap();
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nmaster_process off;\nerror_log {d}/nginx-error.log;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/nginx-tmp;\n\
             proxy_temp_path {d}/nginx-tmp;\n  fastcgi_temp_path {d}/nginx-tmp;\n\
             uwsgi_temp_path {d}/nginx-tmp;\n  scgi_temp_path {d}/nginx-tmp;\n\
             server {{ listen 127.0.0.1:{port}; root {d}/www; }}\n}}\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let child = Command::new(nginx)
        .args(["-c", conf.to_str().unwrap(), "-p", dir.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let n = Nginx { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not open its port");
        std::thread::sleep(Duration::from_millis(20));
    }
    n
}

#[test]
fn espalier_never_accepts_what_nginx_rejects() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let nginx = start_nginx(dir.path());
    let port = free_port();
    let _server = Server::with_config(
        dir.path(),
        &format!(
            "[server]\nadmin = \"127.0.0.1:{}\"\n[[pool]]\nname = \"p\"\nprocesses = 1\n\
             [[site]]\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
            free_port()
        ),
    );
    let esp_addr = SocketAddr::from(([127, 0, 0, 1], port));
    let nginx_addr = SocketAddr::from(([127, 0, 0, 1], nginx.port));
    let mut failures = Vec::new();
    let mut table = String::new();
    for (name, raw) in cases() {
        let e = answers(esp_addr, &raw);
        let n = answers(nginx_addr, &raw);
        table.push_str(&format!("{name:28} espalier {e:?}  nginx {n:?}\n"));
        let allowed = ALLOWED.iter().any(|(a, _)| *a == name);
        let more_lenient = accepted(&e) && !accepted(&n);
        let framed_differently = accepted(&e) && accepted(&n) && e.len() != n.len();
        if (more_lenient || framed_differently) && !allowed {
            failures.push(format!("{name}: espalier {e:?}, nginx {n:?}"));
        }
    }
    println!("{table}");
    assert!(
        failures.is_empty(),
        "espalier accepts or frames differently what nginx does not:\n{}\n\nall cases:\n{table}",
        failures.join("\n")
    );
    // The probe proves each server still answers after every case.
    assert!(accepted(&answers(
        esp_addr,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    )));
}
