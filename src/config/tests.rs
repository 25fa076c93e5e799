//! Tests of the config loader: documented defaults, the design sketch, and one test per
//! error message (file, line, key, fix). Uses the DL980 fixture as the machine.

use super::*;
use crate::testutil::fixture;
use std::path::PathBuf;
use std::time::Duration;

mod access;
mod activation;
mod answers;
mod app_transport;
mod backpressure;
mod front;
mod hosting;
mod path_uses;
mod pools;
mod reference;
mod revised;

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    Config::parse(
        text,
        Path::new("/etc/espalier/test.toml"),
        &fixture("dl980"),
    )
}

/// The single error a config gives, as printed.
fn error(text: &str) -> String {
    let errs = parse(text).expect_err("config should be refused");
    assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
    errs.to_string()
}

const SITE: &str = "\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n";

#[test]
fn minimal_config_gets_documented_defaults() {
    let c = parse(&format!("[[pool]]\nname = \"p\"\n{SITE}")).unwrap();
    let p = &c.pools[0];
    assert_eq!(p.processes, Processes::Count(1));
    assert_eq!(p.placement, Placement::MostFreeMemory);
    assert_eq!(p.affinity, Affinity::Soft);
    assert_eq!(p.unit, Unit::Node);
    assert_eq!(p.memory_policy, MemoryPolicy::Preferred);
    assert_eq!(
        p.rapid_fail,
        RapidFail {
            enabled: true,
            max_crashes: 5,
            interval: Duration::from_secs(300)
        }
    );
    assert!(p.recycle.overlap);
    assert_eq!(c.server, ServerSettings::default());
    let s = &c.sites[0];
    assert_eq!(s.apps[0].handler, HandlerKind::Static);
    assert_eq!(s.apps[0].path, "/");
    assert_eq!(s.index, vec!["index.html".to_string()]);
    assert_eq!(s.root, None);
}

#[test]
fn the_design_sketch_parses() {
    let text = r#"
[server]
admin = "127.0.0.1:9180"

[[pool]]
name = "shop"
processes = "auto"
placement = "most-free-memory"
affinity = "hard"
cpus = "1-63"
[pool.recycle]
requests = 5_000_000
interval = "29h"
memory = "2GiB"
schedule = ["03:00", "15:30:05"]
[pool.rapid_fail]
max_crashes = 5
interval = "5m"

[[site]]
name = "shop"
bindings = ["http://0.0.0.0:8080", "http://[::1]:8081:shop.example"]
root = "./www"
[[site.app]]
path = "/"
pool = "shop"
handler = "static"
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let c = Config::parse(text, &dir.path().join("test.toml"), &fixture("dl980")).unwrap();
    let p = &c.pools[0];
    assert_eq!(p.processes, Processes::Auto);
    assert_eq!(p.affinity, Affinity::Hard);
    assert_eq!(
        p.memory_policy,
        MemoryPolicy::Bind,
        "hard affinity binds memory by default"
    );
    assert_eq!(p.cpus.as_ref().unwrap().to_string(), "1-63");
    assert_eq!(p.recycle.requests, Some(5_000_000));
    assert_eq!(p.recycle.interval, Some(Duration::from_secs(29 * 3600)));
    assert_eq!(p.recycle.memory, Some(2 << 30));
    assert_eq!(p.recycle.schedule, vec![3 * 3600, 15 * 3600 + 30 * 60 + 5]);
    let s = &c.sites[0];
    assert_eq!(
        s.root.as_deref(),
        Some(dir.path().join("./www").as_path()),
        "root is relative to the config file"
    );
    assert_eq!(s.bindings[1].addr, "[::1]:8081".parse().unwrap());
    assert_eq!(s.bindings[1].host.as_deref(), Some("shop.example"));
}

#[test]
fn processes_zero_means_auto_like_iis() {
    let c = parse(&format!("[[pool]]\nname = \"p\"\nprocesses = 0\n{SITE}")).unwrap();
    assert_eq!(c.pools[0].processes, Processes::Auto);
}

#[test]
fn unknown_key_names_file_line_and_key() {
    let e = error(&format!("[[pool]]\nname = \"p\"\nprocceses = 4\n{SITE}"));
    assert!(
        e.starts_with("/etc/espalier/test.toml:3: key `pool.procceses`: unknown field `procceses`"),
        "{e}"
    );
    assert!(e.contains("correct its spelling"), "{e}");
}

#[test]
fn a_limit_written_under_server_points_at_its_table() {
    let e = error(&format!(
        "[server]\nmax_body_size = \"10m\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert!(
        e.starts_with("/etc/espalier/test.toml:2: key `server.max_body_size`: unknown field `max_body_size` here: it is a key of [server.limits]; move it under a `[server.limits]` header, or into a [[site]] or [[site.app]] for that site or path alone"),
        "{e}"
    );
    // Under its own table it is a key like any other.
    let c = parse(&format!(
        "[server.limits]\nmax_body_size = \"10m\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ))
    .unwrap();
    assert_eq!(c.server.limits.max_body_size, 10 << 20);
}

#[test]
fn the_limit_keys_the_hint_knows_are_those_of_server_limits() {
    // serde lists the fields it expects when one is unknown: those are the table's keys.
    let e = toml::from_str::<super::raw::RawLimits>("no_such_key = 1")
        .unwrap_err()
        .to_string();
    let expected: Vec<&str> = e
        .split("expected one of")
        .nth(1)
        .unwrap()
        .split('`')
        .skip(1)
        .step_by(2)
        .collect();
    assert_eq!(expected, super::raw::LIMIT_KEYS, "{e}");
}

#[test]
fn syntax_error_names_the_line() {
    let e = error("[[pool]]\nname = \"p\n");
    assert!(e.starts_with("/etc/espalier/test.toml:2"), "{e}");
}

#[test]
fn site_naming_unknown_pool() {
    let e = error("[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:80\"]\n[[site.app]]\npool = \"shop\"\n");
    assert_eq!(e, "/etc/espalier/test.toml:6: key `site[0].app[0].pool`: no pool is named `shop`; use one of: p");
}

#[test]
fn cpus_the_machine_does_not_have() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncpus = \"150-170\"\n{SITE}"
    ));
    assert_eq!(
        e,
        "/etc/espalier/test.toml:3: key `pool[0].cpus`: CPU(s) 160-170 do not exist on this machine (it has 0-159); remove them from the list"
    );
}

#[test]
fn cpus_mask_leaving_no_online_cpu() {
    let text = format!("[[pool]]\nname = \"p\"\ncpus = \"6-7\"\n{SITE}");
    let errs = Config::parse(&text, Path::new("a.toml"), &fixture("awkward"))
        .unwrap_err()
        .to_string();
    assert!(
        errs.starts_with("a.toml:3: key `pool[0].cpus`: leaves the pool no online CPU"),
        "{errs}"
    );
    let e = error(&format!("[[pool]]\nname = \"p\"\ncpus = \"0-\"\n{SITE}"));
    assert!(
        e.contains("key `pool[0].cpus`: `0-` is not a CPU id or range"),
        "{e}"
    );
}

#[test]
fn duplicate_bindings() {
    let text = "[[pool]]\nname = \"p\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n[[site]]\nname = \"b\"\nbindings = [\"http://0.0.0.0:8080\"]\n[[site.app]]\npool = \"p\"\n";
    let e = error(text);
    assert_eq!(e, "/etc/espalier/test.toml:10: key `site[1].bindings[0]`: duplicate binding: `http://0.0.0.0:8080` is already bound with no host name (the default site) by site `a`; remove one or give each its own host name");
    // Different host names on one address are fine when one pool serves both.
    let ok = text.replace(
        "\"http://0.0.0.0:8080\"",
        "\"http://0.0.0.0:8080:b.example\"",
    );
    parse(&ok).unwrap();
}

#[test]
fn one_port_may_be_shared_by_pools_with_distinct_hosts() {
    let text = "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:8080:a.example\"]\n[[site.app]]\npool = \"p\"\n[[site]]\nname = \"b\"\nbindings = [\"http://127.0.0.1:8080:B.Example.\"]\n[[site.app]]\npool = \"q\"\n";
    parse(text).unwrap();
    // The same host on one address twice (case and a trailing dot aside) is refused.
    let twice = text.replace("B.Example.", "A.EXAMPLE.");
    assert_eq!(error(&twice), "/etc/espalier/test.toml:12: key `site[1].bindings[0]`: duplicate binding: `http://127.0.0.1:8080:a.example.` is already bound with host `a.example.` by site `a`; remove one or give each its own host name");
}

#[test]
fn the_sites_of_an_address_agree_on_the_proxy_protocol() {
    let text = "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n[[site]]\nname = \"a\"\nproxy_protocol = true\nbindings = [\"http://127.0.0.1:8080:a.example\"]\n[[site.app]]\npool = \"p\"\n[[site]]\nname = \"b\"\nproxy_protocol = true\nbindings = [\"http://127.0.0.1:8080:b.example\"]\n[[site.app]]\npool = \"q\"\n";
    let c = parse(text).unwrap();
    assert!(c.sites.iter().all(|s| s.proxy_protocol));
    let e = error(&text.replacen("proxy_protocol = true\n", "", 1));
    assert!(
        e.contains("key `site[1].bindings[0]`")
            && e.contains("site `b` (proxy_protocol = true) and site `a` (without it)"),
        "{e}"
    );
    // An activated application would read the header as HTTP.
    let e = error("[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[site]]\nname = \"s\"\nproxy_protocol = true\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n");
    assert!(
        e.contains("key `site[0].proxy_protocol`")
            && e.contains("use transport = \"proxy\", or remove proxy_protocol"),
        "{e}"
    );
}

#[test]
fn pool_identities_name_users_that_exist_and_logs_have_one_writer() {
    let c = parse("[[pool]]\nname = \"p\"\nuser = \"root\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n").unwrap();
    let id = c.pools[0].identity.as_ref().expect("an identity");
    assert_eq!((id.user.as_str(), id.uid, id.gid), ("root", 0, 0));
    for (pool, key, says) in [
        (
            "user = \"no-such-user-here\"",
            "pool[0].user",
            "user `no-such-user-here` does not exist; create it (useradd --system",
        ),
        (
            "user = \"root\"\ngroup = \"no-such-group-here\"",
            "pool[0].group",
            "group `no-such-group-here` does not exist",
        ),
        ("group = \"root\"", "pool[0].group", "applies with `user`"),
    ] {
        let e = error(&format!("[[pool]]\nname = \"p\"\n{pool}\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n"));
        assert!(
            e.contains(&format!("key `{key}`")) && e.contains(says),
            "{e}"
        );
    }
    // One site split over pools of two users cannot share one log file.
    let e = error("[[pool]]\nname = \"p\"\nuser = \"root\"\n[[pool]]\nname = \"q\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\naccess_log = { path = \"/tmp/s.log\" }\n[[site.app]]\npool = \"p\"\n[[site.app]]\npath = \"/q\"\npool = \"q\"\n");
    assert!(
        e.contains("key `site[0].access_log`")
            && e.contains(
                "written by pool `p` (site `s`, user `root`) and pool `q` (espalier's own user)"
            ),
        "{e}"
    );
}

#[test]
fn host_names_must_be_host_names() {
    let bad = |host: &str| {
        error(&format!(
            "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080:{host}\"]\n[[site.app]]\npool = \"p\"\n"
        ))
    };
    let e = bad("shop.*.example");
    assert!(e.starts_with("/etc/espalier/test.toml:4: key `site[0].bindings[0]`: `shop.*.example`: `*` may only start a host name"), "{e}");
    let e = bad("shop/x");
    assert!(
        e.contains("key `site[0].bindings[0]`") && e.contains("`/` cannot appear"),
        "{e}"
    );
    let e = bad("a..b");
    assert!(e.contains("each part between dots"), "{e}");
    parse("[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080:*.shop.example\"]\n[[site.app]]\npool = \"p\"\n").unwrap();
}

#[test]
fn bad_durations_and_sizes() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\n[pool.recycle]\ninterval = \"29 hours\"\n{SITE}"
    ));
    assert!(e.starts_with("/etc/espalier/test.toml:4: key `pool[0].recycle.interval`: `29 hours` is not a duration"), "{e}");
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\n[pool.recycle]\nmemory = \"2 gallons\"\n{SITE}"
    ));
    assert!(
        e.starts_with(
            "/etc/espalier/test.toml:4: key `pool[0].recycle.memory`: `2 gallons` is not a size"
        ),
        "{e}"
    );
    let e = error(&format!(
        "[server.limits]\nmax_body_size = \"lots\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert!(
        e.starts_with("/etc/espalier/test.toml:2: key `server.limits.max_body_size`"),
        "{e}"
    );
    let e = error(&format!("[[pool]]\nname = \"p\"\ncpu_limit = 50\n{SITE}"));
    assert!(
        e.contains("key `pool[0].cpu_limit`: 50 is not a percentage"),
        "{e}"
    );
}

#[test]
fn bad_choices_list_the_options() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\naffinity = \"sticky\"\n{SITE}"
    ));
    assert_eq!(e, "/etc/espalier/test.toml:3: key `pool[0].affinity`: `sticky` is not one of \"soft\", \"hard\"");
    let e = error(&format!("[[pool]]\nname = \"p\"\nprocesses = -2\n{SITE}"));
    assert!(e.contains("-2 is not a process count"), "{e}");
    let e = error("[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:80\"]\n[[site.app]]\nhandler = \"php\"\n");
    assert!(
        e.contains(
            "key `site[0].app[0].handler`: `php` is not one of \"static\", \"dynamic\", \"cpu\""
        ),
        "{e}"
    );
    let e = error(&format!(
        "[server]\nktls = \"on\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert_eq!(
        e,
        "/etc/espalier/test.toml:2: key `server.ktls`: `on` is not one of \"auto\", \"off\""
    );
    let auto = parse(&format!(
        "[server]\nktls = \"auto\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ))
    .unwrap();
    assert!(auto.server.ktls);
    let default = parse(&format!("[[pool]]\nname = \"p\"\n{SITE}")).unwrap();
    assert!(!default.server.ktls, "kTLS is off unless asked for");
}

#[test]
fn the_io_path_is_chosen_by_the_config_the_environment_and_the_kernel() {
    let e = error(&format!(
        "[server]\nio = \"aio\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert_eq!(
        e,
        "/etc/espalier/test.toml:2: key `server.io`: `aio` is not one of \"auto\", \"uring\", \"epoll\""
    );
    let io = |text: &str| {
        parse(&format!(
            "[server]\nio = \"{text}\"\n[[pool]]\nname = \"p\"\n{SITE}"
        ))
        .unwrap()
        .server
        .io
    };
    let default = parse(&format!("[[pool]]\nname = \"p\"\n{SITE}")).unwrap();
    assert_eq!(default.server.io, IoChoice::Auto);
    let has = || Ok::<_, String>("kernel 6.18".to_string());
    let lacks = || Err::<String, _>("kernel 5.4 has no multishot receive".to_string());
    // auto: the kernel decides, the environment may decide instead.
    let p = io("auto").resolve(None, has).unwrap();
    assert!(p.uring, "{}", p.why);
    let p = io("auto").resolve(None, lacks).unwrap();
    assert!(!p.uring);
    assert_eq!(p.why, "epoll (kernel 5.4 has no multishot receive)");
    let p = io("auto").resolve(Some("epoll"), has).unwrap();
    assert!(!p.uring);
    assert_eq!(p.why, "epoll (ESPALIER_IO=epoll)");
    assert!(io("auto").resolve(Some("uring"), lacks).is_err());
    let e = io("auto").resolve(Some("aio"), has).unwrap_err();
    assert_eq!(e, "ESPALIER_IO=aio: use auto, uring or epoll (or unset it)");
    // What the config names is what it gets; io_uring where the kernel refuses is an error.
    assert!(!io("epoll").resolve(Some("uring"), has).unwrap().uring);
    assert!(io("uring").resolve(Some("epoll"), has).unwrap().uring);
    // The load generator's flag names itself.
    let e = IoChoice::Uring
        .resolve_as(|v| format!("--io {v}"), None, lacks)
        .unwrap_err();
    assert_eq!(
        e,
        "--io uring, but kernel 5.4 has no multishot receive; use --io auto to fall back to epoll"
    );
    let e = io("uring").resolve(None, lacks).unwrap_err();
    assert_eq!(
        e,
        "[server] io = \"uring\", but kernel 5.4 has no multishot receive; use [server] io = \"auto\" to fall back to epoll"
    );
}

#[test]
fn bad_bindings() {
    for (b, want) in [
        ("127.0.0.1:80", "has no protocol"),
        (
            "https://127.0.0.1:443",
            "is https, but the site has no certificate",
        ),
        ("http://localhost:80", "`localhost` is not an IP address"),
        ("http://127.0.0.1:99999", "`99999` is not a port number"),
        ("http://127.0.0.1", "has no port"),
    ] {
        let e = error(&format!(
            "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"{b}\"]\n[[site.app]]\npool = \"p\"\n"
        ));
        assert!(
            e.contains("key `site[0].bindings[0]`") && e.contains(want),
            "{b}: {e}"
        );
    }
    assert_eq!(
        parse_binding("http://*:80").unwrap().addr,
        "0.0.0.0:80".parse().unwrap()
    );
}

#[test]
fn configs_that_cannot_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("index.html");
    std::fs::write(&file, "x").unwrap();
    for (root, want) in [
        ("/nonexistent/espalier-www".to_string(), "cannot be used"),
        (file.display().to_string(), "is a file, not a directory"),
    ] {
        let e = error(&format!(
            "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\nroot = \"{root}\"\n[[site.app]]\npool = \"p\"\n"
        ));
        assert!(
            e.contains(":5: key `site[0].root`") && e.contains(want),
            "{e}"
        );
    }
    for (key, value) in [
        ("header_timeout", "0"),
        ("keepalive_timeout", "\"0s\""),
        ("body_timeout", "\"0ms\""),
    ] {
        let e = error(&format!(
            "[server.limits]\n{key} = {value}\n[[pool]]\nname = \"p\"\n{SITE}"
        ));
        assert!(
            e.contains(&format!("key `server.limits.{key}`: must be above 0")),
            "{e}"
        );
    }
    let e = error(&format!(
        "[server.limits]\nmax_headers = 300\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert!(
        e.contains("key `server.limits.max_headers`: 300 is more than the HTTP engine can hold; use at most 256"),
        "{e}"
    );
}

#[test]
fn several_errors_each_on_a_line() {
    let errs =
        parse("[[pool]]\nname = \"p\"\naffinity = \"x\"\nunit = \"y\"\n[[site]]\nbindings = []\n")
            .unwrap_err();
    assert_eq!(errs.0.len(), 4, "{errs}");
    assert_eq!(errs.to_string().lines().count(), 4);
}

#[test]
fn duplicate_pool_names_and_sites_over_pools() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"p\"\n{SITE}"
    ));
    assert!(
        e.contains("key `pool[1].name`: a pool named `p` is already defined"),
        "{e}"
    );
    // One site's apps may be spread over pools by path.
    let text = "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n[[site]]\nbindings = [\"http://127.0.0.1:80\"]\n[[site.app]]\npool = \"p\"\n[[site.app]]\npath = \"/api\"\npool = \"q\"\n";
    parse(text).unwrap();
}

/// Every example is a valid config — but for the programs its pools run being on this
/// machine's PATH: the unit tests run before the integration tests' setup installs gunicorn
/// and node (and those tests run the examples' apps for real).
#[test]
fn examples_all_validate() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            if let Err(e) = Config::load(&path, &fixture("dl980")) {
                let text = e.to_string();
                let other: Vec<&str> = (text.lines())
                    .filter(|l| !l.contains("is not an executable program on PATH"))
                    .collect();
                assert!(other.is_empty(), "{text}");
            }
            n += 1;
        }
    }
    assert!(
        n >= 3,
        "examples/ should hold the three case-study configurations"
    );
}
