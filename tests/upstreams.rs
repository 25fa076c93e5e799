//! Upstream groups: servers espalier did not start, real Python servers on 127.0.0.2–.4,
//! reached through `[[upstream]]` — the split by weight, a killed server's GETs retried, a
//! POST never repeated once sent, a stopped server taken out and back, every server down, a
//! hash key across a reload, a reload under load. The rest (TLS, names, sticky cookies,
//! HTTP/2 clients, WebSocket, `check`) is in `upstreams_more.rs`.

use crate::common::backends::*;
use crate::common::*;
use std::time::Duration;

#[test]
fn round_robin_follows_the_weights_and_a_killed_servers_gets_are_sent_elsewhere() {
    let (dir, a, mut b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{} weight=1\", \"{} weight=2\"]\nbalance = \"round_robin\"\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    // Each server runs here: its node is found from its process's CPUs, as the status says.
    let topology =
        espalier::topology::sysfs::read(&espalier::topology::sysfs::SysfsPaths::live()).unwrap();
    let cpus = espalier::os::numa::thread_affinity(a.child.id() as i32).unwrap();
    let node = espalier::server::upstream_nodes::node_of(&cpus, &topology);
    assert!(node.is_some() || topology.nodes.len() > 1);
    let status = server.status();
    assert_eq!(status.upstreams[0].servers[0].node, node, "{status:?}");
    let names: Vec<String> = (0..300).map(|_| served_by(addr, "/x", "")).collect();
    // Each thread keeps the weights exactly over every three of its picks.
    let (na, nb) = (count(&names, "a"), count(&names, "b"));
    assert_eq!(na + nb, 300, "{names:?}");
    assert!((96..=104).contains(&na), "a {na}, b {nb}");

    // b dies: no GET fails — a refused connection is tried on a.
    b.kill();
    let after: Vec<String> = (0..60).map(|_| served_by(addr, "/y", "")).collect();
    assert_eq!(count(&after, "a"), 60, "{after:?}");
    server.wait_for_log(
        "ejected for 10s after 5 failures in a row",
        Duration::from_secs(10),
    );
    let log = server.log_text();
    assert!(
        log.contains(&format!("upstream `api`: server {}", b.addr)),
        "{log}"
    );
    // The worker tells the master at its next ping: /status shows it.
    server.wait_until("b shown ejected", Duration::from_secs(10), |s| {
        s.status().upstreams[0].servers[1].ejected_by == 1
    });
    assert_eq!(server.status().upstreams[0].servers[0].ejected_by, 0);
}

#[test]
fn a_post_is_never_repeated_once_sent_and_an_idempotent_get_is_sent_once_more() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    // /drop reads the request and closes without a byte of answer.
    let mut post = Conn::open(addr);
    post.send(b"POST /drop HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    let r = post.read_response(false).expect("an answer");
    assert_eq!(r.status, 502);
    let posts = |b: &Backend| b.requests().iter().filter(|l| *l == "POST /drop").count();
    assert_eq!(posts(&a) + posts(&b), 1, "the POST reached one server once");

    let r = get(addr, "/drop", "");
    assert_eq!(r.status, 502);
    let gets = |b: &Backend| b.requests().iter().filter(|l| *l == "GET /drop").count();
    assert_eq!(
        (gets(&a), gets(&b)),
        (1, 1),
        "the GET was sent once more, elsewhere"
    );
    let log = server.log_text();
    assert!(
        log.contains("answered 502: server")
            && log.contains("of upstream `api` closed the connection without answering"),
        "{log}"
    );
}

#[test]
fn a_stopped_server_is_taken_out_and_comes_back_after_its_checks_pass() {
    let (dir, a, b) = two_backends();
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\", \"{}\"]\nbalance = \"round_robin\"\nresponse_timeout = \"1s\"\n[upstream.passive]\nfailures = 2\n[upstream.health]\npath = \"/health\"\ninterval = \"300ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2\n",
        a.addr, b.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    let state = |s: &Server, k: usize| s.status().upstreams[0].servers[k].state.clone();
    server.wait_until("both servers checked up", Duration::from_secs(10), |s| {
        state(s, 0) == "up" && state(s, 1) == "up"
    });

    // b stops answering (SIGSTOP: its socket still completes handshakes).
    b.signal(libc::SIGSTOP);
    server.wait_until("b checked down", Duration::from_secs(20), |s| {
        state(s, 1) == "down"
    });
    let names: Vec<String> = (0..40).map(|_| served_by(addr, "/z", "")).collect();
    assert_eq!(count(&names, "a"), 40, "{names:?}");
    server.wait_for_log(
        "is down: the health check of /health failed (no answer within",
        Duration::from_secs(5),
    );

    b.signal(libc::SIGCONT);
    server.wait_until("b checked up again", Duration::from_secs(20), |s| {
        state(s, 1) == "up"
    });
    server.wait_for_log("is up: 2 checks passed in a row", Duration::from_secs(5));
    // Back in the rotation (once an ejection by this thread's timeouts, if any, ran out).
    let mut back = false;
    wait_for("b to serve again", Duration::from_secs(30), || {
        back |= served_by(addr, "/w", "") == "b";
        back
    });
}

#[test]
fn every_server_down_still_takes_traffic_and_every_server_failing_is_a_502_naming_the_group() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start(dir.path(), "127.0.0.2", "a");
    let (config, addr) = front(&format!(
        "[[upstream]]\nname = \"api\"\nservers = [\"{}\"]\n[upstream.health]\npath = \"/health\"\ninterval = \"300ms\"\n",
        a.addr
    ));
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(served_by(addr, "/", ""), "a");
    std::fs::write(dir.path().join("a.record.sick"), "").unwrap();
    server.wait_until("a checked down", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers[0].state == "down"
    });
    // Every server out by its check: traffic goes to all of them rather than to none (a
    // check that fails against servers that answer must not take the site down).
    assert_eq!(served_by(addr, "/", ""), "a");
    server.wait_for_log(
        "every server of upstream `api` is out (1 servers: 1 down by the health check, 0 ejected after failures): sending to all of them",
        Duration::from_secs(5),
    );
    assert_eq!(
        server.status().upstreams[0].servers[0]
            .last_failure
            .as_deref(),
        Some("answered 503")
    );
    // The same in /metrics and `espalier status`.
    let admin = server.admin.clone().unwrap();
    let (_, metrics) =
        espalier::server::admin::request(admin.parse().unwrap(), "GET", "/metrics").unwrap();
    let metrics = String::from_utf8_lossy(&metrics).to_string();
    let series = format!(
        "espalier_upstream_server_up{{upstream=\"api\",server=\"{}\"}} 0",
        a.addr
    );
    assert!(metrics.contains(&series), "{metrics}");
    let table = espalier_ok(&["status", "--admin", &admin]);
    assert!(
        table.contains("UPSTREAMS")
            && table.contains(&a.addr.to_string())
            && table.contains("down")
            && table.contains("last failure: answered 503"),
        "{table}"
    );
    drop(a);
    drop(server);

    // Without checks, servers that refuse: 502, with each server's cause.
    let (config, addr) =
        front("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.2:1\", \"127.0.0.3:1\"]\n");
    let server = Server::with_config(dir.path(), &config);
    assert_eq!(get(addr, "/", "").status, 502);
    let log = server.wait_for_log(
        "answered 502: upstream `api` could not be reached",
        Duration::from_secs(5),
    );
    assert!(
        log.contains("127.0.0.2:1: connect failed") && log.contains("127.0.0.3:1: connect failed"),
        "{log}"
    );
}

#[test]
fn a_hash_key_keeps_its_server_when_a_reload_removes_another() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Backend> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(k, name)| Backend::start(dir.path(), &format!("127.0.0.{}", k + 2), name))
        .collect();
    let (a, b, c) = (&servers[0], &servers[1], &servers[2]);
    let hashed = "hash header:X-User";
    let (config, addr) = front(&group(&[a, b, c], hashed));
    let server = Server::with_config(dir.path(), &config);
    let user = |k: usize| format!("X-User: user-{k}\r\n");
    let before: Vec<String> = (0..60).map(|k| served_by(addr, "/", &user(k))).collect();
    for (k, name) in before.iter().enumerate() {
        assert_eq!(&served_by(addr, "/again", &user(k)), name, "user-{k}");
    }
    assert!(
        ["a", "b", "c"].iter().all(|n| count(&before, n) > 5),
        "{before:?}"
    );

    // c leaves the group.
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[a, b], hashed), addr),
    );
    server.wait_until("the reload done", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 2
    });
    server.wait_for_log("1 changed or new", Duration::from_secs(20));
    // The old worker drains: wait until the new one answers every request.
    wait_for("c out of every answer", Duration::from_secs(20), || {
        (0..10).all(|_| served_by(addr, "/", &user(0)) != "c")
            && before
                .iter()
                .enumerate()
                .filter(|(_, n)| *n == "c")
                .all(|(k, _)| served_by(addr, "/", &user(k)) != "c")
    });
    for (k, name) in before.iter().enumerate() {
        let now = served_by(addr, "/", &user(k));
        if name == "c" {
            assert!(now == "a" || now == "b", "user-{k}: {now}");
        } else {
            assert_eq!(&now, name, "user-{k} moved though its server stayed");
        }
    }
}

#[test]
fn a_reload_adding_and_removing_servers_under_load_fails_no_request() {
    let (dir, a, b) = two_backends();
    let c = Backend::start(dir.path(), "127.0.0.4", "c");
    let (config, addr) = front(&group(&[&a, &b], "round_robin"));
    let server = Server::with_config(dir.path(), &config);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Counter::default();
    let load = {
        let (stop, answered) = (stop.clone(), answered.clone());
        std::thread::spawn(move || {
            let (mut failures, mut names) = (Vec::new(), Vec::new());
            let mut conn = Conn::open(addr);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let request = b"GET /load HTTP/1.1\r\nHost: x\r\n\r\n";
                conn.send(request);
                let mut answer = conn.read_response(false);
                if answer.is_none() {
                    // A kept-alive connection closed as the request went out (a draining
                    // worker's): a GET is sent again on a new one, as every client does.
                    conn = Conn::open(addr);
                    conn.send(request);
                    answer = conn.read_response(false);
                }
                match answer {
                    Some(r) if r.status == 200 => {
                        names.push(r.header("x-server").unwrap_or_default().to_string());
                        answered.bump();
                        if r.header("connection") == Some("close") {
                            conn = Conn::open(addr);
                        }
                    }
                    Some(r) => failures.push(format!("status {}", r.status)),
                    None => failures.push("no answer".into()),
                }
            }
            (failures, names)
        })
    };
    answered.wait_more(50, "the load to run");
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[&a, &b, &c], "round_robin"), addr),
    );
    server.wait_until("c in the group", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 3
    });
    answered.wait_more(100, "the load to go on after the first reload");
    reload(
        &server,
        dir.path(),
        &front_at(&group(&[&b, &c], "round_robin"), addr),
    );
    server.wait_until("a out of the group", Duration::from_secs(20), |s| {
        s.status().upstreams[0].servers.len() == 2
    });
    answered.wait_more(100, "the load to go on after the second reload");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (failures, names) = load.join().unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(count(&names, "c") > 0, "c never served");
    // Once the old workers are gone, a gets nothing.
    server.wait_for_log("0 removed", Duration::from_secs(5));
    wait_for("a out of every answer", Duration::from_secs(20), || {
        (0..6).all(|_| served_by(addr, "/after", "") != "a")
    });
}
