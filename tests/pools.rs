//! Pools that run themselves, on loopback with the real binary: crash restarts under load,
//! rapid-fail protection with its 503 and TCP answers, overlapped recycles losing no request,
//! recycling by requests and by uptime, missed pings, and the admin endpoint with its CLI.

use crate::common;

use common::*;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Setup {
    dir: tempfile::TempDir,
    port: u16,
    admin: String,
}

fn setup(pool_extra: &str, server_extra: &str) -> Setup {
    setup_of(2, pool_extra, server_extra)
}

/// As [`setup`], with `processes` workers.
fn setup_of(processes: u32, pool_extra: &str, server_extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:{admin_port}\"\n{server_extra}\n\
         [[pool]]\nname = \"web\"\nprocesses = {processes}\n{pool_extra}\n\
         [[site]]\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"web\"\n"
    );
    std::fs::write(dir.path().join("espalier.toml"), config).unwrap();
    Setup {
        dir,
        port,
        admin: format!("127.0.0.1:{admin_port}"),
    }
}

impl Setup {
    fn start(&self) -> Server {
        Server::start(&["-c", "espalier.toml"], self.dir.path())
    }

    fn start_with_env(&self, key: &str, value: &str) -> Server {
        Server::start_env(&["-c", "espalier.toml"], self.dir.path(), &[(key, value)])
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn status(&self) -> serde_json::Value {
        status_json(&self.admin)
    }

    fn workers(&self) -> Vec<serde_json::Value> {
        self.status()["pools"][0]["workers"]
            .as_array()
            .unwrap()
            .clone()
    }

    fn running(&self) -> usize {
        self.workers()
            .iter()
            .filter(|w| w["state"] == "running")
            .count()
    }

    fn wait_until(&self, what: &str, within: Duration, ok: impl Fn(&Setup) -> bool) {
        let deadline = Instant::now() + within;
        while !ok(self) {
            assert!(
                Instant::now() < deadline,
                "{what} not within {within:?}; status: {}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// `espalier bench` against the site in the background; returns its JSON when it ends.
    /// Waits until the load has reached the workers (their request counts move).
    fn wait_for_load(&self) {
        self.wait_until("load reaching the workers", Duration::from_secs(10), |s| {
            s.workers()
                .iter()
                .map(|w| w["requests"].as_u64().unwrap_or(0))
                .sum::<u64>()
                > 0
        });
    }

    fn load(&self, secs: &str) -> std::process::Child {
        self.load_with(secs, &[])
    }

    /// As [`Setup::load`], with more of `espalier bench`'s options.
    fn load_with(&self, secs: &str, options: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_espalier"))
            .args(["bench", "-d", secs, "-c", "16", "--json"])
            .args(options)
            .arg(format!("http://127.0.0.1:{}/", self.port))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
}

/// Whether no control group of the master `pid` is left, in whichever hierarchy the host has
/// (v1 controllers, or the unified v2 tree).
fn no_groups_left(pid: u32) -> bool {
    ["", "cpuset/", "cpu/", "cpu,cpuacct/", "unified/"]
        .iter()
        .all(|h| !std::path::Path::new(&format!("/sys/fs/cgroup/{h}espalier-{pid}")).exists())
}

fn load_result(child: std::process::Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    let mut r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Kept out of failure messages: a long base64 string no reader needs there.
    r.as_object_mut().unwrap().remove("histogram");
    r
}

#[test]
fn killed_workers_are_replaced_under_load() {
    let s = setup("[pool.rapid_fail]\nmax_crashes = 100\n", "");
    let server = s.start();
    let load = s.load("11s");
    s.wait_for_load();
    // A worker SIGKILLed once a second for ten seconds.
    for _ in 0..10 {
        let victim = s.workers()[0]["pid"].as_u64().unwrap() as i32;
        let killed = Instant::now();
        unsafe { libc::kill(victim, libc::SIGKILL) };
        // The event, bounded generously (speed is bench/'s to measure, not a test's).
        s.wait_until(
            "the pool back at full strength",
            Duration::from_secs(30),
            |s| {
                let w = s.workers();
                w[0]["pid"].as_u64() != Some(victim as u64) && s.running() == 2
            },
        );
        std::thread::sleep(Duration::from_secs(1).saturating_sub(killed.elapsed()));
    }
    let r = load_result(load);
    assert!(r["requests"].as_u64().unwrap() > 1000, "{r}");
    // Only requests in flight on a killed worker may fail: at most its connections, each time.
    assert!(r["errors"].as_u64().unwrap() <= 10 * 16, "{r}");
    assert_eq!(s.workers()[0]["restarts"], 10);
    server.wait_for_log(
        "exited: signal 9 (SIGKILL); restarting it in",
        std::time::Duration::from_secs(10),
    );
}

#[test]
fn rapid_fail_stops_the_pool_which_answers_503_until_started() {
    let s = setup(
        "[pool.rapid_fail]\nmax_crashes = 3\ninterval = \"1m\"\n",
        "",
    );
    // The pool's next three restarts fail (fault injection; first starts never do).
    let server = s.start_with_env("ESPALIER_FAIL_AT_START", "web:3");
    let victim = s.workers()[0]["pid"].as_u64().unwrap() as i32;
    unsafe { libc::kill(victim, libc::SIGKILL) };
    s.wait_until("the pool stopped", Duration::from_secs(5), |s| {
        s.status()["pools"][0]["state"] == "stopped"
    });
    server.wait_for_log(
        "POOL web STOPPED by rapid-fail protection: 3 crashes within 1m",
        Duration::from_secs(2),
    );
    server.wait_for_log(
        "failing at start on purpose",
        std::time::Duration::from_secs(10),
    );
    let r = get(s.addr(), "/", "");
    assert_eq!((r.status, r.header("retry-after")), (503, Some("5")));
    // `espalier pool start` brings it back (after the one injected failure left).
    let out = espalier(&["pool", "start", "web", "--admin", &s.admin]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.wait_until("the pool serving again", Duration::from_secs(5), |s| {
        s.running() == 2
    });
    assert_eq!(get(s.addr(), "/", "").status, 200);
}

/// A pool started again keeps its sockets answered by the master (503) until its worker is
/// ready: a connection that comes while it starts is answered, not left in the queue for as
/// long as the start takes (seconds on a loaded machine; here, while its restarts fail on
/// purpose).
#[test]
fn a_started_pools_sockets_are_answered_until_its_workers_are_ready() {
    let s = setup_of(1, "[pool.rapid_fail]\nenabled = false\n", "");
    // The pool's next nine restarts fail (fault injection). A first start never does, nor
    // the start after a stop of a worker that never died: so the worker is killed first,
    // and the pool stopped while its restarts fail; the start after the stop is then a
    // restart that fails the rest — seconds of backoff in which no worker of it is ready.
    let server = s.start_with_env("ESPALIER_FAIL_AT_START", "web:9");
    let failures = |server: &Server| {
        server
            .log_text()
            .matches("failing at start on purpose")
            .count()
    };
    unsafe {
        libc::kill(
            s.workers()[0]["pid"].as_u64().unwrap() as i32,
            libc::SIGKILL,
        )
    };
    server.wait_until("a restart failing", Duration::from_secs(10), |sv| {
        failures(sv) > 0
    });
    assert!(espalier(&["pool", "stop", "web", "--admin", &s.admin])
        .status
        .success());
    s.wait_until("the workers gone", Duration::from_secs(30), |s| {
        s.workers().iter().all(|w| w["pid"].is_null())
    });
    let before = failures(&server);
    assert!(espalier(&["pool", "start", "web", "--admin", &s.admin])
        .status
        .success());
    server.wait_until("the start failing", Duration::from_secs(10), |sv| {
        failures(sv) > before
    });
    let r = get(s.addr(), "/", "");
    assert_eq!(r.status, 503, "{}", server.log_tail(30));
    s.wait_until("the pool serving again", Duration::from_secs(60), |s| {
        s.running() == 1
    });
    assert_eq!(
        get(s.addr(), "/", "").status,
        200,
        "{}",
        server.log_tail(30)
    );
}

#[test]
fn a_stopped_tcp_level_pool_resets_connections() {
    let s = setup("load_balancer = \"tcp\"\n", "");
    let _server = s.start();
    let out = espalier(&["pool", "stop", "web", "--admin", &s.admin]);
    assert!(out.status.success());
    s.wait_until("workers gone", Duration::from_secs(5), |s| {
        s.workers()
            .iter()
            .all(|w| w["pid"].is_null() && w["draining"].as_array().unwrap().is_empty())
    });
    // The reset may come before the request is written or after: either way, no answer.
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 64];
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => panic!(
            "a TCP-level stopped pool answered: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
    }
    let bad = espalier(&["pool", "stop", "nope", "--admin", &s.admin]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no pool is named `nope` (pools: web)"));
}

#[test]
fn twenty_overlapped_recycles_under_keep_alive_load_lose_no_request() {
    let s = setup("", "");
    let server = s.start();
    let load = s.load("8s");
    s.wait_for_load();
    for k in 1..=20u64 {
        let out = espalier(&["recycle", "web", "--admin", &s.admin]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        s.wait_until("the recycle done", Duration::from_secs(5), |s| {
            s.workers()
                .iter()
                .all(|w| w["recycles"].as_u64() == Some(k) && w["state"] == "running")
        });
    }
    let r = load_result(load);
    assert!(r["requests"].as_u64().unwrap() > 1000, "{r}");
    assert_eq!(r["errors"], 0, "no failed request across 20 recycles: {r}");
    server.wait_for_log("(recycled)", std::time::Duration::from_secs(10));
}

/// A new connection per request while the pool is stopped, started and recycled: every
/// connection is answered — by a worker, or while the pool is stopped by the master's 503 —
/// and none is taken by a stopping worker and left behind (a ring's multishot accept takes
/// connections until its cancel completes: a worker's exit waits for that).
#[test]
fn a_stop_and_recycles_under_a_new_connection_per_request_leave_none_unanswered() {
    let s = setup("", "");
    let server = s.start();
    let mut load = s.load_with("12s", &["--no-keepalive", "--no-retry"]);
    s.wait_for_load();
    // The stop first, early in the load, so that the load outlasts it on a slow machine too.
    assert!(espalier(&["pool", "stop", "web", "--admin", &s.admin])
        .status
        .success());
    s.wait_until("the workers gone", Duration::from_secs(30), |s| {
        s.workers().iter().all(|w| w["pid"].is_null())
    });
    assert!(espalier(&["pool", "start", "web", "--admin", &s.admin])
        .status
        .success());
    s.wait_until("the pool running", Duration::from_secs(30), |s| {
        s.running() == 2
    });
    // Then recycles for as long as the load runs (up to five).
    let mut recycled = 0;
    while recycled < 5 && load.try_wait().unwrap().is_none() {
        let before: Vec<u64> = s
            .workers()
            .iter()
            .map(|w| w["recycles"].as_u64().unwrap())
            .collect();
        assert!(espalier(&["recycle", "web", "--admin", &s.admin])
            .status
            .success());
        s.wait_until("the recycle done", Duration::from_secs(30), |s| {
            s.workers()
                .iter()
                .zip(&before)
                .all(|(w, b)| w["recycles"].as_u64() == Some(b + 1) && w["state"] == "running")
        });
        recycled += 1;
    }
    let r = load_result(load);
    let errors = &r["errors_by_kind"];
    assert!(recycled > 0, "no recycle began within the load: {r}");
    assert!(r["requests"].as_u64().unwrap() > 100, "{r}");
    for kind in ["connect", "read", "timeout", "4xx"] {
        // The master's log says when each worker stopped accepting and exited: what a
        // connection left unanswered waited on (one CI run saw 16, a whole load's worth).
        assert_eq!(
            errors[kind],
            0,
            "no connection left unanswered: {r}\n{}",
            server.log_tail(60)
        );
    }
    assert!(
        errors["5xx"].as_u64().unwrap() > 0,
        "the master answered while the pool was stopped: {r}"
    );
}

#[test]
fn recycling_by_requests_and_by_uptime() {
    let s = setup("[pool.recycle]\nrequests = 300\n", "");
    let _server = s.start();
    let out = espalier(&[
        "bench",
        "-n",
        "2000",
        "-c",
        "8",
        &format!("http://127.0.0.1:{}/", s.port),
    ]);
    assert!(out.status.success());
    s.wait_until(
        "a recycle after 300 requests",
        Duration::from_secs(5),
        |s| {
            s.workers()
                .iter()
                .any(|w| w["recycles"].as_u64() >= Some(1))
        },
    );

    let s = setup("[pool.recycle]\ninterval = \"1s\"\n", "");
    let _server = s.start();
    let first = s.workers()[0]["pid"].clone();
    s.wait_until(
        "a recycle after 1s of uptime",
        Duration::from_secs(5),
        |s| s.workers()[0]["pid"] != first && s.workers()[0]["recycles"].as_u64() >= Some(1),
    );
}

#[test]
fn a_worker_that_stops_answering_pings_is_replaced() {
    let s = setup(
        "ping_interval = \"200ms\"\nping_response_time = \"1s\"\n",
        "",
    );
    let server = s.start();
    let victim = s.workers()[1]["pid"].as_u64().unwrap() as i32;
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    s.wait_until("the hung worker replaced", Duration::from_secs(5), |s| {
        s.workers()[1]["pid"].as_u64() != Some(victim as u64) && s.running() == 2
    });
    server.wait_for_log("missed its pings", std::time::Duration::from_secs(10));
}

#[test]
fn status_and_metrics_describe_every_worker() {
    let s = setup("", "");
    let _server = s.start();
    for _ in 0..50 {
        get(s.addr(), "/", "");
    }
    s.wait_until("request counts reported", Duration::from_secs(4), |s| {
        s.workers()
            .iter()
            .map(|w| w["requests"].as_u64().unwrap())
            .sum::<u64>()
            >= 50
    });
    for w in s.workers() {
        for key in [
            "pid",
            "node",
            "cpus",
            "state",
            "started_unix",
            "requests",
            "resident_bytes",
            "recycles",
            "last_exit",
        ] {
            assert!(w.get(key).is_some(), "status lacks {key}: {w}");
        }
        assert!(w["resident_bytes"].as_u64().unwrap() > 1 << 20);
    }
    let table = espalier(&["status", "--admin", &s.admin]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines().count() == 3 && text.contains("running"),
        "{text}"
    );
    let mut c = Conn::open(s.admin.parse().unwrap());
    c.send(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let m = c.read_response(false).unwrap().text();
    assert!(m.contains("# TYPE espalier_worker_requests_total counter"));
    assert!(m.contains("espalier_worker_up{pool=\"web\",index=\"0\",role=\"worker\"} 1"));
    assert!(m.contains("espalier_pool_running{pool=\"web\"} 1"));
}

#[test]
fn a_cpu_limited_pool_stays_under_its_cap() {
    let s = setup("cpu_limit = \"25%\"\n", "");
    let dir = s.dir.path();
    // The cpu handler on the same pool.
    let config = std::fs::read_to_string(dir.join("espalier.toml")).unwrap()
        + "[[site.app]]\npath = \"/cpu\"\npool = \"web\"\nhandler = \"cpu\"\n";
    std::fs::write(dir.join("espalier.toml"), config).unwrap();
    let server = s.start();
    server.wait_for_log("CPU capped at 25% of one CPU", Duration::from_secs(2));
    let used = |s: &Setup| {
        s.status()["pools"][0]["cpu_used_s"]
            .as_f64()
            .expect("the cgroup's own accounting")
    };
    // Saturate it for a while, then measure over a window in the middle of the load.
    let load = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "bench",
            "-d",
            "4s",
            "-c",
            "8",
            "--json",
            &format!("http://127.0.0.1:{}/cpu?ms=200", s.port),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The cap, enforced: its group's quota is a quarter of the period, and under a load that
    // wants more the kernel throttles the group (`nr_throttled` in its `cpu.stat` grows) —
    // events, read from the kernel, not a share measured over a window of wall time (that
    // figure is a benchmark's).
    let start = used(&s);
    s.wait_until("the pool busy", Duration::from_secs(30), |s| {
        used(s) > start + 0.05
    });
    let group = std::path::PathBuf::from(
        s.status()["pools"][0]["cgroup"]
            .as_str()
            .expect("the pool's CPU group")
            .to_string(),
    );
    let quota = std::fs::read_to_string(group.join("cpu.max"))
        .or_else(|_| std::fs::read_to_string(group.join("cpu.cfs_quota_us")))
        .expect("the group's quota");
    assert!(
        quota.split_whitespace().next() == Some("25000"),
        "{}: quota {quota}",
        group.display()
    );
    let throttled = || -> u64 {
        std::fs::read_to_string(group.join("cpu.stat"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    s.wait_until(
        "the kernel throttling the pool at its cap",
        Duration::from_secs(30),
        |_| throttled() > 0,
    );
    let r = load_result(load);
    assert!(r["requests"].as_u64().unwrap() > 0);
}

#[test]
fn hard_affinity_workers_sit_in_their_own_cpuset() {
    let s = setup("affinity = \"hard\"\n", "");
    let server = s.start();
    for w in s.workers() {
        let pid = w["pid"].as_u64().unwrap();
        let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        // v1: the cpuset controller's line; v2: the unified hierarchy's `0::` line.
        let want = format!("/espalier-{}/web-{}", server.pid(), w["index"]);
        assert!(
            groups
                .lines()
                .any(|l| l.ends_with(&want) && (l.contains(":cpuset:") || l.starts_with("0::"))),
            "worker {pid} is not in {want}:\n{groups}"
        );
        // The cpuset holds exactly the worker's CPUs; its threads keep their own pinning.
        let cpus: Vec<u64> = w["cpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let allowed = espalier::cpuset::CpuSet::parse(&status_field(
                &task.unwrap().path(),
                "Cpus_allowed_list",
            ))
            .unwrap();
            assert!(allowed.iter().all(|c| cpus.contains(&(c as u64))));
        }
    }
    let master = server.pid();
    drop(server);
    assert!(no_groups_left(master), "groups are removed at exit");
}

#[test]
fn a_worker_past_its_memory_limit_is_recycled() {
    let s = setup("[pool.recycle]\nmemory = \"64MiB\"\n", "");
    // First starts allocate 96 MiB (fault injection); the replacements do not.
    let server = Server::start_env(
        &["-c", "espalier.toml"],
        s.dir.path(),
        &[("ESPALIER_ALLOCATE_AT_START", "web:96")],
    );
    s.wait_until("both workers recycled", Duration::from_secs(5), |s| {
        s.workers()
            .iter()
            .all(|w| w["recycles"].as_u64() == Some(1) && w["state"] == "running")
    });
    server.wait_for_log("resident memory", std::time::Duration::from_secs(10));
    for w in s.workers() {
        assert!(
            w["resident_bytes"].as_u64().unwrap() < 64 << 20,
            "the replacement is small: {w}"
        );
    }
    // The master looks at a worker's memory every tick (100 ms): once the replacements are
    // seen a second old, they have been looked at ten times.
    s.wait_until(
        "the replacements a second old",
        Duration::from_secs(30),
        |s| {
            s.workers()
                .iter()
                .all(|w| w["uptime_s"].as_f64().is_some_and(|u| u >= 1.0))
        },
    );
    assert!(
        s.workers()
            .iter()
            .all(|w| w["recycles"].as_u64() == Some(1)),
        "and is not recycled again"
    );
}

#[test]
fn hard_affinity_threads_never_leave_their_cpu_under_load() {
    let s = setup("affinity = \"hard\"\n", "");
    let _server = s.start();
    let pins: Vec<(u32, Vec<(String, String)>)> = s
        .workers()
        .iter()
        .map(|w| {
            let pid = w["pid"].as_u64().unwrap() as u32;
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .map(|t| {
                    let p = t.unwrap().path();
                    (
                        p.display().to_string(),
                        status_field(&p, "Cpus_allowed_list"),
                    )
                })
                .collect();
            (pid, tasks)
        })
        .collect();
    let taken = |s: &Setup| -> u64 {
        s.workers()
            .iter()
            .filter_map(|w| w["requests"].as_u64())
            .sum()
    };
    let mut load = s.load("3s");
    // Looked at each time the workers report more requests answered, until the load ends.
    let mut looked = 0;
    loop {
        for (_, tasks) in &pins {
            for (path, allowed) in tasks {
                assert_eq!(
                    &status_field(std::path::Path::new(path), "Cpus_allowed_list"),
                    allowed,
                    "{path} moved under load"
                );
            }
        }
        looked += 1;
        let seen = taken(&s);
        if load.try_wait().unwrap().is_some() {
            break;
        }
        wait_for(
            "the load moving on, or done",
            Duration::from_secs(60),
            || taken(&s) > seen || load.try_wait().unwrap().is_some(),
        );
    }
    assert!(
        looked >= 2,
        "looked at the pins {looked} time(s) under load"
    );
    assert_eq!(load_result(load)["errors"], 0);
}

#[test]
fn reload_keeps_unchanged_pools_replaces_changed_ones_and_refuses_errors() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let (keep_port, web_port, extra_port, admin_port) =
        (free_port(), free_port(), free_port(), free_port());
    let config = |web_processes: u32, extra: bool| {
        let mut c = format!(
            "[server]\nadmin = \"127.0.0.1:{admin_port}\"\n\
             [[pool]]\nname = \"keep\"\n[[pool]]\nname = \"web\"\nprocesses = {web_processes}\n\
             [[site]]\nname = \"keep\"\nbindings = [\"http://127.0.0.1:{keep_port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"keep\"\n\
             [[site]]\nname = \"web\"\nbindings = [\"http://127.0.0.1:{web_port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"web\"\n"
        );
        if extra {
            c += &format!("[[pool]]\nname = \"extra\"\n[[site]]\nname = \"extra\"\nbindings = [\"http://127.0.0.1:{extra_port}\"]\n[[site.app]]\npool = \"extra\"\nhandler = \"dynamic\"\n");
        }
        c
    };
    std::fs::write(dir.path().join("espalier.toml"), config(2, false)).unwrap();
    let server = Server::start(&["-c", "espalier.toml"], dir.path());
    let admin = format!("127.0.0.1:{admin_port}");
    let status = || -> serde_json::Value {
        serde_json::from_slice(&espalier(&["status", "--json", "--admin", &admin]).stdout).unwrap()
    };
    let pids = |pool: &str| -> Vec<u64> {
        status()["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pool)
            .map_or(vec![], |p| {
                p["workers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|w| w["pid"].as_u64())
                    .collect()
            })
    };
    let keep_before = pids("keep");
    let web_before = pids("web");
    assert_eq!(web_before.len(), 2);

    // Change `web` (2 workers → 1) and add `extra`, under load on `web`.
    let load = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "bench",
            "-d",
            "3s",
            "-c",
            "16",
            "--json",
            &format!("http://127.0.0.1:{web_port}/"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let web_requests = || -> u64 {
        status()["pools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "web")
            .flat_map(|p| p["workers"].as_array().unwrap().clone())
            .map(|w| w["requests"].as_u64().unwrap_or(0))
            .sum()
    };
    server.wait_until("load reaching pool web", Duration::from_secs(10), |_| {
        web_requests() > 0
    });
    std::fs::write(dir.path().join("espalier.toml"), config(1, true)).unwrap();
    server.signal(libc::SIGHUP);
    server.wait_for_log("reloaded", Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids("web").len() != 1 || pids("extra").len() != 1 {
        assert!(Instant::now() < deadline, "{}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = load_result(load);
    assert_eq!(r["errors"], 0, "no failed request across the reload: {r}");
    assert_eq!(pids("keep"), keep_before, "an unchanged pool is untouched");
    assert!(
        pids("web").iter().all(|p| !web_before.contains(p)),
        "the changed pool has new workers"
    );
    assert!(
        get(SocketAddr::from(([127, 0, 0, 1], extra_port)), "/", "")
            .text()
            .contains("Hello from extra/0/"),
        "the new binding serves"
    );

    // A config with errors is refused; everything keeps serving.
    std::fs::write(
        dir.path().join("espalier.toml"),
        "[[pool]]\nname = \"web\"\nprocesses = \"many\"\n",
    )
    .unwrap();
    let out = espalier(&["reload", "--admin", &admin]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reload refused") && err.contains("espalier.toml:3: key `pool[0].processes`"),
        "{err}"
    );
    assert_eq!(
        get(SocketAddr::from(([127, 0, 0, 1], web_port)), "/", "").status,
        200
    );

    // Removing `extra` closes its binding once its worker has drained.
    std::fs::write(dir.path().join("espalier.toml"), config(1, false)).unwrap();
    let out = espalier(&["reload", "--admin", &admin]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], extra_port))).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the removed binding still accepts"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(pids("keep"), keep_before);
}

#[test]
fn scheduled_recycle_at_a_time_of_day() {
    // Two seconds from now, local time, as the config writes it.
    let at = (espalier::os::process::local_second_of_day() + 2) % 86_400;
    let when = format!("{:02}:{:02}:{:02}", at / 3600, at / 60 % 60, at % 60);
    let s = setup(&format!("[pool.recycle]\nschedule = [\"{when}\"]\n"), "");
    let server = s.start();
    s.wait_until("the scheduled recycle", Duration::from_secs(5), |s| {
        s.workers()
            .iter()
            .all(|w| w["recycles"].as_u64() == Some(1))
    });
    server.wait_for_log("scheduled recycle time", std::time::Duration::from_secs(10));
}

#[test]
fn a_draining_worker_is_bounded_by_shutdown_time_limit() {
    let s = setup(
        "shutdown_time_limit = \"1s\"\n",
        "[server.limits]\nheader_timeout = \"300s\"\n",
    );
    let server = s.start();
    let old: Vec<u64> = s
        .workers()
        .iter()
        .map(|w| w["pid"].as_u64().unwrap())
        .collect();
    // Hold a request half sent on every worker thread's CPU so the old workers have work in flight.
    let mut held: Vec<Conn> = (0..4).map(|_| Conn::open(s.addr())).collect();
    for c in &mut held {
        c.send(b"GET / HTTP/1.1\r\n");
    }
    assert!(espalier(&["recycle", "web", "--admin", &s.admin])
        .status
        .success());
    // Held requests would keep them for the 300 s header timeout; the 1 s limit ends them
    // (waited for with a generous bound).
    s.wait_until("the old workers gone", Duration::from_secs(120), |_| {
        old.iter().all(|&p| !pid_alive(p as u32))
    });
    let _ = server;
}

#[test]
fn a_second_signal_stops_at_once() {
    let s = setup(
        "shutdown_time_limit = \"600s\"\n",
        "shutdown_timeout = \"600s\"\n",
    );
    let mut server = s.start();
    // An in-flight request would hold the graceful stop for the 600 s shutdown_timeout …
    let mut c = Conn::open(s.addr());
    c.send(b"GET / HTTP/1.1\r\n");
    c.wait_read();
    server.signal(libc::SIGTERM);
    server.wait_for_log("stopping: in-flight requests", Duration::from_secs(5));
    assert!(pid_alive(server.pid()), "still draining");
    // … a second signal ends it at once.
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(120)), Some(0));
}

#[test]
fn recycling_without_overlap_stops_first() {
    let s = setup("[pool.recycle]\noverlap = false\n", "");
    let server = s.start();
    let old = s.workers()[0]["pid"].as_u64().unwrap();
    assert!(espalier(&["recycle", "web", "--admin", &s.admin])
        .status
        .success());
    s.wait_until("the replacement running", Duration::from_secs(5), |s| {
        s.workers()[0]["pid"].as_u64().is_some_and(|p| p != old) && s.running() == 2
    });
    let log = server.log_text();
    let exited = log
        .find(&format!("(pid {old}) exited"))
        .expect("the old worker exited");
    let restarted = log[exited..]
        .find("worker web/0 started")
        .map(|i| i + exited);
    assert!(
        restarted.is_some(),
        "web/0 started again only after the old one exited:\n{log}"
    );
}

#[test]
fn a_master_whose_log_reader_went_away_still_stops_cleanly() {
    let s = setup("affinity = \"hard\"\n", "");
    let mut child = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["serve", "-c", "espalier.toml"])
        .current_dir(s.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read until the server is up, then close our end of its stderr.
    {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        assert!(lines.any(|l| l.unwrap().contains("worker(s) serving")));
    }
    let master = child.id();
    unsafe { libc::kill(master as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "the master exits normally, not by a panic on its log"
    );
    assert!(no_groups_left(master), "and removes its groups");
}
