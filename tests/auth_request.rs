//! A sign-in by another service (`auth = { request }`): a real verifier the test starts —
//! tests/apps/auth_app.py, on Python's standard library, since neither oauth2-proxy nor
//! Authelia is packaged for Debian or PyPI — answering as oauth2-proxy's `/oauth2/auth`
//! does: 2xx with identity fields, 401 with `WWW-Authenticate`, 302 to a sign-in page with a
//! cookie. Checked for a pool's app, an upstream, a FastCGI app and a static path, over
//! HTTP/1.1, HTTP/2 and HTTP/3; the verifier down, slow or failing → 503 with no request
//! reaching the app; a POST's body never sent to it; a client's forged identity fields
//! dropped; let-ins remembered when the config says so; and `check`'s refusals.

use crate::common::apps::php_fpm;
use crate::common::tls::{curl, openssl_cert};
use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/auth_app.py")
}

/// The verifier on a port of its own, recording its questions in `dir`/questions.
fn verifier(dir: &Path) -> (Stopped, SocketAddr) {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .args(["verifier", &addr.port().to_string()])
        .arg(dir.join("questions"));
    (Stopped::listening(&mut cmd, addr), addr)
}

/// The questions the verifier was asked, one JSON object each.
fn questions(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("questions"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One HTTP/1.1 request to `addr` for `host` with `fields` (whole lines) and `body`.
fn ask(addr: SocketAddr, request: &str, fields: &str, body: &str) -> Response {
    let mut c = Conn::open(addr);
    let length = if body.is_empty() {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    c.send(format!("{request} HTTP/1.1\r\nHost: shop.test\r\n{fields}{length}Connection: close\r\n\r\n{body}").as_bytes());
    c.read_response(request.starts_with("HEAD"))
        .expect("an answer")
}

fn text(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// A folder with files, a certificate for `localhost` and php-fpm's config; a server whose
/// site `shop` has `auth` at site level, over http and https (HTTP/3 on), with a pool app at
/// `/`, an upstream at `/up/` and files at `/files/`; and site `php` (http) with FastCGI at
/// `/php/` under the same `auth`.
struct Shop {
    server: Server,
    dir: tempfile::TempDir,
    http: SocketAddr,
    /// A site of its own for the FastCGI app: an https site's paths are one pool's.
    php: SocketAddr,
    https: u16,
    _upstream: Stopped,
}

fn shop(auth: &str) -> Shop {
    shop_with(auth, "")
}

/// [`shop`] with `more` at the end of its config (an `[[upstream]]` group).
fn shop_with(auth: &str, more: &str) -> Shop {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www/files")).unwrap();
    std::fs::create_dir_all(d.join("www/php")).unwrap();
    std::fs::write(d.join("www/files/a.txt"), "a file\n").unwrap();
    std::fs::write(
        d.join("www/php/who.php"),
        "<?php echo 'php user=', $_SERVER['HTTP_X_USER'] ?? '', ' email=', $_SERVER['HTTP_X_EMAIL'] ?? '', \"\\n\";",
    )
    .unwrap();
    std::fs::write(
        d.join("php-fpm.conf"),
        "[global]\nerror_log = /proc/self/fd/2\ndaemonize = no\n[www]\nlisten = 127.0.0.1:${PORT}\npm = static\npm.max_children = 2\nclear_env = no\n",
    )
    .unwrap();
    openssl_cert(d, "site", "localhost");
    let fpm = php_fpm();
    let up = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .args(["app", &up.port().to_string(), "upstream"])
        .stderr(std::process::Stdio::null());
    let upstream = Stopped::listening(&mut cmd, up);
    let (http, https, php) = (free_port(), free_port(), free_port());
    let app = script();
    let config = format!(
        r#"
[server]
http3 = true

[[pool]]
name = "app"
processes = 1
command = ["python3", "{app}", "app"]

[[pool]]
name = "php"
processes = 1
command = ["{fpm}", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
transport = "fastcgi"

[[site]]
name = "shop"
bindings = ["http://127.0.0.1:{http}", "https://127.0.0.1:{https}"]
tls = {{ cert = "site.pem", key = "site.key" }}
root = "www"
auth = {auth}

[[site.app]]
path = "/"
pool = "app"

[[site.app]]
path = "/up/"
upstream = "{up}"

[[site.app]]
path = "/files/"
handler = "static"

[[site]]
name = "php"
bindings = ["http://127.0.0.1:{php}"]
root = "www"
auth = {auth}

[[site.app]]
path = "/php/"
pool = "php"
{more}
"#,
        app = app.display()
    );
    let server = Server::with_config(d, &config);
    Shop {
        server,
        dir,
        http: SocketAddr::from(([127, 0, 0, 1], http)),
        php: SocketAddr::from(([127, 0, 0, 1], php)),
        https,
        _upstream: upstream,
    }
}

#[test]
fn a_verifier_lets_in_refuses_and_passes_its_answer_back() {
    need_tools("python3:python3 openssl:openssl", "python3 and openssl");
    let records = tempfile::tempdir().unwrap();
    let (_verifier, v) = verifier(records.path());
    let shop = shop(&format!(
        r#"{{ request = "http://{v}/oauth2/auth", copy = ["X-User", "X-Email"] }}"#
    ));
    let addr = shop.http;

    // No session: the verifier's 401 goes back as it gave it.
    let r = ask(addr, "GET /account", "", "");
    assert_eq!(r.status, 401, "{}", text(&r));
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"shop\""));
    assert_eq!(text(&r), "who are you?\n");

    // Signed in: the app is told who, and a forged field from the client never passes.
    let alice = "Cookie: session=alice\r\nX-User: mallory\r\n";
    let r = ask(addr, "GET /account?tab=1", alice, "");
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(
        text(&r),
        "app=pool user=alice email=alice@example.com method=GET body=0 path=/account?tab=1\n"
    );
    // Let in with no identity: the client's own X-User is still dropped.
    let r = ask(
        addr,
        "GET /",
        "Authorization: Bearer letmein\r\nX-User: mallory\r\n",
        "",
    );
    assert_eq!(r.status, 200);
    assert!(
        text(&r).starts_with("app=pool user= email= "),
        "{}",
        text(&r)
    );

    // A session run out: the redirect to the sign-in page, with its cookie.
    let r = ask(addr, "GET /cart", "Cookie: session=expired\r\n", "");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location"),
        Some("https://sso.example/start?rd=http://shop.test/cart")
    );
    assert_eq!(r.header("set-cookie"), Some("csrf=abc; Path=/; HttpOnly"));
    let r = ask(addr, "GET /forbidden/x", alice, "");
    assert_eq!((r.status, text(&r).as_str()), (403, "not for you\n"));

    // A POST: its body reaches the app, never the verifier, which is told the method.
    let r = ask(addr, "POST /submit?x=1", alice, "twelve bytes");
    assert_eq!(r.status, 200);
    assert!(text(&r).contains("method=POST body=12"), "{}", text(&r));
    let asked = questions(records.path());
    let post = asked
        .iter()
        .find(|q| q["fields"]["x-forwarded-method"] == "POST")
        .expect("the POST asked about");
    assert_eq!(post["method"], "GET");
    assert_eq!(post["path"], "/oauth2/auth");
    assert_eq!(post["body"], 0);
    assert_eq!(post["fields"]["x-forwarded-uri"], "/submit?x=1");
    assert_eq!(post["fields"]["x-forwarded-host"], "shop.test");
    assert_eq!(post["fields"]["x-forwarded-proto"], "http");
    assert_eq!(post["fields"]["x-forwarded-for"], "127.0.0.1");
    assert_eq!(post["fields"]["cookie"], "session=alice");
    assert_eq!(post["fields"]["host"], v.to_string());
    assert!(post["fields"].get("content-length").is_none());
    assert!(post["fields"].get("x-user").is_none(), "{post}");

    // An upstream, a FastCGI app and a static path are asked about alike.
    let r = ask(addr, "GET /up/x", alice, "");
    assert_eq!(
        text(&r),
        "app=upstream user=alice email=alice@example.com method=GET body=0 path=/up/x\n"
    );
    let r = ask(shop.php, "GET /php/who.php", alice, "");
    assert_eq!(
        (r.status, text(&r).as_str()),
        (200, "php user=alice email=alice@example.com\n")
    );
    let r = ask(
        shop.php,
        "GET /php/who.php",
        "X-User: mallory\r\nAuthorization: Bearer letmein\r\n",
        "",
    );
    assert_eq!(text(&r), "php user= email=\n");
    assert_eq!(ask(addr, "GET /files/a.txt", alice, "").status, 200);
    assert_eq!(ask(addr, "GET /files/a.txt", "", "").status, 401);
    assert_eq!(ask(addr, "GET /up/x", "", "").status, 401);
    assert_eq!(ask(shop.php, "GET /php/who.php", "", "").status, 401);

    // HTTP/2 (TLS) and HTTP/3 take the same step.
    let d = shop.dir.path();
    let (code, body, verbose) = curl(
        d,
        "site.pem",
        "localhost",
        shop.https,
        "/h2",
        &[
            "--http2",
            "-H",
            "Cookie: session=alice",
            "-H",
            "X-User: mallory",
        ],
    );
    assert_eq!(code, 0, "{verbose}");
    assert!(verbose.contains("HTTP/2 200"), "{verbose}");
    assert_eq!(
        body,
        "app=pool user=alice email=alice@example.com method=GET body=0 path=/h2\n"
    );
    let (_, body, verbose) = curl(d, "site.pem", "localhost", shop.https, "/h2", &["--http2"]);
    assert!(verbose.contains("HTTP/2 401"), "{verbose}");
    assert_eq!(body, "who are you?\n");
    let (_, _, verbose) = curl(
        d,
        "site.pem",
        "localhost",
        shop.https,
        "/files/a.txt",
        &["--http2", "-H", "Cookie: session=expired"],
    );
    assert!(
        verbose.contains("HTTP/2 302") && verbose.contains("set-cookie: csrf=abc"),
        "{verbose}"
    );
    match crate::http3::aioquic() {
        None => skip("aioquic cannot be installed from PyPI: the HTTP/3 half is not run"),
        Some(lib) => {
            let h3 = |field: &str, path: &str| {
                crate::http3::aioquic_request(
                    &lib,
                    d,
                    shop.https,
                    ("GET", path),
                    None,
                    &[("H3_FIELD", field)],
                )
            };
            let a = h3("cookie: session=alice", "/h3");
            assert_eq!(
                (a.status, a.text.as_str()),
                (
                    200,
                    "app=pool user=alice email=alice@example.com method=GET body=0 path=/h3\n"
                )
            );
            let a = h3("x-user: mallory", "/h3");
            assert_eq!(a.status, 401);
            let a = h3("cookie: session=alice", "/files/a.txt");
            assert_eq!((a.status, a.text.as_str()), (200, "a file\n"));
        }
    }
    drop(shop.server);
}

#[test]
fn a_verifier_down_slow_or_failing_fails_closed() {
    need_tools("python3:python3 openssl:openssl", "python3 and openssl");
    let records = tempfile::tempdir().unwrap();
    let (verifier_process, v) = verifier(records.path());
    let shop = shop(&format!(
        r#"{{ request = "http://{v}/verify", timeout = "1s" }}"#
    ));
    let addr = shop.http;
    let alice = "Cookie: session=alice\r\n";
    assert_eq!(ask(addr, "GET /ok", alice, "").status, 200);
    shop.server
        .wait_for_log("app pool took GET /ok", Duration::from_secs(30));
    // A verifier that fails, or answers past the step's timeout: 503, the app not asked.
    assert_eq!(ask(addr, "GET /broken/x", alice, "").status, 503);
    assert_eq!(ask(addr, "GET /slow/x", alice, "").status, 503);
    shop.server
        .wait_for_log("answered 500", Duration::from_secs(30));
    shop.server
        .wait_for_log("did not answer within 1s", Duration::from_secs(30));
    // Down: 503 for every path, a POST's body never reaching the app.
    drop(verifier_process);
    for k in 0..10 {
        for (request, body) in [("POST /submit", "data"), ("GET /files/a.txt", "")] {
            let r = ask(addr, request, alice, body);
            assert_eq!(r.status, 503, "{k}: {request}: {}", text(&r));
        }
    }
    // It answers again: let in.
    let (_again, _) = {
        let mut cmd = Command::new("python3");
        cmd.arg(script())
            .args(["verifier", &v.port().to_string()])
            .arg(records.path().join("questions"));
        (Stopped::listening(&mut cmd, v), v)
    };
    assert_eq!(ask(addr, "GET /back", alice, "").status, 200);
    shop.server
        .wait_for_log("app pool took GET /back", Duration::from_secs(30));
    // ("answers again" is said by a thread that saw it fail: the one this request met may
    // not have, with two threads.)
    let log = shop.server.log_text();
    for path in ["/broken/x", "/slow/x", "/submit", "/files/a.txt"] {
        assert!(
            !log.contains(&format!("took GET {path}"))
                && !log.contains(&format!("took POST {path}")),
            "{path}: {log}"
        );
    }
    // A line when the cause changes, not one per request: at most one per worker thread
    // (two here) for twenty refused requests.
    let down = log.matches("could not be reached").count();
    assert!((1..=2).contains(&down), "{log}");
}

#[test]
fn a_let_in_is_remembered_for_its_session_alone_and_a_group_verifies() {
    need_tools("python3:python3 openssl:openssl", "python3 and openssl");
    let records = tempfile::tempdir().unwrap();
    let (_verifier, v) = verifier(records.path());
    let shop = shop(&format!(
        r#"{{ request = "http://{v}/verify", copy = ["X-User"], remember = "5m" }}"#
    ));
    // One keep-alive connection: one worker thread, whose let-ins are its own.
    let mut c = Conn::open(shop.http);
    let mut get = |cookie: &str| {
        c.send(
            format!("GET /a HTTP/1.1\r\nHost: shop.test\r\nCookie: {cookie}\r\n\r\n").as_bytes(),
        );
        c.read_response(false).expect("an answer")
    };
    for _ in 0..5 {
        let r = get("session=alice");
        assert_eq!(r.status, 200);
        assert!(text(&r).contains("user=alice"), "{}", text(&r));
    }
    assert_eq!(
        questions(records.path()).len(),
        1,
        "five requests, one question"
    );
    // Refusals are never remembered; another session is asked about.
    assert_eq!(get("session=nobody").status, 401);
    assert_eq!(get("session=nobody").status, 401);
    assert_eq!(questions(records.path()).len(), 3);
}

#[test]
fn check_refuses_what_cannot_ask() {
    let dir = tempfile::tempdir().unwrap();
    let site = |auth: &str| {
        format!("[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\nroot = \".\"\n[[site.app]]\npath = \"/\"\nauth = {auth}\n")
    };
    for (auth, says) in [
        (r#"{ request = "verify" }"#, "names no verifier"),
        (r#"{ request = "/verify" }"#, "names no verifier"),
        (
            r#"{ request = "http://127.0.0.1:9/v", htpasswd = "x" }"#,
            "belongs to a password sign-in",
        ),
        (
            r#"{ htpasswd = "x", copy = ["X-User"] }"#,
            "belongs to a sign-in by another service",
        ),
        (
            r#"{ request = "http://127.0.0.1:9/v", copy = ["Content-Length"] }"#,
            "espalier's own",
        ),
        (
            r#"{ request = "http://127.0.0.1:9/v", copy = ["X-Forwarded-For"] }"#,
            "espalier's own",
        ),
        (
            r#"{ request = "http://127.0.0.1:9/v", send = ["bad name"] }"#,
            "is not a field name",
        ),
        (
            r#"{ request = "http://127.0.0.1:9/v", timeout = "0s" }"#,
            "timeout",
        ),
        (
            r#"{ upstream = "nosuch", request = "/v" }"#,
            "no upstream is named `nosuch`",
        ),
        (
            r#"{ upstream = "127.0.0.1:9", request = "http://x/v" }"#,
            "write the verifier's path alone",
        ),
        (
            r#"{ request = "http://127.0.0.1:9/v", copy = ["X-User"] }"#,
            "espalier answers this path itself",
        ),
    ] {
        let err = check_refuses(dir.path(), &site(auth));
        assert!(err.contains(says), "{auth}: {err}");
    }
    // A site's `auth` that every path overrides acts on nothing.
    let overridden = "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\nroot = \".\"\nauth = { request = \"http://127.0.0.1:9/site\" }\n[[site.app]]\npath = \"/\"\nauth = { request = \"http://127.0.0.1:9/path\" }\n";
    let err = check_refuses(dir.path(), overridden);
    assert!(
        err.contains("key `site[0].auth`") && err.contains("says its own"),
        "{err}"
    );
}
