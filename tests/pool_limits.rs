//! Tenants that cannot take the machine (#60, item 1): a pool's `memory_limit` and
//! `pids_limit` in its control group — an app allocating past the limit is killed by the
//! kernel's OOM killer alone, said and counted as such, and started again, while another
//! pool and the master go on; a fork past `pids_limit` fails in that pool only. A real Python
//! app (tests/apps/isolation_app.py) does the allocating and the forking. Every process a test
//! starts, the test stops.

use crate::common::*;
use espalier::server::status::Role;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Pool `name`'s app process id, when one runs.
fn app_pid(server: &Server, name: &str) -> Option<u32> {
    let status = server.status();
    let pool = status.pools.into_iter().find(|p| p.name == name)?;
    (pool.workers.iter())
        .find(|w| w.role == Role::App)
        .and_then(|w| w.pid)
}

#[test]
fn an_app_past_its_memory_limit_is_killed_alone_and_forks_stop_at_pids_limit() {
    if espalier::os::identity::effective_uid() != 0 {
        return skip("control groups need root");
    }
    let cgroups = espalier::os::cgroup::detect(Path::new("/sys/fs/cgroup"));
    let limited = match &cgroups {
        Some(espalier::os::cgroup::Hierarchy::V1 { memory, pids, .. }) => {
            memory.is_some() && pids.is_some()
        }
        Some(espalier::os::cgroup::Hierarchy::V2 { memory, pids, .. }) => *memory && *pids,
        None => false,
    };
    if !limited {
        return skip("this machine's cgroups have no memory or pids controller espalier may use");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/isolation_app.py");
    let port = free_port();
    let pool = |name: &str, limits: &str| {
        format!("[[pool]]\nname = \"{name}\"\ncommand = [\"python3\", \"{}\"]\nhealth = \"/healthz\"\n{limits}\n", app.display())
    };
    let site = |name: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.test\"]\n[[site.app]]\npool = \"{name}\"\n")
    };
    let config = format!(
        "{}{}{}{}",
        pool(
            "hog",
            "memory_limit = \"128MiB\"\nswap_limit = \"0MiB\"\npids_limit = 48"
        ),
        pool("calm", ""),
        site("hog"),
        site("calm")
    );
    let server = Server::with_config(d, &config);
    server.wait_for_log(
        "pool hog: memory at 128 MiB, swap at 0 MiB, 48 processes and threads over all its processes",
        Duration::from_secs(10),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let calm = app_pid(&server, "calm").expect("calm's app runs");
    // Past its limit: the kernel kills it (its request gets no answer, or a 502), the line
    // says so, and it is started again. A POST: a GET whose app died under it is sent once
    // more, to the app started again.
    let killed_past_its_limit = |said: &str| {
        let before = app_pid(&server, "hog").expect("hog's app runs");
        let mut c = Conn::open(addr);
        c.send(b"POST /alloc?400 HTTP/1.1\r\nHost: hog.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        let _ = c.read_response(false);
        server.wait_for_log(said, Duration::from_secs(30));
        server.wait_until("hog's app started again", Duration::from_secs(30), |s| {
            app_pid(s, "hog").is_some_and(|pid| pid != before)
        });
    };
    killed_past_its_limit("was killed by the kernel's OOM killer: pool hog reached its memory_limit of 128 MiB (1 such kill(s) so far); restarting it in 1s (not counted as a crash)");
    let status = server.status();
    let hog = status.pools.iter().find(|p| p.name == "hog").unwrap();
    assert_eq!(
        (hog.oom_kills, hog.memory_limit),
        (1, Some(128 << 20)),
        "{}",
        server.log_text()
    );
    // What the group uses now, against its limits, in /status and /metrics.
    assert!(
        hog.memory_bytes.is_some_and(|m| m > 0 && m <= 128 << 20),
        "{:?}",
        hog.memory_bytes
    );
    assert!(hog.pids.is_some_and(|n| n > 0 && n <= 48), "{:?}", hog.pids);
    // Its memory met the limit before the kill: cgroup v2 counts it (`max` events); v1's
    // count is not kept (its `memory.failcnt` stays 0 here past the kill).
    let v2 = Path::new(hog.cgroup.as_deref().unwrap())
        .join("memory.events")
        .exists();
    match v2 {
        true => assert!(hog.memory_max_events.is_some_and(|n| n > 0), "{hog:?}"),
        false => assert_eq!(hog.memory_max_events, None),
    }
    assert_eq!(hog.pids_limit, Some(48));
    // No swap beyond the memory: v2's memory.swap.max, v1's memory and swap together.
    let group = Path::new(hog.cgroup.as_deref().unwrap());
    let (file, want) = match group.join("memory.swap.max").exists() {
        true => ("memory.swap.max", 0),
        false => ("memory.memsw.limit_in_bytes", 128u64 << 20),
    };
    let set = std::fs::read_to_string(group.join(file)).unwrap_or_default();
    assert_eq!(set.trim(), want.to_string(), "{}", group.display());
    let (_, metrics) = espalier::server::admin::request(
        server.admin.as_deref().unwrap().parse().unwrap(),
        "GET",
        "/metrics",
    )
    .unwrap();
    let metrics = String::from_utf8_lossy(&metrics);
    for line in [
        "espalier_pool_oom_kills_total{pool=\"hog\"} 1",
        "espalier_pool_memory_limit_bytes{pool=\"hog\"} 134217728",
        "espalier_pool_pids_limit{pool=\"hog\"} 48",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    assert!(!metrics.contains("espalier_pool_memory_limit_bytes{pool=\"calm\"}"));
    // The other pool and the master went on, untouched.
    assert_eq!(app_pid(&server, "calm"), Some(calm));
    assert_eq!(get_host(addr, "calm.test", "/alloc?200").text(), "ok\n");
    // Forks stop at the pool's bound, and the other pool's do not.
    let hog_forks = get_host(addr, "hog.test", "/spawn?100").text();
    let spawned: u32 = (hog_forks
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok()))
    .unwrap_or_else(|| panic!("{hog_forks}"));
    assert!(spawned > 0 && spawned < 48, "{hog_forks}");
    assert_eq!(
        get_host(addr, "calm.test", "/spawn?100").text(),
        "ok spawned 100\n"
    );
    // Killed again soon after its start: the pause before the next start doubles.
    killed_past_its_limit(
        "(2 such kill(s) so far); restarting it in 2s (not counted as a crash; 2 kills in a row)",
    );
    drop(server);
}

#[test]
fn check_refuses_limits_a_pool_cannot_run_under() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let site = "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n";
    for (limit, said) in [
        (
            "memory_limit = \"8MiB\"",
            "key `pool[0].memory_limit`: is below 32 MiB",
        ),
        ("memory_limit = \"lots\"", "key `pool[0].memory_limit`"),
        ("pids_limit = 4", "key `pool[0].pids_limit`: is below 16"),
        (
            "swap_limit = \"1GiB\"",
            "key `pool[0].swap_limit`: bounds the swap beyond memory_limit",
        ),
        ("pids_limit = 0", "key `pool[0].pids_limit`"),
    ] {
        let err = check_refuses(d, &format!("[[pool]]\nname = \"p\"\n{limit}\n{site}"));
        assert!(err.contains(said), "{limit}: {err}");
    }
}

#[test]
fn check_refuses_a_limit_no_control_group_can_apply() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("espalier.toml");
    let site = "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n";
    std::fs::write(
        &file,
        format!("[[pool]]\nname = \"p\"\nmemory_limit = \"64MiB\"\nswap_limit = \"64MiB\"\npids_limit = 64\nio_weight = 200\n{site}"),
    )
    .unwrap();
    // A machine described by a fixture with no control groups at all.
    let sysfs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/laptop/sys");
    let out = espalier(&[
        "check",
        "-c",
        file.to_str().unwrap(),
        "--sysfs",
        sysfs.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    for key in ["memory_limit", "swap_limit", "pids_limit", "io_weight"] {
        assert!(
            err.contains(&format!(
                "pool `p`: key `{key}`: this machine's control groups"
            )),
            "{err}"
        );
    }
    assert!(err.contains("Delegate=yes"), "{err}");
}

/// On-demand pools — the hosting scale — get limits without asking (#60, item 4): a pool that
/// sets none takes its share of the machine (two pools: half its memory each) and the
/// server's `on_demand_pids_limit`, one that sets its own keeps it; and their groups are
/// made when each first starts, not for every sleeping pool at the server's start.
#[test]
fn on_demand_pools_get_default_limits_at_their_first_start() {
    if espalier::os::identity::effective_uid() != 0 {
        return skip("control groups need root");
    }
    let limited = match espalier::os::cgroup::detect(Path::new("/sys/fs/cgroup")) {
        Some(espalier::os::cgroup::Hierarchy::V1 { memory, pids, .. }) => {
            memory.is_some() && pids.is_some()
        }
        Some(espalier::os::cgroup::Hierarchy::V2 { memory, pids, .. }) => memory && pids,
        None => false,
    };
    if !limited {
        return skip("this machine's cgroups have no memory or pids controller espalier may use");
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pool = |name: &str, own: &str| {
        format!("[[pool]]\nname = \"{name}\"\nstart = \"on-demand\"\n{own}\n")
    };
    let server = Server::with_config(
        dir.path(),
        &format!(
            "[server]\non_demand_pids_limit = 300\n{}{}{}{}",
            pool("shared", ""),
            pool("own", "memory_limit = \"96MiB\""),
            dynamic_site(port, "shared", "shared"),
            dynamic_site(port, "own", "own"),
        ),
    );
    let limits = |name: &str| {
        let status = server.status();
        let p = status.pools.into_iter().find(|p| p.name == name).unwrap();
        (p.memory_limit, p.pids_limit, p.cgroup)
    };
    // Asleep: no group yet.
    assert_eq!(limits("shared"), (None, None, None));
    assert!(
        !server.log_text().contains("pool shared: memory at"),
        "{}",
        server.log_text()
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for name in ["shared", "own"] {
        let r = get_host(addr, &format!("{name}.example"), "/");
        assert_eq!(r.status, 200, "{}", server.log_text());
    }
    let machine = espalier::os::cgroup::memory_limit().unwrap();
    let share = (machine / 2).max(256 << 20);
    server.wait_for_log(
        &format!(
            "pool shared: memory at {} MiB, 300 processes and threads over all its processes",
            share >> 20
        ),
        Duration::from_secs(10),
    );
    let (memory, pids, group) = limits("shared");
    assert_eq!((memory, pids), (Some(share), Some(300)));
    // The kernel holds it: v2's memory.max, v1's memory.limit_in_bytes (rounded to pages).
    let group = Path::new(group.as_deref().unwrap()).to_path_buf();
    let file = ["memory.max", "memory.limit_in_bytes"]
        .into_iter()
        .map(|f| group.join(f))
        .find(|f| f.exists())
        .unwrap_or_else(|| panic!("no memory limit file in {}", group.display()));
    let set: u64 = std::fs::read_to_string(&file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(set, share / 4096 * 4096, "{}", file.display());
    assert_eq!(limits("own").0, Some(96 << 20));
    assert_eq!(limits("own").1, Some(300));
}

#[test]
fn check_refuses_on_demand_limits_that_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let site = "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n";
    let on_demand = "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\n";
    let always = "[[pool]]\nname = \"p\"\n";
    let own = "[[pool]]\nname = \"p\"\nstart = \"on-demand\"\npids_limit = 64\n";
    for (server, pool, said) in [
        (
            "on_demand_memory_limit = \"8MiB\"",
            on_demand,
            "key `server.on_demand_memory_limit`: is below 32 MiB",
        ),
        (
            "on_demand_memory_limit = \"plenty\"",
            on_demand,
            "key `server.on_demand_memory_limit`",
        ),
        (
            "on_demand_pids_limit = 4",
            on_demand,
            "key `server.on_demand_pids_limit`: is below 16",
        ),
        (
            "on_demand_pids_limit = \"many\"",
            on_demand,
            "write \"auto\" (the default), \"none\" or one like 512",
        ),
        (
            "on_demand_memory_limit = \"1GiB\"",
            always,
            "key `server.on_demand_memory_limit`: bounds the pools that start on demand",
        ),
        (
            "on_demand_pids_limit = 100",
            own,
            "key `server.on_demand_pids_limit`: is the pids_limit of the on-demand pools that set none, and every one sets its own",
        ),
    ] {
        let err = check_refuses(d, &format!("[server]\n{server}\n{pool}{site}"));
        assert!(err.contains(said), "{server}: {err}");
    }
}
