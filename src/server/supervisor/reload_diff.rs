//! Which pools a reload changes: a pool keeps its running workers when everything they were
//! built from is the same before and after.
//!
//! Owns: that comparison, pure, and its cost — linear in sites, pools and planned workers,
//! never pools × sites (10,000 pools on one port are compared in milliseconds); and its
//! shortcut for the commonest change, some sites' insides alone ([`sites_changed_alone`]:
//! pointer compares, then the changed sites' pools), which keeps the plan and listener
//! groups; and for a panel's pool added before its site ([`pools_added_alone`]). Must not
//! touch: what is done to a changed pool (see `reload`).
//!
//! What a pool's worker is built from (see `spawn`): the pool itself; its planned workers;
//! its own sites whole; and for each address it serves, that address's *outline* — its
//! pools, flags, each host's site as another pool sees it (`SiteSpec::outline`, without the
//! root, log, certificate or policies) and where its pools' workers are (hand-off targets).
//! So editing one site's root, log, headers or certificate changes only the pools serving
//! it; adding a host or a pool on a shared address changes that address's outline, and with
//! it the dispatcher there — not the pools behind it, whose workers know their own sites
//! alone and the dispatcher's threads (`spawn::own_view`): adding a hoster's site starts the
//! new site's pool, and tells the dispatcher its port's new hosts (`hosts_live`), nothing
//! else.

use crate::config::{Config, SiteSpec};
use crate::placement::{Plan, WorkerPlan};
use crate::routing::DISPATCHER;
use crate::server::listeners::ListenerGroup;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::net::SocketAddr;
use std::sync::Arc;

/// One side of a reload: the configuration, its listener groups and its plan.
pub(super) struct Picture<'a> {
    pub config: &'a Config,
    pub groups: &'a [ListenerGroup],
    pub plan: &'a Plan,
}

/// A host's site as another pool sees it: equal when their outlines are
/// (`SiteSpec::same_outline`), compared without making them.
struct SiteOutline<'a>(Option<&'a Arc<SiteSpec>>);

impl PartialEq for SiteOutline<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.same_outline(b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

/// A pool's own sites, compared: a site kept from the last configuration is the same one
/// (shared), told so without looking inside.
#[derive(Debug)]
struct OwnSites<'a>(SmallVec<[&'a Arc<SiteSpec>; 2]>);

impl PartialEq for OwnSites<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && (self.0.iter().zip(&other.0)).all(|(a, b)| same(a, b))
    }
}

/// Whether a pool or site is the same before and after: the one kept from the last
/// configuration (shared, told without looking inside), or equal.
fn same<T: PartialEq>(a: &Arc<T>, b: &Arc<T>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// Whether two lists of pools or sites are the same, each in its place.
fn same_list<T: PartialEq>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
}

/// A pool's planned workers (a hoster's pool has one: kept inline, 10,000 of them).
type Workers<'a> = SmallVec<[&'a WorkerPlan; 2]>;

/// What a picture says of each pool, indexed once.
struct Indexed<'a> {
    workers: HashMap<&'a str, Workers<'a>>,
    own_sites: HashMap<&'a str, OwnSites<'a>>,
    addrs: HashMap<&'a str, SmallVec<[SocketAddr; 2]>>,
    /// The addresses several pools share (with the dispatcher in front).
    shared: HashSet<SocketAddr>,
    /// Per shared address, the pools of its default site (their workers list every host of
    /// the address, to tell another pool's name from an unknown one).
    default_of: HashSet<(SocketAddr, &'a str)>,
    dispatched: bool,
}

impl<'a> Indexed<'a> {
    fn new(p: &Picture<'a>) -> Self {
        // Sized once: grown entry by entry, 10,000 pools' tables were rehashed a dozen times.
        let pools = p.config.pools.len();
        let mut workers: HashMap<&str, Workers> =
            HashMap::with_capacity_and_hasher(pools, Default::default());
        for w in &p.plan.workers {
            workers.entry(w.pool.as_str()).or_default().push(w);
        }
        let mut own_sites: HashMap<&str, OwnSites> =
            HashMap::with_capacity_and_hasher(pools, Default::default());
        for site in &p.config.sites {
            for pool in site.pools() {
                (own_sites.entry(pool))
                    .or_insert_with(|| OwnSites(SmallVec::new()))
                    .0
                    .push(site);
            }
        }
        // Included files may be read in another order after a rename: compare by name.
        for sites in own_sites.values_mut() {
            sites.0.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let mut addrs: HashMap<&str, SmallVec<[SocketAddr; 2]>> =
            HashMap::with_capacity_and_hasher(pools, Default::default());
        for g in p.groups {
            for pool in &g.pools {
                addrs.entry(pool.as_str()).or_default().push(g.addr);
            }
        }
        for a in addrs.values_mut() {
            a.sort_unstable();
        }
        Indexed {
            workers,
            own_sites,
            addrs,
            shared: p
                .groups
                .iter()
                .filter(|g| g.shared())
                .map(|g| g.addr)
                .collect(),
            default_of: p
                .groups
                .iter()
                .filter(|g| g.shared())
                .flat_map(|g| {
                    g.routes
                        .hosts
                        .iter()
                        .filter(|(h, _)| h.is_none())
                        .filter_map(|(_, i)| p.config.sites.get(*i))
                        .flat_map(move |site| {
                            site.pools().into_iter().map(move |pool| (g.addr, pool))
                        })
                })
                .collect(),
            dispatched: p.config.pool(DISPATCHER).is_some(),
        }
    }
}

/// Whether address `a` (of the picture `before` indexes, `old`) and `b` (of `after`'s,
/// `new`) look the same to every pool on it: its pools, flags, each host's site as another
/// pool sees it, and where its pools' workers are. Compared in place, nothing collected: a
/// hoster's shared address has 10,000 hosts and pools, compared at every change.
fn same_outline<'a>(
    (before, old, a): (&Indexed<'a>, &Config, &ListenerGroup),
    (after, new, b): (&Indexed<'a>, &Config, &ListenerGroup),
) -> bool {
    let (ra, rb) = (&a.routes, &b.routes);
    fn site(c: &Config, i: usize) -> SiteOutline<'_> {
        SiteOutline(c.sites.get(i))
    }
    a.pools == b.pools
        && ra.proxy_protocol == rb.proxy_protocol
        && ra.proxy_protocol_from == rb.proxy_protocol_from
        && ra.tls == rb.tls
        && ra.hosts.len() == rb.hosts.len()
        && (ra.hosts.iter().zip(&rb.hosts))
            .all(|((ha, ia), (hb, ib))| ha == hb && site(old, *ia) == site(new, *ib))
        && (a.pools.iter()).all(|p| before.workers.get(p.as_str()) == after.workers.get(p.as_str()))
}

/// Whether an upstream group a path of pool `name`'s own sites names differs between the
/// configurations (its workers hold the groups' servers from their spec).
fn upstreams_changed(name: &str, after: &Indexed, old: &Config, new: &Config) -> bool {
    fn group<'c>(c: &'c Config, u: &str) -> Option<&'c crate::config::upstream::UpstreamSpec> {
        c.upstreams.iter().find(|g| g.name == u)
    }
    (after.own_sites.get(name).into_iter())
        .flat_map(|s| &s.0)
        .flat_map(|s| &s.apps)
        .flat_map(|a| a.groups())
        .any(|u| group(old, u) != group(new, u))
}

/// The names of the new configuration's pools whose workers must be replaced (new pools
/// included); `server_changed` (a `[server]` setting other than the admin address) changes
/// them all.
pub(super) fn changed_pools<'a>(
    old: &Picture<'a>,
    new: &Picture<'a>,
    server_changed: bool,
) -> Vec<String> {
    let before = Indexed::new(old);
    let after = Indexed::new(new);
    let old_groups: HashMap<SocketAddr, &ListenerGroup> =
        old.groups.iter().map(|g| (g.addr, g)).collect();
    let moved: HashSet<SocketAddr> = new
        .groups
        .iter()
        .filter(|g| {
            old_groups
                .get(&g.addr)
                .is_none_or(|o| !same_outline((&before, old.config, o), (&after, new.config, g)))
        })
        .map(|g| g.addr)
        .collect();
    let old_pools: HashMap<&str, _> = old
        .config
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let none = SmallVec::new();
    // The same upstream groups (the usual case): no pool's paths need looking at for them.
    let upstreams_same = old.config.upstreams == new.config.upstreams;
    // Behind the dispatcher before and after, a pool's view of a shared address is its own
    // sites and the dispatcher's threads; of the others it knows nothing.
    let dispatcher_moved = before.workers.get(DISPATCHER) != after.workers.get(DISPATCHER);
    let behind = |name: &str, addrs: &[SocketAddr]| {
        before.dispatched
            && after.dispatched
            && name != DISPATCHER
            && addrs.iter().any(|a| after.shared.contains(a))
    };
    new.config
        .pools
        .iter()
        .filter(|p| {
            let name = p.name.as_str();
            let addrs = after.addrs.get(name).unwrap_or(&none);
            let view_changed = if behind(name, addrs) {
                dispatcher_moved
                    || addrs.iter().any(|a| {
                        before.shared.contains(a) != after.shared.contains(a)
                            || (moved.contains(a) && after.default_of.contains(&(*a, name)))
                    })
            } else {
                addrs.iter().any(|a| moved.contains(a))
            };
            server_changed
                || (!upstreams_same && upstreams_changed(name, &after, old.config, new.config))
                || !old_pools.get(name).is_some_and(|old| same(old, p))
                || before.workers.get(name) != after.workers.get(name)
                || before.own_sites.get(name) != after.own_sites.get(name)
                || before.addrs.get(name).unwrap_or(&none) != addrs
                || view_changed
        })
        .map(|p| p.name.clone())
        .collect()
}

/// How many changed sites a change may have and still be told apart site by site (see
/// [`sites_changed_alone`]); past it, the whole comparison.
const SITES_TOLD_APART: usize = 64;

/// A change of some sites' insides alone — a hosting panel's change of one site's root,
/// headers or certificate — told in pointer compares: the pools, upstream groups and
/// `[server]` the same; the sites the same list, each kept from the last configuration
/// (shared) or equal, but for at most [`SITES_TOLD_APART`] whose names, bindings, pools,
/// PROXY protocol settings and outlines (what other pools see of them) are the same. Their
/// indices, or `None` for any other change. Such a change has the same plan and listener
/// groups as the running configuration, and changes the changed sites' pools alone — what
/// [`changed_pools`] would say, without its passes over every pool and site (at 10,000 sites
/// they were a fifth of an API change's time). Debug builds check that it says the same.
pub(super) fn sites_changed_alone(old: &Config, new: &Config) -> Option<SmallVec<[usize; 4]>> {
    if !same_list(&old.pools, &new.pools)
        || old.sites.len() != new.sites.len()
        || old.server != new.server
        || old.upstreams != new.upstreams
    {
        return None;
    }
    let mut changed = SmallVec::new();
    for (i, (a, b)) in old.sites.iter().zip(&new.sites).enumerate() {
        if same(a, b) {
            continue;
        }
        if !seen_alike(a, b) || changed.len() == SITES_TOLD_APART {
            return None;
        }
        changed.push(i);
    }
    Some(changed)
}

/// Whether a site changed inside only: its name, bindings, pools, PROXY protocol settings
/// and outline (what other pools see of it) the same.
fn seen_alike(a: &SiteSpec, b: &SiteSpec) -> bool {
    a.same_outline(b)
        && a.bindings == b.bindings
        && a.pools() == b.pools()
        && a.proxy_protocol == b.proxy_protocol
        && a.proxy_protocol_from == b.proxy_protocol_from
}

/// A change that adds sites — a hosting panel's new site — and may change others' insides
/// as [`sites_changed_alone`] says, nothing else: the pools, upstream groups and `[server]`
/// the same, every site of before still there in the same order, at most
/// [`SITES_TOLD_APART`] added or changed. Their indices in `new`, or `None`. Whether its
/// listener groups keep their sockets is the caller's to see (`hosts_live`).
pub(super) fn sites_added_alone(old: &Config, new: &Config) -> Option<SmallVec<[usize; 4]>> {
    let added = new.sites.len().checked_sub(old.sites.len())?;
    if added == 0
        || added > SITES_TOLD_APART
        || !same_list(&old.pools, &new.pools)
        || old.server != new.server
        || old.upstreams != new.upstreams
    {
        return None;
    }
    let mut touched = SmallVec::new();
    let mut before = old.sites.iter().peekable();
    for (i, b) in new.sites.iter().enumerate() {
        match before.peek() {
            // Names are unique: a site of before, matched in order.
            Some(a) if a.name == b.name => {
                let a = before.next()?;
                if same(a, b) {
                    continue;
                }
                if !seen_alike(a, b) {
                    return None;
                }
                touched.push(i);
            }
            _ => touched.push(i),
        }
        if touched.len() > SITES_TOLD_APART {
            return None;
        }
    }
    // Every site of before met: the others are added (a site moved in the order is not).
    before.next().is_none().then_some(touched)
}

/// A change that adds pools alone — a hosting panel's new pool, put before the site that
/// names it: the sites, upstream groups and `[server]` the same, every pool of before still
/// there, the same and in the same order, at most [`SITES_TOLD_APART`] added. Their names,
/// or `None`. No site names an added pool (the sites are those of before), so no address
/// changes; whether the plan keeps every other pool's workers is the caller's to see (a
/// pool added may move others). Such a change changes the added pools alone — what
/// [`changed_pools`] would say, without its indexes of every pool, site and address (at
/// 10,000 sites a fifth of a pool `PUT`'s time). Debug builds check that it says the same.
pub(super) fn pools_added_alone(old: &Config, new: &Config) -> Option<Vec<String>> {
    let added = new.pools.len().checked_sub(old.pools.len())?;
    if added == 0
        || added > SITES_TOLD_APART
        || old.server != new.server
        || old.upstreams != new.upstreams
        || !same_list(&old.sites, &new.sites)
    {
        return None;
    }
    let mut names = Vec::new();
    let mut before = old.pools.iter().peekable();
    for pool in &new.pools {
        match before.peek() {
            // Names are unique: a pool of before, matched in order.
            Some(a) if a.name == pool.name => {
                let a = before.next()?;
                if !same(a, pool) {
                    return None;
                }
            }
            _ => names.push(pool.name.clone()),
        }
    }
    before.next().is_none().then_some(names)
}

/// Whether `plan` places every worker of `old` as `old` did, in the same order, the workers
/// of the pools `added` aside.
pub(super) fn plan_keeps_others(old: &Plan, plan: &Plan, added: &[String]) -> bool {
    let others = (plan.workers.iter()).filter(|w| !added.contains(&w.pool));
    others.eq(old.workers.iter())
}

/// The pools of `config`'s sites at `sites`, in the configuration's order of pools (as
/// [`changed_pools`] lists them).
pub(super) fn pools_of_sites(config: &Config, sites: &[usize]) -> Vec<String> {
    let named: HashSet<&str> = (sites.iter())
        .filter_map(|&i| config.sites.get(i))
        .flat_map(|s| s.pools())
        .collect();
    if named.is_empty() {
        return Vec::new();
    }
    (config.pools.iter())
        .filter(|p| named.contains(p.name.as_str()))
        .map(|p| p.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    /// `n` sites, site k of pool `p{k % 2}` on one port by host, its root `roots(k)` (a folder
    /// of the crate's).
    fn hosting(n: usize, roots: impl Fn(usize) -> &'static str, extra: &str) -> Config {
        let mut text = String::from("[[pool]]\nname = \"p0\"\n[[pool]]\nname = \"p1\"\n");
        for k in 0..n {
            text.push_str(&format!(
                "[[site]]\nname = \"s{k}\"\nbindings = [\"http://127.0.0.1:8080:s{k}.example\"]\nroot = \"{}\"\n[[site.app]]\npool = \"p{}\"\n",
                roots(k),
                k % 2
            ));
        }
        text.push_str(extra);
        Config::parse(&text, Path::new("h.toml"), &fixture("dl980")).unwrap()
    }

    use std::path::Path;

    #[test]
    fn sites_added_are_told_apart_in_order() {
        let old = hosting(6, |_| "src", "");
        // Two sites more (at the end: the same six first), one of the six changed inside.
        let new = hosting(8, |k| if k == 2 { "docs" } else { "src" }, "");
        let touched = sites_added_alone(&old, &new).unwrap();
        assert_eq!(touched.as_slice(), &[2, 6, 7]);
        // None added: not this shortcut's (the changed-inside one takes it).
        assert!(sites_added_alone(&old, &hosting(6, |_| "src", "")).is_none());
        // A site of before gone, or moved in the order: the whole comparison.
        assert!(sites_added_alone(&hosting(7, |_| "src", ""), &new).is_some());
        let mut moved = new.clone();
        moved.sites.swap(0, 7);
        assert!(sites_added_alone(&old, &moved).is_none());
        let mut gone = new.clone();
        gone.sites.remove(3);
        gone.sites.push(new.sites[3].clone());
        assert!(sites_added_alone(&old, &gone).is_none());
        // A pool more: the whole comparison.
        let more = hosting(8, |_| "src", "[[pool]]\nname = \"p9\"\n");
        assert!(sites_added_alone(&old, &more).is_none());
    }

    #[test]
    fn a_sites_root_changed_is_that_sites_alone_and_its_pools() {
        let old = hosting(6, |_| "src", "");
        let same = hosting(6, |_| "src", "");
        assert_eq!(sites_changed_alone(&old, &same).as_deref(), Some(&[][..]));
        let new = hosting(6, |k| if k == 3 { "docs" } else { "src" }, "");
        let sites = sites_changed_alone(&old, &new).unwrap();
        assert_eq!(sites.as_slice(), &[3]);
        assert_eq!(pools_of_sites(&new, &sites), vec!["p1".to_string()]);
        let two = hosting(6, |k| if k == 3 || k == 4 { "docs" } else { "src" }, "");
        let sites = sites_changed_alone(&old, &two).unwrap();
        assert_eq!(
            pools_of_sites(&two, &sites),
            vec!["p0".to_string(), "p1".to_string()]
        );
    }

    #[test]
    fn what_other_pools_see_or_the_listeners_use_is_the_whole_comparisons() {
        let old = hosting(4, |_| "src", "");
        // A host changed (the address's routes), a site moved to another pool, a site added,
        // a pool changed, a `[server]` setting changed.
        let mut host = hosting(4, |_| "src", "");
        std::sync::Arc::make_mut(&mut host.sites[1]).bindings[0].host = Some("x.example".into());
        assert!(sites_changed_alone(&old, &host).is_none());
        let mut moved = hosting(4, |_| "src", "");
        std::sync::Arc::make_mut(&mut moved.sites[1]).apps[0].pool = "p0".into();
        assert!(sites_changed_alone(&old, &moved).is_none());
        assert!(sites_changed_alone(&old, &hosting(5, |_| "src", "")).is_none());
        let mut pool = hosting(4, |_| "src", "");
        std::sync::Arc::make_mut(&mut pool.pools[0]).processes = crate::config::Processes::Count(3);
        assert!(sites_changed_alone(&old, &pool).is_none());
        let mut server = hosting(4, |_| "src", "");
        server.server.backlog += 1;
        assert!(sites_changed_alone(&old, &server).is_none());
    }

    #[test]
    fn past_its_bound_a_change_of_many_sites_is_compared_whole() {
        let n = SITES_TOLD_APART + 1;
        let old = hosting(n, |_| "src", "");
        assert!(sites_changed_alone(&old, &hosting(n, |_| "docs", "")).is_none());
        let all_but_one = hosting(n, |k| if k == 0 { "src" } else { "docs" }, "");
        assert_eq!(
            sites_changed_alone(&old, &all_but_one).map(|s| s.len()),
            Some(SITES_TOLD_APART)
        );
    }

    #[test]
    fn pools_added_alone_are_told_apart_and_the_plan_must_keep_the_others() {
        let old = hosting(4, |_| "src", "");
        // A pool more, named by no site (a panel's, before its site): that pool alone.
        let new = hosting(
            4,
            |_| "src",
            "[[pool]]\nname = \"n1\"\nstart = \"on-demand\"\n",
        );
        assert_eq!(pools_added_alone(&old, &new), Some(vec!["n1".to_string()]));
        let topology = fixture("dl980");
        let plan = |c: &Config| crate::placement::plan(&topology, &c.pools, &[]).unwrap();
        let (before, after) = (plan(&old), plan(&new));
        assert!(plan_keeps_others(&before, &after, &["n1".to_string()]));
        // Told apart from the whole comparison, it says the same.
        let groups = |c: &Config| crate::server::listeners::wanted_groups(c);
        let (old_groups, new_groups) = (groups(&old), groups(&new));
        let whole = changed_pools(
            &Picture {
                config: &old,
                groups: &old_groups,
                plan: &before,
            },
            &Picture {
                config: &new,
                groups: &new_groups,
                plan: &after,
            },
            false,
        );
        assert_eq!(whole, vec!["n1".to_string()]);
        // A plan that moved another pool's worker does not keep the others.
        let mut moved = after.clone();
        let other = moved.workers.iter_mut().find(|w| w.pool == "p0").unwrap();
        other.index += 1;
        assert!(!plan_keeps_others(&before, &moved, &["n1".to_string()]));
        // Nothing added, a site more, a pool changed or gone: the whole comparison.
        assert!(pools_added_alone(&old, &hosting(4, |_| "src", "")).is_none());
        let site_too = hosting(5, |_| "src", "[[pool]]\nname = \"n1\"\n");
        assert!(pools_added_alone(&old, &site_too).is_none());
        let mut changed = new.clone();
        std::sync::Arc::make_mut(&mut changed.pools[0]).processes =
            crate::config::Processes::Count(3);
        assert!(pools_added_alone(&old, &changed).is_none());
        let mut gone = new.clone();
        gone.pools.remove(1);
        assert!(pools_added_alone(&old, &gone).is_none());
    }
}
