//! `espalier scale --quick` end to end with tiny durations: every output file, sane contents.

use std::process::Command;

#[test]
fn quick_scale_writes_every_output() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args([
            "scale",
            "--quick",
            "--duration",
            "300ms",
            "--warmup",
            "100ms",
            "--isolation",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");

    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
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
