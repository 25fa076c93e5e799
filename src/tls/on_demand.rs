//! A worker's side of certificates ordered on demand (`[server.acme] on_demand = true`): a
//! handshake for a name one of its sites takes, with no certificate yet, is held — before
//! the ClientHello is answered — while the master finds the name's pair in the store or
//! orders it; the pair comes back as any store pair does (a `certificate` message), or word
//! that there is none (`no-certificate`), and every handshake held for the name goes on.
//!
//! Owns: the names held now (one ask of the master per name, however many handshakes wait
//! on it), the bound on how many ([`OnDemand::new`]'s `most`, from the config's
//! `on_demand_in_flight`: past it a handshake is not held, and fails) and on how long
//! ([`HOLD`]). Must not touch: which names a site takes (the resolver, `super`), the
//! ordering (the master's), or the control socket (the worker's loop sends what
//! [`OnDemand::new`]'s receiver yields).
//!
//! Why in the worker and not the resolver rustls calls: that call cannot wait, and a
//! handshake thread must not block; the ClientHello is read first (as on a shared address,
//! `http::sni`), the wait is a future, and the handshake then runs as any other. A QUIC
//! handshake gives no such point (quinn hands the ClientHello to rustls itself): there the
//! resolver only asks ([`OnDemand::ask`]), the handshake fails, and the client's next finds
//! the certificate.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// The longest a handshake is held for its certificate: a CA validates and issues within
/// seconds (Let's Encrypt: 2–10 s; pebble: a fifth of one); past it the handshake goes on
/// without one, and fails, while the order goes on for the next.
pub const HOLD: Duration = Duration::from_secs(30);

/// The names held now, and the way to the master.
#[derive(Debug)]
pub struct OnDemand {
    /// By name: what its held handshakes wait on (`true` once the master answered), and when
    /// it was asked for.
    held: Mutex<HashMap<String, (watch::Sender<bool>, Instant)>>,
    asks: mpsc::UnboundedSender<String>,
    most: usize,
}

impl OnDemand {
    /// Holds at most `most` names at once; the names to ask the master for come out of the
    /// receiver.
    pub fn new(most: usize) -> (std::sync::Arc<OnDemand>, mpsc::UnboundedReceiver<String>) {
        let (asks, asked) = mpsc::unbounded_channel();
        let held = Mutex::new(HashMap::new());
        (std::sync::Arc::new(OnDemand { held, asks, most }), asked)
    }

    /// Waits until the master answered for `name` (lowercase), at most [`HOLD`]; at once
    /// when `most` names are held already.
    pub async fn hold(&self, name: &str) {
        let Some(mut answered) = self.ask(name) else {
            return;
        };
        let waited = tokio::time::timeout(HOLD, answered.wait_for(|done| *done)).await;
        if waited.is_err() {
            // Unanswered in time: the next handshake asks again (an answer may have been
            // lost with a replaced master's socket).
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            held.remove(name);
        }
    }

    /// Asks the master for `name` (lowercase) unless it was asked for within [`HOLD`]; what
    /// tells when it answered, `None` when `most` names are held already. For a handshake
    /// that cannot wait (QUIC's: quinn asks rustls for the certificate inside its handshake)
    /// asking alone orders the name, and the client's next handshake finds it.
    pub fn ask(&self, name: &str) -> Option<watch::Receiver<bool>> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((waiting, asked)) = held.get(name) {
            if asked.elapsed() < HOLD {
                return Some(waiting.subscribe());
            }
            // Unanswered in time (an answer lost with a replaced master's socket): again.
            held.remove(name);
        }
        if held.len() >= self.most {
            return None;
        }
        let (waiting, answered) = watch::channel(false);
        self.asks.send(name.to_string()).ok()?;
        held.insert(name.to_string(), (waiting, Instant::now()));
        Some(answered)
    }

    /// The master answered for `name`: its pair was stored (or there is none); the
    /// handshakes held for it go on.
    pub fn answered(&self, name: &str) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((waiting, _)) = held.remove(name) {
            let _ = waiting.send(true);
        }
    }

    /// How many names are held now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_name_is_asked_once_and_its_handshakes_go_on_together() {
        let (demand, mut asked) = OnDemand::new(2);
        let first = tokio::spawn({
            let d = std::sync::Arc::clone(&demand);
            async move { d.hold("a.test").await }
        });
        let second = tokio::spawn({
            let d = std::sync::Arc::clone(&demand);
            async move { d.hold("a.test").await }
        });
        assert_eq!(asked.recv().await.as_deref(), Some("a.test"));
        tokio::task::yield_now().await;
        assert_eq!(demand.held(), 1);
        assert!(asked.try_recv().is_err(), "asked once");
        demand.answered("a.test");
        first.await.unwrap();
        second.await.unwrap();
        assert_eq!(demand.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handshake_that_cannot_wait_asks_once_and_again_when_unanswered() {
        let (demand, mut asked) = OnDemand::new(2);
        assert!(demand.ask("q.test").is_some());
        assert!(demand.ask("q.test").is_some());
        assert_eq!(asked.recv().await.as_deref(), Some("q.test"));
        assert!(asked.try_recv().is_err(), "asked once");
        // Unanswered past HOLD: the next handshake asks again.
        tokio::time::advance(HOLD).await;
        assert!(demand.ask("q.test").is_some());
        assert_eq!(asked.recv().await.as_deref(), Some("q.test"));
        // Answered: forgotten, and a second name takes its place within the bound.
        demand.answered("q.test");
        assert_eq!(demand.held(), 0);
        assert!(demand.ask("r.test").is_some() && demand.ask("s.test").is_some());
        assert!(demand.ask("t.test").is_none(), "two names held: the bound");
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_bound_no_handshake_is_held_and_an_unanswered_one_lets_go() {
        let (demand, mut asked) = OnDemand::new(1);
        let held = tokio::spawn({
            let d = std::sync::Arc::clone(&demand);
            async move { d.hold("a.test").await }
        });
        assert_eq!(asked.recv().await.as_deref(), Some("a.test"));
        // A second name while one is held: not held at all (the bound is 1).
        demand.hold("b.test").await;
        assert!(asked.try_recv().is_err());
        // Unanswered: let go after HOLD (paused time moves on by itself), and forgotten.
        held.await.unwrap();
        assert_eq!(demand.held(), 0);
    }
}
