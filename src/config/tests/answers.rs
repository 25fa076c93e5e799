//! The keys that shape a site's answers (`headers`, `cache`): what they become, and one test
//! per refusal, each one line naming the key.

use super::super::*;
use crate::testutil::fixture;

fn parse(site_keys: &str, app_keys: &str) -> Result<Config, ConfigErrors> {
    let text = format!(
        "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"py\"\ncommand = [\"/bin/sh\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n{site_keys}\n[[site.app]]\npool = \"p\"\n{app_keys}\n"
    );
    Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
}

fn refused(site_keys: &str, app_keys: &str) -> String {
    let errs = parse(site_keys, app_keys).expect_err("config should be refused");
    assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
    errs.to_string()
}

#[test]
fn headers_and_cache_times_are_kept_most_specific_first() {
    let c = parse(
        "headers = { X-Frame-Options = \"DENY\", Server = \"\" }\ncache = { \"*\" = \"1h\", \"image/*\" = \"30d\", \"text/html\" = \"no-cache\" }",
        "cache = \"365d, immutable\"\nheaders = { X-Robots-Tag = \"noindex\" }",
    )
    .unwrap();
    let s = &c.sites[0];
    assert!(s.headers.contains(&("Server".into(), String::new())));
    assert!(s
        .headers
        .contains(&("X-Frame-Options".into(), "DENY".into())));
    let order: Vec<&str> = s.cache.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(order, ["text/html", "image/*", "*"]);
    assert_eq!(s.cache[1].1, "max-age=2592000");
    assert_eq!(
        s.apps[0].cache,
        vec![("*".into(), "max-age=31536000, immutable".into())]
    );
    assert_eq!(
        s.apps[0].headers,
        vec![("X-Robots-Tag".into(), "noindex".into())]
    );
}

#[test]
fn each_bad_header_or_cache_value_is_one_line_naming_the_key() {
    for (site, app, expected) in [
        (
            "headers = { \"X Frame\" = \"1\" }",
            "",
            "key `site[0].headers`: `X Frame` is not a header field name",
        ),
        (
            "headers = { Content-Length = \"1\" }",
            "",
            "espalier writes itself",
        ),
        (
            "headers = { X-A = \"a\\r\\nSet-Cookie: x\" }",
            "",
            "control character",
        ),
        (
            "cache = \"forever\"",
            "",
            "key `site[0].cache`: `forever` is not a cache time",
        ),
        ("cache = 7", "", "is a cache time (\"7d\") or a table"),
        (
            "cache = { \"css\" = \"1d\" }",
            "",
            "`css` is not a content type",
        ),
        (
            "",
            "headers = { Transfer-Encoding = \"x\" }",
            "key `site[0].app[0].headers`",
        ),
    ] {
        let e = refused(site, app);
        assert!(e.contains(expected), "{site} {app}: {e}");
        assert!(e.contains("t.toml:"), "names the file and line: {e}");
    }
    // A cache time on a path that serves no file.
    let e = Config::parse(
        "[[pool]]\nname = \"py\"\ncommand = [\"/bin/sh\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"py\"\ncache = \"1d\"\n",
        Path::new("/etc/espalier/t.toml"),
        &fixture("dl980"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("this path serves none"), "{e}");
}

#[test]
fn rules_keep_their_order_and_each_bad_one_is_one_line() {
    let text = "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n[[site.rule]]\nhost = \"www.s.example\"\nredirect = \"https://s.example{uri}\"\n[[site.rule]]\nmatch = \"^/b/(\\\\d+)$\"\nrewrite = \"/a?id=$1\"\nquery = \"drop\"\n[[site.rule]]\nmethod = [\"delete\", \"PUT\"]\nanswer = 405\n";
    let c = Config::parse(text, Path::new("/etc/espalier/t.toml"), &fixture("dl980")).unwrap();
    let rules = &c.sites[0].rules;
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[0].action,
        RuleAction::Redirect {
            to: "https://s.example{uri}".into(),
            status: 301
        }
    );
    assert!(!rules[1].keep_query);
    assert_eq!(rules[2].methods, ["DELETE", "PUT"]);
    let rule = |keys: &str| {
        let text = format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n{keys}");
        let errs =
            Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980")).unwrap_err();
        assert_eq!(errs.0.len(), 1, "{keys}: {errs}");
        errs.to_string()
    };
    for (keys, expected) in [
        (
            "[[site.rule]]\nmatch = \"^/(a\"\nanswer = 404\n",
            "key `site[0].rule[0].match`: `match` is not a regex",
        ),
        ("[[site.rule]]\nmatch = \"^/a$\"\n", "has no action"),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nanswer = 404\nrewrite = \"/b\"\n",
            "has 2 actions",
        ),
        (
            "[[site.rule]]\nmatch = \"^/(a)$\"\nredirect = \"/b/$2\"\n",
            "`$2` names a group",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nredirect = \"/b\"\nstatus = 200\n",
            "200 is not a redirect",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nredirect = \"b\"\n",
            "is not a URL or a path",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nrewrite = \"https://x/\"\n",
            "is not a path inside the site",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nanswer = 302\n",
            "redirect for 3xx",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nanswer = 404\nstatus = 301\n",
            "applies to `redirect`",
        ),
        (
            "[[site.rule]]\nmatch = \"^/a$\"\nredirect = \"/b\"\nquery = \"maybe\"\n",
            "`maybe` is not a choice",
        ),
        (
            "[[site.rule]]\nhost = \"a.*.b\"\nanswer = 404\n",
            "may only start a host name",
        ),
        (
            "[[site.rule]]\nmethod = \"G T\"\nanswer = 404\n",
            "is not a method",
        ),
        (
            "[[site.rule]]\nanswer = 404\n[[site.rule]]\nmatch = \"^/b$\"\nanswer = 410\n",
            "the rules after it never apply",
        ),
    ] {
        let e = rule(keys);
        assert!(e.contains(expected), "{keys}: {e}");
        assert!(e.contains("t.toml:"), "names the file and line: {e}");
    }
}

#[test]
fn error_pages_are_statuses_with_readable_small_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("404.html"), "<p>gone").unwrap();
    std::fs::write(dir.path().join("big.html"), vec![b'x'; 70 << 10]).unwrap();
    let with = |keys: &str| {
        let text = format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n{keys}\n[[site.app]]\npool = \"p\"\n");
        Config::parse(&text, &dir.path().join("t.toml"), &fixture("dl980"))
    };
    let c = with("errors = { 404 = \"404.html\" }\nreplace_app_errors = true").unwrap();
    assert_eq!(c.sites[0].errors, vec![(404, dir.path().join("404.html"))]);
    assert!(c.sites[0].replace_app_errors);
    assert!(
        c.sites[0].outline().errors.is_empty(),
        "other pools are not told"
    );
    for (keys, expected) in [
        (
            "errors = { 302 = \"404.html\" }",
            "`302` is not an error status",
        ),
        (
            "errors = { 404 = \"missing.html\" }",
            "missing.html cannot be read",
        ),
        ("errors = { 500 = \"big.html\" }", "keep it under 64 KiB"),
        ("replace_app_errors = true", "the site has none"),
    ] {
        let e = with(keys).unwrap_err().to_string();
        assert!(e.contains(expected), "{keys}: {e}");
        assert!(e.contains("t.toml:"), "{e}");
    }
}

#[test]
fn compress_names_known_codings_once_in_order() {
    use crate::compress::Coding;
    let c = parse("compress = [\"br\", \"zstd\", \"gzip\"]", "").unwrap();
    assert_eq!(
        c.sites[0].compress,
        [Coding::Brotli, Coding::Zstd, Coding::Gzip]
    );
    assert!(
        parse("", "").unwrap().sites[0].compress.is_empty(),
        "off unless asked"
    );
    let e = refused("compress = [\"deflate\"]", "");
    assert!(
        e.contains("key `site[0].compress`: `deflate` is not a coding"),
        "{e}"
    );
    let e = refused("compress = [\"gzip\", \"gzip\"]", "");
    assert!(e.contains("listed twice"), "{e}");
}

#[test]
fn an_alias_is_an_existing_folder_of_a_static_path() {
    let e = refused("", "alias = \"nowhere\"");
    assert!(
        e.contains("key `site[0].app[0].alias`") && e.contains("nowhere cannot be used"),
        "{e}"
    );
    let text = "[[pool]]\nname = \"py\"\ncommand = [\"/bin/sh\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"py\"\nalias = \"/tmp\"\n";
    let e = Config::parse(text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("this path is not handler = \"static\""), "{e}");
    let c = parse("", "alias = \"/tmp\"").unwrap();
    assert_eq!(c.sites[0].apps[0].alias.as_deref(), Some(Path::new("/tmp")));
}
