//! Basic authentication (issue #29, item 3): a path signed in to with a Debian
//! `apache2-utils` htpasswd file (bcrypt), over HTTPS and HTTP/2 with curl; no password and a
//! wrong one get 401 asking for the realm; the proxied app is told the user in
//! `X-Remote-User` (which a client cannot set itself), a php-fpm app in `REMOTE_USER`; the
//! same path over cleartext is refused unless it says `cleartext = true`.

use crate::common;

use common::apps::php_fpm;
use common::tls::*;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_signed_in_user_reaches_the_app_and_others_are_asked_to_sign_in() {
    let fpm = php_fpm();
    need_tools(
        "htpasswd:apache2-utils curl:curl openssl:openssl",
        "htpasswd (apache2-utils), curl and openssl",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        d,
    );
    std::fs::write(
        d.join("php-router/www/whoami.php"),
        "<?php echo 'user=' . ($_SERVER['REMOTE_USER'] ?? '') . ' type=' . ($_SERVER['AUTH_TYPE'] ?? '') . \"\\n\";\n",
    )
    .unwrap();
    run_ok(
        Command::new("htpasswd")
            .args(["-B", "-b", "-c", "users.htpasswd", "alice", "wonderland"])
            .current_dir(d),
    );
    run_ok(
        Command::new("htpasswd")
            .args(["-B", "-b", "users.htpasswd", "bob", "builder"])
            .current_dir(d),
    );
    std::fs::create_dir(d.join("certs")).unwrap();
    openssl_cert(&d.join("certs"), "localhost", "localhost");
    let (tls, plain, php_tls) = (free_port(), free_port(), free_port());
    let config = format!(
        r#"
[[pool]]
name = "app"
command = ["python3", "{app}"]
[[pool]]
name = "php"
command = ["{fpm}", "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", "php-fpm.conf"]
directory = "php"
transport = "fastcgi"
[[site]]
name = "s"
bindings = ["https://127.0.0.1:{tls}:localhost", "http://127.0.0.1:{plain}"]
tls = {{ cert = "certs/localhost.pem", key = "certs/localhost.key" }}
root = "php-router/www"
[[site.app]]
path = "/"
pool = "app"
[[site.app]]
path = "/admin/"
pool = "app"
auth = {{ htpasswd = "users.htpasswd", realm = "Shop admin" }}
[[site.app]]
path = "/lan/"
pool = "app"
auth = {{ htpasswd = "users.htpasswd", cleartext = true }}
[[site]]
name = "php"
bindings = ["https://127.0.0.1:{php_tls}:localhost"]
tls = {{ cert = "certs/localhost.pem", key = "certs/localhost.key" }}
root = "php-router/www"
[[site.app]]
path = "/php-admin/"
pool = "php"
fallback = "/whoami.php"
auth = {{ htpasswd = "users.htpasswd" }}
"#,
        app = test_app().display()
    );
    let server = Server::with_config(d, &config);
    let ask =
        |path: &str, extra: &[&str]| curl(d, "certs/localhost.pem", "localhost", tls, path, extra);
    for proto in ["--http1.1", "--http2"] {
        // No password, a wrong one, an unknown user: 401 asking for the realm.
        for creds in [&[][..], &["-u", "alice:guess"], &["-u", "carol:wonderland"]] {
            let mut args = vec![proto];
            args.extend_from_slice(creds);
            let (code, body, verbose) = ask("/admin/whoami", &args);
            assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
            assert!(verbose.contains(" 401"), "{creds:?}: {verbose}");
            assert!(
                verbose.contains("www-authenticate: Basic realm=\"Shop admin\", charset=\"UTF-8\"")
                    || verbose.contains(
                        "WWW-Authenticate: Basic realm=\"Shop admin\", charset=\"UTF-8\""
                    ),
                "{verbose}"
            );
            assert_eq!(body, "401 Unauthorized\n");
        }
        // The right one: the app is told who, and a forged field is not believed.
        let (_, body, verbose) = ask(
            "/admin/whoami",
            &[proto, "-u", "alice:wonderland", "-H", "X-Remote-User: root"],
        );
        assert_eq!(body, "user=alice\n", "{verbose}");
        let (_, body, _) = ask("/admin/whoami", &[proto, "-u", "bob:builder"]);
        assert_eq!(body, "user=bob\n");
        // Elsewhere no one signs in, and no one can say they did.
        let (_, body, _) = ask("/whoami", &[proto, "-H", "X-Remote-User: root"]);
        assert_eq!(body, "user=\n");
        // php-fpm is told in REMOTE_USER.
        let php = |extra: &[&str]| {
            curl(
                d,
                "certs/localhost.pem",
                "localhost",
                php_tls,
                "/php-admin/x",
                extra,
            )
        };
        let (_, body, verbose) = php(&[proto, "-u", "alice:wonderland"]);
        assert_eq!(
            body,
            "user=alice type=Basic\n",
            "{verbose}\n{}",
            server.log_text()
        );
        let (_, _, verbose) = php(&[proto]);
        assert!(verbose.contains(" 401"), "{verbose}");
    }
    // Over cleartext the password would travel in the clear: refused, unless the path says.
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], plain));
    let r = get(
        at,
        "/admin/whoami",
        "Authorization: Basic YWxpY2U6d29uZGVybGFuZA==\r\n",
    );
    assert_eq!(r.status, 403);
    assert!(r.text().contains("served over HTTPS only"), "{}", r.text());
    let r = get(
        at,
        "/lan/whoami",
        "Authorization: Basic YWxpY2U6d29uZGVybGFuZA==\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (200, "user=alice\n"));
    assert_eq!(get(at, "/lan/whoami", "").status, 401);
    drop(server);
}

/// A flood of wrong passwords (issue #39, item 10): one client gets ten wrong answers, then
/// 429 with `Retry-After` and no more hashing; many clients together meet the thread's
/// hashing budget (503, `Retry-After: 1`) instead of stalling it — the worker keeps
/// answering, is never killed for missed pings, and the right password still gets in.
#[test]
fn a_wrong_password_flood_is_bounded_and_the_worker_lives() {
    need_tools("htpasswd:apache2-utils", "htpasswd (apache2-utils)");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_ok(
        Command::new("htpasswd")
            .args([
                "-B",
                "-C",
                "4",
                "-b",
                "-c",
                "users.htpasswd",
                "alice",
                "wonderland",
            ])
            .current_dir(d),
    );
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(d.join("www/index.html"), "members\n").unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"p\"\nprocesses = 1\ncpus = \"0\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\nauth = {{ htpasswd = \"users.htpasswd\", cleartext = true }}\n"
    );
    let server = Server::with_config(d, &config);
    let worker = server.workers()[0].1;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let basic = |user: &str, password: &str| {
        use std::io::Write;
        let mut raw = Vec::new();
        write!(raw, "{user}:{password}").unwrap();
        format!("Authorization: Basic {}\r\n", base64_of(&raw))
    };
    let ask = |from: &str, auth: &str| {
        let mut c = Conn::open_from(from, addr);
        c.send(format!("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n{auth}\r\n").as_bytes());
        c.read_response(false).expect("an answer")
    };
    // One client: at most ten wrong answers are checked, then 429 with Retry-After.
    let statuses: Vec<u16> = (0..14)
        .map(|k| ask("127.0.0.5", &basic("alice", &format!("guess{k}"))).status)
        .collect();
    assert!(
        statuses[..10].iter().all(|&s| s == 401 || s == 503),
        "{statuses:?}"
    );
    let last = ask("127.0.0.5", &basic("alice", "one-more"));
    assert_eq!(last.status, 429, "{statuses:?}");
    assert!(last.header("retry-after").is_some());
    // Many clients at once, four threads of them: only 401, 429 or 503 — never a stalled thread.
    let floods: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                (0..40)
                    .map(|k| {
                        let from = format!("127.0.{}.{}", 10 + t, 1 + k);
                        let mut c = Conn::open_from(&from, addr);
                        let auth = format!(
                            "Authorization: Basic {}\r\n",
                            base64_of(format!("alice:f{t}-{k}").as_bytes())
                        );
                        c.send(
                            format!("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n{auth}\r\n")
                                .as_bytes(),
                        );
                        c.read_response(false).map_or(0, |r| r.status)
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    for f in floods {
        let got = f.join().unwrap();
        assert!(got.iter().all(|s| [401, 429, 503].contains(s)), "{got:?}");
    }
    // The right password gets in (at the latest once the second's budget is back).
    server.wait_until("alice signed in", Duration::from_secs(20), |_| {
        ask("127.0.0.9", &basic("alice", "wonderland")).status == 200
    });
    assert_eq!(
        server.workers()[0].1,
        worker,
        "the worker was replaced: {}",
        server.log_text()
    );
    assert!(
        !server.log_text().contains("missed"),
        "{}",
        server.log_text()
    );
}

/// Standard base64, for a Basic header.
fn base64_of(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
