//! Backpressure for apps (HAProxy's `maxconn` per server with `timeout queue`, IIS's
//! `queueLength`): at most `max_requests_per_process` requests in flight at one app process
//! (`1` for a sync gunicorn worker, which would otherwise queue them inside itself where no
//! one sees them); requests beyond wait in espalier's queue — for a process of their own node
//! first, then the nearest node's (the tiers' order) — and past `queue_length` waiting, or
//! after `queue_timeout`, are answered 503 with `Retry-After` at once.
//!
//! Counted per front worker process (one per NUMA node), shared by its threads: one gate per
//! app process (its requests in flight from this worker, written twice per request by the
//! threads that send to it — the price of the cap, paid only by a pool that sets it), and
//! one queue. A front worker spills to another node's app processes only when its own are all
//! at their cap; an app process reached from two nodes' workers is counted by each, so it can
//! then see up to one request more per other worker sending to it (a front worker per node
//! and apps on every node keeps each process to its own node's worker). A waiting request is
//! woken when a slot frees (and looks again every [`RECHECK`] at most, so no wake-up is ever
//! lost); it is not strictly first come, first served: a request that arrives as a slot
//! frees may take it first.
//!
//! Owns: the gates, the queue and their counters. Must not touch: which processes exist (the
//! master's tiers, [`super::route`]) or what is sent to them.

pub use crate::config::Backpressure;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A waiting request looks for a free process at least this often.
const RECHECK: Duration = Duration::from_millis(100);

/// One app process's requests in flight from this front worker.
#[derive(Default, Debug)]
pub struct Gate {
    in_flight: AtomicU32,
}

impl Gate {
    /// Takes a place under `cap`, if there is one.
    fn try_take(&self, cap: u32) -> bool {
        let mut n = self.in_flight.load(Ordering::SeqCst);
        loop {
            if n >= cap {
                return false;
            }
            match self
                .in_flight
                .compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(seen) => n = seen,
            }
        }
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// A front worker's queue: who waits, and what waiting has cost.
#[derive(Default, Debug)]
pub struct Queue {
    waiting: AtomicU32,
    freed: tokio::sync::Notify,
    queued_total: AtomicU64,
    rejected_total: AtomicU64,
    wait_micros_total: AtomicU64,
}

/// What a front worker's queue has seen, for the master's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueFigures {
    /// Requests waiting now.
    pub waiting: u64,
    /// Requests that had to wait, ever.
    pub queued_total: u64,
    /// Requests answered 503 because the queue was full or their wait ran out.
    pub rejected_total: u64,
    /// Their waits together, in µs.
    pub wait_micros_total: u64,
}

impl Queue {
    pub fn figures(&self) -> QueueFigures {
        QueueFigures {
            waiting: u64::from(self.waiting.load(Ordering::Relaxed)),
            queued_total: self.queued_total.load(Ordering::Relaxed),
            rejected_total: self.rejected_total.load(Ordering::Relaxed),
            wait_micros_total: self.wait_micros_total.load(Ordering::Relaxed),
        }
    }

    /// Waits for `take` to find a free process, within `bp`'s length and time; `Err(())`
    /// when the queue is full or the wait ran out (the request gets 503).
    pub async fn wait_for<T>(
        &self,
        bp: &Backpressure,
        mut take: impl FnMut() -> Option<T>,
    ) -> Result<T, ()> {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= bp.queue_length {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            self.rejected_total.fetch_add(1, Ordering::Relaxed);
            return Err(());
        }
        self.queued_total.fetch_add(1, Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        let deadline = started + bp.queue_timeout;
        let taken = loop {
            // Registered before looking, so a slot freed in between wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(t) = take() {
                break Ok(t);
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break Err(());
            }
            let _ = tokio::time::timeout_at(deadline.min(now + RECHECK), freed).await;
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.wait_micros_total
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if taken.is_err() {
            self.rejected_total.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }
}

/// A request's place at an app process, given back (and a waiting request woken) when the
/// request is done with it.
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    queue: Arc<Queue>,
}

impl Slot {
    /// A place at `gate` under `cap`, if it has one.
    pub fn take(gate: &Arc<Gate>, queue: &Arc<Queue>, cap: u32) -> Option<Slot> {
        gate.try_take(cap).then(|| Slot {
            gate: Arc::clone(gate),
            queue: Arc::clone(queue),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(1, Ordering::SeqCst);
        // Only a queue with someone in it is told (no shared write otherwise).
        if self.queue.waiting.load(Ordering::SeqCst) > 0 {
            self.queue.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bp(length: u32, timeout_ms: u64) -> Backpressure {
        Backpressure {
            max_requests_per_process: 1,
            queue_length: length,
            queue_timeout: Duration::from_millis(timeout_ms),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_gate_holds_its_cap_and_a_freed_slot_wakes_a_waiter() {
        block_on(async {
            let (gate, queue) = (Arc::new(Gate::default()), Arc::new(Queue::default()));
            let first = Slot::take(&gate, &queue, 1).expect("a free gate");
            assert!(Slot::take(&gate, &queue, 1).is_none(), "at its cap");
            let (g, q) = (Arc::clone(&gate), Arc::clone(&queue));
            let waiter =
                tokio::spawn(
                    async move { q.wait_for(&bp(10, 30_000), || Slot::take(&g, &q, 1)).await },
                );
            while queue.figures().waiting == 0 {
                tokio::task::yield_now().await;
            }
            drop(first);
            let second = waiter.await.unwrap().expect("woken with the slot");
            assert_eq!(gate.in_flight(), 1);
            let f = queue.figures();
            assert_eq!((f.waiting, f.queued_total, f.rejected_total), (0, 1, 0));
            drop(second);
            assert_eq!(gate.in_flight(), 0);
        });
    }

    #[test]
    fn a_full_queue_or_a_wait_run_out_is_refused() {
        block_on(async {
            let (gate, queue) = (Arc::new(Gate::default()), Arc::new(Queue::default()));
            let _held = Slot::take(&gate, &queue, 1).unwrap();
            // No queue: refused at once.
            assert!(queue
                .wait_for(&bp(0, 30_000), || Slot::take(&gate, &queue, 1))
                .await
                .is_err());
            // A short wait runs out.
            assert!(queue
                .wait_for(&bp(5, 50), || Slot::take(&gate, &queue, 1))
                .await
                .is_err());
            let f = queue.figures();
            assert_eq!((f.waiting, f.queued_total, f.rejected_total), (0, 1, 2));
            assert!(f.wait_micros_total >= 50_000);
        });
    }
}
