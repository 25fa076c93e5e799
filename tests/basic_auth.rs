//! Basic authentication (issue #29, item 3): a path signed in to with a Debian
//! `apache2-utils` htpasswd file (bcrypt), over HTTPS and HTTP/2 with curl; no password and a
//! wrong one get 401 asking for the realm; the proxied app is told the user in
//! `X-Remote-User` (which a client cannot set itself), a php-fpm app in `REMOTE_USER`; the
//! same path over cleartext is refused unless it says `cleartext = true`.

mod common;

use common::apps::php_fpm;
use common::tls::*;
use common::*;
use std::path::Path;
use std::process::Command;

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
