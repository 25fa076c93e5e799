//! Placement proved on a real multi-node kernel: `tests/qemu/run.sh` boots Debian's kernel under
//! QEMU as a 4-node machine and runs espalier in it; this test reads its verdicts. The same
//! guest proves kTLS, which this project's CI host kernel lacks (its `tls` module). A machine
//! that cannot run QEMU fails this test loudly rather than passing it silently.

use std::process::Command;

#[test]
fn placement_on_an_emulated_four_node_machine() {
    let root = env!("CARGO_MANIFEST_DIR");
    // The guest runs the espalier this `cargo test` built (run.sh copies it in with its
    // libraries) rather than a static build of its own: a second build of the crate.
    let out = Command::new("bash")
        .arg("tests/qemu/run.sh")
        .env("ESPALIER_GUEST_BIN", env!("CARGO_BIN_EXE_espalier"))
        .current_dir(root)
        .output()
        .expect("bash runs the harness");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(3) => panic!(
            "this machine cannot run the QEMU harness: {}",
            stderr.lines().last().unwrap_or("")
        ),
        code => panic!(
            "the harness failed ({code:?}):\n{stdout}\n{}",
            stderr.lines().rev().take(15).collect::<Vec<_>>().join("\n")
        ),
    }
    let verdicts: Vec<(&str, bool, &str)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ESPALIER-CHECK "))
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((
                parts.next()?,
                parts.next()? == "PASS",
                parts.next().unwrap_or(""),
            ))
        })
        .collect();
    let expected = [
        "topology",
        "most-free-memory",
        "hosting-spreads",
        "garden-workers",
        "garden-placement-garden/0",
        "garden-placement-garden/1",
        "garden-placement-garden/2",
        "garden-placement-garden/3",
        "steering",
        "quic-steering",
        "hard-under-load",
        "soft-widens",
        "soft-narrows",
        "proxy-apps",
        "proxy-same-node",
        "cache-per-node",
        "proxy-fallback",
        "shared-port-locality",
        "cgroup-v2",
        "ktls-tls13",
        "ktls-suites",
        "ktls-h2-and-close",
    ];
    for name in expected {
        let v = verdicts
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("no verdict for {name}:\n{stdout}"));
        assert!(v.1, "{name} failed in the guest: {}\n{stdout}", v.2);
    }
}
