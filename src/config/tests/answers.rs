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
