//! WordPress (issue #28): Debian's `wordpress` package on php-fpm with a MariaDB of the test's
//! own, from examples/apps/wordpress.toml, over HTTPS/1.1 and HTTP/2 (curl) — pretty
//! permalinks, the feed and the REST API answered by `index.php`, its CSS and JS sent as the
//! package's files, a script in the uploads folder refused.
//!
//! The database is a private `mariadbd` (its own data folder and socket, no network), stopped
//! with the test. Debian's WordPress reads its settings from
//! `/etc/wordpress/config-NAME.php`; the test writes one with a name of its own (NAME comes
//! from `WORDPRESS_CONFIG` in the pool's environment) and removes it at the end.

use crate::common;

use common::apps::php_fpm;
use common::tls::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A MariaDB server of the test's own, stopped (and its folder removed) on drop.
struct MariaDb {
    child: Child,
    socket: PathBuf,
}

impl MariaDb {
    fn start(dir: &Path) -> MariaDb {
        let data = dir.join("db");
        run_ok(
            Command::new("mariadb-install-db")
                .args(["--no-defaults", "--auth-root-authentication-method=normal"])
                .args(["--skip-test-db", "--user=root"])
                .arg(format!("--datadir={}", data.display())),
        );
        let socket = dir.join("db.sock");
        let child = Command::new("mariadbd")
            .args(["--no-defaults", "--skip-networking", "--user=root"])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", dir.join("db.pid").display()))
            .arg(format!("--log-error={}", dir.join("db.err").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd runs");
        let db = MariaDb { child, socket };
        let since = Instant::now();
        while !db.socket.exists() {
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "mariadbd did not open its socket: {}",
                std::fs::read_to_string(dir.join("db.err")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        db
    }

    fn sql(&self, statements: &str) {
        run_ok(
            Command::new("mariadb")
                .args(["--no-defaults", "-uroot", "-S"])
                .arg(&self.socket)
                .args(["-e", statements]),
        );
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Debian's per-site WordPress settings file, removed on drop.
struct WordPressConfig(PathBuf);

impl Drop for WordPressConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The status line's code of curl's verbose output.
fn status_of(verbose: &str) -> u16 {
    verbose
        .lines()
        .find_map(|l| l.strip_prefix("< HTTP/"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn wordpress_from_debian_serves_pretty_urls_and_its_assets_over_https_and_http2() {
    let fpm = php_fpm();
    need_tools(
        "--no-recommends -:wordpress -:wordpress-theme-twentytwentythree -:php-mysql mariadbd:mariadb-server curl:curl openssl:openssl",
        "Debian's wordpress, php-mysql, mariadb-server, curl and openssl",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        d,
    );
    std::fs::create_dir(d.join("certs")).unwrap();
    openssl_cert(&d.join("certs"), "localhost", "localhost");
    let db = MariaDb::start(d);
    db.sql("CREATE DATABASE wp; CREATE USER 'wp'@'localhost' IDENTIFIED BY 'wp'; GRANT ALL ON wp.* TO 'wp'@'localhost';");
    let (tls, plain) = (free_port(), free_port());
    let name = format!("espalier-test-{tls}");
    let home = format!("https://localhost:{tls}");
    let settings = WordPressConfig(PathBuf::from(format!("/etc/wordpress/config-{name}.php")));
    std::fs::write(
        &settings.0,
        format!(
            "<?php\ndefine('DB_NAME', 'wp');\ndefine('DB_USER', 'wp');\ndefine('DB_PASSWORD', 'wp');\ndefine('DB_HOST', 'localhost:{}');\ndefine('WP_CONTENT_DIR', '/usr/share/wordpress/wp-content');\ndefine('WP_HOME', '{home}');\ndefine('WP_SITEURL', '{home}');\n",
            db.socket.display()
        ),
    )
    .expect("/etc/wordpress is writable (the tests run as root)");
    // WordPress's own installer, from the command line: the tables, a first post
    // ("Hello world!") and pretty permalinks.
    let install = format!(
        r#"$_SERVER["HTTP_HOST"] = "localhost"; $_SERVER["WORDPRESS_CONFIG"] = "{name}";
        define("WP_INSTALLING", true); require "/usr/share/wordpress/wp-load.php";
        require_once ABSPATH . "wp-admin/includes/upgrade.php";
        wp_install("espalier blog", "admin", "admin@example.com", true, "", "secret");
        update_option("permalink_structure", "/%postname%/"); flush_rewrite_rules();"#
    );
    run_ok(Command::new("php").args(["-r", &install]));
    let config = std::fs::read_to_string(d.join("wordpress.toml"))
        .unwrap()
        .replace("/usr/sbin/php-fpm8.2", &fpm)
        .replace("8443", &tls.to_string())
        .replace("8080", &plain.to_string())
        .replace(
            "transport = \"fastcgi\"",
            &format!("transport = \"fastcgi\"\nenvironment = {{ WORDPRESS_CONFIG = \"{name}\" }}"),
        );
    let server = Server::with_config(d, &config);
    let fetch = |path: &str, proto: &str| {
        let (code, body, verbose) =
            curl(d, "certs/localhost.pem", "localhost", tls, path, &[proto]);
        assert_eq!(code, 0, "{path}: {verbose}\n{}", server.log_text());
        (status_of(&verbose), body, verbose.to_ascii_lowercase())
    };
    for proto in ["--http1.1", "--http2"] {
        let (status, body, _) = fetch("/", proto);
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("espalier blog"), "{body}");
        // Pretty permalinks: no such files; the front controller finds the post.
        let (status, body, _) = fetch("/hello-world/", proto);
        assert_eq!(status, 200);
        assert!(body.contains("Hello world!"), "{body}");
        let (status, body, verbose) = fetch("/feed/", proto);
        assert_eq!(status, 200);
        assert!(
            verbose.contains("content-type: application/rss+xml"),
            "{verbose}"
        );
        assert!(body.contains("<rss"), "{body}");
        let (status, body, _) = fetch("/wp-json/", proto);
        assert_eq!(status, 200);
        assert!(body.contains("\"name\":\"espalier blog\""), "{body}");
        // WordPress's own 404 page for a post that is not there.
        let (status, body, _) = fetch("/no-such-post/", proto);
        assert_eq!(status, 404);
        assert!(body.contains("espalier blog"), "{body}");
        // Assets: the package's files, byte for byte, with their types.
        for (path, kind) in [
            ("/wp-includes/css/dashicons.min.css", "text/css"),
            ("/wp-content/themes/twentytwentythree/style.css", "text/css"),
            ("/wp-includes/js/jquery/jquery.min.js", "text/javascript"),
        ] {
            let (status, body, verbose) = fetch(path, proto);
            assert_eq!(status, 200, "{path}");
            let file = std::fs::read_to_string(Path::new("/usr/share/wordpress").join(&path[1..]))
                .unwrap();
            assert!(body == file, "{path} is not the file");
            assert!(
                verbose.contains(&format!("content-type: {kind}")),
                "{verbose}"
            );
        }
        // Compressed for a client that takes it, assets cached by browsers, no X-Powered-By.
        let (code, body, verbose) = curl(
            d,
            "certs/localhost.pem",
            "localhost",
            tls,
            "/hello-world/",
            &[proto, "--compressed"],
        );
        assert_eq!(code, 0, "{verbose}");
        assert!(body.contains("Hello world!"));
        let fields = verbose.to_ascii_lowercase();
        assert!(fields.contains("< content-encoding: br"), "{verbose}");
        assert!(!fields.contains("< x-powered-by"), "{verbose}");
        let (_, _, css) = fetch("/wp-includes/css/dashicons.min.css", proto);
        assert!(css.contains("< cache-control: max-age=604800"), "{css}");
        // Its login page (a script by name) runs; a script in uploads never does.
        let (status, body, _) = fetch("/wp-login.php", proto);
        assert_eq!(status, 200);
        assert!(body.contains("user_login"), "{body}");
        assert_eq!(fetch("/wp-content/uploads/shell.php", proto).0, 403);
    }
    // Plain http goes to https, and www. to the bare name.
    let plain_addr = std::net::SocketAddr::from(([127, 0, 0, 1], plain));
    let r = get_host(plain_addr, "localhost", "/hello-world/");
    assert_eq!(r.status, 308);
    assert_eq!(
        r.header("location"),
        Some(format!("https://localhost:{tls}/hello-world/").as_str())
    );
    let r = get_host(plain_addr, "www.localhost", "/hello-world/?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("https://localhost:{tls}/hello-world/?x=1").as_str())
    );
    // php-fpm stopped: the master answers with the site's own page.
    let (code, _) = server.post("/pools/wordpress/stop");
    assert_eq!(code, 200);
    // Once its workers are gone (they finish what they hold first, as a graceful stop does).
    server.wait_until("the pool stopped", Duration::from_secs(60), |s| {
        s.pool_gone("wordpress", espalier::server::status::PoolState::Stopped)
    });
    let r = get_host(plain_addr, "localhost", "/");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("Back in a moment"), "{}", r.text());
    drop(server);
    drop(db);
}
