//! Tenants kept apart on the filesystem (#60, item 2): each pool's app runs in a mount
//! namespace of its own — a private `/tmp`, the system read-only, homes and the other pools'
//! directories hidden, its own paths writable — and, with Landlock, binds TCP only to its own
//! port. A real Python app (tests/apps/isolation_app.py) tries what a tenant's code might,
//! and says what the kernel answered. Every process a test starts, the test stops.

use crate::common::*;
use std::net::SocketAddr;
use std::path::Path;

/// The test app, as the repository holds it.
static APP: std::sync::LazyLock<std::path::PathBuf> = std::sync::LazyLock::new(|| {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/isolation_app.py")
});

/// A folder for the test's pools under neither /tmp nor /var/tmp, which their private ones
/// would hide: the build's own, or (a build under /tmp) one in /run.
fn outside_tmp() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let hidden = target.starts_with("/tmp") || target.starts_with("/var/tmp");
    tempfile::tempdir_in(if hidden { Path::new("/run") } else { target }).unwrap()
}

/// What pool `host`'s app answered to `what` (`/write?PATH` and the like).
fn ask(addr: SocketAddr, host: &str, what: &str) -> String {
    let r = get_host(addr, host, what);
    assert_eq!(r.status, 200, "{host}{what}: {}", r.text());
    r.text().trim_end().to_string()
}

/// Two app pools, `a` and `b`, each in its own folder under `d`, isolated as `a_isolation`
/// and `b_isolation` say (the `[pool.isolation]` tables' lines); their sites by host name.
fn config(d: &Path, port: u16, (a_isolation, b_isolation): (&str, &str)) -> String {
    let app = d.join("isolation_app.py");
    // b listens on a unix socket it makes in espalier's runtime folder (writable to it even
    // under a read-only system); a on a port.
    let pool = |name: &str, isolation: &str| {
        let socket = if name == "b" { ", \"{socket}\"" } else { "" };
        format!(
            "[[pool]]\nname = \"{name}\"\ncommand = [\"python3\", \"{}\"{socket}]\ndirectory = \"{}\"\nhealth = \"/healthz\"\n[pool.isolation]\n{isolation}\n",
            app.display(),
            d.join(name).display()
        )
    };
    let site = |name: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.test\"]\n[[site.app]]\npool = \"{name}\"\n")
    };
    format!(
        "{}{}{}{}",
        pool("a", a_isolation),
        pool("b", b_isolation),
        site("a"),
        site("b")
    )
}

#[test]
fn each_pools_app_sees_its_own_tmp_a_read_only_system_and_not_the_other_pools_files() {
    if espalier::os::identity::effective_uid() != 0 {
        return skip("isolation needs root (a mount namespace per app)");
    }
    let dir = outside_tmp();
    let d = dir.path();
    // The app too: the repository itself may be under /tmp (a CI clone).
    std::fs::copy(APP.as_path(), d.join("isolation_app.py")).unwrap();
    for sub in ["a/data", "b"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    std::fs::write(d.join("b/secret.txt"), "b's own\n").unwrap();
    let port = free_port();
    let data = d.join("a/data");
    let a = format!(
        "tmp = \"private\"\ntmp_size = \"8MiB\"\nsystem = \"read-only\"\nhome = \"hidden\"\npaths = {{ \"{}\" = \"read-write\" }}",
        data.display()
    );
    // b: no Landlock, so that what it stops is seen to be Landlock's; no network.
    let b = "tmp = \"private\"\nsystem = \"read-only\"\nlandlock = false\nnetwork = \"none\"";
    let server = Server::with_config(d, &config(d, port, (&a, b)));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let marker = format!("espalier-isolation-{}", std::process::id());
    // /tmp: a's file is a's alone, and not the machine's.
    assert_eq!(ask(addr, "a.test", &format!("/write?/tmp/{marker}")), "ok");
    assert!(ask(addr, "a.test", "/list?/tmp").contains(&marker));
    assert!(!ask(addr, "b.test", "/list?/tmp").contains(&marker));
    assert!(!Path::new("/tmp").join(&marker).exists());
    // The system is read-only; a's own path is not.
    let usr = ask(addr, "a.test", "/write?/usr/espalier-isolation");
    assert!(
        usr.starts_with("OSError: Read-only file system") || usr.starts_with("PermissionError"),
        "{usr}"
    );
    assert_eq!(
        ask(addr, "a.test", &format!("/write?{}/f", data.display())),
        "ok"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("f")).unwrap(),
        "written by a\n"
    );
    // b's folder is hidden from a, and its own to b.
    let secret = d.join("b/secret.txt");
    let seen = ask(addr, "a.test", &format!("/read?{}", secret.display()));
    assert!(seen.starts_with("FileNotFoundError"), "{seen}");
    assert_eq!(
        ask(addr, "b.test", &format!("/read?{}", secret.display())),
        "ok b's own"
    );
    // Homes are empty to a.
    assert_eq!(ask(addr, "a.test", "/list?/root"), "ok");
    // Landlock: a binds no port but its own; b, without it, may.
    let other = free_port();
    let bound = ask(addr, "a.test", &format!("/bind?{other}"));
    assert!(bound.starts_with("PermissionError"), "{bound}");
    assert_eq!(ask(addr, "b.test", &format!("/bind?{other}")), "ok");
    // Without a network, b reaches no port of the machine's (here, espalier's own), and is
    // reached through its unix socket alone; a, sharing the machine's, reaches it.
    assert_eq!(ask(addr, "a.test", &format!("/connect?{port}")), "ok");
    let reached = ask(addr, "b.test", &format!("/connect?{port}"));
    assert!(reached.starts_with("ConnectionRefusedError"), "{reached}");
    drop(server);
}

#[test]
fn check_refuses_isolation_keys_that_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(APP.as_path(), d.join("isolation_app.py")).unwrap();
    let port = free_port();
    for (isolation, said) in [
        (
            "tmp = \"privat\"",
            "`privat` is not one of \"private\" or \"shared\"",
        ),
        (
            "tmp_size = \"8MiB\"",
            "sizes a private /tmp, and `tmp` is not \"private\"",
        ),
        (
            "paths = { \"data\" = \"read-write\" }",
            "`data` is not an absolute path",
        ),
        (
            "paths = { \"/srv\" = \"rw\" }",
            "not one of \"read-write\", \"read-only\" or \"hidden\"",
        ),
        (
            "paths = { \"/\" = \"read-only\" }",
            "`/` is the whole system",
        ),
        // The test's folders are under /tmp (tempfile's).
        (
            "tmp = \"private\"",
            "hides the machine's /tmp and /var/tmp, and the app's directory",
        ),
        (
            "tmp = \"private\"\npaths = { \"/tmp/x\" = \"read-write\" }",
            "`/tmp/x` is under /tmp or /var/tmp",
        ),
        (
            "network = \"none\"",
            "leaves the app a loopback of its own, where espalier cannot reach its port",
        ),
    ] {
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::create_dir_all(d.join("b")).unwrap();
        let err = check_refuses(d, &config(d, port, (isolation, "")));
        assert!(err.contains("key `pool[0].isolation"), "{err}");
        assert!(err.contains(said), "{isolation}: {err}");
    }
}

#[test]
fn an_app_whose_start_spec_passes_an_environment_strings_bound_still_starts() {
    if espalier::os::identity::effective_uid() != 0 {
        return skip("isolation needs root (a mount namespace per app)");
    }
    let dir = outside_tmp();
    let d = dir.path();
    std::fs::copy(APP.as_path(), d.join("isolation_app.py")).unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    // 2,000 hidden paths (none there) make the app's start spec about 180 KiB: past the 128
    // KiB the kernel allows one environment string, where it used to be handed over.
    let hidden: Vec<String> = (0..2000)
        .map(|i| {
            format!(
                "\"/srv/espalier-test-hidden/{i:04}/{}\" = \"hidden\"",
                "x".repeat(48)
            )
        })
        .collect();
    let a = format!("paths = {{ {} }}", hidden.join(", "));
    let port = free_port();
    let server = Server::with_config(d, &config(d, port, (&a, "")));
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(
        ask(addr, "a.test", "/list?/srv/espalier-test-hidden"),
        "FileNotFoundError: No such file or directory"
    );
    drop(server);
}
