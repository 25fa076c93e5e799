//! `espalier scale --quick` end to end with tiny runs (a count of responses per cell): every output file, sane contents.

use crate::common;

use std::process::Command;

/// `espalier scale --quick` with tiny runs and `extra` flags, into `out`: its results.json.
fn quick_scale(out: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["scale", "--quick", "--requests", "200", "--warmup", "100ms"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

#[test]
fn quick_scale_writes_every_output() {
    let out = tempfile::tempdir().unwrap();
    let results = quick_scale(out.path(), &["--isolation"]);
    let steps = results["plan"]["steps"].as_array().unwrap().len();
    let rows = results["rows"].as_array().unwrap();
    assert_eq!(rows.len(), steps * 3, "one row per configuration per step");
    for row in rows {
        assert!(row["rps"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["errors"], 0, "{row}");
        assert!(row["workers"].as_u64().unwrap() >= 1);
    }
    // Hosting runs one worker per unit; the default configuration one worker.
    let last = results["plan"]["steps"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap();
    let workers = |c: &str| {
        rows.iter()
            .find(|r| r["configuration"] == c && r["units"].as_u64() == Some(last))
            .unwrap()["workers"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(workers("hosting"), last);
    assert_eq!(workers("garden"), last);
    assert_eq!(workers("default"), 1);
    let iso = &results["isolation"];
    assert!(
        iso["pool_b_masked"]["p50"].as_f64().unwrap() > 0.0
            && iso["pool_a_rps_masked"].as_f64().unwrap() > 0.0
    );

    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    for needle in [
        "| Hosting (N pools × 1 process) |",
        "| Web garden (1 pool × N processes) |",
        "| Default (1 pool × 1 process) |",
        "+67 %",
        "chart-static.svg",
        "Isolation",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle:?}:\n{md}");
    }
    let svg = std::fs::read_to_string(out.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<polyline").count(),
        3,
        "one line per configuration"
    );
    assert!(
        svg.contains(">server CPUs<") && svg.contains(">requests/s<"),
        "axes are labelled"
    );
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(
        html.contains("<table>")
            && html.contains("<svg")
            && html.contains("The case study, for reference")
    );
    // Balanced tags: the SVG is well formed enough for a browser.
    assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
}

#[test]
fn target_mode_merges_steps_measured_against_servers_started_by_hand() {
    let out = tempfile::tempdir().unwrap();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("100.html"), "x".repeat(100)).unwrap();
    for (units, cpus) in [(1, "0"), (2, "0-1")] {
        // The "remote" server for this step, started by hand with its CPUs restricted.
        let port = common::free_port();
        let config = format!(
            "[[pool]]\nname = \"garden\"\nprocesses = {units}\ncpus = \"{cpus}\"\n\
             [[site]]\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"{}\"\n[[site.app]]\npool = \"garden\"\n",
            www.path().display()
        );
        let _server = common::Server::with_config(www.path(), &config);
        let run = Command::new(env!("CARGO_BIN_EXE_espalier"))
            .args([
                "scale",
                "--quick",
                "--requests",
                "200",
                "--warmup",
                "0s",
                "--configuration",
                "garden",
                "--unit-kind",
                "core",
            ])
            .args([
                "--units",
                &units.to_string(),
                "--server-cpus",
                &units.to_string(),
                "--target",
                &format!("http://127.0.0.1:{port}"),
                "--out",
            ])
            .arg(out.path())
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(results["plan"]["steps"], serde_json::json!([1, 2]));
    let rows = results["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r["configuration"] == "garden"
        && r["rps"].as_f64().unwrap() > 0.0
        && r["errors"] == 0));
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        md.contains("`--target` mode")
            && md.contains("| Web garden (1 pool × N processes) |")
            && md.contains("1 → 2"),
        "{md}"
    );
}

#[test]
fn quick_scale_runs_over_tls_in_http2() {
    let out = tempfile::tempdir().unwrap();
    let results = quick_scale(
        out.path(),
        &["--tls", "--h2", "--configs", "garden,default"],
    );
    assert_eq!(results["transport"]["tls"], true);
    assert_eq!(results["transport"]["h2"], true);
    // The load generator refuses a server that does not offer h2 by ALPN, and a certificate
    // other than the run's: answers without errors mean HTTP/2 over TLS was spoken.
    let rows = results["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert!(row["rps"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(row["errors"], 0, "{row}");
    }
    let report = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("HTTP/2 over TLS"), "{report}");
    // Each cell measured the responses asked for, not a time.
    assert!(report.contains("over 200 responses"), "{report}");
}

#[test]
fn a_count_of_no_responses_is_refused_in_one_line() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let run = common::espalier(&["scale", "--quick", "--requests", "0", "--out", dir]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert!(
        stderr.contains("--requests: give the responses each run measures, 1 or more"),
        "{stderr}"
    );
    assert!(!out.path().join("results.json").exists());
    // A count and a duration cannot both say when a cell ends.
    let both = common::espalier(&[
        "scale",
        "--quick",
        "-n",
        "5",
        "--duration",
        "1s",
        "--out",
        dir,
    ]);
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(!both.status.success(), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    assert!(!out.path().join("results.json").exists());
}
