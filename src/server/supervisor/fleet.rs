//! The fleet in the master (`[server.cluster]`), its data: the copy of the shared parts kept
//! in the cluster's folder (one file each, read as included files are), what this member
//! knows of etcd, and the writes waiting for it. The supervisor acts on it in `fleet_copy`
//! (the copy brought up to etcd's revision and applied, the API's writes sent to etcd).
//!
//! Owns: [`Fleet`] — the revision applied (kept in the folder's `.revision`, so that neither
//! a restart nor a partition ever applies an older copy), each part's revision as last seen,
//! whether etcd is reachable and since when, the members, and the writes waiting for etcd.
//! Must not touch: etcd itself (the task's), what a part means (the config's), or how a
//! configuration is switched to (`super::reload`).

use super::event::Event;
use crate::config::cluster::{ClusterSpec, KINDS};
use crate::config::Config;
use crate::server::acme_fleet::FleetLink;
use crate::server::admin::{AdminReply, ConfigCall};
use crate::server::cluster::{self, Change, Member};
use crate::server::status::FleetState;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use tokio::sync::oneshot;

/// The file in the copy's folder that holds the revision applied.
pub(super) const REVISION_FILE: &str = ".revision";

/// A write of a fleet's shared parts, checked, waiting to go to etcd.
pub(super) struct Deferred {
    pub main: PathBuf,
    pub main_text: String,
    pub changes: Vec<(PathBuf, Option<String>)>,
    pub version: String,
    pub call: ConfigCall,
    pub said: String,
    pub created: bool,
}

/// A configuration API write of shared parts, waiting for etcd's answer.
pub(super) struct Pending {
    pub write: Deferred,
    pub reply: oneshot::Sender<AdminReply>,
}

/// The fleet as this member sees it.
#[derive(Default)]
pub(super) struct Fleet {
    pub(super) spec: Option<ClusterSpec>,
    /// The client and this member's lease, while connected.
    pub(super) client: Option<(etcd_client::Client, i64)>,
    /// The revision of the copy applied.
    pub(super) applied: i64,
    /// Each part's revision, as etcd last said it (the compare of a write).
    pub(super) seen: HashMap<(usize, String), i64>,
    /// Since when, and why, etcd cannot be reached (`None`: reachable, or not tried yet).
    pub(super) unreachable: Option<(SystemTime, String)>,
    pub(super) members: Vec<Member>,
    pub(super) task: Option<tokio::task::JoinHandle<()>>,
    pub(super) next_write: u64,
    pub(super) pending: HashMap<u64, Pending>,
    /// The fleet's own keys (`secret_file`): with them, the session ticket secrets are the
    /// fleet's, through etcd (see `fleet_tickets`).
    pub(super) keys: Option<std::sync::Arc<crate::tls::fleet_keys::FleetKeys>>,
    /// The revision that last changed the fleet's ticket secrets (0: none yet), and whether
    /// this member's new ones are on their way to etcd.
    pub(super) tickets_seen: i64,
    pub(super) publishing: bool,
    /// What the certificates' orders use of the fleet while etcd is reached (see
    /// `acme::fleet`); `None` while it is not.
    pub(super) link: tokio::sync::watch::Sender<Option<FleetLink>>,
    /// The names' order locks held, and by whom, as last listed.
    pub(super) locks: Vec<(String, String)>,
}

pub(super) use crate::config::cluster::file_of;

/// The part a path in `folder` is the copy of.
pub(super) fn part_at(folder: &Path, path: &Path) -> Option<(usize, String)> {
    let rest = path.strip_prefix(folder).ok()?;
    let mut parts = rest.iter();
    let kind = parts.next()?.to_str()?;
    let file = parts.next()?.to_str()?;
    let kind = KINDS.iter().position(|(k, _)| *k == kind)?;
    let name = file.strip_suffix(".toml")?;
    (parts.next().is_none() && crate::config::cluster::is_part_name(name))
        .then(|| (kind, name.to_string()))
}

impl Fleet {
    /// Starts following the fleet `config` names, if it names one.
    pub(super) fn start(
        &mut self,
        config: &Config,
        events: &tokio::sync::mpsc::UnboundedSender<Event>,
    ) {
        let Some(spec) = config.server.cluster.clone() else {
            return;
        };
        self.keys = (spec.secret_file.as_deref()).and_then(|f| {
            crate::tls::fleet_keys::FleetKeys::read(f)
                .map(std::sync::Arc::new)
                .map_err(|e| {
                    crate::server::log(
                        "master",
                        format!("cluster: {e}; session ticket keys stay this member's own, and certificates are not shared"),
                    )
                })
                .ok()
        });
        self.applied = std::fs::read_to_string(spec.folder.join(REVISION_FILE))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let events = events.clone();
        let tell = move |news| events.send(Event::Cluster(news)).is_ok();
        self.task = Some(tokio::spawn(cluster::follow(spec.clone(), tell)));
        self.spec = Some(spec);
    }

    /// What the certificates' orders follow of the fleet: `None` without one.
    pub(super) fn link(&self) -> Option<tokio::sync::watch::Receiver<Option<FleetLink>>> {
        self.spec.as_ref().map(|_| self.link.subscribe())
    }

    /// Connected to etcd with `client` under `lease`, or (`None`) cut off: what orders use.
    pub(super) fn set_link(&mut self, connected: Option<(etcd_client::Client, i64)>) {
        let link = match (connected, &self.spec) {
            (Some((client, lease)), Some(spec)) => Some(FleetLink {
                client,
                lease,
                spec: std::sync::Arc::new(spec.clone()),
                keys: self.keys.clone(),
            }),
            _ => None,
        };
        self.link.send_replace(link);
    }

    /// Stops following the fleet and leaves its members' list.
    pub(super) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some((mut client, lease)) = self.client.take() {
            let leaving = client.lease_revoke(lease);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), leaving).await;
        }
    }

    /// What `/status` says of it (`None`: no fleet).
    pub(super) fn state(&self) -> Option<FleetState> {
        let spec = self.spec.as_ref()?;
        let unix = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        Some(FleetState {
            prefix: spec.prefix.clone(),
            node: spec.node.clone(),
            reachable: self.client.is_some() && self.unreachable.is_none(),
            unreachable_since: self.unreachable.as_ref().map(|u| unix(u.0)),
            cause: self.unreachable.as_ref().map(|u| u.1.clone()),
            revision: self.applied,
            members: (self.members.iter())
                .map(|m| serde_json::json!({ "node": m.node, "said": m.said }))
                .collect(),
            locks: (self.locks.iter())
                .map(|(name, node)| serde_json::json!({ "name": name, "node": node }))
                .collect(),
        })
    }

    /// The shared parts among a write's `changes` (files in the copy's folder), as etcd is
    /// to take them; `None` without a fleet or when the write touches none.
    pub(super) fn shared(&self, changes: &[(PathBuf, Option<String>)]) -> Option<Vec<Change>> {
        let folder = &self.spec.as_ref()?.folder;
        let shared: Vec<Change> = (changes.iter())
            .filter_map(|(path, text)| {
                let (kind, name) = part_at(folder, path)?;
                let seen = self.seen.get(&(kind, name.clone())).copied().unwrap_or(0);
                Some(Change {
                    kind,
                    name,
                    text: text.clone(),
                    seen,
                })
            })
            .collect();
        (!shared.is_empty()).then_some(shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copys_file_is_its_parts_and_nothing_else() {
        let folder = Path::new("/etc/espalier/cluster");
        let path = file_of(folder, 2, "shop");
        assert_eq!(path, Path::new("/etc/espalier/cluster/sites/shop.toml"));
        assert_eq!(part_at(folder, &path), Some((2, "shop".into())));
        assert_eq!(
            part_at(folder, Path::new("/etc/espalier/cluster/pools/php.toml")),
            Some((0, "php".into()))
        );
        for not in [
            "/etc/espalier/cluster/.revision",
            "/etc/espalier/cluster/sites/.x.toml",
            "/etc/espalier/cluster/sites/a/b.toml",
            "/etc/espalier/other/sites/a.toml",
            "/etc/espalier/cluster/sites/a.txt",
        ] {
            assert_eq!(part_at(folder, Path::new(not)), None, "{not}");
        }
    }
}
