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

/// One table of the admin page at `admin` read in Chromium (`tests/admin_page/table.js`,
/// run with `prefix` before it — `nsenter` into a namespace — or nothing): once a row `rows`
/// whose data-state is `state` is drawn, the rows and whether the heading `title` shows, as
/// JSON, checked to have no error; a screenshot written to `shot`.
pub fn admin_table(
    prefix: &[&str],
    admin: &str,
    (rows, state, title): (&str, &str, &str),
    shot: &Path,
) -> serde_json::Value {
    let node_dir = browser_tools();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(shot.parent().unwrap()).unwrap();
    let mut argv: Vec<&str> = prefix.to_vec();
    argv.push("node");
    let driven = Command::new(argv[0])
        .args(&argv[1..])
        .arg(root.join("tests/admin_page/table.js"))
        .args([admin, rows, state, title])
        .arg(shot)
        .env("NODE_PATH", node_dir.join("node_modules"))
        .output()
        .expect("node");
    let text = String::from_utf8_lossy(&driven.stdout);
    let seen: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&driven.stderr)));
    assert!(seen["error"].is_null(), "{seen}");
    seen
}
