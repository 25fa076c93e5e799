//! What the master tells a running dispatcher when its port's hosts change (the `hosts`
//! control message), and how each side makes it: the sites in outline, the listener groups'
//! host tables and the hand-off table — all of a dispatcher's spec such a change touches
//! (see `supervisor::hosts_live`) — each sent as a change of the list the process holds
//! ([`Piece`]), and made whole there ([`Hosts`]) for its threads to take in place of a
//! restart.
//!
//! Owns: the update's format, a list's change made ([`host_table_change`],
//! [`pools_change`]) and made whole ([`HostsUpdate::into_hosts`]). Must not touch: which
//! sites changed or which process is told (`supervisor::hosts_live`), or how a thread takes
//! the whole (`worker`).
//!
//! Why changes, not the lists: a hoster's add of one site to 10,000 sent every site's
//! outline, every host name and every pool's hand-off sockets again — half a megabyte made,
//! written, read and freed for one site, a third of the dispatcher's time for it. Now it
//! sends that site's outline, its host name and its pool's sockets, and runs of the rest.

use crate::config::SiteSpec;
use crate::handoff::{Peers, PoolSlots};
use crate::routing::GroupRoutes;
use crate::server::spec::WorkerSpec;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A dispatcher's new hosts, each part a change of what it holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostsUpdate {
    /// Counts the updates the master sent this process; the worker says which one all its
    /// threads took (`hosts-taken`).
    pub generation: u64,
    /// The update whose parts these change (0: those of the process's spec, before any
    /// update) — `None`: none, every part is sent whole (after an update not known to be
    /// taken).
    pub after: Option<u64>,
    pub groups: Vec<GroupChange>,
    pub sites: Vec<Piece<Arc<SiteSpec>>>,
    pub handoff_peers: PeersChange,
}

/// One entry of an address's host table: a host name (`None`: the address's default site)
/// and its site's index.
pub type HostEntry = (Option<String>, usize);

/// A listener group's routes, its host table as a change of the one the process holds for
/// the same address (none: every entry is new). A kept entry's site index is moved as the
/// sites' change moved its site ([`moved`]): a site inserted before it shifts it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupChange {
    /// The group's routes, their `hosts` empty.
    pub routes: GroupRoutes,
    pub hosts: Vec<Piece<HostEntry>>,
}

/// The hand-off table, its pools as a change of those the process holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeersChange {
    /// The table, its `pools` empty.
    pub table: Peers,
    pub pools: Vec<Piece<PoolSlots>>,
}

/// A run of a list's new entries: `Kept(from, count)` of the list held, in order, or one
/// entry that is not among them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Piece<T> {
    Kept(usize, usize),
    New(T),
}

impl<T> Piece<T> {
    /// Entry `k` of the list held, next: onto the run it continues, else a run of its own.
    pub fn keep(pieces: &mut Vec<Piece<T>>, k: usize) {
        match pieces.last_mut() {
            Some(Piece::Kept(from, count)) if *from + *count == k => *count += 1,
            _ => pieces.push(Piece::Kept(k, 1)),
        }
    }
}

/// Where each of the `held` entries of the list held is in the list `pieces` make: its new
/// index, or `None` (not kept). A run reaching past `held` is left for
/// [`HostsUpdate::into_hosts`] to refuse.
pub fn moved<T>(pieces: &[Piece<T>], held: usize) -> Vec<Option<usize>> {
    let mut to = vec![None; held];
    let mut at = 0usize;
    for piece in pieces {
        match *piece {
            Piece::Kept(from, count) => {
                for t in 0..count.min(held.saturating_sub(from)) {
                    to[from + t] = Some(at + t);
                }
                at = at.saturating_add(count);
            }
            Piece::New(_) => at += 1,
        }
    }
    to
}

/// `after`, an address's host table, as a change of `before` (the one held), the sites
/// having moved as `moved` says: an entry is kept when `before` has it, its site moved to
/// the entry's. Both tables list their entries in their sites' order, and the kept sites
/// keep theirs, so one pass over both finds them; an entry it does not find is sent new.
pub fn host_table_change(
    before: &[HostEntry],
    after: &[HostEntry],
    moved: &[Option<usize>],
) -> Vec<Piece<HostEntry>> {
    let moved_to = |site: usize| moved.get(site).copied().flatten();
    let mut pieces = Vec::new();
    let mut j = 0;
    for entry in after {
        // Passed: the entries whose sites went, or are now before this one's.
        while j < before.len() && moved_to(before[j].1).is_none_or(|to| to < entry.1) {
            j += 1;
        }
        match before.get(j) {
            Some(held) if held.0 == entry.0 && moved_to(held.1) == Some(entry.1) => {
                Piece::keep(&mut pieces, j);
                j += 1;
            }
            _ => pieces.push(Piece::New(entry.clone())),
        }
    }
    pieces
}

/// `after`, a hand-off table's pools, as a change of `before`: a pool whose slots are the
/// same is kept. The next pool of `before` is looked at first (an add or a removal keeps
/// the rest in order); the others by name.
pub fn pools_change(before: &[PoolSlots], after: &[PoolSlots]) -> Vec<Piece<PoolSlots>> {
    let mut by_name: Option<rustc_hash::FxHashMap<&str, usize>> = None;
    let mut pieces = Vec::new();
    let mut next = 0;
    for pool in after {
        let at = if before.get(next).is_some_and(|b| b.0 == pool.0) {
            Some(next)
        } else {
            let names = by_name.get_or_insert_with(|| {
                (before.iter().enumerate())
                    .map(|(k, p)| (p.0.as_str(), k))
                    .collect()
            });
            names.get(pool.0.as_str()).copied()
        };
        match at {
            Some(k) if before[k] == *pool => {
                Piece::keep(&mut pieces, k);
                next = k + 1;
            }
            _ => pieces.push(Piece::New(pool.clone())),
        }
    }
    pieces
}

/// `pieces` made whole over `held`, each kept entry made by `kept` (`None`: it cannot be,
/// and the whole is refused); `Err` names `what` and the run or entry.
fn made_whole<T>(
    pieces: Vec<Piece<T>>,
    held: &[T],
    what: &dyn std::fmt::Display,
    kept: impl Fn(&T) -> Option<T>,
) -> Result<Vec<T>, String> {
    let mut whole = Vec::with_capacity(held.len() + 1);
    for piece in pieces {
        match piece {
            Piece::Kept(from, count) => {
                let end = from.checked_add(count);
                let run = end.and_then(|end| held.get(from..end)).ok_or_else(|| {
                    format!(
                        "{what} {from}..{} kept of {} held",
                        from.saturating_add(count),
                        held.len()
                    )
                })?;
                for (k, entry) in run.iter().enumerate() {
                    let entry = kept(entry)
                        .ok_or_else(|| format!("{what}: entry {} kept, its site not", from + k))?;
                    whole.push(entry);
                }
            }
            Piece::New(entry) => whole.push(entry),
        }
    }
    Ok(whole)
}

impl HostsUpdate {
    /// Update `now` (its generation, groups and hand-off table) as a change of `held` (the
    /// update the process holds; `None`: every part sent whole), its sites' change made
    /// already (`sites`: the outlines are the caller's business), which says how they moved.
    pub fn between(
        held: Option<&Hosts>,
        now: &Hosts,
        sites: Vec<Piece<Arc<SiteSpec>>>,
    ) -> HostsUpdate {
        let empty = Hosts::default();
        let before = held.unwrap_or(&empty);
        let sites_moved = moved(&sites, before.sites.len());
        let groups = (now.groups.iter())
            .map(|g| {
                let held = (before.groups.iter()).find(|h| h.addr == g.addr);
                let hosts = host_table_change(
                    held.map_or(&[][..], |h| &h.hosts[..]),
                    &g.hosts,
                    &sites_moved,
                );
                let routes = GroupRoutes {
                    hosts: Vec::new(),
                    proxy_protocol_from: g.proxy_protocol_from.clone(),
                    ..**g
                };
                GroupChange { routes, hosts }
            })
            .collect();
        let peers = &now.handoff_peers;
        HostsUpdate {
            generation: now.generation,
            after: held.map(|h| h.generation),
            groups,
            sites,
            handoff_peers: PeersChange {
                table: Peers {
                    dir: peers.dir.clone(),
                    pools: Vec::new(),
                    distances: peers.distances.clone(),
                    wake: peers.wake.clone(),
                },
                pools: pools_change(&before.handoff_peers.pools, &peers.pools),
            },
        }
    }

    /// The update whole, its parts made from `held` (what the process holds: update
    /// `after`'s); `Err` naming a kept run or entry that `held` does not have.
    pub fn into_hosts(self, held: &Hosts) -> Result<Hosts, String> {
        let sites_moved = moved(&self.sites, held.sites.len());
        let sites = made_whole(self.sites, &held.sites, &"sites", |s| Some(Arc::clone(s)))?;
        let groups = (self.groups.into_iter())
            .map(|GroupChange { mut routes, hosts }| {
                let before = (held.groups.iter())
                    .find(|g| g.addr == routes.addr)
                    .map_or(&[][..], |g| &g.hosts[..]);
                let what = format!("hosts of {}", routes.addr);
                routes.hosts = made_whole(hosts, before, &what, |(host, site)| {
                    Some((host.clone(), sites_moved.get(*site).copied().flatten()?))
                })?;
                Ok(Arc::new(routes))
            })
            .collect::<Result<_, String>>()?;
        let PeersChange { mut table, pools } = self.handoff_peers;
        let before = &held.handoff_peers.pools;
        table.pools = made_whole(pools, before, &"hand-off pools", |p| Some(p.clone()))?;
        Ok(Hosts {
            generation: self.generation,
            groups,
            sites: Arc::new(sites),
            handoff_peers: Arc::new(table),
        })
    }
}

/// A dispatcher's hosts whole: what its threads route by, and what the next update
/// changes.
#[derive(Debug, Default)]
pub struct Hosts {
    /// The update that gave them (0: the process's spec).
    pub generation: u64,
    pub groups: Vec<Arc<GroupRoutes>>,
    pub sites: Arc<Vec<Arc<SiteSpec>>>,
    pub handoff_peers: Arc<Peers>,
}

impl Hosts {
    /// Those of `spec`, as sent: update 0.
    pub fn of_spec(spec: &WorkerSpec) -> Hosts {
        Hosts {
            generation: 0,
            groups: spec.groups.clone(),
            sites: Arc::clone(&spec.sites),
            handoff_peers: Arc::clone(&spec.handoff_peers),
        }
    }

    /// `spec` with these sites, groups and hand-off table.
    pub fn applied_to(&self, spec: &WorkerSpec) -> WorkerSpec {
        WorkerSpec {
            groups: self.groups.clone(),
            sites: Arc::clone(&self.sites),
            handoff_peers: Arc::clone(&self.handoff_peers),
            ..spec.clone()
        }
    }
}

#[cfg(test)]
mod tests;
