//! The keys of who may come in (`allow`, `deny`, `trusted_proxies`, `deny_action`): what
//! they become, and one test per refusal, each one line naming the key.

use super::super::*;
use crate::testutil::fixture;
use std::net::IpAddr;

fn parse(site_keys: &str, app_keys: &str) -> Result<Config, ConfigErrors> {
    let text = format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n{site_keys}\n[[site.app]]\npool = \"p\"\n{app_keys}\n"
    );
    Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn lists_become_networks_and_the_action_is_kept() {
    let c = parse(
        "deny = [\"203.0.113.0/24\", \"2001:db8::/32\"]\ntrusted_proxies = [\"10.1.0.0/16\"]\ndeny_action = \"close\"",
        "allow = [\"192.0.2.7\", \"::1\"]",
    )
    .unwrap();
    let s = &c.sites[0];
    assert!(!s.access.permits(ip("203.0.113.200")));
    assert!(!s.access.permits(ip("2001:db8:1::5")));
    assert!(s.access.permits(ip("198.51.100.1")));
    assert!(s.trusted_proxies[0].contains(ip("10.1.255.1")));
    assert_eq!(s.deny_action, DenyAction::Close);
    let app = &s.apps[0].access;
    assert!(app.permits(ip("192.0.2.7")) && app.permits(ip("::1")));
    assert!(!app.permits(ip("192.0.2.8")));
    // A mapped IPv4 address is the IPv4 address.
    assert!(app.permits(ip("::ffff:192.0.2.7")));
}

#[test]
fn a_limit_keeps_its_rate_burst_and_action() {
    let c = parse(
        "limit = { rate = \"600/m\", concurrent = 20, action = \"close\" }\ntrusted_proxies = [\"10.0.0.0/8\"]",
        "",
    )
    .unwrap();
    let l = c.sites[0].limit.as_ref().unwrap();
    let rate = l.rate.unwrap();
    assert_eq!((rate.requests, rate.per.as_secs()), (600, 60));
    assert_eq!(l.burst, 600, "the rate's count when not given");
    assert_eq!((l.concurrent, l.action), (Some(20), DenyAction::Close));
    let l = parse("limit = { rate = \"50/s\", burst = 100 }", "")
        .unwrap()
        .sites[0]
        .limit
        .clone()
        .unwrap();
    assert_eq!(
        (l.burst, l.concurrent, l.action),
        (100, None, DenyAction::Status(429))
    );
}

#[test]
fn a_site_without_lists_says_nothing_of_them() {
    let c = parse("", "").unwrap();
    let s = &c.sites[0];
    assert!(s.access.is_empty() && s.apps[0].access.is_empty());
    assert_eq!(s.deny_action, DenyAction::default());
}

#[test]
fn each_bad_value_is_one_line_naming_the_key() {
    for (site, app, expected) in [
        (
            "deny = [\"203.0.113.0/33\"]",
            "",
            "key `site[0].deny[0]`: `203.0.113.0/33`: the prefix length must be 0–32",
        ),
        (
            "deny = [\"example.com\"]",
            "",
            "key `site[0].deny[0]`: `example.com` is not an address or network",
        ),
        ("", "allow = []", "key `site[0].app[0].allow`: is empty"),
        (
            "deny = [\"::1\"]\ndeny_action = 500",
            "",
            "key `site[0].deny_action`: 500 is not an answer to a refused client",
        ),
        (
            "trusted_proxies = [\"10.0.0.0/8\"]",
            "",
            "key `site[0].trusted_proxies`: says whose X-Forwarded-For is believed",
        ),
        (
            "deny_action = 404",
            "",
            "key `site[0].deny_action`: says what a client refused",
        ),
        (
            "limit = { rate = \"50/d\" }",
            "",
            "key `site[0].limit.rate`: `50/d` is not a rate",
        ),
        (
            "limit = { rate = \"50/s\", burst = 0 }",
            "",
            "key `site[0].limit.burst`: 0 is not a count of requests",
        ),
        (
            "limit = { concurrent = 5, burst = 10 }",
            "",
            "key `site[0].limit.burst`: is how many requests may come at once above the rate, and there is no rate",
        ),
        (
            "limit = { concurrent = 5, action = 302 }",
            "",
            "key `site[0].limit.action`: 302 is not an answer to a refused client; use 429 (the default), 403, 404, 503 or \"close\"",
        ),
        (
            "limit = { action = 429 }",
            "",
            "key `site[0].limit`: limits nothing",
        ),
        (
            "limit = { rate = \"5/s\", per = \"ip\" }",
            "",
            "unknown field `per`",
        ),
    ] {
        let errs = parse(site, app).expect_err(expected);
        assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
        let text = errs.to_string();
        assert!(text.contains(expected), "{site} / {app}: {text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}

/// A cleartext site with one app path whose `auth` is `auth` (an htpasswd file holding
/// `file_text` is at `{file}`).
fn with_auth(auth: &str, file_text: &str) -> Result<Config, ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users.htpasswd");
    std::fs::write(&file, file_text).unwrap();
    let binding = "http://127.0.0.1:8080";
    let text = format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"{binding}\"]\n[[site.app]]\npool = \"p\"\nauth = {}\n",
        auth.replace("{file}", &file.display().to_string())
    );
    Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
}

const ALICE: &str = "alice:$2y$05$tBNGnx5dsSKJiN4WNUQb6eAhtLhHWzxoq9yzVBwyBbV.6Lc7jtBJW\n";

#[test]
fn auth_reads_its_users_and_each_bad_value_is_one_line() {
    let c = with_auth("{ htpasswd = \"{file}\", realm = \"Admin\" }", ALICE);
    // Cleartext only: refused, naming the key.
    let text = c.expect_err("cleartext").to_string();
    assert!(
        text.contains(
            "key `site[0].app[0].auth`: asks for a password, and the site has no https:// binding"
        ),
        "{text}"
    );
    let c = with_auth(
        "{ htpasswd = \"{file}\", realm = \"Admin\", cleartext = true }",
        ALICE,
    )
    .unwrap();
    let auth = c.sites[0].apps[0].auth.as_ref().unwrap();
    assert_eq!((auth.realm.as_str(), auth.cleartext), ("Admin", true));
    assert_eq!(auth.users[0].0, "alice");
    for (auth, file_text, expected) in [
        (
            "{ realm = \"x\", cleartext = true }",
            ALICE,
            "key `site[0].app[0].auth`: needs htpasswd",
        ),
        (
            "{ htpasswd = \"/nonexistent/users\", cleartext = true }",
            ALICE,
            "key `site[0].app[0].auth.htpasswd`: /nonexistent/users cannot be read",
        ),
        (
            "{ htpasswd = \"{file}\", cleartext = true }",
            "# team\nbob:$apr1$x$y\n",
            "users.htpasswd:2 user `bob`: has an MD5 hash, which is refused",
        ),
        (
            "{ htpasswd = \"{file}\", cleartext = true }",
            "# nobody yet\n",
            "users.htpasswd has no users",
        ),
        (
            "{ htpasswd = \"{file}\", realm = \"a\\\"b\", cleartext = true }",
            ALICE,
            "key `site[0].app[0].auth.realm`: is shown by the browser",
        ),
    ] {
        let errs = with_auth(auth, file_text).expect_err(expected);
        assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
        assert!(errs.to_string().contains(expected), "{auth}: {errs}");
    }
}

#[test]
fn client_certs_are_refused_without_https_or_a_readable_authority() {
    for (keys, expected) in [
        (
            "client_certs = { ca = \"/etc/hostname\" }",
            "key `site[0].client_certs`: asks clients for certificates in the TLS handshake, and the site has no https:// binding",
        ),
        (
            "client_certs = { mode = \"optional\" }",
            "key `site[0].client_certs`: needs ca = \"FILE\"",
        ),
        (
            "client_certs = { ca = \"x.pem\", mode = \"sometimes\" }",
            "key `site[0].client_certs.mode`: `sometimes` is not a mode",
        ),
    ] {
        let errs = parse(keys, "").expect_err(expected);
        assert!(errs.to_string().contains(expected), "{keys}: {errs}");
    }
    let pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(crate::certs::client_roots(b"no pem here", "ca.pem")
        .unwrap_err()
        .contains("ca.pem holds no CERTIFICATE block"));
    assert!(crate::certs::client_roots(pem, "ca.pem").is_err());
}

#[test]
fn proxy_protocol_from_needs_the_header_and_agreement_on_its_address() {
    let site = |name: &str, keys: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:8080:{name}.example\"]\n{keys}\n[[site.app]]\npool = \"p\"\n")
    };
    let parse = |sites: String| {
        Config::parse(
            &format!("[[pool]]\nname = \"p\"\n{sites}"),
            Path::new("/etc/espalier/t.toml"),
            &fixture("dl980"),
        )
    };
    let c = parse(site(
        "a",
        "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\", \"::1\"]",
    ))
    .unwrap();
    assert_eq!(c.sites[0].proxy_protocol_from.len(), 2);
    for (sites, says) in [
        (
            site("a", "proxy_protocol_from = [\"10.0.0.0/8\"]"),
            "key `site[0].proxy_protocol_from`: says which peers",
        ),
        (
            site(
                "a",
                "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.300\"]",
            ),
            "key `site[0].proxy_protocol_from[0]`",
        ),
        (
            site(
                "a",
                "proxy_protocol = true\nproxy_protocol_from = [\"10.0.0.0/8\"]",
            ) + &site("b", "proxy_protocol = true"),
            "whose proxy_protocol_from differ",
        ),
    ] {
        let e = parse(sites).expect_err(says).to_string();
        assert!(e.contains(says), "{says}: {e}");
    }
}
