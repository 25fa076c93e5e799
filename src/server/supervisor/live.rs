//! The admin page's live figures: each CPU's load over the last second, and ten minutes of
//! requests served per pool, sampled once a second (IIS Manager's worker-process view, with a
//! memory).
//!
//! Owns: reading `/proc/stat` once a second (for this and for soft affinity, which it hands
//! the two samples), the samples and the [`Live`] answer built from them. Must not touch: how the page
//! draws them (`server::admin_page`) or the workers (their counts arrive with their pongs).

use super::samples::{cpu_load, unix_now, HISTORY};
use super::Supervisor;
use crate::os;
use crate::server::status::{HistorySample, Live, StatusQuery};
use std::time::{Duration, Instant};

impl Supervisor {
    /// Once a second: `/proc/stat` read once, for the admin page's CPU loads and history and
    /// for soft affinity.
    pub(super) fn sample_load(&mut self, now: Instant) {
        if now.duration_since(self.load_sample.0) < Duration::from_secs(1) {
            return;
        }
        let after = crate::server::soft::parse_proc_stat(&os::process::proc_stat());
        let (_, before) = std::mem::replace(&mut self.load_sample, (now, after.clone()));
        self.sample_live(&before, &after);
        self.soft_affinity(&before, &after);
    }

    /// Each CPU's load over the last second, and the requests so far of each pool with a
    /// process (one pass over the slots: ten thousand sleeping pools cost nothing here).
    fn sample_live(&mut self, before: &[(u32, u64, u64)], after: &[(u32, u64, u64)]) {
        self.live.cpu_load = cpu_load(before, after);
        let mut served: Vec<Option<u64>> = vec![None; self.pools.len()];
        for s in self.slots.iter().filter(|s| s.app.is_none()) {
            // Of the processes serving now: a recycle starts its successor's count at zero,
            // which the page reads as no requests that second, never as negative.
            for p in s.current.iter().chain(s.replacing.iter()) {
                if let Some(n) = served.get_mut(s.pool) {
                    *n = Some(n.unwrap_or(0) + p.figures.requests);
                }
            }
        }
        let pools = served
            .into_iter()
            .enumerate()
            .filter_map(|(p, n)| Some((self.pools[p].spec.name.clone(), n?)))
            .collect();
        if self.live.history.len() == HISTORY {
            self.live.history.pop_front();
        }
        self.live.history.push_back(HistorySample {
            time_unix: unix_now(),
            pools,
        });
    }

    /// The page's feed: the status `query` asks for, the history of its pools, and every
    /// pool with a process for the machine map.
    pub(super) fn live(&self, query: &StatusQuery) -> Live {
        let (status, active) = self.status_and_active(query, true);
        let shown: std::collections::HashSet<&str> =
            status.pools.iter().map(|p| p.name.as_str()).collect();
        let history = self
            .live
            .history
            .iter()
            .map(|h| HistorySample {
                time_unix: h.time_unix,
                pools: h
                    .pools
                    .iter()
                    .filter(|(name, _)| shown.contains(name.as_str()))
                    .cloned()
                    .collect(),
            })
            .collect();
        Live {
            time_unix: unix_now(),
            active,
            status,
            cpu_load: self.live.cpu_load.clone(),
            history,
        }
    }
}
