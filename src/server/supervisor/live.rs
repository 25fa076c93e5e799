//! The admin page's live figures: each CPU's load over the last second, and ten minutes of
//! requests served per pool, sampled once a second (IIS Manager's worker-process view, with a
//! memory).
//!
//! Owns: reading `/proc/stat` once a second (for this and for soft affinity, which it hands
//! the two samples), the samples and the [`Live`] answer built from them. Must not touch: how the page
//! draws them (`server::admin_page`) or the workers (their counts arrive with their pongs).

use super::Supervisor;
use crate::os;
use crate::server::status::{HistorySample, Live};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Ten minutes at one sample a second.
const HISTORY: usize = 600;

pub(super) struct LiveSamples {
    cpu_load: Vec<(u32, f64)>,
    history: VecDeque<HistorySample>,
}

impl LiveSamples {
    pub(super) fn new() -> Self {
        LiveSamples {
            cpu_load: Vec::new(),
            history: VecDeque::with_capacity(HISTORY),
        }
    }
}

/// Busy fraction per CPU between two `/proc/stat` samples `(cpu, busy, total)`.
pub(super) fn cpu_load(before: &[(u32, u64, u64)], after: &[(u32, u64, u64)]) -> Vec<(u32, f64)> {
    after
        .iter()
        .map(|&(cpu, busy, total)| {
            let (b0, t0) = before
                .iter()
                .find(|&&(c, _, _)| c == cpu)
                .map_or((busy, total), |&(_, b, t)| (b, t));
            let dt = total.saturating_sub(t0);
            let load = if dt == 0 {
                0.0
            } else {
                busy.saturating_sub(b0) as f64 / dt as f64
            };
            (cpu, load.clamp(0.0, 1.0))
        })
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn load_is_the_busy_share_of_the_interval() {
        let before = [(0, 100, 1000), (1, 0, 1000)];
        let after = [(0, 150, 1100), (1, 0, 1100), (2, 5, 10)];
        let load = super::cpu_load(&before, &after);
        assert_eq!(load, vec![(0, 0.5), (1, 0.0), (2, 0.0)]);
    }
}
