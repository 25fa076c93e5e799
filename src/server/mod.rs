//! The running server: the master process that owns listeners and starts placed workers, and
//! the worker processes that answer requests.
//!
//! Owns: process structure and life cycle. Must not touch: placement decisions (it applies a
//! [`crate::placement::Plan`]), protocol details ([`crate::http`]) or syscalls beyond calling
//! [`crate::os`].
//!
//! The master's side: [`master`] (start-up order) → [`listeners`] (the sockets it keeps) and
//! [`spawn`] (worker specs, fork/exec with placement) → [`supervisor`] (the event loop that
//! keeps pools alive) with [`admin`] (the endpoint and its client) and [`status`] (what it
//! reports). The worker's side: [`worker`] (threads, pings), [`conn_task`] (one contained
//! connection) and [`quic`] (a thread's QUIC endpoints, with `[server] http3`). Between them: [`spec`] (what a worker is told at start) and [`control`] (the
//! line protocol after; [`worker_health`]: what a worker's ping answer carries;
//! [`hosts_update`]: a dispatcher's new hosts, as a change of those it holds). On disk:
//! [`runtime`] (the runtime folder, the admin token's folder, the access logs the master
//! creates). Pure decisions: [`lifecycle`], [`soft`], [`steering`] (TCP) and [`quic_steering`] (QUIC's datagrams; [`quic_sockets`]: which UDP socket a starting worker reads; [`quic_path`]: how large they may grow); [`steering_plan`] (what `serve --dry-run` prints of both). Applications: [`app`]
//! (starting a pool's app processes) and [`app_exec`] (the step that places and lowers one
//! before its `exec`). Shared addresses: [`dispatcher`] (the pool in front of them) and [`handoffs`]
//! (the master's hand-off sockets). Upstream groups: [`upstream_probe`] (one active check)
//! and [`upstream_nodes`] (a local server's NUMA node). Certificates: [`acme`] (one
//! ordered from an ACME directory into the store) and [`acme_dns`] (DNS-01's records);
//! [`causes`]: a client library's error said with the cause under it. A
//! fleet: [`cluster`] (the line to its etcd: the shared parts' copy, watched) and
//! [`acme_fleet`] (its share of ACME: a name's lock, the proofs, the pairs, the account).
//! What it shows: [`admin_page`] (the page), [`meters`] (sites' figures, Prometheus's text).

pub mod acme;
pub mod acme_dns;
pub mod acme_fleet;
pub mod admin;
pub mod admin_page;
pub mod app;
pub mod app_exec;
pub mod causes;
pub mod cluster;
pub mod conn_task;
pub mod control;
pub mod dispatcher;
pub mod handoffs;
pub mod hosts_update;
pub mod lifecycle;
pub mod listeners;
pub mod master;
pub mod meters;
pub mod quic;
pub mod quic_path;
mod quic_sockets;
pub mod quic_steering;
pub mod runtime;
pub mod soft;
pub mod spawn;
pub mod spec;
pub mod status;
pub mod steering;
pub mod steering_plan;
pub mod supervisor;
pub mod upstream_nodes;
mod upstream_probe;
pub mod worker;
mod worker_health;

pub use crate::os::log;

/// The I/O path `[server] io` and the environment's `ESPALIER_IO` choose on this kernel.
pub fn io_path(server: &crate::config::ServerSettings) -> Result<crate::config::IoPath, String> {
    let override_ = std::env::var("ESPALIER_IO").ok();
    server
        .io
        .resolve(override_.as_deref(), crate::os::uring::probe)
}
