//! Sending the running workers the certificate store's pairs that changed: from the tick,
//! through each worker's control socket.
//!
//! Owns: who is sent which pair. Must not touch: reading or checking the files
//! (`super::cert_store`).

use super::Supervisor;
use crate::server::control::Message;

impl Supervisor {
    /// Sends the running workers the store pairs that changed (from the tick).
    pub(super) fn scan_certificate_store(&mut self) {
        // Called every tick: nothing is gathered unless a scan is due.
        if !self.cert_store.scan_due() {
            return;
        }
        let mut running: Vec<&str> = self
            .slots
            .iter()
            .filter(|s| s.app.is_none() && s.current.is_some())
            .map(|s| self.pools[s.pool].spec.name.as_str())
            .collect();
        running.sort_unstable();
        running.dedup();
        let changed = self.cert_store.scan(running.into_iter());
        for (pool, cert) in changed {
            let Ok(json) = serde_json::to_string(&cert) else {
                continue;
            };
            if !self.send_to_pool(&pool, &Message::Certificate(json).line()) {
                // Not sent whole: the next scan sends it again.
                self.cert_store.seen.remove(&cert.host);
            }
        }
    }

    /// Sends `line` to every running worker of `pool` (those being replaced too); `false`
    /// when some did not take it whole.
    pub(super) fn send_to_pool(&self, pool: &str, line: &str) -> bool {
        let mut whole = true;
        let slots = self
            .slots
            .iter()
            .filter(|s| self.pools[s.pool].spec.name == pool);
        for p in slots.flat_map(|s| s.current.iter().chain(s.replacing.iter())) {
            let Some(control) = &p.control else { continue };
            whole &= control.send(line);
        }
        whole
    }
}
