//! What the master tells a worker process: its placement, its inherited sockets, its sites.
//!
//! Owns: the hand-over format: JSON in a sealed in-memory file the worker inherits, its
//! descriptor named by the `ESPALIER_WORKER_SPEC_FD` environment variable, read once at
//! start. Not the environment itself: a spec grows with the sites a worker serves, and the
//! kernel takes at most 128 KiB in one variable (400 sites on one port once stopped `serve`
//! with `Argument list too long`). Must not touch: how the values were decided.

use crate::config::{Limits, MemoryPolicy, SiteSpec};
use crate::routing::GroupRoutes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Names the descriptor of the worker's spec.
pub const ENV_VAR: &str = crate::os::alloc::WORKER_VAR;

/// One worker thread: the CPU it serves and its listener socket in each group.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThreadSpec {
    pub cpu: u32,
    /// (inherited fd, group index).
    pub listeners: Vec<(i32, usize)>,
    /// On a shared address: the inherited socket connections are handed to this thread on.
    #[serde(default)]
    pub handoff_fd: Option<i32>,
    /// Its CPU's node (where it ranks other pools' threads from, for hand-offs).
    #[serde(default)]
    pub node: Option<u32>,
    /// With `[server] http3`: its UDP socket on each https address (see
    /// `server::quic_steering`).
    #[serde(default)]
    pub quic: Vec<QuicSocket>,
}

/// A thread's UDP socket on one https address: one of the master's sockets for that thread,
/// chosen as the worker starts among those no live process reads (see
/// `server::quic_steering`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuicSocket {
    /// The descriptor, and its index in the address's reuseport group (what the connection
    /// IDs name); -1 and 0 until the worker's start chooses them.
    pub fd: i32,
    pub index: u16,
    /// The thread's place among the address's socket owners.
    pub owner: usize,
    /// The group, as `listeners` indexes it (local to the worker), and its address.
    pub group: usize,
    pub addr: std::net::SocketAddr,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub pool: String,
    pub index: u32,
    pub node: Option<u32>,
    /// Hard affinity pins each thread to its CPU; soft lets threads use all the worker's CPUs.
    pub hard: bool,
    pub cpus: Vec<u32>,
    pub memory_policy: MemoryPolicy,
    pub memory_nodes: Vec<u32>,
    /// The worker's end of its control socket with the master.
    pub control_fd: i32,
    pub threads: Vec<ThreadSpec>,
    /// Per listener group: its address, and which of `sites` it answers for, by host. Shared
    /// by every worker's spec (one copy in the master, however many pools share a port).
    pub groups: Vec<Arc<GroupRoutes>>,
    /// Every site of the config (the groups name them by index), shared by every spec; a
    /// process is sent its own sites whole and the others' outline (see `spawn`).
    pub sites: Arc<Vec<Arc<SiteSpec>>>,
    /// On shared addresses: every hand-off socket, shared by every spec; each thread ranks
    /// its targets from it.
    #[serde(default)]
    pub handoff_peers: Arc<crate::handoff::Peers>,
    pub limits: Limits,
    pub worker_header: bool,
    /// `[server.tracing]`: its requests traced, their spans exported from each thread.
    #[serde(default)]
    pub tracing: Option<crate::config::tracing::TracingSpec>,
    /// `[server] ktls`: whether HTTPS/1.1 connections may be handed to the kernel's TLS.
    #[serde(default)]
    pub ktls: bool,
    /// `[server] http3`: each thread answers QUIC on its https addresses too (see
    /// `server::quic`).
    #[serde(default)]
    pub http3: bool,
    /// `[server] http3_early_data`: QUIC endpoints take 0-RTT (see `http::h3::early`).
    #[serde(default)]
    pub quic_early_data: bool,
    /// The master's tag in QUIC connection IDs (see `server::quic_steering::cid`).
    #[serde(default)]
    pub quic_tag: u16,
    /// Whether the threads read and write cleartext connections through io_uring (`[server]
    /// io`, resolved by the master: see `config::IoChoice::resolve`).
    #[serde(default)]
    pub uring: bool,
    /// Whether listeners accept on the ring too (not for a pool that may be suspended: see
    /// `spawn::worker_specs`).
    #[serde(default)]
    pub accept_on_ring: bool,
    pub shutdown_timeout: Duration,
    /// Control-group directories the worker joins first thing (CPU cap, cpuset), before any
    /// thread is pinned: joining a v1 cpuset later would reset the threads' affinity.
    #[serde(default)]
    pub cgroups: Vec<std::path::PathBuf>,
    /// The users whose processes may hand this worker connections (the master's and every
    /// pool's); see `handoff::Receiver`.
    #[serde(default)]
    pub handoff_senders: Vec<u32>,
    /// The master's hand-off key: what proves a message comes from espalier, not from app
    /// code of the same user (see `handoff`).
    pub handoff_key: crate::handoff::Key,
    /// Who the worker becomes once placed (its pool's `user` and `group`).
    #[serde(default)]
    pub identity: Option<crate::os::identity::Identity>,
    /// The certificate store's pairs for this pool's sites without `tls`, read and checked by
    /// the master when the worker starts (later changes arrive as `certificate` messages).
    #[serde(default)]
    pub store_certs: Vec<crate::certs::store::StoreCert>,
    /// The pool's session ticket keys now, newest first (`tls::tickets::encode`; later
    /// rotations arrive as `ticket-keys` messages).
    #[serde(default)]
    pub ticket_keys: String,
    /// With `quic_early_data`: the inherited descriptor of the pool's shared TLS session table
    /// (`tls::session_table`), so 0-RTT resumes on whichever worker a client comes back to.
    #[serde(default)]
    pub session_table_fd: Option<i32>,
    /// A front worker of a `transport = "proxy"` pool: its timeouts. Its app processes'
    /// endpoints arrive later, on the control socket (`upstreams`).
    #[serde(default)]
    pub proxy: Option<crate::proxy::ProxySettings>,
    /// The config's upstream groups, shared by every spec (a worker reaches those its
    /// sites' paths name).
    #[serde(default)]
    pub upstreams: Arc<Vec<crate::config::upstream::UpstreamSpec>>,
    /// With `[server.acme]`: where the master writes the HTTP-01 key authorizations the
    /// worker's store sites answer (see `server::acme::challenge_dir`).
    #[serde(default)]
    pub acme_challenges: Option<std::path::PathBuf>,
    /// With `[server.acme] on_demand`: how many names the worker holds handshakes for at
    /// once (`on_demand_in_flight`; see `tls::on_demand`).
    #[serde(default)]
    pub acme_on_demand: Option<u32>,
}

impl WorkerSpec {
    /// The memory policy as the kernel takes it.
    pub fn memory_mode(&self) -> crate::os::numa::MemPolicyMode {
        use crate::os::numa::MemPolicyMode;
        match self.memory_policy {
            MemoryPolicy::Bind => MemPolicyMode::Bind,
            MemoryPolicy::Preferred => MemPolicyMode::Preferred,
            MemoryPolicy::Default => MemPolicyMode::Default,
        }
    }

    /// The largest body any request here may carry — the server's `max_body_size` or a
    /// larger site's or path's, other pools' included (their requests' heads are read here
    /// before the hand-off) — which bounds the head parser; each request is then held to its
    /// own.
    pub fn body_ceiling(&self) -> u64 {
        (self.sites.iter())
            .flat_map(|s| (s.apps.iter().filter_map(|a| a.max_body_size)).chain(s.max_body_size))
            .fold(self.limits.max_body_size, u64::max)
    }

    /// `<pool>/<index>`, as logs and headers name a worker.
    pub fn name(&self) -> String {
        format!("{}/{}", self.pool, self.index)
    }

    /// Whether `name` is [`Self::name`], without making it: a wake looks through a hoster's
    /// 10,000 workers for its one, and each name made was an allocation.
    pub fn is_named(&self, name: &str) -> bool {
        names_worker(name, &self.pool, self.index)
    }
}

/// Whether `name` is `<pool>/<index>` as [`WorkerSpec::name`] writes it: the index in
/// digits, without a sign or a leading zero.
fn names_worker(name: &str, pool: &str, index: u32) -> bool {
    let written = name.strip_prefix(pool).and_then(|r| r.strip_prefix('/'));
    written.is_some_and(|i| {
        i.bytes().all(|b| b.is_ascii_digit())
            && (i == "0" || !i.starts_with('0'))
            && i.parse::<u32>() == Ok(index)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_worker_is_named_as_its_name_is_written_and_no_other_way() {
        let named = |name: &str| super::names_worker(name, "shop", 12);
        assert!(named("shop/12"));
        for other in [
            "shop/1", "shop/120", "shop/012", "shop/+12", "shop12", "shop/", "sho/12", "shop/12/",
            "shopx/12", "/12", "",
        ] {
            assert!(!named(other), "{other}");
        }
        assert!(super::names_worker("a/0", "a", 0));
        assert!(!super::names_worker("a/00", "a", 0));
        // A pool whose name runs on: `a/b` is not the worker of pool `a`.
        assert!(!super::names_worker("a/b/1", "a", 1));
    }
}
