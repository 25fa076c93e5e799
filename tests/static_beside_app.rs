//! Static files beside an application on one site, on every scheme (issue #28, item 1): a
//! Django project under gunicorn with its collected static files, over HTTPS/1.1 and HTTP/2
//! (curl) — `/static/` answered by espalier from the site's root, the rest by Django, on
//! the same TLS connection's pool.

use crate::common;

use common::tls::*;
use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn a_django_sites_static_files_are_served_beside_it_over_https_and_http2() {
    need_tools(
        "gunicorn:gunicorn curl:curl openssl:openssl -:python3-django",
        "gunicorn, curl, openssl and Django",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for folder in ["django", "errors"] {
        copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples/apps")
                .join(folder),
            &d.join(folder),
        );
    }
    // Debian's Python, where python3-django is (and which Debian's gunicorn runs), even when
    // another python3 comes first on the PATH.
    let python = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| Path::new(p).exists() || !p.starts_with('/'))
        .unwrap();
    run_ok(
        Command::new(python)
            .args(["-m", "django", "collectstatic", "--noinput"])
            .env("DJANGO_SETTINGS_MODULE", "shop.settings")
            .current_dir(d.join("django")),
    );
    std::fs::create_dir(d.join("certs")).unwrap();
    openssl_cert(&d.join("certs"), "localhost", "localhost");
    let (tls, plain) = (free_port(), free_port());
    let config = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps/django.toml"),
    )
    .unwrap()
    .replace("8443", &tls.to_string())
    .replace("8080", &plain.to_string())
    .replace("[[pool]]", "[server]\nworker_header = true\n\n[[pool]]");
    let server = Server::with_config(d, &config);
    let css = std::fs::read_to_string(d.join("django/assets/site.css")).unwrap();
    for http2 in [false, true] {
        let proto: &[&str] = if http2 { &["--http2"] } else { &["--http1.1"] };
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/static/site.css",
            proto,
        );
        assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
        assert_eq!(body, css, "{verbose}");
        let version = if http2 {
            "< HTTP/2 200"
        } else {
            "< HTTP/1.1 200"
        };
        assert!(verbose.contains(version), "{verbose}");
        assert!(
            verbose
                .to_ascii_lowercase()
                .contains("content-type: text/css"),
            "{verbose}"
        );
        let (code, body, verbose) = curl(d, "certs/localhost.pem", "localhost", tls, "/", proto);
        assert_eq!(code, 0, "{verbose}");
        assert_eq!(body, "hello from django over https\n", "{verbose}");
        // A static path that is not there: espalier's 404, not the app's.
        let (_, _, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/static/none.css",
            proto,
        );
        assert!(verbose.contains(" 404"), "{verbose}");
        assert!(!verbose.contains("gunicorn"), "{verbose}");
        // The site's own 404 page, its headers and its static files' cache time.
        let (_, body, _) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/static/none.css",
            proto,
        );
        assert!(body.contains("<h1>Not found</h1>"), "{body}");
        let (_, _, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/static/site.css",
            proto,
        );
        let fields = verbose.to_ascii_lowercase();
        assert!(
            fields.contains("< cache-control: max-age=604800"),
            "{verbose}"
        );
        assert!(
            fields.contains("< x-content-type-options: nosniff"),
            "{verbose}"
        );
        assert!(!fields.contains("< server:"), "{verbose}");
    }
    // Both answered by the pool's front worker that holds the TLS connection.
    let (_, _, verbose) = curl(
        d,
        "certs/localhost.pem",
        "localhost",
        tls,
        "/static/site.css",
        &[],
    );
    assert!(
        verbose
            .to_ascii_lowercase()
            .contains("x-espalier-worker: django/"),
        "{verbose}"
    );
    // Plain http is redirected to https.
    let r = get(
        std::net::SocketAddr::from(([127, 0, 0, 1], plain)),
        "/static/site.css",
        "",
    );
    assert_eq!(r.status, 308);
    // www. goes to the bare name on https, path and query kept.
    let r = get_host(
        std::net::SocketAddr::from(([127, 0, 0, 1], plain)),
        "www.localhost",
        "/shop/?page=2",
    );
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("https://localhost:{tls}/shop/?page=2").as_str())
    );
}
