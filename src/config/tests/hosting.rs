//! A hoster's configs: thousands of sites on one port, included files, the certificate
//! store, warm-up pages, and static paths beside apps on https.

use super::*;
#[test]
fn three_thousand_sites_on_one_port_pass_and_a_duplicate_among_them_is_found() {
    let mut text = String::from("[[pool]]\nname = \"p\"\n");
    for i in 0..3000 {
        text.push_str(&format!("[[site]]\nname = \"s{i}\"\nbindings = [\"http://0.0.0.0:8080:s{i}.example\"]\n[[site.app]]\npool = \"p\"\n"));
    }
    assert!(parse(&text).is_ok());
    text.push_str("[[site]]\nname = \"again\"\nbindings = [\"http://127.0.0.1:8080:S17.example\"]\n[[site.app]]\npool = \"p\"\n");
    let e = error(&text);
    assert!(
        e.contains("duplicate binding") && e.contains("by site `s17`"),
        "{e}"
    );
}

#[test]
fn warmup_paths_are_url_paths_of_an_http_app() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\nwarmup = [\"/\", \"catalog\"]\n{SITE}"
    ));
    assert!(
        e.contains("pool[0].warmup") && e.contains("`catalog` is not a URL path"),
        "{e}"
    );
    let e = error(&format!("[[pool]]\nname = \"p\"\nwarmup = [\"/\"]\n{SITE}"));
    assert!(
        e.contains("pool[0].warmup") && e.contains("runs an application"),
        "{e}"
    );
    let c = parse(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\nwarmup = [\"/\", \"/catalog\"]\n{SITE}"
    ))
    .unwrap();
    assert_eq!(c.pools[0].app.as_ref().unwrap().warmup, ["/", "/catalog"]);
}

/// An included file kept from the last load (`file_memo`) gives the same pools and sites
/// without being read or parsed again, until it changes; one refused is refused again.
#[test]
fn kept_included_files_are_used_until_they_change_and_refusals_are_never_kept() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("espalier.toml");
    std::fs::create_dir(dir.path().join("sites.d")).unwrap();
    let file = dir.path().join("sites.d/a.toml");
    let site = |root: &str| {
        format!("[[pool]]\nname = \"a\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:8080:a.test\"]\nroot = \"{root}\"\n[[site.app]]\npool = \"a\"\n")
    };
    for root in ["one", "two"] {
        std::fs::create_dir(dir.path().join(root)).unwrap();
    }
    std::fs::write(&file, site("one")).unwrap();
    std::fs::write(&main, "include = [\"sites.d/*.toml\"]\n").unwrap();
    let topo = fixture("dl980");
    let root = |c: &Config| c.sites[0].root.clone();
    super::file_memo::keep_now(&file);
    let first = Config::load(&main, &topo).unwrap();
    assert_eq!(root(&first), Some(dir.path().join("one")));
    // Kept: loaded again from what was kept, the same.
    let again = Config::load(&main, &topo).unwrap();
    assert_eq!(root(&again), root(&first));
    assert_eq!(again.sites.len(), 1);
    // Changed on disk: read again.
    std::fs::write(&file, site("two")).unwrap();
    super::file_memo::keep_now(&file);
    assert_eq!(
        root(&Config::load(&main, &topo).unwrap()),
        Some(dir.path().join("two"))
    );
    // A file refused is refused at every load, kept text or not.
    std::fs::write(&file, "[server]\nbacklog = 5\n").unwrap();
    super::file_memo::keep_now(&file);
    for _ in 0..2 {
        let e = Config::load(&main, &topo).unwrap_err().to_string();
        assert!(
            e.contains("a.toml:1: key `server`: an included file holds"),
            "{e}"
        );
    }
}

#[test]
fn included_files_add_pools_and_sites_and_their_errors_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("espalier.toml");
    std::fs::create_dir(dir.path().join("sites.d")).unwrap();
    let site = |name: &str, port: u16| {
        format!("[[pool]]\nname = \"{name}\"\n\n[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.test\"]\n[[site.app]]\npool = \"{name}\"\n")
    };
    std::fs::write(dir.path().join("sites.d/b.toml"), site("b", 8080)).unwrap();
    std::fs::write(dir.path().join("sites.d/a.toml"), site("a", 8080)).unwrap();
    std::fs::write(dir.path().join("sites.d/notes.txt"), "not toml").unwrap();
    std::fs::write(
        &main,
        "include = [\"sites.d/*.toml\", \"empty.d/*.toml\"]\n",
    )
    .unwrap();
    let topo = fixture("dl980");
    let c = Config::load(&main, &topo).unwrap();
    let names: Vec<&str> = c.sites.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "in file-name order");
    assert_eq!(c.pools.len(), 2);

    // An error in an included file names that file, the line and the key as written there.
    std::fs::write(
        dir.path().join("sites.d/b.toml"),
        site("b", 8080).replace("name = \"b\"\n\n", "name = \"b\"\ncpus = \"x\"\n\n"),
    )
    .unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!(
            "{}:3: key `pool[0].cpus`",
            dir.path().join("sites.d/b.toml").display()
        )),
        "{e}"
    );
    // A site in one file may use a pool of another; a duplicate name across files is refused
    // at the second file.
    std::fs::write(dir.path().join("sites.d/b.toml"), site("a", 8080)).unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("sites.d/b.toml:2: key `pool[0].name`: a pool named `a` is already defined"),
        "{e}"
    );

    // [server] belongs to the main file; a missing file without a wildcard is an error there.
    std::fs::write(dir.path().join("sites.d/b.toml"), "[server]\nbacklog = 5\n").unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("b.toml:1: key `server`: an included file holds"),
        "{e}"
    );
    std::fs::write(&main, "include = [\"nope.toml\"]\n").unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("espalier.toml:1: key `include[0]`: cannot read"),
        "{e}"
    );
    // Written under [server], TOML makes it `server.include`: the fix is said.
    std::fs::write(&main, "[server]\ninclude = [\"sites.d/*.toml\"]\n").unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("`include` is a top-level key: move it above"),
        "{e}"
    );
}

#[test]
fn a_certificate_store_lets_named_https_bindings_go_without_tls() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    let main = dir.path().join("espalier.toml");
    let topo = fixture("dl980");
    let site = |binding: &str| {
        format!("[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"{binding}\"]\n[[site.app]]\npool = \"p\"\n")
    };
    let named = site("https://127.0.0.1:8443:a.example");
    // Without a store: the site needs tls, and the fix names both ways.
    std::fs::write(&main, &named).unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("has no certificate") && e.contains("[server] certificates"),
        "{e}"
    );
    // With one: fine, and the folder is resolved from the file's.
    std::fs::write(
        &main,
        format!("[server]\ncertificates = \"certs\"\n{named}"),
    )
    .unwrap();
    let c = Config::load(&main, &topo).unwrap();
    assert_eq!(c.server.certificates, Some(dir.path().join("certs")));
    // A binding without a name has nothing to look for in the store.
    std::fs::write(
        &main,
        format!(
            "[server]\ncertificates = \"certs\"\n{}",
            site("https://127.0.0.1:8443")
        ),
    )
    .unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains("key `site[0].bindings[0]`: is https without a host name"),
        "{e}"
    );
    // A store that is not a folder.
    std::fs::write(&main, format!("[server]\ncertificates = \"nope\"\n{named}")).unwrap();
    let e = Config::load(&main, &topo).unwrap_err().to_string();
    assert!(
        e.contains(":2: key `server.certificates`") && e.contains("create the folder"),
        "{e}"
    );
}

#[test]
fn a_warmup_page_is_a_small_file_of_an_on_demand_pool_on_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("espalier.toml");
    std::fs::write(dir.path().join("wait.html"), "<p>wait</p>").unwrap();
    std::fs::write(dir.path().join("big.html"), vec![b'x'; 70_000]).unwrap();
    let topo = fixture("dl980");
    let load = |pool: &str, binding: &str| {
        std::fs::write(&main, format!("[[pool]]\nname = \"p\"\n{pool}\n[[site]]\nname = \"s\"\nbindings = [\"{binding}\"]\n[[site.app]]\npool = \"p\"\n")).unwrap();
        Config::load(&main, &topo)
    };
    let http = "http://127.0.0.1:8080";
    let c = load("start = \"on-demand\"\nwarmup_page = \"wait.html\"", http).unwrap();
    assert_eq!(c.pools[0].warmup_page, Some(dir.path().join("wait.html")));
    let e = load("warmup_page = \"wait.html\"", http)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":3: key `pool[0].warmup_page`: is answered while an on-demand pool starts"),
        "{e}"
    );
    let e = load("start = \"on-demand\"\nwarmup_page = \"big.html\"", http)
        .unwrap_err()
        .to_string();
    assert!(e.contains("is 70000 bytes; write a small HTML file"), "{e}");
    let e = load("start = \"on-demand\"\nwarmup_page = \"none.html\"", http)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read"), "{e}");
    let e = load(
        "start = \"on-demand\"\nwarmup_page = \"wait.html\"",
        "https://127.0.0.1:8443:a.example",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("which holds no TLS keys, and site `s` of this pool has https bindings"),
        "{e}"
    );
}

#[test]
fn a_static_path_beside_an_app_goes_with_the_connection_on_https_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("public")).unwrap();
    let main = dir.path().join("espalier.toml");
    let topo = fixture("dl980");
    let pools = "[[pool]]\nname = \"web\"\ncommand = [\"python3\", \"app.py\"]\n[[pool]]\nname = \"other\"\n";
    let load = |apps: &str, root: bool| {
        let root = if root { "root = \"public\"\n" } else { "" };
        std::fs::write(&main, format!("[server]\ncertificates = \".\"\n{pools}[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:8443:s.example\"]\n{root}{apps}")).unwrap();
        Config::load(&main, &topo)
    };
    let web = "[[site.app]]\npool = \"web\"\n";
    let statics = "[[site.app]]\npath = \"/static/\"\nhandler = \"static\"\n";
    // No pool: served by the connection's pool, whatever the scheme.
    let c = load(&format!("{web}{statics}"), true).unwrap();
    let s = &c.sites[0];
    assert!(s.apps[1].any_pool() && s.apps[1].handler == HandlerKind::Static);
    assert!(s.apps[1].answered_by("web") && !s.apps[0].answered_by("other"));
    // Named with the app's own pool: the same.
    let c = load(
        &format!("{web}[[site.app]]\npath = \"/static/\"\npool = \"web\"\nhandler = \"static\"\n"),
        true,
    )
    .unwrap();
    assert_eq!(c.sites[0].apps[1].handler, HandlerKind::Static);
    // Files need the root; other handlers are still the app's to answer.
    let e = load(&format!("{web}{statics}"), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("a static path beside an application serves files from the site's `root`"),
        "{e}"
    );
    let e = load(
        &format!("{web}[[site.app]]\npath = \"/x\"\npool = \"web\"\nhandler = \"dynamic\"\n"),
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("runs an application (`command`), which answers the requests; remove `handler`"),
        "{e}"
    );
    // Two app pools over TLS: refused, saying what to do.
    let e = load(
        &format!("{web}[[site.app]]\npath = \"/api\"\npool = \"other\"\n{statics}"),
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("is https, and site `s` sends `/` to pool `web` but `/api` to pool `other`")
            && e.contains("its static paths may name no pool"),
        "{e}"
    );
    // A site of static paths alone names a pool somewhere.
    let e = load(statics, true).unwrap_err().to_string();
    assert!(e.contains("site `s`'s apps name no `pool`"), "{e}");
}

/// A reload compares outlines without making them: `same_outline` says what comparing the
/// made outlines says, for a change of each kind.
#[test]
fn same_outline_agrees_with_the_outlines_compared() {
    let site = |extra: &str, path_pool: &str| {
        let text = format!("[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080:s.test\"]\n{extra}\n[[site.app]]\npool = \"p\"\n[[site.app]]\npath = \"/api\"\n{path_pool}\n");
        parse(&text).unwrap().sites.remove(0)
    };
    let base = site("", "pool = \"q\"");
    for (what, other, same) in [
        (
            "a header",
            site("headers = { X-A = \"1\" }", "pool = \"q\""),
            true,
        ),
        (
            "a body bound",
            site("max_body_size = \"1MiB\"", "pool = \"q\""),
            false,
        ),
        ("a path's pool", site("", "pool = \"p\""), false),
        (
            "a path's body bound",
            site("", "pool = \"q\"\nmax_body_size = \"2MiB\""),
            false,
        ),
        ("nothing", site("", "pool = \"q\""), true),
    ] {
        assert_eq!(base.outline() == other.outline(), same, "{what}");
        assert_eq!(base.same_outline(&other), same, "{what}");
    }
}

/// A pattern that matches the main file too (`*.toml` beside it) includes the others alone:
/// the main file, told apart by its inode, is never read again as an included one (it would
/// be refused there, holding `include`).
#[test]
fn a_pattern_matching_the_main_file_leaves_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let main = dir.path().join("espalier.toml");
    std::fs::write(&main, "include = [\"*.toml\"]\n").unwrap();
    std::fs::write(
        dir.path().join("a.toml"),
        "[[pool]]\nname = \"a\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"a\"\n",
    )
    .unwrap();
    let c = Config::load(&main, &fixture("dl980")).unwrap();
    assert_eq!(c.sites.len(), 1);
}

#[test]
fn a_log_two_users_write_is_found_among_thousands_of_sites_each_with_its_own() {
    // Every site its own pool and its own log: indexed, this is checked in linear time.
    let sites = |n: usize| {
        (0..n)
            .map(|i| format!("[[pool]]\nname = \"p{i}\"\nuser = \"nobody\"\n[[site]]\nname = \"s{i}\"\nbindings = [\"http://0.0.0.0:8080:s{i}.example\"]\naccess_log = {{ path = \"/var/log/s{i}.log\" }}\n[[site.app]]\npool = \"p{i}\"\n"))
            .collect::<String>()
    };
    let mut text = sites(3000);
    assert!(parse(&text).is_ok());
    // Another user's pool writing one of those logs: refused, both named.
    text.push_str("[[pool]]\nname = \"other\"\nuser = \"daemon\"\n[[site]]\nname = \"late\"\nbindings = [\"http://0.0.0.0:8080:late.example\"]\naccess_log = { path = \"/var/log/s17.log\" }\n[[site.app]]\npool = \"other\"\n");
    let e = error(&text);
    assert!(
        e.contains("/var/log/s17.log is written by pool `p17` (site `s17`, user `nobody`) and pool `other` (user `daemon`)"),
        "{e}"
    );
    // The same user's pool sharing it: taken.
    let same = text.replace("user = \"daemon\"", "user = \"nobody\"");
    assert!(parse(&same).is_ok());
}
