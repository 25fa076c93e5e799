use super::*;
use crate::config::Config;

/// Sites `s0`…`s{n-1}`, each with its own pool on one address; every third has a second
/// name there, and `s0` is the address's default too.
fn sites(n: usize) -> Vec<Arc<SiteSpec>> {
    let mut text = String::new();
    for k in 0..n {
        let mut bindings = format!("\"http://127.0.0.1:8080:s{k}.test\"");
        if k % 3 == 1 {
            bindings += &format!(", \"http://127.0.0.1:8080:www.s{k}.test\"");
        }
        if k == 0 {
            bindings += ", \"http://127.0.0.1:8080\"";
        }
        text += &format!("[[pool]]\nname = \"p{k}\"\ncpus = \"0\"\n[[site]]\nname = \"s{k}\"\nbindings = [{bindings}]\n[[site.app]]\npool = \"p{k}\"\n");
    }
    let topology = crate::testutil::fixture("dl980");
    Config::parse(&text, std::path::Path::new("h.toml"), &topology)
        .unwrap()
        .sites
}

/// The hosts a dispatcher routing `sites` is given, as update `generation`: the address's
/// table in the sites' order (as `server::listeners` makes it), and each site's pool's
/// slots (`slots`: how many CPUs its worker has).
fn hosts_of(sites: &[Arc<SiteSpec>], generation: u64, slots: impl Fn(&str) -> u32) -> Hosts {
    let hosts = (sites.iter().enumerate())
        .flat_map(|(k, s)| s.bindings.iter().map(move |b| (b.host.clone(), k)))
        .collect();
    let routes = GroupRoutes {
        addr: "127.0.0.1:8080".parse().unwrap(),
        hosts,
        proxy_protocol: false,
        proxy_protocol_from: Vec::new(),
        tls: false,
        dispatched: true,
    };
    let pools = (sites.iter())
        .map(|s| {
            let pool = s.apps[0].pool.clone();
            let cpus = (0..slots(&pool)).map(|c| (0, c, Some(0))).collect();
            PoolSlots(pool, cpus)
        })
        .collect();
    Hosts {
        generation,
        groups: vec![Arc::new(routes)],
        sites: Arc::new(sites.to_vec()),
        handoff_peers: Arc::new(Peers {
            dir: "/run/espalier".into(),
            pools,
            distances: vec![(0, 0, 10)],
            wake: None,
        }),
    }
}

/// `now`'s sites as a change of `held`'s: the same `Arc` kept (as the master keeps a site
/// a change did not touch).
fn sites_pieces(held: &[Arc<SiteSpec>], now: &[Arc<SiteSpec>]) -> Vec<Piece<Arc<SiteSpec>>> {
    let mut pieces = Vec::new();
    for site in now {
        match held.iter().position(|h| Arc::ptr_eq(h, site)) {
            Some(k) => Piece::keep(&mut pieces, k),
            None => pieces.push(Piece::New(Arc::clone(site))),
        }
    }
    pieces
}

/// `now` sent as a change of `held` (through JSON, as the `hosts` line) and made whole.
fn sent(held: &Hosts, now: &Hosts) -> (HostsUpdate, Result<Hosts, String>) {
    let update = HostsUpdate::between(Some(held), now, sites_pieces(&held.sites, &now.sites));
    let json = serde_json::to_string(&update).unwrap();
    let read: HostsUpdate = serde_json::from_str(&json).unwrap();
    (update, read.into_hosts(held))
}

fn assert_same(got: &Hosts, want: &Hosts) {
    assert_eq!(got.generation, want.generation);
    assert_eq!(got.groups, want.groups);
    assert_eq!(got.sites, want.sites);
    assert_eq!(got.handoff_peers, want.handoff_peers);
}

fn new_entries<T>(pieces: &[Piece<T>]) -> usize {
    pieces.iter().filter(|p| matches!(p, Piece::New(_))).count()
}

#[test]
fn a_site_added_sends_its_hosts_and_its_pool_alone_and_the_rest_move_over_it() {
    let all = sites(8);
    let before: Vec<_> = (all.iter().enumerate())
        .filter(|(k, _)| *k != 4)
        .map(|(_, s)| Arc::clone(s))
        .collect();
    let held = hosts_of(&before, 3, |_| 2);
    let now = hosts_of(&all, 4, |_| 2);
    let (update, whole) = sent(&held, &now);
    assert_same(&whole.unwrap(), &now);
    assert_eq!(update.after, Some(3));
    // s4 inserted: its two names and its pool are all that is sent; the entries after it
    // are kept, their site indices one further on.
    let hosts = &update.groups[0].hosts;
    assert_eq!(new_entries(hosts), 2, "{hosts:?}");
    assert_eq!(hosts.len(), 4, "{hosts:?}");
    assert!(update.groups[0].routes.hosts.is_empty());
    let pools = &update.handoff_peers.pools;
    let p4 = PoolSlots("p4".into(), vec![(0, 0, Some(0)), (0, 1, Some(0))]);
    assert_eq!(
        *pools,
        [Piece::Kept(0, 4), Piece::New(p4), Piece::Kept(4, 3)]
    );
    assert!(update.handoff_peers.table.pools.is_empty());
    // And removed again: nothing new is sent.
    let (update, whole) = sent(&now, &hosts_of(&before, 5, |_| 2));
    assert_same(&whole.unwrap(), &hosts_of(&before, 5, |_| 2));
    assert_eq!(new_entries(&update.groups[0].hosts), 0);
    assert_eq!(new_entries(&update.handoff_peers.pools), 0);
}

#[test]
fn any_change_of_the_sites_is_made_whole_as_the_master_has_it() {
    let all = sites(24);
    let mut rng = fastrand::Rng::with_seed(57);
    let mut held_sites: Vec<_> = all[..12].to_vec();
    let mut held = hosts_of(&held_sites, 1, |_| 1);
    for generation in 2..300 {
        let mut now = held_sites.clone();
        for _ in 0..rng.usize(1..4) {
            match rng.u8(0..4) {
                // A site added where it sorts in, removed, or changed (a new `Arc`).
                0 => {
                    let site = &all[rng.usize(..all.len())];
                    if !now.iter().any(|s| s.name == site.name) {
                        now.insert(rng.usize(..=now.len()), Arc::clone(site));
                    }
                }
                1 if !now.is_empty() => {
                    now.remove(rng.usize(..now.len()));
                }
                2 if !now.is_empty() => {
                    let k = rng.usize(..now.len());
                    now[k] = Arc::new((*now[k]).clone());
                }
                // Two swapped: kept sites out of their order.
                _ if now.len() > 1 => {
                    let (a, b) = (rng.usize(..now.len()), rng.usize(..now.len()));
                    now.swap(a, b);
                }
                _ => {}
            }
        }
        // Now and then a pool's worker gets another CPU.
        let grown = format!("p{}", rng.usize(..24));
        let want = hosts_of(&now, generation, |p| 1 + u32::from(p == grown));
        let (_, whole) = sent(&held, &want);
        let whole = whole.unwrap_or_else(|e| panic!("update {generation}: {e}"));
        assert_same(&whole, &want);
        (held, held_sites) = (whole, now);
    }
}

#[test]
fn an_update_sent_whole_keeps_nothing_and_one_that_keeps_what_is_not_held_is_refused() {
    let all = sites(4);
    let now = hosts_of(&all, 1, |_| 1);
    let whole = HostsUpdate::between(None, &now, sites_pieces(&[], &all));
    assert_eq!(whole.after, None);
    assert_eq!(
        new_entries(&whole.groups[0].hosts),
        whole.groups[0].hosts.len()
    );
    assert_same(&whole.clone().into_hosts(&Hosts::default()).unwrap(), &now);
    // Its hosts' entries kept, its sites not: the kept names would route to no site.
    let mut lying = HostsUpdate::between(Some(&now), &now, sites_pieces(&now.sites, &now.sites));
    lying.sites = all.iter().map(|s| Piece::New(Arc::clone(s))).collect();
    let refused = lying.into_hosts(&now).unwrap_err();
    assert_eq!(
        refused,
        "hosts of 127.0.0.1:8080: entry 0 kept, its site not"
    );
    // Pools kept past what is held.
    let mut past = HostsUpdate::between(Some(&now), &now, sites_pieces(&now.sites, &now.sites));
    past.handoff_peers.pools = vec![Piece::Kept(2, usize::MAX)];
    let refused = past.into_hosts(&now).unwrap_err();
    assert!(refused.starts_with("hand-off pools 2.."), "{refused}");
}

#[test]
fn where_the_held_entries_went() {
    let pieces: Vec<Piece<()>> = vec![
        Piece::Kept(1, 2),
        Piece::New(()),
        Piece::Kept(4, 1),
        Piece::Kept(9, 3),
    ];
    assert_eq!(
        moved(&pieces, 6),
        [None, Some(0), Some(1), None, Some(3), None]
    );
    assert!(moved(&[Piece::<()>::Kept(usize::MAX, 2)], 3)
        .iter()
        .all(Option::is_none));
}
