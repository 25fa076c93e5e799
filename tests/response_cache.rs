//! The response cache (`cache_responses`, issue #61 item 1) on the real binary: gunicorn
//! running tests/apps/cache_app.py in a pool (sync workers, so its answers are buffered too)
//! and as an upstream server espalier did not start. The app writes down every request it
//! gets and numbers its answers, so an answer given again by the cache is seen both ways:
//! the same number, and no new line in the app's record.

use crate::common;

use common::apps::need_runtimes;
use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How long an event may take to be seen on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

fn copy_app(d: &Path) {
    need_runtimes();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/cache_app.py");
    std::fs::copy(app, d.join("cache_app.py")).unwrap();
}

/// How many requests for `path` the app saw (its record `record`).
fn asked_of_app(record: &Path, path: &str) -> usize {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    let path_of = |l: &str| {
        l.split(' ')
            .nth(1)
            .and_then(|t| t.split('?').next())
            .map(String::from)
    };
    text.lines()
        .filter(|l| path_of(l).as_deref() == Some(path))
        .count()
}

/// `GET target` (or `HEAD`) with `extra` fields, on a fresh connection.
fn ask(addr: SocketAddr, method: &str, target: &str, extra: &str) -> Response {
    let mut c = Conn::open(addr);
    c.stream.set_read_timeout(Some(WAIT)).unwrap();
    c.send(
        format!(
            "{method} {target} HTTP/1.1\r\nHost: cached.test\r\n{extra}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    c.read_response(method == "HEAD").expect("an answer")
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn cache_status(r: &Response) -> &str {
    r.header("cache-status").unwrap_or("(none)")
}

/// Every worker of every pool, as `server`'s status shows them now.
fn workers_of(server: &Server) -> Vec<espalier::server::status::WorkerStatus> {
    let status = server.status();
    status.pools.into_iter().flat_map(|p| p.workers).collect()
}

/// The first answer to `GET target` that is not a fresh hit (its kept answer went stale):
/// its status, `Cache-Status` and body.
fn not_a_hit(addr: SocketAddr, target: &str) -> (u16, String, String) {
    let mut seen = None;
    wait_for("an answer not a fresh hit", WAIT, || {
        let got = ask(addr, "GET", target, "");
        let said = cache_status(&got).to_string();
        if said != "espalier; hit" {
            seen = Some((got.status, said, body(&got)));
        }
        seen.is_some()
    });
    seen.unwrap()
}

#[test]
fn a_pools_fresh_answer_is_given_again_without_asking_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    copy_app(d);
    let record = d.join("seen.log");
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"sync\"\ncommand = [\"gunicorn\", \"--bind\", \"127.0.0.1:{{port}}\", \"--workers\", \"2\", \"cache_app:app\"]\nenvironment = {{ CACHE_APP_RECORD = \"{}\" }}\nmax_requests_per_process = 1\ncache_responses = true\n[[site]]\nname = \"s\"\nmetrics = true\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"sync\"\n",
            record.display()
        ),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let a = "/a?cc=public%2C%20max-age%3D600";
    let first = ask(addr, "GET", a, "");
    assert_eq!((first.status, body(&first).as_str()), (200, "1 /a ae=\n"));
    assert_eq!(cache_status(&first), "espalier; fwd=miss; stored");
    let again = ask(addr, "GET", a, "");
    assert_eq!(body(&again), "1 /a ae=\n");
    assert_eq!(cache_status(&again), "espalier; hit");
    assert!(
        again
            .header("age")
            .is_some_and(|a| a.parse::<u64>().is_ok()),
        "{:?}",
        again.headers
    );
    let head = ask(addr, "HEAD", a, "");
    assert_eq!((head.status, cache_status(&head)), (200, "espalier; hit"));
    assert!(head.body.is_empty());
    assert_eq!(asked_of_app(&record, "/a"), 1);
    // Over HTTP/2 too: the same kept answer.
    let out = std::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20", "--http2-prior-knowledge"])
        .args(["-H", "Host: cached.test"])
        .arg(format!("http://127.0.0.1:{port}{a}"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("HTTP/2 200"), "{said}");
    assert!(said.contains("cache-status: espalier; hit"), "{said}");
    assert!(said.ends_with("1 /a ae=\n"), "{said}");
    assert_eq!(asked_of_app(&record, "/a"), 1);
    // The client's `no-cache` goes to the app, and its answer is kept in place of the old.
    let refreshed = ask(addr, "GET", a, "Cache-Control: no-cache\r\n");
    assert_eq!(body(&refreshed), "2 /a ae=\n");
    assert_eq!(cache_status(&refreshed), "espalier; fwd=request; stored");
    assert_eq!(body(&ask(addr, "GET", a, "")), "2 /a ae=\n");
    // `no-store` neither reads nor keeps.
    let passed = ask(addr, "GET", a, "Cache-Control: no-store\r\n");
    assert_eq!(
        (body(&passed).as_str(), cache_status(&passed)),
        ("3 /a ae=\n", "espalier; fwd=request")
    );
    assert_eq!(body(&ask(addr, "GET", a, "")), "2 /a ae=\n");
    // A POST the app accepts takes the URL's kept answer out.
    let mut c = Conn::open(addr);
    c.send(format!("POST {a} HTTP/1.1\r\nHost: cached.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi").as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 200);
    let after = ask(addr, "GET", a, "");
    assert_eq!(
        (body(&after).as_str(), cache_status(&after)),
        ("5 /a ae=\n", "espalier; fwd=miss; stored")
    );
    // A short lifetime ends: the answer is asked of the app again once it is stale.
    let b = "/b?cc=max-age%3D1";
    assert_eq!(body(&ask(addr, "GET", b, "")), "1 /b ae=\n");
    wait_for("the kept answer stale", WAIT, || {
        body(&ask(addr, "GET", b, "")) != "1 /b ae=\n"
    });
    // `Expires` gives a lifetime as `max-age` does.
    let e = "/e?expires=600";
    ask(addr, "GET", e, "");
    assert_eq!(cache_status(&ask(addr, "GET", e, "")), "espalier; hit");
    assert_eq!(asked_of_app(&record, "/e"), 1);
    // `status` and the metrics count them, per worker.
    let cached = |s: &Server| {
        let workers = workers_of(s);
        workers.into_iter().fold((0, 0, 0), |(h, st, b), w| {
            (h + w.cache.hits, st + w.cache.stored, b + w.cache.bytes)
        })
    };
    server.wait_until("the hits counted in status", WAIT, |s| cached(s).0 >= 6);
    let (_, stored, bytes) = cached(&server);
    assert!(stored >= 4 && bytes > 0, "{stored} {bytes}");
    // And each store's (the pool's one here): the worker's figures are its.
    for w in workers_of(&server) {
        if w.cache.hits > 0 {
            assert_eq!(w.caches.len(), 1, "{:?}", w.caches);
            assert_eq!(w.caches[0].store, "pool:sync");
            assert_eq!(w.caches[0].counts.hits, w.cache.hits);
        }
    }
    let admin = server.admin.as_ref().unwrap().parse().unwrap();
    let (_, metrics) = espalier::server::admin::request(admin, "GET", "/metrics").unwrap();
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("espalier_worker_cache_hits_total{"),
        "{metrics}"
    );
    // And per site (`metrics = true`): what the cache did for the site's requests.
    let of_site = |s: &Server| {
        let workers = workers_of(s);
        let meters = workers
            .into_iter()
            .flat_map(|w| w.meters)
            .filter(|m| m.site == "s");
        meters.fold([0; 3], |sum, m| {
            std::array::from_fn(|k| sum[k] + m.figures.cache[k])
        })
    };
    server.wait_until("the site's cache answers counted", WAIT, |s| {
        of_site(s)[0] >= 6
    });
    let [hits, misses, _] = of_site(&server);
    assert!(hits >= 6 && misses >= 4, "{hits} {misses}");
    let (_, metrics) = espalier::server::admin::request(admin, "GET", "/metrics").unwrap();
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        (metrics.lines()).any(
            |l| l.starts_with("espalier_site_cache_answers_total{site=\"s\"")
                && l.contains("result=\"hit\"")
        ),
        "{metrics}"
    );
}

/// gunicorn serving the cache app on a port of its own, as an upstream server.
fn upstream_app(d: &Path, record: &Path) -> (Stopped, u16) {
    copy_app(d);
    let port = free_port();
    let app = Stopped::listening(
        std::process::Command::new("gunicorn")
            .args([
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--workers",
                "2",
                "cache_app:app",
            ])
            .env("CACHE_APP_RECORD", record)
            .current_dir(d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
        SocketAddr::from(([127, 0, 0, 1], port)),
    );
    (app, port)
}

/// The cache app as an upstream server behind one site, its group's `cache_responses` set to
/// `cache`: the app, the server, the site's address, and the app's record.
fn behind_upstream(d: &Path, cache: &str) -> (Stopped, Server, SocketAddr, std::path::PathBuf) {
    let record = d.join("seen.log");
    let (app, served) = upstream_app(d, &record);
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[upstream]]\nname = \"g\"\nservers = [\"127.0.0.1:{served}\"]\ncache_responses = {cache}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\nupstream = \"g\"\n"
        ),
    );
    (
        app,
        server,
        SocketAddr::from(([127, 0, 0, 1], port)),
        record,
    )
}

#[test]
fn an_upstreams_answers_are_kept_by_their_rules_and_a_conditional_request_is_answered_here() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_app, _server, addr, record) = behind_upstream(
        d,
        r#"{ size = "1MiB", entry = "64KiB", key = ["X-Tenant", "cookie:currency"] }"#,
    );
    // Private answers and answers setting a cookie are never kept.
    for (path, target) in [
        ("/p", "/p?cc=private%2C%20max-age%3D600"),
        ("/c", "/c?cc=max-age%3D600&cookie=1"),
    ] {
        for n in 1..=2 {
            let r = ask(addr, "GET", target, "");
            assert_eq!(body(&r), format!("{n} {path} ae=\n"));
            assert_eq!(cache_status(&r), "espalier; fwd=miss");
        }
    }
    // `Vary: Accept-Encoding`: a variant per coding asked for.
    let v = "/v?cc=max-age%3D600&vary=Accept-Encoding";
    for (coding, n) in [("gzip", 1), ("", 2), ("gzip", 1), ("", 2)] {
        let extra = if coding.is_empty() {
            String::new()
        } else {
            format!("Accept-Encoding: {coding}\r\n")
        };
        assert_eq!(
            body(&ask(addr, "GET", v, &extra)),
            format!("{n} /v ae={coding}\n")
        );
    }
    assert_eq!(asked_of_app(&record, "/v"), 2);
    // A chunked answer is kept whole.
    let k = "/k?cc=max-age%3D600&chunked=1";
    let first = ask(addr, "GET", k, "");
    assert_eq!(first.header("transfer-encoding"), Some("chunked"));
    let again = ask(addr, "GET", k, "");
    assert_eq!(
        (body(&again).as_str(), cache_status(&again)),
        ("1 /k ae=\n", "espalier; hit")
    );
    // A client's conditional request is answered 304 by the kept answer's validator.
    let t = "/t?cc=max-age%3D600&etag=v1";
    assert_eq!(ask(addr, "GET", t, "").status, 200);
    let unchanged = ask(addr, "GET", t, "If-None-Match: \"v1\"\r\n");
    assert_eq!(
        (unchanged.status, cache_status(&unchanged)),
        (304, "espalier; hit")
    );
    assert_eq!(unchanged.header("etag"), Some("\"v1\""));
    assert!(unchanged.body.is_empty());
    let changed = ask(addr, "GET", t, "If-None-Match: \"v0\"\r\n");
    assert_eq!(
        (changed.status, body(&changed).as_str()),
        (200, "1 /t ae=\n")
    );
    assert_eq!(asked_of_app(&record, "/t"), 1);
    // The key the config extends: a field and a cookie tell answers apart.
    let m = "/m?cc=max-age%3D600";
    for (extra, n) in [
        ("X-Tenant: a\r\n", 1),
        ("X-Tenant: b\r\n", 2),
        ("X-Tenant: a\r\n", 1),
        ("X-Tenant: a\r\nCookie: theme=dark; currency=EUR\r\n", 3),
        ("X-Tenant: a\r\nCookie: currency=EUR\r\n", 3),
        ("X-Tenant: a\r\nCookie: currency=USD\r\n", 4),
    ] {
        assert_eq!(
            body(&ask(addr, "GET", m, extra)),
            format!("{n} /m ae=\n"),
            "{extra}"
        );
    }
}

/// A stale answer with a validator is the app's to confirm: asked with `If-None-Match`, its
/// `304` makes the kept answer fresh again (its body never sent twice). One whose app has
/// gone stands in for it within `stale-if-error`, and says so.
#[test]
fn a_stale_answer_is_confirmed_by_the_app_or_stands_in_for_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (app, _server, addr, record) = behind_upstream(d, "true");
    let r = "/r?cc=max-age%3D1&etag=r1&revalidate=1";
    assert_eq!(body(&ask(addr, "GET", r, "")), "1 /r ae=\n");
    // Fresh for a second; then the next request asks the app, which confirms it.
    let (status, said, text) = not_a_hit(addr, r);
    assert_eq!(
        (status, said.as_str(), text.as_str()),
        (
            200,
            "espalier; fwd=stale; fwd-status=304; stored",
            "1 /r ae=\n"
        )
    );
    assert_eq!(asked_of_app(&record, "/r"), 2);
    // stale-if-error: the app failing, the stale answer stands in for it.
    let f = "/f?cc=max-age%3D1%2C%20stale-if-error%3D600";
    assert_eq!(body(&ask(addr, "GET", f, "")), "1 /f ae=\n");
    std::fs::write(d.join("seen.log.fail"), "").unwrap();
    let (status, said, text) = not_a_hit(addr, f);
    assert_eq!((status, text.as_str()), (200, "1 /f ae=\n"));
    assert!(
        said.starts_with("espalier; hit; ttl=-") && said.ends_with("; detail=stale-if-error"),
        "{said}"
    );
    // Without it, the app's failure is the client's.
    assert_eq!(ask(addr, "GET", "/n?cc=max-age%3D600", "").status, 500);
    drop(app);
}

/// Within `stale-while-revalidate` (RFC 5861), a stale answer is given at once — the one the
/// app gave first, said so in `Cache-Status` — while the app is asked for a new one in the
/// background: a new answer replaces it, and a `304` to its validators renews it.
#[test]
fn a_stale_answer_is_given_at_once_while_the_app_is_asked_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (app, server, addr, record) = behind_upstream(d, "true");
    let window = "cc=max-age%3D1%2C%20stale-while-revalidate%3D600";
    for (path, query, then) in [
        // A new answer from the app replaces it.
        ("/w", window.to_string(), "2 /w ae=\n"),
        // The app confirms it (304 to its ETag): the first answer, fresh again.
        ("/v", format!("{window}&etag=v1&revalidate=1"), "1 /v ae=\n"),
    ] {
        let target = format!("{path}?{query}");
        assert_eq!(
            body(&ask(addr, "GET", &target, "")),
            format!("1 {path} ae=\n")
        );
        let (_, said, text) = not_a_hit(addr, &target);
        assert_eq!(text, format!("1 {path} ae=\n"), "{said}");
        assert!(
            said.starts_with("espalier; hit; ttl=-")
                && said.ends_with("; detail=stale-while-revalidate"),
            "{said}"
        );
        wait_for("the app asked behind the stale answer", WAIT, || {
            asked_of_app(&record, path) >= 2
        });
        wait_for("the refreshed answer given fresh", WAIT, || {
            let got = ask(addr, "GET", &target, "");
            cache_status(&got) == "espalier; hit" && body(&got) == then
        });
    }
    // Counted as stale in `status`, the upstream group's store's and the worker's.
    let stale = |s: &Server| {
        let workers = workers_of(s);
        (workers.into_iter())
            .flat_map(|w| w.caches)
            .filter(|c| c.store == "upstream:g")
            .map(|c| c.counts.stale)
            .sum::<u64>()
    };
    server.wait_until("the stale answers counted", WAIT, |s| stale(s) >= 2);
    drop(app);
}

/// A FastCGI pool's answers are kept by the same rules: php-fpm's script sends the fields
/// its query asks for and numbers its answers by the requests it saw for the same URI.
#[test]
fn a_php_scripts_answers_are_kept_as_an_http_apps() {
    let fpm = common::apps::php_fpm();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www/own")).unwrap();
    let script = r#"<?php
$f = 'RECORD';
$line = $_SERVER['REQUEST_METHOD'] . ' ' . $_SERVER['REQUEST_URI'];
file_put_contents($f, "$line\n", FILE_APPEND | LOCK_EX);
$n = count(array_filter(file($f), fn($l) => trim($l) === $line));
if (file_exists("$f.fail")) { http_response_code(500); echo "failed\n"; exit; }
if (isset($_GET['etag'])) {
    header('ETag: "' . $_GET['etag'] . '"');
    if (($_SERVER['HTTP_IF_NONE_MATCH'] ?? '') === '"' . $_GET['etag'] . '"') { http_response_code(304); exit; }
}
if (isset($_GET['cc'])) { header('Cache-Control: ' . $_GET['cc']); }
if (isset($_GET['cookie'])) { setcookie('session', '1'); }
header('X-Script: page');
echo "$n " . $_GET['n'] . "\n";
if (isset($_GET['pad'])) { echo str_repeat('p', (int)$_GET['pad']); }
"#
    .replace("RECORD", &d.join("seen.log").display().to_string());
    std::fs::write(d.join("www/page.php"), &script).unwrap();
    // A path of its own that takes neither the pool's cache nor its buffering.
    std::fs::write(d.join("www/own/page.php"), &script).unwrap();
    std::fs::write(
        d.join("php-fpm.conf"),
        "[global]\nerror_log = /proc/self/fd/2\ndaemonize = no\n[www]\nlisten = 127.0.0.1:${PORT}\npm = static\npm.max_children = 2\n",
    )
    .unwrap();
    let port = free_port();
    let _server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"php\"\ncommand = [\"{fpm}\", \"--nodaemonize\", \"--allow-to-run-as-root\", \"--fpm-config\", \"php-fpm.conf\"]\ntransport = \"fastcgi\"\ncache_responses = {{ size = \"1MiB\", entry = \"16KiB\" }}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\n[[site.app]]\npool = \"php\"\n[[site.app]]\npath = \"/own/\"\npool = \"php\"\ncache_responses = false\nbuffer = false\n"
        ),
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let a = "/page.php?n=a&cc=public%2C%20max-age%3D600";
    let first = ask(addr, "GET", a, "");
    assert_eq!((first.status, body(&first).as_str()), (200, "1 a\n"));
    assert_eq!(cache_status(&first), "espalier; fwd=miss; stored");
    let again = ask(addr, "GET", a, "");
    assert_eq!(
        (body(&again).as_str(), cache_status(&again)),
        ("1 a\n", "espalier; hit")
    );
    assert_eq!(again.header("x-script"), Some("page"));
    assert_eq!(again.header("content-length"), Some("4"));
    let head = ask(addr, "HEAD", a, "");
    assert_eq!((head.status, cache_status(&head)), (200, "espalier; hit"));
    // A POST the script accepts takes the URL's kept answer out.
    let mut c = Conn::open(addr);
    c.send(format!("POST {a} HTTP/1.1\r\nHost: cached.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi").as_bytes());
    assert_eq!(c.read_response(false).unwrap().status, 200);
    assert_eq!(body(&ask(addr, "GET", a, "")), "2 a\n");
    // Never kept: private, or a cookie set.
    for (q, n) in [
        ("cc=private%2C%20max-age%3D600", "p"),
        ("cc=max-age%3D600&cookie=1", "c"),
    ] {
        let target = format!("/page.php?n={n}&{q}");
        assert_eq!(body(&ask(addr, "GET", &target, "")), format!("1 {n}\n"));
        let second = ask(addr, "GET", &target, "");
        assert_eq!(body(&second), format!("2 {n}\n"));
        assert_eq!(cache_status(&second), "espalier; fwd=miss");
    }
    // Over the entry bound: read in part, then relayed whole as it comes, and not kept.
    let big = "/page.php?n=big&cc=max-age%3D600&pad=100000";
    for n in 1..=2 {
        let got = ask(addr, "GET", big, "");
        assert_eq!(got.body.len(), format!("{n} big\n").len() + 100_000);
        assert!(body(&got).starts_with(&format!("{n} big\n")));
        assert_eq!(cache_status(&got), "espalier; fwd=miss");
    }
    // A stale answer with an ETag: the script is asked with it, and its 304 renews the entry.
    let r = "/page.php?n=r&cc=max-age%3D1&etag=r1";
    assert_eq!(body(&ask(addr, "GET", r, "")), "1 r\n");
    let (_, said, text) = not_a_hit(addr, r);
    assert_eq!(
        (said.as_str(), text.as_str()),
        ("espalier; fwd=stale; fwd-status=304; stored", "1 r\n")
    );
    // stale-while-revalidate: the stale answer at once, the script asked behind it (with the
    // ETag: its 304 renews the entry), then a fresh hit.
    let w = "/page.php?n=w&cc=max-age%3D1%2C%20stale-while-revalidate%3D600&etag=w1";
    assert_eq!(body(&ask(addr, "GET", w, "")), "1 w\n");
    let (_, said, text) = not_a_hit(addr, w);
    assert_eq!(text, "1 w\n");
    assert!(said.ends_with("; detail=stale-while-revalidate"), "{said}");
    let seen_by_script = || {
        let record = std::fs::read_to_string(d.join("seen.log")).unwrap_or_default();
        record
            .lines()
            .filter(|l| l.ends_with("n=w&cc=max-age%3D1%2C%20stale-while-revalidate%3D600&etag=w1"))
            .count()
    };
    wait_for("the script asked behind it", WAIT, || seen_by_script() >= 2);
    wait_for("the renewed answer given fresh", WAIT, || {
        let got = ask(addr, "GET", w, "");
        cache_status(&got) == "espalier; hit" && body(&got) == "1 w\n"
    });
    // stale-if-error: the script failing, the stale answer stands in for it.
    let f = "/page.php?n=f&cc=max-age%3D1%2C%20stale-if-error%3D600";
    assert_eq!(body(&ask(addr, "GET", f, "")), "1 f\n");
    std::fs::write(d.join("seen.log.fail"), "").unwrap();
    let (status, said, text) = not_a_hit(addr, f);
    assert_eq!((status, text.as_str()), (200, "1 f\n"));
    assert!(said.ends_with("; detail=stale-if-error"), "{said}");
    assert_eq!(
        ask(addr, "GET", "/page.php?n=g&cc=max-age%3D600", "").status,
        500
    );
    std::fs::remove_file(d.join("seen.log.fail")).unwrap();
    // The path that turned both off: asked each time, and a chunked body (whose length only
    // buffering tells FastCGI) is refused there, taken on the pool's other paths.
    let own = "/own/page.php?n=o&cc=max-age%3D600";
    for n in 1..=2 {
        let got = ask(addr, "GET", own, "");
        assert_eq!(
            (body(&got), cache_status(&got)),
            (format!("{n} o\n"), "(none)")
        );
    }
    let chunked = |path: &str| {
        let mut c = Conn::open(addr);
        c.send(format!("POST {path} HTTP/1.1\r\nHost: cached.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n").as_bytes());
        c.read_response(false).unwrap().status
    };
    assert_eq!(chunked("/own/page.php?n=c"), 411);
    assert_eq!(chunked("/page.php?n=c"), 200);
}

/// With a disk tier, answers put out of memory for room are written to a file in its folder
/// (one with no name) and given from there again, without asking the app.
#[test]
fn answers_put_out_of_memory_are_given_from_the_disk_tier() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let folder = d.join("cache");
    std::fs::create_dir(&folder).unwrap();
    let cache = format!(
        "{{ size = \"4KiB\", entry = \"4KiB\", disk = \"1MiB\", folder = \"{}\" }}",
        folder.display()
    );
    let (app, server, addr, record) = behind_upstream(d, &cache);
    let pages: Vec<String> = (0..40).map(|i| format!("/d{i}?cc=max-age%3D600")).collect();
    for (i, page) in pages.iter().enumerate() {
        let first = ask(addr, "GET", page, "");
        assert_eq!(body(&first), format!("1 /d{i} ae=\n"));
    }
    // 4 KiB of memory holds a few of the 40; every one is a hit, from memory or disk.
    for (i, page) in pages.iter().enumerate() {
        let again = ask(addr, "GET", page, "");
        assert_eq!(
            (body(&again).as_str(), cache_status(&again)),
            (format!("1 /d{i} ae=\n").as_str(), "espalier; hit")
        );
        assert_eq!(asked_of_app(&record, &format!("/d{i}")), 1);
    }
    assert_eq!(
        std::fs::read_dir(&folder).unwrap().count(),
        0,
        "a file with a name"
    );
    let on_disk = |s: &Server| {
        let workers = workers_of(s);
        workers.into_iter().fold((0, 0), |(n, b), w| {
            (n + w.cache.disk_entries, b + w.cache.disk_bytes)
        })
    };
    server.wait_until("the disk tier counted", WAIT, |s| on_disk(s).0 > 0);
    let (entries, bytes) = on_disk(&server);
    assert!(
        entries < 40 && bytes > 0 && bytes <= 1 << 20,
        "{entries} {bytes}"
    );
    drop(app);
}

/// A purge through the admin endpoint takes kept answers out of every worker: one URL, every
/// URL under a prefix, or every answer the app tagged.
#[test]
fn a_purge_takes_answers_out_by_url_prefix_and_tag() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_app, server, addr, record) = behind_upstream(d, "true");
    let pages = [
        "/news/1?cc=max-age%3D600&tag=news",
        "/news/2?cc=max-age%3D600",
        "/shop/1?cc=max-age%3D600",
        "/shop/2?cc=max-age%3D600",
    ];
    for page in pages {
        ask(addr, "GET", page, "");
        assert_eq!(cache_status(&ask(addr, "GET", page, "")), "espalier; hit");
    }
    let purge = |query: &str| {
        let (code, said) = server.post(&format!("/cache/purge?{query}"));
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&said));
    };
    // Asked of the app again once the worker took the purge; the others still kept.
    let purged = |page: &str| {
        wait_for("the purge taken", WAIT, || {
            cache_status(&ask(addr, "GET", page, "")) != "espalier; hit"
        });
    };
    purge("tag=news");
    purged(pages[0]);
    assert_eq!(
        cache_status(&ask(addr, "GET", pages[1], "")),
        "espalier; hit"
    );
    purge("url=http%3A%2F%2Fcached.test%2Fnews%2F2%3Fcc%3Dmax-age%253D600");
    purged(pages[1]);
    purge("prefix=http%3A%2F%2Fcached.test%2Fshop%2F");
    purged(pages[2]);
    purged(pages[3]);
    for (path, asked) in [
        ("/news/1", 2),
        ("/news/2", 2),
        ("/shop/1", 2),
        ("/shop/2", 2),
    ] {
        assert_eq!(asked_of_app(&record, path), asked, "{path}");
    }
    // A purge that names nothing it knows is refused, with the way to ask.
    let (code, said) = server.post("/cache/purge?what=1");
    assert_eq!(code, 400);
    assert!(String::from_utf8_lossy(&said).contains("url, prefix or tag"));
}

/// Request collapsing: fifty clients missing one URL at once reach the app once; the
/// others wait for its answer and get it from the cache.
#[test]
fn fifty_concurrent_misses_for_one_url_reach_the_app_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_app, _server, addr, record) = behind_upstream(d, "true");
    // The app thinks a second: the others arrive while it does.
    let slow = "/slow?cc=max-age%3D600&sleep=1";
    let clients: Vec<_> = (0..50)
        .map(|_| std::thread::spawn(move || body(&ask(addr, "GET", slow, ""))))
        .collect();
    for client in clients {
        assert_eq!(client.join().unwrap(), "1 /slow ae=\n");
    }
    assert_eq!(asked_of_app(&record, "/slow"), 1);
}

#[test]
fn check_refuses_cache_responses_where_it_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (keys, said) in [
        (
            "protocol = \"http2\"\ncache_responses = true",
            "are streams",
        ),
        (
            "cache_responses = { size = \"1MiB\", entry = \"2MiB\" }",
            "larger than its size",
        ),
        (
            "cache_responses = { sise = \"1MiB\" }",
            "`sise` is not a key of cache_responses",
        ),
        (
            "cache_responses = { key = [\"cookie:\"] }",
            "is not a field name or cookie:NAME",
        ),
        (
            "cache_responses = { disk = \"1MiB\", folder = \"cache\" }",
            "is not an absolute path",
        ),
        (
            "cache_responses = { folder = \"/tmp\" }",
            "has a folder but no disk bound",
        ),
        (
            "cache_responses = { disk = \"1MiB\", folder = \"/nonexistent-espalier-cache\" }",
            "is not a folder here",
        ),
    ] {
        let config = format!("[[pool]]\nname = \"p\"\ncommand = [\"app\", \"{{port}}\"]\n{keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n");
        std::fs::write(d.join("espalier.toml"), config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_espalier"))
            .args(["check", "--config"])
            .arg(d.join("espalier.toml"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{keys}: {text}");
        assert!(
            text.contains("cache_responses") && text.contains(said),
            "{keys}: {text}"
        );
    }
}
