//! Which pools a reload changes: a pool keeps its running workers when everything they were
//! built from is the same before and after.
//!
//! Owns: that comparison, pure, and its cost — linear in sites, pools and planned workers,
//! never pools × sites (10,000 pools on one port are compared in milliseconds). Must not
//! touch: what is done to a changed pool (see `reload`).
//!
//! What a pool's worker is built from (see `spawn`): the pool itself; its planned workers;
//! its own sites whole; and for each address it serves, that address's *outline* — its
//! pools, flags, each host's site as another pool sees it (`SiteSpec::outline`, without the
//! root, log, certificate or policies) and where its pools' workers are (hand-off targets).
//! So editing one site's root, log, headers or certificate changes only the pools serving
//! it; adding a host or a pool on a shared address changes that address's outline, and with
//! it the dispatcher there — not the pools behind it, whose workers know their own sites
//! alone and the dispatcher's threads (`spawn::own_view`): adding a hoster's site restarts
//! the dispatcher and the new site's pool, nothing else.

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
        self.0.len() == other.0.len()
            && (self.0.iter().zip(&other.0)).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
    }
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
                || upstreams_changed(name, &after, old.config, new.config)
                || !old_pools
                    .get(name)
                    .is_some_and(|old| Arc::ptr_eq(old, p) || **old == **p)
                || before.workers.get(name) != after.workers.get(name)
                || before.own_sites.get(name) != after.own_sites.get(name)
                || before.addrs.get(name).unwrap_or(&none) != addrs
                || view_changed
        })
        .map(|p| p.name.clone())
        .collect()
}
