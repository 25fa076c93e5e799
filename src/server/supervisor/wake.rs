//! How many on-demand workers may wake at once and be awake at once. Host names are public
//! (DNS, certificate transparency), so one request per cold name woke every pool: 350 sites
//! gave 352 processes and 1.8 GB in seven seconds, and under a memory cap the kernel's OOM
//! killer chose the master. Two bounds stop that:
//!
//! - **starting** (`[server] on_demand_starting`, default the machine's CPUs, at least 2):
//!   a wake past it is turned away — the pool stays asleep, and for [`TURNED_AWAY_FOR`] the
//!   master answers its sockets `503` with `Retry-After` (its `warmup_page` when it has one;
//!   a reset over https), then watches them again, so the visitor's retry wakes it once there
//!   is room. Nothing is queued that a flood could grow.
//! - **running** (`on_demand_running`, default one per [`MEMORY_PER_AWAKE`] (128 MiB) of the memory
//!   the server may use — the machine's, or its control group's cap — at least 16): workers
//!   with a process, frozen ones included, count. A wake past it first stops the least
//!   recently busy idle on-demand worker (frozen or not) to make room; only when every one is
//!   busy is the wake turned away.
//!
//! - **per client** ([`super::wake_budget::WAKES_PER_CLIENT`] a minute): on a shared address the master sees who
//!   a connection for a sleeping pool comes from, and one client address may wake that many
//!   pools a minute; past it, its connections for sleeping pools are closed (logged at powers
//!   of two) — 1,000 ClientHellos for cold names from one client once started 756 pools'
//!   apps. The dispatcher holds no tenant's keys, so it cannot wait for a finished handshake
//!   before the wake; it waits for a whole ClientHello (or request head), and this bound
//!   keeps one client from waking more than a few tenants' workers — their apps start only
//!   at a worker's first request for one (see `super::app_on_request`).
//!
//! The master itself is the OOM killer's last choice (`oom_score_adj` -900, set at start when
//! root), its workers and apps first (+300, set by each before it runs anything).
//!
//! Owns: those bounds and the turning away. Must not touch: sleeping and waking themselves
//! (`super::demand`).

use super::pools::Answer;
use super::Supervisor;
use crate::config::{ServerSettings, StartMode};
use crate::server::log;
use std::time::{Duration, Instant};

/// The memory an awake on-demand worker is counted for, for `on_demand_running`'s default:
/// what the smallest apps take when woken, measured here (Debian's packages, one process
/// each, resident): gunicorn with one worker 55 MiB (its master and worker), Node's http
/// server 44 MiB, and espalier's own worker 10–15 MiB beside — a real app (Django, Laravel)
/// more. At 32 MiB, a 24 GiB machine let one client's ClientHellos wake 756 pools.
pub const MEMORY_PER_AWAKE: u64 = 128 << 20;

/// How long a turned-away pool's sockets are answered 503 before they are watched again.
pub const TURNED_AWAY_FOR: Duration = Duration::from_secs(2);

/// The (starting, running) bounds: the config's, else derived from `cpus` and `memory`.
pub fn bounds(server: &ServerSettings, cpus: usize, memory: Option<u64>) -> (usize, usize) {
    let starting = server
        .on_demand_starting
        .map_or(cpus.max(2), |n| n as usize);
    let running = server.on_demand_running.map_or_else(
        || {
            memory
                .map_or(1024, |m| (m / MEMORY_PER_AWAKE) as usize)
                .max(16)
        },
        |n| n as usize,
    );
    (starting, running)
}

/// The memory and pids limits of an on-demand pool that sets none of its own
/// (`[server] on_demand_memory_limit`, `on_demand_pids_limit`; `"auto"` by default): at
/// hosting scale one tenant's app must not take the machine's memory or process ids from
/// the others. `"auto"` shares them among the pools that may be awake at once — the fewer of
/// the on-demand pools and `on_demand_running` (`running`) — two shares of `memory` each
/// (not every awake tenant uses its share at once), at least 256 MiB and at most half of
/// it; and a quarter of the machine's process ids (`ids`) each, from 128 to 4,096. A
/// 24 GiB machine with its default `on_demand_running` (192) gives each 256 MiB.
pub fn default_limits(
    server: &ServerSettings,
    (memory, ids): (Option<u64>, Option<u64>),
    on_demand_pools: usize,
    running: usize,
) -> (Option<u64>, Option<u64>) {
    use crate::config::TenantDefault;
    let sharing = on_demand_pools.min(running).max(1) as u64;
    let memory_limit = match server.on_demand_memory_limit {
        TenantDefault::Off => None,
        TenantDefault::Set(n) => Some(n),
        TenantDefault::Auto => {
            memory.map(|m| (m / sharing * 2).clamp(256 << 20, (m / 2).max(256 << 20)))
        }
    };
    let pids_limit = match server.on_demand_pids_limit {
        TenantDefault::Off => None,
        TenantDefault::Set(n) => Some(n),
        TenantDefault::Auto => ids.map(|n| (n / sharing / 4).clamp(128, 4096)),
    };
    (memory_limit, pids_limit)
}

impl Supervisor {
    /// Whether the sleeping worker `name` may wake now; else why not. Makes room first when
    /// only the running bound stands in the way, by stopping the least recently busy idle
    /// on-demand worker.
    pub(super) fn room_to_wake(&mut self, name: &str, now: Instant) -> Result<(), String> {
        let (max_starting, max_running) =
            bounds(&self.config.server, self.online.len(), self.memory);
        let (starting, running) = self.on_demand_counts();
        if starting >= max_starting {
            return Err(format!(
                "{starting} on-demand workers are starting (on_demand_starting = {max_starting})"
            ));
        }
        if running < max_running {
            return Ok(());
        }
        match self.least_recently_busy(name) {
            Some(idle) => {
                self.stop_to_make_room(&idle, now);
                log("master", format!("worker {idle} stopped to make room for {name}: {running} on-demand workers were running (on_demand_running = {max_running}); it was the least recently busy"));
                Ok(())
            }
            None => Err(format!(
                "{running} on-demand workers run, all busy (on_demand_running = {max_running})"
            )),
        }
    }

    /// Whether one more on-demand process may start now (`on_demand_starting`).
    pub(super) fn room_to_start(&self) -> bool {
        let (max_starting, _) = bounds(&self.config.server, self.online.len(), self.memory);
        self.on_demand_counts().0 < max_starting
    }

    /// (starting, with a process) among the workers of on-demand pools, each worker once: a
    /// proxied pool's worker is its app and its front, starting until both are ready.
    fn on_demand_counts(&self) -> (usize, usize) {
        // A worker by its pool's place and its index (its name, not made for each of a
        // hoster's 10,000 at every wake).
        let mut by_worker: rustc_hash::FxHashMap<(usize, u32), (bool, bool)> = Default::default();
        for s in &self.slots {
            if self.pools[s.pool].spec.start != StartMode::OnDemand {
                continue;
            }
            let alive = s.current.is_some() || s.after_app;
            let ready = !s.after_app && s.current.as_ref().is_none_or(|p| p.life.is_ready());
            let e = by_worker
                .entry((s.pool, s.spec.index))
                .or_insert((false, false));
            e.0 |= alive;
            e.1 |= alive && !ready;
        }
        let running = by_worker.values().filter(|(alive, _)| *alive).count();
        let starting = by_worker.values().filter(|(_, starting)| *starting).count();
        (starting, running)
    }

    /// The on-demand worker, other than `except`, whose process (awake and ready, or frozen)
    /// has no connection and was busy longest ago.
    fn least_recently_busy(&self, except: &str) -> Option<String> {
        self.slots
            .iter()
            .filter(|s| {
                self.pools[s.pool].spec.start == StartMode::OnDemand
                    && (s.app.is_none() || self.pools[s.pool].spec.activated())
                    && s.replacing.is_none()
                    && !s.spec.is_named(except)
            })
            .filter_map(|s| {
                let p = s.current.as_ref()?;
                let idle = p.frozen.is_some() || (p.life.is_ready() && p.figures.connections == 0);
                idle.then(|| (p.busy_at, s.spec.name()))
            })
            .min()
            .map(|(_, name)| name)
    }

    /// Stops worker `name` (thawed first if frozen) and its app; it sleeps, watched.
    fn stop_to_make_room(&mut self, name: &str, now: Instant) {
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].spec.is_named(name))
            .collect();
        let Some(&first) = slots.first() else { return };
        let limit = self.pools[self.slots[first].pool].spec.shutdown_time_limit;
        for &i in &slots {
            self.thaw(i);
            let slot = &mut self.slots[i];
            slot.restart = super::life::Restart::No;
            if let Some(mut p) = slot.current.take() {
                p.stop_after_fronts(now, limit);
                slot.draining.push(p);
            }
            if !slot.asleep {
                self.sleep_slot(i);
            }
        }
        if self.pool_asleep(self.slots[first].pool) {
            self.steer_around_away();
        }
    }

    /// Worker `name` may not wake now (`why`): its sockets are answered `503` with
    /// `Retry-After` for [`TURNED_AWAY_FOR`], then watched again (see the module doc).
    pub(super) fn turn_away(&mut self, name: &str, why: &str, now: Instant) {
        let slots: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].asleep && self.slots[i].spec.is_named(name))
            .collect();
        let Some(&first) = slots.first() else { return };
        let pool = &self.pools[self.slots[first].pool];
        let body = pool
            .warmup_page
            .as_ref()
            .map(|(_, b)| b.clone())
            .unwrap_or_else(|| {
                b"<p>This site is starting; try again in a moment.</p>\n"
                    .as_slice()
                    .into()
            });
        let answer = Answer::Page {
            body,
            retry_after: TURNED_AWAY_FOR.as_secs(),
            content_type: "text/html; charset=utf-8",
        };
        let key = self.handoffs.key;
        for &i in &slots {
            let senders = self.slots[i].spec.handoff_senders.clone();
            self.answer_on_sockets(i, &answer, &senders, key);
            self.slots[i].turned_away_until = Some(now + TURNED_AWAY_FOR);
        }
        self.waking.turned_away += 1;
        let n = self.waking.turned_away;
        if crate::os::nth_worth_logging(n) {
            log("master", format!("worker {name} not woken: {why}; its visitors get 503 with Retry-After for {}s ({n} wakes turned away so far)", TURNED_AWAY_FOR.as_secs()));
        }
    }

    /// Once a tick: turned-away workers whose time is up are watched again, so the next
    /// connection (the visitor's retry) asks to wake them anew.
    pub(super) fn watch_turned_away_again(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if slot.turned_away_until.is_some_and(|t| t <= now) {
                slot.turned_away_until = None;
                if slot.asleep {
                    self.sleep_slot(i);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_demand_pools_share_the_machine_unless_told() {
        use crate::config::TenantDefault;
        let mut server = ServerSettings::default();
        let machine = (Some(24u64 << 30), Some(32_768));
        // Hosting scale: the running bound shares the machine, 256 MiB each.
        let (memory, ids) = default_limits(&server, machine, 10_000, 192);
        assert_eq!(memory, Some(256 << 20));
        assert_eq!(ids, Some(128));
        // Three pools: two shares each, but never more than half the machine.
        let (memory, ids) = default_limits(&server, machine, 3, 192);
        assert_eq!(memory, Some(12 << 30));
        assert_eq!(ids, Some(2730));
        let (memory, ids) = default_limits(&server, (Some(24 << 30), Some(4_194_304)), 16, 16);
        assert_eq!(memory, Some(3 << 30));
        assert_eq!(ids, Some(4096));
        // A small machine still leaves an app room to run.
        assert_eq!(
            default_limits(&server, (Some(1 << 30), None), 50, 50),
            (Some(256 << 20), None)
        );
        server.on_demand_memory_limit = TenantDefault::Set(1 << 30);
        server.on_demand_pids_limit = TenantDefault::Off;
        assert_eq!(
            default_limits(&server, machine, 10_000, 192),
            (Some(1 << 30), None)
        );
    }

    #[test]
    fn bounds_come_from_the_config_or_the_machine() {
        let mut server = ServerSettings::default();
        // 2 CPUs, 2 GiB (the finding's memory cap): 2 starting, 16 running (the floor);
        // 24 GiB (this machine): 192.
        assert_eq!(bounds(&server, 2, Some(2 << 30)), (2, 16));
        assert_eq!(bounds(&server, 2, Some(24 << 30)), (2, 192));
        // One CPU still starts two; a small machine still runs sixteen.
        assert_eq!(bounds(&server, 1, Some(256 << 20)), (2, 16));
        server.on_demand_starting = Some(5);
        server.on_demand_running = Some(3);
        assert_eq!(bounds(&server, 64, Some(1 << 40)), (5, 3));
    }
}
