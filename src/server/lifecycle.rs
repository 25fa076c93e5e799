//! The pool supervisor's decisions, as pure functions: how long to wait before restarting a
//! crashed worker, when crashes are "rapid", and when a worker is due for recycling.
//!
//! Owns: those rules and their numbers. Must not touch: processes or clocks (times are passed in).

use crate::config::{RapidFail, Recycle};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A worker that was ready and ran at least this long before dying was healthy — killed from
/// outside, say — and is replaced at once. A crash loop dies before it is ready or right after.
pub const HEALTHY_UPTIME: Duration = Duration::from_millis(250);
/// The first delay for a worker that keeps dying young, doubled each time…
pub const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// … up to this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The OOM killer's preference for the master (its last choice: every site depends on it)
/// and for the pools' workers and apps (chosen first); see `os::process::set_oom_score_adj`.
pub const OOM_SCORE_ADJ_MASTER: i32 = -900;
pub const OOM_SCORE_ADJ_POOL: i32 = 300;

/// The delay before restarting a worker that died after `uptime` (`None`: before it was ready),
/// given how many times in a row it died young before. Returns (delay, new young-death count).
pub fn restart_delay(uptime: Option<Duration>, young_deaths: u32) -> (Duration, u32) {
    match uptime {
        Some(u) if u >= HEALTHY_UPTIME => (Duration::ZERO, 0),
        _ => {
            let n = young_deaths + 1;
            let delay = FIRST_BACKOFF
                .saturating_mul(1 << (n - 1).min(16))
                .min(MAX_BACKOFF);
            (delay, n)
        }
    }
}

/// The pause before starting again a process the kernel's OOM killer killed at its pool's
/// `memory_limit`, the first time in a row…
pub const OOM_FIRST_PAUSE: Duration = Duration::from_secs(1);
/// … doubled at each kill in a row, up to this: an app that outgrows its limit at every
/// start would otherwise spend a CPU on starting, filling its memory and being reclaimed, at
/// its neighbours' cost (bench/noisy.sh), as systemd's `RestartSteps` spaces a failing unit.
pub const OOM_MAX_PAUSE: Duration = Duration::from_secs(30);
/// A process that ran this long before its OOM kill was not killed at its start: the streak
/// of kills in a row begins again.
pub const OOM_STEADY_UPTIME: Duration = Duration::from_secs(60);

/// The pause before restarting a process OOM-killed after `uptime`, given the kills in a row
/// before it. Returns (pause, new count of kills in a row).
pub fn oom_restart_pause(uptime: Duration, kills_in_a_row: u32) -> (Duration, u32) {
    let n = if uptime >= OOM_STEADY_UPTIME {
        1
    } else {
        kills_in_a_row + 1
    };
    let pause = OOM_FIRST_PAUSE
        .saturating_mul(1 << (n - 1).min(16))
        .min(OOM_MAX_PAUSE);
    (pause, n)
}

/// Records a crash at `now` and says whether rapid-fail protection stops the pool (IIS: more
/// than `max_crashes - 1` crashes within `interval`; the `max_crashes`-th stops it).
pub fn record_crash(history: &mut VecDeque<Instant>, now: Instant, rf: &RapidFail) -> bool {
    history.push_back(now);
    while history
        .front()
        .is_some_and(|&t| now.duration_since(t) > rf.interval)
    {
        history.pop_front();
    }
    rf.enabled && history.len() >= rf.max_crashes as usize
}

/// Why a worker is due for recycling now, if it is.
pub fn recycle_due(
    r: &Recycle,
    uptime: Duration,
    requests: u64,
    resident: Option<u64>,
    crossed_schedule: bool,
) -> Option<String> {
    if let Some(limit) = r.requests {
        if requests >= limit {
            return Some(format!("served {requests} requests (limit {limit})"));
        }
    }
    if let Some(limit) = r.interval {
        if uptime >= limit {
            return Some(format!(
                "ran {} (limit {})",
                crate::units::format_duration(uptime),
                crate::units::format_duration(limit)
            ));
        }
    }
    if let (Some(limit), Some(rss)) = (r.memory, resident) {
        if rss > limit {
            return Some(format!(
                "resident memory {} over {}",
                crate::units::format_bytes(rss),
                crate::units::format_bytes(limit)
            ));
        }
    }
    if crossed_schedule {
        return Some("scheduled recycle time".into());
    }
    None
}

/// Whether the local time of day moved past one of `schedule`'s times between `before` and
/// `now` (seconds since midnight; `now < before` means midnight passed).
pub fn crossed(schedule: &[u32], before: u32, now: u32) -> bool {
    schedule.iter().any(|&t| {
        if now >= before {
            before < t && t <= now
        } else {
            t > before || t <= now
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_pauses_double_for_kills_in_a_row_and_begin_again_after_a_steady_run() {
        let short = Duration::from_secs(2);
        assert_eq!(oom_restart_pause(short, 0), (Duration::from_secs(1), 1));
        assert_eq!(oom_restart_pause(short, 1), (Duration::from_secs(2), 2));
        assert_eq!(oom_restart_pause(short, 3), (Duration::from_secs(8), 4));
        assert_eq!(oom_restart_pause(short, 5), (OOM_MAX_PAUSE, 6));
        assert_eq!(oom_restart_pause(short, u32::MAX - 1).0, OOM_MAX_PAUSE);
        assert_eq!(
            oom_restart_pause(OOM_STEADY_UPTIME, 9),
            (OOM_FIRST_PAUSE, 1)
        );
    }

    #[test]
    fn backoff_grows_for_young_deaths_and_resets_for_healthy_ones() {
        assert_eq!(
            restart_delay(Some(Duration::from_secs(30)), 4),
            (Duration::ZERO, 0)
        );
        assert_eq!(restart_delay(None, 0), (Duration::from_millis(50), 1));
        assert_eq!(
            restart_delay(Some(Duration::from_millis(100)), 1),
            (Duration::from_millis(100), 2)
        );
        assert_eq!(restart_delay(None, 3), (Duration::from_millis(400), 4));
        assert_eq!(restart_delay(None, 40).0, MAX_BACKOFF);
    }

    #[test]
    fn rapid_fail_counts_crashes_within_the_interval() {
        let rf = RapidFail {
            enabled: true,
            max_crashes: 3,
            interval: Duration::from_secs(60),
        };
        let t0 = Instant::now();
        let mut h = VecDeque::new();
        assert!(!record_crash(&mut h, t0, &rf));
        assert!(!record_crash(&mut h, t0 + Duration::from_secs(10), &rf));
        // The first crash has aged out by now.
        assert!(!record_crash(&mut h, t0 + Duration::from_secs(65), &rf));
        assert!(record_crash(&mut h, t0 + Duration::from_secs(66), &rf));
        let off = RapidFail {
            enabled: false,
            ..rf
        };
        let mut h = VecDeque::new();
        assert!((0..10).all(|_| !record_crash(&mut h, t0, &off)));
    }

    #[test]
    fn recycle_triggers() {
        let r = Recycle {
            requests: Some(100),
            interval: Some(Duration::from_secs(60)),
            schedule: vec![],
            memory: Some(1000),
            overlap: true,
        };
        assert_eq!(
            recycle_due(&r, Duration::from_secs(1), 10, Some(10), false),
            None
        );
        assert!(recycle_due(&r, Duration::from_secs(1), 100, None, false)
            .unwrap()
            .contains("100 requests"));
        assert!(recycle_due(&r, Duration::from_secs(61), 0, None, false)
            .unwrap()
            .starts_with("ran 1m1s"));
        assert!(recycle_due(&r, Duration::ZERO, 0, Some(1001), false)
            .unwrap()
            .contains("resident memory"));
        assert!(recycle_due(&r, Duration::ZERO, 0, None, true).is_some());
    }

    #[test]
    fn schedule_crossings() {
        let at3 = [3 * 3600];
        assert!(crossed(&at3, 3 * 3600 - 1, 3 * 3600));
        assert!(!crossed(&at3, 3 * 3600, 3 * 3600 + 1));
        assert!(crossed(&[300], 86_399, 400), "past midnight");
        assert!(!crossed(&at3, 10, 20));
    }
}
