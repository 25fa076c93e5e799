//! One connection task of a worker thread, made safe to fail: its connection slot is given
//! back however the task ends, and a panic inside it is caught, counted and logged with the
//! peer's address — the thread, its other connections and the process go on.
//!
//! Owns: the per-thread connection count, the panic hook of worker processes, and the
//! rate-limited panic log. Must not touch: the protocol (it wraps [`crate::http::conn::serve`] whole).
//!
//! Why catch at all, when every size a client sends is checked: a bug that slips through must
//! cost one connection, not a slot forever. Before this, a panicking task never gave its slot
//! back, and a few thousand crafted requests left every thread answering 503.

use super::log;
use crate::handlers::ThreadService;
use crate::http::service::ConnEnv;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;

thread_local! {
    /// Set while a connection task is being polled: its panics are reported by [`serve`].
    static IN_CONNECTION: Cell<bool> = const { Cell::new(false) };
    /// Where the last caught panic happened (the hook's words, for the log line).
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Installs the worker's panic hook: a panic inside a connection task is recorded for
/// [`serve`] to log once with its peer; any other panic is printed as Rust always does.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if IN_CONNECTION.with(Cell::get) {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            let place = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = format!("{place}: {message}"));
        } else {
            default(info);
        }
    }));
}

/// Polls `fut`, turning a panic into `Err(())`. A future that panicked is never polled again.
async fn catch_panic<F: Future>(fut: F) -> Result<F::Output, ()> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        IN_CONNECTION.with(|c| c.set(true));
        let polled = catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)));
        IN_CONNECTION.with(|c| c.set(false));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(_) => Poll::Ready(Err(())),
        }
    })
    .await
}

/// A thread's open-connection count, decremented by a slot's drop however its task ends.
pub struct Slot(Rc<Cell<usize>>);

impl Slot {
    pub fn take(open: &Rc<Cell<usize>>) -> Slot {
        open.set(open.get() + 1);
        Slot(Rc::clone(open))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Serves one connection in its slot, with what it brings when it was handed over (see
/// [`crate::handoff::Carried`]); a panic is contained here (see the module docs).
pub async fn serve(
    stream: crate::http::accept::Accepted,
    group: usize,
    carried: crate::handoff::Carried,
    env: Rc<ConnEnv<ThreadService>>,
    slot: Slot,
    panics: Arc<AtomicU64>,
    who: Rc<str>,
) {
    let peer = carried.client;
    // Boxed once: a connection's future is kilobytes, and a future held by value is copied
    // whole at each move (into the task, into `catch_panic`), per connection.
    let fut = Box::pin(crate::http::accept::serve_accepted(
        stream, group, env, carried,
    ));
    contain(fut, peer, slot, panics, who).await;
}

/// Runs one connection's future `fut` (a TCP one's, or a QUIC one's) in its slot, a panic
/// contained and logged with `peer`.
pub async fn contain<F: Future<Output = ()>>(
    fut: std::pin::Pin<Box<F>>,
    peer: Option<std::net::SocketAddr>,
    slot: Slot,
    panics: Arc<AtomicU64>,
    who: Rc<str>,
) {
    let outcome = catch_panic(fut).await;
    drop(slot);
    if outcome.is_err() {
        let n = panics.fetch_add(1, Ordering::Relaxed) + 1;
        if crate::os::nth_worth_logging(n) {
            let place = LAST_PANIC.with(|p| std::mem::take(&mut *p.borrow_mut()));
            let peer = peer.map_or_else(|| "an unknown peer".to_string(), |p| p.to_string());
            log(
                &who,
                format!("a connection from {peer} hit a bug and was closed (panic #{n} of this thread at {place}); the thread serves on"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_are_caught_and_slots_given_back() {
        install_panic_hook();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let open = Rc::new(Cell::new(0));
        rt.block_on(async {
            let slot = Slot::take(&open);
            assert_eq!(open.get(), 1);
            let r = catch_panic(async {
                tokio::task::yield_now().await;
                let v: Vec<u8> = Vec::new();
                let i = std::hint::black_box(3);
                v[i]
            })
            .await;
            assert!(r.is_err());
            drop(slot);
            assert_eq!(open.get(), 0);
            assert!(LAST_PANIC.with(|p| p.borrow().contains("conn_task.rs")));
            assert_eq!(catch_panic(async { 7 }).await, Ok(7));
        });
        assert!(!IN_CONNECTION.with(Cell::get));
    }

    #[test]
    fn the_log_is_rate_limited() {
        let logged: Vec<u64> = (1..=5000)
            .filter(|&n| crate::os::nth_worth_logging(n))
            .collect();
        assert_eq!(logged.len(), 10 + 9, "1..=10, then 16, 32, …, 4096");
    }
}
