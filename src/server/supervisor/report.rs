//! The status report: what `GET /status`, `/metrics`, `/live` and `espalier status` show,
//! built from the supervisor's pools and slots — filtered and paged as asked
//! ([`StatusQuery`]), so that ten thousand pools cost what the page shows.
//!
//! Owns: that report and its cost (one pass over the slots, then only the pools asked
//! for). Must not touch: pool state (only read here).

use super::life::Restart;
use super::procs::{PoolRt, Slot};
use super::Supervisor;
use crate::server::status::{
    AddressSite, AddressStatus, PoolState, PoolStatus, Role, StateCounts, Status, StatusQuery,
    WorkerState, WorkerStatus,
};
use std::time::Instant;

impl Supervisor {
    /// A worker's figures told after its pong: its sites' meters (`metrics = true`), or
    /// its response caches' (each store's).
    pub(super) fn on_figures(&mut self, generation: u64, figures: crate::server::control::Message) {
        use crate::server::control::Message;
        let Some((_, p)) = self.proc_of(generation) else {
            return;
        };
        match figures {
            Message::Meters(json) => p.meters = crate::server::meters::parse(&json),
            Message::Caches(json) => {
                p.caches = crate::proxy::cache_store::parse_store_counts(&json)
            }
            _ => {}
        }
    }

    /// Each pool's state, and its slots: one pass over the slots.
    fn pool_states(&self) -> (Vec<PoolState>, Vec<Vec<&Slot>>) {
        let asleep = self.pools_asleep();
        let mut slots_of: Vec<Vec<&Slot>> = vec![Vec::new(); self.pools.len()];
        for s in &self.slots {
            if let Some(list) = slots_of.get_mut(s.pool) {
                list.push(s);
            }
        }
        let states = self
            .pools
            .iter()
            .enumerate()
            .map(|(p, pool)| {
                if pool.stopped.is_some() {
                    PoolState::Stopped
                } else if asleep[p] && slots_of[p].iter().any(|s| s.current.is_some()) {
                    PoolState::Suspended
                } else if asleep[p] {
                    PoolState::Idle
                } else {
                    PoolState::Running
                }
            })
            .collect();
        (states, slots_of)
    }

    /// Whether the dispatcher runs (some address is shared).
    fn dispatched(&self) -> bool {
        self.pools
            .iter()
            .any(|p| p.spec.name == crate::server::dispatcher::POOL)
    }

    /// The pools `query` asks for, with the counts of all.
    pub(super) fn status(&self, query: &StatusQuery) -> Status {
        self.status_and_active(query, false).0
    }

    /// The status `query` asks for and, when `active`, every pool with a process now
    /// (running, suspended, or draining one: the admin page's machine map), from one pass
    /// over the slots.
    pub(super) fn status_and_active(
        &self,
        query: &StatusQuery,
        active: bool,
    ) -> (Status, Vec<PoolStatus>) {
        let (states, slots_of) = self.pool_states();
        let mut counts = StateCounts::default();
        let mut matched = Vec::new();
        let wanted = query.matcher();
        let mut dispatcher = None;
        for (p, pool) in self.pools.iter().enumerate() {
            // Not a configured pool: shown on its own (when the filter takes it), counted in
            // none of theirs.
            if pool.spec.name == crate::server::dispatcher::POOL {
                dispatcher = wanted(&pool.spec.name, states[p])
                    .then(|| self.pool_status(pool, states[p], &slots_of[p]));
                continue;
            }
            counts.add(states[p]);
            if wanted(&pool.spec.name, states[p]) {
                matched.push(p);
            }
        }
        let shown = &matched[query.window(matched.len())];
        let pools: Vec<PoolStatus> = shown
            .iter()
            .map(|&p| self.pool_status(&self.pools[p], states[p], &slots_of[p]))
            .collect();
        // Unfiltered, every site; else the sites of the pools shown.
        let everything = *query == StatusQuery::default();
        let listed: std::collections::HashSet<&str> =
            pools.iter().map(|p| p.name.as_str()).collect();
        let with_processes = (0..self.pools.len())
            .filter(|&p| {
                active
                    && slots_of[p]
                        .iter()
                        .any(|s| s.current.is_some() || !s.draining.is_empty())
            })
            .map(|p| self.pool_status(&self.pools[p], states[p], &slots_of[p]))
            .collect();
        let status = Status {
            addresses: self.addresses(|site_pools| {
                everything || site_pools.iter().any(|p| listed.contains(p.as_str()))
            }),
            pools_total: self.pools.len() - usize::from(self.dispatched()),
            dispatcher,
            upstreams: self.upstream_checks.status(
                &self.config,
                &self.procs().flat_map(|p| &p.ejected).collect::<Vec<_>>(),
            ),
            // The admin page's feed (asked every second) carries those that need a look.
            certificates: self.acme.status(!active),
            config: self.config_api.state(),
            cluster: self.fleet.state(),
            pools_matched: matched.len(),
            counts,
            page: if query.per_page.is_some() {
                query.page.max(1)
            } else {
                0
            },
            per_page: query.per_page.unwrap_or(0),
            pools,
        };
        (status, with_processes)
    }

    /// Every address, with the sites `wanted` keeps (by their pools).
    fn addresses(&self, wanted: impl Fn(&[String]) -> bool) -> Vec<AddressStatus> {
        self.groups
            .iter()
            .map(|g| AddressStatus {
                address: g.routes.url(),
                shared: g.shared(),
                sites: g
                    .routes
                    .hosts
                    .iter()
                    .filter_map(|(host, i)| {
                        let site = self.config.sites.get(*i)?;
                        let pools: Vec<String> =
                            site.pools().into_iter().map(String::from).collect();
                        wanted(&pools).then(|| AddressSite {
                            host: host.clone(),
                            site: site.name.clone(),
                            pools,
                        })
                    })
                    .collect(),
            })
            .collect()
    }

    fn pool_status(&self, pool: &PoolRt, state: PoolState, slots: &[&Slot]) -> PoolStatus {
        let now = Instant::now();
        let usage = pool.group.as_ref().map(|g| g.usage()).unwrap_or_default();
        PoolStatus {
            name: pool.spec.name.clone(),
            cpu_limit: pool.spec.cpu_limit,
            cgroup: pool.group.as_ref().map(|g| g.dirs[0].display().to_string()),
            cpu_used_s: pool
                .group
                .as_ref()
                .and_then(|g| g.usage_ns())
                .map(|ns| ns as f64 / 1e9),
            memory_limit: pool.limits.memory,
            oom_kills: pool.oom_kills,
            memory_bytes: usage.memory,
            pids: usage.pids,
            pids_limit: pool.limits.pids,
            pressure: usage.pressure,
            memory_high_events: usage.memory_high_events,
            memory_max_events: usage.memory_max_events,
            state,
            stopped_because: pool.stopped.clone(),
            workers: slots
                .iter()
                .map(|s| {
                    let cur = s.current.as_ref();
                    WorkerStatus {
                        index: s.spec.index,
                        role: match (&s.app, &s.spec.proxy) {
                            (Some(_), _) => Role::App,
                            (None, Some(_)) => Role::Front,
                            (None, None) => Role::Worker,
                        },
                        endpoint: cur
                            .and_then(|c| c.app.as_ref())
                            .and_then(|a| a.endpoint.as_ref())
                            .map(|e| e.to_string()),
                        pid: cur.map(|c| c.pid),
                        node: s.spec.node,
                        cpus: s.spec.cpus.clone(),
                        state: match (cur, s.restart != Restart::No) {
                            (Some(_), _) if s.asleep => WorkerState::Suspended,
                            (None, _) if s.after_app => WorkerState::Starting,
                            _ if s.asleep => WorkerState::Idle,
                            (Some(c), _) if c.life.has_been_ready() => WorkerState::Running,
                            (Some(_), _) => WorkerState::Starting,
                            (None, true) => WorkerState::Restarting,
                            (None, false) => WorkerState::Stopped,
                        },
                        started_unix: cur.map(|c| c.started_unix),
                        uptime_s: cur.map(|c| now.duration_since(c.started).as_secs_f64()),
                        requests: cur.map_or(0, |c| c.figures.requests),
                        connection_panics: cur.map_or(0, |c| c.figures.panics),
                        remote_forwards: cur.map_or(0, |c| c.figures.remote),
                        resident_bytes: cur.and_then(|c| c.resident_bytes()),
                        recycles: s.recycles,
                        restarts: s.restarts,
                        last_exit: s.last_exit.clone(),
                        draining: s.draining.iter().map(|d| d.pid).collect(),
                        widened_to: s.soft.widened_to.clone(),
                        affinity: if s.spec.hard { "hard" } else { "soft" }.into(),
                        memory_policy: format!(
                            "{}:{}",
                            crate::placement::policy_name(s.spec.memory_policy),
                            s.spec
                                .memory_nodes
                                .iter()
                                .map(u32::to_string)
                                .collect::<Vec<_>>()
                                .join(",")
                        ),
                        connections: cur.map_or(0, |c| c.figures.connections),
                        accepted: cur.map_or(0, |c| c.figures.accepted),
                        steered: cur.map_or(0, |c| c.figures.steered),
                        queue: cur.map_or_else(Default::default, |c| c.figures.queue),
                        cache: cur.map_or_else(Default::default, |c| c.figures.cache),
                        ticket_keys: cur.map_or(0, |c| c.figures.ticket_keys),
                        meters: cur.map_or_else(Vec::new, |c| c.meters.clone()),
                        caches: cur.map_or_else(Vec::new, |c| c.caches.clone()),
                    }
                })
                .collect(),
        }
    }
}
