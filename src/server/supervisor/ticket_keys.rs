//! The session ticket keys' rotation: every `tls::tickets::ROTATE_EVERY` from the tick, or
//! when the admin endpoint asks (`POST /tls/rotate-ticket-keys`), a new secret seals, and every
//! running worker is sent its pool's keys. A worker that starts later gets them in its spec.
//!
//! Owns: when the keys rotate and who is told. Must not touch: the keys themselves
//! (`crate::tls::tickets`).

use super::Supervisor;
use crate::server::control::Message;
use crate::server::log;
use std::time::Instant;

impl Supervisor {
    /// Rotates the ticket keys when they are due (from the tick).
    pub(super) fn rotate_ticket_keys_when_due(&mut self) {
        if self.ticket_keys.due(Instant::now()) {
            self.rotate_ticket_keys();
        }
    }

    /// A new ticket key for every pool, sent to its running workers; tickets sealed with the
    /// two keys before still open. In a fleet that shares them, the new secrets go through
    /// its etcd first and every member's pools are told from its watch (`fleet_tickets`).
    /// How many pools were (or are to be) told.
    pub(super) fn rotate_ticket_keys(&mut self) -> usize {
        if self.fleet_makes_ticket_keys() {
            // Not due again before the fleet's come back (or another member's).
            self.ticket_keys.postpone(Instant::now());
            self.publish_ticket_secrets(self.ticket_keys.rotated_secrets());
            return self.pools_with_workers().len();
        }
        self.ticket_keys.rotate(Instant::now());
        self.send_ticket_keys()
    }

    /// The pools with espalier workers running, each once.
    pub(super) fn pools_with_workers(&self) -> Vec<String> {
        let mut pools: Vec<String> = (self.slots.iter())
            .filter(|s| s.app.is_none() && s.current.is_some())
            .map(|s| self.pools[s.pool].spec.name.clone())
            .collect();
        pools.sort_unstable();
        pools.dedup();
        pools
    }

    /// Sends every pool's keys now to its running workers; how many pools were told.
    pub(super) fn send_ticket_keys(&mut self) -> usize {
        let pools = self.pools_with_workers();
        for pool in &pools {
            let keys = Message::TicketKeys(self.ticket_keys.for_pool(pool)).line();
            if !self.send_to_pool(pool, &keys) {
                log("master", format!("pool `{pool}`: a worker did not take the new session ticket keys; it goes on with the old until it is replaced"));
            }
        }
        pools.len()
    }
}
