//! The front-controller keys (`try_files`, `fallback`, `no_scripts`): defaults and one test
//! per refusal. A real folder holds the site's root (the fallback must exist under it).

use super::super::*;
use crate::testutil::fixture;

/// The config at `dir/test.toml`: a FastCGI pool `php`, a proxied pool `py`, a static pool
/// `files`, and `site` written after them.
fn parse_in(dir: &Path, site: &str) -> Result<Config, ConfigErrors> {
    let text = format!(
        r#"
[[pool]]
name = "php"
command = ["/bin/sh"]
transport = "fastcgi"
[[pool]]
name = "py"
command = ["/bin/sh"]
[[pool]]
name = "files"
[[site]]
name = "s"
bindings = ["http://127.0.0.1:8080"]
root = "www"
{site}"#
    );
    Config::parse(&text, &dir.join("test.toml"), &fixture("dl980"))
}

fn site_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www/up")).unwrap();
    std::fs::write(dir.path().join("www/index.php"), "<?php").unwrap();
    dir
}

fn refused(dir: &Path, site: &str) -> String {
    let errs = parse_in(dir, site).expect_err("config should be refused");
    assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
    errs.to_string()
}

#[test]
fn fastcgi_tries_files_by_default_and_a_proxy_when_asked() {
    let dir = site_root();
    let c = parse_in(
        dir.path(),
        "[[site.app]]\npool = \"php\"\nfallback = \"/index.php\"\nno_scripts = [\"/up/\"]\n[[site.app]]\npath = \"/py/\"\npool = \"py\"\n[[site.app]]\npath = \"/py2/\"\npool = \"py\"\ntry_files = true\n",
    )
    .unwrap();
    let apps = &c.sites[0].apps;
    assert!(apps.iter().find(|a| a.pool == "php").unwrap().try_files);
    let php = apps.iter().find(|a| a.pool == "php").unwrap();
    assert_eq!(php.fallback.as_deref(), Some("/index.php"));
    assert_eq!(php.no_scripts, vec!["/up".to_string()]);
    assert!(!apps.iter().find(|a| a.path == "/py/").unwrap().try_files);
    assert!(apps.iter().find(|a| a.path == "/py2/").unwrap().try_files);
    // Other pools are told which pool serves which path, nothing of how.
    let outline = c.sites[0].outline();
    assert!(outline
        .apps
        .iter()
        .all(|a| !a.try_files && a.fallback.is_none() && a.no_scripts.is_empty()));
}

#[test]
fn each_bad_front_controller_key_is_one_line_with_its_fix() {
    let dir = site_root();
    let d = dir.path();
    let app = |keys: &str| format!("[[site.app]]\npool = \"php\"\n{keys}\n");
    for (keys, expected) in [
        (
            "fallback = \"index.php\"",
            "is not the URL path of a script",
        ),
        (
            "fallback = \"/a/../index.php\"",
            "is not the URL path of a script",
        ),
        (
            "fallback = \"/index.html\"",
            "is not a script the app may run",
        ),
        (
            "fallback = \"/missing.php\"",
            "www/missing.php is not a file",
        ),
        (
            "fallback = \"/up/index.php\"\nno_scripts = [\"/up\"]",
            "lies under `no_scripts`",
        ),
        (
            "no_scripts = [\"/\"]",
            "would keep every script from running",
        ),
        ("no_scripts = [\"up\"]", "is not a URL path prefix"),
    ] {
        let e = refused(d, &app(keys));
        assert!(e.contains(expected), "{keys}: {e}");
        assert!(
            e.contains("test.toml:"),
            "{keys}: names the file and line: {e}"
        );
    }
    let e = refused(
        d,
        "[[site.app]]\npool = \"py\"\nfallback = \"/index.php\"\n",
    );
    assert!(
        e.contains("a proxied app is its own fallback: use try_files = true"),
        "{e}"
    );
    let e = refused(d, "[[site.app]]\npool = \"py\"\nno_scripts = [\"/up\"]\n");
    assert!(e.contains("applies to a FastCGI app's path"), "{e}");
    let e = refused(d, "[[site.app]]\npool = \"files\"\ntry_files = true\n");
    assert!(e.contains("a static path serves its files already"), "{e}");
}

#[test]
fn a_proxied_app_trying_files_needs_a_root() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[pool]]\nname = \"py\"\ncommand = [\"/bin/sh\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"py\"\ntry_files = true\n";
    let errs = Config::parse(text, &dir.path().join("t.toml"), &fixture("dl980")).unwrap_err();
    assert!(errs.to_string().contains("add root = "), "{errs}");
}
