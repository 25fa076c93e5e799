//! The dispatcher in front of a shared address (`server::dispatcher`): a hoster's 10,000
//! sites in 10,000 on-demand pools, one file each, on one http and one https port. The port
//! costs one listening socket per CPU whatever the number of pools; an idle pool costs the
//! master no descriptor and no runtime file; a cold site's first connection, over http and
//! over https (its certificate from the store), is answered by its own pool; the process that
//! reads every visitor's head is no pool's user, and holds no key.

use crate::common::tls::{curl, openssl_cert};
use crate::common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Listening TCP sockets on `port` (IPv4 and IPv6), from `/proc/net`: what `ss -tln` counts.
fn listening_sockets(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter(|l| {
                    let fields: Vec<&str> = l.split_whitespace().collect();
                    let local_port = fields
                        .get(1)
                        .and_then(|a| a.rsplit(':').next())
                        .and_then(|p| u16::from_str_radix(p, 16).ok());
                    fields.get(3) == Some(&"0A") && local_port == Some(port)
                })
                .map(|_| ())
                .collect::<Vec<_>>()
        })
        .count()
}

/// The descriptors process `pid` has open.
fn descriptors(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| {
                    std::fs::read_link(e.path())
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The paths of the unix sockets process `pid` holds bound (from `/proc/net/unix`, by the
/// inodes of its descriptors).
fn bound_unix_paths(pid: u32) -> Vec<String> {
    let inodes: std::collections::HashSet<String> = descriptors(pid)
        .into_iter()
        .filter_map(|l| Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string()))
        .collect();
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let path = fields.get(7)?;
            inodes.contains(*fields.get(6)?).then(|| path.to_string())
        })
        .collect()
}

/// `sites` site files in `dir/sites.d`, site `i` in pool `p<i>` on `port` by host
/// (`s<i>.example`), the `https` ones also on `tls_port`; the main file includes them.
fn hoster(dir: &Path, sites: usize, port: u16, tls_port: u16, https: &[usize]) -> String {
    let files = dir.join("sites.d");
    std::fs::create_dir_all(&files).unwrap();
    for i in 0..sites {
        let tls = if https.contains(&i) {
            format!(", \"https://127.0.0.1:{tls_port}:s{i}.example\"")
        } else {
            String::new()
        };
        std::fs::write(
            files.join(format!("s{i}.toml")),
            format!("[[pool]]\nname = \"p{i}\"\n[[site]]\nname = \"s{i}\"\nbindings = [\"http://127.0.0.1:{port}:s{i}.example\"{tls}]\n[[site.app]]\npool = \"p{i}\"\nhandler = \"dynamic\"\n"),
        )
        .unwrap();
    }
    "include = [\"sites.d/*.toml\"]\n[server]\nworker_header = true\ncertificates = \"certs\"\n"
        .to_string()
}

fn worker_line(verbose: &str) -> Option<&str> {
    verbose
        .lines()
        .find_map(|l| l.strip_prefix("< x-espalier-worker: "))
        .or_else(|| {
            verbose
                .lines()
                .find_map(|l| l.strip_prefix("< X-Espalier-Worker: "))
        })
}

#[test]
fn ten_thousand_sites_on_one_port_cost_a_socket_per_cpu_and_idle_pools_no_descriptor() {
    need_tools("openssl:openssl curl:curl", "openssl and curl");
    let cpus = std::thread::available_parallelism().unwrap().get();

    // 2,000 sites, then 10,000: the master's descriptors do not grow with idle pools.
    let small = tempfile::tempdir().unwrap();
    std::fs::create_dir(small.path().join("certs")).unwrap();
    let port = free_port();
    let server = Server::with_config(small.path(), &hoster(small.path(), 2000, port, 0, &[]));
    let fds_2000 = descriptors(server.pid()).len();
    assert_eq!(
        listening_sockets(port),
        cpus,
        "one listening socket per CPU"
    );
    drop(server);

    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("certs");
    std::fs::create_dir(&store).unwrap();
    let https = [1, 5001, 9998];
    for i in https {
        openssl_cert(&store, &format!("s{i}.example"), &format!("s{i}.example"));
    }
    let (port, tls_port) = (free_port(), free_port());
    let config = hoster(dir.path(), 10_000, port, tls_port, &https);
    let server = Server::with_config(dir.path(), &config);
    let master = server.pid();
    let fds_10000 = descriptors(master).len();
    assert!(
        fds_10000.abs_diff(fds_2000) < 100,
        "the master's descriptors: {fds_2000} with 2,000 idle pools, {fds_10000} with 10,000"
    );
    // The sockets on each port: one per CPU the pools use (all of them here), not per pool.
    assert_eq!(listening_sockets(port), cpus);
    assert_eq!(listening_sockets(tls_port), cpus);
    assert!(
        server.workers().is_empty(),
        "no pool runs before its first visitor"
    );
    // No pool's hand-off socket is there while it sleeps: the master's only bound sockets
    // are its own and the dispatcher's.
    let runtime_files = |server: &Server| -> Vec<String> {
        bound_unix_paths(server.pid())
            .into_iter()
            .filter(|p| p.contains("/handoff-"))
            .collect()
    };
    let idle_files = runtime_files(&server);
    assert!(
        idle_files.iter().any(|f| f.ends_with("/handoff-master")),
        "{idle_files:?}"
    );
    assert!(
        idle_files
            .iter()
            .all(|f| f.ends_with("/handoff-master") || f.contains("/handoff-espalier.dispatcher-")),
        "{idle_files:?}"
    );

    // Cold sites, first to last: each answered by its own pool, which wakes for it.
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for i in [0, 5000, 9999] {
        let r = get_host(addr, &format!("s{i}.example"), "/");
        assert_eq!(r.status, 200, "s{i}: {}", server.log_text());
        let worker = r
            .header("x-espalier-worker")
            .unwrap_or_default()
            .to_string();
        assert!(
            worker.starts_with(&format!("p{i}/")),
            "s{i} answered by {worker}"
        );
    }
    // A name no site has: the dispatcher answers 421, waking nobody.
    assert_eq!(get_host(addr, "s10000.example", "/").status, 421);
    // Over https, its certificate from the store: handed over by its ClientHello's name,
    // the handshake made by its own pool.
    for i in [1, 9998] {
        let host = format!("s{i}.example");
        let (code, _, verbose) = curl(
            dir.path(),
            &format!("certs/{host}.pem"),
            &host,
            tls_port,
            "/",
            &[],
        );
        assert_eq!(code, 0, "{host} over https: {verbose}");
        let worker = worker_line(&verbose).unwrap_or_default();
        assert!(
            worker.starts_with(&format!("p{i}/")),
            "{host} answered by {worker}"
        );
    }
    // Those five run, and no other: one visitor never wakes another pool.
    server.wait_until("the visited pools running", Duration::from_secs(30), |s| {
        let c = s.status().counts;
        c.running == 5 && c.idle == 9995
    });
    // A woken pool has its hand-off sockets now, one per thread.
    assert!(runtime_files(&server)
        .iter()
        .any(|f| f.contains("handoff-p0-")));

    // The dispatcher: no pool's user (as root, `nobody`), and no key among its files.
    let dispatcher = server.dispatcher_workers();
    assert!(!dispatcher.is_empty());
    for (name, pid, _) in dispatcher {
        let fds = descriptors(pid);
        assert!(!fds.iter().any(|f| f.ends_with(".key")), "{name}: {fds:?}");
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        assert!(!maps.contains(".key"), "{name} maps a key file");
        if espalier::os::identity::effective_uid() == 0 {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            assert_eq!(uid, "65534", "{name} runs as nobody");
            // Keys are the master's to read (0600, root's): nobody cannot open one.
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.join("s1.example.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is closed to others");
        }
    }
}

/// A burst of new connections for a sleeping pool on a shared address — more than a unix
/// datagram queue holds (`net.unix.max_dgram_qlen`, 10 by default) — is all answered by the
/// pool once it wakes: none refused while the master's or the pool's queue is full.
#[test]
fn a_burst_for_a_sleeping_pool_is_all_answered_once_it_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = format!(
        "[server]\nworker_header = true\n[[pool]]\nname = \"a\"\n[[pool]]\nname = \"b\"\nstart = \"on-demand\"\n{}{}",
        dynamic_site(port, "a", "a"),
        dynamic_site(port, "b", "b")
    );
    let server = Server::with_config(dir.path(), &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let burst: Vec<_> = (0..60)
        .map(|_| std::thread::spawn(move || get_host(addr, "b.example", "/")))
        .collect();
    for client in burst {
        let r = client.join().unwrap();
        assert_eq!(r.status, 200, "{}", server.log_text());
        let worker = r
            .header("x-espalier-worker")
            .unwrap_or_default()
            .to_string();
        assert!(worker.starts_with("b/"), "answered by {worker}");
    }
}

/// A hoster adds a site on the shared port: `espalier reload` starts the new site's pool and
/// replaces the dispatcher (which routes the new name), and no other pool's worker — behind
/// the dispatcher, a pool knows its own sites alone. A keep-alive connection to one site
/// then asks for the new one: handed back to the dispatcher and on to the new pool.
#[test]
fn a_site_added_on_a_shared_port_starts_only_its_pool_and_the_dispatcher_takes_its_host_live() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = format!("127.0.0.1:{}", free_port());
    let pool_site = |name: &str| {
        format!(
            "[[pool]]\nname = \"{name}\"\n{}",
            dynamic_site(port, name, name)
        )
    };
    let server_part = format!("[server]\nadmin = \"{admin}\"\nworker_header = true\n");
    let first = format!("{server_part}{}{}", pool_site("a"), pool_site("b"));
    let server = Server::with_config(dir.path(), &first);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let before = server.workers();
    let dispatcher_before = server.dispatcher_workers();
    assert_eq!(before.len(), 2);

    std::fs::write(
        dir.path().join("espalier.toml"),
        format!("{first}{}", pool_site("c")),
    )
    .unwrap();
    espalier_ok(&["reload", "--admin", &admin]);
    // The log line comes through the server's stderr pipe: waited for, not read at once.
    // The dispatcher's spec changed in its hosts alone: its process takes them, not
    // replaced (`supervisor::hosts_live`).
    server.wait_for_log(
        "2 pool(s) unchanged, 1 changed or new (their workers replaced, overlapped), 0 removed, 0 listener group(s) closed; the dispatcher told its port's new hosts, not replaced",
        Duration::from_secs(10),
    );
    server.wait_until("c served by its pool", Duration::from_secs(20), |_| {
        get_host(addr, "c.example", "/")
            .header("x-espalier-worker")
            .is_some_and(|w| w.starts_with("c/"))
    });
    let after = server.workers();
    for (name, pid, _) in &before {
        assert!(
            after.iter().any(|(n, p, _)| n == name && p == pid),
            "{name} (pid {pid}) was replaced: {after:?}"
        );
    }
    assert_eq!(
        server.dispatcher_workers(),
        dispatcher_before,
        "the dispatcher was replaced"
    );
    // On one keep-alive connection: a's page, then c's, then a's again.
    let mut c = Conn::open(addr);
    for host in ["a", "c", "a"] {
        c.send(format!("GET / HTTP/1.1\r\nHost: {host}.example\r\n\r\n").as_bytes());
        let r = c
            .read_response(false)
            .expect("an answer on the same connection");
        let worker = r
            .header("x-espalier-worker")
            .unwrap_or_default()
            .to_string();
        assert!(worker.starts_with(&format!("{host}/")), "{host}: {worker}");
    }

    // A site that takes larger bodies than the server raises the bound the dispatcher reads
    // request heads with: more than its hosts changed, so it gets new workers.
    let bigger = format!(
        "{first}{}{}",
        pool_site("c"),
        pool_site("d").replace(
            "[[site]]\nname = \"d\"\n",
            "[[site]]\nname = \"d\"\nmax_body_size = \"64MiB\"\n"
        )
    );
    std::fs::write(dir.path().join("espalier.toml"), bigger).unwrap();
    espalier_ok(&["reload", "--admin", &admin]);
    server.wait_for_log(
        "3 pool(s) unchanged, 1 changed or new (their workers replaced, overlapped), 0 removed, 0 listener group(s) closed; the dispatcher replaced",
        Duration::from_secs(10),
    );
    server.wait_until("the old dispatcher gone", Duration::from_secs(20), |_| {
        dispatcher_before.iter().all(|&(_, pid, _)| !pid_alive(pid))
    });
    assert_eq!(
        get_host(addr, "d.example", "/")
            .header("x-espalier-worker")
            .map(|w| w.starts_with("d/")),
        Some(true)
    );
}
