//! What the master does when an upstream server's active check ends: count it, and when the
//! server's state changes, log it and tell every worker; what a worker just ready is told of
//! the servers down; and a group's host names resolved again on its `resolve` interval —
//! when the addresses moved, the running configuration with the new ones is applied as a
//! reload applies a file (the group's pools' workers replaced, overlapped).
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
            Err(cause) => {
                let of = match &check.grpc_service {
                    Some(service) => format!("gRPC health check of service \"{service}\""),
                    None => format!("health check of {}", check.path),
                };
                format!("is down: the {of} failed ({cause}); it gets no requests until {} checks pass in a row", check.rise)
            }
        };
        log(
            "master",
            format!("upstream `{}`: server {} {what}", spec.name, s.name),
        );
        let line = health_line(&spec.name, &s.address.to_string(), up);
        for slot in &self.slots {
            for p in slot.current.iter().chain(slot.replacing.iter()) {
                if let Some(control) = &p.control {
                    control.send(&line);
                }
            }
        }
    }

    /// A worker just ready hears which servers are down.
    pub(super) fn tell_upstream_health(&self, control: &super::control_out::ControlOut) {
        for line in self.upstream_checks.down_lines() {
            control.send(&line);
        }
    }

    /// Starts resolving, off the loop (a resolver may take seconds), each group whose
    /// `resolve` interval ran out.
    pub(super) fn resolve_upstreams_due(&mut self, now: std::time::Instant) {
        for g in &self.config.upstreams {
            let Some(every) = g.resolve else {
                continue;
            };
            let at = self.upstream_checks.resolve_at.entry(g.name.clone());
            let (due, busy) = at.or_insert((now + every, false));
            if *busy || now < *due {
                continue;
            }
            (*due, *busy) = (now + every, true);
            let (spec, events) = (g.clone(), self.events.clone());
            tokio::task::spawn_blocking(move || {
                let servers = spec.resolved_again();
                let _ = events.send(super::Event::Resolved {
                    group: spec.name,
                    servers,
                });
            });
        }
    }

    /// A group's names resolved again: when its addresses moved, applied.
    pub(super) fn on_resolved(
        &mut self,
        group: &str,
        servers: Result<Vec<crate::config::upstream::ServerSpec>, String>,
    ) {
        if let Some((_, busy)) = self.upstream_checks.resolve_at.get_mut(group) {
            *busy = false;
        }
        let Some(k) = self.config.upstreams.iter().position(|g| g.name == group) else {
            return;
        };
        let servers = match servers {
            Ok(s) => {
                self.upstream_checks.resolve_failed.remove(group);
                s
            }
            Err(e) => {
                let said = self
                    .upstream_checks
                    .resolve_failed
                    .insert(group.to_string(), e.clone());
                if said.as_ref() != Some(&e) {
                    log(
                        "master",
                        format!("upstream `{group}`: {e}; its servers stay as they are"),
                    );
                }
                return;
            }
        };
        let addresses = |list: &[crate::config::upstream::ServerSpec]| {
            let mut a: Vec<String> = list.iter().map(|s| s.address.to_string()).collect();
            a.sort();
            a
        };
        let (was, now) = (
            addresses(&self.config.upstreams[k].servers),
            addresses(&servers),
        );
        if was == now {
            return;
        }
        log(
            "master",
            format!("upstream `{group}`: its names now resolve to {} (were {}); its pools' workers are replaced", now.join(", "), was.join(", ")),
        );
        let mut new = self.config.clone();
        new.upstreams[k].servers = servers;
        let outcome = self.apply(new, &format!("upstream `{group}` resolved again"));
        let (Ok(line) | Err(line)) = outcome;
        log("master", line);
    }
}
