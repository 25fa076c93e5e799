use super::*;

#[test]
fn a_loopback_endpoint_answers_to_addresses_and_localhost_only() {
    let lo: SocketAddr = "127.0.0.1:9180".parse().unwrap();
    for ok in [
        "127.0.0.1:9180",
        "localhost:9180",
        "LOCALHOST",
        "[::1]:9180",
        "10.0.0.1",
    ] {
        assert!(host_allowed(ok, lo), "{ok}");
    }
    for bad in [
        "evil.example:9180",
        "evil.example",
        "127.0.0.1.evil.example",
        "[evil]",
    ] {
        assert!(!host_allowed(bad, lo), "{bad}");
    }
    let open: SocketAddr = "0.0.0.0:9180".parse().unwrap();
    assert!(host_allowed("server.example:9180", open));
}

#[test]
fn routes() {
    use crate::server::status::{PoolState, StatusQuery};
    let all = StatusQuery::default();
    assert_eq!(
        route(Method::Get, "/status", ""),
        Ok(Some((AdminCommand::Status(all.clone()), false)))
    );
    assert_eq!(
        route(Method::Get, "/metrics", ""),
        Ok(Some((AdminCommand::Status(all), true)))
    );
    // A scrape of ten thousand pools may ask for the running ones only.
    let running = StatusQuery {
        state: Some(PoolState::Running),
        ..StatusQuery::default()
    };
    assert_eq!(
        route(Method::Get, "/metrics", "state=running"),
        Ok(Some((AdminCommand::Status(running), true)))
    );
    let q = StatusQuery {
        pool: Some("shop-*".into()),
        state: Some(PoolState::Running),
        page: 3,
        per_page: Some(50),
    };
    assert_eq!(
        route(
            Method::Get,
            "/live",
            "pool=shop-*&state=running&page=3&per_page=50"
        ),
        Ok(Some((AdminCommand::Live(q.clone()), false)))
    );
    assert_eq!(StatusQuery::parse(&q.to_query()), Ok(q));
    assert!(route(Method::Get, "/status", "state=asleep").is_err());
    assert!(route(Method::Get, "/status", "per_page=0").is_err());
    assert!(route(Method::Get, "/status", "pool=%3Cscript%3E").is_err());
    assert!(route(Method::Get, "/status", "colour=red").is_err());
    assert_eq!(
        route(Method::Post, "/pools/web/recycle", ""),
        Ok(Some((AdminCommand::Recycle("web".into()), false)))
    );
    assert_eq!(
        route(Method::Get, "/pools/web/recycle", ""),
        Ok(None),
        "actions are POSTs"
    );
    assert_eq!(
        route(Method::Post, "/reload/", ""),
        Ok(Some((AdminCommand::Reload, false)))
    );
    assert_eq!(route(Method::Get, "/", ""), Ok(None));
}

#[test]
fn a_status_query_matches_names_and_states_and_pages() {
    use crate::server::status::{PoolState, StatusQuery};
    let q = StatusQuery::parse("pool=shop-*-eu").unwrap();
    assert!(q.matches("shop-12-eu", PoolState::Idle));
    assert!(q.matches("shop--eu", PoolState::Running));
    assert!(!q.matches("shop-12-us", PoolState::Running));
    let q = StatusQuery::parse("pool=12&state=idle").unwrap();
    assert!(q.matches("shop-12-eu", PoolState::Idle));
    assert!(!q.matches("shop-12-eu", PoolState::Running));
    // A pathological pattern stays fast (no exponential backtracking).
    let q = StatusQuery::parse(&format!("pool={}b", "*a".repeat(30))).unwrap();
    assert!(!q.matches(&"a".repeat(64), PoolState::Idle));
    let q = StatusQuery::parse(&format!("pool={}b", "*a".repeat(2000))).unwrap();
    assert!(!q.matches(&"a".repeat(64), PoolState::Idle));
    // A page past the end, however large, is empty (no overflow).
    let q = StatusQuery::parse(&format!("page={}&per_page=1000", usize::MAX)).unwrap();
    assert_eq!(q.window(10_000), 10_000..10_000);
    assert!(StatusQuery::parse("page=99999999999999999999999").is_err());
    let q = StatusQuery::parse("page=3&per_page=50").unwrap();
    assert_eq!(q.window(120), 100..120);
    assert_eq!(q.window(90), 90..90);
    assert_eq!(StatusQuery::default().window(7), 0..7);
}
