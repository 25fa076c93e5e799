//! A real browser for the tests that need one: Debian's Chromium, driven by playwright-core
//! from npm, both installed when missing.

use super::need_tools;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium from Debian and playwright-core from npm (cached under target/).
pub fn browser_tools() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    need_tools(
        "chromium:chromium node:nodejs npm:npm",
        "Chromium and Node.js",
    );
    let dir = root.join("target/admin-page-node");
    if !dir.join("node_modules/playwright-core").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let npm = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "playwright-core@1",
            ])
            .current_dir(&dir)
            .output()
            .expect("npm");
        assert!(
            npm.status.success(),
            "cannot install playwright-core from npm: {}",
            String::from_utf8_lossy(&npm.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    dir
}
