//! DNS-01's publisher as the master's ACME part keeps it (`[server.acme.dns]`): started once
//! per setting, kept across a reload that leaves the setting as it was (its server keeps
//! its sockets), and replaced — waiting for the old server's address — when it changes.
//!
//! Owns: that publisher's life. Must not touch: publishing itself (`crate::server::acme_dns`)
//! or orders.

use crate::server::acme_dns::TxtPublisher;
use crate::server::log;
use std::sync::Arc;
use std::time::Duration;

/// DNS-01's publisher, once started (by the first of the starting task and an order to ask),
/// or why it could not start.
pub(super) type DnsCell = Arc<tokio::sync::OnceCell<DnsStarted>>;

/// DNS-01's publisher, started, or why it could not be.
pub(super) type DnsStarted = Result<Arc<TxtPublisher>, String>;

/// The publisher of the running configuration, and the settings it was made from.
#[derive(Default)]
pub(super) struct DnsPart {
    kept: Option<(crate::config::DnsChallenge, DnsCell)>,
}

impl DnsPart {
    /// DNS-01's publisher for `settings`: the one running when they are unchanged, else a new
    /// one, started in a task of its own — the last one's server lets its address go only
    /// once its tasks end, after this.
    pub(super) fn publisher(
        &mut self,
        settings: Option<&crate::config::DnsChallenge>,
    ) -> Option<DnsCell> {
        let Some(settings) = settings else {
            self.kept = None;
            return None;
        };
        if let Some((kept, cell)) = &self.kept {
            if kept == settings {
                return Some(cell.clone());
            }
        }
        let cell = DnsCell::default();
        let (starting, settings) = (cell.clone(), settings.clone());
        self.kept = Some((settings.clone(), cell.clone()));
        tokio::spawn(async move {
            starting.get_or_init(|| start_dns(&settings)).await;
        });
        Some(cell)
    }
}

impl DnsPart {
    /// The running configuration's publisher (once started), if it has one.
    pub(super) fn running(
        &self,
    ) -> Option<impl std::future::Future<Output = DnsStarted> + 'static> {
        let (settings, cell) = self.kept.clone()?;
        Some(async move { cell.get_or_init(|| start_dns(&settings)).await.clone() })
    }
}

/// How long a new DNS-01 server waits for its address, held by the one it replaces until
/// that one's tasks end.
const DNS_ADDRESS_WAIT: Duration = Duration::from_secs(3);

/// DNS-01's publisher for `settings`, started (said in the log either way).
pub(super) async fn start_dns(
    settings: &crate::config::DnsChallenge,
) -> Result<Arc<TxtPublisher>, String> {
    let until = tokio::time::Instant::now() + DNS_ADDRESS_WAIT;
    let started = loop {
        match TxtPublisher::start(settings) {
            Err(_) if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            started => break started.map(Arc::new),
        }
    };
    let said = match (&started, &settings.publish) {
        (Ok(_), crate::config::TxtPublishing::Own { listen, zone }) => {
            format!("acme: answering DNS-01 for {zone} on {listen} (UDP)")
        }
        (Ok(_), crate::config::TxtPublishing::Update { server, key }) => format!(
            "acme: publishing DNS-01 by RFC 2136 updates to {server}, signed with key `{}`",
            key.name
        ),
        (Err(e), _) => format!("acme: DNS-01 cannot be answered: {e}"),
    };
    log("master", said);
    started
}
