//! Active health checks of upstream groups, run by the master: one probe per server per
//! interval for the whole server, however many workers and threads reach it (each
//! worker checking on its own would multiply the probes by the workers, as nginx Plus's and
//! HAProxy's multi-process users see), and one place that knows each server's state for
//! `status` and the log.
//!
//! Also the data of `resolve` (when each group's host names are resolved next).
//!
//! Owns: the probes' tasks, each server's run of passes and failures and its state (`rise`
//! passes in a row bring a down server up, `fall` failures take an up one down; a server not
//! yet checked is up, and needs `fall` failures like any other — a front started with its
//! servers, whose first checks fail while they start, does not answer 503 for `rise` ×
//! `interval`, as HAProxy's initial state and Envoy's panic routing keep from), and telling the workers
//! (`upstream-health` messages). Must not touch: the probe itself (`server::upstream_probe`)
//! or the workers' passive checks (theirs alone, `proxy::group`).

use super::event::Event;
use crate::config::upstream::{ActiveCheck, UpstreamSpec};
use crate::config::Config;
use crate::server::control::Message;
use crate::server::status::{UpstreamServerStatus, UpstreamStatus};
use std::sync::Arc;

/// Every group's servers as the checks see them.
#[derive(Default)]
pub(super) struct UpstreamChecks {
    /// Bumped at each (re)start: a probe of an older configuration is ignored.
    pub(super) epoch: u64,
    pub(super) groups: Vec<GroupState>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Groups with `resolve`: when each is resolved next, and whether it is being now.
    pub(super) resolve_at: std::collections::HashMap<String, (std::time::Instant, bool)>,
    /// The last resolution failure said of each group (said again only when it changes).
    pub(super) resolve_failed: std::collections::HashMap<String, String>,
}

pub(super) struct GroupState {
    pub(super) spec: Arc<UpstreamSpec>,
    pub(super) servers: Vec<ServerState>,
}

#[derive(Clone)]
pub(super) struct ServerState {
    pub(super) up: bool,
    checked: bool,
    /// Passes (above 0) or failures (below) in a row.
    run: i32,
    /// The last failure's cause.
    last: Option<String>,
}

impl ServerState {
    fn new() -> Self {
        ServerState {
            up: true,
            checked: false,
            run: 0,
            last: None,
        }
    }

    /// A probe's result; whether the server's state changed.
    pub(super) fn record(&mut self, result: &Result<(), String>, check: &ActiveCheck) -> bool {
        self.checked = true;
        match result {
            Ok(()) => {
                self.run = self.run.max(0) + 1;
                if !self.up && self.run >= check.rise as i32 {
                    self.up = true;
                    return true;
                }
            }
            Err(cause) => {
                self.run = self.run.min(0) - 1;
                self.last = Some(cause.clone());
                if self.up && -self.run >= check.fall as i32 {
                    self.up = false;
                    return true;
                }
            }
        }
        false
    }
}

impl UpstreamChecks {
    /// Starts the checks of `config`'s groups (those with `health`), stopping the last
    /// configuration's; a server kept by a reload (same group, same address) keeps its state.
    pub(super) fn start(
        &mut self,
        config: &Config,
        events: &tokio::sync::mpsc::UnboundedSender<Event>,
    ) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.epoch += 1;
        let old = std::mem::take(&mut self.groups);
        for spec in &config.upstreams {
            let Some(check) = spec.health.clone() else {
                continue;
            };
            // Events name the group by its place among the checked ones.
            let g = self.groups.len();
            let was = old.iter().find(|o| o.spec.name == spec.name);
            let servers = (spec.servers.iter())
                .map(|s| {
                    was.and_then(|o| {
                        let k = o.spec.servers.iter().position(|p| p.address == s.address)?;
                        Some(o.servers[k].clone())
                    })
                    .unwrap_or_else(ServerState::new)
                })
                .collect();
            let spec = Arc::new(spec.clone());
            // The probes speak TLS as the group's traffic does.
            let tls = crate::proxy::GroupHealth::new(Arc::clone(&spec));
            let http2 = spec.protocol == crate::config::upstream::Protocol::Http2;
            for (k, server) in spec.servers.iter().enumerate() {
                let (server, check, events, epoch) =
                    (server.clone(), check.clone(), events.clone(), self.epoch);
                let tls =
                    (tls.tls_for(k)).map(|t| t.map(|(config, name)| (Arc::clone(config), name)));
                self.tasks.push(tokio::spawn(async move {
                    loop {
                        let result =
                            crate::server::upstream_probe::probe(&server, &check, &tls, http2)
                                .await;
                        let checked = Event::UpstreamChecked {
                            epoch,
                            group: g,
                            server: k,
                            result,
                        };
                        if events.send(checked).is_err() {
                            return;
                        }
                        tokio::time::sleep(check.interval).await;
                    }
                }));
            }
            self.groups.push(GroupState { spec, servers });
        }
    }

    /// The messages that tell a worker every server now down.
    pub(super) fn down_lines(&self) -> Vec<String> {
        (self.groups.iter())
            .flat_map(|g| {
                (g.servers.iter().zip(&g.spec.servers))
                    .filter(|(s, _)| !s.up)
                    .map(|(_, spec)| health_line(&g.spec.name, &spec.address.to_string(), false))
            })
            .collect()
    }

    /// Every group of `config` for `/status`, each server's state by its checks, and how
    /// many workers have it `ejected` (a (group, address) pair per worker).
    pub(super) fn status(
        &self,
        config: &Config,
        ejected: &[&(String, String)],
    ) -> Vec<UpstreamStatus> {
        (config.upstreams.iter())
            .map(|spec| {
                let checked = self.groups.iter().find(|g| g.spec.name == spec.name);
                let servers = (spec.servers.iter().enumerate())
                    .map(|(k, s)| {
                        let state = checked.and_then(|g| g.servers.get(k));
                        UpstreamServerStatus {
                            name: s.name.clone(),
                            address: s.address.to_string(),
                            weight: s.weight,
                            backup: s.backup,
                            node: s.node,
                            state: match state {
                                None => "not checked",
                                Some(s) if !s.checked => "unchecked",
                                Some(s) if s.up => "up",
                                Some(_) => "down",
                            }
                            .into(),
                            last_failure: state.and_then(|s| s.last.clone()),
                            ejected_by: (ejected.iter())
                                .filter(|(g, a)| *g == spec.name && *a == s.address.to_string())
                                .count(),
                        }
                    })
                    .collect();
                UpstreamStatus {
                    name: spec.name.clone(),
                    balance: spec.balance.name(),
                    servers,
                }
            })
            .collect()
    }
}

/// The `upstream-health` message for server `address` of group `group`.
pub(super) fn health_line(group: &str, address: &str, up: bool) -> String {
    let state = if up { "up" } else { "down" };
    Message::UpstreamHealth(format!("{group} {address} {state}")).line()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_server_falls_after_fall_failures_and_rises_after_rise_passes() {
        let check = ActiveCheck {
            path: "/".into(),
            host: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            status: (200, 399),
            body: None,
            rise: 2,
            fall: 3,
            grpc_service: None,
        };
        let fail = Err("answered 500".to_string());
        let mut s = ServerState::new();
        assert!(!s.record(&Ok(()), &check), "up from the start");
        assert!(!s.record(&fail, &check));
        assert!(!s.record(&fail, &check));
        assert!(s.record(&fail, &check), "down at the third failure");
        assert!(!s.record(&Ok(()), &check));
        assert!(s.record(&Ok(()), &check), "up at the second pass");
        // A server not yet checked needs `fall` failures too (a front started with its
        // servers must not answer 503 while they start).
        let mut fresh = ServerState::new();
        assert!(!fresh.record(&fail, &check), "up after its first failure");
        assert!(!fresh.record(&fail, &check));
        assert!(fresh.up);
        assert!(fresh.record(&fail, &check), "down at the third");
        assert!(!fresh.up);
    }
}
