//! `espalier nic` and `espalier doctor`, run as a user would: on the fixture trees, on this
//! machine, and — for `nic apply` — for real inside a network namespace the test creates and
//! removes, reading back what was written and undoing it.

use crate::common;

use common::espalier;

use std::path::PathBuf;
use std::process::{Command, Output};

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn nic_plan_json_has_the_documented_shape() {
    let v = json(&espalier(&[
        "nic",
        "plan",
        "--json",
        "--sysfs",
        "tests/fixtures/dl980/sys",
        "ens2f0",
    ]));
    let nic = &v["nics"][0];
    assert_eq!(nic["name"], "ens2f0");
    assert_eq!(nic["node"], 2);
    assert_eq!(
        nic["rx"][0],
        serde_json::json!({"queue": 0, "irq": 140, "cpus": [20]})
    );
    assert_eq!(nic["tx"][0]["queue"], 0);
    assert!(nic["tx"][0]["cpus"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(20)));
    assert_eq!(
        v["irqbalance_running"], true,
        "the DL980 fixture runs irqbalance"
    );
    let warned = espalier(&["nic", "plan", "--sysfs", "tests/fixtures/dl980/sys"]);
    assert!(String::from_utf8_lossy(&warned.stderr).contains("irqbalance is running"));
    // A NIC of unknown node, said as such.
    let v = json(&espalier(&[
        "nic",
        "plan",
        "--json",
        "--sysfs",
        "tests/fixtures/awkward/sys",
    ]));
    assert_eq!(v["nics"][0]["node"], serde_json::Value::Null);
    assert!(v["nics"][0]["notes"][0]
        .as_str()
        .unwrap()
        .contains("spread over all nodes"));
    let bad = espalier(&[
        "nic",
        "plan",
        "--sysfs",
        "tests/fixtures/laptop/sys",
        "eth9",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&bad.stderr).lines().count(), 1);
}

#[test]
fn nic_apply_writes_a_fixture_copy_and_dry_run_does_not() {
    let dir = tempfile::tempdir().unwrap();
    common::copy_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/epyc2s"),
        dir.path(),
    );
    let sys = dir.path().join("sys");
    let irq = dir.path().join("proc/irq/300/smp_affinity_list");
    let rps = sys.join("class/net/eno1/queues/rx-0/rps_cpus");
    let out = espalier(&[
        "nic",
        "apply",
        "--dry-run",
        "--sysfs",
        sys.to_str().unwrap(),
        "eno1",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("would set"));
    assert_eq!(std::fs::read_to_string(&irq).unwrap(), "0\n");
    let v = json(&espalier(&[
        "nic",
        "apply",
        "--json",
        "--sysfs",
        sys.to_str().unwrap(),
        "eno1",
    ]));
    assert_eq!(
        v["changes"].as_array().unwrap().len(),
        2,
        "one IRQ and one RPS map; a single transmit queue gets no XPS"
    );
    assert_eq!(
        std::fs::read_to_string(&irq).unwrap(),
        "0\n",
        "eno1's only queue goes to CPU 0, node 0's first core"
    );
    assert_eq!(
        std::fs::read_to_string(&rps).unwrap().trim(),
        espalier::cpuset::CpuSet::parse("0-7,64-71")
            .unwrap()
            .to_mask()
    );
}

/// A network namespace for the test, removed however the test ends.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("espalier-test-{}", std::process::id());
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot create a network namespace (`ip netns add` needs root and iproute2): this test proves nic apply for real and cannot run without one");
        Netns(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .output()
            .unwrap()
    }

    fn sh(&self, script: &str) -> String {
        let o = self.run(&["sh", "-c", script]);
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn nic_apply_for_real_in_a_network_namespace_and_undo() {
    let ns = Netns::new();
    // v0: 4 queues each way; v1: a single queue, which gets RPS (fewer queues than cores)
    // when the machine has more than one core.
    let link = Command::new("ip")
        .args([
            "-n",
            &ns.0,
            "link",
            "add",
            "v0",
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            "v1",
            "numtxqueues",
            "1",
            "numrxqueues",
            "1",
        ])
        .status()
        .unwrap();
    assert!(link.success());
    let cores = std::thread::available_parallelism().unwrap().get();
    let exe = env!("CARGO_BIN_EXE_espalier");
    let out = ns.run(&[exe, "nic", "apply", "--json", "v0", "v1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = v["changes"].as_array().unwrap();
    assert!(changes.iter().all(|c| c["error"].is_null()), "{v}");
    // Every written file reads back as written.
    for c in changes {
        let path = c["path"].as_str().unwrap();
        let read = ns.sh(&format!("cat {path}"));
        let want = c["new"].as_str().unwrap();
        assert_eq!(
            read.trim_start_matches(['0', ',']),
            want.trim_start_matches(['0', ',']),
            "{path}"
        );
    }
    let xps: Vec<&serde_json::Value> = changes
        .iter()
        .filter(|c| c["path"].as_str().unwrap().contains("/v0/queues/tx-"))
        .collect();
    assert_eq!(
        xps.len(),
        cores.min(4),
        "one XPS map per transmit queue that gets a CPU"
    );
    let rps = changes.iter().any(|c| {
        c["path"]
            .as_str()
            .unwrap()
            .ends_with("/v1/queues/rx-0/rps_cpus")
    });
    assert_eq!(
        rps,
        cores > 1,
        "RPS only where a NIC has fewer queues than cores"
    );
    // The undo commands put every value back.
    for c in changes {
        ns.sh(c["undo"].as_str().unwrap());
        let path = c["path"].as_str().unwrap();
        let read = ns.sh(&format!("cat {path}"));
        let old = c["old"].as_str().unwrap();
        assert_eq!(
            read.trim_start_matches(['0', ',']),
            old.trim_start_matches(['0', ',']),
            "undo {path}"
        );
    }
}

#[test]
fn doctor_on_fixtures_and_on_this_machine() {
    let bad = espalier(&[
        "doctor",
        "--sysfs",
        "tests/fixtures/dl980/sys",
        "-c",
        "examples/hosting.toml",
    ]);
    assert_eq!(bad.status.code(), Some(1), "a badly tuned machine exits 1");
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(
        text.contains("[WARN] somaxconn")
            && text.contains("fix: sysctl -w net.core.somaxconn=1024"),
        "{text}"
    );
    assert!(
        text.contains("[WARN] numa_balancing"),
        "hosting.toml has hard-affinity pools: {text}"
    );
    let good = espalier(&["doctor", "--json", "--sysfs", "tests/fixtures/laptop/sys"]);
    assert_eq!(
        good.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&good.stdout)
    );
    let v: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["status"] != "warn"));
    // On this machine it runs and reports, whatever the machine's state.
    let live = espalier(&["doctor", "--json"]);
    assert!(matches!(live.status.code(), Some(0 | 1)));
    let v: serde_json::Value = serde_json::from_slice(&live.stdout).unwrap();
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["check"] == "somaxconn"));
}
