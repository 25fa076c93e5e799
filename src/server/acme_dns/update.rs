//! RFC 2136 dynamic updates, signed with TSIG (RFC 8945), to the DNS server that holds a
//! name's zone (`[server.acme.dns] update`): the provider-neutral way to publish a DNS-01
//! record that BIND, Knot and PowerDNS all take, with no provider's API key.
//!
//! Each operation is one TCP connection: the zone that holds the challenge's name is found
//! by asking the server for its SOA (the answer's authority section names it), then the
//! record is added to, or deleted from, that zone. Every message is signed, and the server's
//! answers are checked against the key (hickory's client does both).
//!
//! Owns: that exchange. Must not touch: which record, or when.

use super::record::{fqdn, txt, Published};
use crate::config::TsigKey;
use crate::server::causes::causes;
use hickory_client::client::{Client, ClientHandle};
use hickory_proto::dnssec::rdata::tsig::TsigAlgorithm;
use hickory_proto::dnssec::tsig::TSigner;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RecordType};
use hickory_proto::runtime::TokioRuntimeProvider;
use hickory_proto::tcp::TcpClientStream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The TTL of a published challenge: a resolver between the CA and the server keeps it no
/// longer than the CA's retries need.
const CHALLENGE_TTL: u32 = 10;

/// How far a signed message's time may be from the server's (RFC 8945's usual 300 s).
const FUDGE: u16 = 300;

/// The update server and the key it takes updates with.
pub struct DnsUpdate {
    server: SocketAddr,
    signer: Arc<TSigner>,
}

impl DnsUpdate {
    /// Updates to `server`, signed with `key`.
    pub fn new(server: SocketAddr, key: &TsigKey) -> Result<DnsUpdate, String> {
        let algorithm = match key.algorithm.as_str() {
            "hmac-sha256" => TsigAlgorithm::HmacSha256,
            "hmac-sha384" => TsigAlgorithm::HmacSha384,
            "hmac-sha512" => TsigAlgorithm::HmacSha512,
            other => return Err(format!("TSIG algorithm `{other}` cannot sign here")),
        };
        let signer = TSigner::new(key.secret.clone(), algorithm, fqdn(&key.name)?, FUDGE)
            .map_err(|e| format!("the TSIG key `{}` cannot sign: {e}", key.name))?;
        Ok(DnsUpdate {
            server,
            signer: Arc::new(signer),
        })
    }

    /// A signing client on a new connection to the server.
    async fn client(&self, wait: Duration) -> Result<Client, String> {
        let (stream, sender) =
            TcpClientStream::new(self.server, None, Some(wait), TokioRuntimeProvider::new());
        let signer: Arc<dyn hickory_proto::op::MessageFinalizer> = self.signer.clone();
        let made = Client::with_timeout(stream, sender, wait, Some(signer));
        let (client, background) = (tokio::time::timeout(wait, made).await)
            .map_err(|_| format!("{} did not answer within {wait:?}", self.server))?
            .map_err(|e| format!("cannot reach {}: {}", self.server, causes(&e)))?;
        tokio::spawn(background);
        Ok(client)
    }

    /// The zone `name` is in, as the server holds it: the SOA its answer gives.
    async fn zone_of(&self, client: &mut Client, name: &Name) -> Result<Name, String> {
        let asked = client.query(name.clone(), DNSClass::IN, RecordType::SOA);
        let answer = asked
            .await
            .map_err(|e| format!("{}: SOA of {name}: {}", self.server, causes(&e)))?;
        let soa = (answer.answers().iter())
            .chain(answer.name_servers())
            .find(|r| r.record_type() == RecordType::SOA);
        match soa {
            Some(soa) => Ok(soa.name().clone()),
            None => Err(format!(
                "{} holds no zone of {name} (it answered {}); update the server that is authoritative for it",
                self.server,
                answer.response_code()
            )),
        }
    }

    /// Adds the TXT record `value` at `name` (beside any other).
    pub(super) async fn add(
        &self,
        name: Name,
        value: &str,
        wait: Duration,
    ) -> Result<Published, String> {
        let mut client = self.client(wait).await?;
        let zone = self.zone_of(&mut client, &name).await?;
        let record = txt(&name, value, CHALLENGE_TTL);
        let answer = (client.append(record, zone.clone(), false).await)
            .map_err(|e| format!("{}: the update of {name}: {}", self.server, causes(&e)))?;
        self.accepted(answer.response_code(), &name, &zone)?;
        Ok(Published::new(name, value, zone))
    }

    /// Deletes the record `record` added.
    pub(super) async fn remove(&self, record: &Published, wait: Duration) -> Result<(), String> {
        let mut client = self.client(wait).await?;
        let set = record.as_record(CHALLENGE_TTL);
        let answer = (client.delete_by_rdata(set, record.zone().clone()).await).map_err(|e| {
            let why = causes(&e);
            format!("{}: the deletion of {}: {why}", self.server, record.name())
        })?;
        self.accepted(answer.response_code(), record.name(), record.zone())
    }

    /// Whether the server took an update of `name` in `zone`, said as it refused it.
    fn accepted(&self, code: ResponseCode, name: &Name, zone: &Name) -> Result<(), String> {
        let (shown, zone) = (name.to_ascii(), zone.to_ascii());
        let (shown, zone) = (shown.trim_end_matches('.'), zone.trim_end_matches('.'));
        match code {
            ResponseCode::NoError => Ok(()),
            ResponseCode::Refused | ResponseCode::NotAuth => Err(format!(
                "{} refused the update of {shown} ({code:?}); let the key update TXT records there (BIND: update-policy {{ grant KEY name {name} TXT; }}; in zone \"{zone}\")",
                self.server
            )),
            other => Err(format!("{} did not take the update of {shown}: {other:?}", self.server)),
        }
    }
}
