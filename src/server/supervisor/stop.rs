//! The master's stop: a graceful one on SIGTERM or SIGINT — `drain_delay` with `/ready`
//! failing, then the fronts' in-flight requests finished before the apps behind them are
//! asked to stop, each within `shutdown_timeout`, a second signal cutting it short — and the
//! blunt one a failed start uses. What the master made (cgroups, freezer groups, the runtime
//! folder) goes with them.
//!
//! Owns: the order and the bounds of stopping. Must not touch: how one process is signalled
//! or reaped (`super::slots`).

use super::{Proc, Restart, Signals, Supervisor};
use crate::os;
use crate::server::log;
use std::time::{Duration, Instant};

impl Supervisor {
    /// Stops everything gracefully (see the module doc), the signals still heard.
    pub(super) async fn stop_gracefully(&mut self, signals: &mut Signals) {
        crate::server::admin::set_draining();
        // Out of the fleet's list at once (its key's lease revoked), not a lease's time later.
        self.fleet.stop().await;
        let _ = os::notify::notify("STOPPING=1\nSTATUS=stopping: in-flight requests finish");
        // The configuration now serving (a reload may have changed these).
        let drain_delay = self.config.server.drain_delay;
        if !drain_delay.is_zero() {
            // Load balancers see /ready fail and move away while everything still serves.
            log(
                "master",
                format!(
                    "draining: GET /ready answers 503; serving on for {} before stopping (a second signal stops now)",
                    crate::units::format_duration(drain_delay)
                ),
            );
            let until = tokio::time::Instant::now() + drain_delay;
            loop {
                tokio::select! {
                    _ = signals.chld.recv() => self.reap(),
                    _ = signals.term.recv() => break,
                    _ = signals.int.recv() => break,
                    _ = tokio::time::sleep_until(until) => break,
                }
            }
        }
        log(
            "master",
            format!(
                "stopping: in-flight requests have {}s to finish (a second signal stops at once)",
                self.config.server.shutdown_timeout.as_secs()
            ),
        );
        for s in &mut self.slots {
            s.restart = Restart::No;
        }
        // Handed over, the sockets are the new master's: what reaches them is its to serve.
        let _answering = (!self.upgrade.handed_over).then(|| self.answer_while_stopping());
        if self.upgrade.handed_over {
            self.dispatcher_first(signals).await;
        }
        // The fronts first (espalier's workers, and activated apps, which are their own front):
        // they finish what they have in flight, forwarding to apps that still run. The apps
        // behind them only once they are gone, or at the limit.
        self.signal_matching(libc::SIGTERM, |p| !p.behind_a_front());
        let deadline = tokio::time::Instant::now()
            + self.config.server.shutdown_timeout
            + Duration::from_secs(1);
        let mut now_please = false;
        for behind in [false, true] {
            if behind {
                self.signal_matching(libc::SIGTERM, Proc::behind_a_front);
            }
            // Apps get a moment of their own even when the fronts took the whole limit.
            let until = if behind {
                deadline.max(tokio::time::Instant::now() + Duration::from_secs(2))
            } else {
                deadline
            };
            while !now_please && self.procs().any(|p| p.behind_a_front() == behind) {
                tokio::select! {
                    _ = signals.chld.recv() => self.reap(),
                    _ = tokio::time::sleep(Duration::from_millis(50)) => self.reap(),
                    _ = signals.term.recv() => now_please = true,
                    _ = signals.int.recv() => now_please = true,
                    _ = tokio::time::sleep_until(until) => break,
                }
            }
        }
        self.stop_everything(Duration::from_millis(300)).await;
        self.remove_freeze_groups();
        self.remove_cgroups();
        crate::server::runtime::remove_runtime_dir();
        log("master", "stopped");
    }

    /// Handed over to a new master: this one's dispatcher stops first, and is waited for
    /// (within `shutdown_timeout`), so that what it took from the shared sockets reaches this
    /// master's pool workers while they still take hand-offs; they drain after it.
    async fn dispatcher_first(&mut self, signals: &mut Signals) {
        let dispatcher = |p: &Proc| p.pool == crate::server::dispatcher::POOL;
        self.signal_matching(libc::SIGTERM, dispatcher);
        let until = tokio::time::Instant::now() + self.config.server.shutdown_timeout;
        while self.procs().any(dispatcher) {
            tokio::select! {
                _ = signals.chld.recv() => self.reap(),
                _ = tokio::time::sleep(Duration::from_millis(20)) => self.reap(),
                _ = tokio::time::sleep_until(until) => break,
            }
        }
    }

    /// SIGTERM to all, then SIGKILL to whoever is left after `grace`; reaps them. The app
    /// processes' runtime folder goes with them, and the ACME challenges' folder.
    pub(super) async fn stop_everything(&mut self, grace: Duration) {
        // The orders first: a task still running would make their folder again.
        self.acme.stop();
        self.stop_all(grace).await;
        crate::server::runtime::remove_runtime_dir();
    }

    async fn stop_all(&mut self, grace: Duration) {
        for s in &mut self.slots {
            s.restart = Restart::No;
        }
        self.signal_all(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.any_alive() && Instant::now() < deadline {
            self.reap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.any_alive() {
            for p in self.procs() {
                let what = if p.app.is_some() { "app" } else { "worker" };
                log(
                    "master",
                    format!("{what} pid {} did not stop in time: killed", p.pid),
                );
            }
            self.signal_all(libc::SIGKILL);
            for _ in 0..50 {
                self.reap();
                if !self.any_alive() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
