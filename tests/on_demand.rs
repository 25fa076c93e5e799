//! Pools on demand (IIS `startMode = OnDemand`, `idleTimeout`) on the real binary: a pool
//! has no process until its first connection, which is answered by the process it starts;
//! it sleeps again when idle and wakes again; on a shared port a host wakes its own pool
//! through the hand-off; from 100 pools on, pools start on demand unless they say so; and
//! warm-up requests (Application Initialization) reach a new app process first.

use crate::common;

use common::*;
use espalier::server::status::{PoolState, WorkerState};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

fn worker_of(r: &Response) -> String {
    r.header("x-espalier-worker").unwrap_or("-").to_string()
}

/// Whether `pool` sleeps with none of its processes left, draining ones included: a front
/// still draining takes what was queued for it, so only then does the next visitor wake it.
fn asleep_and_gone(server: &Server, pool: &str) -> bool {
    server.pool_gone(pool, PoolState::Idle)
}

fn state_of(server: &Server, pool: &str) -> (PoolState, Vec<(WorkerState, Option<u32>)>) {
    let p = pool_status(server, pool);
    (
        p.state,
        p.workers.iter().map(|w| (w.state, w.pid)).collect(),
    )
}

/// `pool`'s part of the server's status.
fn pool_status(server: &Server, pool: &str) -> espalier::server::status::PoolStatus {
    let status = server.status();
    status
        .pools
        .into_iter()
        .find(|p| p.name == pool)
        .expect("the pool")
}

#[test]
fn an_on_demand_pool_starts_on_its_first_connection_and_sleeps_again_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (lazy, awake) = (free_port(), free_port());
    let server = Server::with_config(
        dir.path(),
        &format!(
            r#"
[server]
worker_header = true
[[pool]]
name = "lazy"
start = "on-demand"
idle_timeout = "2s"
[[pool]]
name = "awake"
[[site]]
name = "lazy"
bindings = ["http://127.0.0.1:{lazy}"]
[[site.app]]
pool = "lazy"
handler = "dynamic"
[[site]]
name = "awake"
bindings = ["http://127.0.0.1:{awake}"]
[[site.app]]
pool = "awake"
handler = "dynamic"
"#
        ),
    );
    // Nobody visited it: no process.
    assert_eq!(
        state_of(&server, "lazy"),
        (PoolState::Idle, vec![(WorkerState::Idle, None)])
    );
    assert!(server.workers().iter().all(|w| !w.0.starts_with("lazy/")));
    // The first connection waits for the process it starts, and is answered by it.
    let addr = SocketAddr::from(([127, 0, 0, 1], lazy));
    let first = get(addr, "/", "");
    assert_eq!(first.status, 200, "{}", server.log_text());
    assert!(
        worker_of(&first).starts_with("lazy/0/"),
        "{}",
        worker_of(&first)
    );
    // Its "ready" may reach the master just after it answered.
    server.wait_until("the woken worker running", Duration::from_secs(30), |s| {
        state_of(s, "lazy").1[0].0 == WorkerState::Running
    });
    assert_eq!(state_of(&server, "lazy").0, PoolState::Running);
    let pid = state_of(&server, "lazy").1[0].1.expect("a pid");
    // Idle for its idle_timeout: stopped, its process gone.
    server.wait_until("the idle pool asleep again", Duration::from_secs(60), |s| {
        state_of(s, "lazy").0 == PoolState::Idle && !pid_alive(pid)
    });
    // Logged as it was put to sleep; the harness reads the log on a thread of its own.
    server.wait_for_log(
        "served nothing for 2s (idle_timeout)",
        Duration::from_secs(10),
    );
    // And woken again by the next connection, by a new process.
    let again = get(addr, "/", "");
    assert_eq!(again.status, 200);
    server.wait_until("woken again", Duration::from_secs(30), |s| {
        state_of(s, "lazy").1[0].1.is_some()
    });
    let new_pid = state_of(&server, "lazy").1[0].1.expect("a pid");
    assert_ne!(new_pid, pid);
    // The pool that always runs never slept.
    assert_eq!(state_of(&server, "awake").0, PoolState::Running);
}

/// Two on-demand pools share a port by host: a request for b's host is answered by b, even
/// when it reached a socket of a (a wakes, routes, hands it to b's socket, and that wakes b).
#[test]
fn on_a_shared_port_a_host_wakes_its_own_pool() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(
        dir.path(),
        &format!(
            "[server]\nworker_header = true\n[[pool]]\nname = \"a\"\nstart = \"on-demand\"\n[[pool]]\nname = \"b\"\nstart = \"on-demand\"\n{}{}",
            dynamic_site(port, "a", "a"),
            dynamic_site(port, "b", "b")
        ),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..3 {
        let r = get_host(addr, "b.example", "/");
        assert_eq!(r.status, 200, "{}", server.log_text());
        assert!(worker_of(&r).starts_with("b/"), "{}", worker_of(&r));
    }
    let r = get_host(addr, "a.example", "/");
    assert!(worker_of(&r).starts_with("a/"), "{}", worker_of(&r));
}

/// From 100 pools on, a pool starts on demand unless it says `start = "always"` (IIS 8.5
/// activates sites dynamically from 100 on): 120 sites start no process but the one that
/// asked to always run, and any of them answers on its first connection.
#[test]
fn from_a_hundred_pools_on_pools_start_on_demand_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = String::from("[server]\nworker_header = true\n");
    for i in 0..120 {
        let start = if i == 0 { "start = \"always\"\n" } else { "" };
        config.push_str(&format!("[[pool]]\nname = \"p{i}\"\n{start}"));
        config.push_str(&dynamic_site(port, &format!("s{i}"), &format!("p{i}")));
    }
    let server = Server::with_config(dir.path(), &config);
    let status = server.status();
    let running: Vec<&str> = status
        .pools
        .iter()
        .filter(|p| p.state == PoolState::Running)
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(running, vec!["p0"]);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for i in [0, 57, 119] {
        let r = get_host(addr, &format!("s{i}.example"), "/");
        assert_eq!(r.status, 200, "s{i}: {}", server.log_text());
        assert!(
            worker_of(&r).starts_with(&format!("p{i}/")),
            "{}",
            worker_of(&r)
        );
    }

    // The status stays usable: filtered by state and name, a page at a time, with counts.
    let admin = server.admin.clone().unwrap();
    let status = |args: &[&str]| {
        let mut all = vec!["status", "--admin", &admin];
        all.extend_from_slice(args);
        espalier_ok(&all)
    };
    let names_of = |json: &serde_json::Value| -> Vec<String> {
        json["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    let json: serde_json::Value =
        serde_json::from_str(&status(&["--json", "--state", "running"])).unwrap();
    let names = names_of(&json);
    assert_eq!(names, ["p0", "p57", "p119"]);
    assert_eq!(json["pools_total"], 120);
    assert_eq!(json["counts"]["running"], 3);
    assert_eq!(json["counts"]["idle"], 117);
    // Only the sites of the pools shown are listed with their addresses.
    assert_eq!(json["addresses"][0]["sites"].as_array().unwrap().len(), 3);
    let json: serde_json::Value = serde_json::from_str(&status(&[
        "--json",
        "--pool",
        "p1*",
        "--per-page",
        "10",
        "--page",
        "2",
    ]))
    .unwrap();
    let names = names_of(&json);
    // p1, p10..p19, p100..p119 in config order: the second ten.
    assert_eq!(
        names,
        ["p19", "p100", "p101", "p102", "p103", "p104", "p105", "p106", "p107", "p108"]
    );
    assert_eq!(json["pools_matched"], 31);
    // The table: 100 to a page by default, then where the rest is.
    let table = status(&[]);
    assert!(
        table.contains("showing 100 of 120 matched pools (120 in all: 3 running, 0 suspended, 117 idle, 0 stopped); page 1 of 2"),
        "{table}"
    );
    // A metrics scrape can ask for the running pools alone.
    let addr_admin: SocketAddr = admin.parse().unwrap();
    let (code, body) =
        espalier::server::admin::request(addr_admin, "GET", "/metrics?state=running").unwrap();
    assert_eq!(code, 200);
    let metrics = String::from_utf8_lossy(&body);
    let pools = metrics
        .lines()
        .filter(|l| l.starts_with("espalier_pool_running{"))
        .count();
    assert_eq!(pools, 3, "{metrics}");
    let bad = espalier(&["status", "--admin", &admin, "--state", "asleep"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("state=asleep: one of running, idle, suspended, stopped"));
}

/// IIS's Application Initialization: a new app process gets the pool's `warmup` paths, in
/// order, before it takes traffic — at start, and again for the process of an on-demand
/// pool woken by its first visitor, whose request comes after them.
#[test]
fn warm_up_requests_reach_a_new_app_process_before_its_first_client_request() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let app = test_app();
    let (always, lazy) = (free_port(), free_port());
    let pool = |name: &str, start: &str| {
        format!(
            "[[pool]]\nname = \"{name}\"\nstart = \"{start}\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ RECORD = \"{name}.log\" }}\nwarmup = [\"/warm-a\", \"/warm-b?x=1\"]\n",
            app.display()
        )
    };
    let site = |name: &str, port: u16| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"{name}\"\n")
    };
    let config = format!(
        "{}{}{}{}",
        pool("always", "always"),
        pool("lazy", "on-demand"),
        site("always", always),
        site("lazy", lazy)
    );
    let server = Server::with_config(dir.path(), &config);
    let record = |name: &str| {
        std::fs::read_to_string(dir.path().join(format!("{name}.log")))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    // Ready means warmed: both paths arrived before `serve` said it serves.
    assert_eq!(record("always"), ["/warm-a", "/warm-b?x=1"]);
    server.wait_for_log(
        "app always/0 warmed up: /warm-a 200",
        std::time::Duration::from_secs(10),
    );
    let r = get(SocketAddr::from(([127, 0, 0, 1], always)), "/first", "");
    assert_eq!(r.status, 200);
    assert_eq!(record("always"), ["/warm-a", "/warm-b?x=1", "/first"]);
    // The on-demand pool's process is warmed before its waking visitor is answered.
    assert!(record("lazy").is_empty());
    let r = get(SocketAddr::from(([127, 0, 0, 1], lazy)), "/first-visit", "");
    assert_eq!(r.status, 200, "{}", server.log_text());
    assert_eq!(record("lazy"), ["/warm-a", "/warm-b?x=1", "/first-visit"]);
}

/// A warm-up path the app answers without end is given up after the pool's
/// `response_timeout` (its answer read and dropped as it comes, never kept): the process is
/// never ready, and `serve` says so after `startup_time_limit` instead of hanging or growing.
#[test]
fn a_warm_up_answer_without_end_is_given_up_in_time() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("espalier.toml"),
        format!(
            "[server]\nadmin = \"127.0.0.1:{}\"\n[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"{}\"]\nwarmup = [\"/endless\"]\nresponse_timeout = \"1s\"\nstartup_time_limit = \"4s\"\n[[site]]\nname = \"app\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"app\"\n",
            free_port(),
            test_app().display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "-c", "espalier.toml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("did not report ready within 4s (startup_time_limit)"),
        "{err}"
    );
    assert!(
        err.contains("app app/0: warm-up request /endless gave up"),
        "{err}"
    );
}

/// Where `pid`'s freezer group says whether it is frozen: v2's `cgroup.events`, or v1's
/// `freezer.state`, from `/proc/PID/cgroup`.
fn frozen(pid: u32) -> Option<bool> {
    let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    for line in lines.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if !path.contains("espalier-suspend-") {
            continue;
        }
        return Some(if controllers == "freezer" {
            std::fs::read_to_string(format!("/sys/fs/cgroup/freezer{path}/freezer.state"))
                .ok()?
                .trim()
                == "FROZEN"
        } else {
            let root = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
                .into_iter()
                .find(|r| Path::new(&format!("{r}{path}/cgroup.events")).exists())?;
            std::fs::read_to_string(format!("{root}{path}/cgroup.events"))
                .ok()?
                .lines()
                .any(|l| l == "frozen 1")
        });
    }
    None
}

/// Writes `espalier.toml` in `dir`: an on-demand Python app pool `nap` suspended after
/// `idle_timeout`, on a port of its own — or, `shared`, by host (`nap.example`) on a port it
/// shares with another pool's site, behind the dispatcher; (that port, the admin address).
fn write_nap_config(dir: &Path, idle_timeout: &str, shared: bool) -> (u16, String) {
    need_tools("python3:python3", "python3");
    let port = free_port();
    let (host, other) = if shared {
        (
            ":nap.example",
            format!(
                "[[pool]]\nname = \"other\"\n{}",
                dynamic_site(port, "other", "other")
            ),
        )
    } else {
        ("", String::new())
    };
    let config = format!(
        "[server]\nworker_header = true\n[[pool]]\nname = \"nap\"\nstart = \"on-demand\"\nidle_timeout = \"{idle_timeout}\"\nidle_action = \"suspend\"\ncommand = [\"python3\", \"{}\"]\n[[site]]\nname = \"nap\"\nbindings = [\"http://127.0.0.1:{port}{host}\"]\n[[site.app]]\npool = \"nap\"\n{other}",
        test_app().display()
    );
    let (config, admin) = with_own_admin(&config);
    std::fs::write(dir.join("espalier.toml"), config).unwrap();
    (port, admin)
}

/// IIS 8.5's idle page-out: an idle on-demand pool's front worker and app process are frozen
/// in a cgroup with their memory reclaimed (state `suspended`), and the next connection
/// thaws the same processes, which answer it; stopping the server while they are frozen
/// stops them and removes the groups. Run with the freezer the machine prefers (v2 where
/// the unified hierarchy is mounted) and with v1's; and on a shared port, where a sleeping
/// pool has no socket and its first visitor reaches it through the dispatcher and the master.
fn suspend_and_thaw(freezer: &str, shared: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = write_nap_config(dir.path(), "2s", shared);
    let mut server = Server::start_env(
        &["-c", dir.path().join("espalier.toml").to_str().unwrap()],
        dir.path(),
        &[("ESPALIER_FREEZER", freezer)],
    );
    server.admin = Some(admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let get = |addr, path: &str, _| {
        if shared {
            get_host(addr, "nap.example", path)
        } else {
            get(addr, path, "")
        }
    };
    assert_eq!(get(addr, "/one", "").status, 200, "{}", server.log_text());
    server.wait_until("the pool suspended", Duration::from_secs(60), |s| {
        state_of(s, "nap").0 == PoolState::Suspended
    });
    let (_, procs) = state_of(&server, "nap");
    let pids: Vec<u32> = procs.iter().filter_map(|&(_, pid)| pid).collect();
    assert_eq!(pids.len(), 2, "front worker and app: {procs:?}");
    assert!(
        procs.iter().all(|&(s, _)| s == WorkerState::Suspended),
        "{procs:?}"
    );
    for &pid in &pids {
        assert_eq!(frozen(pid), Some(true), "pid {pid}\n{}", server.log_text());
    }
    // The line follows the state: it says the resident memory measured after the reclaim.
    server.wait_for_log(
        "nap/0 served nothing for 2s (idle_timeout): suspended, resident memory",
        Duration::from_secs(30),
    );

    // The next connection thaws the same processes, which answer it.
    let r = get(addr, "/two", "");
    assert_eq!(r.status, 200, "{}", server.log_text());
    server.wait_for_log("worker nap/0 thawed on demand", Duration::from_secs(10));
    let (state, procs) = state_of(&server, "nap");
    assert_eq!(state, PoolState::Running);
    assert_eq!(
        procs.iter().filter_map(|&(_, pid)| pid).collect::<Vec<_>>(),
        pids
    );
    for &pid in &pids {
        assert_eq!(frozen(pid), Some(false), "pid {pid}");
    }

    // Suspended again, then stopped: the frozen processes are thawed to stop, and go.
    server.wait_until("suspended again", Duration::from_secs(60), |s| {
        state_of(s, "nap").0 == PoolState::Suspended
    });
    server.signal(libc::SIGTERM);
    assert_eq!(
        server.wait_exit(Duration::from_secs(60)),
        Some(0),
        "{}",
        server.log_text()
    );
    for &pid in &pids {
        assert!(!pid_alive(pid), "pid {pid} outlived the server");
    }
}

#[test]
fn an_idle_pool_is_suspended_and_thawed_by_its_next_connection() {
    suspend_and_thaw("", false);
}

#[test]
fn an_idle_pool_on_a_shared_port_wakes_through_the_dispatcher_and_is_suspended_and_thawed() {
    suspend_and_thaw("", true);
}

#[test]
fn an_idle_pool_is_suspended_and_thawed_with_the_v1_freezer() {
    if !Path::new("/sys/fs/cgroup/freezer/tasks").exists() {
        // The v1 freezer is mounted on this project's machines; most hosts have v2 alone,
        // which the test above covers.
        skip("no v1 freezer mounted (the v2 test covers suspend here)");
        return;
    }
    suspend_and_thaw("v1", false);
}

/// IIS's `warmupPage`: while an on-demand pool starts, its clients get the page with 503 and
/// `Retry-After` from the master at once instead of waiting; once ready, the app answers;
/// the next wake's `Retry-After` is the last start's time, rounded up.
#[test]
fn a_warmup_page_is_answered_while_an_on_demand_pool_starts() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("starting.html"),
        "<p>Starting, one moment…</p>\n",
    )
    .unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"slow\"\nstart = \"on-demand\"\nidle_timeout = \"2s\"\nwarmup_page = \"starting.html\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ START_DELAY = \"3\" }}\n[[site]]\nname = \"slow\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"slow\"\n",
        test_app().display()
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let first = get(addr, "/", "");
    assert_eq!(first.status, 503, "{}", server.log_text());
    assert_eq!(first.header("retry-after"), Some("2"));
    assert_eq!(first.header("cache-control"), Some("no-store"));
    assert_eq!(first.text(), "<p>Starting, one moment…</p>\n");
    server.wait_until("the app answering", Duration::from_secs(60), |_| {
        get(addr, "/", "").status == 200
    });
    // Asleep again, then woken: the page says how long the last start took (over 3 s).
    server.wait_until(
        "the pool asleep, its processes gone",
        Duration::from_secs(60),
        |s| asleep_and_gone(s, "slow"),
    );
    let again = get(addr, "/", "");
    assert_eq!(again.status, 503);
    let retry: u64 = again.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 4, "Retry-After {retry}");
    server.wait_until("the app answering again", Duration::from_secs(60), |_| {
        get(addr, "/", "").status == 200
    });
}

/// The master (root) reads a pool's `warmup_page` as the pool's user, never through a
/// symlink, never a FIFO (issue #39, item 3). The page's folder is the pool user's to write,
/// as the README invites; that user swaps the page for a symlink to a root-only file, for a
/// root-only copy, then for a FIFO: no visitor ever gets the secret, the master never hangs,
/// and each refusal is logged; the client then waits for the app instead.
#[test]
fn a_warmup_page_is_read_as_the_pools_user_and_never_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    if espalier::os::identity::effective_uid() != 0 {
        skip("reading as another user needs root");
        return;
    }
    need_tools("python3:python3", "python3");
    let nobody = espalier::os::identity::lookup("nobody", None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pages = d.join("pages");
    std::fs::create_dir(&pages).unwrap();
    let page = pages.join("starting.html");
    std::fs::write(&page, "<p>Starting…</p>\n").unwrap();
    for p in [&pages, &page] {
        std::os::unix::fs::chown(p, Some(nobody.uid), Some(nobody.gid)).unwrap();
    }
    let secret = d.join("secret.txt");
    std::fs::write(&secret, "root's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"slow\"\nuser = \"nobody\"\nstart = \"on-demand\"\nidle_timeout = \"1s\"\nwarmup_page = \"pages/starting.html\"\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ START_DELAY = \"2\" }}\n[[site]]\nname = \"slow\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"slow\"\n",
        test_app().display()
    );
    let server = Server::with_config(d, &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // A page the pool's user may read is answered.
    let first = get(addr, "/", "");
    assert_eq!(
        (first.status, first.text().as_str()),
        (503, "<p>Starting…</p>\n"),
        "{}",
        server.log_text()
    );
    let swaps: [(&str, &dyn Fn()); 3] = [
        ("symlink", &|| {
            std::fs::remove_file(&page).unwrap();
            std::os::unix::fs::symlink(&secret, &page).unwrap();
        }),
        ("root-only copy", &|| {
            std::fs::remove_file(&page).unwrap();
            std::fs::copy(&secret, &page).unwrap();
            std::fs::set_permissions(&page, std::fs::Permissions::from_mode(0o600)).unwrap();
        }),
        ("FIFO", &|| {
            std::fs::remove_file(&page).unwrap();
            let c = std::ffi::CString::new(page.to_str().unwrap()).unwrap();
            // SAFETY: a valid C string.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
        }),
    ];
    for (n, (what, swap)) in swaps.iter().enumerate() {
        server.wait_until("the app answering", Duration::from_secs(60), |_| {
            get(addr, "/", "").status == 200
        });
        // Asleep, and its old processes gone: a draining front still takes what was queued
        // for it, and the next visitor must be the one that wakes the pool.
        server.wait_until(
            "the pool asleep, its processes gone",
            Duration::from_secs(60),
            |s| asleep_and_gone(s, "slow"),
        );
        swap();
        // The visitor waits for the app: an answer from it, never the file behind the page.
        let woken = get(addr, "/", "");
        assert_eq!(woken.status, 200, "{what}: {}", server.log_text());
        assert!(!woken.text().contains("root's secret"), "{what}");
        let refusals = server.log_text().matches("cannot read warmup_page").count();
        assert_eq!(refusals, n + 1, "{what}: {}", server.log_text());
        // The master still answers (a FIFO would have hung it).
        assert_eq!(state_of(&server, "slow").0, PoolState::Running, "{what}");
    }
    server.wait_for_log("as user nobody", std::time::Duration::from_secs(10));
}

/// A client that asks for every cold host name cannot wake every pool (issue #39, item 2):
/// with `on_demand_running = 4` and `on_demand_starting = 2`, ten pools asked in turn never
/// have more than four workers running — the least recently busy idle one is stopped to make
/// room — and asked all at once, each visitor is served or told 503 with `Retry-After`. The
/// master is the OOM killer's last choice, its workers its first.
#[test]
fn waking_every_pool_is_bounded_and_the_least_recently_busy_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = String::from(
        "[server]\nworker_header = true\non_demand_running = 4\non_demand_starting = 2\n",
    );
    for i in 0..10 {
        config.push_str(&format!(
            "[[pool]]\nname = \"p{i}\"\nstart = \"on-demand\"\nprocesses = 1\n"
        ));
        config.push_str(&dynamic_site(port, &format!("s{i}"), &format!("p{i}")));
    }
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let running = |s: &Server| {
        s.status()
            .pools
            .iter()
            .flat_map(|p| &p.workers)
            .filter(|w| w.state == WorkerState::Running && w.pid.is_some())
            .count()
    };
    // Asked until served: a 503 says when to come back (bounded: a minute in all). Each
    // host by a client of its own: one client may wake only 8 pools a minute.
    let served = |host: &str, from: &str| {
        for _ in 0..300 {
            let r = get_host_from(from, addr, host, "/").expect("an answer");
            match r.status {
                200 => return r,
                503 => {
                    assert!(
                        r.header("retry-after").is_some(),
                        "{host}: 503 without Retry-After"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => panic!("{host}: {other}"),
            }
        }
        panic!("{host} never served: {}", server.log_text());
    };
    for i in 0..10 {
        let r = served(&format!("s{i}.example"), &format!("127.0.0.{}", 20 + i));
        assert!(
            worker_of(&r).starts_with(&format!("p{i}/")),
            "{}",
            worker_of(&r)
        );
        let n = running(&server);
        assert!(
            n <= 4,
            "{n} workers running after s{i}: {}",
            server.log_text()
        );
    }
    server.wait_for_log("stopped to make room for", Duration::from_secs(10));
    // All at once: each is served or turned away with Retry-After, never more than four run.
    let asked: Vec<_> = (0..10)
        .map(|i| {
            std::thread::spawn(move || {
                let from = format!("127.0.0.{}", 40 + i);
                get_host_from(&from, addr, &format!("s{i}.example"), "/").expect("an answer")
            })
        })
        .collect();
    for a in asked {
        let r = a.join().unwrap();
        assert!(
            r.status == 200 || (r.status == 503 && r.header("retry-after").is_some()),
            "{} {:?}",
            r.status,
            r.header("retry-after")
        );
    }
    server.wait_until("at most four running", Duration::from_secs(20), |s| {
        running(s) <= 4
    });
    if espalier::os::identity::effective_uid() == 0 {
        let adj = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap();
        // A container without CAP_SYS_RESOURCE (this one) refuses the lowering: said in the log.
        if server
            .log_text()
            .contains("cannot lower the master's oom_score_adj")
        {
            skip("the check of the master's oom_score_adj -900 (no CAP_SYS_RESOURCE here)");
        } else {
            assert_eq!(adj(server.pid()).trim(), "-900");
        }
        let worker = server.workers()[0].1;
        assert_eq!(adj(worker).trim(), "300");
    }
}

/// One client address wakes at most 8 sleeping pools a minute on a shared address: its
/// connection for a ninth is closed (one client's ClientHellos for 1,000 cold names once
/// started 756 pools' apps); another client wakes that pool.
#[test]
fn one_client_wakes_at_most_eight_pools_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = String::from("[server]\nworker_header = true\non_demand_starting = 16\n");
    for i in 0..9 {
        config.push_str(&format!(
            "[[pool]]\nname = \"p{i}\"\nstart = \"on-demand\"\nprocesses = 1\n"
        ));
        config.push_str(&dynamic_site(port, &format!("s{i}"), &format!("p{i}")));
    }
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for i in 0..8 {
        let r = get_host_from("127.0.0.9", addr, &format!("s{i}.example"), "/");
        assert_eq!(
            r.map(|r| r.status),
            Some(200),
            "s{i}: {}",
            server.log_text()
        );
    }
    let ninth = get_host_from("127.0.0.9", addr, "s8.example", "/");
    assert!(ninth.is_none(), "{:?}", ninth.map(|r| r.status));
    server.wait_for_log(
        "client 127.0.0.9 has woken 8 sleeping pools this minute: its connection for another is closed",
        Duration::from_secs(10),
    );
    // Pools awake take it as before; another client wakes the ninth.
    let r = get_host_from("127.0.0.9", addr, "s0.example", "/");
    assert_eq!(r.map(|r| r.status), Some(200));
    let r = get_host_from("127.0.0.10", addr, "s8.example", "/");
    assert_eq!(r.map(|r| r.status), Some(200));
}

/// Past `on_demand_starting`, a wake is turned away: while one slow app starts, a visitor of
/// another cold pool gets 503 with `Retry-After` at once (not a held connection), and once
/// the first is up, its retry wakes its own pool.
#[test]
fn a_wake_past_the_starting_bound_is_answered_503_and_its_retry_wakes_it() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    // A port each: on a shared port, whichever pool's socket takes the first connection
    // wakes (and hands it on).
    let ports = [("slow", free_port()), ("next", free_port())];
    let mut config = String::from("[server]\non_demand_starting = 1\n");
    for (name, port) in ports {
        config.push_str(&format!(
            "[[pool]]\nname = \"{name}\"\nstart = \"on-demand\"\nprocesses = 1\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ START_DELAY = \"2\" }}\n[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.example\"]\n[[site.app]]\npool = \"{name}\"\n",
            test_app().display()
        ));
    }
    let server = Server::with_config(dir.path(), &config);
    let at = |k: usize| SocketAddr::from(([127, 0, 0, 1], ports[k].1));
    let (slow_addr, addr) = (at(0), at(1));
    let slow = std::thread::spawn(move || get_host(slow_addr, "slow.example", "/"));
    // Its front wakes first; its app (the slow start) at the front's first request.
    server.wait_for_log(
        "app slow/0 starting on demand (its front worker has a request",
        Duration::from_secs(20),
    );
    let turned = get_host(addr, "next.example", "/");
    assert_eq!(turned.status, 503, "{}", server.log_text());
    assert_eq!(turned.header("retry-after"), Some("2"));
    server.wait_for_log(
        "worker next/0 not woken: 1 on-demand workers are starting",
        Duration::from_secs(5),
    );
    assert_eq!(slow.join().unwrap().status, 200);
    server.wait_until("next served on a retry", Duration::from_secs(60), |_| {
        get_host(addr, "next.example", "/").status == 200
    });
}

/// A server killed while a pool is suspended left its workers frozen, holding the port and
/// its queue (issue #39, item 9). v1's freezer holds them for good (a frozen task cannot even
/// die): the next `serve` of the same file ends them before it opens its own listeners, says
/// so, and serves. Under v2 a fatal signal still kills a frozen task, so the master's death
/// (their parent-death SIGTERM) ends them by itself; the next server serves either way.
fn a_new_server_after_a_killed_one(freezer: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = write_nap_config(dir.path(), "1s", false);
    let env = [("ESPALIER_FREEZER", freezer)];
    let mut first = Server::start_env(&["-c", "espalier.toml"], dir.path(), &env);
    first.admin = Some(admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(addr, "/", "").status, 200, "{}", first.log_text());
    first.wait_until("the pool suspended", Duration::from_secs(60), |s| {
        state_of(s, "nap").0 == PoolState::Suspended
    });
    let pids: Vec<u32> = state_of(&first, "nap")
        .1
        .iter()
        .filter_map(|&(_, p)| p)
        .collect();
    assert!(pids.iter().all(|&p| frozen(p) == Some(true)), "{pids:?}");
    first.signal(libc::SIGKILL);
    let _ = first.wait_exit(Duration::from_secs(10));
    assert!(!pid_alive(first.pid()), "the master still runs");
    let left = pids.iter().any(|&p| pid_alive(p));
    if freezer == "v1" && !left {
        // v1's frozen tasks outlive their master, until a server starts: another test's
        // (the suite runs side by side, and every server ends what a killed master left)
        // may have started since the kill. Then what this test is for did not happen here.
        skip("another test's server ended the killed master's frozen tasks before this one could");
        return;
    }
    let second = Server::start_env(&["-c", "espalier.toml"], dir.path(), &env);
    // Ended by the new server at its start — or by another test's server starting
    // meanwhile (the suite runs tests side by side, and every server ends what a killed
    // master left): either way by a server's start, as nothing else ends them.
    second.wait_until(
        "the frozen leftovers ended",
        Duration::from_secs(10),
        |_| pids.iter().all(|&p| !pid_alive(p)),
    );
    assert_eq!(get(addr, "/", "").status, 200, "{}", second.log_text());
}

#[test]
fn a_new_server_ends_what_a_killed_one_left_frozen_v1() {
    a_new_server_after_a_killed_one("v1");
}

#[test]
fn a_new_server_after_a_killed_one_serves_v2() {
    a_new_server_after_a_killed_one("v2");
}

/// A connection accepted just before the worker is frozen (issue #39, item 8) is not frozen
/// with it: once frozen, the worker's descriptors are looked at, and a client's connection
/// there thaws it at once. A client comes back at every phase of the idle cycle — paced
/// around `idle_timeout` — and every request is answered in time (before, 11 of 60 hung).
#[test]
fn a_connection_accepted_as_the_worker_is_frozen_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"nap\"\nprocesses = 1\nstart = \"on-demand\"\nidle_timeout = \"1s\"\nidle_action = \"suspend\"\n{}",
        dynamic_site(port, "nap", "nap")
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut hung = Vec::new();
    let worker_pids = |s: &Server| -> Vec<u32> {
        state_of(s, "nap")
            .1
            .iter()
            .filter_map(|&(_, pid)| pid)
            .collect()
    };
    // Twelve cycles: without the check, about a third of them hung (8 of 24 here).
    for k in 0..12u64 {
        // Each cycle from a sleeping worker (never started, then frozen): the connection
        // wakes it.
        server.wait_until("the pool asleep", Duration::from_secs(30), |s| {
            matches!(state_of(s, "nap").0, PoolState::Idle | PoolState::Suspended)
        });
        // A browser's preconnect: the connection, accepted by the worker (seen in its
        // descriptors), then the request after the client's own pause of 0.2 to 1.4 s —
        // across the idle cycle, so that some pauses span the master's next freeze.
        let mut c = Conn::open(addr);
        c.stream
            .set_read_timeout(Some(Duration::from_secs(8)))
            .unwrap();
        server.wait_until(
            "the worker holding the connection",
            Duration::from_secs(10),
            |s| {
                worker_pids(s)
                    .iter()
                    .any(|&pid| espalier::os::sockets_of::client_connections(pid, &[port]) > 0)
            },
        );
        std::thread::sleep(Duration::from_millis(200 + (k * 397) % 1200));
        c.send(b"GET / HTTP/1.1\r\nHost: nap.example\r\nConnection: close\r\n\r\n");
        if c.read_response(false).map(|r| r.status) != Some(200) {
            hung.push(k);
        }
    }
    let caught = server
        .log_text()
        .matches("arrived as it was frozen")
        .count();
    eprintln!("{caught} of 12 connections were caught by a freeze and thawed at once");
    assert!(
        hung.is_empty(),
        "requests {hung:?} hung: {}",
        server.log_text()
    );
    server.wait_for_log("suspended", std::time::Duration::from_secs(10));
}

/// The processes of `pool` with their role: (front running, app pid).
fn front_and_app(server: &Server, pool: &str) -> (bool, Option<u32>) {
    use espalier::server::status::Role;
    let p = pool_status(server, pool);
    let front = p
        .workers
        .iter()
        .any(|w| w.role == Role::Front && w.state == WorkerState::Running);
    let app = p
        .workers
        .iter()
        .find(|w| w.role == Role::App)
        .and_then(|w| w.pid);
    (front, app)
}

/// A wake proves no visitor — a bare connection on an address the pool has alone, or a
/// ClientHello the dispatcher read (it holds no tenant's key, so it cannot finish the
/// handshake) — so it starts the pool's espalier worker alone, and the app starts at that
/// worker's first request for it (issue #55: 1,000 unfinished ClientHellos for cold names
/// once started 756 pools' apps). The request waits for the app it started, and is answered.
#[test]
fn a_connection_without_a_request_wakes_the_front_alone_and_a_request_its_app() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = write_nap_config(dir.path(), "60s", false);
    let mut server = Server::start(&["-c", "espalier.toml"], dir.path());
    server.admin = Some(admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut idle = Conn::open(addr);
    server.wait_until("the front woken", Duration::from_secs(30), |s| {
        front_and_app(s, "nap").0
    });
    // Both would have been started at once by the wake: the app is not.
    assert_eq!(
        front_and_app(&server, "nap"),
        (true, None),
        "{}",
        server.log_text()
    );
    idle.send(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = idle.read_response(false).expect("an answer");
    assert_eq!(r.status, 200, "{}", server.log_text());
    assert!(front_and_app(&server, "nap").1.is_some());
    server.wait_for_log(
        "starting on demand (its front worker has a request",
        Duration::from_secs(10),
    );
}

/// An app started at its front's request counts under `on_demand_starting` as a wake does:
/// while another app starts, it waits for room — its request held, not refused — and starts
/// once the other is up.
#[test]
fn an_app_asked_for_past_the_starting_bound_starts_when_another_is_up() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let ports = [("slow", free_port(), "2"), ("next", free_port(), "0")];
    let mut config = String::from("[server]\non_demand_starting = 1\n");
    for (name, port, delay) in ports {
        config.push_str(&format!(
            "[[pool]]\nname = \"{name}\"\nstart = \"on-demand\"\nprocesses = 1\ncommand = [\"python3\", \"{}\"]\nenvironment = {{ START_DELAY = \"{delay}\" }}\n[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"{name}\"\n",
            test_app().display()
        ));
    }
    let server = Server::with_config(dir.path(), &config);
    let at = |k: usize| SocketAddr::from(([127, 0, 0, 1], ports[k].1));
    // next's front woken by a connection that has not asked yet.
    let mut next = Conn::open(at(1));
    server.wait_until("next's front running", Duration::from_secs(30), |s| {
        front_and_app(s, "next").0
    });
    let slow_addr = at(0);
    let slow = std::thread::spawn(move || get(slow_addr, "/", ""));
    server.wait_for_log(
        "app slow/0 starting on demand (its front worker has a request",
        Duration::from_secs(20),
    );
    next.send(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    server.wait_for_log("app of pool next waits to start", Duration::from_secs(20));
    assert_eq!(slow.join().unwrap().status, 200);
    let r = next.read_response(false).expect("next's answer");
    assert_eq!(r.status, 200, "{}", server.log_text());
}
