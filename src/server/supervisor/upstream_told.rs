//! What the master does when an upstream server's active check ends: count it, and when the
//! server's state changes, log it and tell every worker; and what a worker just ready is
//! told of the servers down.
//!
//! Owns: those reactions. Must not touch: the checks' data and probes
//! (`upstream_checks`).

use super::upstream_checks::health_line;
use super::Supervisor;
use crate::os::log;
use std::sync::Arc;

impl Supervisor {
    /// A probe ended: counted, and when it changed the server's state, logged and told to
    /// every worker.
    pub(super) fn on_upstream_checked(
        &mut self,
        epoch: u64,
        group: usize,
        server: usize,
        result: Result<(), String>,
    ) {
        let checks = &mut self.upstream_checks;
        if epoch != checks.epoch {
            return;
        }
        let Some(g) = checks.groups.get_mut(group) else {
            return;
        };
        let spec = Arc::clone(&g.spec);
        let Some(check) = &spec.health else {
            return;
        };
        let state = &mut g.servers[server];
        if !state.record(&result, check) {
            return;
        }
        let up = state.up;
        let s = &spec.servers[server];
        let what = match &result {
            Ok(()) => format!("is up: {} checks passed in a row", check.rise),
            Err(cause) => format!("is down: the health check of {} failed ({cause}); it gets no requests until {} checks pass in a row", check.path, check.rise),
        };
        log(
            "master",
            format!("upstream `{}`: server {} {what}", spec.name, s.name),
        );
        let line = health_line(&spec.name, &s.address.to_string(), up);
        for slot in &self.slots {
            for p in slot.current.iter().chain(slot.replacing.iter()) {
                if let Some(control) = &p.control {
                    let _ = control.try_write(line.as_bytes());
                }
            }
        }
    }

    /// A worker just ready hears which servers are down.
    pub(super) fn tell_upstream_health(&self, control: &tokio::net::unix::OwnedWriteHalf) {
        for line in self.upstream_checks.down_lines() {
            let _ = control.try_write(line.as_bytes());
        }
    }
}
