//! The directory's renewal information (ARI, RFC 9773) as the master's ordering task keeps
//! it: whether the directory offers it, each name's suggested time and when to ask again,
//! and a quiet spell after the directory could not be reached.
//!
//! Owns: [`Ari`]. Must not touch: the queue of names (the parent `acme`) or the request
//! itself (`server::acme::renewal_time`).

use crate::server::supervisor::acme_schedule::read_pair;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long the directory's renewal information is trusted at least, and at most, whatever
/// its `Retry-After` says (RFC 9773 §4.3.2 asks clients to bound it so).
const ARI_AT_LEAST: Duration = Duration::from_secs(3600);
const ARI_AT_MOST: Duration = Duration::from_secs(24 * 3600);

/// The longest a look waits for the directory (its account, then its renewal information):
/// an unreachable directory must not stall the queue.
const ARI_WAIT: Duration = Duration::from_secs(10);

/// What the task knows of the directory's renewal information (ARI, RFC 9773).
#[derive(Default)]
pub(super) struct Ari {
    /// `Some(false)`: the directory has none (asked once per configuration).
    offered: Option<bool>,
    /// By name: when to ask again, and the time picked in its window.
    known: HashMap<String, (SystemTime, SystemTime)>,
    /// The directory could not be reached: not asked again before this.
    quiet_until: Option<SystemTime>,
}

impl Ari {
    /// When the directory suggests renewing `name`'s pair, if it offers renewal information
    /// and answered (else `None`: our own schedule stands). Asked at a name's look, at most
    /// as often as its last answer's `Retry-After` allows.
    /// `account` is the directory's account, asked for only when the directory is asked;
    /// `store` holds the name's pair.
    pub(super) async fn due(
        &mut self,
        account: impl std::future::Future<Output = Result<instant_acme::Account, String>>,
        store: &Path,
        name: &str,
    ) -> Option<SystemTime> {
        let now = SystemTime::now();
        if self.offered == Some(false) || self.quiet_until.is_some_and(|t| t > now) {
            return None;
        }
        if let Some((again, at)) = self.known.get(name) {
            if *again > now {
                return Some(*at);
            }
        }
        let account = match tokio::time::timeout(ARI_WAIT, account).await {
            Ok(Ok(account)) => account,
            _ => {
                self.quiet_until = Some(now + ARI_AT_LEAST);
                return None;
            }
        };
        let (store, owned) = (store.to_path_buf(), name.to_string());
        let chain = tokio::task::spawn_blocking(move || read_pair(&store, &owned))
            .await
            .ok()
            .flatten()?;
        let asked = crate::server::acme::renewal_time(&account, &chain);
        match tokio::time::timeout(ARI_WAIT, asked).await {
            Ok(Ok(Some((at, again)))) => {
                self.offered = Some(true);
                let again = now + again.clamp(ARI_AT_LEAST, ARI_AT_MOST);
                self.known.insert(name.to_string(), (again, at));
                Some(at)
            }
            Ok(Ok(None)) => {
                self.offered = Some(false);
                None
            }
            // Unanswered: our own schedule now, asked again at the next look.
            _ => None,
        }
    }
}
