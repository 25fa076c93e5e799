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
use crate::server::status::{HistorySample, Live};
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

    /// Each CPU's load over the last second, and each pool's requests so far.
    fn sample_live(&mut self, before: &[(u32, u64, u64)], after: &[(u32, u64, u64)]) {
        self.live.cpu_load = cpu_load(before, after);
        let pools = self
            .pools
            .iter()
            .enumerate()
            .map(|(p, pool)| {
                // Of the processes serving now: a recycle starts its successor's count at
                // zero, which the page reads as no requests that second, never as negative.
                let served = self
                    .slots
                    .iter()
                    .filter(|s| s.pool == p && s.app.is_none())
                    .flat_map(|s| s.current.iter().chain(s.replacing.iter()))
                    .map(|proc_| proc_.requests)
                    .sum::<u64>();
                (pool.spec.name.clone(), served)
            })
            .collect();
        if self.live.history.len() == HISTORY {
            self.live.history.pop_front();
        }
        self.live.history.push_back(HistorySample {
            time_unix: unix_now(),
            pools,
        });
    }

    pub(super) fn live(&self) -> Live {
        Live {
            time_unix: unix_now(),
            status: self.status(),
            cpu_load: self.live.cpu_load.clone(),
            history: self.live.history.iter().cloned().collect(),
        }
    }
}
