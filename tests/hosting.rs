//! One address, many pools (HTTP.sys's routing of a port to application pools by host and
//! path), on loopback with the real binary: every request answered by its site's pool, mixed
//! hosts on one keep-alive connection, the default site, 421 (and for another pool's stream
//! on an HTTP/2 connection), the same-CPU rule with pinned
//! clients, a rapid-failed pool's sites answering 503 while the others serve, and reloads
//! that move, add and remove sites under load without a failed request on the other hosts.

use crate::common;

use common::apps::need_runtimes;
use common::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The worker that answered: `pool/index/cpuN`.
fn worker(r: &Response) -> String {
    r.header("x-espalier-worker").unwrap_or("-").to_string()
}

fn pool_of(r: &Response) -> String {
    worker(r).split('/').next().unwrap_or("-").to_string()
}

/// Four sites on one port by host, each with its own pool (static, dynamic, cpu, and a
/// gunicorn app behind the proxy), a fifth split by path over two pools, and a second address
/// without a default site.
fn hosting_config(www: &str, port: u16, other: u16) -> String {
    format!(
        r#"[server]
worker_header = true

[[pool]]
name = "files"
[[pool]]
name = "pages"
processes = 2
[[pool]]
name = "calc"
[[pool]]
name = "wsgi"
command = ["gunicorn", "--workers", "1", "--bind", "127.0.0.1:{{port}}", "app:app"]
directory = "wsgi"
health = "/healthz"

[[site]]
name = "shop"
bindings = ["http://127.0.0.1:{port}:shop.example", "http://127.0.0.1:{other}:shop.example"]
root = "{www}"
[[site.app]]
pool = "files"

[[site]]
name = "blog"
bindings = ["http://127.0.0.1:{port}:blog.example", "http://127.0.0.1:{port}:*.blog.example"]
[[site.app]]
pool = "pages"
handler = "dynamic"

[[site]]
name = "math"
bindings = ["http://127.0.0.1:{port}:math.example"]
[[site.app]]
pool = "calc"
handler = "cpu"

[[site]]
name = "py"
bindings = ["http://127.0.0.1:{port}:py.example"]
[[site.app]]
pool = "wsgi"

[[site]]
name = "portal"
bindings = ["http://127.0.0.1:{port}"]
root = "{www}"
[[site.app]]
pool = "files"
[[site.app]]
path = "/api"
pool = "pages"
handler = "dynamic"
"#
    )
}

struct Hosting {
    server: Server,
    addr: SocketAddr,
    other: SocketAddr,
    dir: tempfile::TempDir,
}

fn start_hosting() -> Hosting {
    need_runtimes();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/apps"),
        dir.path(),
    );
    std::fs::create_dir_all(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "hello\n").unwrap();
    let (port, other) = (free_port(), free_port());
    let config = hosting_config(dir.path().join("www").to_str().unwrap(), port, other);
    let server = Server::with_config(dir.path(), &config);
    Hosting {
        server,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        other: SocketAddr::from(([127, 0, 0, 1], other)),
        dir,
    }
}

#[test]
fn each_host_and_path_is_answered_by_its_own_pool() {
    let h = start_hosting();
    let cases = [
        ("shop.example", "/", "files", 200),
        ("SHOP.Example.:8080", "/", "files", 200),
        ("blog.example", "/", "pages", 200),
        ("www.blog.example", "/x", "pages", 200),
        ("a.b.blog.example", "/", "pages", 200),
        ("math.example", "/cpu?n=1000", "calc", 200),
        ("py.example", "/", "wsgi", 200),
        // The default site, by path: its files in one pool, its /api in another.
        ("nobody.example", "/", "files", 200),
        ("nobody.example", "/api/v1", "pages", 200),
        ("blog.example.example", "/api", "pages", 200),
    ];
    for (name, path, pool, status) in cases {
        let r = get_host(h.addr, name, path);
        assert_eq!(
            (r.status, pool_of(&r)),
            (status, pool.to_string()),
            "Host: {name} {path}: {:?}",
            r.headers
        );
    }
    // The second address has no default site: 421, from whichever pool accepted it.
    let r = get_host(h.other, "blog.example", "/");
    assert_eq!(r.status, 421, "{:?}", r.headers);
    assert_eq!(pool_of(&get_host(h.other, "shop.example", "/")), "files");

    // Mixed hosts on one keep-alive connection, one at a time and pipelined: each request
    // is answered by its own pool, in order, on the same connection.
    let mut c = Conn::open(h.addr);
    for name in [
        "shop.example",
        "blog.example",
        "math.example",
        "py.example",
        "shop.example",
    ] {
        c.send(format!("GET / HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes());
        let r = c
            .read_response(false)
            .expect("an answer on the same connection");
        let want = match name {
            "shop.example" => "files",
            "blog.example" => "pages",
            "math.example" => "calc",
            _ => "wsgi",
        };
        assert_eq!(pool_of(&r), want, "{name}");
    }
    let mut pipelined = Vec::new();
    for name in [
        "blog.example",
        "shop.example",
        "blog.example",
        "math.example",
    ] {
        pipelined.extend_from_slice(format!("GET / HTTP/1.1\r\nHost: {name}\r\n\r\n").as_bytes());
    }
    c.send(&pipelined);
    let pools: Vec<String> = (0..4)
        .map(|_| pool_of(&c.read_response(false).expect("a pipelined answer")))
        .collect();
    assert_eq!(pools, ["pages", "files", "pages", "calc"]);

    // The status says which sites share which address.
    let status = h.server.status();
    let shared = status
        .addresses
        .iter()
        .find(|a| a.address == format!("http://{}", h.addr))
        .expect("the shared address in the status");
    assert!(shared.shared);
    let portal = shared.sites.iter().find(|s| s.site == "portal").unwrap();
    assert_eq!(
        (portal.host.as_deref(), portal.pools.clone()),
        (None, vec!["files".to_string(), "pages".to_string()])
    );
    let out = espalier(&["status", "--admin", h.server.admin.as_deref().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SHARED ADDRESSES") && text.contains("*.blog.example"),
        "{text}"
    );
    drop(h.dir);
}

/// Runs `f` on a thread pinned to `cpu` (its connections are received on that CPU).
fn on_cpu<T: Send + 'static>(cpu: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
                0
            );
        }
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn a_connection_is_served_on_the_cpu_that_received_it() {
    // Pool `one` has a thread on every CPU; pool `each` one process per CPU. Whichever pool's
    // thread accepts, the request is served by its pool's thread on the client's CPU.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        r#"[server]
worker_header = true
[[pool]]
name = "one"
[[pool]]
name = "each"
processes = 2
affinity = "hard"
{}{}"#,
        dynamic_site(port, "one", "one"),
        dynamic_site(port, "each", "each")
    );
    let _server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let cpus = std::thread::available_parallelism().unwrap().get().min(8);
    for cpu in 0..cpus {
        for name in ["one.example", "each.example"] {
            let answered: Vec<String> = on_cpu(cpu, move || {
                (0..20)
                    .map(|_| worker(&get_host(addr, name, "/")))
                    .collect()
            });
            for w in answered {
                assert!(
                    w.ends_with(&format!("/cpu{cpu}")) && w.starts_with(&name[..name.len() - 8]),
                    "Host {name} from CPU {cpu} was answered by {w}"
                );
            }
        }
    }
}

/// A keep-alive client of one host until `stop`: (answered, failures).
fn load(
    addr: SocketAddr,
    name: &'static str,
    stop: Arc<AtomicBool>,
    progress: &Counter,
) -> std::thread::JoinHandle<(u64, Vec<String>)> {
    let progress = progress.clone();
    std::thread::spawn(move || common::apps::keep_alive_load_host(addr, name, stop, progress))
}

#[test]
fn a_stopped_pools_sites_answer_503_while_the_others_serve() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        r#"[server]
worker_header = true
[[pool]]
name = "good"
processes = 2
[[pool]]
name = "bad"
processes = 2
[pool.rapid_fail]
max_crashes = 2
interval = "1m"
{}{}"#,
        dynamic_site(port, "good", "good"),
        dynamic_site(port, "bad", "bad")
    );
    let (config, admin) = with_own_admin(&config);
    std::fs::write(dir.path().join("espalier.toml"), config).unwrap();
    // The bad pool's restarts fail (fault injection; first starts never do).
    let mut server = Server::start_env(
        &["-c", "espalier.toml"],
        dir.path(),
        &[("ESPALIER_FAIL_AT_START", "bad:10")],
    );
    server.admin = Some(admin);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_unwind = common::apps::StopOnDrop(Arc::clone(&stop));
    let progress = Counter::default();
    let good = load(addr, "good.example", Arc::clone(&stop), &progress);
    progress.wait_more(20, "the good site's load answered");
    for (_, pid, _) in server
        .workers()
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("bad/"))
    {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    server.wait_for_log(
        "POOL bad STOPPED by rapid-fail protection",
        Duration::from_secs(10),
    );
    // Connections from every CPU: those the stopped pool's sockets would have taken are
    // steered to the good pool's threads.
    let cpus = std::thread::available_parallelism().unwrap().get().min(8);
    for cpu in 0..cpus {
        let (good_answers, bad_answers) = on_cpu(cpu, move || {
            let g: Vec<u16> = (0..20)
                .map(|_| get_host(addr, "good.example", "/").status)
                .collect();
            let b: Vec<(u16, Option<String>)> = (0..20)
                .map(|_| {
                    let r = get_host(addr, "bad.example", "/");
                    (r.status, r.header("retry-after").map(str::to_string))
                })
                .collect();
            (g, b)
        });
        assert!(
            good_answers.iter().all(|&s| s == 200),
            "CPU {cpu}: {good_answers:?}"
        );
        assert!(
            bad_answers
                .iter()
                .all(|(s, ra)| *s == 503 && ra.as_deref() == Some("5")),
            "CPU {cpu}: {bad_answers:?}"
        );
    }
    // The good site's load went on through all of it: as many answers again as before.
    progress.wait_more(
        20,
        "the good site's load answered after its neighbour stopped",
    );
    stop.store(true, Ordering::Relaxed);
    let (answered, failed) = good.join().unwrap();
    assert!(
        answered >= 40 && failed.is_empty(),
        "{answered} answered; failed: {failed:?}"
    );
}

#[test]
fn reloads_move_add_and_remove_hosts_without_failing_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let site = |name: &str, pool: &str| dynamic_site(port, name, pool);
    let admin = format!("127.0.0.1:{}", free_port());
    let pools = format!("[server]\nadmin = \"{admin}\"\nworker_header = true\n[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n[[pool]]\nname = \"r\"\n");
    let first = format!(
        "{pools}{}{}{}",
        site("stay", "p"),
        site("move", "q"),
        site("gone", "r")
    );
    let server = Server::with_config(dir.path(), &first);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(pool_of(&get_host(addr, "move.example", "/")), "q");
    assert_eq!(pool_of(&get_host(addr, "gone.example", "/")), "r");
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_unwind = common::apps::StopOnDrop(Arc::clone(&stop));
    let progress = Counter::default();
    let clients: Vec<_> = (0..4)
        .map(|_| load(addr, "stay.example", Arc::clone(&stop), &progress))
        .collect();
    progress.wait_more(20, "the load answered");
    // `move` goes to pool r, `gone` is removed, `new` is added on the same port (pool q).
    let second = format!(
        "{pools}{}{}{}",
        site("stay", "p"),
        site("move", "r"),
        site("new", "q")
    );
    std::fs::write(dir.path().join("espalier.toml"), second).unwrap();
    let old = server.workers();
    let old_dispatcher = server.dispatcher_workers();
    espalier_ok(&["reload", "--admin", &admin]);
    server.wait_until("`move` served by pool r", Duration::from_secs(10), |_| {
        pool_of(&get_host(addr, "move.example", "/")) == "r"
    });
    // Pool p serves what it served: behind the dispatcher, it knows nothing of the other
    // hosts, and keeps its worker; q and r (their sites changed) get new ones.
    let (kept, replaced): (Vec<_>, Vec<_>) =
        old.iter().partition(|(name, _, _)| name.starts_with("p/"));
    server.wait_until(
        "the old workers of q and r gone",
        Duration::from_secs(10),
        |_| replaced.iter().all(|w| !pid_alive(w.1)),
    );
    // The dispatcher takes the port's new hosts once q's and r's new workers serve (before,
    // `move` would have gone to r's old worker, which would hand it back): not replaced.
    server.wait_for_log(
        "1 pool(s) unchanged, 2 changed or new (their workers replaced, overlapped), 0 removed, 0 listener group(s) closed; the dispatcher told its port's new hosts, not replaced",
        std::time::Duration::from_secs(10),
    );
    assert_eq!(server.dispatcher_workers(), old_dispatcher);
    assert_eq!(
        server
            .workers()
            .iter()
            .filter(|(n, _, _)| n.starts_with("p/"))
            .map(|w| w.1)
            .collect::<Vec<_>>(),
        kept.iter().map(|w| w.1).collect::<Vec<_>>(),
        "pool p kept its worker"
    );
    let r = get_host(addr, "new.example", "/");
    assert_eq!(
        pool_of(&r),
        "q",
        "{} {:?} {}\nlog:\n{}",
        r.status,
        r.headers,
        r.text(),
        server.log_text()
    );
    assert_eq!(get_host(addr, "gone.example", "/").status, 421);
    for _ in 0..20 {
        assert_eq!(pool_of(&get_host(addr, "move.example", "/")), "r");
    }
    progress.wait_more(20, "the load answered after the reload");
    stop.store(true, Ordering::Relaxed);
    // No client saw a failure; together they answered at least what the test waited for
    // (a count each would be a rate: a loaded machine gives one client fewer turns).
    let mut answered = 0;
    for c in clients {
        let (n, failed) = c.join().unwrap();
        assert!(failed.is_empty(), "{n} answered; failed: {failed:?}");
        answered += n;
    }
    assert!(answered >= 40, "{answered} answered");
}

/// A hoster's layout: the main file includes one file per site, each with its own pool.
fn site_file(dir: &std::path::Path, name: &str, port: u16, page: &str) {
    let www = dir.join(format!("www-{name}-{page}"));
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), page).unwrap();
    let text = format!(
        "[[pool]]\nname = \"{name}\"\n\n[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.example\"]\nroot = \"{}\"\n[[site.app]]\npool = \"{name}\"\n",
        www.display()
    );
    std::fs::write(dir.join(format!("sites.d/{name}.toml")), text).unwrap();
}

#[test]
fn one_sites_file_changed_and_reloaded_restarts_only_its_pool_and_fails_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = format!("127.0.0.1:{}", free_port());
    std::fs::create_dir(dir.path().join("sites.d")).unwrap();
    site_file(dir.path(), "a", port, "a1");
    site_file(dir.path(), "b", port, "b1");
    let main = format!(
        "include = [\"sites.d/*.toml\"]\n[server]\nadmin = \"{admin}\"\nworker_header = true\n"
    );
    let server = Server::with_config(dir.path(), &main);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get_host(addr, "a.example", "/").text(), "a1");
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_unwind = common::apps::StopOnDrop(Arc::clone(&stop));
    let progress = Counter::default();
    let clients: Vec<_> = (0..4)
        .map(|_| load(addr, "b.example", Arc::clone(&stop), &progress))
        .collect();
    progress.wait_more(20, "the load answered");
    let pid_of = |pool: &str| {
        server
            .workers()
            .into_iter()
            .find(|(name, _, _)| name.starts_with(&format!("{pool}/")))
            .map(|(_, pid, _)| pid)
    };
    let (a_before, b_before) = (pid_of("a").unwrap(), pid_of("b").unwrap());

    // Site a's file changes (its root): only pool a's worker is replaced.
    site_file(dir.path(), "a", port, "a2");
    espalier_ok(&["reload", "--admin", &admin]);
    server.wait_until("site a's new root served", Duration::from_secs(20), |_| {
        get_host(addr, "a.example", "/").text() == "a2"
    });
    server.wait_until("pool a's old worker gone", Duration::from_secs(20), |_| {
        !pid_alive(a_before)
    });
    server.wait_for_log(
        "1 pool(s) unchanged, 1 changed or new",
        std::time::Duration::from_secs(10),
    );
    assert_eq!(pid_of("b"), Some(b_before), "pool b's worker was restarted");

    // A new site's file on the same port: served, and b's clients see no failure.
    site_file(dir.path(), "c", port, "c1");
    espalier_ok(&["reload", "--admin", &admin]);
    server.wait_until("the new site served", Duration::from_secs(20), |_| {
        get_host(addr, "c.example", "/").text() == "c1"
    });
    progress.wait_more(20, "the load answered after the new site");
    stop.store(true, Ordering::Relaxed);
    // No client saw a failure; together they answered at least what the test waited for
    // (a count each would be a rate: a loaded machine gives one client fewer turns).
    let mut answered = 0;
    for c in clients {
        let (n, failed) = c.join().unwrap();
        assert!(failed.is_empty(), "{n} answered; failed: {failed:?}");
        answered += n;
    }
    assert!(answered >= 40, "{answered} answered");
}

/// The sites `/status` shows on the address at `port`, as (host, site) pairs.
fn sites_at(server: &Server, port: u16) -> Vec<(Option<String>, String)> {
    let status = server.status();
    let address = (status.addresses.iter())
        .find(|a| a.address.ends_with(&format!(":{port}")))
        .unwrap_or_else(|| panic!("no address at port {port} in /status"));
    (address.sites.iter())
        .map(|s| (s.host.clone(), s.site.clone()))
        .collect()
}

#[test]
fn a_site_added_before_another_addresss_sites_leaves_that_address_as_it_was() {
    // Sites are numbered in the configuration's order, and an address's routes name its
    // sites by number. A site added on a new address before site b's file shifts b's
    // number: b's address, whose pools are unchanged, must still name b.
    let dir = tempfile::tempdir().unwrap();
    let (port_b, port_a, port_c) = (free_port(), free_port(), free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    std::fs::create_dir(dir.path().join("sites.d")).unwrap();
    site_file(dir.path(), "b", port_b, "b1");
    let main = format!(
        "include = [\"sites.d/*.toml\"]\n[server]\nadmin = \"{admin}\"\nworker_header = true\n"
    );
    let server = Server::with_config(dir.path(), &main);
    let b = SocketAddr::from(([127, 0, 0, 1], port_b));
    assert_eq!(get_host(b, "b.example", "/").text(), "b1");
    let b_worker = |server: &Server| {
        (server.workers().into_iter())
            .find(|(name, _, _)| name.starts_with("b/"))
            .map(|(_, pid, _)| pid)
    };
    let b_before = b_worker(&server).unwrap();
    let b_there = vec![(Some("b.example".to_string()), "b".to_string())];

    // Site a, on its own address, sorts before b: b is now the second site.
    site_file(dir.path(), "a", port_a, "a1");
    espalier_ok(&["reload", "--admin", &admin]);
    let a = SocketAddr::from(([127, 0, 0, 1], port_a));
    server.wait_until("site a served", Duration::from_secs(20), |_| {
        get_host(a, "a.example", "/").text() == "a1"
    });
    assert_eq!(
        sites_at(&server, port_b),
        b_there,
        "b's address after a's add"
    );

    // Another address's site: b's address is compared with what it was, and is unchanged.
    site_file(dir.path(), "c", port_c, "c1");
    espalier_ok(&["reload", "--admin", &admin]);
    let c = SocketAddr::from(([127, 0, 0, 1], port_c));
    server.wait_until("site c served", Duration::from_secs(20), |_| {
        get_host(c, "c.example", "/").text() == "c1"
    });
    server.wait_for_log(
        "2 pool(s) unchanged, 1 changed or new",
        Duration::from_secs(10),
    );
    assert_eq!(
        sites_at(&server, port_b),
        b_there,
        "b's address after c's add"
    );
    assert_eq!(
        b_worker(&server),
        Some(b_before),
        "pool b's worker was replaced"
    );
    assert_eq!(get_host(b, "b.example", "/").text(), "b1");
}

#[test]
fn a_request_too_large_to_hand_over_is_answered_503_and_nothing_breaks() {
    // A head larger than a hand-off message may carry (handoff::MAX_MESSAGE, 192 KiB), on a
    // connection held by the other pool: refused with 503, never truncated or crashed on.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[server]\nworker_header = true\n[server.limits]\nmax_header_size = \"512KiB\"\n[[pool]]\nname = \"a\"\n[[pool]]\nname = \"b\"\n{}{}",
        dynamic_site(port, "a", "a"),
        dynamic_site(port, "b", "b")
    );
    let _server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut c = Conn::open(addr);
    c.send(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(pool_of(&c.read_response(false).unwrap()), "a");
    // Now held by pool a: a 300 KiB head for pool b.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: b.example\r\nX-Big: {}\r\n\r\n",
        "x".repeat(300 << 10)
    );
    c.send(big.as_bytes());
    let r = c.read_response(false).expect("an answer");
    assert_eq!((r.status, pool_of(&r)), (503, "a".to_string()));
    assert!(c.closed());
    // A smaller one is handed over and answered by b; the server serves on.
    let mut c = Conn::open(addr);
    c.send(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(pool_of(&c.read_response(false).unwrap()), "a");
    let ok = format!(
        "GET / HTTP/1.1\r\nHost: b.example\r\nX-Big: {}\r\n\r\n",
        "x".repeat(100 << 10)
    );
    c.send(ok.as_bytes());
    let r = c.read_response(false).expect("an answer");
    assert_eq!((r.status, pool_of(&r)), (200, "b".to_string()));
}

#[test]
fn an_http2_connection_stays_with_its_pool_and_another_pools_request_gets_421() {
    // An HTTP/2 connection (h2c, prior knowledge) carries many streams at once, so it cannot
    // be handed on as an HTTP/1.1 one is: the dispatcher hands it whole to one pool (the
    // default site's, else the first's), and a stream naming another pool's site is answered
    // 421, as on a TLS connection. Whichever pool holds it, one of the two requests is its
    // own and the other is refused.
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[server]\nworker_header = true\n[[pool]]\nname = \"a\"\n[[pool]]\nname = \"b\"\n{}{}",
        dynamic_site(port, "a", "a"),
        dynamic_site(port, "b", "b")
    );
    let _server = Server::with_config(dir.path(), &config);
    let answers = block_on(async {
        let mut send = h2c(port).await;
        let mut answers = Vec::new();
        for site in ["a", "b"] {
            let req = http::Request::get(format!("http://{site}.example:{port}/"))
                .body(())
                .unwrap();
            send = send.ready().await.unwrap();
            let (response, _) = send.send_request(req, true).unwrap();
            let response = response.await.unwrap();
            let worker = response
                .headers()
                .get("x-espalier-worker")
                .map(|v| v.to_str().unwrap().split('/').next().unwrap().to_string());
            answers.push((site, response.status().as_u16(), worker));
        }
        answers
    });
    let held_by = answers
        .iter()
        .find(|(_, status, _)| *status == 200)
        .and_then(|(_, _, worker)| worker.clone())
        .unwrap_or_else(|| panic!("neither request was answered 200: {answers:?}"));
    for (site, status, _) in &answers {
        let expected = if **site == held_by { 200 } else { 421 };
        assert_eq!(*status, expected, "{answers:?}");
    }
}

/// 1,200 sites on one port in two pools: every worker's spec is far larger than the 128 KiB
/// the kernel takes in one environment variable (400 sites once stopped `serve` with
/// `Argument list too long`), and a host is found among 1,200 by hash, any case.
#[test]
fn twelve_hundred_sites_on_one_port_start_and_each_is_answered_by_its_pool() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[server]\nworker_header = true\n[[pool]]\nname = \"a\"\nprocesses = 1\n[[pool]]\nname = \"b\"\nprocesses = 1\n{}",
        (0..1200)
            .map(|i| dynamic_site(port, &format!("s{i}"), if i < 600 { "a" } else { "b" }))
            .collect::<String>()
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for (name, pool) in [
        ("s0", "a"),
        ("S599.Example", "a"),
        ("s600", "b"),
        ("s1199", "b"),
    ] {
        let host_name = if name.contains('.') {
            name.to_string()
        } else {
            format!("{name}.example")
        };
        let r = get_host(addr, &host_name, "/");
        assert_eq!(r.status, 200, "{host_name}: {}", server.log_text());
        assert_eq!(pool_of(&r), pool, "{host_name}");
    }
    assert_eq!(get_host(addr, "s1200.example", "/").status, 421);
}
