//! How fast and how much one client may ask (issue #29, item 2): a client over its rate gets
//! 429 with `Retry-After` while another is served, and the log says when it starts and stops
//! being limited; a client holding too many requests in flight at a real app is limited
//! while its held requests finish; a trusted proxy's clients are counted apart.

use crate::common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;

fn ask(from: &str, addr: SocketAddr, path: &str, extra: &str) -> Response {
    let mut c = Conn::open_from(from, addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n").as_bytes());
    c.read_response(false).expect("an answer")
}

#[test]
fn a_client_over_its_rate_gets_429_while_another_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "<p>home\n").unwrap();
    let (port, behind) = (free_port(), free_port());
    // Five a minute, three at once: a test's pace is far above it, whatever the machine.
    let site = |name: &str, port: u16, keys: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n{keys}\n[[site.app]]\npath = \"/\"\npool = \"files\"\n")
    };
    let config = format!(
        "[[pool]]\nname = \"files\"\n{}{}",
        site("limited", port, "limit = { rate = \"5/m\", burst = 3 }"),
        site(
            "behind",
            behind,
            "limit = { rate = \"5/m\", burst = 2, action = 503 }\ntrusted_proxies = [\"127.0.0.1\"]"
        ),
    );
    let server = Server::with_config(d, &config);
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    for k in 0..3 {
        let r = ask("127.0.0.2", at, "/", "");
        assert_eq!(r.status, 200, "request {k}: {}", server.log_text());
    }
    let r = ask("127.0.0.2", at, "/", "");
    assert_eq!(r.status, 429);
    assert_eq!(r.text(), "429 Too Many Requests\n");
    let wait: u32 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=12).contains(&wait), "one more in 12 s at most: {wait}");
    // Another client is served meanwhile, and the first stays limited.
    assert_eq!(ask("127.0.0.3", at, "/", "").status, 200);
    assert_eq!(ask("127.0.0.2", at, "/", "").status, 429);
    server.wait_for_log(
        "site limited: client 127.0.0.2 limited (over 5/m, burst 3): answering 429",
        Duration::from_secs(20),
    );
    // Behind a trusted proxy, the clients it names are counted, each apart.
    let at = SocketAddr::from(([127, 0, 0, 1], behind));
    let xff = |ip: &str| format!("X-Forwarded-For: {ip}\r\n");
    for _ in 0..2 {
        assert_eq!(ask("127.0.0.1", at, "/", &xff("192.0.2.1")).status, 200);
    }
    let r = ask("127.0.0.1", at, "/", &xff("192.0.2.1"));
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());
    assert_eq!(ask("127.0.0.1", at, "/", &xff("192.0.2.2")).status, 200);
    drop(server);
}

#[test]
fn a_client_holding_too_many_requests_at_an_app_is_limited() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ RECORD = \"seen.log\" }}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nlimit = {{ concurrent = 2 }}\n[[site.app]]\npool = \"app\"\n",
            test_app().display()
        ),
    );
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    // (Another client first: a slot is given back just after its answer is sent.)
    assert_eq!(
        ask("127.0.0.4", at, "/ready", "").status,
        200,
        "{}",
        server.log_text()
    );
    // Two slow requests in flight at the app (it has them: they are in its record)...
    let mut held: Vec<Conn> = (0..2)
        .map(|k| {
            let mut c = Conn::open_from("127.0.0.2", at);
            c.send(format!("GET /slow{k} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
            c
        })
        .collect();
    server.wait_until("the app has both", Duration::from_secs(30), |_| {
        std::fs::read_to_string(d.join("seen.log"))
            .unwrap_or_default()
            .matches("/slow")
            .count()
            == 2
    });
    // ... so a third from the same client is refused, at once, and never reaches it; another
    // client is served.
    let r = ask("127.0.0.2", at, "/third", "");
    assert_eq!((r.status, r.header("retry-after")), (429, Some("1")));
    assert_eq!(ask("127.0.0.3", at, "/other", "").status, 200);
    for c in &mut held {
        assert_eq!(c.read_response(false).expect("the held answer").status, 200);
    }
    // Done, its slots are given back.
    server.wait_until("its slots given back", Duration::from_secs(30), |_| {
        ask("127.0.0.2", at, "/after", "").status == 200
    });
    let seen = std::fs::read_to_string(d.join("seen.log")).unwrap();
    assert!(!seen.contains("/third"), "{seen}");
    server.wait_for_log(
        "site s: client 127.0.0.2 limited (over 2 requests in flight)",
        Duration::from_secs(20),
    );
    server.wait_for_log(
        "site s: client 127.0.0.2 no longer limited",
        Duration::from_secs(20),
    );
    drop(server);
}

/// A flood from more addresses than the limit's table holds (70,000, named by a trusted
/// proxy): past the table's bound new clients are refused, not let in uncounted, and the
/// refusals are counted in `/metrics` (issue #39, item 11; nginx's `limit_req` fails closed
/// the same way). One worker thread, so one table holds them all.
#[test]
fn a_flood_of_addresses_past_the_client_table_is_refused_and_counted() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"p\"\nprocesses = 1\ncpus = \"0\"\n[[site]]\nname = \"flood\"\nbindings = [\"http://127.0.0.1:{port}\"]\ntrusted_proxies = [\"127.0.0.1\"]\nlimit = {{ rate = \"1/m\" }}\nmetrics = true\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = std::io::BufWriter::new(stream);
    let (mut ok, mut refused) = (0u32, 0u32);
    const CLIENTS: u32 = 70_000;
    const BATCH: u32 = 500;
    let mut line = String::new();
    for start in (0..CLIENTS).step_by(BATCH as usize) {
        for k in start..start + BATCH {
            let client = std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(k));
            write!(
                writer,
                "HEAD / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {client}\r\n\r\n"
            )
            .unwrap();
        }
        writer.flush().unwrap();
        // Each answer: a status line, fields, an empty line (HEAD: no body).
        for _ in 0..BATCH {
            line.clear();
            reader.read_line(&mut line).unwrap();
            match line.split(' ').nth(1) {
                Some("200") => ok += 1,
                Some("429") => refused += 1,
                other => panic!("unexpected answer {other:?}: {line}"),
            }
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
            }
        }
    }
    assert_eq!(ok + refused, CLIENTS);
    // The table holds 65,536 (sharded: a shard fills a little before the whole).
    assert!(
        refused >= CLIENTS - 65_536 && ok >= 60_000,
        "{ok} let in, {refused} refused"
    );
    let admin = server.admin.clone().unwrap().parse().unwrap();
    server.wait_until("the refusals in /metrics", Duration::from_secs(20), |_| {
        let (_, text) = espalier::server::admin::request(admin, "GET", "/metrics").unwrap();
        String::from_utf8_lossy(&text).lines().any(|l| {
            l.starts_with("espalier_site_limit_table_full_total{site=\"flood\"")
                && l.ends_with(&format!(" {refused}"))
        })
    });
    server.wait_for_log("the limit's client table is full", Duration::from_secs(5));
}

/// `max_body_size` per site and per path, over the server's (1 MiB by default): a site may
/// take more, a path less; a body over its own bound gets 413 before the app sees a byte —
/// declared or chunked, lent to an app or answered here, over HTTP/1.1 and HTTP/2 — while
/// the server's bound holds for a site without one.
#[test]
fn each_site_and_path_takes_bodies_up_to_its_own_max_body_size() {
    need_tools("python3:python3 curl:curl", "python3 and curl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::create_dir_all(d.join("marks")).unwrap();
    std::fs::write(d.join("two-mib"), vec![b'u'; 2 << 20]).unwrap();
    std::fs::write(d.join("two-kib"), vec![b'u'; 2 << 10]).unwrap();
    std::fs::write(d.join("half-kib"), vec![b'u'; 512]).unwrap();
    let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/upload_app.py");
    let (big, plain) = (free_port(), free_port());
    let config = format!(
        r#"
[[pool]]
name = "uploads"
command = ["python3", "{app}"]
environment = {{ MARKS = "{marks}" }}
health = "/healthz"
[[site]]
name = "big"
bindings = ["http://127.0.0.1:{big}"]
root = "www"
max_body_size = "4MiB"
[[site.app]]
pool = "uploads"
[[site.app]]
path = "/small/"
pool = "uploads"
max_body_size = "1KiB"
[[site.app]]
path = "/files/"
handler = "static"
[[site]]
name = "plain"
bindings = ["http://127.0.0.1:{plain}"]
[[site.app]]
pool = "uploads"
"#,
        app = app.display(),
        marks = d.join("marks").display(),
    );
    let server = Server::with_config(d, &config);
    let post = |port: u16, path: &str, file: &str, extra: &[&str]| -> (String, String) {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
            .args(["--data-binary", &format!("@{file}")])
            .args(extra)
            .arg(format!("http://127.0.0.1:{port}{path}"))
            .current_dir(d)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.to_string(), body.to_string())
    };
    let chunked: &[&str] = &["-H", "Transfer-Encoding: chunked"];
    let h2: &[&str] = &["--http2-prior-knowledge"];
    for extra in [&[][..], chunked, h2] {
        // Over the server's bound, under the site's: the app gets it whole.
        let (code, body) = post(big, "/up", "two-mib", extra);
        assert_eq!(code, "200", "{extra:?}: {body} {}", server.log_text());
        assert!(
            body.starts_with(&format!("len={}", 2 << 20)),
            "{extra:?}: {body}"
        );
        // The site without its own: the server's.
        assert_eq!(post(plain, "/up", "two-mib", extra).0, "413", "{extra:?}");
        // The path's own, under the site's.
        assert_eq!(
            post(big, "/small/x", "two-kib", extra).0,
            "413",
            "{extra:?}"
        );
        assert_eq!(
            post(big, "/small/x", "half-kib", extra).0,
            "200",
            "{extra:?}"
        );
        // Answered here: the body is taken (the static path refuses the method, not the size).
        assert_eq!(post(big, "/files/", "two-mib", extra).0, "405", "{extra:?}");
    }
    // A bound that is no size is one line at `check`.
    std::fs::write(d.join("bad.toml"), config.replace("\"1KiB\"", "\"lots\"")).unwrap();
    let out = espalier(&["check", "-c", d.join("bad.toml").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("max_body_size"),
        "{err}"
    );
}

/// A request answered here whose chunked body arrives after its head runs its site's chain
/// once: one token of a `1/m` rate spent, not two (its head was routed again as the body
/// came, and the second run refused the request itself).
#[test]
fn a_chunked_body_arriving_late_spends_one_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "<p>home\n").unwrap();
    let port = free_port();
    let config = format!(
        "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\nlimit = {{ rate = \"1/m\", burst = 1 }}\n[[site.app]]\npath = \"/\"\n"
    );
    let _server = Server::with_config(d, &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = Conn::open(addr);
    c.send(b"POST /index.html HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    c.wait_read();
    c.send(b"5\r\nhello\r\n");
    c.wait_read();
    c.send(b"0\r\n\r\n");
    let first = c.read_response(false).expect("an answer").status;
    assert_ne!(first, 429, "the request's own chain refused it");
    // The one token is spent: the next request is limited.
    let next = ask("127.0.0.1", addr, "/", "");
    assert_eq!(next.status, 429);
}
