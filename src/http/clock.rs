//! A per-thread clock: the response lines common to every response (`Server`, `Date`, the
//! worker header) with the date reformatted once a second, and a coarse "now" for timeouts.
//! One timer task per thread refreshes both, so the request path reads the time without a
//! system call.
//!
//! Owns: time on the request path. Must not touch: anything shared between threads.

use std::cell::{Cell, Ref, RefCell};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Writes the lines every response carries: `Server`, `Date` for `wall`, then `extra`.
pub fn common_lines(wall: SystemTime, extra: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"Server: espalier\r\nDate: ");
    out.extend_from_slice(httpdate::fmt_http_date(wall).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra.as_bytes());
}

/// The common lines formatted now, for code without a per-thread [`Clock`] (the master).
pub fn common_now() -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    common_lines(SystemTime::now(), "", &mut out);
    out
}

/// How often the clock is refreshed: the precision of every timeout.
pub const TICK: Duration = Duration::from_millis(100);

pub struct Clock {
    now: Cell<Instant>,
    second: Cell<u64>,
    /// Header lines after `Date` (the worker header), fixed for the thread's life.
    extra: String,
    /// `Server: espalier\r\nDate: <IMF-fixdate>\r\n<extra>`.
    common: RefCell<Vec<u8>>,
}

impl Clock {
    /// `extra` is appended to the common lines of every response (`Name: value\r\n`…).
    pub fn new(extra: String) -> Self {
        let c = Clock {
            now: Cell::new(Instant::now()),
            second: Cell::new(u64::MAX),
            extra,
            common: RefCell::new(Vec::new()),
        };
        c.refresh();
        c
    }

    /// Re-reads the time; reformats the date only when the second changed.
    pub fn refresh(&self) {
        self.now.set(Instant::now());
        let wall = SystemTime::now();
        let secs = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if secs != self.second.get() {
            self.second.set(secs);
            let mut c = self.common.borrow_mut();
            c.clear();
            common_lines(wall, &self.extra, &mut c);
        }
    }

    /// Now, to within [`TICK`].
    pub fn now(&self) -> Instant {
        self.now.get()
    }

    /// Seconds since the epoch, to within [`TICK`].
    pub fn unix_seconds(&self) -> u64 {
        self.second.get()
    }

    /// The lines every response carries. Do not hold across an `.await`.
    pub fn common(&self) -> Ref<'_, Vec<u8>> {
        self.common.borrow()
    }

    /// Refreshes the clock every [`TICK`], for the life of the thread's runtime.
    pub async fn run(self: std::rc::Rc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            self.refresh();
        }
    }
}
