//! What a worker tells the master at each ping: its engine threads' figures and heartbeats
//! (a thread that stopped turning makes the answer `stuck`), its front queue, and the
//! figures of its sites with `metrics` — each thread's own counters, added up here.
//!
//! Owns: [`ThreadHealth`], the pong and the meters message. Must not touch: the threads'
//! event loops (`worker` runs them and calls [`ThreadHealth::beat`]).

use super::control::Message;
use super::spec::WorkerSpec;
use crate::http::meters::{MeterFigures, SiteMeter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often an engine thread publishes its figures and heartbeat.
pub(super) const HEARTBEAT: Duration = Duration::from_millis(200);

/// An engine thread whose heartbeat is older than this is not turning (blocked in a syscall,
/// spinning, or its event loop gone): the worker stops answering pings for it.
const STUCK_AFTER: Duration = Duration::from_secs(2);

/// What an engine thread publishes for the master's pings. Written by its thread a few times
/// a second, read by the worker's main thread at a ping: off the request path.
pub struct ThreadHealth {
    epoch: std::time::Instant,
    served: AtomicU64,
    /// Requests forwarded to an app process off the thread's node.
    remote: AtomicU64,
    /// Connections open now; accepted so far, and of those received on the thread's CPU.
    connections: AtomicU64,
    accepted: AtomicU64,
    steered: AtomicU64,
    /// Milliseconds since `epoch` at the thread's last turn of its event loop.
    heartbeat_ms: AtomicU64,
    pub panics: Arc<AtomicU64>,
    /// Its figures of each site with `metrics` (by site index), written by the thread alone.
    pub(super) meters: Vec<Option<Arc<SiteMeter>>>,
}

impl ThreadHealth {
    pub(super) fn new(
        epoch: std::time::Instant,
        sites: &[std::sync::Arc<crate::config::SiteSpec>],
    ) -> Self {
        ThreadHealth {
            epoch,
            served: AtomicU64::new(0),
            remote: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            steered: AtomicU64::new(0),
            meters: sites
                .iter()
                .map(|s| s.metrics.then(|| Arc::new(SiteMeter::default())))
                .collect(),
            heartbeat_ms: AtomicU64::new(0),
            panics: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The thread's figures now: requests served and forwarded off its node, and its
    /// connections (open, accepted, accepted on its own CPU).
    pub(super) fn beat(
        &self,
        served: u64,
        remote: u64,
        (open, accepted, steered): (u64, u64, u64),
    ) {
        self.served.store(served, Ordering::Relaxed);
        self.remote.store(remote, Ordering::Relaxed);
        self.connections.store(open, Ordering::Relaxed);
        self.accepted.store(accepted, Ordering::Relaxed);
        self.steered.store(steered, Ordering::Relaxed);
        let now = self.epoch.elapsed().as_millis() as u64;
        self.heartbeat_ms.store(now, Ordering::Relaxed);
    }

    fn stuck(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        now.saturating_sub(self.heartbeat_ms.load(Ordering::Relaxed))
            > STUCK_AFTER.as_millis() as u64
    }
}

/// The answer to a ping: `pong <requests> <panics>` when every engine thread is turning, else
/// `stuck <cpu>,…` — which the master counts as a missed ping, so `ping_response_time` replaces
/// a worker whose threads no longer serve even though its main thread still answers.
pub(super) fn pong(
    spec: &WorkerSpec,
    health: &[Arc<ThreadHealth>],
    queue: crate::proxy::queue::QueueFigures,
    ticket_keys: u64,
) -> String {
    let stuck: Vec<String> = spec
        .threads
        .iter()
        .zip(health)
        .filter(|(_, h)| h.stuck())
        .map(|(t, _)| format!("cpu{}", t.cpu))
        .collect();
    if !stuck.is_empty() {
        return Message::Stuck(stuck.join(",")).line();
    }
    let served: u64 = health
        .iter()
        .map(|h| h.served.load(Ordering::Relaxed))
        .sum();
    let panics: u64 = health
        .iter()
        .map(|h| h.panics.load(Ordering::Relaxed))
        .sum();
    let sum = |field: fn(&ThreadHealth) -> &AtomicU64| -> u64 {
        health
            .iter()
            .map(|h| field(h).load(Ordering::Relaxed))
            .sum()
    };
    Message::Pong(super::control::Figures {
        requests: served,
        panics,
        remote: sum(|h| &h.remote),
        connections: sum(|h| &h.connections),
        accepted: sum(|h| &h.accepted),
        steered: sum(|h| &h.steered),
        queue,
        ticket_keys,
        cache: crate::proxy::cache_store::process_counts(),
    })
    .line()
}

/// Each response cache's figures (`None` when the worker keeps none).
pub(super) fn cache_figures() -> Option<Message> {
    let stores = crate::proxy::cache_store::store_counts();
    if stores.is_empty() {
        return None;
    }
    serde_json::to_string(&stores).ok().map(Message::Caches)
}

/// The figures of the sites with `metrics` this worker serves, its threads' added up
/// (`None` when it serves none).
pub(super) fn site_meters(spec: &WorkerSpec, health: &[Arc<ThreadHealth>]) -> Option<Message> {
    let mut sites = Vec::new();
    for (k, site) in spec.sites.iter().enumerate() {
        if !site.metrics || !site.served_by(&spec.pool) {
            continue;
        }
        let mut sum = MeterFigures::default();
        for h in health {
            if let Some(Some(m)) = h.meters.get(k) {
                sum.add(&m.figures());
            }
        }
        sites.push((site.name.clone(), sum));
    }
    if sites.is_empty() {
        return None;
    }
    serde_json::to_string(&sites).ok().map(Message::Meters)
}
