//! An on-demand pool's application starts at its front worker's first request for it, not at
//! the wake. A wake comes from what cannot prove a visitor — a bare TCP connection on an
//! address the pool has alone, or a ClientHello the dispatcher read (it holds no tenant's
//! keys, so it cannot finish the handshake) — and 1,000 unfinished ClientHellos for cold
//! names once started 756 pools' apps. So a wake starts the pool's espalier worker alone
//! (10–15 MiB, see `super::wake::MEMORY_PER_AWAKE`), which finishes the handshake with the
//! pool's own keys and reads a whole request; the first request routed to the app, waiting
//! for a ready process (the pool's `startup_time_limit`, as it waited for one started with
//! the worker), makes the front tell the master (`want-app`), which starts the app then — or,
//! past `on_demand_starting` (an app start counts as a wake's), once a start ends, the
//! request waiting meanwhile.
//!
//! Not so for a pool whose app takes the connections itself (socket activation: the app is
//! the worker), nor with a `warmup_page` (the master answers the page while the app starts,
//! and starts the front once the app is ready: the wake starts the app), nor for a frozen app
//! (it thaws with its front: its memory is spent already).
//!
//! Owns: which slots a wake leaves asleep, and starting them at the front's word. Must not
//! touch: the wake's bounds (`super::wake`) or sleeping (`super::demand`).

use super::Supervisor;
use crate::server::log;
use std::time::Instant;

impl Supervisor {
    /// Whether a wake of slot `i` leaves it asleep until its front asks for it: an app
    /// process (not an activated one) with no process of its own, in a pool without a
    /// warmup page.
    pub(super) fn starts_on_request(&self, i: usize) -> bool {
        let slot = &self.slots[i];
        let spec = &self.pools[slot.pool].spec;
        slot.app.is_some()
            && slot.current.is_none()
            && !spec.activated()
            && spec.warmup_page.is_none()
    }

    /// A front worker (by generation) has a request for its pool's app and no ready process:
    /// the pool's sleeping app slots start — now, or, past `on_demand_starting`, as soon as
    /// a start ends (the request waits meanwhile, up to the pool's `startup_time_limit`).
    /// Said again by each waiting request (and by any pool's front whose app restarts): a
    /// pool with no app asleep, or waiting already, is left alone.
    pub(super) fn want_app(&mut self, generation: u64) {
        let Some(front) = self.slot_of(generation) else {
            return;
        };
        let pool = self.pools[self.slots[front].pool].spec.name.clone();
        if self.asleep_apps(&pool).is_empty() || self.waking.apps_wanted.contains(&pool) {
            return;
        }
        if !self.room_to_start() {
            log("master", format!("app of pool {pool} waits to start: as many on-demand workers as on_demand_starting are starting"));
            self.waking.apps_wanted.push_back(pool);
            return;
        }
        self.start_app_of(&pool);
    }

    /// Once a tick: apps asked for while the starting bound stood in the way start, in the
    /// order asked, while there is room.
    pub(super) fn start_wanted_apps(&mut self) {
        while !self.waking.apps_wanted.is_empty() && self.room_to_start() {
            if let Some(pool) = self.waking.apps_wanted.pop_front() {
                self.start_app_of(&pool);
            }
        }
    }

    /// Pool `pool`'s app slots that sleep while its front is awake: what its front's request
    /// starts (none when the front sleeps too — gone back to sleep, or away with a reload).
    fn asleep_apps(&self, pool: &str) -> Vec<usize> {
        let front_awake =
            (self.slots.iter()).any(|s| s.spec.pool == pool && s.app.is_none() && !s.asleep);
        if !front_awake {
            return Vec::new();
        }
        (0..self.slots.len())
            .filter(|&i| self.slots[i].spec.pool == pool && self.slots[i].asleep)
            .filter(|&i| self.starts_on_request(i))
            .collect()
    }

    /// Starts pool `pool`'s app slots that sleep while its front is awake.
    fn start_app_of(&mut self, pool: &str) {
        let asleep = self.asleep_apps(pool);
        let now = Instant::now();
        for i in asleep {
            let slot = &mut self.slots[i];
            slot.asleep = false;
            if let Some(w) = slot.watcher.take() {
                w.abort();
            }
            log(
                "master",
                format!(
                    "app {} starting on demand (its front worker has a request for it)",
                    slot.spec.name()
                ),
            );
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].restart =
                    super::life::Restart::At(now + crate::server::lifecycle::MAX_BACKOFF);
            }
        }
    }
}
