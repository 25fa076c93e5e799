//! What one client thread's connections share: the thread's clock, the prepared requests, the
//! measured window, the request quota and the counters (single-threaded: `Rc`/`Cell`).
//!
//! Owns: that state and its small rules (is the window over, may a connection claim more
//! requests). Must not touch: sockets.

use super::result::BenchResult;
use crate::http::clock::Clock;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Per-thread state shared by its connections (single-threaded: `Rc`/`Cell`).
pub(super) struct ThreadState {
    pub(super) requests: Vec<Vec<u8>>,
    /// Requests left to claim in `-n` mode.
    pub(super) quota: Cell<Option<u64>>,
    pub(super) measure_from: Instant,
    pub(super) measure_until: Option<Instant>,
    pub(super) stop_at: Cell<Option<Instant>>,
    pub(super) cooldown: Duration,
    pub(super) result: RefCell<BenchResult>,
    pub(super) clock: Rc<Clock>,
    pub(super) progress: Arc<AtomicU64>,
    pub(super) responses: Cell<u64>,
    pub(super) quota_done_at: Cell<Option<Instant>>,
    /// A refused connection has been told on stderr (once per thread, not per connection).
    pub(super) told_refusal: Cell<bool>,
}

/// A batch of requests a connection may send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Batch {
    /// Requests in the batch.
    pub(super) k: u64,
    /// Whether they count (not warm-up, not cool-down past the quota).
    pub(super) measured: bool,
    /// Requests taken from the `-n` quota, given back if the batch cannot be sent.
    pub(super) claimed: u64,
}

impl ThreadState {
    pub(super) fn stopping(&self, now: Instant) -> bool {
        self.stop_at.get().is_some_and(|s| now >= s)
    }

    pub(super) fn in_window(&self, t: Instant) -> bool {
        t >= self.measure_from && self.measure_until.is_none_or(|u| t <= u)
    }

    /// The next batch of up to `want` requests; `None` when the connection should stop. In
    /// `-n` mode a batch is claimed from the thread's quota: warm-up batches are sent but not
    /// measured, and once the quota is spent connections only keep the cool-down load.
    pub(super) fn next_batch(&self, want: u64) -> Option<Batch> {
        if self.quota.get().is_none() {
            return Some(Batch {
                k: want,
                measured: true,
                claimed: 0,
            });
        }
        let unmeasured = Batch {
            k: want,
            measured: false,
            claimed: 0,
        };
        match self.claim(want, Instant::now()) {
            Some(0) => Some(unmeasured),
            Some(c) => Some(Batch {
                k: c,
                measured: true,
                claimed: c,
            }),
            None => {
                if self.quota_done_at.get().is_none() {
                    self.quota_done_at.set(Some(Instant::now()));
                    self.stop_at.set(Some(Instant::now() + self.cooldown));
                }
                (!self.cooldown.is_zero()).then_some(unmeasured)
            }
        }
    }

    /// Gives back a batch's quota when it could not be sent (no connection).
    pub(super) fn unclaim(&self, batch: Batch) {
        self.unclaim_n(batch.claimed);
    }

    /// Gives back `n` claimed requests that the server did not take, to be sent again.
    pub(super) fn unclaim_n(&self, n: u64) {
        if let Some(left) = self.quota.get() {
            self.quota.set(Some(left + n));
        }
    }

    /// Counts a response that began at `t0`.
    pub(super) fn record_response(&self, measured: bool, t0: Instant, status: u16, bytes: u64) {
        let t1 = Instant::now();
        let n = self.responses.get() + 1;
        self.responses.set(n);
        self.progress.store(n, Ordering::Relaxed);
        if measured && self.in_window(t1) {
            let mut r = self.result.borrow_mut();
            r.requests += 1;
            r.bytes += bytes;
            match status {
                400..=499 => r.errors.status_4xx += 1,
                500..=599 => r.errors.status_5xx += 1,
                _ => {}
            }
            let us = (t1 - t0).as_micros().max(1) as u64;
            let _ = r.latency_us.record(us.min(3_600_000_000));
        }
    }

    /// Counts `k` requests that failed: timed out, or the connection broke.
    pub(super) fn record_failure(&self, measured: bool, k: u64, timeout: bool) {
        if measured && self.in_window(Instant::now()) {
            let mut r = self.result.borrow_mut();
            if timeout {
                r.errors.timeout += k;
            } else {
                r.errors.read += k;
            }
        }
    }

    /// Counts a connection that could not be made, and says why the first time it is refused.
    pub(super) fn record_connect_failure(&self, why: &super::transport::ConnectError) {
        if self.in_window(Instant::now()) {
            self.result.borrow_mut().errors.connect += 1;
        }
        if let super::transport::ConnectError::Refused(text) = why {
            if !self.told_refusal.replace(true) {
                eprintln!("bench: {text}");
            }
        }
    }

    /// Claims `k` measured requests in `-n` mode; `None` means the quota is spent.
    pub(super) fn claim(&self, k: u64, now: Instant) -> Option<u64> {
        match self.quota.get() {
            None => Some(k),
            Some(_) if now < self.measure_from => Some(0),
            Some(0) => None,
            Some(left) => {
                let take = k.min(left);
                self.quota.set(Some(left - take));
                Some(take)
            }
        }
    }
}
