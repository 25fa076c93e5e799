//! The admin page in a real browser: a server with two pools under load, the page loaded in
//! Debian's Chromium (driven by playwright-core from npm, both installed when missing), its
//! rendered DOM checked against the status, a recycle pressed with the token (the pid
//! changes) and without it (refused, nothing changes), the JSON feed growing under load, and
//! the DL980 plan drawn from the fixture; and a certificate whose order fails drawn in the
//! certificates table with its state and error. Screenshots go to target/admin-page-test/.

use crate::common;

use common::browser::browser_tools;
use common::*;
use espalier::server::status::Live;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// GETs naming `host` on a keep-alive connection, one every 2 ms, until `stop`: (answered,
/// failures). A reused connection closed before any answer (a draining worker's) is retried on
/// a new one, as browsers do; a new connection that fails is a failure.
fn paced_load(addr: SocketAddr, host: &str, stop: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let mut conn: Option<Conn> = None;
    let (mut answered, mut failed) = (0, Vec::new());
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
    while !stop.load(Ordering::Relaxed) {
        let reused = conn.is_some();
        let c = conn.get_or_insert_with(|| Conn::open(addr));
        let sent = std::io::Write::write_all(&mut c.stream, request.as_bytes()).is_ok();
        match sent.then(|| c.read_response(false)).flatten() {
            Some(r) if r.status == 200 => answered += 1,
            Some(r) => failed.push(format!("{} {}", r.status, r.text())),
            None if reused => {
                conn = None;
                continue;
            }
            None => {
                failed.push("a new connection closed without an answer".into());
                conn = None;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (answered, failed)
}

fn live(admin: SocketAddr) -> Live {
    let (code, body) = espalier::server::admin::request(admin, "GET", "/live").unwrap();
    assert_eq!(code, 200);
    serde_json::from_slice(&body).unwrap()
}

#[test]
fn the_admin_page_shows_the_machine_and_its_pools_live() {
    let node_dir = browser_tools();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/admin-page-test");
    std::fs::create_dir_all(&out).unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let port = free_port();
    let config = format!(
        r#"[server]
worker_header = true
[[pool]]
name = "shop"
processes = 2
memory_limit = "256MiB"
pids_limit = 200
[[pool]]
name = "blog"
affinity = "hard"
[[site]]
name = "shop"
bindings = ["http://127.0.0.1:{port}:shop.example"]
root = "www"
metrics = true
[[site.app]]
pool = "shop"
[[site]]
name = "blog"
bindings = ["http://127.0.0.1:{port}"]
[[site.app]]
pool = "blog"
handler = "dynamic"
[[site.app]]
path = "/api/"
pool = "blog"
upstream = "api"
[[upstream]]
name = "api"
servers = ["127.0.0.2:1"]
[upstream.health]
interval = "300ms"
"#
    );
    let server = Server::with_config(dir.path(), &config);
    let admin: SocketAddr = server.admin.as_deref().unwrap().parse().unwrap();
    let token = std::fs::read_to_string(espalier::server::admin::token_file(admin)).unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stop = Arc::new(AtomicBool::new(false));
    // A steady, light load (a request every 2 ms per host): the figures move, and the
    // browser on this 2-CPU machine still gets the CPU time to render.
    let load: Vec<_> = ["shop.example", "blog.example"]
        .into_iter()
        .map(|h| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || paced_load(addr, h, stop))
        })
        .collect();

    // The feed grows under load: requests, history, CPU loads, connections — each read
    // waited for (the workers report at their heartbeat), never a sleep.
    let served = |l: &Live| -> u64 {
        l.status
            .pools
            .iter()
            .flat_map(|p| &p.workers)
            .map(|w| w.requests)
            .sum()
    };
    let live_once = |ok: &dyn Fn(&Live) -> bool, what: &str| {
        let mut last = None;
        wait_for(what, Duration::from_secs(30), || {
            let l = live(admin);
            let done = ok(&l);
            last = Some(l);
            done
        });
        last.expect("read")
    };
    let a = live_once(
        &|l| served(l) > 0 && !l.history.is_empty(),
        "requests and history in the feed",
    );
    let b = live_once(
        &|l| served(l) > served(&a) && l.history.len() > a.history.len(),
        "the feed growing",
    );
    assert!(b.time_unix > a.time_unix);
    assert_eq!(
        b.cpu_load.len(),
        std::thread::available_parallelism().unwrap().get()
    );
    // The dispatcher's workers too: on the shared port, they accept what the pools serve.
    let workers: Vec<_> = b
        .status
        .pools
        .iter()
        .chain(&b.status.dispatcher)
        .flat_map(|p| p.workers.iter().map(move |w| (p.name.clone(), w.clone())))
        .collect();
    assert!(
        workers.iter().map(|(_, w)| w.connections).sum::<u64>() >= 1,
        "{workers:?}"
    );
    assert!(workers.iter().map(|(_, w)| w.accepted).sum::<u64>() >= 1);
    assert!(workers.iter().all(|(_, w)| w.steered <= w.accepted));
    assert!(workers
        .iter()
        .all(|(_, w)| ["hard", "soft"].contains(&w.affinity.as_str())));

    // The DL980's placement, drawn from the fixture.
    let plan = out.join("plan.html");
    let dry = espalier(&[
        "serve",
        "--dry-run",
        "--sysfs",
        root.join("tests/fixtures/dl980/sys").to_str().unwrap(),
        "-c",
        root.join("examples/web-garden.toml").to_str().unwrap(),
        "--html",
        plan.to_str().unwrap(),
    ]);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );

    let driven = Command::new("node")
        .arg(root.join("tests/admin_page/drive.js"))
        .args([
            &format!("http://{admin}"),
            token.trim(),
            out.to_str().unwrap(),
            plan.to_str().unwrap(),
        ])
        .env("NODE_PATH", node_dir.join("node_modules"))
        .output()
        .expect("node");
    stop.store(true, Ordering::Relaxed);
    for l in load {
        let (_, failed) = l.join().unwrap();
        assert!(failed.is_empty(), "{failed:?}");
    }
    let text = String::from_utf8_lossy(&driven.stdout);
    let seen: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&driven.stderr)));
    assert!(seen["error"].is_null(), "{seen}");

    // Every process of the status, with its pid and node, in the table and on the machine.
    let rows = seen["rows"].as_array().unwrap();
    let chips = seen["chips"].as_array().unwrap();
    for (pool, w) in &workers {
        let pid = w.pid.unwrap().to_string();
        let node = w.node.unwrap().to_string();
        assert!(
            rows.iter().any(|r| r["pool"] == pool.as_str()
                && r["pid"] == pid.as_str()
                && r["node"] == node.as_str()),
            "{pool}/{} pid {pid} node {node} not in the table: {rows:?}",
            w.index
        );
        assert!(
            chips
                .iter()
                .any(|c| c["pid"] == pid.as_str() && c["node"] == node.as_str()),
            "{chips:?}"
        );
    }
    assert_eq!(seen["cpus"], b.cpu_load.len());
    assert!(seen["history_lines"].as_u64().unwrap() >= 2, "{seen}");
    // The shop site has metrics: its pool's p50, p99 and 5xx share (none: it serves files).
    let latency = seen["shop_latency"].as_str().unwrap();
    assert!(
        latency.starts_with("p50 ")
            && latency.contains(" · p99 ")
            && latency.ends_with(" · 5xx 0.0%"),
        "{latency}"
    );

    // The shop pool's limits, against what its group uses, where the machine applied them.
    let shop = (b.status.pools.iter()).find(|p| p.name == "shop").unwrap();
    let limits = seen["shop_limits"].as_str().unwrap();
    if shop.memory_limit.is_some() {
        assert!(
            limits.starts_with("memory ")
                && limits.contains(" MiB of 256.0 MiB")
                && limits.contains(" of 200 processes"),
            "{limits}"
        );
    } else {
        assert_eq!(limits, "", "no group, no limits: {}", server.log_text());
    }

    // With the token, the recycle button replaced blog's worker.
    assert!(
        seen["recycle_message"]
            .as_str()
            .unwrap()
            .starts_with("done"),
        "{seen}"
    );
    let new_pid = seen["blog_pid_after"].as_str().unwrap();
    assert_ne!(new_pid, seen["blog_pid_before"].as_str().unwrap());
    server.wait_until(
        "the status shows blog's new worker",
        Duration::from_secs(5),
        |s| {
            s.status().pools.iter().any(|p| {
                p.name == "blog"
                    && p.workers[0].pid.map(|p| p.to_string()).as_deref() == Some(new_pid)
            })
        },
    );
    // Without it, refused, and nothing changed.
    assert!(
        seen["refused_message"].as_str().unwrap().contains("401"),
        "{seen}"
    );
    assert_eq!(seen["shop_pids_unchanged"], true);
    // Filtered: the table shows shop alone, the map every process, the line the counts.
    assert_eq!(
        seen["filtered_pools"],
        serde_json::json!(["shop"]),
        "{seen}"
    );
    // The map shows the dispatcher's process too (in front of the shared port).
    assert_eq!(
        b.status.dispatcher.as_ref().map(|d| d.workers.len()),
        Some(1),
        "a shared port, one node: one dispatcher process"
    );
    assert_eq!(seen["filtered_chips"], workers.len(), "{seen}");
    assert!(
        seen["pageinfo"]
            .as_str()
            .unwrap()
            .starts_with("1–1 of 1 matched · 2 pools: 2 running"),
        "{seen}"
    );
    assert_eq!(seen["idle_rows"], 0, "{seen}");
    // The upstream group's server that refuses connections, down by its check.
    let upstreams = seen["upstreams"].as_array().unwrap();
    assert!(
        upstreams.iter().any(|u| u["state"] == "down"
            && u["text"].as_str().unwrap().contains("127.0.0.2:1")
            && u["text"].as_str().unwrap().contains("connect failed")),
        "{upstreams:?}"
    );

    // The plan: 8 nodes, 160 CPUs, one worker on each node, on one screen.
    let plan_seen = &seen["plan"];
    assert_eq!(plan_seen["nodes"], 8, "{plan_seen}");
    assert_eq!(plan_seen["cpus"], 160);
    let mut nodes: Vec<String> = plan_seen["chips"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["0", "1", "2", "3", "4", "5", "6", "7"]);
    assert_eq!(plan_seen["fits"], true);
    assert!(out.join("live.png").exists() && out.join("plan.png").exists());
}

#[test]
fn actions_need_the_token_and_a_public_admin_address_needs_one_set() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    );
    let server = Server::with_config(dir.path(), &config);
    let admin: SocketAddr = server.admin.as_deref().unwrap().parse().unwrap();
    let (code, _) = espalier::server::admin::request(admin, "POST", "/pools/p/recycle").unwrap();
    assert_eq!(code, 401);
    let (code, _) = espalier::server::admin::request_with_token(
        admin,
        "POST",
        "/pools/p/recycle",
        Some("0123456789abcdef0123"),
    )
    .unwrap();
    assert_eq!(code, 401, "a wrong token");
    // The CLI finds the token file by itself.
    let out = espalier(&["recycle", "p", "--admin", &admin.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Reads need none; the page is served.
    let (code, body) = espalier::server::admin::request(admin, "GET", "/").unwrap();
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&body).contains("<title>espalier</title>"));

    // A non-loopback admin address without admin_token is refused at check.
    std::fs::write(
        dir.path().join("public.toml"),
        format!("[server]\nadmin = \"0.0.0.0:9999\"\n{config}"),
    )
    .unwrap();
    let out = espalier(&[
        "check",
        "-c",
        dir.path().join("public.toml").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("public.toml:2: key `server.admin`") && err.contains("admin_token"),
        "{err}"
    );
}

#[test]
fn a_certificate_that_needs_a_look_shows_on_the_admin_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root.join("target/admin-page-test");
    std::fs::create_dir_all(&out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("store")).unwrap();
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    // A directory nothing answers at: the order of a.test fails, and says why.
    let config = format!(
        "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"https://127.0.0.1:1/dir\"\n[[pool]]\nname = \"p\"\n[[site]]\nname = \"a\"\nbindings = [\"https://127.0.0.1:{}:a.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        free_port()
    );
    let server = Server::with_config(dir.path(), &config);
    server.wait_for_log("acme: a.test: the order failed", Duration::from_secs(30));
    let admin = server.admin.clone().unwrap();
    let seen = common::browser::admin_table(
        &[],
        &format!("http://{admin}"),
        ("tr.certificate", "failing", "#certificates-title"),
        &out.join("certificates.png"),
    );
    assert_eq!(seen["title_shown"], true, "{seen}");
    let rows = seen["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{seen}");
    let cells: Vec<&str> = (rows[0]["cells"].as_array().unwrap().iter())
        .map(|c| c.as_str().unwrap())
        .collect();
    // name, state, ends (none yet), renewed from (none), last error — as /status says it.
    let shown = server.status().certificates;
    let error = shown[0].last_error.as_deref().unwrap();
    assert_eq!(cells[0], "a.test", "{seen}");
    assert_eq!(cells[1], "failing", "{seen}");
    assert!(
        error.contains("https://127.0.0.1:1/dir") && error.contains("Connection refused"),
        "{error}"
    );
    assert_eq!(cells[4], error, "{seen}");
}
