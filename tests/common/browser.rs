//! A real browser for the tests that need one: Debian's Chromium, driven by playwright-core
//! from npm, both installed when missing.

use super::need_tools;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Chromium from Debian and playwright-core from npm (cached under target/).
///
/// Tests calling this run at once: one installs while the others wait, and the install goes
/// to a folder of its own renamed into place whole — a `node_modules/playwright-core` that
/// exists is always complete (a test once ran node against another's half-written install).
pub fn browser_tools() -> PathBuf {
    static INSTALL: Mutex<()> = Mutex::new(());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    need_tools(
        "chromium:chromium node:nodejs npm:npm",
        "Chromium and Node.js",
    );
    let dir = root.join("target/admin-page-node");
    let _one_at_a_time = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if !dir.join("node_modules/playwright-core").exists() {
        let fresh = root.join(format!("target/admin-page-node.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&fresh);
        std::fs::create_dir_all(&fresh).unwrap();
        let npm = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "playwright-core@1",
            ])
            .current_dir(&fresh)
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
        // A folder left by an install that stopped half-way is replaced.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&fresh, &dir).unwrap();
    }
    dir
}
