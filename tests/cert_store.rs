//! The certificate store (`[server] certificates`) on the real binary, spoken to by curl:
//! certificates found by host name (exact, a wildcard binding, an exact name falling back to
//! its parent's wildcard pair), a pair added or renewed in the store served without a reload
//! or a restart, and an expired one refused (said once in the log) while the pair served
//! before keeps serving.

use crate::common;

use common::tls::*;
use common::*;
use std::path::Path;
use std::time::Duration;

/// curl's exit code for `https://HOST:PORT/` trusting `ca` (a file in `dir`), and the body.
fn fetch(dir: &Path, ca: &str, host: &str, port: u16) -> (i32, String) {
    let (code, body, _) = curl(dir, ca, host, port, "/", &[]);
    (code, body)
}

#[test]
fn certificates_come_from_the_store_by_name_and_changes_are_served_without_a_reload() {
    need_tools(
        "openssl:openssl curl:curl -:python3-cryptography",
        "curl, openssl and python3-cryptography",
    );
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("certs");
    std::fs::create_dir(&store).unwrap();
    openssl_cert(&store, "a.test", "a.test");
    openssl_cert(&store, "_.w.test", "*.w.test");
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "from the store\n").unwrap();
    let port = free_port();
    let binding = |host: &str| format!("\"https://127.0.0.1:{port}:{host}\"");
    let config = format!(
        "[server]\ncertificates = \"certs\"\n\n[[pool]]\nname = \"p\"\n\n[[site]]\nname = \"s\"\nbindings = [{}, {}, {}, {}]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        binding("a.test"),
        binding("b.test"),
        binding("*.w.test"),
        binding("x.w.test"),
    );
    let server = Server::with_config(dir.path(), &config);
    let pids = server.workers();
    let d = dir.path();

    // By name: its own pair; a wildcard binding's; an exact name with only its parent's.
    assert_eq!(
        fetch(d, "certs/a.test.pem", "a.test", port),
        (0, "from the store\n".into())
    );
    assert_eq!(fetch(d, "certs/_.w.test.pem", "www.w.test", port).0, 0);
    assert_eq!(fetch(d, "certs/_.w.test.pem", "x.w.test", port).0, 0);
    // No pair for b.test yet: its handshake fails, and the log says what to add.
    assert_ne!(fetch(d, "certs/a.test.pem", "b.test", port).0, 0);
    server.wait_for_log(
        "certificate store: no pair for b.test",
        Duration::from_secs(10),
    );
    // `check` says the same, as a warning.
    let checked = espalier(&["check", "-c", d.join("espalier.toml").to_str().unwrap()]);
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{said}");
    assert!(
        said.contains("warning: no pair for b.test; add b.test.pem and b.test.key"),
        "{said}"
    );

    // Added to the store: served, without a reload.
    openssl_cert(&store, "b.test", "b.test");
    server.wait_until(
        "b.test served from the store",
        Duration::from_secs(30),
        |_| fetch(d, "certs/b.test.pem", "b.test", port).0 == 0,
    );
    // Renewed in place as certificate tools do (new files renamed over the old): served.
    let fresh = d.join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    openssl_cert(&fresh, "a.test", "a.test");
    std::fs::copy(fresh.join("a.test.pem"), d.join("renewed-a.pem")).unwrap();
    for ext in ["key", "pem"] {
        std::fs::rename(
            fresh.join(format!("a.test.{ext}")),
            store.join(format!("a.test.{ext}")),
        )
        .unwrap();
    }
    server.wait_until(
        "a.test's renewed pair served",
        Duration::from_secs(30),
        |_| fetch(d, "renewed-a.pem", "a.test", port).0 == 0,
    );
    // An expired pair of its own for x.w.test: refused with one line; the pair served
    // before (its parent's wildcard) keeps serving.
    dated_cert(&store, "x.w.test", "x.w.test", -10, -1);
    server.wait_for_log(
        "certificate store: x.w.test: certificate",
        Duration::from_secs(30),
    );
    server.wait_for_log("expired on", std::time::Duration::from_secs(10));
    assert_eq!(fetch(d, "certs/_.w.test.pem", "x.w.test", port).0, 0);
    // `check` refuses what `serve` refuses, in one line.
    let checked = espalier(&["check", "-c", d.join("espalier.toml").to_str().unwrap()]);
    let said = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{said}");
    assert!(
        said.contains("site `s`: certificate store")
            && said.contains("x.w.test: certificate")
            && said.contains("expired on"),
        "{said}"
    );
    // No worker was replaced for any of it.
    assert_eq!(server.workers(), pids);
}
