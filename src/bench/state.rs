//! What one client thread's connections share: the thread's clock, the prepared requests, the
//! measured window, the request quota and the counters (single-threaded: `Rc`/`Cell`).
//!
//! Owns: that state and its small rules (is the window over, may a connection claim more
//! requests). Must not touch: sockets.

use super::result::BenchResult;
use crate::http::clock::Clock;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
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
}

impl ThreadState {
    pub(super) fn stopping(&self, now: Instant) -> bool {
        self.stop_at.get().is_some_and(|s| now >= s)
    }

    pub(super) fn in_window(&self, t: Instant) -> bool {
        t >= self.measure_from && self.measure_until.is_none_or(|u| t <= u)
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
