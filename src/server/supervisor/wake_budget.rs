//! How many sleeping pools one client address may wake a minute on a shared address (see
//! `super::wake`'s module doc for why): a table of client addresses and their wakes in their
//! current minute, bounded. An IPv6 client is counted by its /64: one host is given a /64
//! and can send from any address in it, so counting addresses would count nothing.
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

/// How often, at most, a full table is swept of clients whose minute is over: a flood of new
/// addresses against a table full of this minute's clients costs a look each, not a pass
/// over 16,384 entries each.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The wakes each client address made in its current minute.
#[derive(Default)]
pub(super) struct WakesByClient {
    seen: std::collections::HashMap<std::net::IpAddr, (u32, Instant)>,
    /// When the full table was last swept.
    swept: Option<Instant>,
    /// Wakes refused, for the log's bound.
    refused: u64,
}

impl WakesByClient {
    /// Whether `client` may wake a sleeping pool at `now` (then counted); `false` past its
    /// [`WAKES_PER_CLIENT`] a minute, or when the table is full of this minute's clients.
    pub(super) fn take(&mut self, client: std::net::IpAddr, now: Instant) -> bool {
        let client = counted_as(client);
        if !self.seen.contains_key(&client) && self.seen.len() >= WAKE_CLIENTS {
            if self
                .swept
                .is_none_or(|t| now.saturating_duration_since(t) >= SWEEP_EVERY)
            {
                self.swept = Some(now);
                self.seen
                    .retain(|_, (_, since)| now.saturating_duration_since(*since) < WAKE_WINDOW);
            }
            if self.seen.len() >= WAKE_CLIENTS {
                return self.refuse(
                    client,
                    "may not wake a sleeping pool: the table of this minute's waking clients is full",
                );
            }
        }
        let entry = self.seen.entry(client).or_insert((0, now));
        if now.saturating_duration_since(entry.1) >= WAKE_WINDOW {
            *entry = (0, now);
        }
        if entry.0 >= WAKES_PER_CLIENT {
            return self.refuse(
                client,
                &format!("has woken {WAKES_PER_CLIENT} sleeping pools this minute"),
            );
        }
        entry.0 += 1;
        true
    }

    fn refuse(&mut self, client: std::net::IpAddr, why: &str) -> bool {
        let client = match client {
            std::net::IpAddr::V6(_) => format!("{client}/64"),
            v4 => v4.to_string(),
        };
        self.refused += 1;
        if crate::os::nth_worth_logging(self.refused) {
            log("master", format!("client {client} {why}: its connection for another is closed (refusal {}; later ones are logged at powers of two)", self.refused));
        }
        false
    }
}

/// What a client address is counted as: itself (IPv4), or its /64 (IPv6).
fn counted_as(client: std::net::IpAddr) -> std::net::IpAddr {
    match client {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.into(),
            None => std::net::Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX)).into(),
        },
        v4 => v4,
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
        // An IPv6 client rotating through its /64 is one client.
        let v6 = |k: u64| {
            std::net::IpAddr::from(std::net::Ipv6Addr::from(
                (0x2001_0db8_u128 << 96) | u128::from(k),
            ))
        };
        for k in 0..u64::from(WAKES_PER_CLIENT) {
            assert!(wakes.take(v6(k), now));
        }
        assert!(!wakes.take(v6(999_999), now), "the same /64");
        let next_64 = std::net::IpAddr::from(std::net::Ipv6Addr::from(
            (0x2001_0db8_u128 << 96) | (1u128 << 64),
        ));
        assert!(wakes.take(next_64, now));
        assert!(wakes.take(b, now), "another client has its own");
        assert!(wakes.take(a, now + WAKE_WINDOW), "a minute on");
        // A table full of this minute's clients refuses a new one; full of old ones, not.
        let mut full = WakesByClient::default();
        for k in 0..WAKE_CLIENTS as u32 {
            assert!(full.take(std::net::IpAddr::from(k.to_be_bytes()), now));
        }
        assert!(!full.take(b, now));
        // Swept at most once a second: a minute on, the old clients go at the next sweep.
        assert!(full.take(b, now + WAKE_WINDOW));
        let mut flooded = WakesByClient::default();
        for k in 0..WAKE_CLIENTS as u32 {
            assert!(flooded.take(std::net::IpAddr::from(k.to_be_bytes()), now));
        }
        let late = now + WAKE_WINDOW - Duration::from_millis(10);
        assert!(!flooded.take(b, late), "full of this minute's clients");
        assert!(
            !flooded.take(a, late + Duration::from_millis(20)),
            "not swept again yet"
        );
        assert!(
            flooded.take(a, late + SWEEP_EVERY),
            "swept: the minute is over"
        );
    }
}
