//! A per-thread clock: the response lines common to every response (`Server`, `Date`, the
//! worker header) with the date reformatted once a second, and a coarse "now" for timeouts.
//! One timer task per thread refreshes both, so the request path reads the time without a
//! system call; it also ends the waits bounded by [`Clock::within`], so a request's wait for
//! an app costs no timer registration.
//!
//! Owns: time on the request path. Must not touch: anything shared between threads.

use std::cell::{Cell, Ref, RefCell};
use std::future::Future;
use std::task::{Poll, Waker};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The first of the common lines.
pub const SERVER_LINE: &[u8] = b"Server: espalier\r\n";
/// The length of the second, `Date: <IMF-fixdate, 29 bytes>\r\n`.
pub const DATE_LINE_LEN: usize = 37;

/// Writes the lines every response carries: `Server`, `Date` for `wall`, then `extra` — in
/// that order and of those lengths ([`SERVER_LINE`], [`DATE_LINE_LEN`]), which
/// [`split_common`] relies on.
pub fn common_lines(wall: SystemTime, extra: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(SERVER_LINE);
    out.extend_from_slice(b"Date: ");
    out.extend_from_slice(httpdate::fmt_http_date(wall).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(extra.as_bytes());
}

/// The common lines apart: (`Server` line, `Date` line, the rest), without a search.
pub fn split_common(common: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let (server, rest) = common.split_at(SERVER_LINE.len().min(common.len()));
    let (date, rest) = rest.split_at(DATE_LINE_LEN.min(rest.len()));
    (server, date, rest)
}

/// The common lines formatted now, for code without a per-thread [`Clock`] (the master).
pub fn common_now() -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    common_lines(SystemTime::now(), "", &mut out);
    out
}

/// The log forms of an IMF-fixdate (`Sun, 22 Nov 2026 18:18:42 GMT`), which is UTC.
fn log_times(imf: &str) -> (String, String) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (day, mon, year, time) = (
        imf.get(5..7).unwrap_or("01"),
        imf.get(8..11).unwrap_or("Jan"),
        imf.get(12..16).unwrap_or("1970"),
        imf.get(17..25).unwrap_or("00:00:00"),
    );
    let month = MONTHS.iter().position(|m| *m == mon).map_or(1, |k| k + 1);
    (
        format!("{day}/{mon}/{year}:{time} +0000"),
        format!("{year}-{month:02}-{day}T{time}Z"),
    )
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
    /// The second as access logs write it: Common Log Format and ISO 8601 (UTC).
    log_time: RefCell<(String, String)>,
    /// The waits bounded by [`Clock::within`] that are pending: their deadlines and wakers.
    waits: RefCell<slab::Slab<(Instant, Waker)>>,
}

impl Clock {
    /// `extra` is appended to the common lines of every response (`Name: value\r\n`…).
    pub fn new(extra: String) -> Self {
        let c = Clock {
            now: Cell::new(Instant::now()),
            second: Cell::new(u64::MAX),
            extra,
            common: RefCell::new(Vec::new()),
            log_time: RefCell::new((String::new(), String::new())),
            waits: RefCell::new(slab::Slab::new()),
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
            *self.log_time.borrow_mut() = log_times(&httpdate::fmt_http_date(wall));
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

    /// This second as `22/Nov/2026:18:18:42 +0000` (Common Log Format) and
    /// `2026-11-22T18:18:42Z`. Do not hold across an `.await`.
    pub fn log_time(&self) -> Ref<'_, (String, String)> {
        self.log_time.borrow()
    }

    /// The lines every response carries. Do not hold across an `.await`.
    pub fn common(&self) -> Ref<'_, Vec<u8>> {
        self.common.borrow()
    }

    /// Refreshes the clock every [`TICK`], for the life of the thread's runtime, and wakes
    /// the waits bounded by [`Clock::within`] whose time is up.
    pub async fn run(self: std::rc::Rc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            self.refresh();
            let now = self.now.get();
            for (_, (at, waker)) in self.waits.borrow().iter() {
                if *at <= now {
                    waker.wake_by_ref();
                }
            }
        }
    }

    /// `work`, or `Err(())` once `limit` has passed (to within [`TICK`]): a timeout for the
    /// waits of a request (an app's answer, a FastCGI record) that costs no timer of
    /// tokio's — a slot in the thread's list while it waits, and nothing when `work` is ready
    /// at once. The clock's tick checks the list.
    pub async fn within<T>(&self, limit: Duration, work: impl Future<Output = T>) -> Result<T, ()> {
        let at = self.now.get() + limit;
        let mut work = std::pin::pin!(work);
        let wait = Registered {
            waits: &self.waits,
            key: Cell::new(None),
        };
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(v));
            }
            if self.now.get() >= at {
                return Poll::Ready(Err(()));
            }
            let mut waits = self.waits.borrow_mut();
            match wait.key.get().and_then(|k| waits.get_mut(k)) {
                Some((_, w)) if w.will_wake(cx.waker()) => {}
                Some((_, w)) => *w = cx.waker().clone(),
                None => wait.key.set(Some(waits.insert((at, cx.waker().clone())))),
            }
            Poll::Pending
        })
        .await
    }
}

/// A wait's slot in the clock's list, freed when the wait ends either way.
struct Registered<'a> {
    waits: &'a RefCell<slab::Slab<(Instant, Waker)>>,
    key: Cell<Option<usize>>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.get() {
            self.waits.borrow_mut().try_remove(k);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wait_within_a_limit_ends_with_its_work_or_the_limit() {
        use std::time::Duration;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let clock = std::rc::Rc::new(super::Clock::new(String::new()));
            tokio::task::spawn_local(std::rc::Rc::clone(&clock).run());
            // Ready at once: no slot taken.
            assert_eq!(clock.within(Duration::ZERO, async { 7 }).await, Ok(7));
            // Never ready: ends by the limit, its slot freed.
            let never = std::future::pending::<()>();
            assert_eq!(
                clock.within(Duration::from_millis(300), never).await,
                Err(())
            );
            assert_eq!(clock.waits.borrow().len(), 0);
            // Ready before the limit.
            let soon = tokio::time::sleep(Duration::from_millis(50));
            assert_eq!(clock.within(Duration::from_secs(60), soon).await, Ok(()));
            assert_eq!(clock.waits.borrow().len(), 0);
        });
    }

    #[test]
    fn log_times_come_from_the_imf_date() {
        let (clf, iso) = super::log_times("Sun, 22 Nov 2026 18:18:42 GMT");
        assert_eq!(clf, "22/Nov/2026:18:18:42 +0000");
        assert_eq!(iso, "2026-11-22T18:18:42Z");
    }
}
