//! Metrics users run production on (issue #29, item 6): a site with `metrics = true` behind a
//! real app told how long to take; /metrics holds its requests by status class and
//! histograms whose buckets match those times (the whole request and the app's part), and
//! the status JSON carries what the admin page turns into p50, p99 and the 5xx rate.

use crate::common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;

fn metrics(server: &Server) -> String {
    let admin: SocketAddr = server.admin.as_ref().unwrap().parse().unwrap();
    let (_, text) = espalier::server::admin::request(admin, "GET", "/metrics").unwrap();
    String::from_utf8_lossy(&text).into_owned()
}

/// The value of the series `name{…labels…}` whose labels hold every one of `with`.
fn value(text: &str, name: &str, with: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| with.iter().all(|w| l.contains(w)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn histograms_match_the_times_the_app_was_told_to_take() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www/files")).unwrap();
    std::fs::write(d.join("www/files/a.txt"), "a\n").unwrap();
    let port = free_port();
    let server = Server::with_config(
        d,
        &format!(
            "[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"{}\"]\n[[site]]\nname = \"shop\"\nbindings = [\"http://127.0.0.1:{port}\"]\nroot = \"www\"\nmetrics = true\n[[site.app]]\npath = \"/files/\"\nhandler = \"static\"\n[[site.app]]\npool = \"app\"\n",
            test_app().display()
        ),
    );
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    // Three requests the app takes a second over (test_app's /slow), five it answers at once,
    // two files and a missing one.
    let slow: Vec<_> = (0..3)
        .map(|k| std::thread::spawn(move || get(at, &format!("/slow{k}"), "").status))
        .collect();
    for k in 0..5 {
        assert_eq!(
            get(at, &format!("/fast{k}"), "").status,
            200,
            "{}",
            server.log_text()
        );
    }
    for path in ["/files/a.txt", "/files/a.txt", "/files/none.txt"] {
        get(at, path, "");
    }
    for h in slow {
        assert_eq!(h.join().unwrap(), 200);
    }
    let site = "site=\"shop\",pool=\"app\",index=\"0\"";
    let mut text = String::new();
    server.wait_until("11 requests counted", Duration::from_secs(60), |server| {
        text = metrics(server);
        value(
            &text,
            "espalier_site_request_duration_seconds_count",
            &[site],
        ) == Some(11.0)
    });
    let at_most =
        |name: &str, le: &str| value(&text, name, &[site, &format!("le=\"{le}\"")]).unwrap();
    let req = "espalier_site_request_duration_seconds_bucket";
    // The eight quick ones within half a second, the three slow ones between 1 and 2.5 s.
    assert_eq!(at_most(req, "0.5"), 8.0, "{text}");
    assert_eq!(at_most(req, "1"), 8.0, "{text}");
    assert_eq!(at_most(req, "2.5"), 11.0, "{text}");
    let up = "espalier_site_upstream_duration_seconds_bucket";
    assert_eq!(at_most(up, "0.5"), 5.0, "only the app's answers: {text}");
    assert_eq!(at_most(up, "2.5"), 8.0, "{text}");
    let sum = value(&text, "espalier_site_request_duration_seconds_sum", &[site]).unwrap();
    assert!(
        (3.0..30.0).contains(&sum),
        "three seconds and a little: {sum}"
    );
    let class = |c: &str| {
        value(
            &text,
            "espalier_site_requests_total",
            &[site, &format!("class=\"{c}\"")],
        )
        .unwrap()
    };
    assert_eq!((class("2xx"), class("4xx"), class("5xx")), (10.0, 1.0, 0.0));
    assert_eq!(
        value(&text, "espalier_site_sent_bytes_total", &[site]),
        Some(4.0 * 8.0 + 2.0 * 2.0 + "404 Not Found\n".len() as f64)
    );
    // The status JSON carries the same, for the admin page's p50/p99 and 5xx rate.
    let status = server.status();
    let front = status.pools[0]
        .workers
        .iter()
        .find(|w| !w.meters.is_empty())
        .expect("a worker with figures");
    let latency = &front.meters[0].figures.latency;
    let p50 = latency.quantile_micros(0.5).unwrap();
    assert!(p50 <= 500_000.0, "{p50}");
    let p99 = latency.quantile_micros(0.99).unwrap();
    assert!((1_000_000.0..=2_500_000.0).contains(&p99), "{p99}");
    drop(server);
}
