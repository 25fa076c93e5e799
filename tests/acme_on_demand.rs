//! Certificates ordered on demand (`[server.acme] on_demand = true`) from Debian's pebble: a
//! handshake for a name a site takes, without a certificate yet, is held while espalier
//! orders it, and completes with it; an `ask` service (tests/apps/acme_ask.py, a real
//! Python process) approves or refuses names no binding writes out; the in-flight and hourly
//! bounds refuse one more name at once. Every process a test starts, the test stops.

use crate::acme::{need_pebble, site_dir, Pebble};
use crate::common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// A `curl` of `https://NAME:PORT/` trusting `root` only, bounded generously (the handshake
/// may wait for an order).
fn curl(root: &Path, name: &str, port: u16) -> Command {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "90", "--http1.1", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/"));
    cmd
}

fn body(out: &Output) -> (i32, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// What the ask service was asked about so far.
fn asked(port: u16) -> String {
    get(SocketAddr::from(([127, 0, 0, 1], port)), "/asked", "").text()
}

/// The `ask` service (tests/apps/acme_ask.py) on `port`: approves names starting with `ok`.
fn ask_service(port: u16) -> Stopped {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/acme_ask.py");
    Stopped::listening(
        Command::new("/usr/bin/python3")
            .arg(script)
            .arg(port.to_string()),
        SocketAddr::from(([127, 0, 0, 1], port)),
    )
}

#[test]
fn a_first_handshake_waits_for_its_certificate_and_made_up_names_are_refused() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https, ask) = (free_port(), free_port(), free_port());
    let pebble = Pebble::start_with(d, (http, https), None, None);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/acme_ask.py");
    let _ask = Stopped::listening(
        Command::new("/usr/bin/python3")
            .arg(script)
            .arg(ask.to_string()),
        SocketAddr::from(([127, 0, 0, 1], ask)),
    );
    std::fs::create_dir(d.join("sites.d")).unwrap();
    // Names under *.od.test are approved by the ask service; exact.test is written out.
    let config = format!(
        "include = [\"sites.d/*.toml\"]\n[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nca = \"{}\"\non_demand = true\nask = \"http://127.0.0.1:{ask}/check\"\non_demand_in_flight = 2\non_demand_per_hour = 5\n\
         [[pool]]\nname = \"p\"\n\
         [[site]]\nname = \"wild\"\nbindings = [\"http://127.0.0.1:{http}\", \"https://127.0.0.1:{https}:*.od.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n\
         [[site]]\nname = \"exact\"\nbindings = [\"https://127.0.0.1:{https}:exact.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        pebble.directory,
        pebble.api_cert.display()
    );
    let server = Server::with_config(d, &config);
    pebble.root(&d.join("root.pem"));
    let root = d.join("root.pem");
    // Nothing is ordered at start: exact.test waits for its first handshake.
    server.wait_for_log(
        "acme: 1 name(s): 0 with a certificate in the store, 1 ordered at its first handshake",
        Duration::from_secs(30),
    );
    assert!(server
        .status()
        .certificates
        .iter()
        .any(|c| c.name == "exact.test" && c.state == "on demand"));
    // A written-out name (by TLS-ALPN-01: no http:// binding takes it) and one a wildcard
    // takes, approved by ask (by HTTP-01): each first handshake is held and completes.
    for name in ["exact.test", "ok1.od.test"] {
        let out = run_ok(&mut curl(&root, name, https));
        assert_eq!(
            body(&out),
            (0, "ordered by espalier\n".to_string()),
            "{name}"
        );
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(10),
        );
    }
    assert!(asked(ask).contains("ok1.od.test\n"));
    assert!(
        !asked(ask).contains("exact.test"),
        "a written-out name is not asked about"
    );
    // A made-up name the ask service refuses: the handshake fails, and the log says why.
    let refused = body(&curl(&root, "bad.od.test", https).output().unwrap());
    assert_ne!(refused.0, 0);
    server.wait_for_log(
        &format!("no certificate for `bad.od.test`: http://127.0.0.1:{ask}/check answered 403"),
        Duration::from_secs(10),
    );
    // Two names held by a slow ask fill the in-flight bound (2): a third is refused at once.
    let slow: Vec<_> = ["slow1.od.test", "slow2.od.test"]
        .iter()
        .map(|n| {
            let mut cmd = curl(&root, n, https);
            cmd.arg("-S").stdout(std::process::Stdio::piped());
            cmd.stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    wait_for(
        "both slow names asked about",
        Duration::from_secs(30),
        || {
            let a = asked(ask);
            a.contains("slow1.od.test\n") && a.contains("slow2.od.test\n")
        },
    );
    let third = body(&curl(&root, "ok2.od.test", https).output().unwrap());
    assert_ne!(third.0, 0, "refused while two are in flight");
    server.wait_for_log(
        "no certificate for `ok2.od.test`: 2 names are being ordered already (on_demand_in_flight)",
        Duration::from_secs(10),
    );
    get(SocketAddr::from(([127, 0, 0, 1], ask)), "/release", "");
    for child in slow {
        let out = child.wait_with_output().unwrap();
        let pebble_log = std::fs::read_to_string(d.join("pebble.log")).unwrap_or_default();
        assert_eq!(
            body(&out),
            (0, "ordered by espalier\n".to_string()),
            "{}\n{}\npebble:\n{pebble_log}",
            String::from_utf8_lossy(&out.stderr),
            server.log_text()
        );
    }
    // A site file added by reload: its name is ordered at its first handshake too.
    std::fs::write(
        d.join("sites.d/new.toml"),
        format!("[[site]]\nname = \"new\"\nbindings = [\"https://127.0.0.1:{https}:new.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n"),
    )
    .unwrap();
    let old = server.workers();
    espalier_ok(&["reload", "--admin", server.admin.as_deref().unwrap()]);
    // The old worker, which knows no new.test, serves until it is gone.
    server.wait_until("the old worker gone", Duration::from_secs(30), |s| {
        let gone = |pid: u32| !Path::new(&format!("/proc/{pid}")).exists();
        !s.workers().is_empty() && old.iter().all(|(_, pid, _)| gone(*pid))
    });
    let out = run_ok(&mut curl(&root, "new.test", https));
    assert_eq!(body(&out).1, "ordered by espalier\n");
    // Five orders this hour (exact, ok1, slow1, slow2, new): a sixth name is refused at once.
    let sixth = body(&curl(&root, "ok3.od.test", https).output().unwrap());
    assert_ne!(sixth.0, 0);
    server.wait_for_log(
        "no certificate for `ok3.od.test`: the hour's orders are spent (on_demand_per_hour)",
        Duration::from_secs(10),
    );
    // The names issued on demand are kept: in status, valid.
    server.wait_until("every issued name valid", Duration::from_secs(20), |s| {
        let shown = s.status().certificates;
        [
            "exact.test",
            "ok1.od.test",
            "slow1.od.test",
            "slow2.od.test",
            "new.test",
        ]
        .iter()
        .all(|n| shown.iter().any(|c| c.name == *n && c.state == "valid"))
    });
}

#[test]
fn a_restart_serves_names_ordered_on_demand_from_the_store() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https, admin, ask) = (free_port(), free_port(), free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    let _ask = ask_service(ask);
    // A wildcard's names, each approved by `ask` (which a wildcard needs: anyone may point a
    // name under it at the machine).
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:{admin}\"\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nca = \"{}\"\non_demand = true\nask = \"http://127.0.0.1:{ask}/check\"\n\
         [[pool]]\nname = \"p\"\n\
         [[site]]\nname = \"wild\"\nbindings = [\"http://127.0.0.1:{http}\", \"https://127.0.0.1:{https}:*.od.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        pebble.directory,
        pebble.api_cert.display()
    );
    pebble.root(&d.join("root.pem"));
    let root = d.join("root.pem");
    let http_at = SocketAddr::from(([127, 0, 0, 1], http));
    const STALE: &str = "/.well-known/acme-challenge/stale-token";
    let (inode, dead_runtime) = {
        let mut server = Server::with_config(d, &config);
        let out = run_ok(&mut curl(&root, "ok-a.od.test", https));
        assert_eq!(body(&out), (0, "ordered by espalier\n".to_string()));
        server.wait_for_log(
            "acme: ok-a.od.test: certificate issued",
            Duration::from_secs(10),
        );
        let inode = std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(d.join("store/ok-a.od.test.pem")).unwrap(),
        );
        // A file in the challenges' folder is answered while its master runs; a master
        // killed leaves it in its own runtime folder, which the next master does not use.
        let runtime = server.runtime_dir();
        let folder = runtime.join("acme");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("stale-token"),
            "a key authorization of no order",
        )
        .unwrap();
        let asked = get_host(http_at, "ok-a.od.test", STALE);
        assert_eq!(asked.status, 200, "{}", asked.text());
        assert_eq!(asked.text(), "a key authorization of no order");
        server.signal(libc::SIGKILL);
        server.wait_exit(Duration::from_secs(10));
        (inode, runtime)
    };
    let server = Server::with_config(d, &config);
    // The next start answers it not: no order of its runs.
    assert_ne!(server.runtime_dir(), dead_runtime);
    let asked = get_host(http_at, "ok-a.od.test", STALE);
    assert_eq!(asked.status, 404, "{}", asked.text());
    std::fs::remove_dir_all(&dead_runtime).unwrap();
    let out = run_ok(&mut curl(&root, "ok-a.od.test", https));
    assert_eq!(body(&out), (0, "ordered by espalier\n".to_string()));
    let now = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(d.join("store/ok-a.od.test.pem")).unwrap(),
    );
    assert_eq!(inode, now, "served from the store, not ordered again");
    assert!(!server
        .log_text()
        .contains("ok-a.od.test: asked for by a handshake; ordering it"));
    // A binding without a host takes names on demand only through `ask`: refused without,
    // and check says what it does with.
    let any = config
        .replace(":*.od.test\"]", "\"]")
        .replace(&format!("ask = \"http://127.0.0.1:{ask}/check\"\n"), "");
    let out = check_refuses(d, &any);
    assert!(
        out.contains(
            "or have names ordered as they are asked for ([server.acme] on_demand = true with ask)"
        ),
        "{out}"
    );
    let asking = any.replace(
        "on_demand = true\n",
        "on_demand = true\nask = \"http://127.0.0.1:9/check\"\n",
    );
    std::fs::write(d.join("any.toml"), asking).unwrap();
    let out = espalier(&["check", "-c", d.join("any.toml").to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("a name only its https binding without a host takes is ordered at its first handshake when http://127.0.0.1:9/check approves it"),
        "{said}"
    );
}

#[test]
fn check_refuses_on_demand_keys_that_cannot_act() {
    let dir = site_dir();
    let d = dir.path();
    let base = "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"https://acme.test/dir\"\n";
    let site = "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:8443:*.od.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n";
    for (keys, said) in [
        (
            "ask = \"http://127.0.0.1:5555/check\"\n",
            "key `server.acme.ask`: shapes on-demand ordering, which is off; add on_demand = true",
        ),
        (
            "on_demand_in_flight = 5\n",
            "key `server.acme.on_demand_in_flight`: shapes on-demand ordering, which is off",
        ),
        (
            "on_demand = true\nask = \"https://127.0.0.1/check\"\n",
            "key `server.acme.ask`: `https://127.0.0.1/check` is not an http:// URL",
        ),
        (
            "on_demand = true\nask = \"http://127.0.0.1:99999/check\"\n",
            "has `99999` for a port",
        ),
        (
            "on_demand = true\non_demand_per_hour = 0\n",
            "key `server.acme.on_demand_per_hour`: 0 must be a whole number above 0",
        ),
    ] {
        let out = check_refuses(d, &format!("{base}{keys}{site}"));
        assert!(out.contains(said), "{keys}: {out}");
    }
    // `ask` where every binding writes its name out: it would never be asked.
    let exact = site.replace(":*.od.test", ":a.od.test");
    let out = check_refuses(
        d,
        &format!("{base}on_demand = true\nask = \"http://127.0.0.1:5555/check\"\n{exact}"),
    );
    assert!(
        out.contains("key `server.acme.ask`: is asked only about names no binding writes out"),
        "{out}"
    );
    // A wildcard on demand without `ask`: anyone could have names under it ordered.
    let out = check_refuses(d, &format!("{base}on_demand = true\n{site}"));
    assert!(
        out.contains(
            "key `server.acme.on_demand`: would order a certificate for any name under `*.od.test`"
        ) && out.contains("add ask = \"URL\""),
        "{out}"
    );
    // Without on_demand a wildcard's names cannot be ordered: refused as before.
    let out = check_refuses(d, &format!("{base}{site}"));
    assert!(
        out.contains("no site has one (a wildcard is ordered with [server.acme.dns]"),
        "{out}"
    );
}

/// aioquic's client (tests/apps/h3_client.py) to `https://NAME:PORT/` over QUIC: the page,
/// or what it said when the handshake (or the request) failed.
fn over_quic(lib: &Path, name: &str, port: u16) -> Result<String, String> {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/h3_client.py");
    let out = Command::new("timeout")
        .args(["60", "python3"])
        .arg(&client)
        .args([&port.to_string(), "GET", "/"])
        .env("PYTHONPATH", lib)
        .env("H3_NAME", name)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(said + &String::from_utf8_lossy(&out.stderr));
    }
    let v: serde_json::Value =
        serde_json::from_str(said.trim()).map_err(|e| format!("{e}: {said}"))?;
    match v["status"].as_u64() {
        Some(200) => Ok(v["text"].as_str().unwrap_or_default().to_string()),
        _ => Err(said),
    }
}

/// A QUIC handshake cannot be held for its certificate (quinn asks rustls for it inside the
/// handshake, where nothing can wait): the first one for a name without a certificate fails,
/// but orders it, and the client's next one gets it — for a client that speaks only QUIC.
#[test]
fn a_first_quic_handshake_orders_its_certificate_for_the_next() {
    need_pebble();
    let Some(lib) = crate::http3::aioquic() else {
        skip("aioquic could not be installed from PyPI");
        return;
    };
    let dir = site_dir();
    let d = dir.path();
    let (http, https, ask) = (free_port(), free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    let _ask = ask_service(ask);
    let config = format!(
        "[server]\nhttp3 = true\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nca = \"{}\"\non_demand = true\nask = \"http://127.0.0.1:{ask}/check\"\n\
         [[pool]]\nname = \"p\"\n\
         [[site]]\nname = \"wild\"\nbindings = [\"http://127.0.0.1:{http}\", \"https://127.0.0.1:{https}:*.od.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        pebble.directory,
        pebble.api_cert.display()
    );
    let server = Server::with_config(d, &config);
    let first = over_quic(&lib, "ok-q.od.test", https);
    assert!(
        first.is_err(),
        "no certificate yet to answer with: {first:?}"
    );
    server.wait_for_log(
        "acme: ok-q.od.test: certificate issued",
        Duration::from_secs(60),
    );
    // The worker learns of the stored pair as of any (a `certificate` message): the next
    // handshake is answered once it has.
    wait_for(
        "an HTTP/3 answer for ok-q.od.test",
        Duration::from_secs(30),
        || over_quic(&lib, "ok-q.od.test", https).is_ok(),
    );
    let page = over_quic(&lib, "ok-q.od.test", https);
    assert_eq!(page.as_deref(), Ok("ordered by espalier\n"));
}
