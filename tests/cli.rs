//! The real binary, run the way a user runs it: topology, check and serve --dry-run.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

fn espalier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run espalier")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

#[test]
fn topology_json_has_the_documented_shape() {
    let v = json(&espalier(&[
        "topology",
        "--json",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    assert_eq!(v["nodes"].as_array().unwrap().len(), 8);
    let n0 = &v["nodes"][0];
    for k in [
        "id",
        "cpus",
        "memory_total_bytes",
        "memory_free_bytes",
        "distances",
    ] {
        assert!(!n0[k].is_null(), "nodes[0].{k}");
    }
    let c = &v["cpus"][0];
    assert_eq!(c["id"], 0);
    assert_eq!(c["online"], true);
    assert_eq!(c["node"], 0);
    assert_eq!(c["package"], 0);
    assert_eq!(c["core"], 0);
    assert_eq!(c["siblings"], serde_json::json!([0, 80]));
    assert_eq!(c["l3"], 0);
    let nic = &v["nics"][0];
    for k in ["name", "node", "rx_queues", "tx_queues"] {
        assert!(nic.get(k).is_some(), "nics[0].{k}");
    }
}

/// `espalier topology` on this machine agrees with the kernel's own summary (what lscpu reads).
#[test]
fn topology_on_this_machine_agrees_with_the_kernel() {
    let v = json(&espalier(&["topology", "--json"]));
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let want = espalier::cpuset::CpuSet::parse(&online).unwrap();
    let got: Vec<u32> = v["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["online"] == true)
        .map(|c| c["id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(got, want.as_slice());
    let node_dirs = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].parse::<u32>().is_ok()
                })
                .count()
        })
        .unwrap_or(1);
    assert_eq!(v["nodes"].as_array().unwrap().len(), node_dirs.max(1));
    let table = stdout(&espalier(&["topology"]));
    assert!(table.contains("NUMA node(s)") && table.contains("NODE") && table.contains("CPU"));
}

#[test]
fn dry_run_on_dl980_prints_one_worker_per_node() {
    let v = json(&espalier(&[
        "serve",
        "--dry-run",
        "--json",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    let workers = v["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 8);
    let mut nodes: Vec<u64> = workers
        .iter()
        .map(|w| w["node"].as_u64().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, (0..8).collect::<Vec<_>>());
    for w in workers {
        assert_eq!(w["cpus"].as_array().unwrap().len(), 20);
        assert_eq!(w["threads"], 20);
        assert_eq!(w["affinity"], "soft");
        assert_eq!(w["pool"], "default");
    }
    // The steering beside the plan: per node, the worker placed there, on the node's CPUs.
    let rows = v["steering"]["rows"]
        .as_array()
        .expect("the steering's rows");
    assert_eq!(rows.len(), 8, "{v}");
    for row in rows {
        let served = row["served_by"].as_array().unwrap();
        assert_eq!(served.len(), 1, "{row}");
        assert_eq!(served[0]["cpus"], row["received_on"], "{row}");
        let worker = &workers[served[0]["index"].as_u64().unwrap() as usize];
        assert_eq!(worker["node"], row["node"], "{row}");
    }
    let table = stdout(&espalier(&[
        "serve",
        "--dry-run",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    let (placement, steering) = table.split_once("\nSTEERING").expect("a steering table");
    assert_eq!(
        placement.lines().count(),
        9,
        "a header and one row per worker:\n{table}"
    );
    assert!(table.contains("30-39,110-119"));
    // Then where each node's connections go: the worker on that node, its CPUs the node's.
    let rows: Vec<&str> = steering
        .lines()
        .filter(|l| l.contains("default/"))
        .collect();
    assert_eq!(rows.len(), 8, "{steering}");
    for row in rows {
        let words: Vec<&str> = row.split_whitespace().collect();
        let n = words.len();
        assert_eq!(words[n - 1], format!("({})", words[n - 3]), "{row}");
    }
}

#[test]
fn a_process_confined_by_taskset_places_on_its_cpus_only() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    if online.trim() == "0" {
        common::skip("one CPU online, nothing to confine");
        return;
    }
    let out = Command::new("taskset")
        .args([
            "-c",
            "0",
            env!("CARGO_BIN_EXE_espalier"),
            "serve",
            "--dry-run",
            "--json",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("taskset (util-linux)");
    let v = json(&out);
    for w in v["workers"].as_array().unwrap() {
        assert_eq!(w["cpus"], serde_json::json!([0]), "{w}");
    }
    assert!(
        stderr(&out).contains("this process may run on CPUs 0 of the"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn examples_dry_run_on_the_case_study_machine() {
    let garden = json(&espalier(&[
        "serve",
        "--dry-run",
        "--json",
        "-c",
        "examples/web-garden.toml",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    assert_eq!(garden["workers"].as_array().unwrap().len(), 8);
    let hosting = json(&espalier(&[
        "serve",
        "--dry-run",
        "--json",
        "-c",
        "examples/hosting.toml",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    let (dispatcher, pools): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = hosting
        ["workers"]
        .as_array()
        .unwrap()
        .iter()
        .partition(|w| w["pool"] == espalier::server::dispatcher::POOL);
    let nodes: Vec<u64> = pools.iter().map(|w| w["node"].as_u64().unwrap()).collect();
    assert_eq!(nodes.len(), 4);
    // In front of the shared port: the dispatcher, a process on each of the 8 nodes.
    let mut dispatcher_nodes: Vec<u64> = dispatcher
        .iter()
        .map(|w| w["node"].as_u64().unwrap())
        .collect();
    dispatcher_nodes.sort();
    assert_eq!(dispatcher_nodes, (0..8).collect::<Vec<u64>>());
    let mut unique = nodes.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        4,
        "four pools on four different nodes: {nodes:?}"
    );
    let default = json(&espalier(&[
        "serve",
        "--dry-run",
        "--json",
        "-c",
        "examples/default.toml",
        "--sysfs",
        "tests/fixtures/dl980/sys",
    ]));
    assert_eq!(default["workers"].as_array().unwrap().len(), 1);
}

#[test]
fn check_accepts_good_and_refuses_bad_configs_in_one_line() {
    // traffic.toml runs gunicorn, which check looks for.
    common::apps::need_runtimes();
    for example in [
        "examples/web-garden.toml",
        "examples/site-answers.toml",
        "examples/traffic.toml",
        "examples/upstream.toml",
        "examples/acme.toml",
    ] {
        let ok = espalier(&["check", "-c", example]);
        assert!(ok.status.success(), "{example}: {}", stderr(&ok));
        assert!(stdout(&ok).contains("ok"));
    }

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[pool]]\nname = \"p\"\ncpus = \"0-4095\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\npool = \"p\"\n").unwrap();
    let out = espalier(&["check", "-c", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.toml:3: key `pool[0].cpus`: CPU(s)")
            && err.contains("do not exist on this machine"),
        "{err}"
    );
    assert!(!err.contains("panicked"));

    let missing = espalier(&["check", "-c", "/nonexistent/espalier.toml"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("/nonexistent/espalier.toml: cannot read the config file"));

    let bad_sysfs = espalier(&["topology", "--sysfs", "/nonexistent"]);
    assert_eq!(bad_sysfs.status.code(), Some(1));
    assert_eq!(stderr(&bad_sysfs).lines().count(), 1);
}

/// The README's activation recipe with the features a new user adds to it: `check` refuses
/// each, naming the key and the fix, where it used to say "ok" and serve the path with none
/// of them (issue #39, item 1).
#[test]
fn check_refuses_site_features_on_an_activated_site() {
    common::apps::need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    let recipe = std::fs::read_to_string("examples/apps/uvicorn.toml").unwrap();
    std::fs::write(
        dir.path().join("users"),
        "alice:$2y$05$tBNGnx5dsSKJiN4WNUQb6eAhtLhHWzxoq9yzVBwyBbV.6Lc7jtBJW\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("asgi")).unwrap();
    let with_features = recipe
        .replace(
            "bindings = [\"http://127.0.0.1:8081\"]",
            "bindings = [\"http://127.0.0.1:8081\"]\ndeny = [\"127.0.0.1/32\"]\nlimit = { rate = \"1/s\" }\nheaders = { X-Frame-Options = \"DENY\" }\ncompress = [\"gzip\"]\naccess_log = { path = \"access.log\" }",
        )
        .replace(
            "pool = \"asgi\"\n",
            "pool = \"asgi\"\nauth = { htpasswd = \"users\", cleartext = true }\n",
        );
    let file = dir.path().join("uvicorn.toml");
    std::fs::write(&file, &with_features).unwrap();
    let out = espalier(&["check", "-c", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    for key in [
        "site[0].deny",
        "site[0].limit",
        "site[0].headers",
        "site[0].compress",
        "site[0].access_log",
        "site[0].app[0].auth",
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("key `{key}`")))
            .unwrap_or_else(|| panic!("no line for {key}: {err}"));
        assert!(
            line.contains("uvicorn.toml:") && line.contains("transport = \"proxy\""),
            "{line}"
        );
    }
    // The recipe itself, and the same features served by the proxy, are fine.
    std::fs::write(&file, &recipe).unwrap();
    let ok = espalier(&["check", "-c", file.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let proxied = with_features
        .replace("transport = \"activation\"", "transport = \"proxy\"")
        .replace("\"--fd\", \"3\"", "\"--port\", \"{port}\"");
    std::fs::write(&file, proxied).unwrap();
    let ok = espalier(&["check", "-c", file.to_str().unwrap()]);
    assert!(ok.status.success(), "{}", stderr(&ok));
}

#[test]
fn fixtures_are_what_the_generator_writes() {
    // The generator is the source of truth; a hand edit of a fixture shows up here.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("python3")
        .arg(root.join("generate.py"))
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("python3 runs the fixture generator");
    assert!(status.success());
    for name in ["dl980", "epyc2s", "laptop", "awkward", "nonuma"] {
        let diff = Command::new("diff")
            .args(["-r", "--no-dereference"])
            .arg(root.join(name))
            .arg(out.path().join(name))
            .output()
            .unwrap();
        assert!(
            diff.status.success(),
            "fixture {name} differs from the generator:\n{}",
            stdout(&diff)
        );
    }
}
