//! The session ticket secrets of a fleet (`[server.cluster]` with `secret_file`): one set for
//! every member, so that a client resumes its TLS session on whichever machine the balancer
//! sends it to. The secrets live in etcd sealed with the fleet's key (`tls::fleet_keys`);
//! the member that finds them due makes the next ones and puts them there in a transaction
//! that holds only if nobody did first, and every member — itself included — takes them from
//! its watch and sends its pools' keys to their workers.
//!
//! Owns: when this member publishes and what it does with the fleet's secrets. Must not
//! touch: the keys' derivation per pool (`tls::tickets`), etcd (`crate::server::cluster`).

use super::event::Event;
use super::Supervisor;
use crate::server::cluster::{self, News, Written};
use crate::server::log;
use crate::tls::fleet_keys;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Supervisor {
    /// Whether the fleet makes this member's ticket secrets (a fleet key, and etcd reached).
    pub(super) fn fleet_makes_ticket_keys(&self) -> bool {
        self.fleet.keys.is_some() && self.fleet.client.is_some() && self.fleet.unreachable.is_none()
    }

    /// etcd's ticket secrets (`None`: none yet — this member's become the fleet's).
    pub(super) fn on_fleet_tickets(&mut self, sealed: Option<String>, revision: i64) {
        let Some(keys) = &self.fleet.keys else {
            return;
        };
        self.fleet.tickets_seen = revision;
        let Some(sealed) = sealed else {
            self.publish_ticket_secrets(self.ticket_keys.secrets());
            return;
        };
        match fleet_keys::open(keys, &sealed) {
            Ok((secrets, rotated)) => {
                let age = Duration::from_secs(unix_now().saturating_sub(rotated));
                if self.ticket_keys.take(secrets, age) {
                    let told = self.send_ticket_keys();
                    log("master", format!("cluster: session ticket keys taken from the fleet (revision {revision}), sent to {told} pool(s)"));
                }
            }
            Err(e) => log(
                "master",
                format!("cluster: {e}; this member's tickets stay its own"),
            ),
        }
    }

    /// Puts `secrets` (newest first) into etcd as the fleet's, unless another member did
    /// since this one last saw them.
    pub(super) fn publish_ticket_secrets(&mut self, secrets: Vec<crate::tls::tickets::Secret>) {
        let (Some(spec), Some((client, _)), Some(keys)) = (
            self.fleet.spec.clone(),
            self.fleet.client.clone(),
            self.fleet.keys.as_ref(),
        ) else {
            return;
        };
        if self.fleet.publishing {
            return;
        }
        self.fleet.publishing = true;
        let sealed = fleet_keys::seal(keys, &secrets, unix_now());
        let (seen, events, mut client) = (self.fleet.tickets_seen, self.events.clone(), client);
        tokio::spawn(async move {
            let outcome = cluster::put_if(&mut client, spec.tickets_key(), sealed, seen).await;
            let _ = events.send(Event::Cluster(News::TicketsPublished(outcome)));
        });
    }

    /// This member's secrets went to etcd (its watch brings them back to it, as to every
    /// member), or another member's came first, or etcd failed: then they rotate here alone.
    pub(super) fn on_tickets_published(&mut self, outcome: Written) {
        self.fleet.publishing = false;
        if let Written::Failed(cause) = outcome {
            log("master", format!("cluster: the session ticket keys could not be shared ({cause}): rotated on this member alone"));
            self.ticket_keys.rotate(std::time::Instant::now());
            self.send_ticket_keys();
        }
    }
}
