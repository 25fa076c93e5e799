//! Helpers shared by the unit tests: loading the sysfs fixtures under `tests/fixtures/`.
//! Owns: fixture paths. Must not touch: anything outside tests.

use crate::topology::{self, SysfsPaths, Topology};
use std::path::PathBuf;

/// The fixture tree `name` (`dl980`, `epyc2s`, `laptop`, `awkward`, `nonuma`).
pub fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .join("sys")
}

pub fn fixture(name: &str) -> Topology {
    topology::read(&SysfsPaths::at(fixture_dir(name), None))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}
