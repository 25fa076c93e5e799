//! The master's start: its state made from the configuration, its listeners said in the
//! log, and every worker started and waited for (an on-demand one put to sleep instead) — or
//! `serve` fails with the reason, every process it started stopped.
//!
//! Owns: what happens between the listeners opened and the supervisor's first tick. Must not
//! touch: how the running loop reacts to events (`super`'s `on_event`), beyond handing it
//! those that may come while workers start.

use super::{
    cert_store, first_of, samples, AdminReply, Config, Event, ListenerGroup, Message, PoolRt, Slot,
    StartMode, Supervisor, WorkerSpec,
};
use crate::os;
use crate::server::log;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A pool's state at the master's start, with the faults its tests inject from the
/// master's environment (`ESPALIER_ALLOCATE_AT_START=POOL:MIB`, `ESPALIER_FAIL_AT_START=POOL:N`).
fn pool_at_start(p: &std::sync::Arc<crate::config::PoolSpec>) -> Box<PoolRt> {
    let injected = |var: &str| -> Option<u64> {
        std::env::var(var)
            .ok()?
            .split_once(':')
            .filter(|(pool, _)| *pool == p.name)?
            .1
            .parse()
            .ok()
    };
    Box::new(PoolRt {
        allocate_mib: injected("ESPALIER_ALLOCATE_AT_START"),
        fail_starts: injected("ESPALIER_FAIL_AT_START").unwrap_or(0) as u32,
        ..PoolRt::new(p.clone())
    })
}

impl Supervisor {
    /// The master's state for `config`, its upstream checks and ACME orders under way.
    pub(super) fn new(
        (config, plan): (Config, crate::placement::Plan),
        topology: &crate::topology::Topology,
        groups: Vec<ListenerGroup>,
        handoffs: crate::server::handoffs::Handoffs,
        specs: Vec<WorkerSpec>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Supervisor {
        let pools: Vec<Box<PoolRt>> = config.pools.iter().map(pool_at_start).collect();
        let pool_index: std::collections::HashMap<&str, usize> = config
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect();
        let slots: Vec<Slot> = specs
            .into_iter()
            .flat_map(|spec| {
                let pool = pool_index[spec.pool.as_str()];
                Slot::for_spec(spec, pool, config.pools.get(pool).map(|p| &**p))
            })
            .collect();
        let cert_store = cert_store::CertStore::new(&config);
        let mut sv = Supervisor {
            // The one copy the master keeps (a hoster's config is thousands of sites).
            config,
            plan,
            topology: topology.clone(),
            retiring: Vec::new(),
            groups,
            handoffs,
            nodes: topology
                .nodes
                .iter()
                .filter(|n| !n.cpus.is_empty())
                .map(|n| (n.id, n.cpus.clone()))
                .collect(),
            online: topology.online_cpus(),
            load_sample: (
                Instant::now(),
                crate::server::soft::parse_proc_stat(&os::process::proc_stat()),
            ),
            config_api: Default::default(),
            upgrade: Default::default(),
            fleet: Default::default(),
            cgroups: super::procs::Cgroups {
                defaults_failed_said: false,
                hierarchy: os::cgroup::detect(std::path::Path::new("/sys/fs/cgroup")),
                cpusets: Vec::new(),
            },
            slots,
            pools,
            events,
            next_generation: 1,
            upstreams_unsent: Vec::new(),
            slot_hints: Default::default(),
            live: samples::LiveSamples::new(),
            cert_store,
            ticket_keys: Default::default(),
            session_tables: Default::default(),
            freezing: super::procs::Freezing {
                // ESPALIER_FREEZER=v1 picks v1's freezer where both are mounted (for its tests).
                freezer: os::freezer::detect(
                    std::path::Path::new("/sys/fs/cgroup"),
                    std::env::var("ESPALIER_FREEZER").is_ok_and(|v| v == "v1"),
                ),
                groups: Vec::new(),
                warned: false,
            },
            port_retries: 0,
            memory: os::cgroup::memory_limit(),
            waking: Default::default(),
            handed_to_master: None,
            last_second_of_day: os::process::local_second_of_day(),
            last_tick: Instant::now(),
            trim_at: None,
            upstream_checks: Default::default(),
            acme: Default::default(),
            on_demand: Default::default(),
        };
        sv.upstream_checks.start(&sv.config, &sv.events);
        sv.fleet.start(&sv.config, &sv.events);
        sv.acme.start(&sv.config, &sv.events, sv.fleet.link());
        sv
    }

    /// One line per address: its URL, whose it is, its sockets and hosts.
    pub(super) fn log_listening(&self) {
        for g in &self.groups {
            let hosts: Vec<String> = g
                .routes
                .hosts
                .iter()
                .map(|(h, _)| h.clone().unwrap_or_else(|| "*".into()))
                .collect();
            let dispatcher = crate::server::dispatcher::POOL;
            let whose = if g.shared() {
                let pools: Vec<String> = g
                    .pools
                    .iter()
                    .filter(|p| *p != dispatcher)
                    .cloned()
                    .collect();
                format!(
                    "pools {} (shared by host and path; {dispatcher} routes)",
                    first_of(&pools)
                )
            } else {
                format!("pool {}", first_of(&g.pools))
            };
            log(
                "master",
                format!(
                    "listening on {} for {whose} ({} sockets{}, hosts {})",
                    g.routes.url(),
                    g.sockets.len(),
                    match g.udp.len() {
                        0 => String::new(),
                        n => format!(" and {n} UDP ones for HTTP/3"),
                    },
                    first_of(&hosts)
                ),
            );
        }
    }

    /// Starts every worker (an on-demand one sleeps until its first connection), then waits
    /// until each is ready — `Err` with the reason, everything stopped, when one fails or
    /// is late (`startup_time_limit`). Events that may come meanwhile (a wake, a probe, a
    /// check) are handled as the running loop does; the admin endpoint is told `starting`.
    pub(super) async fn start_all(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
    ) -> Result<(), String> {
        for i in 0..self.slots.len() {
            if self.pools[self.slots[i].pool].spec.start == StartMode::OnDemand {
                self.sleep_slot(i);
                continue;
            }
            if let Err(e) = self.start(i, false) {
                self.stop_everything(Duration::from_secs(1)).await;
                return Err(e);
            }
        }
        if self.slots.iter().any(|s| s.asleep) {
            self.steer_around_away();
        }
        let startup = self
            .config
            .pools
            .iter()
            .map(|p| p.startup_time_limit)
            .max()
            .unwrap_or(Duration::from_secs(90));
        let deadline = tokio::time::Instant::now() + startup;
        while self
            .slots
            .iter()
            .any(|s| s.current.as_ref().is_some_and(|p| !p.life.has_been_ready()))
        {
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    // Apps become ready by probes and settle time, and may die before that.
                    if let Err(e) = self.startup_tick() {
                        self.stop_everything(Duration::from_secs(2)).await;
                        return Err(e);
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(deadline) => None,
            };
            match ev {
                Some(Event::Worker {
                    generation,
                    message: Message::Error(why),
                }) => {
                    let name = self
                        .slot_of(generation)
                        .map_or("?".to_string(), |i| self.slots[i].spec.name());
                    self.stop_everything(Duration::from_secs(2)).await;
                    return Err(format!("worker {name} could not start: {why}"));
                }
                // Readiness, and what a ready worker may ask while another still starts:
                // a handshake held for its certificate, a request waiting for its app.
                Some(Event::Worker {
                    generation,
                    message:
                        message @ (Message::Ready { .. }
                        | Message::WantCertificate(_)
                        | Message::WantApp),
                }) => self.on_message(generation, message),
                Some(Event::Worker { .. }) => {}
                Some(Event::Admin(_, reply)) => {
                    let _ = reply.send(AdminReply::Done {
                        status: 503,
                        message: "starting".into(),
                    });
                }
                Some(ev) => self.on_event(ev),
                None => {
                    let late: Vec<String> = self
                        .slots
                        .iter()
                        .filter(|s| s.current.as_ref().is_some_and(|p| !p.life.has_been_ready()))
                        .map(|s| s.spec.name())
                        .collect();
                    self.stop_everything(Duration::from_secs(2)).await;
                    return Err(format!(
                        "worker(s) {} did not report ready within {}s (startup_time_limit)",
                        late.join(", "),
                        startup.as_secs()
                    ));
                }
            }
        }
        Ok(())
    }
}
