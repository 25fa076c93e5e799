//! The master's line to the fleet's etcd (`[server.cluster]`): one task that connects, reads
//! the shared parts under the prefix once (a whole copy, at one revision), then watches them
//! from the next revision on, and keeps this member's key alive under a lease; what it
//! learns goes to the supervisor as [`News`], which alone writes the copy and applies it.
//!
//! Owns: the connection (its options from the spec), the key layout's reading (which key is
//! which part), the watch, the member's lease, and the back-off while etcd cannot be
//! reached. Must not touch: the copy on disk or the running configuration (the
//! supervisor's `fleet` part), or what a part says (it is a config file's text).
//!
//! Why etcd (v3, Raft) through `etcd-client`: the fleet's consistency is etcd's — a
//! revision orders every change, a watch from a revision misses none, a transaction compares
//! before it writes — and no consensus is written here.

use crate::config::cluster::{is_part_name, ClusterSpec, KINDS};
use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, WatchOptions,
    WatchResponse,
};
use std::time::{Duration, SystemTime};

/// How long a member's key outlives its last keep-alive: a member that stops is gone from
/// the list within it.
const MEMBER_TTL: i64 = 10;
/// The waits between attempts while etcd cannot be reached, doubling up to the last.
const RETRY: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];
/// How often the members are listed, for `status`.
const MEMBERS_EVERY: Duration = Duration::from_secs(2);

/// One shared part as etcd holds it: `kind` an index into [`KINDS`], `text` its file's text
/// (`None`: deleted), `revision` the revision that last changed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub kind: usize,
    pub name: String,
    pub text: Option<String>,
    pub revision: i64,
}

/// A member of the fleet, as its key says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub node: String,
    /// What it says of itself (JSON: its applied revision and when it joined).
    pub said: serde_json::Value,
}

/// What the task tells the supervisor.
pub enum News {
    /// Connected: the client (for writes and the member's key) and the member's lease.
    Connected(Box<Client>, i64),
    /// The parts at `revision`: all of them (`whole`, after a connection: a part not among
    /// them is gone) or those a watch saw change.
    Copy {
        revision: i64,
        parts: Vec<Part>,
        whole: bool,
    },
    Members(Vec<Member>),
    /// etcd cannot be reached, or the connection broke: why.
    Unreachable(String),
    /// A write of the configuration API (numbered `id`) went to etcd, or not.
    Written {
        id: u64,
        outcome: Written,
    },
    /// The fleet's session ticket secrets as etcd holds them (sealed; `None`: none yet),
    /// and the revision that last changed them.
    Tickets(Option<String>, i64),
    /// This member's new ticket secrets went to etcd, or not.
    TicketsPublished(Written),
    /// The fleet's certificates, challenge proofs and ACME accounts (see
    /// `super::acme_fleet`) as etcd holds them: all of them after a connection, else those a
    /// watch saw change.
    Files(Vec<SharedFile>),
    /// The names' order locks held now, and by whom (name, node).
    Locks(Vec<(String, String)>),
}

/// A file of the fleet's ACME share: its key under the prefix (`certs/STEM`,
/// `acme/proofs/FILE`, `acme/accounts/FILE`) and its value (`None`: deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFile {
    pub path: String,
    pub value: Option<Vec<u8>>,
}

/// The folders under the prefix whose keys are [`SharedFile`]s.
const FILE_FOLDERS: [&str; 3] = ["certs/", "acme/proofs/", "acme/accounts/"];

/// The [`SharedFile`] path of `key`, if it is one.
fn shared_file(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    FILE_FOLDERS
        .iter()
        .any(|f| rest.starts_with(f))
        .then(|| rest.to_string())
}

/// How a write to the fleet's parts went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Done, at this revision.
    Done(i64),
    /// A part changed since this member saw it (another member wrote it): nothing written.
    Changed,
    /// etcd could not be asked: why.
    Failed(String),
}

/// One part to write: its kind and name, its new text (`None`: delete it), and the revision
/// this member last saw it at (0: it had none).
pub struct Change {
    pub kind: usize,
    pub name: String,
    pub text: Option<String>,
    pub seen: i64,
}

/// Puts `value` at `key` if its revision is still `seen` (0: it has none).
pub async fn put_if(client: &mut Client, key: String, value: String, seen: i64) -> Written {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let txn = Txn::new()
        .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, seen)])
        .and_then([TxnOp::put(key.as_str(), value, None)]);
    commit(client, txn).await
}

/// How many times a transaction is sent when etcd does not answer it (a connection reset,
/// a leader changing hands): the member's watch moves to the next etcd member if this one
/// is gone, and the write after it goes there.
const ATTEMPTS: usize = 3;

/// Sends `txn`, again on a transport error (the compare makes a second send safe: a first
/// that did land fails it, and that is said as `Changed`).
async fn commit(client: &mut Client, txn: etcd_client::Txn) -> Written {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        match client.txn(txn.clone()).await {
            Ok(r) if r.succeeded() => return Written::Done(r.header().map_or(0, |h| h.revision())),
            Ok(_) => return Written::Changed,
            Err(e) => last = format!("etcd: {}", short(&e)),
        }
    }
    Written::Failed(last)
}

/// Writes `changes` in one transaction that holds only if no part changed since it was
/// seen (`mod_revision` compared): two members' writers never lose one's change.
pub async fn write(client: &mut Client, spec: &ClusterSpec, changes: Vec<Change>) -> Written {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let key = |c: &Change| spec.key(KINDS[c.kind].0, &c.name);
    let compares: Vec<Compare> = (changes.iter())
        .map(|c| Compare::mod_revision(key(c), CompareOp::Equal, c.seen))
        .collect();
    let ops: Vec<TxnOp> = (changes.iter())
        .map(|c| match &c.text {
            Some(text) => TxnOp::put(key(c), text.as_str(), None),
            None => TxnOp::delete(key(c), None),
        })
        .collect();
    commit(client, Txn::new().when(compares).and_then(ops)).await
}

/// The part `key` (under `prefix`) names, if it is one: `PREFIX/sites/NAME`.
pub fn part_of(prefix: &str, key: &str) -> Option<(usize, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (folder, name) = rest.split_once('/')?;
    let kind = KINDS.iter().position(|(f, _)| *f == folder)?;
    is_part_name(name).then(|| (kind, name.to_string()))
}

/// Connects with the spec's endpoints, credentials and CA.
/// One client per endpoint, not etcd-client's balance over all of them: the balancer kept
/// sending some requests to a member that was down (half the writes failed with one of three
/// etcd members killed), where a client on one live member, and the next one when it
/// fails, never does.
pub async fn connect(spec: &ClusterSpec) -> Result<Client, String> {
    connect_from(spec, 0).await.map(|(client, ..)| client)
}

/// A client on the first endpoint from the `start`-th on (round the list) that answers,
/// that endpoint's place, and the revision its answer carried.
pub async fn connect_from(
    spec: &ClusterSpec,
    start: usize,
) -> Result<(Client, usize, i64), String> {
    let options = options(spec)?;
    let n = spec.endpoints.len();
    let mut last = String::new();
    for k in (0..n).map(|i| (start + i) % n) {
        let endpoint = &spec.endpoints[k];
        let answered = match Client::connect([endpoint], Some(options.clone())).await {
            // A client is made without a round trip: a status asked proves the member lives.
            Ok(mut client) => (client.status().await)
                .map(|status| (status.header().map_or(0, |h| h.revision()), client)),
            Err(e) => Err(e),
        };
        match answered {
            Ok((revision, client)) => return Ok((client, k, revision)),
            Err(e) => last = format!("{endpoint}: {}", short(&e)),
        }
    }
    Err(format!("cannot reach etcd ({last})"))
}

/// The connection's options: timeouts, credentials, the CA.
fn options(spec: &ClusterSpec) -> Result<ConnectOptions, String> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5))
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
    if let (Some(user), Some(file)) = (&spec.user, &spec.password_file) {
        let password = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        options = options.with_user(user.clone(), password.trim_end().to_string());
    }
    if let Some(ca) = &spec.ca {
        let pem = std::fs::read(ca).map_err(|e| format!("cannot read {}: {e}", ca.display()))?;
        let tls =
            etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(pem));
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// An etcd error in one line: gRPC's message and its root cause (`Connection refused`), not
/// the transport's whole chain of wrappers.
pub fn short(e: &etcd_client::Error) -> String {
    use std::error::Error as _;
    let (top, mut cause) = match e {
        etcd_client::Error::GRpcStatus(s) => (s.message().to_string(), s.source()),
        other => (other.to_string(), other.source()),
    };
    let mut root = None;
    while let Some(c) = cause {
        root = Some(c.to_string());
        cause = c.source();
    }
    match root {
        Some(root) if !top.contains(&root) => format!("{top}: {root}"),
        _ => top,
    }
}

/// Follows the fleet for the master's life: connected, the copy and its changes; cut off,
/// tried again (said once per cause by the supervisor). `send` says each [`News`] to the
/// supervisor (`false`: it is gone, and so is the task).
pub async fn follow(spec: ClusterSpec, send: impl Fn(News) -> bool) {
    let (mut failures, mut next) = (0usize, 0usize);
    loop {
        let outcome = match connect_from(&spec, next).await {
            Ok((client, k, _)) => {
                failures = 0;
                // The next connection tries the next member first: this one may be why
                // this one ends.
                next = k + 1;
                watch(&spec, client, &send).await
            }
            Err(e) => Err(e),
        };
        let cause = outcome.err().unwrap_or_else(|| "the watch ended".into());
        if !send(News::Unreachable(cause)) {
            return; // the master is gone
        }
        tokio::time::sleep(RETRY[failures.min(RETRY.len() - 1)]).await;
        failures += 1;
    }
}

/// One connection's life: the member's lease, the whole copy, then every change.
async fn watch(
    spec: &ClusterSpec,
    mut client: Client,
    send: &impl Fn(News) -> bool,
) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |e: etcd_client::Error| format!("etcd: {what}: {}", short(&e))
    };
    let lease = client
        .lease_grant(MEMBER_TTL, None)
        .await
        .map_err(e("the member's lease"))?
        .id();
    let (mut keeper, mut kept) = client
        .lease_keep_alive(lease)
        .await
        .map_err(e("the member's lease"))?;
    let joined = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let said = serde_json::json!({ "joined": joined, "revision": 0 });
    put_member(&mut client, spec, lease, &said).await?;
    let prefix = format!("{}/", spec.prefix);
    let all = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(e("reading the fleet's parts"))?;
    let revision = all.header().map_or(0, |h| h.revision());
    if !send(News::Connected(Box::new(client.clone()), lease)) {
        return Ok(());
    }
    send_copy(spec, all.kvs(), revision, send);
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision + 1);
    let mut stream = client
        .watch(prefix.as_str(), Some(options))
        .await
        .map_err(e("watching the fleet's parts"))?;
    let mut ticks = tokio::time::interval(MEMBERS_EVERY);
    loop {
        tokio::select! {
            message = stream.message() => {
                let Some(message) = message.map_err(e("watching the fleet's parts"))? else {
                    return Err("etcd ended the watch".into());
                };
                if message.canceled() {
                    return Err(format!("etcd cancelled the watch ({})", message.cancel_reason()));
                }
                if !send_changes(spec, &message, send) {
                    return Ok(());
                }
            }
            _ = ticks.tick() => {
                keeper.keep_alive().await.map_err(e("the member's lease"))?;
                if let Ok(Some(answer)) = kept.message().await {
                    if answer.ttl() <= 0 {
                        return Err("the member's lease expired".into());
                    }
                }
                let members = members(&mut client, spec).await?;
                if !send(News::Members(members)) {
                    return Ok(());
                }
                send(News::Locks(locks(&mut client, spec).await?));
            }
        }
    }
}

/// Sends the whole copy read at `revision` (`kvs`, every key under the prefix): the parts,
/// the sealed ticket secrets, the shared files.
fn send_copy(spec: &ClusterSpec, kvs: &[KeyValue], revision: i64, send: &impl Fn(News) -> bool) {
    let parts = (kvs.iter())
        .filter_map(|kv| {
            let (kind, name) = part_of(&spec.prefix, kv.key_str().ok()?)?;
            let text = kv.value_str().ok()?.to_string();
            Some(Part {
                kind,
                name,
                text: Some(text),
                revision: kv.mod_revision(),
            })
        })
        .collect();
    let tickets = spec.tickets_key();
    let sealed = (kvs.iter()).find(|kv| kv.key() == tickets.as_bytes());
    let sealed = sealed.and_then(|kv| Some((kv.value_str().ok()?.to_string(), kv.mod_revision())));
    send(News::Copy {
        revision,
        parts,
        whole: true,
    });
    send(match sealed {
        Some((sealed, revision)) => News::Tickets(Some(sealed), revision),
        None => News::Tickets(None, 0),
    });
    let files: Vec<SharedFile> = (kvs.iter())
        .filter_map(|kv| {
            let path = shared_file(&spec.prefix, kv.key_str().ok()?)?;
            Some(SharedFile {
                path,
                value: Some(kv.value().to_vec()),
            })
        })
        .collect();
    if !files.is_empty() {
        send(News::Files(files));
    }
}

/// Sends what one watch message changed: parts, shared files, ticket secrets. False once the
/// master is gone.
fn send_changes(spec: &ClusterSpec, message: &WatchResponse, send: &impl Fn(News) -> bool) -> bool {
    let revision = message.header().map_or(0, |h| h.revision());
    let parts: Vec<Part> = (message.events().iter())
        .filter_map(|ev| {
            let kv = ev.kv()?;
            let (kind, name) = part_of(&spec.prefix, kv.key_str().ok()?)?;
            let text = match ev.event_type() {
                EventType::Put => Some(kv.value_str().ok()?.to_string()),
                EventType::Delete => None,
            };
            Some(Part {
                kind,
                name,
                text,
                revision: kv.mod_revision(),
            })
        })
        .collect();
    if !parts.is_empty()
        && !send(News::Copy {
            revision,
            parts,
            whole: false,
        })
    {
        return false;
    }
    let files: Vec<SharedFile> = (message.events().iter())
        .filter_map(|ev| {
            let kv = ev.kv()?;
            let path = shared_file(&spec.prefix, kv.key_str().ok()?)?;
            let value = match ev.event_type() {
                EventType::Put => Some(kv.value().to_vec()),
                EventType::Delete => None,
            };
            Some(SharedFile { path, value })
        })
        .collect();
    if !files.is_empty() && !send(News::Files(files)) {
        return false;
    }
    let tickets = spec.tickets_key();
    for ev in message.events() {
        let Some(kv) = ev.kv().filter(|kv| kv.key() == tickets.as_bytes()) else {
            continue;
        };
        let sealed = match ev.event_type() {
            EventType::Put => kv.value_str().ok().map(String::from),
            EventType::Delete => None,
        };
        send(News::Tickets(sealed, kv.mod_revision()));
    }
    true
}

/// Writes this member's key (under its lease) with what it says of itself.
pub async fn put_member(
    client: &mut Client,
    spec: &ClusterSpec,
    lease: i64,
    said: &serde_json::Value,
) -> Result<(), String> {
    let key = format!("{}/members/{}", spec.prefix, spec.node);
    client
        .put(
            key,
            said.to_string(),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("etcd: the member's key: {}", short(&e)))
}

/// The fleet's members, by their keys.
async fn members(client: &mut Client, spec: &ClusterSpec) -> Result<Vec<Member>, String> {
    let prefix = format!("{}/members/", spec.prefix);
    let got = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| format!("etcd: listing the members: {}", short(&e)))?;
    Ok((got.kvs().iter())
        .filter_map(|kv| {
            let node = kv.key_str().ok()?.strip_prefix(&prefix)?.to_string();
            let said = serde_json::from_slice(kv.value()).unwrap_or(serde_json::Value::Null);
            Some(Member { node, said })
        })
        .collect())
}

/// The names' order locks held now (name, node), for `status`.
async fn locks(client: &mut Client, spec: &ClusterSpec) -> Result<Vec<(String, String)>, String> {
    let prefix = spec.acme_key("locks", "");
    let got = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| format!("etcd: listing the locks: {}", short(&e)))?;
    Ok((got.kvs().iter())
        .filter_map(|kv| {
            let name = kv.key_str().ok()?.strip_prefix(&prefix)?.to_string();
            Some((name, kv.value_str().ok()?.to_string()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{part_of, shared_file};

    #[test]
    fn a_shared_file_is_a_certificate_a_proof_or_an_account() {
        assert_eq!(
            shared_file("/e/p", "/e/p/certs/a.example").as_deref(),
            Some("certs/a.example")
        );
        assert_eq!(
            shared_file("/e/p", "/e/p/acme/proofs/tok").as_deref(),
            Some("acme/proofs/tok")
        );
        for not in [
            "/e/p/acme/locks/a",
            "/e/p/acme/seen/tok/b",
            "/e/p/sites/a",
            "/e/px/certs/a",
        ] {
            assert_eq!(shared_file("/e/p", not), None, "{not}");
        }
    }

    #[test]
    fn a_key_names_a_part_only_under_the_prefix_and_a_kind() {
        assert_eq!(part_of("/e/p", "/e/p/sites/shop"), Some((2, "shop".into())));
        assert_eq!(
            part_of("/e/p", "/e/p/pools/php-8.3"),
            Some((0, "php-8.3".into()))
        );
        assert_eq!(
            part_of("/e/p", "/e/p/upstreams/api"),
            Some((1, "api".into()))
        );
        for not in [
            "/e/p/members/a",
            "/e/px/sites/a",
            "/e/p/sites/",
            "/e/p/sites/../x",
            "/e/p/sites/a/b",
            "/e/p/sites/.hidden",
        ] {
            assert_eq!(part_of("/e/p", not), None, "{not}");
        }
    }
}
