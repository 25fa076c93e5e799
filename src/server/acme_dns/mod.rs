//! DNS-01's TXT records published for the master's orders (`[server.acme.dns]`): by
//! espalier's own authoritative DNS server for a zone delegated to it ([`ChallengeZone`]), or
//! by RFC 2136 dynamic updates, signed with TSIG, to the name's own DNS server ([`update`]),
//! both publishing a [`Published`] record ([`record`]); and the delegations looked up for
//! `check` and `doctor` ([`lookup`]).
//!
//! Why hickory: its server (`hickory-server`'s catalog, in-memory authority and UDP front)
//! answers a zone as an authoritative server must (SOA and NS at the apex, NXDOMAIN below,
//! case-insensitive names), its client signs updates with TSIG
//! and checks the answer's signature, and its resolver reads the system's configuration —
//! none of it written again here.
//!
//! The own zone holds, besides its SOA and NS, only the TXT records of orders under way:
//! each is added when an order's challenge is answered and taken away when the order ends,
//! whatever its outcome. Its TTLs are 0 (the SOA's negative one too), so that no resolver
//! between the CA and this server keeps an answer from before a record was added.
//!
//! Owns: that server's sockets and records, and the publishing of one record either way.
//! Must not touch: the ACME protocol (`super::acme`) or when to order.

pub mod lookup;
mod record;
pub mod update;

use record::fqdn;
pub use record::Published;

use crate::config::{DnsChallenge, TxtPublishing};
use hickory_proto::rr::rdata::{NS, SOA};
use hickory_proto::rr::{LowerName, RData, Record, RecordType, RrKey};
use hickory_server::authority::{Catalog, ZoneType};
use hickory_server::store::in_memory::InMemoryAuthority;
use hickory_server::ServerFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where DNS-01's records go, ready to take them.
pub enum TxtPublisher {
    /// espalier's own server for the delegated zone.
    Own(ChallengeZone),
    /// The name's own DNS server, by RFC 2136.
    Update(update::DnsUpdate),
}

impl TxtPublisher {
    /// The publisher `settings` describe: the own server bound and answering now (in the
    /// calling runtime), or the update server's key made ready.
    pub fn start(settings: &DnsChallenge) -> Result<TxtPublisher, String> {
        match &settings.publish {
            TxtPublishing::Own { listen, zone } => {
                ChallengeZone::start(*listen, zone).map(TxtPublisher::Own)
            }
            TxtPublishing::Update { server, key } => {
                update::DnsUpdate::new(*server, key).map(TxtPublisher::Update)
            }
        }
    }

    /// Publishes `value` as the TXT record that proves `identifier` (`*.shop.example` or
    /// `shop.example`), within `wait`.
    pub async fn publish(
        &self,
        identifier: &str,
        value: &str,
        wait: Duration,
    ) -> Result<Published, String> {
        match self {
            TxtPublisher::Own(zone) => zone.add(identifier, value).await,
            TxtPublisher::Update(server) => {
                let name = fqdn(&crate::certs::dns01::challenge_name(identifier))?;
                server.add(name, value, wait).await
            }
        }
    }

    /// Takes `record` away (an error is the log's: the order is over either way).
    pub async fn withdraw(&self, record: Published, wait: Duration) -> Result<(), String> {
        match self {
            TxtPublisher::Own(zone) => {
                zone.remove(&record).await;
                Ok(())
            }
            TxtPublisher::Update(server) => server.remove(&record, wait).await,
        }
    }

    /// Another fleet member's order's record at `identifier`: `value` answered from here
    /// too, or (`None`) that order ended and it goes — the CA's resolver may ask any
    /// member's server of the zone. Whether this publisher answers the fleet's records: an
    /// update server is the name's own, which the ordering member updates itself.
    pub async fn mirror(&self, identifier: &str, value: Option<&str>) -> Result<bool, String> {
        let TxtPublisher::Own(zone) = self else {
            return Ok(false);
        };
        let mut mirrored = zone.mirrored.lock().await;
        if let Some(old) = mirrored.remove(identifier) {
            zone.remove(&old).await;
        }
        if let Some(value) = value {
            let record = zone.record(identifier, value)?;
            // Not added when it is there already: this member's own order's record.
            zone.authority.upsert(record.as_record(0), 1).await;
            mirrored.insert(identifier.to_string(), record);
        }
        Ok(true)
    }

    /// Whether the records of this member's orders are answered by its own zone — and so
    /// must be by every member's, in a fleet.
    pub fn is_own(&self) -> bool {
        matches!(self, TxtPublisher::Own(_))
    }

    /// What an order that failed is told to look at, where the directory's error cannot say
    /// it: the delegation its challenge needs in the own zone (an update's refusal is said
    /// by the update itself).
    pub fn hint(&self, identifier: &str) -> Option<String> {
        match self {
            TxtPublisher::Own(zone) => Some(format!(
                "is `{}` in the name's zone? `espalier check` looks",
                crate::certs::dns01::cname_line(identifier, &zone.origin)
            )),
            TxtPublisher::Update(_) => None,
        }
    }
}

/// espalier's own authoritative DNS server for the delegated zone, answering on UDP until
/// dropped (its tasks go with it). Not on TCP: hickory's TCP front takes every connection it
/// is offered, each held up to its idle time, so a flood of them would take the master's
/// descriptors — and every answer of this zone (an SOA, a few TXT records of 43 bytes) fits
/// a UDP datagram, so a resolver never needs TCP for it.
pub struct ChallengeZone {
    /// The zone, as written (lowercase, no final dot).
    origin: String,
    authority: Arc<InMemoryAuthority>,
    /// The records of other fleet members' orders answered here, by identifier.
    mirrored: tokio::sync::Mutex<std::collections::HashMap<String, Published>>,
    _server: ServerFuture<Catalog>,
}

impl ChallengeZone {
    /// The server for `zone`, bound to `listen` (UDP) and answering.
    pub fn start(listen: SocketAddr, zone: &str) -> Result<ChallengeZone, String> {
        let origin = fqdn(zone)?;
        let mut authority = InMemoryAuthority::empty(origin.clone(), ZoneType::Primary, false);
        let host = fqdn(&format!("ns.{zone}"))?;
        let contact = fqdn(&format!("hostmaster.{zone}"))?;
        // TTL 0 and a negative TTL of 0: see the module's doc.
        let soa = SOA::new(host.clone(), contact, 1, 3600, 600, 86_400, 0);
        let apex = [RData::SOA(soa), RData::NS(NS(host))];
        for rdata in apex {
            authority.upsert_mut(Record::from_rdata(origin.clone(), 0, rdata), 1);
        }
        let authority = Arc::new(authority);
        let mut catalog = Catalog::new();
        catalog.upsert(LowerName::new(&origin), vec![authority.clone()]);
        let mut server = ServerFuture::new(catalog);
        let fail =
            |what: &str, e: std::io::Error| format!("cannot answer DNS on {what} {listen}: {e}");
        let udp = std::net::UdpSocket::bind(listen).map_err(|e| fail("UDP", e))?;
        udp.set_nonblocking(true).map_err(|e| fail("UDP", e))?;
        server
            .register_socket_std(udp)
            .map_err(|e| fail("UDP", e))?;
        Ok(ChallengeZone {
            origin: zone.to_string(),
            authority,
            mirrored: Default::default(),
            _server: server,
        })
    }

    /// Adds the TXT record `value` at `identifier`'s name in the zone (beside any other
    /// order's: a name and its wildcard share it).
    async fn add(&self, identifier: &str, value: &str) -> Result<Published, String> {
        let published = self.record(identifier, value)?;
        if !self.authority.upsert(published.as_record(0), 1).await {
            let name = published.name();
            return Err(format!("{name} could not be added to the zone"));
        }
        Ok(published)
    }

    /// The TXT record `value` at `identifier`'s name in the zone.
    fn record(&self, identifier: &str, value: &str) -> Result<Published, String> {
        let name = crate::certs::dns01::delegated_name(identifier, &self.origin);
        Ok(Published::new(fqdn(&name)?, value, fqdn(&self.origin)?))
    }

    /// Takes `record` out of the zone (and its name, with its last record).
    async fn remove(&self, record: &Published) {
        let key = RrKey::new(LowerName::new(record.name()), RecordType::TXT);
        let mut records = self.authority.records_mut().await;
        let Some(set) = records.get_mut(&key) else {
            return;
        };
        Arc::make_mut(set).remove(&record.as_record(0), 1);
        if set.is_empty() {
            records.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests;
