//! A fleet's share of ACME (`[server.cluster]` beside `[server.acme]`), in etcd: one member
//! orders a name while it holds the name's lock; the challenge's proof it puts out is
//! published for every member to answer, whichever the CA reaches; the issued pair (its key
//! sealed with the fleet's key) and the account's credentials (sealed too) are the fleet's.
//!
//! The lock and the proofs live under the ordering member's lease: a member that dies while
//! ordering lets go of both within the lease's time (`cluster::MEMBER_TTL`), and another
//! orders the name then — never while it lives.
//!
//! A failed order is said under `PREFIX/acme/failed/NAME` for the first back-off's time, so
//! that the fleet asks the directory again as one member would, not once per member; and the
//! orders started on demand are counted for the fleet's hour (`on_demand` `per_hour`).
//!
//! Owns: the key layout under `PREFIX/acme/` and `PREFIX/certs/`, and each operation's
//! transaction. Must not touch: when a name is ordered (the master's `acme`), the ACME
//! protocol (`super::acme`), or the files on disk (the master's `fleet_files`).

use crate::config::cluster::ClusterSpec;
use crate::server::cluster::short;
use crate::tls::fleet_keys::{self, FleetKeys};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use std::sync::Arc;
use std::time::Duration;

/// What the fleet's ACME needs: etcd's client, this member's lease, the fleet's settings and
/// its key (`None`: no `secret_file` — proofs are shared, pairs and accounts are not).
#[derive(Clone)]
pub struct FleetLink {
    pub client: Client,
    pub lease: i64,
    pub spec: Arc<ClusterSpec>,
    pub keys: Option<Arc<FleetKeys>>,
}

/// A name's order lock: taken by this member, or held by the member named.
#[derive(Debug, PartialEq, Eq)]
pub enum Lock {
    Taken,
    Held(String),
}

/// A pair as the fleet holds it: the chain, and the key sealed for its name.
#[derive(serde::Serialize, serde::Deserialize)]
struct SharedPair {
    chain: String,
    key: String,
}

fn etcd_error(what: &str) -> impl Fn(etcd_client::Error) -> String + '_ {
    move |e| format!("etcd: {what}: {}", short(&e))
}

impl FleetLink {
    fn keys(&self) -> Result<&FleetKeys, String> {
        (self.keys.as_deref())
            .ok_or_else(|| "the fleet has no key ([server.cluster] secret_file)".to_string())
    }

    /// Takes `name`'s order lock under this member's lease, unless a member holds it.
    pub async fn lock(&self, name: &str) -> Result<Lock, String> {
        let key = self.spec.acme_key("locks", name);
        let node = self.spec.node.as_str();
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                node,
                Some(PutOptions::new().with_lease(self.lease)),
            )])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let answer = (self.client.clone().txn(txn).await).map_err(etcd_error("a name's lock"))?;
        if answer.succeeded() {
            return Ok(Lock::Taken);
        }
        let holder = (answer.op_responses().into_iter())
            .find_map(|op| match op {
                TxnOpResponse::Get(got) => (got.kvs().first())
                    .and_then(|kv| kv.value_str().ok())
                    .map(String::from),
                _ => None,
            })
            .unwrap_or_default();
        // This member's own, from before a restart of its task (same lease): it holds it.
        if holder == node {
            return Ok(Lock::Taken);
        }
        Ok(Lock::Held(holder))
    }

    /// Lets go of `name`'s lock, if this member still holds it.
    pub async fn unlock(&self, name: &str) {
        let key = self.spec.acme_key("locks", name);
        let txn = Txn::new()
            .when([Compare::value(
                key.as_str(),
                CompareOp::Equal,
                self.spec.node.as_str(),
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let _ = self.client.clone().txn(txn).await;
    }

    /// Whether `name`'s lock is still held (by anyone).
    pub async fn locked(&self, name: &str) -> Result<bool, String> {
        let key = self.spec.acme_key("locks", name);
        let got =
            (self.client.clone().get(key, None).await).map_err(etcd_error("a name's lock"))?;
        Ok(!got.kvs().is_empty())
    }

    /// Says that `name`'s order failed (`cause`), for `wait` (a lease of its own): the other
    /// members wait as this one does, rather than each asking the directory again at once.
    pub async fn failed(&self, name: &str, cause: &str, wait: std::time::Duration) {
        let mut client = self.client.clone();
        let ttl = wait.as_secs().clamp(5, 6 * 3600) as i64;
        if let Ok(lease) = client.lease_grant(ttl, None).await {
            let lease = Some(PutOptions::new().with_lease(lease.id()));
            let _ = client
                .put(self.spec.acme_key("failed", name), cause, lease)
                .await;
        }
    }

    /// Why `name`'s last order in the fleet failed, while its wait lasts.
    pub async fn failure(&self, name: &str) -> Result<Option<String>, String> {
        let key = self.spec.acme_key("failed", name);
        let got =
            (self.client.clone().get(key, None).await).map_err(etcd_error("a failed order"))?;
        Ok((got.kvs().first()).and_then(|kv| kv.value_str().ok().map(String::from)))
    }

    /// Counts one order started on demand in the fleet's hour, if `per_hour` allows it:
    /// whether it did. The hour's orders are `per_hour` slots (`PREFIX/acme/started/K`), each
    /// taken by a put that holds only if nobody took it first, under a lease of an hour — so
    /// that two members never both take the last one.
    pub async fn start_on_demand(&self, per_hour: u32) -> Result<bool, String> {
        let prefix = self.spec.acme_key("started", "");
        let mut client = self.client.clone();
        let keys_only = Some(GetOptions::new().with_prefix().with_keys_only());
        for _ in 0..3 {
            let got = (client.get(prefix.as_str(), keys_only.clone()).await)
                .map_err(etcd_error("counting the hour's orders"))?;
            let taken: std::collections::HashSet<u32> = (got.kvs().iter())
                .filter_map(|kv| {
                    kv.key_str()
                        .ok()?
                        .strip_prefix(prefix.as_str())?
                        .parse()
                        .ok()
                })
                .collect();
            let Some(free) = (0..per_hour).find(|k| !taken.contains(k)) else {
                return Ok(false);
            };
            let lease = (client.lease_grant(3600, None).await)
                .map_err(etcd_error("counting the hour's orders"))?
                .id();
            let key = format!("{prefix}{free}");
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    self.spec.node.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let answer =
                (client.txn(txn).await).map_err(etcd_error("counting the hour's orders"))?;
            if answer.succeeded() {
                return Ok(true);
            }
            let _ = client.lease_revoke(lease).await;
        }
        Ok(false)
    }

    /// The fleet's pair for store stem `stem` (key, chain; PEM), if it has one.
    pub async fn pair(&self, stem: &str) -> Result<Option<(Vec<u8>, Vec<u8>)>, String> {
        let got = (self
            .client
            .clone()
            .get(self.spec.cert_key(stem), None)
            .await)
            .map_err(etcd_error("a certificate"))?;
        let Some(kv) = got.kvs().first() else {
            return Ok(None);
        };
        open_pair(self.keys()?, stem, kv.value()).map(Some)
    }

    /// Puts `stem`'s new pair into etcd for every member.
    pub async fn publish_pair(&self, stem: &str, key: &[u8], chain: &[u8]) -> Result<(), String> {
        let value = seal_pair(self.keys()?, stem, key, chain);
        (self
            .client
            .clone()
            .put(self.spec.cert_key(stem), value, None)
            .await)
            .map(|_| ())
            .map_err(etcd_error("publishing a certificate"))
    }

    /// Publishes a challenge's proof `file` (its name in the challenges' folder) under this
    /// member's lease.
    pub async fn publish_proof(&self, file: &str, bytes: &[u8]) -> Result<(), String> {
        let key = self.spec.acme_key("proofs", file);
        let lease = Some(PutOptions::new().with_lease(self.lease));
        (self.client.clone().put(key, bytes, lease).await)
            .map(|_| ())
            .map_err(etcd_error("publishing a challenge's proof"))
    }

    /// Says that this member has proof `file` in its folder (under its lease).
    pub async fn has_proof(&self, file: &str) -> Result<(), String> {
        let key = self
            .spec
            .acme_key("seen", &format!("{file}/{}", self.spec.node));
        let lease = Some(PutOptions::new().with_lease(self.lease));
        (self.client.clone().put(key, "", lease).await)
            .map(|_| ())
            .map_err(etcd_error("saying a proof arrived"))
    }

    /// Waits until every member of the fleet has said it has each of `files`, within
    /// `bound` (then the directory is told anyway: a member that is slow to copy a proof
    /// fails that one validation, no more).
    pub async fn wait_for_proofs(&self, files: &[String], bound: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            if self.every_member_has(files).await.unwrap_or(false) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn every_member_has(&self, files: &[String]) -> Result<bool, String> {
        let mut client = self.client.clone();
        let prefix = format!("{}/members/", self.spec.prefix);
        let all = Some(GetOptions::new().with_prefix().with_keys_only());
        let members = (client.get(prefix.as_str(), all.clone()).await)
            .map_err(etcd_error("listing the members"))?;
        let nodes: Vec<&str> = (members.kvs().iter())
            .filter_map(|kv| kv.key_str().ok()?.strip_prefix(prefix.as_str()))
            .collect();
        for file in files {
            let seen = format!("{}/", self.spec.acme_key("seen", file));
            let got = (client.get(seen.as_str(), all.clone()).await)
                .map_err(etcd_error("reading who has a proof"))?;
            let has: Vec<&str> = (got.kvs().iter())
                .filter_map(|kv| kv.key_str().ok()?.strip_prefix(seen.as_str()))
                .collect();
            if !nodes.iter().all(|n| has.contains(n)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Takes `files`' proofs back, and who had them.
    pub async fn withdraw_proofs(&self, files: &[String]) {
        let mut client = self.client.clone();
        for file in files {
            let _ = client
                .delete(self.spec.acme_key("proofs", file), None)
                .await;
            let seen = format!("{}/", self.spec.acme_key("seen", file));
            let prefix = Some(etcd_client::DeleteOptions::new().with_prefix());
            let _ = client.delete(seen, prefix).await;
        }
    }

    /// The fleet's credentials of the account kept as `file` (its name in the store's
    /// `.acme/`), if another member registered it.
    pub async fn account(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
        let key = self.spec.acme_key("accounts", file);
        let got = (self.client.clone().get(key, None).await).map_err(etcd_error("an account"))?;
        match got.kvs().first().map(|kv| kv.value_str()) {
            None => Ok(None),
            Some(Ok(text)) => fleet_keys::open_account(self.keys()?, file, text).map(Some),
            Some(Err(_)) => Err("the fleet's account is not text".into()),
        }
    }

    /// Puts this member's account credentials into etcd, unless one is there already.
    pub async fn publish_account(&self, file: &str, json: &[u8]) -> Result<(), String> {
        let key = self.spec.acme_key("accounts", file);
        let value = fleet_keys::seal_account(self.keys()?, file, json);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), value, None)]);
        (self.client.clone().txn(txn).await)
            .map(|_| ())
            .map_err(etcd_error("publishing the account"))
    }
}

/// A pair as etcd holds it: JSON of the chain and the key sealed for `stem`.
pub fn seal_pair(keys: &FleetKeys, stem: &str, key: &[u8], chain: &[u8]) -> String {
    let pair = SharedPair {
        chain: String::from_utf8_lossy(chain).into_owned(),
        key: fleet_keys::seal_private_key(keys, stem, key),
    };
    serde_json::to_string(&pair).unwrap_or_default()
}

/// The key and chain (PEM) of a value [`seal_pair`] made for `stem`.
pub fn open_pair(keys: &FleetKeys, stem: &str, value: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let pair: SharedPair = serde_json::from_slice(value)
        .map_err(|e| format!("the fleet's certificate for {stem} is not a pair: {e}"))?;
    let key = fleet_keys::open_private_key(keys, stem, &pair.key)?;
    Ok((key, pair.chain.into_bytes()))
}

/// Whether `file` can be a proof's name in the challenges' folder: an HTTP-01 token (a
/// base64url word) or `tls-alpn-01/NAME.pem|.key` — nothing that leaves the folder.
pub fn is_proof_file(file: &str) -> bool {
    let word = |s: &str, more: &[u8]| {
        !s.is_empty()
            && s.len() <= 256
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b) || more.contains(&b))
    };
    match file.strip_prefix("tls-alpn-01/") {
        Some(name) => {
            let stem = name
                .strip_suffix(".pem")
                .or_else(|| name.strip_suffix(".key"));
            stem.is_some_and(|s| word(s, b"."))
        }
        None => word(file, b""),
    }
}

/// Where a DNS-01 record of an order goes among the proofs: `dns-01/IDENTIFIER` (a
/// wildcard's `*.shop.example`), its value the TXT record's.
const DNS_PROOFS: &str = "dns-01/";

/// The proof name of the DNS-01 record proving `identifier`.
pub fn dns_proof_file(identifier: &str) -> String {
    format!("{DNS_PROOFS}{identifier}")
}

/// The identifier whose DNS-01 record the proof `file` is, if it is one: a host name (its
/// wildcard's `*.` allowed), nothing else.
pub fn dns_proof_identifier(file: &str) -> Option<&str> {
    let identifier = file.strip_prefix(DNS_PROOFS)?;
    let host = identifier.strip_prefix("*.").unwrap_or(identifier);
    let label = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    (identifier.len() <= 253 && host.split('.').all(label)).then_some(identifier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_file_stays_in_the_challenges_folder() {
        for ok in [
            "tok-EN_1",
            "tls-alpn-01/a.example.pem",
            "tls-alpn-01/a.example.key",
        ] {
            assert!(is_proof_file(ok), "{ok}");
        }
        for not in [
            "",
            "../x",
            "a/b",
            ".hidden",
            "tls-alpn-01/../../etc/x.pem",
            "tls-alpn-01/a.example.txt",
            "tls-alpn-01/.pem",
            "tok.en",
        ] {
            assert!(!is_proof_file(not), "{not}");
        }
    }

    #[test]
    fn a_dns_proof_names_a_host_alone() {
        for ok in ["shop.example", "*.shop.example", "a-b.c"] {
            let file = dns_proof_file(ok);
            assert_eq!(dns_proof_identifier(&file), Some(ok), "{file}");
        }
        for not in [
            "dns-01/",
            "dns-01/../x",
            "dns-01/a..b",
            "dns-01/a/b",
            "dns-01/a.*.b",
            "dns-01/*",
            "tok-EN_1",
            &format!("dns-01/{}", "a".repeat(64)),
        ] {
            assert_eq!(dns_proof_identifier(not), None, "{not}");
        }
    }

    #[test]
    fn a_shared_pair_opens_for_its_name_alone() {
        let keys = FleetKeys::parse(&"ab".repeat(32)).unwrap();
        let value = seal_pair(&keys, "a.example", b"KEY", b"CHAIN");
        assert!(!value.contains("KEY"));
        let (key, chain) = open_pair(&keys, "a.example", value.as_bytes()).unwrap();
        assert_eq!(
            (key.as_slice(), chain.as_slice()),
            (&b"KEY"[..], &b"CHAIN"[..])
        );
        assert!(open_pair(&keys, "b.example", value.as_bytes()).is_err());
    }
}
