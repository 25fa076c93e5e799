//! Front controllers (issue #28, item 2): a PHP application on real php-fpm whose pretty URLs
//! run `/index.php`, whose assets are files, and whose uploads never run — over HTTP/1.1,
//! HTTPS and HTTP/2 (curl); and the path tricks that would run an upload refused.

use crate::common;

use common::apps::php_fpm;
use common::tls::*;
use common::*;
use std::net::SocketAddr;
use std::path::Path;

const EVIL: &str = "<?php echo 'EXECUTED'; ?>\n";

/// A copy of examples/apps (php-fpm's conf and the router app) with uploads that hold PHP,
/// a script outside the root and a certificate; the example config on two ports.
fn router_site() -> (tempfile::TempDir, Server, SocketAddr, u16) {
    router_site_with("")
}

/// [`router_site`] with more keys on its site.
fn router_site_with(site_keys: &str) -> (tempfile::TempDir, Server, SocketAddr, u16) {
    let fpm = php_fpm();
    need_tools("curl:curl openssl:openssl", "curl and openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        d,
    );
    let www = d.join("php-router/www");
    std::fs::write(www.join("uploads/evil.php"), EVIL).unwrap();
    std::fs::write(www.join("uploads/x.jpg"), EVIL).unwrap();
    std::fs::write(www.join("SHOUT.PHP"), EVIL).unwrap();
    std::fs::write(d.join("php-router/outside.php"), EVIL).unwrap();
    std::fs::create_dir(d.join("certs")).unwrap();
    openssl_cert(&d.join("certs"), "localhost", "localhost");
    let (plain, tls) = (free_port(), free_port());
    let config = std::fs::read_to_string(d.join("php-router.toml"))
        .unwrap()
        .replace("/usr/sbin/php-fpm8.2", &fpm)
        .replace(
            "bindings = [\"http://127.0.0.1:8085\"]",
            &format!(
                "bindings = [\"http://127.0.0.1:{plain}\", \"https://127.0.0.1:{tls}:localhost\"]\ntls = {{ cert = \"certs/localhost.pem\", key = \"certs/localhost.key\" }}\n{site_keys}"
            ),
        );
    let server = Server::with_config(d, &config);
    (dir, server, SocketAddr::from(([127, 0, 0, 1], plain)), tls)
}

#[test]
fn pretty_urls_run_the_front_controller_and_assets_are_files() {
    let (dir, server, addr, _) = router_site();
    let r = get(addr, "/", "");
    assert_eq!(r.status, 200, "{}", server.log_text());
    assert!(r.text().starts_with("home\n"), "{}", r.text());
    // A pretty URL: the front controller, the original URI and query kept, no PATH_INFO.
    let r = get(addr, "/articles/hello-world/?utm=x&a=%2F", "");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        "article hello-world\nfront: REQUEST_URI=/articles/hello-world/?utm=x&a=%2F SCRIPT_NAME=/index.php PATH_INFO= QUERY_STRING=utm=x&a=%2F\n"
    );
    // Compressed as it streams out of php-fpm for a client that takes gzip.
    let gz = get(
        addr,
        "/articles/hello-world/?utm=x&a=%2F",
        "Accept-Encoding: gzip\r\n",
    );
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz.body[..]), &mut plain)
        .unwrap();
    assert_eq!(plain, r.body);
    // The site's `headers` take the app's X-Powered-By out of the CGI answer.
    assert_eq!(r.header("x-powered-by"), None);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    // The app's own 404 for a route it does not have (not espalier's).
    let r = get(addr, "/feed/", "");
    assert_eq!(
        (r.status, r.text().lines().next()),
        (404, Some("no route for /feed/"))
    );
    // A body reaches the front controller.
    let mut c = Conn::open(addr);
    c.send(b"POST /api/echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
    let r = c.read_response(false).expect("answer to POST");
    assert!(r.text().starts_with("POST hello\n"), "{}", r.text());
    // A named script runs with its PATH_INFO; a folder's index script runs.
    let r = get(addr, "/info.php/a/b", "");
    assert_eq!(r.text(), "info: SCRIPT_NAME=/info.php PATH_INFO=/a/b\n");
    assert_eq!(get(addr, "/blog/", "").text(), "blog index\n");
    // Assets are files with their type and validators, conditional requests work.
    let css = std::fs::read_to_string(dir.path().join("php-router/www/assets/site.css")).unwrap();
    let r = get(addr, "/assets/site.css", "");
    assert_eq!((r.status, r.text()), (200, css.clone()));
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    let etag = r.header("etag").expect("an ETag").to_string();
    let r = get(
        addr,
        "/assets/site.css",
        &format!("If-None-Match: {etag}\r\n"),
    );
    assert_eq!(r.status, 304);
    // A folder with a static index gets it; without the slash, the redirect to it.
    assert!(get(addr, "/docs/", "")
        .text()
        .contains("the docs folder index"));
    let r = get(addr, "/docs", "");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/")));
    // A missing script is a 404, not the front controller.
    let r = get(addr, "/missing.php", "");
    assert_eq!(r.status, 404);
    assert!(!r.text().contains("front:"), "{}", r.text());
    drop(server);
}

#[test]
fn uploads_and_path_tricks_never_run_and_scripts_are_never_sent_as_source() {
    let (_dir, server, addr, _) = router_site();
    assert_eq!(get(addr, "/", "").status, 200, "{}", server.log_text());
    for (path, status) in [
        // An upload folder: its scripts are refused, its files are files.
        ("/uploads/evil.php", 403),
        ("/uploads/evil.php/x", 403),
        ("/uploads/x.jpg", 200),
        // A script by another case is neither run nor sent.
        ("/SHOUT.PHP", 403),
        // Path tricks: the front controller (never x.jpg) or a refusal.
        ("/uploads/x.jpg/.php", 404),
        ("/uploads/x.jpg/a.php", 403),
        ("/uploads/x.jpg%00.php", 400),
        ("/uploads/%2e%2e/%2e%2e/outside.php", 400),
        ("/%2e%2e/outside.php", 400),
        ("/uploads/..%2fevil.php", 400),
    ] {
        let r = get(addr, path, "");
        let text = r.text();
        assert!(!ran_planted_script(&text), "{path} ran: {text}");
        assert_eq!(r.status, status, "{path}: {text}");
        if path == "/uploads/x.jpg" {
            // The file's bytes, as an image: never interpreted.
            assert_eq!(text, EVIL);
            assert_eq!(r.header("content-type"), Some("image/jpeg"));
        }
        if path == "/uploads/x.jpg/.php" {
            assert!(
                text.contains("front: REQUEST_URI=/uploads/x.jpg/.php SCRIPT_NAME=/index.php"),
                "{text}"
            );
        }
    }
    drop(server);
}

#[test]
fn the_front_controller_answers_over_https_and_http2() {
    let (dir, server, _, tls) = router_site();
    let d = dir.path();
    for proto in ["--http1.1", "--http2"] {
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/articles/over-tls/",
            &[proto],
        );
        assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
        assert!(body.starts_with("article over-tls\n"), "{body}");
        // Compressed on this scheme too, and decoded by curl.
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/articles/over-tls/",
            &[proto, "--compressed"],
        );
        assert_eq!(code, 0, "{verbose}");
        assert!(body.starts_with("article over-tls\n"), "{body}");
        assert!(
            verbose
                .to_ascii_lowercase()
                .contains("< content-encoding: br"),
            "{verbose}"
        );
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/assets/site.css",
            &[proto],
        );
        assert_eq!(code, 0, "{verbose}");
        assert_eq!(body, "body { color: #333; }\n");
        let expected = if proto == "--http2" {
            "< HTTP/2 200"
        } else {
            "< HTTP/1.1 200"
        };
        assert!(verbose.contains(expected), "{verbose}");
    }
    drop(server);
}

/// A proxied app with `try_files = true`: a file under the root is sent by espalier (the app
/// never sees it); folders and everything else go to the app, which records what reached it.
#[test]
fn a_proxied_app_trying_files_first_is_sent_only_what_is_not_a_file() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("public/img")).unwrap();
    std::fs::write(d.join("public/robots.txt"), "User-agent: *\n").unwrap();
    std::fs::write(d.join("public/index.html"), "not the app's home\n").unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ RECORD = \"seen.log\" }}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"public\"\n[[site.app]]\npool = \"app\"\ntry_files = true\n",
            test_app().display()
        ),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let r = get(addr, "/robots.txt", "");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "User-agent: *\n"),
        "{}",
        server.log_text()
    );
    for path in ["/", "/img/", "/img", "/robots.txt/x", "/page?q=1"] {
        assert_eq!(get(addr, path, "").text(), "app\n", "{path}");
    }
    let seen = std::fs::read_to_string(d.join("seen.log")).unwrap();
    assert_eq!(seen, "/\n/img/\n/img\n/robots.txt/x\n/page?q=1\n");
    drop(server);
}

/// An HTTP/2 upload without a declared length to a FastCGI app is read whole first (FastCGI
/// sends CONTENT_LENGTH before the body) and then lent where it was routed — once: a site
/// limited to two requests a minute takes two such uploads.
#[test]
fn an_undeclared_http2_upload_reaches_php_whole_and_counts_once() {
    let (dir, server, _, tls) = router_site_with("limit = { rate = \"2/m\", burst = 2 }");
    let d = dir.path();
    std::fs::write(d.join("upload.txt"), "x".repeat(100_000)).unwrap();
    for k in 0..2 {
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/api/echo",
            &[
                "--http2",
                "--data-binary",
                "@upload.txt",
                "-H",
                "Content-Length:",
            ],
        );
        assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
        assert!(
            !verbose.contains("> content-length"),
            "undeclared: {verbose}"
        );
        assert!(
            body.starts_with(&format!("POST {}\n", "x".repeat(100_000))),
            "upload {k}: {verbose}"
        );
    }
    let (_, _, verbose) = curl(
        d,
        "certs/localhost.pem",
        "localhost",
        tls,
        "/",
        &["--http2"],
    );
    assert!(
        verbose.contains("< HTTP/2 429"),
        "the third is over: {verbose}"
    );
    drop(server);
}
