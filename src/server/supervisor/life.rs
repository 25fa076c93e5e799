//! The life of one supervised process and of its slot, as explicit states changed by one
//! transition function each — pure: times come in, signals to send go out. As HAProxy's
//! listener states, one value says where a process is, where five booleans
//! (`ready`, `stopping`, `stop_sent`, `killed`, `term_at`) used to, with combinations nobody
//! meant.
//!
//! Owns: [`Life`] and [`Life::on`] (start, ready, stop with an app's hand-over, the startup,
//! ping and shutdown deadlines, a kill for unresponsiveness), [`Restart`], and what a slot
//! does when its process exits ([`after_exit`]: restart with backoff, start a recycle's
//! successor, or stop the pool for rapid fails). Must not touch: processes, signals or clocks
//! (the supervisor sends what [`Act`] says, at the times it passes in).

use crate::config::RapidFail;
use crate::server::lifecycle;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    /// Started; not ready yet (its startup deadline runs).
    Starting,
    /// Ready: it serves, and is pinged.
    Ready,
    /// Asked to stop (a recycle, a pool stop, a reload, the shutdown): its exit is no crash.
    Stopping {
        /// A replaced proxied app's SIGTERM waits until then (its front workers first learn
        /// of its successor).
        term_at: Option<Instant>,
        /// When it was told to stop, for `shutdown_time_limit`.
        since: Option<Instant>,
        /// Killed for overstaying that limit.
        killed: bool,
    },
    /// Killed by the supervisor for a missed deadline: its exit is a crash, and it is
    /// restarted. `was_ready`: its uptime counts for the restart's backoff.
    Killed { was_ready: bool },
}

/// What happens to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Happening {
    /// It said it is ready (a worker's control line, an app's sd_notify or probe).
    Ready,
    /// It is asked to stop: SIGTERM now, or — a proxied app — after `handover`.
    Stop { handover: Option<Duration> },
    /// It was signalled to stop by the caller itself (the shutdown's SIGTERM to all).
    Signalled,
    /// The front workers saw its requests time out in a row.
    Unresponsive,
    /// Time passes: these deadlines are checked.
    Tick(Deadlines),
}

/// Its deadlines, from its pool's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Deadlines {
    pub(super) startup: Duration,
    /// Since the last pong.
    pub(super) ping: Duration,
    pub(super) shutdown: Duration,
}

/// When it started and last answered a ping.
#[derive(Debug, Clone, Copy)]
pub(super) struct Times {
    pub(super) started: Instant,
    pub(super) last_pong: Instant,
}

/// A signal the supervisor must send, and why (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Act {
    Term,
    Kill(Why),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    StartupLimit,
    MissedPings,
    Unresponsive,
    ShutdownLimit,
}

impl Life {
    /// The one transition function: the state after `h` at `now`, and the signal to send.
    pub(super) fn on(self, h: Happening, now: Instant, times: Times) -> (Life, Option<Act>) {
        use Happening as H;
        use Life as L;
        match (self, h) {
            (L::Starting, H::Ready) => (L::Ready, None),
            (
                L::Starting | L::Ready,
                H::Stop {
                    handover: Some(wait),
                },
            ) => (
                L::Stopping {
                    term_at: Some(now + wait),
                    since: None,
                    killed: false,
                },
                None,
            ),
            (L::Starting | L::Ready, H::Stop { handover: None }) => {
                (L::stopping_since(now), Some(Act::Term))
            }
            (L::Killed { .. }, H::Stop { .. } | H::Signalled) => (
                L::Stopping {
                    term_at: None,
                    since: Some(now),
                    killed: true,
                },
                None,
            ),
            (L::Starting | L::Ready, H::Signalled) => (L::stopping_since(now), None),
            // Already stopping, its hand-over cut short by a stop that cannot wait.
            (
                L::Stopping {
                    term_at: Some(_), ..
                },
                H::Signalled,
            ) => (L::stopping_since(now), None),
            (L::Ready, H::Unresponsive) => (
                L::Killed { was_ready: true },
                Some(Act::Kill(Why::Unresponsive)),
            ),
            (L::Starting, H::Tick(limits))
                if now.duration_since(times.started) > limits.startup =>
            {
                (
                    L::Killed { was_ready: false },
                    Some(Act::Kill(Why::StartupLimit)),
                )
            }
            (L::Ready, H::Tick(limits)) if now.duration_since(times.last_pong) > limits.ping => (
                L::Killed { was_ready: true },
                Some(Act::Kill(Why::MissedPings)),
            ),
            (
                L::Stopping {
                    term_at: Some(t), ..
                },
                H::Tick(_),
            ) if t <= now => (L::stopping_since(now), Some(Act::Term)),
            (
                L::Stopping {
                    term_at: None,
                    since: None,
                    killed,
                },
                H::Tick(_),
            ) => (
                L::Stopping {
                    term_at: None,
                    since: Some(now),
                    killed,
                },
                None,
            ),
            (
                L::Stopping {
                    term_at: None,
                    since: Some(since),
                    killed: false,
                },
                H::Tick(limits),
            ) if now.duration_since(since) > limits.shutdown => (
                L::Stopping {
                    term_at: None,
                    since: Some(since),
                    killed: true,
                },
                Some(Act::Kill(Why::ShutdownLimit)),
            ),
            (state, _) => (state, None),
        }
    }

    fn stopping_since(now: Instant) -> Life {
        Life::Stopping {
            term_at: None,
            since: Some(now),
            killed: false,
        }
    }

    pub(super) fn is_ready(self) -> bool {
        self == Life::Ready
    }

    pub(super) fn is_stopping(self) -> bool {
        matches!(self, Life::Stopping { .. })
    }

    /// Whether it became ready and has not been asked to stop (a killed one until it is
    /// reaped): its uptime counts for the restart's backoff, and it shows as running.
    pub(super) fn has_been_ready(self) -> bool {
        matches!(self, Life::Ready | Life::Killed { was_ready: true })
    }
}

/// When a slot starts its next process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Restart {
    /// Not planned (it runs, or its pool is stopped).
    #[default]
    No,
    /// At this time (a crash's backoff; now for a first start).
    At(Instant),
    /// Once its old process has exited (a recycle without overlap).
    AfterExit,
}

/// What a slot's crash history and settings are, for [`after_exit`].
pub(super) struct SlotHistory<'a> {
    pub(super) young_deaths: &'a mut u32,
    pub(super) crashes: &'a mut VecDeque<Instant>,
    pub(super) rapid_fail: &'a RapidFail,
}

/// What a slot does when one of its processes exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterExit {
    /// An expected exit (it was asked to stop): nothing, or the recycle's successor starts.
    Expected(Restart),
    /// A crash: restarted after this delay.
    Crashed(Duration),
    /// A crash too many within the pool's interval: the pool stops (rapid-fail protection).
    RapidFail,
}

/// A process of a slot exited in state `life` after running since `started`; `restart` is
/// the slot's plan, `current_gone`: the slot has no current process now.
pub(super) fn after_exit(
    life: Life,
    started: Instant,
    now: Instant,
    restart: Restart,
    current_gone: bool,
    history: SlotHistory<'_>,
) -> AfterExit {
    if life.is_stopping() {
        return AfterExit::Expected(match restart {
            Restart::AfterExit if current_gone => Restart::At(now),
            other => other,
        });
    }
    let uptime = life.has_been_ready().then(|| now.duration_since(started));
    let (delay, young) = lifecycle::restart_delay(uptime, *history.young_deaths);
    *history.young_deaths = young;
    if lifecycle::record_crash(history.crashes, now, history.rapid_fail) {
        return AfterExit::RapidFail;
    }
    AfterExit::Crashed(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Deadlines = Deadlines {
        startup: Duration::from_secs(10),
        ping: Duration::from_secs(30),
        shutdown: Duration::from_secs(90),
    };

    const TICK: Happening = Happening::Tick(LIMITS);

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    /// Runs `happenings` from `Starting` (each at its second after `t0`, the last pong at
    /// `pong`): the states and signals.
    fn run(t0: Instant, pong: u64, happenings: &[(u64, Happening)]) -> Vec<(Life, Option<Act>)> {
        let times = Times {
            started: t0,
            last_pong: at(t0, pong),
        };
        let mut life = Life::Starting;
        happenings
            .iter()
            .map(|&(s, h)| {
                let (next, act) = life.on(h, at(t0, s), times);
                life = next;
                (next, act)
            })
            .collect()
    }

    #[test]
    fn a_process_that_is_not_ready_by_its_startup_limit_is_killed_and_its_exit_is_a_crash() {
        let t0 = Instant::now();
        let steps = run(t0, 0, &[(5, TICK), (11, TICK)]);
        assert_eq!(steps[0], (Life::Starting, None));
        assert_eq!(
            steps[1],
            (
                Life::Killed { was_ready: false },
                Some(Act::Kill(Why::StartupLimit))
            )
        );
        // Killed once: the next ticks send nothing more.
        let again = steps[1].0.on(TICK, at(t0, 20), times(t0));
        assert_eq!(again, (Life::Killed { was_ready: false }, None));
    }

    fn times(t0: Instant) -> Times {
        Times {
            started: t0,
            last_pong: t0,
        }
    }

    #[test]
    fn a_ready_process_that_misses_its_pings_is_killed_once() {
        let t0 = Instant::now();
        // Ready at 1 s, last pong at 5 s: fine at 30 s, killed at 36 s.
        let steps = run(
            t0,
            5,
            &[(1, Happening::Ready), (30, TICK), (36, TICK), (40, TICK)],
        );
        assert_eq!(steps[1], (Life::Ready, None));
        assert_eq!(
            steps[2],
            (
                Life::Killed { was_ready: true },
                Some(Act::Kill(Why::MissedPings))
            )
        );
        assert_eq!(steps[3].1, None);
    }

    #[test]
    fn an_unresponsive_app_is_killed_only_when_ready() {
        let t0 = Instant::now();
        let starting = Life::Starting.on(Happening::Unresponsive, t0, times(t0));
        assert_eq!(starting, (Life::Starting, None));
        let ready = Life::Ready.on(Happening::Unresponsive, t0, times(t0));
        assert_eq!(ready.1, Some(Act::Kill(Why::Unresponsive)));
        let stopping = Life::stopping_since(t0).on(Happening::Unresponsive, t0, times(t0));
        assert_eq!(stopping.1, None, "a draining process is left to finish");
    }

    #[test]
    fn a_drained_process_gets_sigterm_then_sigkill_past_its_shutdown_limit() {
        let t0 = Instant::now();
        let steps = run(
            t0,
            0,
            &[
                (1, Happening::Ready),
                (2, Happening::Stop { handover: None }),
                (50, TICK),
                (93, TICK),
                (95, TICK),
            ],
        );
        assert_eq!(steps[1].1, Some(Act::Term));
        assert_eq!(steps[2].1, None);
        assert_eq!(steps[3].1, Some(Act::Kill(Why::ShutdownLimit)));
        assert_eq!(steps[4].1, None, "killed once");
        assert!(steps[4].0.is_stopping(), "its exit is still no crash");
    }

    #[test]
    fn a_replaced_app_waits_for_its_handover_before_sigterm() {
        let t0 = Instant::now();
        let handover = Some(Duration::from_millis(500));
        let (life, act) = Life::Ready.on(Happening::Stop { handover }, t0, times(t0));
        assert_eq!(act, None);
        let early = t0 + Duration::from_millis(100);
        assert_eq!(life.on(TICK, early, times(t0)).1, None);
        let due = t0 + Duration::from_millis(500);
        let (life, act) = life.on(TICK, due, times(t0));
        assert_eq!(act, Some(Act::Term));
        // Its shutdown limit counts from the SIGTERM, not from the stop.
        let before_limit = due + Duration::from_secs(89);
        assert_eq!(life.on(TICK, before_limit, times(t0)).1, None);
        // The shutdown cuts the hand-over short.
        let (life, _) = Life::Ready.on(Happening::Stop { handover }, t0, times(t0));
        assert_eq!(
            life.on(Happening::Signalled, early, times(t0)).0,
            Life::stopping_since(early)
        );
    }

    fn history<'a>(
        young: &'a mut u32,
        crashes: &'a mut VecDeque<Instant>,
        rf: &'a RapidFail,
    ) -> SlotHistory<'a> {
        SlotHistory {
            young_deaths: young,
            crashes,
            rapid_fail: rf,
        }
    }

    #[test]
    fn crashes_restart_with_growing_backoff_and_rapid_fails_stop_the_pool() {
        let t0 = Instant::now();
        let rf = RapidFail {
            enabled: true,
            max_crashes: 3,
            interval: Duration::from_secs(60),
        };
        let (mut young, mut crashes) = (0, VecDeque::new());
        let mut delays = Vec::new();
        for k in 0..2 {
            let now = at(t0, k);
            let h = history(&mut young, &mut crashes, &rf);
            match after_exit(Life::Starting, now, now, Restart::No, true, h) {
                AfterExit::Crashed(d) => delays.push(d),
                other => panic!("crash {k}: {other:?}"),
            }
        }
        assert!(delays[1] > delays[0], "{delays:?}");
        let h = history(&mut young, &mut crashes, &rf);
        let third = after_exit(Life::Ready, t0, at(t0, 3), Restart::No, true, h);
        assert_eq!(third, AfterExit::RapidFail);
        // Apart in time, crashes are not rapid.
        let (mut young, mut crashes) = (0, VecDeque::new());
        for k in 0..3 {
            let h = history(&mut young, &mut crashes, &rf);
            let now = at(t0, 100 * k);
            let r = after_exit(
                Life::Killed { was_ready: true },
                t0,
                now,
                Restart::No,
                true,
                h,
            );
            assert!(matches!(r, AfterExit::Crashed(_)), "{r:?}");
        }
    }

    #[test]
    fn a_recycle_without_overlap_starts_the_successor_when_the_old_one_exits() {
        let t0 = Instant::now();
        let rf = RapidFail {
            enabled: true,
            max_crashes: 1,
            interval: Duration::from_secs(60),
        };
        let (mut young, mut crashes) = (0, VecDeque::new());
        let stopped = Life::stopping_since(t0);
        let h = history(&mut young, &mut crashes, &rf);
        let r = after_exit(stopped, t0, at(t0, 2), Restart::AfterExit, true, h);
        assert_eq!(r, AfterExit::Expected(Restart::At(at(t0, 2))));
        // An overlapped recycle's old process: its successor already runs.
        let h = history(&mut young, &mut crashes, &rf);
        let r = after_exit(stopped, t0, at(t0, 2), Restart::No, false, h);
        assert_eq!(r, AfterExit::Expected(Restart::No));
        assert!(crashes.is_empty(), "expected exits are no crashes");
    }
}
