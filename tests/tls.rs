//! HTTPS on the real binary, spoken to by curl and openssl: certificates chosen by SNI for
//! three sites on one address, TLS 1.2 and 1.3 only, ALPN, session resumption, keep-alive
//! and a large file over TLS, a proxied app told the scheme, certificate reload (a new one
//! served, a bad one refused while the old keeps serving), and every bad certificate as one
//! line at `check`; and `espalier bench` over HTTPS/1.1, HTTP/2 and h2c, checked against the
//! server's access log. Certificates are made by openssl (and python3-cryptography for dates
//! openssl cannot set) in the test.

use crate::common;

use common::browser::browser_tools;
use common::tls::*;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// For each name `h`: a certificate for `h.test` (`h.pem`, `h.key`) and a document root `h/`
/// whose index says `site h`.
fn sites_with_certificates(dir: &Path, names: &[&str]) {
    for h in names {
        openssl_cert(dir, h, &format!("{h}.test"));
        std::fs::create_dir(dir.join(h)).unwrap();
        std::fs::write(dir.join(h).join("index.html"), format!("site {h}\n")).unwrap();
    }
}

/// A 3 MiB file of a repeating pattern at `path` (well above the static handler's in-memory
/// limit: it goes by pieces over TLS); its bytes.
fn big_file(path: &Path) -> Vec<u8> {
    let big: Vec<u8> = (0..(3 << 20)).map(|i: u32| (i * 7 % 251) as u8).collect();
    std::fs::write(path, &big).unwrap();
    big
}

/// The pool of the test app that reports who it is and the scheme it was told
/// (`{app}` stands for its path).
const APP_POOL: &str = r#"
[[pool]]
name = "app"
command = ["python3", "{app}"]
environment = { SECRET = "{app}" }
health = "/healthz"
"#;

fn app_pool() -> String {
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join(APP);
    APP_POOL.replace("{app}", &app.display().to_string())
}

fn check(dir: &Path, config: &str) -> (bool, String) {
    std::fs::write(dir.join("check.toml"), config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["check", "-c"])
        .arg(dir.join("check.toml"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const APP: &str = "tests/apps/whoami_app.py";

#[test]
fn https_with_sni_resumption_and_certificate_reload() {
    need_tools(
        "openssl:openssl curl:curl -:python3-cryptography",
        "openssl, curl and python3-cryptography",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sites_with_certificates(d, &["a", "b", "c"]);
    let big = big_file(&d.join("a/big.bin"));
    let (port, app_port, http_port) = (free_port(), free_port(), free_port());
    let config = format!(
        r#"
[[pool]]
name = "web"
{app_pool}
[[site]]
name = "a"
bindings = ["https://127.0.0.1:{port}:a.test", "http://127.0.0.1:{http_port}:a.test"]
root = "a"
tls = {{ cert = "a.pem", key = "a.key" }}
redirect_to_https = true
[[site.app]]
pool = "web"
[[site]]
name = "b"
bindings = ["https://127.0.0.1:{port}:b.test"]
root = "b"
tls = {{ cert = "b.pem", key = "b.key" }}
[[site.app]]
pool = "web"
[[site]]
name = "c"
bindings = ["https://127.0.0.1:{port}:c.test", "http://127.0.0.1:{http_port}:c.test"]
root = "c"
tls = {{ cert = "c.pem", key = "c.key" }}
hsts = "max-age=600; includeSubDomains"
[[site.app]]
pool = "web"
[[site]]
name = "app"
bindings = ["https://127.0.0.1:{app_port}"]
tls = {{ cert = "a.pem", key = "a.key" }}
hsts = "max-age=300"
[[site.app]]
pool = "app"
"#,
        app_pool = app_pool()
    );
    let server = Server::with_config(d, &config);
    server.wait_for_log(
        &format!("listening on https://127.0.0.1:{port}"),
        std::time::Duration::from_secs(10),
    );

    // SNI: each name gets its own certificate (curl trusts only that one) and its site.
    for h in ["a", "b", "c"] {
        let (code, body, verbose) =
            curl(d, &format!("{h}.pem"), &format!("{h}.test"), port, "/", &[]);
        assert_eq!(
            (code, body.as_str()),
            (0, format!("site {h}\n").as_str()),
            "{verbose}"
        );
        assert!(verbose.contains("ALPN: server accepted h2"), "{verbose}");
        let (code, body, verbose) = curl(
            d,
            &format!("{h}.pem"),
            &format!("{h}.test"),
            port,
            "/",
            &["--http1.1"],
        );
        assert_eq!((code, body.as_str()), (0, format!("site {h}\n").as_str()));
        assert!(
            verbose.contains("ALPN: server accepted http/1.1"),
            "{verbose}"
        );
    }
    // HSTS over TLS only; redirect_to_https sends cleartext requests to the https port.
    let (_, _, verbose) = curl(d, "c.pem", "c.test", port, "/", &[]);
    assert!(
        verbose
            .to_ascii_lowercase()
            .contains("< strict-transport-security: max-age=600; includesubdomains"),
        "{verbose}"
    );
    let http = |host: &str, path: &str| {
        let mut c = Conn::open(std::net::SocketAddr::from(([127, 0, 0, 1], http_port)));
        c.send(
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        c.read_response(false).expect("an answer")
    };
    let r = http("c.test", "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("strict-transport-security"), None);
    // A proxied app's answers get the site's HSTS too, over HTTP/1.1 and HTTP/2, unless the
    // app sets its own.
    for (path, version, policy) in [
        ("/", "--http1.1", "max-age=300"),
        ("/", "--http2", "max-age=300"),
        ("/own-hsts", "--http1.1", "max-age=1"),
        ("/own-hsts", "--http2", "max-age=1"),
    ] {
        let (code, _, verbose) = curl(d, "a.pem", "a.test", app_port, path, &[version]);
        let lines: Vec<&str> = verbose
            .lines()
            .filter(|l| {
                l.to_ascii_lowercase()
                    .starts_with("< strict-transport-security:")
            })
            .collect();
        assert_eq!(code, 0, "{verbose}");
        assert_eq!(lines.len(), 1, "{path} {version}: {verbose}");
        assert!(
            lines[0].trim_end().ends_with(policy),
            "{path} {version}: {verbose}"
        );
    }
    let r = http("a.test", "/x/y?z=1");
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://a.test:{port}/x/y?z=1").as_str())
    );
    // A name no site has, on an address without a default site: a handshake alert.
    let out = s_client(port, &["-servername", "other.test"]);
    assert!(
        out.contains("alert") && out.contains("Cipher is (NONE)"),
        "{out}"
    );
    // The default site of an address (a binding without a host) answers any name.
    let (code, _, verbose) = curl(d, "a.pem", "a.test", app_port, "/", &[]);
    assert_eq!(code, 0, "{verbose}");

    // TLS 1.2 and 1.3 only.
    for (flag, ok) in [
        ("-tls1_3", true),
        ("-tls1_2", true),
        ("-tls1_1", false),
        ("-tls1", false),
    ] {
        let out = s_client(port, &["-servername", "a.test", flag]);
        assert_eq!(!out.contains("Cipher is (NONE)"), ok, "{flag}: {out}");
    }

    // Resumption: a second connection with the first one's session is resumed.
    let sess = d.join("session.pem");
    let sess_arg = sess.to_str().unwrap();
    for version in ["-tls1_3", "-tls1_2"] {
        let first = s_client(
            port,
            &["-servername", "b.test", version, "-sess_out", sess_arg],
        );
        assert!(first.contains("New, "), "{first}");
        let second = s_client(
            port,
            &["-servername", "b.test", version, "-sess_in", sess_arg],
        );
        assert!(second.contains("Reused, "), "{version}: {second}");
    }

    // Keep-alive over TLS with HTTP/1.1, and a 3 MiB file that cannot go by sendfile.
    let out = Command::new("curl")
        .args([
            "-sS",
            "-v",
            "--http1.1",
            "--max-time",
            "20",
            "--cacert",
            "a.pem",
            "--resolve",
        ])
        .arg(format!("a.test:{port}:127.0.0.1"))
        .args(["-o", "first.out", &format!("https://a.test:{port}/")])
        .args(["-o", "big.out", &format!("https://a.test:{port}/big.bin")])
        .current_dir(d)
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{verbose}");
    assert!(
        verbose.contains("Re-using existing connection"),
        "{verbose}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("first.out")).unwrap(),
        "site a\n"
    );
    let got = std::fs::read(d.join("big.out")).unwrap();
    assert!(
        got.len() == big.len() && got == big,
        "the 3 MiB file differs ({} bytes)",
        got.len()
    );

    // A proxied app behind an https address is told so (X-Forwarded-Proto).
    let (code, body, verbose) = curl(d, "a.pem", "a.test", app_port, "/", &[]);
    assert_eq!(code, 0, "{verbose}");
    assert!(body.trim_end().ends_with("proto=https"), "{body}");

    // A renewed certificate is served after a reload; the connection of the old one is not cut.
    let before = s_client(port, &["-servername", "b.test"]);
    openssl_cert(d, "b", "b.test");
    server.signal(libc::SIGHUP);
    server.wait_for_log("reloaded", Duration::from_secs(10));
    server.wait_until(
        "the renewed certificate served",
        Duration::from_secs(20),
        |_| curl(d, "b.pem", "b.test", port, "/", &[]).0 == 0,
    );
    assert_ne!(
        s_client(port, &["-servername", "b.test"])
            .split("-----BEGIN CERTIFICATE-----")
            .nth(1),
        before.split("-----BEGIN CERTIFICATE-----").nth(1)
    );
    // A bad one (another site's key) is refused; the running certificate keeps serving.
    std::fs::copy(d.join("c.key"), d.join("b.key")).unwrap();
    server.signal(libc::SIGHUP);
    let refused = server.wait_for_log("reload refused", Duration::from_secs(10));
    assert!(
        refused.contains("does not belong to certificate"),
        "{refused}"
    );
    assert_eq!(curl(d, "b.pem", "b.test", port, "/", &[]).1, "site b\n");
}

#[test]
fn bad_certificates_are_one_line_at_check() {
    need_tools(
        "openssl:openssl -:python3-cryptography",
        "openssl and python3-cryptography",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_cert(d, "good", "good.test");
    openssl_cert(d, "other", "other.test");
    dated_cert(d, "expired", "old.test", -30, -1);
    dated_cert(d, "soon", "soon.test", -30, 5);
    std::fs::write(d.join("junk.pem"), "not a certificate\n").unwrap();
    let site = |cert: &str, key: &str| {
        format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:8443\"]\ntls = {{ cert = \"{cert}\", key = \"{key}\" }}\n[[site.app]]\npool = \"p\"\n")
    };
    let (ok, err) = check(d, &site("good.pem", "good.key"));
    assert!(ok, "{err}");
    for (cert, key, says) in [
        ("good.pem", "other.key", "does not belong to certificate"),
        ("expired.pem", "expired.key", "expired on"),
        ("missing.pem", "good.key", "cannot read certificate"),
        ("junk.pem", "good.key", "holds no CERTIFICATE block"),
        ("good.pem", "junk.pem", "cannot read a private key"),
    ] {
        let (ok, err) = check(d, &site(cert, key));
        assert!(!ok, "{cert} {key}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("key `site[0].tls`") && err.contains(says),
            "{err}"
        );
    }
    // Expiring within 14 days: a warning, not an error.
    let (ok, err) = check(d, &site("soon.pem", "soon.key"));
    assert!(
        ok && err.contains("expires on") && err.contains("(in 4 days)"),
        "{err}"
    );
    // https without a certificate, a certificate without https, TLS and cleartext on one address.
    let (ok, err) = check(d, "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"https://127.0.0.1:8443\"]\n[[site.app]]\npool = \"p\"\n");
    assert!(
        !ok && err.contains("is https, but the site has no certificate"),
        "{err}"
    );
    let (ok, err) = check(
        d,
        &site("good.pem", "good.key").replace("https://", "http://"),
    );
    assert!(!ok && err.contains("applies to https:// bindings"), "{err}");
    // HSTS must be a Strict-Transport-Security value; a redirect needs somewhere to go from.
    let with =
        |line: &str| site("good.pem", "good.key").replace("tls =", &format!("{line}\ntls ="));
    let (ok, err) = check(d, &with("hsts = \"forever\""));
    assert!(
        !ok && err.contains("key `site[0].hsts`") && err.contains("max-age=31536000"),
        "{err}"
    );
    let (ok, err) = check(d, &with("redirect_to_https = true"));
    assert!(
        !ok && err.contains("key `site[0].redirect_to_https`") && err.contains("an http:// one"),
        "{err}"
    );
}

/// An HTTP/2 connection over TLS to 127.0.0.1:`port`, asking for `host` (SNI), whatever its
/// certificate; with the task that drives it.
async fn h2_over_tls(
    port: u16,
    host: &str,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    use std::sync::Arc;
    // Any certificate (the flood below tests the server's HTTP/2 limits, not its
    // certificate), as `espalier bench -k` believes one.
    let insecure = espalier::tls::client::Trust::Insecure;
    let config =
        espalier::tls::client::client_config(&insecure, None, vec![b"h2".to_vec()]).unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    (send, tokio::spawn(conn))
}

/// Two sites of one proxied pool on one thread, each with its own HSTS policy, on one HTTP/2
/// connection: a slow stream of a is answered with a's policy while b's streams are routed
/// meanwhile, and b's with b's (a stream once took the thread's last routed site's line).
#[test]
fn each_http2_stream_gets_its_own_sites_hsts() {
    need_tools("openssl:openssl python3:python3", "openssl and python3");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_cert(d, "a", "a.test");
    openssl_cert(d, "b", "b.test");
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            r#"
[[pool]]
name = "one"
cpus = "0"
command = ["python3", "{slow_app}"]
environment = {{ RECORD = "seen.log", SLOW_SECONDS = "2" }}
[[site]]
name = "a"
bindings = ["https://127.0.0.1:{port}:a.test"]
tls = {{ cert = "a.pem", key = "a.key" }}
hsts = "max-age=111"
[[site.app]]
pool = "one"
[[site]]
name = "b"
bindings = ["https://127.0.0.1:{port}:b.test"]
tls = {{ cert = "b.pem", key = "b.key" }}
hsts = "max-age=222"
[[site.app]]
pool = "one"
"#,
            slow_app = test_app().display()
        ),
    );
    let hsts = |r: &http::Response<h2::RecvStream>| {
        let v = r.headers().get("strict-transport-security");
        v.map(|v| v.to_str().unwrap().to_string())
    };
    block_on(async {
        let (mut h2, _driver) = h2_over_tls(port, "a.test").await;
        let slow = h2_get(&mut h2, "https://a.test/slow-a").await;
        // In flight: the app has it.
        let seen = d.join("seen.log");
        wait_for_async("/slow-a at the app", Duration::from_secs(30), || {
            recorded(&seen).iter().any(|p| p == "/slow-a")
        })
        .await;
        for _ in 0..2 {
            let b = h2_get(&mut h2, "https://b.test/fast-b")
                .await
                .await
                .unwrap();
            assert_eq!(b.status(), 200);
            assert_eq!(hsts(&b).as_deref(), Some("max-age=222"));
        }
        let a = slow.await.unwrap();
        assert_eq!(a.status(), 200, "{}", server.log_text());
        assert_eq!(hsts(&a).as_deref(), Some("max-age=111"));
    });
}

/// Opens an HTTP/2 connection to `host` on `port` and sends `n` requests,
/// each reset by dropping it as soon as it is sent (CVE-2023-44487's rapid reset); says how
/// the connection ended.
fn rapid_reset_flood(port: u16, host: &str, n: usize) -> String {
    block_on(async {
        let (mut send, driver) = h2_over_tls(port, host).await;
        let mut sent = 0;
        for _ in 0..n {
            send = match send.ready().await {
                Ok(s) => s,
                Err(e) => return format!("stopped by the server after {sent}: {e}"),
            };
            let req = http::Request::get(format!("https://{host}/"))
                .body(())
                .unwrap();
            match send.send_request(req, true) {
                // Dropping the response resets the stream (CANCEL).
                Ok((response, _)) => drop(response),
                Err(e) => return format!("stopped by the server after {sent}: {e}"),
            }
            sent += 1;
        }
        drop(send);
        let ended = tokio::time::timeout(Duration::from_secs(10), driver).await;
        format!("all {sent} sent; the connection ended: {ended:?}")
    })
}

#[test]
fn http2_multiplexes_streams_and_survives_a_rapid_reset_flood() {
    need_tools(
        "openssl:openssl curl:curl h2load:nghttp2-client",
        "openssl, curl and h2load",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sites_with_certificates(d, &["a"]);
    let big = big_file(&d.join("a/big.bin"));
    let (port, app_port, h2c_port) = (free_port(), free_port(), free_port());
    let config = format!(
        r#"
[[pool]]
name = "web"
{app_pool}
[[site]]
name = "a"
bindings = ["https://127.0.0.1:{port}:a.test", "http://127.0.0.1:{h2c_port}:a.test"]
root = "a"
tls = {{ cert = "a.pem", key = "a.key" }}
access_log = {{ path = "a.log", format = "json" }}
[[site.app]]
pool = "web"
[[site.app]]
path = "/dynamic"
pool = "web"
handler = "dynamic"
[[site]]
name = "app"
bindings = ["https://127.0.0.1:{app_port}:a.test"]
tls = {{ cert = "a.pem", key = "a.key" }}
[[site.app]]
pool = "app"
"#,
        app_pool = app_pool()
    );
    let server = Server::with_config(d, &config);

    // curl speaks HTTP/2 when offered (ALPN h2): a file, the dynamic page, HEAD, a proxied app.
    let h2 = ["--http2", "-w", "\n%{http_version}"];
    let (code, body, verbose) = curl(d, "a.pem", "a.test", port, "/", &h2);
    assert_eq!((code, body.as_str()), (0, "site a\n\n2"), "{verbose}");
    assert!(verbose.contains("ALPN: server accepted h2"), "{verbose}");
    let (_, body, _) = curl(d, "a.pem", "a.test", port, "/dynamic?x=1", &h2);
    assert!(
        body.contains("<th>query</th><td>x=1</td>") && body.ends_with("\n2"),
        "{body}"
    );
    let (_, _, verbose) = curl(d, "a.pem", "a.test", port, "/", &["--http2", "-I"]);
    assert!(
        verbose.contains("< HTTP/2 200") && verbose.contains("< content-length: 7"),
        "{verbose}"
    );
    let (code, body, verbose) = curl(d, "a.pem", "a.test", app_port, "/", &h2);
    assert_eq!(code, 0, "{verbose}");
    assert!(
        body.contains("proto=https") && body.ends_with("\n2"),
        "{body}"
    );
    let (code, _, verbose) = curl(
        d,
        "a.pem",
        "a.test",
        port,
        "/big.bin",
        &["--http2", "-o", "big.out"],
    );
    assert_eq!(code, 0, "{verbose}");
    let got = std::fs::read(d.join("big.out")).unwrap();
    assert!(
        got == big,
        "the 3 MiB file differs over HTTP/2 ({} bytes)",
        got.len()
    );

    // Cleartext HTTP/2 with prior knowledge (h2c), beside HTTP/1.1 on the same binding.
    for (flag, version) in [("--http2-prior-knowledge", "2"), ("--http1.1", "1.1")] {
        let out = Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                flag,
                "-w",
                "\n%{http_version}",
                "-H",
                "Host: a.test",
            ])
            .arg(format!("http://127.0.0.1:{h2c_port}/"))
            .output()
            .unwrap();
        let body = String::from_utf8_lossy(&out.stdout);
        assert_eq!(body, format!("site a\n\n{version}"), "{flag}");
    }
    // More header fields than max_headers (100): 431, as over HTTP/1.1.
    let many: Vec<String> = (0..150)
        .flat_map(|k| ["-H".to_string(), format!("X-F{k}: v")])
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let (_, _, verbose) = curl(
        d,
        "a.pem",
        "a.test",
        port,
        "/",
        &[&["--http2"][..], &many].concat(),
    );
    assert!(verbose.contains("< HTTP/2 431"), "{verbose}");
    // 100 streams at once on one connection, 1 000 requests, every one answered.
    let out = Command::new("h2load")
        .args(["-n", "1000", "-c", "1", "-m", "100"])
        .arg(format!("--connect-to=127.0.0.1:{port}"))
        .arg(format!("https://a.test:{port}/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Application protocol: h2"), "{text}");
    assert!(text.contains("1000 succeeded, 0 failed"), "{text}");

    // A rapid-reset flood on one connection does not starve another.
    let flood = std::thread::spawn(move || rapid_reset_flood(port, "a.test", 20_000));
    for _ in 0..20 {
        let (code, body, verbose) = curl(d, "a.pem", "a.test", port, "/", &h2);
        assert_eq!((code, body.as_str()), (0, "site a\n\n2"), "{verbose}");
    }
    let ended = flood.join().unwrap();
    eprintln!("rapid reset: {ended}");
    let (code, _, verbose) = curl(d, "a.pem", "a.test", port, "/", &h2);
    assert_eq!(code, 0, "served after the flood: {verbose}");

    // The access log says HTTP/2.0.
    let log = d.join("a.log");
    server.wait_until("an HTTP/2 line in the log", Duration::from_secs(5), |_| {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("\"protocol\":\"HTTP/2.0\""))
    });
}

#[test]
fn a_browser_loads_a_page_over_http2_with_the_sni_certificate() {
    need_tools("openssl:openssl", "openssl");
    let node_dir = browser_tools();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sites_with_certificates(d, &["a", "b"]);
    let port = free_port();
    let mut config = String::from("[[pool]]\nname = \"web\"\n");
    for h in ["a", "b"] {
        config.push_str(&format!("[[site]]\nname = \"{h}\"\nbindings = [\"https://127.0.0.1:{port}:{h}.test\"]\nroot = \"{h}\"\ntls = {{ cert = \"{h}.pem\", key = \"{h}.key\" }}\n[[site.app]]\npool = \"web\"\n"));
    }
    let _server = Server::with_config(d, &config);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls_browser/load.js");
    for h in ["a", "b"] {
        let out = Command::new("node")
            .arg(&script)
            .arg(format!("https://{h}.test:{port}/"))
            .arg(format!("{h}.test"))
            .env("NODE_PATH", node_dir.join("node_modules"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen["protocol"], "h2", "{seen}");
        assert_eq!(seen["status"], 200, "{seen}");
        assert_eq!(
            seen["text"].as_str().unwrap().trim(),
            format!("site {h}"),
            "{seen}"
        );
    }
    // The certificate each name got is its own (what the browser accepted is checked here).
    for h in ["a", "b"] {
        let out = s_client(port, &["-servername", &format!("{h}.test")]);
        assert!(out.contains(&format!("subject=CN = {h}.test")), "{out}");
    }
}

#[test]
fn testssl_finds_no_vulnerability_rated_high_or_critical() {
    need_tools(
        "openssl:openssl testssl:testssl.sh",
        "openssl and testssl.sh",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sites_with_certificates(d, &["a"]);
    let port = free_port();
    let _server = Server::with_config(
        d,
        &format!("[[pool]]\nname = \"web\"\n[[site]]\nbindings = [\"https://127.0.0.1:{port}\"]\nroot = \"a\"\ntls = {{ cert = \"a.pem\", key = \"a.key\" }}\n[[site.app]]\npool = \"web\"\n"),
    );
    // Protocols and every vulnerability check (Heartbleed, CCS, ROBOT, renegotiation, CRIME,
    // BREACH, POODLE, SWEET32, FREAK, DROWN, LOGJAM, BEAST, LUCKY13, RC4, …).
    let json = d.join("testssl.json");
    let out = Command::new("testssl")
        .args([
            "--quiet",
            "--color",
            "0",
            "--warnings",
            "off",
            "--protocols",
            "--vulnerable",
            "--jsonfile",
        ])
        .arg(&json)
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    let findings: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|_| {
            panic!(
                "testssl wrote no findings: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        }))
        .unwrap();
    assert!(findings.len() > 10, "{findings:?}");
    let bad: Vec<String> = findings
        .iter()
        .filter(|f| matches!(f["severity"].as_str(), Some("HIGH" | "CRITICAL")))
        .map(|f| format!("{} {}: {}", f["severity"], f["id"], f["finding"]))
        .collect();
    assert!(bad.is_empty(), "testssl found: {bad:#?}");
    for id in ["SSLv2", "SSLv3", "TLS1", "TLS1_1"] {
        let f = findings
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no {id} finding"));
        assert!(
            f["finding"].as_str().unwrap().contains("not offered"),
            "{f}"
        );
    }
}

#[test]
fn sites_of_different_pools_share_an_https_address_by_sni() {
    need_tools("openssl:openssl curl:curl", "openssl and curl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let mut config = String::from("[[pool]]\nname = \"one\"\n[[pool]]\nname = \"two\"\n");
    for (h, pool) in [("a", "one"), ("b", "one"), ("c", "two")] {
        openssl_cert(d, h, &format!("{h}.test"));
        config.push_str(&format!("[[site]]\nname = \"{h}\"\nbindings = [\"https://127.0.0.1:{port}:{h}.test\"]\ntls = {{ cert = \"{h}.pem\", key = \"{h}.key\" }}\n[[site.app]]\npool = \"{pool}\"\nhandler = \"dynamic\"\n"));
    }
    let server = Server::with_config(d, &config);
    // `/status` (and the admin page, which shows it) names the address as clients write it.
    let addresses = server.status().addresses;
    assert_eq!(addresses.len(), 1);
    assert_eq!(addresses[0].address, format!("https://127.0.0.1:{port}"));
    assert!(addresses[0].shared);
    // A client that names no site (curl to the address, no SNI) is refused with an alert —
    // and the operator is told why, in one line.
    let refused = Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            &format!("https://127.0.0.1:{port}/"),
        ])
        .status()
        .unwrap();
    assert!(!refused.success());
    let line = server.wait_for_log("refused a TLS handshake", Duration::from_secs(10));
    assert!(
        line.contains(&format!(
            "https://127.0.0.1:{port}: refused a TLS handshake for no name"
        )) && line.contains("give one site a binding without a host"),
        "{line}"
    );
    // Whichever pool's thread accepts it, a connection is served by its name's pool, with its
    // name's certificate, in HTTP/2 and HTTP/1.1.
    for round in 0..6 {
        for (h, pool) in [("a", "one"), ("b", "one"), ("c", "two")] {
            let version = if round % 2 == 0 {
                "--http2"
            } else {
                "--http1.1"
            };
            let (code, body, verbose) = curl(
                d,
                &format!("{h}.pem"),
                &format!("{h}.test"),
                port,
                "/",
                &[version],
            );
            assert_eq!(code, 0, "{verbose}");
            assert!(
                body.contains(&format!("Hello from {pool}/0/cpu")),
                "{h}: {body}"
            );
        }
    }
    // A request naming another pool's site on a connection made for c.test: 421.
    for version in ["--http2", "--http1.1"] {
        let (code, _, verbose) = curl(
            d,
            "c.pem",
            "c.test",
            port,
            "/",
            &[version, "-H", &format!("Host: a.test:{port}")],
        );
        assert_eq!(code, 0, "{verbose}");
        assert!(
            verbose.contains("< HTTP/2 421") || verbose.contains("< HTTP/1.1 421"),
            "{version}: {verbose}"
        );
    }
    // A stopped pool's https connections are reset (the master has no handshake to answer
    // 503 in), whichever pool's thread took them; the other pool serves on.
    let (code, _) = server.post("/pools/two/stop");
    assert_eq!(code, 200);
    for _ in 0..4 {
        let out = s_client(port, &["-servername", "c.test"]);
        // Not a cleartext answer, which openssl would call a wrong version number.
        assert!(
            out.contains("Cipher is (NONE)") && !out.contains("wrong version number"),
            "{out}"
        );
        let (code, body, verbose) = curl(d, "a.pem", "a.test", port, "/", &[]);
        assert_eq!(code, 0, "{verbose}");
        assert!(body.contains("Hello from one/0/cpu"), "{body}");
    }
    // A site split by path over two pools cannot be https: one line at check.
    let split = format!("[[pool]]\nname = \"one\"\n[[pool]]\nname = \"two\"\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:{port}\"]\ntls = {{ cert = \"a.pem\", key = \"a.key\" }}\n[[site.app]]\npool = \"one\"\n[[site.app]]\npath = \"/api\"\npool = \"two\"\n");
    let (ok, err) = check(d, &split);
    assert!(
        !ok && err.contains("over TLS the pool is chosen by the name in the handshake"),
        "{err}"
    );
}

/// Pool one's worker never reads pool two's private key: with two's key gone from the disk,
/// one's worker restarts and serves (it once loaded every site's key of the address).
#[test]
fn a_worker_reads_only_its_own_pools_private_keys() {
    need_tools("openssl:openssl curl:curl", "openssl and curl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let mut config = String::from("[[pool]]\nname = \"one\"\n[[pool]]\nname = \"two\"\n");
    for (h, pool) in [("a", "one"), ("c", "two")] {
        openssl_cert(d, h, &format!("{h}.test"));
        config.push_str(&format!("[[site]]\nname = \"{h}\"\nbindings = [\"https://127.0.0.1:{port}:{h}.test\"]\ntls = {{ cert = \"{h}.pem\", key = \"{h}.key\" }}\n[[site.app]]\npool = \"{pool}\"\nhandler = \"dynamic\"\n"));
    }
    let server = Server::with_config(d, &config);
    std::fs::remove_file(d.join("c.key")).unwrap();
    let one = server
        .workers()
        .into_iter()
        .find(|w| w.0.starts_with("one/"))
        .unwrap();
    unsafe { libc::kill(one.1 as i32, libc::SIGKILL) };
    server.wait_until("pool one's worker back", Duration::from_secs(60), |s| {
        s.workers()
            .iter()
            .any(|w| w.0.starts_with("one/") && w.1 != one.1)
    });
    let (code, body, verbose) = curl(d, "a.pem", "a.test", port, "/", &[]);
    assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
    assert!(body.contains("Hello from one/0/cpu"), "{body}");
    assert!(
        !server.log_text().contains("c.key"),
        "{}",
        server.log_text()
    );
}

#[test]
fn an_ocsp_response_is_stapled_to_the_handshake() {
    need_tools("openssl:openssl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A CA, a leaf it signs, and the CA's OCSP answer that the leaf is good.
    let sh = |script: &str| {
        let out = Command::new("bash")
            .args(["-c", script])
            .current_dir(d)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 30 -subj /CN=test-ca");
    sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout a.key -out a.csr -subj /CN=a.test");
    sh("printf 'subjectAltName=DNS:a.test\\n' > ext && openssl x509 -req -in a.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 20 -extfile ext -out a.pem");
    sh(
        r#"serial=$(openssl x509 -in a.pem -noout -serial | cut -d= -f2); end=$(openssl x509 -in a.pem -noout -enddate | cut -d= -f2); printf 'V\t%s\t\t%s\tunknown\t/CN=a.test\n' "$(date -u -d "$end" +%y%m%d%H%M%SZ)" "$serial" > index.txt"#,
    );
    sh("openssl ocsp -index index.txt -rsigner ca.pem -rkey ca.key -CA ca.pem -issuer ca.pem -cert a.pem -respout a.ocsp -ndays 1");
    std::fs::create_dir(d.join("a")).unwrap();
    std::fs::write(d.join("a/index.html"), "site a\n").unwrap();
    let port = free_port();
    let config = |ocsp: &str| {
        format!("[[pool]]\nname = \"web\"\n[[site]]\nbindings = [\"https://127.0.0.1:{port}:a.test\"]\nroot = \"a\"\ntls = {{ cert = \"a.pem\", key = \"a.key\", ocsp = \"{ocsp}\" }}\n[[site.app]]\npool = \"web\"\n")
    };
    // A PEM file where the DER response should be: one line at check.
    let (ok, err) = check(d, &config("a.pem"));
    assert!(!ok && err.contains("is not a DER OCSP response"), "{err}");
    let _server = Server::with_config(d, &config("a.ocsp"));
    let out = s_client(port, &["-servername", "a.test", "-status"]);
    assert!(out.contains("OCSP Response Status: successful"), "{out}");
    assert!(out.contains("Cert Status: good"), "{out}");
}

/// `espalier bench` with `args` (and `--json`): its exit, result and stderr.
fn bench_json(args: &[&str]) -> (serde_json::Value, String) {
    let out = espalier(&[&["bench", "--json"][..], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "espalier bench {args:?}: {stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// The access-log lines of `log` with this protocol, once the log holds `at_least` lines.
fn logged_with_protocol(log: &Path, at_least: usize, protocol: &str) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().count() >= at_least || std::time::Instant::now() > deadline {
            let needle = format!("\"protocol\":\"{protocol}\"");
            return text.lines().filter(|l| l.contains(&needle)).count();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_load_generator_speaks_https_and_http2() {
    need_tools("openssl:openssl", "openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    sites_with_certificates(d, &["a", "b"]);
    let (port, h2c_port) = (free_port(), free_port());
    let mut config = String::from("[[pool]]\nname = \"web\"\n");
    for h in ["a", "b"] {
        config += &format!(
            r#"
[[site]]
name = "{h}"
bindings = ["https://127.0.0.1:{port}:{h}.test", "http://127.0.0.1:{h2c_port}:{h}.test"]
root = "{h}"
tls = {{ cert = "{h}.pem", key = "{h}.key" }}
access_log = {{ path = "{h}.log", format = "json" }}
[[site.app]]
pool = "web"
"#
        );
    }
    let server = Server::with_config(d, &config);
    let url = format!("https://127.0.0.1:{port}/");
    let ca = |h: &str| d.join(format!("{h}.pem")).to_string_lossy().to_string();
    let (a_ca, b_ca) = (ca("a"), ca("b"));

    // HTTPS/1.1, the name from -H Host: only a's certificate is trusted, so the server must
    // have chosen it by SNI.
    let common = ["-n", "300", "-c", "3", "-t", "2"];
    let (r, _) = bench_json(
        &[
            &[url.as_str(), "-H", "Host: a.test", "--cacert", &a_ca][..],
            &common,
        ]
        .concat(),
    );
    assert_eq!(
        (r["requests"].as_u64(), r["errors"].as_u64()),
        (Some(300), Some(0)),
        "{r}"
    );
    assert!(
        r["bytes"].as_u64().unwrap() > 300 * "site a\n".len() as u64,
        "{r}"
    );
    assert_eq!(logged_with_protocol(&d.join("a.log"), 300, "HTTP/1.1"), 300);

    // HTTP/2 over TLS, 10 concurrent streams per connection, to b by SNI.
    let (r, _) = bench_json(
        &[
            &[
                url.as_str(),
                "-H",
                "Host: b.test",
                "--cacert",
                &b_ca,
                "--h2",
                "--streams",
                "10",
            ][..],
            &["-n", "500", "-c", "2"],
        ]
        .concat(),
    );
    assert_eq!(
        (r["requests"].as_u64(), r["errors"].as_u64()),
        (Some(500), Some(0)),
        "{r}"
    );
    assert_eq!(logged_with_protocol(&d.join("b.log"), 500, "HTTP/2.0"), 500);

    // h2c with prior knowledge on the cleartext binding.
    let h2c = format!("http://127.0.0.1:{h2c_port}/");
    let (r, _) = bench_json(&[
        h2c.as_str(),
        "-H",
        "Host: a.test",
        "--h2",
        "-n",
        "200",
        "-c",
        "2",
    ]);
    assert_eq!(
        (r["requests"].as_u64(), r["errors"].as_u64()),
        (Some(200), Some(0)),
        "{r}"
    );
    assert_eq!(logged_with_protocol(&d.join("a.log"), 500, "HTTP/2.0"), 200);

    // Through an overlapped reload (the pool's workers replaced: a changed site), over
    // HTTP/1.1 and HTTP/2: the old workers' connections drain — HTTP/2 by GOAWAY, whose
    // unanswered streams the load generator sends again — so nothing fails.
    for (i, h2) in [false, true].into_iter().enumerate() {
        let load = {
            let url = url.clone();
            let b_ca = b_ca.clone();
            std::thread::spawn(move || {
                let mut args = vec![url.as_str(), "-H", "Host: b.test", "--cacert", &b_ca];
                args.extend(["-d", "3s", "-c", "4", "--streams", "8"]);
                if h2 {
                    args.push("--h2");
                }
                bench_json(&args).0
            })
        };
        let taken = server.requests_taken();
        server.wait_until("the load running", Duration::from_secs(30), |s| {
            s.requests_taken() > taken + 50
        });
        let path = d.join("espalier.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        // A changed site: its pool's workers are replaced.
        let text = if i == 0 {
            text.replacen("root = \"b\"\n", "root = \"b\"\nhsts = \"max-age=60\"\n", 1)
        } else {
            text.replacen("max-age=60", "max-age=120", 1)
        };
        std::fs::write(&path, text).unwrap();
        server.signal(libc::SIGHUP);
        server.wait_until("the reload", Duration::from_secs(10), |s| {
            s.log_text().matches("reloaded").count() > i
        });
        let r = load.join().unwrap();
        assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(
            r["errors"].as_u64(),
            Some(0),
            "through a reload, h2 {h2}: {r}"
        );
    }

    // The open loop over HTTP/2 and -k: every scheduled request answered.
    let (r, _) = bench_json(&[
        url.as_str(),
        "-H",
        "Host: a.test",
        "-k",
        "--h2",
        "--rate",
        "200",
        "-d",
        "1s",
        "-c",
        "2",
    ]);
    assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["errors"].as_u64(), Some(0), "{r}");

    // A certificate the client cannot trust: each connection gives up at once, counted as a
    // connect error, and stderr says why and what to give — no endless retrying.
    for trust in [&["--cacert", b_ca.as_str()][..], &[]] {
        let (r, stderr) = bench_json(
            &[
                &[url.as_str(), "-H", "Host: a.test", "-n", "50", "-c", "2"][..],
                trust,
            ]
            .concat(),
        );
        assert_eq!(
            (
                r["requests"].as_u64(),
                r["errors_by_kind"]["connect"].as_u64()
            ),
            (Some(0), Some(2)),
            "{r}"
        );
        assert!(
            stderr.contains("certificate is refused") && stderr.contains("--insecure"),
            "{stderr}"
        );
    }
    // A bad --cacert is one line before any load.
    let out = espalier(&[
        "bench",
        url.as_str(),
        "--cacert",
        "/nonexistent.pem",
        "-n",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("--cacert: cannot read certificates from /nonexistent.pem"),
        "{stderr}"
    );
    drop(server);
}

#[test]
fn an_idle_http2_connection_is_closed_after_the_keepalive_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "hi\n").unwrap();
    let port = free_port();
    let config = format!(
        r#"
[server.limits]
keepalive_timeout = "1s"
[[pool]]
name = "web"
[[site]]
bindings = ["http://127.0.0.1:{port}"]
root = "www"
[[site.app]]
pool = "web"
"#
    );
    let _server = Server::with_config(d, &config);
    block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (mut send, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        // A request answered at once (no body), and one with a body (answered by a task of
        // its own): after both, the connection is idle.
        for body in ["", "x=1"] {
            let req = http::Request::post(format!("http://127.0.0.1:{port}/"))
                .body(())
                .unwrap();
            send = send.ready().await.unwrap();
            let (response, mut out) = send.send_request(req, body.is_empty()).unwrap();
            if !body.is_empty() {
                out.send_data(bytes::Bytes::from(body), true).unwrap();
            }
            let response = response.await.unwrap();
            assert_eq!(response.status(), 405, "a file does not take POST");
            let mut recv = response.into_body();
            while let Some(chunk) = recv.data().await {
                chunk.unwrap();
            }
        }
        // The server closes the idle connection (GOAWAY, then the socket) after about the
        // keep-alive timeout; the client keeps its side open until then.
        let ended = tokio::time::timeout(Duration::from_secs(6), driver).await;
        assert!(ended.is_ok(), "the idle HTTP/2 connection was not closed");
        drop(send);
    });
}

#[test]
fn an_http2_client_that_never_reads_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("www")).unwrap();
    // One answer sent from memory, one from a file in pieces.
    std::fs::write(d.join("www/small.bin"), vec![b's'; 100 << 10]).unwrap();
    big_file(&d.join("www/big.bin"));
    let port = free_port();
    let config = format!(
        r#"
[server.limits]
keepalive_timeout = "1s"
body_timeout = "1s"
[[pool]]
name = "web"
[[site]]
bindings = ["http://127.0.0.1:{port}"]
root = "www"
[[site.app]]
pool = "web"
"#
    );
    let _server = Server::with_config(d, &config);
    block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        // A window of 0: the server may send no byte of any body.
        let (mut send, conn) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let mut held = Vec::new();
        for path in ["/small.bin", "/big.bin"] {
            let req = http::Request::get(format!("http://127.0.0.1:{port}{path}"))
                .body(())
                .unwrap();
            send = send.ready().await.unwrap();
            let (response, _) = send.send_request(req, true).unwrap();
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200);
            held.push(response);
        }
        // The server gives up on a client that takes nothing: its answers wait at most the
        // body timeout once the connection is otherwise idle, and then it is closed.
        let ended = tokio::time::timeout(Duration::from_secs(10), driver).await;
        assert!(
            ended.is_ok(),
            "a client that never reads holds the connection open"
        );
        drop((send, held));
    });
}
