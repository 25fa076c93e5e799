//! A shared port's hosts changed live: a site added, removed or moved on a shared port
//! changes what the dispatcher routes by (the sites in outline, the host tables, the hand-off
//! table) and nothing else of it, so its running process takes them as a `hosts` message —
//! its sites as a change of those it was last sent — and each of its threads routes its next
//! connections by them; and a change that only adds
//! sites (a hosting panel's new site, its pool added before) keeps the plan, the listener
//! groups' sockets and the hand-off sockets, as a change of a site's insides does.
//!
//! Owns: deciding whether a changed dispatcher takes its change live, telling it, and hearing
//! that every thread took it; deciding whether an add keeps the sockets, and applying it.
//! Must not touch: how a thread takes new hosts (`server::worker`) or which pools a change
//! changes (`reload_diff`, whose whole comparison debug builds check an add against).
//!
//! Why: a restart of the dispatcher made a hoster's add wait for a new process to read the
//! whole port's outline and start its threads (60 ms at 10,000 sites), and threw away its
//! threads' connections to every other pool's hand-off sockets. Anything else that changed
//! in its spec — its CPUs, its sockets, a body bound, its pool's settings — restarts it as
//! before: the comparison is of everything but the three parts a message carries. And the
//! whole comparison of an add — every pool's workers, sites and addresses before and after,
//! the plan and the groups made again — was a third of the master's time for it.

use super::procs::{HostsDue, SentHosts, Slot};
use super::reload_diff::pools_of_sites;
use super::Supervisor;
use crate::config::{Config, SiteSpec, StartMode};
use crate::server::control::Message;
use crate::server::dispatcher::POOL as DISPATCHER;
use crate::server::hosts_update::{Hosts, HostsUpdate, Piece};
use crate::server::listeners::ListenerGroup;
use crate::server::log;
use crate::server::spec::WorkerSpec;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a dispatcher's new hosts wait for the change's new workers to serve.
const HOSTS_WAIT: Duration = Duration::from_secs(10);

impl Supervisor {
    /// With the dispatcher among the `changed` pools, tells its running processes their new
    /// hosts when each can take them live (see the module doc): its specs are then taken out
    /// of `specs` and `true` is returned — the dispatcher is not to be replaced. `new_pool`:
    /// the dispatcher's pool as the new configuration has it.
    pub(super) fn tell_dispatcher_hosts(
        &mut self,
        specs: &mut Vec<WorkerSpec>,
        changed: &HashSet<String>,
        new_pool: Option<&crate::config::PoolSpec>,
    ) -> bool {
        if !changed.contains(DISPATCHER) {
            return false;
        }
        let running = self.pools.iter().find(|p| p.spec.name == DISPATCHER);
        if running.is_none_or(|p| Some(&*p.spec) != new_pool) {
            return false;
        }
        let new: Vec<usize> = (0..specs.len())
            .filter(|&k| specs[k].pool == DISPATCHER)
            .collect();
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].spec.pool == DISPATCHER)
            .collect();
        let live = new.len() == slots.len()
            && (new.iter().zip(&slots)).all(|(&k, &i)| {
                self.slots[i].spec.index == specs[k].index && takes_live(&self.slots[i], &specs[k])
            });
        if !live {
            return false;
        }
        let replaced: HashSet<String> = (changed.iter())
            .filter(|p| *p != DISPATCHER)
            .cloned()
            .collect();
        for (&k, &i) in new.iter().zip(&slots).rev() {
            let spec = specs.remove(k);
            self.tell_hosts(i, spec, replaced.clone());
        }
        true
    }

    /// Readies slot `i`'s process's hosts as `spec` has them, to be sent once the change's
    /// new workers serve ([`Self::send_due_hosts`], after they are started); the slot keeps
    /// `spec` for its next start. They go as a change of those it was last sent.
    fn tell_hosts(&mut self, i: usize, mut spec: WorkerSpec, mut pools: HashSet<String>) {
        let slot = &mut self.slots[i];
        // Its control groups are made for a slot's start (`make_cgroups_for`): kept.
        spec.cgroups = std::mem::take(&mut slot.spec.cgroups);
        let Some(p) = slot.current.as_mut() else {
            return;
        };
        // Not the update due, if one is: it is not sent, and this one replaces it.
        let base = change_base(p.last_hosts.as_ref(), p.hosts_taken);
        let (pieces, seen) = sites_change(base, &spec.sites, &spec.pool);
        p.hosts_sent += 1;
        let now = Hosts {
            generation: p.hosts_sent,
            // The dispatcher's groups are its spec's whole (`spawn::as_seen`).
            groups: spec.groups.clone(),
            sites: Arc::new(seen),
            handoff_peers: Arc::clone(&spec.handoff_peers),
        };
        let update = HostsUpdate::between(base.map(|b| &b.hosts), &now, pieces);
        match serde_json::to_string(&update) {
            Ok(json) => {
                // An earlier change's hosts not sent yet: this one carries them, and waits
                // for its pools too.
                if let Some(earlier) = p.hosts_due.take() {
                    pools.extend(earlier.pools);
                }
                let line = Message::Hosts(json).line();
                let since = Instant::now();
                let sent = SentHosts {
                    sources: Arc::clone(&spec.sites),
                    hosts: now,
                };
                p.hosts_due = Some(HostsDue {
                    line,
                    since,
                    pools,
                    sent,
                });
            }
            Err(e) => log("master", format!("worker {}: hosts: {e}", spec.name())),
        }
        slot.spec = spec;
    }

    /// Sends the dispatchers the hosts due to them once the pools of the changes they carry
    /// serve (each slot ready, asleep or stopped) — a host moved to another pool is then
    /// routed to the pool's new worker, not to its old one, which would hand it back — or
    /// once they waited [`HOSTS_WAIT`] (a pool that never gets ready holds no other site's
    /// change for long).
    pub(super) fn send_due_hosts(&mut self) {
        let mut dispatchers = (self.slots.iter())
            .filter(|s| s.spec.pool == DISPATCHER)
            .filter_map(|s| s.current.as_ref());
        if !dispatchers.any(|p| p.hosts_due.is_some()) {
            return;
        }
        let now = Instant::now();
        let mut due: Vec<(usize, HostsDue)> = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.spec.pool == DISPATCHER {
                if let Some(hosts) = slot.current.as_mut().and_then(|p| p.hosts_due.take()) {
                    due.push((i, hosts));
                }
            }
        }
        for (i, hosts) in due {
            let ready = now.duration_since(hosts.since) >= HOSTS_WAIT
                || self.slots.iter().all(|s| {
                    !hosts.pools.contains(&s.spec.pool)
                        || s.asleep
                        || self.pools[s.pool].stopped.is_some()
                        || s.current.as_ref().is_some_and(|c| c.life.is_ready())
                });
            let Some(p) = self.slots[i].current.as_mut() else {
                continue;
            };
            if !ready {
                p.hosts_due = Some(hosts);
            } else if p.control.as_ref().is_some_and(|c| c.send(&hosts.line)) {
                p.last_hosts = Some(hosts.sent);
            } else {
                // Its control socket is gone or full: its exit, or the pings' deadline,
                // replaces it, and its successor starts with the new hosts.
                log(
                    "master",
                    format!("dispatcher pid {} could not be told its new hosts", p.pid),
                );
            }
        }
    }

    /// How `new`, which adds `sites` alone ([`super::reload_diff::sites_added_alone`]), is applied keeping every
    /// listener group's sockets and flags — the same addresses, each with its pools of
    /// before and perhaps pools that join a shared address asleep (an on-demand pool with no
    /// process: it has no hand-off socket to open), the groups of the changed pools as many
    /// owners as sockets — or `None`.
    pub(super) fn added_keeping_sockets(&self, new: &Config, sites: &[usize]) -> Option<Added> {
        let wanted = crate::server::listeners::wanted_groups(new);
        if wanted.len() != self.groups.len() {
            return None;
        }
        let asleep = |pool: &str| {
            new.pool(pool)
                .is_some_and(|p| p.start == StartMode::OnDemand)
                && (self.slots.iter())
                    .filter(|s| s.spec.pool == pool)
                    .all(|s| s.asleep)
        };
        let old_of = |w: &ListenerGroup| self.groups.iter().find(|g| g.addr == w.addr);
        let fits = |w: &ListenerGroup| {
            old_of(w).is_some_and(|g| {
                let (a, b) = (&g.routes, &w.routes);
                a.tls == b.tls
                    && a.proxy_protocol == b.proxy_protocol
                    && a.proxy_protocol_from == b.proxy_protocol_from
                    && a.dispatched == b.dispatched
                    && g.shared() == w.shared()
                    && {
                        // As a set: a hoster's port has 10,000 pools.
                        let served: HashSet<&str> = g.pools.iter().map(String::as_str).collect();
                        (w.pools.iter())
                            .all(|p| served.contains(p.as_str()) || (w.shared() && asleep(p)))
                    }
            })
        };
        if !wanted.iter().all(fits) {
            return None;
        }
        let mut changed = pools_of_sites(new, sites);
        // A host added on a shared address changes its outline, and so its dispatcher (last
        // among the pools, as `with_dispatcher` puts it).
        let hosts_moved = (wanted.iter())
            .filter(|w| w.routes.dispatched)
            .any(|w| old_of(w).is_some_and(|g| !same_outline(g, &self.config, w, new)));
        if hosts_moved && new.pool(DISPATCHER).is_some() {
            changed.push(DISPATCHER.to_string());
        }
        // The changed pools' groups are shared out again among their owners now (the plan's
        // workers may have moved in its order since they were last), each to a socket it has.
        let mut owners = Vec::new();
        for (k, w) in wanted.iter().enumerate() {
            if !w.pools.iter().any(|p| changed.contains(p)) {
                continue;
            }
            let g = old_of(w)?;
            let now =
                crate::server::listeners::group_owners(&w.pools, new, &self.topology, &self.plan);
            if now.len() != g.owners.len() || !g.udp.is_empty() {
                return None;
            }
            owners.push((k, now));
        }
        Some(Added {
            wanted,
            changed,
            owners,
        })
    }

    /// [`Self::apply`] for sites added (and others changed inside) alone
    /// ([`super::reload_diff::sites_added_alone`]), as [`Self::added_keeping_sockets`] found it can be: the plan
    /// and the hand-off sockets stay as they are, the groups take their new hosts and pools
    /// (the changed pools' groups their owners again), the sites' pools get new workers and
    /// the dispatcher its new hosts. Without it, an add at 10,000 sites compared every pool
    /// and made the plan, the groups and the hand-off sockets again: a third of the master's
    /// time for it.
    pub(super) fn apply_to_added_sites(
        &mut self,
        new: Config,
        (sites, added): (&[usize], Added),
        file: &str,
    ) -> Result<String, String> {
        crate::server::runtime::prepare_access_logs_of(&new, sites)
            .map_err(|e| format!("{file}: {e}"))?;
        let Added {
            wanted,
            mut changed,
            owners,
        } = added;
        #[cfg(debug_assertions)]
        self.assert_as_whole(&new, &wanted, &changed, "an add");
        let took = self.take_routes(wanted);
        for (i, k) in took.into_iter().enumerate() {
            if let Some((_, now)) = owners.iter().find(|(o, _)| Some(*o) == k) {
                let g = &mut self.groups[i];
                crate::server::listeners::arm_group(g, now, Vec::new(), &new, &self.topology);
            }
        }
        let changed_set: HashSet<String> = changed.iter().cloned().collect();
        let told = self.switch_workers(new, (&changed_set, &HashSet::new()));
        let mut notes = Vec::new();
        if told {
            notes.push("the dispatcher told its port's new hosts, not replaced".into());
            changed.retain(|p| p != DISPATCHER);
        }
        Ok(self.summary(file, (&changed, &[], 0), notes))
    }

    /// A dispatcher's process says all its threads took update `taken`.
    pub(super) fn hosts_taken(&mut self, generation: u64, taken: u64) {
        if let Some((_, p)) = self.proc_of(generation) {
            p.hosts_taken = p.hosts_taken.max(taken);
        }
    }
}

/// An add that keeps every listener group's sockets (see
/// [`Supervisor::added_keeping_sockets`]): the new groups, the pools it changes, and the
/// changed pools' groups' owners now (by index in the new groups).
pub(super) struct Added {
    wanted: Vec<ListenerGroup>,
    changed: Vec<String>,
    owners: Vec<(usize, crate::server::listeners::SocketOwners)>,
}

/// What a process of `pool` started holding, as update 0, from the hosts it was `sent` (the
/// configuration's sites, and the hosts as sent): a dispatcher's first new hosts are a
/// change of those (at 10,000 sites, the first site a panel added sent all 10,000 again).
pub(super) fn sent_at_start(pool: &str, sent: Option<SentAtStart>) -> Option<SentHosts> {
    let (sources, hosts) = sent.filter(|_| pool == DISPATCHER)?;
    Some(SentHosts { sources, hosts })
}

/// The hosts a process was sent at its start: the configuration's sites, and the hosts as
/// sent (update 0).
pub(super) type SentAtStart = (Arc<Vec<Arc<SiteSpec>>>, Hosts);

/// The hosts a dispatcher's next update changes: those it was last sent once its threads
/// all took them (`taken`, which it says only of an update it read) — else none, and the
/// update sends all: one it has not taken yet, or refused, is not what it holds.
fn change_base(sent: Option<&SentHosts>, taken: u64) -> Option<&SentHosts> {
    sent.filter(|s| taken >= s.hosts.generation)
}

/// `sources` (a configuration's sites) as dispatcher `pool` holds them — in outline — and
/// as a change of those it was last sent (`before`): a site whose configuration is the very
/// one `before` was made from (the same `Arc`: a change keeps every site it did not touch)
/// is kept, in runs; another is made in outline and sent.
fn sites_change(
    before: Option<&SentHosts>,
    sources: &[Arc<SiteSpec>],
    pool: &str,
) -> (Vec<Piece<Arc<SiteSpec>>>, Vec<Arc<SiteSpec>>) {
    // `before` holds its sources: none of their addresses is another site's meanwhile.
    let index: rustc_hash::FxHashMap<usize, usize> = (before.iter())
        .flat_map(|b| b.sources.iter().enumerate())
        .map(|(k, s)| (Arc::as_ptr(s) as usize, k))
        .collect();
    let mut pieces = Vec::new();
    let mut seen = Vec::with_capacity(sources.len());
    for site in sources {
        match (before, index.get(&(Arc::as_ptr(site) as usize))) {
            (Some(before), Some(&k)) => {
                seen.push(Arc::clone(&before.hosts.sites[k]));
                Piece::keep(&mut pieces, k);
            }
            _ => {
                let outline = site.as_seen_by(site, pool);
                seen.push(Arc::clone(&outline));
                pieces.push(Piece::New(outline));
            }
        }
    }
    #[cfg(debug_assertions)]
    for (site, outline) in sources.iter().zip(&seen) {
        assert_eq!(
            **outline,
            *site.as_seen_by(site, pool),
            "a kept site's outline"
        );
    }
    (pieces, seen)
}

/// Whether address group `a` of `old` and `b` of `new` look the same to the pools there:
/// the same pools, and each host's site the same in outline (its index may have moved).
fn same_outline(a: &ListenerGroup, old: &Config, b: &ListenerGroup, new: &Config) -> bool {
    a.pools == b.pools
        && a.routes.hosts.len() == b.routes.hosts.len()
        && (a.routes.hosts.iter().zip(&b.routes.hosts)).all(|((ha, ia), (hb, ib))| {
            ha == hb
                && match (old.sites.get(*ia), new.sites.get(*ib)) {
                    (Some(x), Some(y)) => Arc::ptr_eq(x, y) || x.same_outline(y),
                    (x, y) => x.is_none() && y.is_none(),
                }
        })
}

/// Whether `slot`'s running process can take `new` as a message: it serves (ready, not
/// being replaced), and `new` differs from the spec it runs by only its sites, host tables
/// and hand-off table — with the same listener groups in the same order, and the same bound
/// on a body's size.
fn takes_live(slot: &Slot, new: &WorkerSpec) -> bool {
    let serving = slot.replacing.is_none()
        && !slot.asleep
        && slot.current.as_ref().is_some_and(|p| p.life.is_ready());
    let old = &slot.spec;
    let same_groups = old.groups.len() == new.groups.len()
        && (old.groups.iter().zip(&new.groups)).all(|(a, b)| a.addr == b.addr && a.tls == b.tls);
    serving
        && same_groups
        && old.body_ceiling() == new.body_ceiling()
        && the_rest(old).is_some_and(|a| the_rest(new).is_some_and(|b| a == b))
}

/// Everything of `spec` but what a `hosts` message carries, as JSON (`WorkerSpec` has no
/// equality of its own: compared as the worker would read it) — nor its control socket and
/// control groups, which a slot's start fills in.
fn the_rest(spec: &WorkerSpec) -> Option<Vec<u8>> {
    let rest = WorkerSpec {
        groups: Vec::new(),
        sites: Arc::default(),
        handoff_peers: Arc::default(),
        control_fd: 0,
        cgroups: Vec::new(),
        ..spec.clone()
    };
    serde_json::to_vec(&rest).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    /// Sites `names`, each with its own pool, on one shared port.
    fn sites(names: &[&str]) -> Vec<Arc<SiteSpec>> {
        let mut text = String::new();
        for name in names {
            text += &format!("[[pool]]\nname = \"p{name}\"\ncpus = \"0\"\n[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:8080:{name}.test\"]\n[[site.app]]\npool = \"p{name}\"\n");
        }
        let path = std::path::Path::new("h.toml");
        Config::parse(&text, path, &fixture("dl980")).unwrap().sites
    }

    /// What the dispatcher makes of `pieces` (sent through JSON, as the `hosts` line) over
    /// the list it holds.
    fn taken(
        pieces: &[Piece<Arc<SiteSpec>>],
        after: Option<u64>,
        held: &[Arc<SiteSpec>],
    ) -> Result<Vec<Arc<SiteSpec>>, String> {
        let update = HostsUpdate {
            generation: after.unwrap_or(0) + 1,
            after,
            groups: Vec::new(),
            sites: pieces.to_vec(),
            handoff_peers: Default::default(),
        };
        let json = serde_json::to_string(&update).unwrap();
        let update: HostsUpdate = serde_json::from_str(&json).unwrap();
        let held = Hosts {
            generation: after.unwrap_or(0),
            sites: Arc::new(if after.is_some() {
                held.to_vec()
            } else {
                Vec::new()
            }),
            ..Hosts::default()
        };
        Ok(update.into_hosts(&held)?.sites.to_vec())
    }

    #[test]
    fn an_added_site_is_sent_alone_and_the_dispatcher_keeps_the_others() {
        let first = sites(&["a", "b", "c", "d"]);
        // An update not made on one taken sends every site, in outline.
        let (pieces, seen) = sites_change(None, &first, DISPATCHER);
        assert_eq!(pieces.len(), 4);
        assert!(pieces.iter().all(|p| matches!(p, Piece::New(_))));
        let held = taken(&pieces, None, &[]).unwrap();
        assert_eq!(held, seen);
        let before = SentHosts {
            sources: Arc::new(first.clone()),
            hosts: Hosts {
                generation: 1,
                sites: Arc::new(seen),
                ..Hosts::default()
            },
        };
        // A site added between b and c, and d changed (a new configuration of it).
        let added = sites(&["x"]).remove(0);
        let changed_d = Arc::new((*first[3]).clone());
        let next = vec![
            Arc::clone(&first[0]),
            Arc::clone(&first[1]),
            Arc::clone(&added),
            Arc::clone(&first[2]),
            changed_d,
        ];
        let (pieces, seen) = sites_change(Some(&before), &next, DISPATCHER);
        let outline = added.as_seen_by(&added, DISPATCHER);
        assert_eq!(
            pieces,
            vec![
                Piece::Kept(0, 2),
                Piece::New(outline),
                Piece::Kept(2, 1),
                Piece::New(first[3].as_seen_by(&first[3], DISPATCHER)),
            ]
        );
        let now = taken(&pieces, Some(1), &held).unwrap();
        assert_eq!(now, seen);
        let names: Vec<&str> = now.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "x", "c", "d"]);
        // What it kept is what it held, not a copy.
        assert!(Arc::ptr_eq(&now[3], &held[2]));
        // A run it does not hold is refused, not cut short.
        let wrong = taken(&[Piece::Kept(3, 2)], Some(1), &held).unwrap_err();
        assert_eq!(wrong, "sites 3..5 kept of 4 held");
        assert!(taken(&[Piece::Kept(usize::MAX, 2)], Some(1), &held).is_err());
        // Changed from update 1 once the dispatcher said it took it; before, all again.
        assert!(change_base(Some(&before), 0).is_none());
        assert!(change_base(Some(&before), 1).is_some());
        assert!(change_base(None, 1).is_none());
    }

    #[test]
    fn a_dispatchers_first_hosts_change_the_sites_it_started_with() {
        let first = sites(&["a", "b", "c"]);
        let sent: Vec<_> = (first.iter())
            .map(|s| s.as_seen_by(s, DISPATCHER))
            .collect();
        let at_start = || {
            let hosts = Hosts {
                sites: Arc::new(sent.clone()),
                ..Hosts::default()
            };
            Some((Arc::new(first.clone()), hosts))
        };
        // Another pool's process is never sent hosts: it keeps no sites for them.
        assert!(sent_at_start("pa", at_start()).is_none());
        let start = sent_at_start(DISPATCHER, at_start()).unwrap();
        // Update 0 is the start's, taken by every thread before the process said ready.
        let base = change_base(Some(&start), 0).unwrap();
        let mut next = first.clone();
        next.insert(1, sites(&["x"]).remove(0));
        let (pieces, seen) = sites_change(Some(base), &next, DISPATCHER);
        assert_eq!(pieces.len(), 3, "{pieces:?}");
        assert_eq!(pieces[0], Piece::Kept(0, 1));
        assert_eq!(pieces[2], Piece::Kept(1, 2));
        // The dispatcher holds its spec's sites as update 0, and makes the same list.
        assert_eq!(taken(&pieces, Some(0), &sent).unwrap(), seen);
    }
}
