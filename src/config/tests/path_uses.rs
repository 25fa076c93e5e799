//! A path's `cache_responses = false` and `buffer = false`, and a group's where no path
//! forwards to it: what they become, and one line per refusal naming the key.

use super::super::*;
use crate::testutil::fixture;

/// A path turns off its pool's response cache or buffering with `false`, and only where the
/// pool does it.
#[test]
fn a_path_turns_off_its_pools_cache_or_buffering_and_nothing_else() {
    let with = |pool_keys: &str, path_keys: &str| {
        let text = format!(
            "[[pool]]\nname = \"p\"\ncommand = [\"/bin/sh\"]\n{pool_keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n[[site.app]]\npath = \"/own/\"\npool = \"p\"\n{path_keys}\n"
        );
        Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
    };
    let c = with(
        "cache_responses = true\nbuffer = true",
        "cache_responses = false\nbuffer = false",
    )
    .unwrap();
    let apps = &c.sites[0].apps;
    assert_eq!(
        (apps[0].uses.cache_responses, apps[0].uses.buffer),
        (true, true)
    );
    assert_eq!(
        (apps[1].uses.cache_responses, apps[1].uses.buffer),
        (false, false)
    );
    for (pool_keys, path_keys, said) in [
        (
            "cache_responses = true",
            "cache_responses = true",
            "only false is written here",
        ),
        (
            "",
            "cache_responses = false",
            "keeps no answers (cache_responses); remove it",
        ),
        ("", "buffer = false", "buffers nothing (buffer); remove it"),
    ] {
        let errs = with(pool_keys, path_keys).expect_err(path_keys).to_string();
        assert!(errs.contains(said), "{errs}");
        assert_eq!(errs.lines().count(), 1, "{errs}");
    }
}

/// A group only sign-in verifiers ask has no forwarded answers to keep or buffer: its
/// `cache_responses` and `buffer` are refused, each naming its key.
#[test]
fn a_verifiers_group_refuses_cache_and_buffer() {
    let text = |forwarded: &str| {
        format!("[[upstream]]\nname = \"v\"\nservers = [\"127.0.0.1:9091\"]\ncache_responses = true\nbuffer = true\n[[pool]]\nname = \"p\"\ncommand = [\"/bin/sh\"]\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\nauth = {{ upstream = \"v\", request = \"/verify\" }}\n[[site.app]]\npool = \"p\"\n{forwarded}")
    };
    let parse = |t: &str| Config::parse(t, Path::new("/etc/espalier/t.toml"), &fixture("dl980"));
    let errs = parse(&text("")).expect_err("refused").to_string();
    assert_eq!(errs.lines().count(), 2, "{errs}");
    for key in ["upstream[0].cache_responses", "upstream[0].buffer"] {
        assert!(
            errs.contains(key) && errs.contains("only by sign-in verifiers"),
            "{errs}"
        );
    }
    // A path forwarded to it too: both act there.
    parse(&text("[[site.app]]\npath = \"/api/\"\nupstream = \"v\"\n")).unwrap();
}
