//! The admin page's live figures as kept between samples: each CPU's last load and ten
//! minutes of requests per pool — and the load's arithmetic, pure.
//!
//! Owns: [`LiveSamples`], [`cpu_load`]. Must not touch: reading `/proc/stat` or building the
//! answer (see `super::live`).

use crate::server::status::HistorySample;
use std::collections::VecDeque;

/// Ten minutes at one sample a second.
pub(super) const HISTORY: usize = 600;

pub(super) struct LiveSamples {
    pub(super) cpu_load: Vec<(u32, f64)>,
    pub(super) history: VecDeque<HistorySample>,
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

pub(super) fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::cpu_load;

    #[test]
    fn load_is_the_busy_share_of_the_interval() {
        let before = [(0, 100, 1000), (1, 0, 1000)];
        let after = [(0, 150, 1100), (1, 0, 1100), (2, 5, 10)];
        let load = cpu_load(&before, &after);
        assert_eq!(load, vec![(0, 0.5), (1, 0.0), (2, 0.0)]);
    }
}
