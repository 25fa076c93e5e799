//! Suspending idle workers (`idle_action = "suspend"`, IIS 8.5's idle page-out): instead of
//! being stopped, an idle on-demand worker — with its app process tree — is frozen and its
//! memory given back, and the next connection thaws it, which takes a millisecond where a
//! start takes the app's whole start-up.
//!
//! Owns: when a slot's processes are frozen and thawed, and what the master does meanwhile
//! (no pings, no recycling by time: the tick leaves a sleeping slot alone). Must not touch:
//! cgroup files (`crate::os::freezer`) or the watch on its sockets (`super::demand`).

use super::Supervisor;
use crate::os::freezer::FreezeGroup;
use crate::server::log;
use std::time::Instant;

/// Resident memory of `pids` together, in bytes.
fn resident(pids: &[u32]) -> u64 {
    crate::os::process::resident_bytes_of(pids).unwrap_or(0)
}

/// What came of a suspend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Suspended {
    /// Frozen, its memory given back: it sleeps.
    Frozen,
    /// A client connected as it was frozen: thawed at once, it stays awake.
    Busy,
    /// It could not be frozen (no freezer, or the kernel refused): stop it instead.
    Refused,
}

impl Supervisor {
    /// Freezes the current processes of `slots` (one worker: its espalier process and, for
    /// a proxied pool, its app's tree) and reclaims their memory. `false` when it could not
    /// (no freezer, or the kernel refused): the caller stops them instead.
    pub(super) fn suspend(&mut self, name: &str, slots: &[usize]) -> Suspended {
        let Some(freezer) = self.freezing.freezer.clone() else {
            if !self.freezing.warned {
                self.freezing.warned = true;
                log("master", "warning: idle_action = \"suspend\" needs a cgroup freezer (cgroup v2's cgroup.freeze, or v1's freezer controller), and this machine has neither: idle workers are stopped instead");
            }
            return Suspended::Refused;
        };
        let mut frozen: Vec<(usize, FreezeGroup, Vec<u32>)> = Vec::new();
        let mut before = 0;
        for &i in slots {
            let Some(p) = self.slots[i].current.as_ref() else {
                continue;
            };
            let pids = crate::os::process::process_tree(p.pid);
            before += resident(&pids);
            let group_name = self.freeze_group_name(i);
            match freezer.freeze(&group_name, &pids) {
                Ok(g) => frozen.push((i, g, pids)),
                Err(e) => {
                    log(
                        "master",
                        format!("worker {name}: cannot suspend it ({e}): it is stopped instead"),
                    );
                    for (_, g, _) in &frozen {
                        let _ = g.thaw();
                    }
                    return Suspended::Refused;
                }
            }
        }
        // The decision used the last pong's counts: a client that connected since (its
        // connection accepted, its request perhaps unread) would wait, frozen with the worker,
        // for another visitor's wake. Frozen, the worker's descriptors are what they are now.
        let held = self.client_connections_of(slots);
        if held > 0 {
            for (i, g, _) in &frozen {
                let _ = g.thaw();
                if !self.freezing.groups.contains(g) {
                    self.freezing.groups.push(g.clone());
                }
                if let Some(p) = self.slots[*i].current.as_mut() {
                    p.busy_at = Instant::now();
                }
            }
            log("master", format!("worker {name}: not suspended, {held} client connection(s) arrived as it was frozen; it serves on"));
            return Suspended::Busy;
        }
        let mut reclaim_note = String::new();
        let mut after = 0;
        for (i, g, pids) in frozen {
            if let Err(e) = g.reclaim(&pids) {
                reclaim_note = format!(" (reclaim: {e})");
            }
            after += resident(&pids);
            if !self.freezing.groups.contains(&g) {
                self.freezing.groups.push(g.clone());
            }
            if let Some(p) = self.slots[i].current.as_mut() {
                p.frozen = Some(g);
            }
        }
        log(
            "master",
            format!(
                "worker {name} served nothing for {} (idle_timeout): suspended, resident memory {} → {}{reclaim_note}; the next connection thaws it",
                crate::units::format_duration(
                    self.pools[self.slots[slots[0]].pool].spec.idle_timeout.unwrap_or_default()
                ),
                crate::units::format_bytes(before),
                crate::units::format_bytes(after)
            ),
        );
        Suspended::Frozen
    }

    /// The client connections the espalier workers of `slots` hold now (on their ports).
    fn client_connections_of(&self, slots: &[usize]) -> usize {
        slots
            .iter()
            .filter(|&&i| self.slots[i].app.is_none())
            .filter_map(|&i| {
                let ports: Vec<u16> = self.slots[i]
                    .spec
                    .groups
                    .iter()
                    .map(|g| g.addr.port())
                    .collect();
                let pid = self.slots[i].current.as_ref()?.pid;
                Some(crate::os::sockets_of::client_connections(pid, &ports))
            })
            .sum::<usize>()
    }

    /// Slot `i`'s freeze group: one per process tree (the worker's, and its app's beside it),
    /// named with the master's pid so that a later master finds what a dead one left.
    fn freeze_group_name(&self, i: usize) -> String {
        let slot = &self.slots[i];
        format!(
            "{}{}-{}-{}{}",
            crate::os::freezer::GROUP_PREFIX,
            std::process::id(),
            slot.spec.pool,
            slot.spec.index,
            if slot.app.is_some() { "-app" } else { "" }
        )
    }

    /// Thaws slot `i`'s frozen process, if it has one; whether it had. Its ping clock starts
    /// over (it could not answer while frozen), and its idle clock.
    pub(super) fn thaw(&mut self, i: usize) -> bool {
        let name = self.slots[i].spec.name();
        let Some(p) = self.slots[i].current.as_mut() else {
            return false;
        };
        let Some(g) = p.frozen.take() else {
            return false;
        };
        if let Err(e) = g.thaw() {
            log("master", format!("worker {name}: {e}"));
        }
        let now = Instant::now();
        p.last_pong = now;
        p.busy_at = now;
        true
    }

    /// Removes the freezer groups made (at the master's exit, once the workers are gone).
    pub(super) fn remove_freeze_groups(&mut self) {
        for g in self.freezing.groups.drain(..) {
            g.remove();
        }
    }
}
