use super::engine::TrimAfterBurst;
use super::from_master::hosts_from;
use crate::config::{Config, SiteSpec};
use crate::server::hosts_update::Hosts;
use std::sync::Arc;

#[test]
fn memory_is_trimmed_once_a_burst_has_halved() {
    let mut t = TrimAfterBurst::default();
    // A small, steady load never trims; its last connection gone, it does.
    assert!((0..100).all(|k| !t.due(1 + k % 20)));
    assert!(t.due(0));
    assert!(!t.due(0));
    assert!(!t.due(200));
    assert!(!t.due(150));
    assert!(t.due(100));
    // Measured from what is left: the next trim needs another halving of a burst.
    assert!(!t.due(80));
    assert!(t.due(0));
    assert!(!t.due(0));
}

/// Two sites, as a dispatcher holds them.
fn held() -> Vec<Arc<SiteSpec>> {
    let text = "[[pool]]\nname = \"a\"\ncpus = \"0\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:8080:a.test\"]\n[[site.app]]\npool = \"a\"\n[[site]]\nname = \"b\"\nbindings = [\"http://127.0.0.1:8080:b.test\"]\n[[site.app]]\npool = \"a\"\n";
    let topology = crate::testutil::fixture("dl980");
    Config::parse(text, std::path::Path::new("w.toml"), &topology)
        .unwrap()
        .sites
}

/// A `hosts` line: update `generation`, changing update `after`'s sites by `sites` (JSON).
fn line(generation: u64, after: Option<u64>, sites: &str) -> String {
    let after = after.map_or("null".to_string(), |a| a.to_string());
    let peers =
        serde_json::to_string(&crate::server::hosts_update::PeersChange::default()).unwrap();
    format!(
        r#"{{"generation":{generation},"after":{after},"groups":[],"sites":{sites},"handoff_peers":{peers}}}"#
    )
}

/// What a dispatcher holds after update `generation` gave it `sites`.
fn holding(sites: &[Arc<SiteSpec>], generation: u64) -> Hosts {
    Hosts {
        generation,
        sites: Arc::new(sites.to_vec()),
        ..Hosts::default()
    }
}

#[test]
fn a_dispatcher_takes_a_change_of_the_sites_it_holds_and_refuses_another() {
    let held = held();
    // The sites it holds, reversed: kept, not copied.
    let hosts = hosts_from(
        &line(4, Some(3), r#"[{"Kept":[1,1]},{"Kept":[0,1]}]"#),
        &holding(&held, 3),
    )
    .unwrap();
    assert_eq!(hosts.generation, 4);
    assert!(Arc::ptr_eq(&hosts.sites[0], &held[1]) && Arc::ptr_eq(&hosts.sites[1], &held[0]));
    // A change of update 2's sites, while it holds update 3's: refused, however it fits.
    let stale =
        hosts_from(&line(4, Some(2), r#"[{"Kept":[0,2]}]"#), &holding(&held, 3)).unwrap_err();
    assert!(
        stale.contains("change update 2's, and this process holds update 3's"),
        "{stale}"
    );
    // The whole list (after its start, or a refusal) keeps nothing.
    let whole = hosts_from(&line(1, None, r#"[{"Kept":[0,1]}]"#), &holding(&held, 0)).unwrap_err();
    assert_eq!(whole, "sites 0..1 kept of 0 held");
    let new = serde_json::to_string(&[crate::server::hosts_update::Piece::New(Arc::clone(
        &held[0],
    ))])
    .unwrap();
    let hosts = hosts_from(&line(1, None, &new), &holding(&held, 0)).unwrap();
    assert_eq!(*hosts.sites, vec![Arc::clone(&held[0])]);
    assert!(hosts_from("{", &holding(&held, 0))
        .unwrap_err()
        .starts_with("unreadable hosts"));
}
