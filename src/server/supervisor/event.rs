//! What the supervisor's loop reacts to besides signals and its tick: a worker's control
//! message, an admin command, an app probe's result.
//!
//! Owns: [`Event`]. Must not touch: how each is handled (the supervisor).

use crate::server::admin::{AdminCommand, AdminReply};
use crate::server::control::Message;
use tokio::sync::oneshot;

/// A name's new pair (`[server.acme]`): its end, and the fleet member that ordered it when
/// another did (it came through etcd; see `acme::fleet`).
pub(crate) struct Issued {
    pub until: std::time::SystemTime,
    pub by: Option<String>,
}

/// What the supervisor's loop reacts to besides signals and its tick. Worker processes are
/// named by generation (unique for the master's life), not by slot: a reload adds and removes
/// slots.
pub(in crate::server) enum Event {
    /// A control message from a worker.
    Worker {
        generation: u64,
        message: Message,
    },
    Admin(AdminCommand, oneshot::Sender<AdminReply>),
    /// A readiness or health probe of an app process ended.
    Probed {
        generation: u64,
        healthy: bool,
        /// Why a starting app is not ready, for the log: another process listens on its
        /// port, or the app listens on another.
        unready: Option<String>,
    },
    /// A connection or hand-off waits on a socket of the sleeping on-demand worker `slot`
    /// (`pool/index`).
    Demand {
        slot: String,
    },
    /// An upstream server's active check ended (see `upstream_checks`).
    UpstreamChecked {
        epoch: u64,
        group: usize,
        server: usize,
        result: Result<(), String>,
    },
    /// An upstream group's host names resolved again (its `resolve` interval).
    Resolved {
        group: String,
        servers: Result<Vec<crate::config::upstream::ServerSpec>, String>,
    },
    /// An ACME order for a host name ended: the new certificate's end, or why it failed
    /// (see `acme`).
    AcmeOrdered {
        name: String,
        outcome: Result<Issued, String>,
    },
    /// A host name's pair in the store was looked at: its renewal time and end, when it has
    /// one (see `acme`).
    AcmeLooked {
        name: String,
        pair: Option<(std::time::SystemTime, std::time::SystemTime)>,
    },
    /// A name asked for on demand was judged (see `on_demand`).
    OnDemandJudged {
        name: String,
        judged: super::on_demand::Judged,
    },
    /// The new master of an upgrade (`pid`) serves, or why not (see `upgrade`).
    Upgraded {
        pid: u32,
        outcome: Result<(), String>,
    },
    /// A connection for pool `pool`, handed to the master: none of the pool's hand-off
    /// sockets was there (it sleeps), or it was queued on one as the pool went to sleep.
    Handed {
        pool: String,
        received: Box<crate::handoff::Received>,
    },
    /// What the fleet's etcd said (see `crate::server::cluster`).
    Cluster(crate::server::cluster::News),
}

impl From<(AdminCommand, oneshot::Sender<AdminReply>)> for Event {
    fn from((cmd, reply): (AdminCommand, oneshot::Sender<AdminReply>)) -> Self {
        Event::Admin(cmd, reply)
    }
}
