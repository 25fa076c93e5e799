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

#[test]
fn app_keys_are_validated_and_a_bare_file_name_runs_apps_in_the_current_folder() {
    let text = format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\", \"-c\", \"exec true\"]\ntransport = \"activation\"\nenvironment = {{ A = \"1\" }}\n{SITE}"
    );
    let c = Config::parse(&text, Path::new("app.toml"), &fixture("dl980")).unwrap();
    let app = c.pools[0].app.as_ref().expect("an app pool");
    assert_eq!(app.directory, std::env::current_dir().unwrap());
    assert_eq!(app.transport, Transport::Activation);
    assert_eq!(app.environment, vec![("A".to_string(), "1".to_string())]);
    assert_eq!(c.sites[0].apps[0].handler, HandlerKind::Proxy);
    // The default transport is the proxy; its timeouts default to nginx's.
    let c = parse(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{SITE}"
    ))
    .unwrap();
    let app = c.pools[0].app.as_ref().unwrap();
    assert_eq!(app.transport, Transport::Proxy);
    assert_eq!(app.response_timeout, Duration::from_secs(60));
    for (extra, key, says) in [
        ("health = \"/h\"", "pool[0].health", "applies only to a pool that runs an application"),
        ("command = [\"sh\"]\ntransport = \"activation\"\nupstream = \"unix\"", "pool[0].upstream", "applies only to transport = \"proxy\""),
        ("command = [\"sh\"]\nhealth = \"healthz\"", "pool[0].health", "is not a URL path"),
        ("command = [\"sh\"]\ntransport = \"fastcgi\"\nhealth = \"/h\"\n[[site]]\nname = \"s\"\nroot = \"/\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n#", "pool[0].health", "answers FastCGI, not HTTP"),
        ("command = [\"sh\"]\ntransport = \"fastcgi\"", "site[0].app[0].pool", "found under the site's `root`"),
        ("command = [\"sh\"]\ndirectory = \"/no/such/dir\"", "pool[0].directory", "cannot be used"),
    ] {
        // An `extra` ending in `#` brings its own site and comments out the default one.
        let site = if extra.ends_with('#') { SITE.replace('\n', "\n#") } else { SITE.to_string() };
        let e = error(&format!("[[pool]]\nname = \"p\"\n{extra}\n{site}"));
        assert!(e.contains(&format!("key `{key}`")) && e.contains(says), "{extra}: {e}");
    }
    // An activated app takes every connection of its address: no path of its own, no handler.
    let e = error("[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npath = \"/api\"\npool = \"p\"\n");
    assert!(e.contains("cannot be given only `/api`"), "{e}");
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{}",
        SITE.replace("pool = \"p\"", "pool = \"p\"\nhandler = \"dynamic\"")
    ));
    assert!(e.contains("remove `handler`"), "{e}");
    // Files beside the app are fine (from the site's root, which this site lacks).
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\ncommand = [\"sh\"]\n{}",
        SITE.replace("pool = \"p\"", "pool = \"p\"\nhandler = \"static\"")
    ));
    assert!(
        e.contains("a static path beside an application serves files from the site's `root`"),
        "{e}"
    );
}

#[test]
fn pools_start_always_below_a_hundred_and_on_demand_from_a_hundred() {
    let pools = |n: usize, extra: &str| {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "[[pool]]\nname = \"p{i}\"\n{}",
                if i == 0 { extra } else { "" }
            ));
        }
        text.push_str(SITE.replace("pool = \"p\"", "pool = \"p0\"").as_str());
        parse(&text).unwrap()
    };
    let small = pools(99, "");
    assert!(small.pools.iter().all(|p| p.start == StartMode::Always));
    let big = pools(100, "start = \"always\"\n");
    assert_eq!(big.pools[0].start, StartMode::Always, "said so");
    assert!(big.pools[1..]
        .iter()
        .all(|p| p.start == StartMode::OnDemand));
    assert_eq!(big.pools[1].idle_timeout, Some(DEFAULT_IDLE_TIMEOUT));
    let never = parse(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_timeout = \"0\"\n{SITE}"
    ))
    .unwrap();
    assert_eq!(never.pools[0].idle_timeout, None);
}

#[test]
fn idle_timeout_on_a_pool_that_always_runs_is_refused() {
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nidle_timeout = \"5m\"\n{SITE}"
    ));
    assert!(
        e.contains("test.toml:3: key `pool[0].idle_timeout`")
            && e.contains("start = \"on-demand\""),
        "{e}"
    );
    let e = error(&format!("[[pool]]\nname = \"p\"\nstart = \"lazy\"\n{SITE}"));
    assert!(
        e.contains("pool[0].start") && e.contains("\"on-demand\""),
        "{e}"
    );
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nidle_action = \"suspend\"\n{SITE}"
    ));
    assert!(
        e.contains("test.toml:3: key `pool[0].idle_action`: applies to pools that start on demand"),
        "{e}"
    );
    let e = error(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_action = \"pause\"\n{SITE}"
    ));
    assert!(
        e.contains("`pause` is not one of \"stop\", \"suspend\""),
        "{e}"
    );
    let c = parse(&format!(
        "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\nidle_action = \"suspend\"\n{SITE}"
    ))
    .unwrap();
    assert_eq!(c.pools[0].idle_action, IdleAction::Suspend);
}

#[test]
fn an_activated_pools_address_is_its_own() {
    let two = |first: &str, second: &str| {
        format!("[[pool]]\nname = \"act\"\ncommand = [\"sh\"]\ntransport = \"activation\"\n[[pool]]\nname = \"web\"\n[[site]]\nname = \"a\"\nbindings = [\"{first}\"]\n[[site.app]]\npool = \"act\"\n[[site]]\nname = \"b\"\nbindings = [\"{second}\"]\n[[site.app]]\npool = \"web\"\n")
    };
    let e = error(&two(
        "http://127.0.0.1:8080:a.example",
        "http://0.0.0.0:8080:b.example",
    ));
    assert!(
        e.contains("site[1].bindings[0]")
            && e.contains(
                "shared by site `a` of pool `act` (transport = \"activation\") and site `b`"
            ),
        "{e}"
    );
    // Different ports, or different addresses of one port, do not meet.
    assert!(parse(&two(
        "http://127.0.0.1:8080:a.example",
        "http://127.0.0.1:8081:b.example"
    ))
    .is_ok());
    assert!(parse(&two(
        "http://127.0.0.1:8080:a.example",
        "http://127.0.0.2:8080:b.example"
    ))
    .is_ok());
}

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

/// The keys a raw table accepts, as serde lists them when one is unknown: the config's own
/// types say what the reference must hold.
fn accepted<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
    let e = toml::from_str::<T>("zz_no_such_key = 1")
        .unwrap_err()
        .to_string();
    let listed = e
        .split("expected one of")
        .nth(1)
        .unwrap_or_else(|| panic!("{e}"));
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// Every key the config accepts has a row in the reference (docs/reference.md) — the four
/// tables headed `| key | default | meaning`, in the file's order (the server, pools,
/// upstreams, sites and their paths) — and every
/// row there names a key it accepts: a key added, renamed or removed fails here until the
/// reference says so.
#[test]
fn the_reference_has_a_row_for_every_key_and_no_other() {
    use super::raw::*;
    let prefixed = |prefix: &str, keys: Vec<String>, tables: &[&str]| -> Vec<String> {
        keys.into_iter()
            .filter(|k| !tables.contains(&k.as_str()))
            .map(|k| format!("{prefix}{k}"))
            .collect::<Vec<_>>()
    };
    let mut wanted: Vec<Vec<String>> = vec![
        [
            prefixed("", accepted::<RawServer>(), &["limits", "acme", "tracing"]),
            prefixed("tracing.", accepted::<RawTracing>(), &[]),
            prefixed("limits.", accepted::<RawLimits>(), &[]),
            prefixed("acme.", accepted::<RawAcme>(), &["dns"]),
            prefixed("acme.dns.", accepted::<RawAcmeDns>(), &[]),
        ]
        .concat(),
        [
            prefixed(
                "",
                accepted::<RawPool>(),
                &["recycle", "rapid_fail", "isolation"],
            ),
            prefixed("recycle.", accepted::<RawRecycle>(), &[]),
            prefixed("isolation.", accepted::<RawIsolation>(), &[]),
            prefixed("rapid_fail.", accepted::<RawRapidFail>(), &[]),
        ]
        .concat(),
        [
            prefixed("", accepted::<RawUpstream>(), &["health", "passive", "tls"]),
            prefixed("health.", accepted::<RawHealthCheck>(), &[]),
            prefixed("passive.", accepted::<RawPassiveCheck>(), &[]),
            prefixed("tls.", accepted::<RawUpstreamTls>(), &[]),
        ]
        .concat(),
        [
            prefixed("site.", accepted::<RawSite>(), &["app"]),
            prefixed("app.", accepted::<RawApp>(), &[]),
        ]
        .concat(),
    ];
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md")).unwrap();
    // Each reference table's rows: the keys named in their first cell.
    let mut tables: Vec<Vec<String>> = Vec::new();
    let mut rows: Option<Vec<String>> = None;
    for line in readme.lines() {
        if line.starts_with("| key | default | meaning") {
            rows = Some(Vec::new());
        } else if let Some(r) = rows.as_mut() {
            if !line.starts_with('|') {
                tables.extend(rows.take());
            } else if !line.starts_with("|--") && !line.starts_with("| --") {
                let first = line.split('|').nth(1).unwrap_or_default();
                r.extend(first.split('`').skip(1).step_by(2).map(String::from));
            }
        }
    }
    tables.extend(rows);
    assert_eq!(
        tables.len(),
        4,
        "the reference's four tables, in the file's order (server, pool, upstream, site)"
    );
    for (table, wanted) in tables.iter_mut().zip(&mut wanted) {
        table.sort();
        wanted.sort();
        let missing: Vec<&String> = wanted.iter().filter(|k| !table.contains(k)).collect();
        let stale: Vec<&String> = table.iter().filter(|k| !wanted.contains(k)).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "docs/reference.md: keys with no row {missing:?}, rows of no key {stale:?}"
        );
    }
}
