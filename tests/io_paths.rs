//! The I/O-path matrix: the integration suite again, on the path the rest of `cargo test`
//! did not take. Every server the suite starts chooses its path with `[server] io = "auto"`
//! (io_uring where the kernel allows it, else epoll) unless `ESPALIER_IO` says otherwise; so
//! `cargo test` has run the suite (`tests/tests.rs`, one binary) on one path by the time this
//! one runs, and this one runs that binary again — the same tests, not a copy — with
//! `ESPALIER_IO` set to the other path.
//!
//! Not run again: the modules of [`NOT_AGAIN`], whose behaviour the workers' I/O path does
//! not touch (each listed with its reason: packaging, the master's ACME client and admin
//! endpoint, QUIC on quinn's own sockets, …), and the QEMU guest (`tests/numa_qemu.rs`, a
//! binary of its own: its guest runs its own kernel and chooses there). A harness of its own (`harness = false`): it runs a program, it has no
//! tests of its own to list. Run it with the others (`cargo test`): alone, the suite's binary
//! may not be built or may be stale.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Modules of the suite whose behaviour does not depend on the connections' I/O path (the
/// engine's accept, read and write on io_uring or epoll), each for its reason. They run once,
/// in the first pass; the rest — every test of serving, proxying, TLS, HTTP/2, limits,
/// hand-offs, pools' and on-demand connections — runs on both paths.
const NOT_AGAIN: &[&str] = &[
    // Packaging.
    "deb::",
    // The master's ACME client and its directory; the challenge answers are plain requests
    // the first pass serves on the same path as every other. DNS-01: the master's own DNS
    // server and its RFC 2136 client.
    "acme::",
    "acme_dns::",
    // QUIC is quinn's own UDP socket I/O, not the engine's (0-RTT across workers included).
    "http3::",
    "ticket_keys::http3_",
    // The admin endpoint (the master's own tokio, not a worker's engine), read by Chromium,
    // the CLI and its status: the same whatever the workers' path.
    "admin_page::",
    "cli::",
    "config_api::",
    // The fleet's etcd: the master's client, its copy and its reloads, and the ticket
    // secrets it shares (resumption itself is `tls::`'s, run on both paths).
    "fleet::a_fleet_shares_",
    "fleet::a_fleet_resumes_",
    "fleet::a_fleet_orders_",
    "fleet::a_name_whose_orderer_",
    "fleet::a_failed_order_",
    "fleet::on_demand_orders_",
    "fleet::a_fleet_loses_no_request_when_an_etcd_",
    "fleet::a_member_never_applies_",
    "fleet::a_member_reaches_etcd_",
    "fleet::a_member_that_cannot_reach_",
    "fleet::a_fleet_answers_dns_01_",
    "metrics::",
    "operations::",
    // The master's own work in modules otherwise run twice: its recycling by count, time,
    // schedule and memory, rapid-fail, its cgroups and cpusets, its start-up probes of an
    // app's port, its warm-up client, the freezer's kind (the v2 tests run on both paths)
    // and a new master's clean-up after a killed one.
    "pools::scheduled_recycle_",
    "pools::recycling_by_requests_",
    "pools::a_worker_past_its_memory_limit_",
    "pools::status_and_metrics_",
    "pools::a_cpu_limited_pool_",
    "pools::hard_affinity_workers_sit_",
    "pools::rapid_fail_",
    "pools::a_master_whose_log_reader_",
    "apps::a_cpu_limit_and_hard_affinity_",
    "apps::reload_with_a_changed_environment_",
    "apps::a_crashing_app_stops_",
    "apps::an_app_that_never_becomes_healthy_",
    "apps::an_app_that_exits_at_once_",
    "apps::check_names_",
    "apps_proxy::an_app_listening_on_a_port_of_its_own_",
    "apps_proxy::another_users_listener_",
    "apps_proxy::an_app_whose_port_another_process_took_",
    "on_demand::an_idle_pool_is_suspended_and_thawed_with_the_v1_",
    "on_demand::a_new_server_",
    "on_demand::a_warm_up_answer_without_end_",
    "on_demand::warm_up_requests_reach_",
    // The master's pings and health requests to apps, and its cgroups, identities, units;
    // an app's view of the filesystem and its limits (`app-exec`, the kernel's cgroups).
    "app_liveness::",
    "tenants::",
    "identity::",
    "isolation::",
    "pool_limits::",
    "systemd::",
    // Reading the store's files, the source tree, the NIC's settings, scaling plans.
    "cert_store::",
    "source::",
    "nic_doctor::",
    "scale::",
    // Debian's WordPress and MariaDB: an app's own I/O, served by paths the rest covers.
    "wordpress::",
    // Pure logic under random input (the config loader, the sysfs reader, the planner): no
    // server is started.
    "robustness::",
    // What the TLS configuration offers (protocols, suites, renegotiation, …), probed by
    // testssl.sh with hundreds of handshakes: rustls's settings, not how the bytes travel.
    "tls::testssl_",
    // How the HTTP/1.1 codec frames ambiguous requests against nginx: each case is one
    // write of a whole request and its probe; the codec reads the same bytes on either path.
    "differential::",
    // Spans made from the log entry both paths give alike, posted on the thread's own tokio
    // socket to the collector; a traced request's way is every request's.
    "tracing::",
];

/// The newest build of test binary `name` beside this one (`deps/NAME-HASH`).
fn binary(deps: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{name}-");
    std::fs::read_dir(deps)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let file = e.file_name();
            let file = file.to_string_lossy();
            file.strip_prefix(&prefix)
                .is_some_and(|hash| hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .filter(|e| {
            use std::os::unix::fs::PermissionsExt;
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn main() {
    let probe = espalier::os::uring::probe();
    // The path the suite took, and the other one.
    let took = match std::env::var("ESPALIER_IO").as_deref() {
        Ok("epoll") => "epoll",
        Ok("uring") => "uring",
        _ if probe.is_ok() => "uring",
        _ => "epoll",
    };
    let other = if took == "uring" { "epoll" } else { "uring" };
    if let (Err(why), "uring") = (&probe, other) {
        println!("io_paths: the suite ran on epoll; io_uring cannot run here ({why}), so it is not run again on it");
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let me = std::env::current_exe().expect("this test's path");
    let deps = me.parent().expect("the deps folder");
    let Some(suite) = binary(deps, "tests") else {
        eprintln!("io_paths: the suite's binary is not built: run the whole `cargo test`");
        std::process::exit(1);
    };
    // Arguments cargo passes on (a name filter, --nocapture …) go to the suite.
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    for module in NOT_AGAIN {
        args.extend(["--skip".to_string(), module.to_string()]);
    }
    println!("io_paths: the suite again with ESPALIER_IO={other}");
    // The tests that say they cannot run here (`common::skip`) write a line each: counted
    // for this run and printed at its end.
    let skipped = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    let _ = std::fs::remove_file(&skipped);
    let status = Command::new(&suite)
        .args(&args)
        .env("ESPALIER_IO", other)
        .current_dir(manifest)
        .status();
    let skips = std::fs::read_to_string(&skipped).unwrap_or_default();
    println!(
        "io_paths: {} test(s) or part(s) skipped on {other}{}",
        skips.lines().count(),
        skips
            .lines()
            .map(|l| format!("\n  {l}"))
            .collect::<String>()
    );
    match status {
        Ok(s) if s.success() => {
            println!("io_paths: the suite passed on {other} as well as on {took}")
        }
        Ok(s) => {
            eprintln!("io_paths: on ESPALIER_IO={other}, the suite failed ({s})");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("io_paths: cannot run {}: {e}", suite.display());
            std::process::exit(1);
        }
    }
}
