//! How many requests one app or upstream group may have at its servers on a thread: half the
//! thread's share of `max_connections`. Each such request holds two descriptors (the client's
//! and the server's); a slow or silent upstream that kept every request waiting once took a
//! worker to its descriptor limit, and every other site it served answered 503. At half, the
//! rest of the thread's connections, and the descriptors to serve them, stay for the others.
//!
//! Owns: that count, per route and thread (no atomics: a route is one thread's). Must not
//! touch: choosing or reaching a server (`super::route`).

use std::cell::Cell;
use std::rc::Rc;

/// The share of a thread's connections one app or group may hold: one in this many.
pub const SHARE_OF_CONNECTIONS: usize = 2;

/// One route's requests at its servers on a thread, and their bound.
pub(super) struct Share {
    in_flight: Rc<Cell<usize>>,
    bound: Cell<usize>,
    /// Requests refused for a full share, for the log's bound.
    refused: Cell<u64>,
}

impl Default for Share {
    fn default() -> Self {
        Share {
            in_flight: Rc::default(),
            bound: Cell::new(usize::MAX),
            refused: Cell::new(0),
        }
    }
}

/// A request counted in its route's share until dropped.
pub(super) struct Counted(Rc<Cell<usize>>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl Share {
    /// Bounds the route to its share of the thread's `connections`.
    pub(super) fn of(&self, connections: usize) {
        self.bound.set((connections / SHARE_OF_CONNECTIONS).max(1));
    }

    /// One more request counted, or the 503 (with, when worth a log line, why) of a full
    /// share.
    pub(super) fn take(&self) -> Result<Counted, (u16, Option<String>)> {
        let n = self.in_flight.get();
        if n >= self.bound.get() {
            let refused = self.refused.get() + 1;
            self.refused.set(refused);
            let cause = crate::os::nth_worth_logging(refused).then(|| {
                format!("holds {n} requests at its servers on this thread, its share of the thread's connections (refusal {refused}; later ones are logged at powers of two)")
            });
            return Err((503, cause));
        }
        self.in_flight.set(n + 1);
        Ok(Counted(Rc::clone(&self.in_flight)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_takes_half_the_connections_and_gives_each_back() {
        let share = Share::default();
        share.of(8);
        let held: Vec<Counted> = (0..4).map(|_| share.take().ok().unwrap()).collect();
        assert_eq!(share.take().err().map(|e| e.0), Some(503));
        drop(held);
        assert!(share.take().is_ok());
        // A thread of one connection still has one for the route.
        share.of(1);
        assert!(share.take().is_ok());
    }
}
