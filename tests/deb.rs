//! The Debian package, built the way the README says (`cargo deb`): what it holds, and its
//! default config served by the packaged binary — one worker per node, as www-data, the
//! welcome page, the access log. Installs cargo-deb from crates.io when it is missing.
//!
//! Packaged from the dev profile (`--profile dev`), not the release one users get: what this
//! checks is the packaging — its files, unit, config and user — which the profile does not
//! change, and a release build from cold (fat LTO, one codegen unit) took a third of the CI's
//! fifteen minutes on two cores. It packages the binary `cargo test` has already built
//! (`--no-build`): a `cargo build` from here compiles the whole crate again (a test build
//! resolves its dependencies' features with the dev-dependencies', a plain build without),
//! which made this the suite's longest test (199 s, 75 of them compiling). `--fast`: the
//! package is read once, by this test.

use crate::common;

use common::*;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const CARGO_DEB: &str = "3.8.0";

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn need_cargo_deb() {
    let has = Command::new("cargo")
        .args(["deb", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        run(Command::new("cargo").args([
            "install",
            "cargo-deb",
            "--version",
            CARGO_DEB,
            "--locked",
            "--quiet",
        ]));
    }
}

#[test]
fn the_package_installs_a_server_that_serves_its_default_site() {
    need_tools("dpkg-deb:dpkg", "dpkg-deb");
    need_cargo_deb();
    let out = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let printed = run(Command::new("cargo")
        .args([
            "deb",
            "--profile",
            "dev",
            "--no-build",
            "--fast",
            "--quiet",
            "-o",
        ])
        .arg(out.path())
        .current_dir(root));
    let deb = out.path().join(
        std::fs::read_dir(out.path())
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".deb"))
            .unwrap_or_else(|| panic!("no .deb from cargo deb: {printed}"))
            .file_name(),
    );

    let field = |f: &str| run(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(f));
    assert_eq!(field("Package").trim(), "espalier");
    assert_eq!(field("Section").trim(), "httpd");
    assert!(field("Depends").contains("libc6"));
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for path in [
        "./usr/bin/espalier",
        "./usr/lib/systemd/system/espalier.service",
        "./usr/lib/systemd/system/espalier-listen.socket",
        "./etc/espalier/espalier.toml",
        "./etc/logrotate.d/espalier",
        "./var/www/html/index.espalier.html",
        "./usr/share/doc/espalier/README.md",
        "./usr/share/doc/espalier/docs/fleet.md",
        "./usr/share/doc/espalier/docs/reference.md",
        "./usr/share/doc/espalier/docs/guide/pools.md",
    ] {
        assert!(listing.contains(path), "{path} missing:\n{listing}");
    }
    let control = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(control.path()));
    let conffiles = std::fs::read_to_string(control.path().join("conffiles")).unwrap();
    assert!(
        conffiles.contains("/etc/espalier/espalier.toml"),
        "{conffiles}"
    );
    let postinst = std::fs::read_to_string(control.path().join("postinst")).unwrap();
    assert!(postinst.contains("install -d -m 0755 -o root -g adm /var/log/espalier"));
    assert!(postinst.contains("deb-systemd-helper enable espalier.service"));
    // An upgrade takes the new binary up in place, and does not restart the service.
    assert!(postinst.contains("/usr/bin/espalier upgrade -c /etc/espalier/espalier.toml"));
    assert!(
        !postinst.contains("deb-systemd-invoke restart"),
        "{postinst}"
    );
    let prerm = std::fs::read_to_string(control.path().join("prerm")).unwrap_or_default();
    assert!(
        !prerm.contains("deb-systemd-invoke stop") || prerm.contains("[ \"$1\" = remove ]"),
        "the service is stopped at removal only: {prerm}"
    );
    assert!(
        !postinst.contains("espalier-listen.socket"),
        "socket activation is optional: the package must not enable it"
    );

    // The packaged binary serves the packaged config: only its port, admin port and the
    // folders it names are moved into the test's own.
    let fs = tempfile::tempdir().unwrap();
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(fs.path()));
    let unit =
        std::fs::read_to_string(fs.path().join("usr/lib/systemd/system/espalier.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/espalier serve -c /etc/espalier/espalier.toml"));
    let packaged = std::fs::read_to_string(fs.path().join("etc/espalier/espalier.toml")).unwrap();
    let port = free_port();
    let admin = free_port();
    let html = fs.path().join("var/www/html");
    let logs = fs.path().join("var/log/espalier");
    std::fs::create_dir_all(&logs).unwrap();
    for dir in [
        fs.path(),
        &fs.path().join("var"),
        &fs.path().join("var/log"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let config = packaged
        .replace("http://*:80", &format!("http://127.0.0.1:{port}"))
        .replace("127.0.0.1:9180", &format!("127.0.0.1:{admin}"))
        .replace("/var/www/html", &html.display().to_string())
        .replace("/var/log/espalier", &logs.display().to_string());
    assert_ne!(config, packaged);
    let conf_path = fs.path().join("etc/espalier/espalier.toml");
    std::fs::write(&conf_path, &config).unwrap();
    let binary = fs.path().join("usr/bin/espalier");
    let checked = run(Command::new(&binary).arg("check").arg("-c").arg(&conf_path));
    assert!(checked.contains(": ok"), "{checked}");

    let mut server = std::process::Command::new(&binary)
        .args(["serve", "-c"])
        .arg(&conf_path)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut page = None;
    for _ in 0..200 {
        if let Ok(mut c) = std::net::TcpStream::connect(addr) {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            use std::io::{Read, Write};
            c.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut text = String::new();
            let _ = c.read_to_string(&mut text);
            page = Some(text);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let www_data = espalier::os::identity::lookup("www-data", None).unwrap();
    let worker_owners: Vec<Option<u32>> = status_json(&format!("127.0.0.1:{admin}"))["pools"][0]
        ["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["pid"].as_u64())
        .map(|pid| {
            std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid())
        })
        .collect();
    let log = logs.join("access.log");
    let log_owner = std::fs::metadata(&log).map(|m| m.uid());
    espalier::os::process::kill(server.id(), libc::SIGTERM).unwrap();
    let _ = server.wait();

    let page = page.expect("the packaged server answers");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("Welcome to espalier"), "{page}");
    assert!(!worker_owners.is_empty());
    assert!(
        worker_owners.iter().all(|&o| o == Some(www_data.uid)),
        "the packaged config runs its workers as www-data: {worker_owners:?}"
    );
    assert_eq!(log_owner.unwrap(), www_data.uid);
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .contains("\"GET / HTTP/1.1\" 200"));
}
