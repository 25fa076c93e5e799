//! Reload (SIGHUP or `espalier reload`): the config file read again and applied without a
//! restart, as nginx's reload builds its new cycle beside the old one.
//!
//! Owns: the difference between the running configuration and the new one — unchanged pools
//! keep running untouched; a changed pool gets new workers on its existing sockets (more
//! opened if it grew) and its old workers drain once the new ones are all ready; a new pool
//! starts; a removed pool's workers drain and its listeners close with them. Transactional:
//! everything that can fail (the config, the plan, binding new addresses, opening sockets) is
//! done before anything running changes, so a refused reload changes nothing.
//! Must not touch: how workers start or drain (see [`super::slots`]).

use super::life::{Happening, Restart};
use super::procs::{PoolRt, Slot};
use super::reload_diff::{
    changed_pools, plan_keeps_others, pools_added_alone, pools_of_sites, sites_added_alone,
    sites_changed_alone, Picture,
};
use super::Supervisor;
use crate::config::document::version_on_disk;
use crate::config::Config;
use crate::server::lifecycle;
#[cfg(debug_assertions)]
use crate::server::listeners::ListenerGroup;
use crate::server::log;
// Keyed by the pools' names, 10,000 of them at each change: not SipHash.
use rustc_hash::FxHashMap as HashMap;
use std::collections::HashSet;
use std::time::Instant;

impl Supervisor {
    /// `slot` with its pool's index among the new pools. A slot whose pool is not there (the
    /// plan rules it out) has its processes retire, with a line, rather than the master
    /// panicking — which would take every worker down.
    fn placed(&mut self, mut slot: Slot, index: &HashMap<&str, usize>) -> Option<Slot> {
        if let Some(&k) = index.get(slot.spec.pool.as_str()) {
            slot.pool = k;
            return Some(slot);
        }
        let pool = slot.spec.pool.clone();
        log(
            "master",
            format!(
                "reload: worker {} has no pool `{pool}` any more: it stops",
                slot.spec.name()
            ),
        );
        let now = Instant::now();
        let procs = slot.current.take().into_iter().chain(slot.replacing.take());
        for mut p in procs.chain(slot.draining.drain(..)) {
            p.happen(Happening::Signalled, now);
            p.signal(libc::SIGTERM);
            self.retiring.push((pool.clone(), p));
        }
        None
    }

    /// Re-reads the config file and applies it: unchanged pools keep running untouched; a
    /// changed pool gets new workers on its existing sockets (more opened if it grew) and its
    /// old workers drain once the new ones are all ready; a new pool starts; a removed pool's
    /// workers drain and its listeners close with them. A config with errors changes nothing.
    fn reload(&mut self) -> Result<String, String> {
        let path = self
            .config
            .source
            .clone()
            .ok_or("espalier serve was started without -c FILE: there is no file to reload")?;
        let new = Config::load_kept(&path, &self.topology).map_err(|e| e.to_string())?;
        self.switch_to(new, &path)
    }

    /// Applies `new`, validated from `path` (by a reload, or a change through the
    /// configuration API), as [`Self::reload`] says.
    pub(super) fn switch_to(
        &mut self,
        new: Config,
        path: &std::path::Path,
    ) -> Result<String, String> {
        let file = path.display().to_string();
        let new = crate::server::dispatcher::with_dispatcher(new, crate::os::process::is_root())
            .map_err(|e| format!("{file}: {e}"))?;
        self.apply(new, &file)
    }

    /// Applies `new` (read from `file`, or the running configuration with an upstream
    /// group's servers resolved again), as [`Self::reload`] says: everything that can fail
    /// first, then the switch, which cannot.
    pub(super) fn apply(&mut self, mut new: Config, file: &str) -> Result<String, String> {
        crate::server::upstream_nodes::find_local_nodes(&mut new, &self.topology);
        if let Some(sites) = sites_changed_alone(&self.config, &new) {
            return self.apply_to_sites(new, &sites, file);
        }
        if let Some(sites) = sites_added_alone(&self.config, &new) {
            if let Some(added) = self.added_keeping_sockets(&new, &sites) {
                return self.apply_to_added_sites(new, (&sites, added), file);
            }
        }
        let plan = crate::placement::plan(&self.topology, &new.pools, &[])
            .map_err(|e| format!("{file}: {e}"))?;
        crate::server::master::check_identities(&new).map_err(|e| format!("{file}: {e}"))?;
        crate::server::runtime::prepare_access_logs(&new).map_err(|e| format!("{file}: {e}"))?;
        let mut notes = Vec::new();
        if new.server.admin != self.config.server.admin {
            notes.push(format!(
                "the admin address stays {} until a restart",
                self.config.server.admin
            ));
        }
        let mut old_server = self.config.server.clone();
        old_server.admin = new.server.admin;
        let server_changed = old_server != new.server;
        let mut wanted = crate::server::listeners::wanted_groups(&new);
        let old_picture = Picture {
            config: &self.config,
            groups: &self.groups,
            plan: &self.plan,
        };
        let new_picture = Picture {
            config: &new,
            groups: &wanted,
            plan: &plan,
        };
        let changed = match pools_added_alone(&self.config, &new) {
            Some(added) if plan_keeps_others(&self.plan, &plan, &added) => {
                #[cfg(debug_assertions)]
                assert_eq!(
                    added,
                    changed_pools(&old_picture, &new_picture, server_changed),
                    "the pools an add of pools alone changes"
                );
                added
            }
            _ => changed_pools(&old_picture, &new_picture, server_changed),
        };
        let new_names: HashSet<&str> = new.pools.iter().map(|p| p.name.as_str()).collect();
        let removed: Vec<String> = self
            .config
            .pools
            .iter()
            .filter(|p| !new_names.contains(p.name.as_str()))
            .map(|p| p.name.clone())
            .collect();
        let changed_set: HashSet<String> = changed.iter().cloned().collect();
        let removed_set: HashSet<String> = removed.iter().cloned().collect();
        let (fresh, grown) = self.open_listeners(&new, &mut wanted, &changed_set, &plan, file)?;
        // A changed on-demand pool's new workers sleep (their sockets are opened at the wake);
        // an unchanged awake one keeps its sockets.
        let on_demand = crate::server::handoffs::on_demand_pools(&new.pools);
        let awake: HashSet<&str> = self
            .slots
            .iter()
            .filter(|s| !s.asleep && !changed_set.contains(s.spec.pool.as_str()))
            .map(|s| s.spec.pool.as_str())
            .collect();
        self.handoffs
            .ensure(&wanted, &new.pools, &plan, |p| {
                on_demand.contains(p) && !awake.contains(p)
            })
            .map_err(|e| format!("{file}: {e}"))?;
        let closed = self.switch_listeners(fresh, grown, wanted, &new, &plan);

        // Workers: changed and removed pools' processes retire; changed and new pools get slots.
        self.plan = plan;
        let told = self.switch_workers(new, (&changed_set, &removed_set));
        if told {
            notes.push("the dispatcher told its port's new hosts, not replaced".into());
        }
        let changed: Vec<String> = if told {
            let dispatcher = crate::server::dispatcher::POOL;
            changed.into_iter().filter(|p| p != dispatcher).collect()
        } else {
            changed
        };
        Ok(self.summary(file, (&changed, &removed, closed), notes))
    }

    /// [`Self::apply`] for a change of some sites' insides alone (see
    /// [`sites_changed_alone`]): the plan, the listener groups and the hand-off sockets stay
    /// as they are, and so do the pools' identities; the changed sites' pools get new workers.
    fn apply_to_sites(
        &mut self,
        new: Config,
        sites: &[usize],
        file: &str,
    ) -> Result<String, String> {
        crate::server::runtime::prepare_access_logs_of(&new, sites)
            .map_err(|e| format!("{file}: {e}"))?;
        let changed = pools_of_sites(&new, sites);
        #[cfg(debug_assertions)]
        self.assert_sites_alone(&new, &changed);
        let changed_set: HashSet<String> = changed.iter().cloned().collect();
        // The dispatcher is not among a change of some sites' insides (their outlines stay).
        self.switch_workers(new, (&changed_set, &HashSet::new()));
        Ok(self.summary(file, (&changed, &[], 0), Vec::new()))
    }

    /// What the whole comparison says of a change [`Self::apply_to_sites`] applies: the same
    /// pools changed, the same plan, the same listener groups.
    #[cfg(debug_assertions)]
    fn assert_sites_alone(&self, new: &Config, changed: &[String]) {
        let wanted = crate::server::listeners::wanted_groups(new);
        self.assert_as_whole(new, &wanted, changed, "a site change");
        // In any order: a reload puts new groups after the kept ones.
        let routes = |g: &[ListenerGroup]| -> Vec<_> {
            let mut all: Vec<_> = (g.iter())
                .map(|g| (g.addr, g.pools.clone(), g.routes.clone()))
                .collect();
            all.sort_by_key(|(addr, _, _)| *addr);
            all
        };
        assert_eq!(
            routes(&self.groups),
            routes(&wanted),
            "a site change's listener groups"
        );
    }

    /// That the whole comparison of the running configuration with `new` (its groups
    /// `wanted`) changes the pools a shortcut said (`changed`), on the running plan — what
    /// debug builds check each shortcut against.
    #[cfg(debug_assertions)]
    pub(super) fn assert_as_whole(
        &self,
        new: &Config,
        wanted: &[ListenerGroup],
        changed: &[String],
        what: &str,
    ) {
        let plan = &self.plan;
        let old = Picture {
            config: &self.config,
            groups: &self.groups,
            plan,
        };
        let now = Picture {
            config: new,
            groups: wanted,
            plan,
        };
        let whole = changed_pools(&old, &now, false);
        assert_eq!(changed, whole, "the pools {what} changes");
        let fresh = crate::placement::plan(&self.topology, &new.pools, &[]);
        assert!(fresh.as_ref() == Ok(plan), "{what}'s plan");
    }

    /// The switch to `new`'s workers (on the plan now in `self.plan`): the `changed` and
    /// `removed` pools' processes retire, the kept slots are renumbered, the changed and new
    /// pools' slots made and started, and the parts that follow the configuration told.
    /// `true` when the dispatcher took its port's new hosts live (see `hosts_live`).
    pub(super) fn switch_workers(
        &mut self,
        new: Config,
        (changed, removed): (&HashSet<String>, &HashSet<String>),
    ) -> bool {
        let mut specs = crate::server::spawn::worker_specs(
            &new,
            &self.plan,
            &self.groups,
            &self.handoffs,
            &self.topology,
            |pool| changed.contains(pool),
        );
        // A dispatcher that takes its port's new hosts live is not replaced (`hosts_live`).
        let dispatcher = crate::server::dispatcher::POOL;
        let told = self.tell_dispatcher_hosts(&mut specs, changed, new.pool(dispatcher));
        let replaced: HashSet<String>;
        let changed = if told {
            replaced = changed
                .iter()
                .filter(|p| *p != dispatcher)
                .cloned()
                .collect();
            &replaced
        } else {
            changed
        };
        self.retire_changed(changed, removed);
        let index = self.match_pools(&new);
        let mut placed = self.place_kept(&index);
        let first_new = placed.len();
        for spec in specs {
            let pool_spec = new.pool(&spec.pool);
            for slot in Slot::for_spec(spec, 0, pool_spec) {
                placed.extend(self.placed(slot, &index));
            }
        }
        self.slots = placed;
        self.cert_store.reconfigure(&new);
        self.config = new;
        self.upstream_checks.start(&self.config, &self.events);
        self.acme
            .start(&self.config, &self.events, self.fleet.link());
        // A stopped pool stays stopped, and a sleeping one asleep: shared addresses keep
        // steering around them.
        // Pool indices moved: every proxied pool's fronts hear again where its apps are.
        // (Only pools with an app behind fronts have any: a pass over the slots each.)
        self.upstreams_unsent = self.proxied_pools();
        self.start_new_slots(first_new);
        // Now, when nothing was started; else once what was started is ready.
        self.send_due_hosts();
        told
    }

    /// The pools with an app behind fronts.
    fn proxied_pools(&self) -> Vec<usize> {
        (0..self.pools.len())
            .filter(|&p| {
                self.pools[p]
                    .spec
                    .app
                    .as_ref()
                    .is_some_and(|a| a.transport != crate::config::Transport::Activation)
            })
            .collect()
    }

    /// The slots of pools neither changed nor removed; the others' processes retire.
    /// Takes the slots of changed and removed pools out (in place: 10,000 slots are not
    /// moved for a change of one), their processes retiring.
    fn retire_changed(&mut self, changed_set: &HashSet<String>, removed_set: &HashSet<String>) {
        let retiring = &mut self.retiring;
        self.slots.retain_mut(|slot| {
            let pool = slot.spec.pool.as_str();
            let gone = removed_set.contains(pool);
            if !gone && !changed_set.contains(pool) {
                return true;
            }
            for mut p in slot
                .current
                .take()
                .into_iter()
                .chain(slot.replacing.take())
                .chain(slot.draining.drain(..))
            {
                if gone || p.life.is_stopping() {
                    // Cut short, even a hand-over under way: its pool is going or changing.
                    p.happen(Happening::Signalled, Instant::now());
                    p.signal(libc::SIGTERM);
                }
                retiring.push((slot.spec.pool.clone(), p));
            }
            false
        });
    }

    /// The kept slots, each with its pool's index among the new pools (see [`Self::placed`]):
    /// renumbered in place when every pool is there, as it is but for a plan ruling one out.
    fn place_kept(&mut self, index: &HashMap<&str, usize>) -> Vec<Slot> {
        let all_there = self.slots.iter_mut().all(|slot| {
            index
                .get(slot.spec.pool.as_str())
                .map(|&k| slot.pool = k)
                .is_some()
        });
        let slots = std::mem::take(&mut self.slots);
        if all_there {
            return slots;
        }
        (slots.into_iter())
            .filter_map(|s| self.placed(s, index))
            .collect()
    }

    /// The pools of `new`, each keeping its running state (by name, matched once each);
    /// removed ones let go. Each pool's index by name (borrowed from `new`: 10,000 names were
    /// copied for it at each change).
    fn match_pools<'a>(&mut self, new: &'a Config) -> HashMap<&'a str, usize> {
        // A pool's running state is large (its spec, its group, its responders): at a
        // change of one site of 10,000 the pools stay where they are, and otherwise each
        // moves once — not through a map of them, which moved each several times as it grew.
        let same_places = self.pools.len() == new.pools.len()
            && (self.pools.iter().zip(&new.pools)).all(|(rt, p)| rt.spec.name == p.name);
        if !same_places {
            let at: HashMap<&str, usize> = (self.pools.iter().enumerate())
                .map(|(k, rt)| (rt.spec.name.as_str(), k))
                .collect();
            let places: Vec<Option<usize>> = new
                .pools
                .iter()
                .map(|p| at.get(p.name.as_str()).copied())
                .collect();
            let mut old: Vec<Option<Box<PoolRt>>> = self.pools.drain(..).map(Some).collect();
            self.pools = (new.pools.iter().zip(places))
                .map(|(p, k)| {
                    (k.and_then(|k| old[k].take()))
                        .unwrap_or_else(|| Box::new(PoolRt::new(p.clone())))
                })
                .collect();
            for gone in old.into_iter().flatten() {
                for r in gone.responders {
                    r.abort();
                }
                // Its control group is removed at exit, once its workers are gone.
                if let Some(g) = gone.group {
                    self.cgroups.cpusets.push(g);
                }
            }
        }
        for (rt, p) in self.pools.iter_mut().zip(&new.pools) {
            // A changed on-demand pool's group takes its limits again at its next start. An
            // unchanged spec is kept, not cloned again (10,000 pools at a change of one).
            if !std::sync::Arc::ptr_eq(&rt.spec, p) && *rt.spec != **p {
                rt.group_tried = false;
                rt.spec = p.clone();
            }
        }
        let mut index = HashMap::with_capacity_and_hasher(new.pools.len(), Default::default());
        for (i, p) in new.pools.iter().enumerate() {
            index.entry(p.name.as_str()).or_insert(i);
        }
        index
    }

    /// Starts the new slots from `first_new` (an on-demand one sleeps; a stopped pool's
    /// stays stopped).
    fn start_new_slots(&mut self, first_new: usize) {
        self.make_cgroups_for(first_new);
        for i in first_new..self.slots.len() {
            if self.pools[self.slots[i].pool].stopped.is_some() {
                continue;
            }
            if self.pools[self.slots[i].pool].spec.start == crate::config::StartMode::OnDemand {
                self.sleep_slot(i);
                continue;
            }
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].restart = Restart::At(Instant::now() + lifecycle::MAX_BACKOFF);
            }
        }
        if !self.pools_away().is_empty() {
            self.steer_around_away();
        }
    }

    /// The reload's line: pools kept, changed, removed, listener groups closed, and notes.
    pub(super) fn summary(
        &self,
        file: &str,
        (changed, removed, closed): (&[String], &[String], usize),
        notes: Vec<String>,
    ) -> String {
        // The configured pools are counted; the dispatcher is named when it was replaced.
        let dispatcher = crate::server::dispatcher::POOL;
        let configured = |names: &[String]| names.iter().filter(|n| *n != dispatcher).count();
        let total = self
            .pools
            .iter()
            .filter(|p| p.spec.name != dispatcher)
            .count();
        let kept = total - configured(changed);
        let mut summary = format!(
            "reloaded {file}: {kept} pool(s) unchanged, {} changed or new (their workers replaced, overlapped), {} removed, {closed} listener group(s) closed",
            configured(changed),
            configured(removed)
        );
        if changed.iter().any(|n| n == dispatcher) {
            summary.push_str("; the dispatcher replaced (an address's hosts or pools changed)");
        }
        for n in notes {
            summary.push_str("; ");
            summary.push_str(&n);
        }
        summary
    }

    /// Reloads (SIGHUP or `espalier reload`) and logs the outcome; the message is the log line.
    pub(super) fn reload_logged(&mut self) -> Result<String, String> {
        let outcome = self.reload();
        let applied = self.after_reload(outcome);
        if applied.is_ok() {
            let version = self.config.source.as_deref().map(version_on_disk);
            self.config_api
                .applied(version.and_then(Result::ok), "reload");
        }
        applied
    }

    /// Says a reload's `outcome` (or a configuration API change's) and, applied, reopens
    /// the logs.
    pub(super) fn after_reload(
        &mut self,
        outcome: Result<String, String>,
    ) -> Result<String, String> {
        let outcome = outcome
            .map_err(|e| format!("reload refused, the running configuration keeps serving: {e}"));
        let (Ok(line) | Err(line)) = &outcome;
        log("master", line);
        if outcome.is_ok() {
            // As nginx's reload: logs moved away are reopened by the workers that stay.
            self.reopen_logs();
            // The pools' users may have changed (whose connections the master takes).
            self.take_handed_to_master();
        }
        // The old configuration's and the new one's reading left freed memory behind: it
        // goes back once changes settle, not after each (see `trim_when_settled`).
        self.trim_at = Some(std::time::Instant::now() + TRIM_AFTER);
        outcome
    }

    /// Gives the heap's free memory back to the kernel once no change came for
    /// [`TRIM_AFTER`]. Not after each change: a hosting panel's burst of changes at 10,000
    /// sites would give back, then fault in again, the same tens of MiB each time (a tenth
    /// of a change's time, measured).
    pub(super) fn trim_when_settled(&mut self, now: std::time::Instant) {
        if self.trim_at.is_some_and(|at| at <= now) {
            self.trim_at = None;
            crate::os::alloc::release_free_memory();
        }
    }
}

/// How long after the last change the master's free memory goes back to the kernel.
const TRIM_AFTER: std::time::Duration = std::time::Duration::from_secs(2);
