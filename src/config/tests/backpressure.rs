//! A pool's `max_requests_per_process`, `queue_length` and `queue_timeout`: what they become,
//! and one line per refusal naming the key.

use super::super::*;
use crate::testutil::fixture;
use std::time::Duration;

fn parse(pool_keys: &str) -> Result<Config, ConfigErrors> {
    let text = format!(
        "[[pool]]\nname = \"p\"\n{pool_keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n"
    );
    Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
}

#[test]
fn the_cap_and_its_queue_are_kept_with_defaults() {
    let c = parse("command = [\"/bin/sh\"]\nmax_requests_per_process = 1\nqueue_timeout = \"3s\"")
        .unwrap();
    let bp = c.pools[0].app.as_ref().unwrap().backpressure.unwrap();
    assert_eq!(bp.max_requests_per_process, 1);
    assert_eq!(bp.queue_length, DEFAULT_QUEUE_LENGTH);
    assert_eq!(bp.queue_timeout, Duration::from_secs(3));
    let c = parse("command = [\"/bin/sh\"]").unwrap();
    assert!(c.pools[0].app.as_ref().unwrap().backpressure.is_none());
}

#[test]
fn each_bad_value_is_one_line_naming_the_key() {
    for (keys, expected) in [
        (
            "command = [\"/bin/sh\"]\nmax_requests_per_process = 0",
            "key `pool[0].max_requests_per_process`: 0 must be a whole number above 0",
        ),
        (
            "command = [\"/bin/sh\"]\nmax_requests_per_process = 2\nqueue_length = -1",
            "key `pool[0].queue_length`: -1 is not a number of requests",
        ),
        (
            "command = [\"/bin/sh\"]\nmax_requests_per_process = 2\nqueue_timeout = \"0s\"",
            "key `pool[0].queue_timeout`: must be above 0",
        ),
        (
            "command = [\"/bin/sh\"]\nqueue_length = 10",
            "key `pool[0].queue_length`: shapes the queue of requests beyond max_requests_per_process, which is not set",
        ),
        (
            "max_requests_per_process = 1",
            "key `pool[0].max_requests_per_process`: applies only to a pool that runs an application",
        ),
        (
            "command = [\"/bin/sh\"]\ntransport = \"activation\"\nmax_requests_per_process = 1",
            "key `pool[0].max_requests_per_process`: applies only to transport = \"proxy\"",
        ),
    ] {
        let errs = parse(keys).expect_err(expected);
        assert_eq!(errs.0.len(), 1, "expected one error, got: {errs}");
        assert!(errs.to_string().contains(expected), "{keys}: {errs}");
    }
}

#[test]
fn on_demand_bounds_need_a_pool_that_starts_on_demand() {
    let text = |start: &str| {
        format!("[server]\non_demand_running = 4\non_demand_starting = 2\n[[pool]]\nname = \"p\"\nstart = \"{start}\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n")
    };
    let c = Config::parse(
        &text("on-demand"),
        Path::new("/etc/espalier/t.toml"),
        &fixture("dl980"),
    )
    .unwrap();
    assert_eq!(
        (c.server.on_demand_starting, c.server.on_demand_running),
        (Some(2), Some(4))
    );
    let e = Config::parse(
        &text("always"),
        Path::new("/etc/espalier/t.toml"),
        &fixture("dl980"),
    )
    .expect_err("no pool to bound")
    .to_string();
    for key in ["server.on_demand_running", "server.on_demand_starting"] {
        assert!(
            e.contains(&format!(
                "key `{key}`: bounds the pools that start on demand"
            )),
            "{e}"
        );
    }
    let e = Config::parse(
        &text("on-demand").replace("= 4", "= 0"),
        Path::new("/etc/espalier/t.toml"),
        &fixture("dl980"),
    )
    .expect_err("zero")
    .to_string();
    assert!(
        e.contains("key `server.on_demand_running`: 0 must be a whole number above 0"),
        "{e}"
    );
}
