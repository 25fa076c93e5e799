//! No panic on random input: arbitrary TOML into the config loader, arbitrary file contents
//! into the sysfs reader, and whatever comes out of either into the planner.

use crate::common;

use espalier::config::Config;
use espalier::placement;
use espalier::topology::{self, SysfsPaths};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .join("sys")
}

/// TOML built from the config's own vocabulary, so random documents reach validation.
fn config_text() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec![
        "name",
        "processes",
        "placement",
        "affinity",
        "unit",
        "cpus",
        "memory_policy",
        "cpu_limit",
        "bindings",
        "pool",
        "path",
        "handler",
        "root",
        "requests",
        "interval",
        "memory",
        "admin",
        "max_body_size",
        "bogus",
    ]);
    let value = prop::sample::select(vec![
        "\"p\"",
        "\"auto\"",
        "0",
        "-1",
        "4",
        "99999999999",
        "\"0-3\"",
        "\"3-1\"",
        "\"1-63\"",
        "\"most-free-memory\"",
        "\"hard\"",
        "\"l3\"",
        "\"50%\"",
        "[\"http://127.0.0.1:8080\"]",
        "[\"http://[::1]:80:h\"]",
        "\"/\"",
        "\"static\"",
        "\"5m\"",
        "\"2GiB\"",
        "true",
        "1.5",
        "[]",
        "{}",
        "\"\"",
    ]);
    let header = prop::sample::select(vec![
        "[[pool]]",
        "[[site]]",
        "[[site.app]]",
        "[server]",
        "[server.limits]",
        "[pool.recycle]",
        "[pool.rapid_fail]",
        "",
    ]);
    prop::collection::vec((header, prop::collection::vec((key, value), 0..5)), 0..8).prop_map(
        |sections| {
            let mut out = String::new();
            for (h, kvs) in sections {
                out.push_str(h);
                out.push('\n');
                for (k, v) in kvs {
                    out.push_str(&format!("{k} = {v}\n"));
                }
            }
            out
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn config_loader_never_panics_on_any_text(text in any::<String>()) {
        let t = topology::read(&SysfsPaths::at(fixture("dl980"), None)).unwrap();
        let _ = Config::parse(&text, Path::new("fuzz.toml"), &t);
    }

    #[test]
    fn config_vocabulary_validates_and_plans_without_panic(text in config_text()) {
        let t = topology::read(&SysfsPaths::at(fixture("awkward"), None)).unwrap();
        match Config::parse(&text, Path::new("fuzz.toml"), &t) {
            Ok(c) => { let _ = placement::plan(&t, &c.pools, &[]); }
            Err(e) => {
                // Every error is one line naming the file.
                for line in e.to_string().lines() {
                    prop_assert!(line.starts_with("fuzz.toml"), "{line}");
                }
            }
        }
    }

}

proptest! {
    // Each case copies a fixture tree; fewer cases keep the suite quick.
    #![proptest_config(ProptestConfig { cases: 60, ..ProptestConfig::default() })]

    #[test]
    fn sysfs_reader_never_panics_on_any_contents(
        picks in prop::collection::vec((0usize..10_000, prop::collection::vec(any::<u8>(), 0..40)), 1..25)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sys");
        common::copy_tree(&fixture("awkward"), &root);
        let mut files = Vec::new();
        list_files(&root, &mut files);
        files.sort();
        for (i, bytes) in &picks {
            std::fs::write(&files[i % files.len()], bytes).unwrap();
        }
        if let Ok(t) = topology::read(&SysfsPaths::at(root, None)) {
            let _ = topology::render::table(&t);
            let pool = espalier::config::PoolSpec::with_defaults("p");
            let _ = placement::plan(&t, &[pool], &[]);
        }
    }
}

fn list_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            list_files(&e.path(), out);
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
}
