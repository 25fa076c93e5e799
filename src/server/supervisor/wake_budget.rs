//! How many sleeping pools one client address may wake a minute on a shared address (see
//! `super::wake`'s module doc for why): a table of client addresses and their wakes in their
//! current minute, bounded.
//!
//! Owns: that count. Must not touch: the wake itself (`super::demand` asks, and closes the
//! connection when refused).

use crate::server::log;
use std::time::{Duration, Instant};

/// Sleeping pools one client address may wake a minute (see the module doc).
pub const WAKES_PER_CLIENT: u32 = 8;
const WAKE_WINDOW: Duration = Duration::from_secs(60);
/// Client addresses the wake budget remembers; past it (every one woke a pool in the last
/// minute), a new client's wake is refused as over budget.
const WAKE_CLIENTS: usize = 16_384;

/// The wakes each client address made in its current minute.
#[derive(Default)]
pub(super) struct WakesByClient {
    seen: std::collections::HashMap<std::net::IpAddr, (u32, Instant)>,
    /// Wakes refused, for the log's bound.
    refused: u64,
}

impl WakesByClient {
    /// Whether `client` may wake a sleeping pool at `now` (then counted); `false` past its
    /// [`WAKES_PER_CLIENT`] a minute, or when the table is full of this minute's clients.
    pub(super) fn take(&mut self, client: std::net::IpAddr, now: Instant) -> bool {
        if !self.seen.contains_key(&client) && self.seen.len() >= WAKE_CLIENTS {
            self.seen
                .retain(|_, (_, since)| now.saturating_duration_since(*since) < WAKE_WINDOW);
            if self.seen.len() >= WAKE_CLIENTS {
                return self.refuse(client);
            }
        }
        let entry = self.seen.entry(client).or_insert((0, now));
        if now.saturating_duration_since(entry.1) >= WAKE_WINDOW {
            *entry = (0, now);
        }
        if entry.0 >= WAKES_PER_CLIENT {
            return self.refuse(client);
        }
        entry.0 += 1;
        true
    }

    fn refuse(&mut self, client: std::net::IpAddr) -> bool {
        self.refused += 1;
        if crate::os::nth_worth_logging(self.refused) {
            log("master", format!("client {client} has woken {WAKES_PER_CLIENT} sleeping pools this minute: its connection for another is closed (refusal {}; later ones are logged at powers of two)", self.refused));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_wakes_a_few_pools_a_minute() {
        let mut wakes = WakesByClient::default();
        let now = Instant::now();
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let b: std::net::IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..WAKES_PER_CLIENT {
            assert!(wakes.take(a, now));
        }
        assert!(!wakes.take(a, now), "past its budget");
        assert!(wakes.take(b, now), "another client has its own");
        assert!(wakes.take(a, now + WAKE_WINDOW), "a minute on");
        // A table full of this minute's clients refuses a new one; full of old ones, not.
        let mut full = WakesByClient::default();
        for k in 0..WAKE_CLIENTS as u32 {
            assert!(full.take(std::net::IpAddr::from(k.to_be_bytes()), now));
        }
        assert!(!full.take(b, now));
        assert!(full.take(b, now + WAKE_WINDOW));
    }
}
