//! One change validated against the last validation (`revise`): the same configuration as
//! a whole validation, or way given to it — with the same errors — when it cannot be sure.

use super::*;
use crate::config::revise;

/// A hoster's folder: `n` files in `sites.d`, each a pool and its site on one port.
fn hoster(n: usize) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sites.d")).unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::create_dir_all(dir.path().join("www2")).unwrap();
    for i in 0..n {
        std::fs::write(
            dir.path().join(format!("sites.d/s{i}.toml")),
            site_file(i, "www"),
        )
        .unwrap();
    }
    let main = dir.path().join("espalier.toml");
    let text = "include = [\"sites.d/*.toml\"]\n[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9001\"]\n".to_string();
    std::fs::write(&main, &text).unwrap();
    (dir, main, text)
}

fn site_file(i: usize, root: &str) -> String {
    let proxy = if i == 0 {
        "[[site.app]]\npath = \"/api/\"\nupstream = \"api\"\n"
    } else {
        ""
    };
    format!("[[pool]]\nname = \"p{i}\"\n[[site]]\nname = \"s{i}\"\nbindings = [\"http://127.0.0.1:8080:s{i}.example\"]\nroot = \"{root}\"\n[[site.app]]\npool = \"p{i}\"\n{proxy}")
}

/// What `overlay` gives: revised (`Some`) or not, and the result of the revision's entry
/// point, which must be a whole validation's.
fn change(main: &Path, text: &str, overlay: &Overlay) -> (bool, Result<Config, String>) {
    let t = fixture("dl980");
    let (raw, base) = super::super::main_file(text, main).unwrap();
    let revised = revise::revise(main, (text, &raw), &base, &t, overlay).is_some();
    let got = Config::revise_with(text, main, &t, overlay).map_err(|e| e.to_string());
    let whole = Config::parse_with(text, main, &t, overlay).map_err(|e| e.to_string());
    assert_eq!(got, whole, "revised: {revised}");
    (revised, got)
}

#[test]
fn one_site_changed_added_or_removed_is_validated_alone_and_as_a_whole_validation_would() {
    let (dir, main, text) = hoster(120);
    let file = |name: &str| dir.path().join("sites.d").join(name);
    let t = fixture("dl980");
    // Nothing kept yet: whole.
    let (revised, first) = change(&main, &text, &Overlay::new());
    assert!(!revised && first.is_ok());
    Config::revise_with(&text, &main, &t, &Overlay::new()).unwrap();
    // A site's root.
    let overlay = Overlay::from([(file("s60.toml"), Some(site_file(60, "www2")))]);
    let (revised, c) = change(&main, &text, &overlay);
    let c = c.unwrap();
    assert!(revised);
    let s60 = c.sites.iter().find(|s| s.name == "s60").unwrap();
    assert!(s60.root.as_ref().unwrap().ends_with("www2"));
    // A new file: a pool and its site, in its place among the files' names.
    let overlay = Overlay::from([(file("s60a.toml"), Some(site_file(500, "www")))]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(revised);
    let c = c.unwrap();
    assert_eq!(c.sites.len(), 121);
    // A site's file removed: its pool goes with it, which sites elsewhere may name.
    let overlay = Overlay::from([(file("s7.toml"), None)]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(!revised && c.is_ok());
    // A site's file holding its site only (the pool moved out to a file of its own): both
    // files changed at once, the pool the same.
    let pool_only = "[[pool]]\nname = \"p8\"\n".to_string();
    let site_only = site_file(8, "www").replace("[[pool]]\nname = \"p8\"\n", "");
    let overlay = Overlay::from([
        (file("s8.pool.toml"), Some(pool_only)),
        (file("s8.toml"), Some(site_only.clone())),
    ]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(revised && c.is_ok());
    std::fs::write(file("s8.pool.toml"), "[[pool]]\nname = \"p8\"\n").unwrap();
    std::fs::write(file("s8.toml"), &site_only).unwrap();
    Config::revise_with(&text, &main, &t, &Overlay::new()).unwrap();
    // Now a site-only file removed: revised.
    let overlay = Overlay::from([(file("s8.toml"), None)]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(revised && c.unwrap().sites.iter().all(|s| s.name != "s8"));
    // The site that proxies to the written group, changed: revised; the group left unused
    // is the whole validation's error.
    let overlay = Overlay::from([(file("s0.toml"), Some(site_file(0, "www2")))]);
    assert!(change(&main, &text, &overlay).0);
    let overlay = Overlay::from([(file("s0.toml"), Some(site_file(1000, "www")))]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(!revised && c.unwrap_err().contains("upstream"));
}

#[test]
fn what_a_change_cannot_be_sure_of_is_validated_whole_with_its_errors() {
    let (dir, main, text) = hoster(120);
    let file = |name: &str| dir.path().join("sites.d").join(name);
    let t = fixture("dl980");
    // The server's start keeps its validation: the first change is revised.
    Config::load_kept(&main, &t).unwrap();
    let overlay = Overlay::from([(file("s9.toml"), Some(site_file(9, "www2")))]);
    assert!(change(&main, &text, &overlay).0);
    let refused = |overlay: Overlay, says: &str| {
        let (revised, c) = change(&main, &text, &overlay);
        let e = c.expect_err("refused");
        assert!(!revised && e.contains(says), "{e}");
    };
    // Another site's name, another site's host on the same address, a pool's name taken.
    refused(
        Overlay::from([(
            file("s5.toml"),
            Some(site_file(5, "www").replace("name = \"s5\"", "name = \"s6\"")),
        )]),
        "a site named `s6` is already defined",
    );
    refused(
        Overlay::from([(
            file("s5.toml"),
            Some(site_file(5, "www").replace("s5.example", "s6.example")),
        )]),
        "duplicate binding",
    );
    refused(
        Overlay::from([(file("zz.toml"), Some("[[pool]]\nname = \"p3\"\n".into()))]),
        "a pool named `p3` is already defined",
    );
    // A bad key in the changed file, and a file that does not parse.
    refused(
        Overlay::from([(file("s5.toml"), Some(site_file(5, "nowhere")))]),
        "root",
    );
    refused(
        Overlay::from([(file("s5.toml"), Some("[[site]\n".into()))]),
        "s5.toml",
    );
    // A pool changed: sites elsewhere may name it.
    let overlay = Overlay::from([(
        file("s5.toml"),
        Some(site_file(5, "www").replace("[[site]]", "processes = 2\n[[site]]")),
    )]);
    let (revised, c) = change(&main, &text, &overlay);
    assert!(!revised && c.is_ok());
    // The main file changed: whole.
    let more = format!("{text}[server]\nbacklog = 64\n");
    let (raw, base) = super::super::main_file(&more, &main).unwrap();
    assert!(revise::revise(&main, (&more, &raw), &base, &t, &Overlay::new()).is_none());
    // More files than a change touches: whole.
    let overlay: Overlay = (0..=revise::MAX_REVISED)
        .map(|i| (file(&format!("s{i}.toml")), Some(site_file(i, "www2"))))
        .collect();
    let (revised, c) = change(&main, &text, &overlay);
    assert!(!revised && c.is_ok());
}
