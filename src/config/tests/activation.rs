//! A site whose application accepts its connections itself (`transport = "activation"`):
//! every key that acts on requests is refused at `check`, each on its own line naming it,
//! and the same file served by the proxy is accepted — so the refusal is the transport's.

use super::super::*;
use crate::testutil::fixture;

/// One site with every request key espalier has, over its pool `transport`.
fn every_request_key(transport: &str, dir: &Path) -> Result<Config, ConfigErrors> {
    std::fs::write(dir.join("404.html"), "<p>gone").unwrap();
    let users = "alice:$2y$05$tBNGnx5dsSKJiN4WNUQb6eAhtLhHWzxoq9yzVBwyBbV.6Lc7jtBJW\n";
    std::fs::write(dir.join("users.htpasswd"), users).unwrap();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    let text = format!(
        r#"[[pool]]
name = "p"
command = ["sh"]
transport = "{transport}"

[[site]]
name = "s"
bindings = ["http://127.0.0.1:8080"]
root = "www"
index = ["index.htm"]
follow_symlinks = true
access_log = {{ path = "access.log" }}
headers = {{ X-Frame-Options = "DENY" }}
cache = "1h"
errors = {{ 404 = "404.html" }}
replace_app_errors = true
compress = ["gzip"]
allow = ["127.0.0.0/8"]
deny = ["127.0.0.1/32"]
trusted_proxies = ["10.0.0.0/8"]
deny_action = 404
metrics = true
limit = {{ rate = "5/s" }}

[[site.rule]]
match = "^/old$"
redirect = "/new"

[[site.app]]
pool = "p"
headers = {{ X-App = "1" }}
allow = ["127.0.0.0/8"]
deny = ["127.0.0.2/32"]
auth = {{ htpasswd = "users.htpasswd", cleartext = true }}
"#
    );
    Config::parse(&text, &dir.join("t.toml"), &fixture("dl980"))
}

#[test]
fn an_activated_site_refuses_every_key_that_acts_on_requests() {
    let dir = tempfile::tempdir().unwrap();
    // Served by the proxy, the same file is good: each key can act there.
    let proxied = every_request_key("proxy", dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let site_keys = proxied.sites[0].request_keys();
    let app_keys = proxied.sites[0].apps[0].request_keys();
    let e = every_request_key("activation", dir.path())
        .expect_err("activation must refuse them")
        .to_string();
    for key in &site_keys {
        let line = e
            .lines()
            .find(|l| l.contains(&format!("key `site[0].{key}`")))
            .unwrap_or_else(|| panic!("no line for `{key}`: {e}"));
        assert!(
            line.contains("transport = \"proxy\""),
            "names the fix: {line}"
        );
    }
    for key in &app_keys {
        assert!(
            e.contains(&format!("key `site[0].app[0].{key}`")),
            "{key}: {e}"
        );
    }
    // Every site and path feature the file sets is among them (the ones a test of it checks).
    for key in [
        "access_log",
        "headers",
        "compress",
        "errors",
        "limit",
        "deny",
        "allow",
        "rule",
        "metrics",
        "root",
    ] {
        assert!(site_keys.contains(&key), "{key} missing from {site_keys:?}");
    }
    for key in ["auth", "deny", "allow", "headers"] {
        assert!(app_keys.contains(&key), "{key} missing from {app_keys:?}");
    }
    assert_eq!(
        e.lines().filter(|l| l.contains("key `")).count(),
        site_keys.len() + app_keys.len(),
        "{e}"
    );
}

#[test]
fn an_activated_site_with_no_request_keys_is_accepted() {
    let text = "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\nindex = [\"index.html\"]\n[[site.app]]\npool = \"p\"\n";
    let c = Config::parse(text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.sites[0].request_keys().is_empty());
}
