//! An order made in a fleet (`[server.cluster]` beside `[server.acme]`): every member keeps
//! every name, but one orders it — the one that takes the name's lock in etcd. The others
//! wait while it is held and then take the pair it published; a member that dies holding
//! the lock lets go of it with its lease, and the next one orders. Before ordering, the
//! holder looks in etcd: a pair another member published (while this one was away) that is
//! not due is taken, not ordered again; a failed order is said in etcd for its back-off, and
//! the members waiting on it back off too. The account is the fleet's too: the first member to
//! register one publishes it (sealed), the others use it.
//!
//! Owns: that protocol, on the orders' side. Must not touch: etcd's keys and transactions
//! (`server::acme_fleet`), the ACME exchange (`server::acme`), or mirroring what etcd holds
//! into the store (the master's `fleet_files`).

use super::super::acme_schedule::FLEET_FAILED;
use crate::config::AcmeSettings;
use crate::server::acme_fleet::{FleetLink, Lock};
use crate::server::supervisor::event::Issued;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The fleet's etcd as the orders follow it: `None` while it is not reached.
type Following = tokio::sync::watch::Receiver<Option<FleetLink>>;

/// How long an order waits for etcd to be reached before it fails (and backs off as any).
const LINK_WAIT: Duration = Duration::from_secs(10);
/// How often a member waiting on another's order looks at the lock again.
const LOCK_LOOK: Duration = Duration::from_millis(500);
/// How long a member waits on another member's order at most; then it tries for the lock
/// again (the holder, alive, still has it: it waits once more).
const HELD_WAIT: Duration = Duration::from_secs(300);

/// The fleet's etcd, once reached (within [`LINK_WAIT`]).
async fn link(following: &Following) -> Result<FleetLink, String> {
    let mut watch = following.clone();
    let reached = tokio::time::timeout(LINK_WAIT, watch.wait_for(Option::is_some)).await;
    match reached {
        Ok(Ok(link)) => link.clone().ok_or_else(|| "etcd cannot be reached".into()),
        _ => Err("etcd cannot be reached: the fleet's orders wait for it".into()),
    }
}

/// Orders `name` for the fleet with `order_once` (the ACME exchange, its proofs published
/// through the link it is given), or takes the pair another member ordered; the pair goes
/// into `store`.
pub(super) async fn order<F, Fut>(
    following: &Following,
    store: &Path,
    name: &str,
    order_once: F,
) -> Result<Issued, String>
where
    F: FnOnce(FleetLink) -> Fut,
    Fut: std::future::Future<Output = Result<SystemTime, String>>,
{
    let link = link(following).await?;
    loop {
        match link.lock(name).await? {
            Lock::Taken => break,
            Lock::Held(by) => {
                if let Some(until) = wait_for_other(store, &link, name).await? {
                    return Ok(Issued {
                        until,
                        by: Some(by),
                    });
                }
            }
        }
    }
    // With the lock: the fleet's pair when it has one that is not due, else a new order,
    // published for every member.
    let ordered = async {
        if let Some(until) = fleet_pair(store, &link, name).await? {
            let by = Some("another member (before this one held the lock)".to_string());
            return Ok(Issued { until, by });
        }
        if let Some(cause) = link.failure(name).await? {
            return Err(format!("{FLEET_FAILED}{cause}"));
        }
        let until = match order_once(link.clone()).await {
            Ok(until) => until,
            Err(cause) => {
                let wait = super::super::acme_schedule::back_off(1, &cause);
                link.failed(name, &cause, wait).await;
                return Err(cause);
            }
        };
        publish(store, &link, name).await?;
        Ok(Issued { until, by: None })
    };
    let ordered = ordered.await;
    link.unlock(name).await;
    ordered
}

/// While another member holds `name`'s lock: waits for it to be let go (within
/// [`HELD_WAIT`]), then takes the fleet's pair if it is not due (its end); `None`: order it.
async fn wait_for_other(
    store: &Path,
    link: &FleetLink,
    name: &str,
) -> Result<Option<SystemTime>, String> {
    let deadline = tokio::time::Instant::now() + HELD_WAIT;
    while link.locked(name).await? && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(LOCK_LOOK).await;
    }
    match fleet_pair(store, link, name).await? {
        Some(until) => Ok(Some(until)),
        None => match link.failure(name).await? {
            Some(cause) => Err(format!("{FLEET_FAILED}{cause}")),
            None => Ok(None),
        },
    }
}

/// `name`'s new pair, from `store`, put into etcd for every member.
async fn publish(store: &Path, link: &FleetLink, name: &str) -> Result<(), String> {
    let stem = crate::certs::store::stem(name);
    let key = std::fs::read(store.join(format!("{stem}.key")));
    let chain = std::fs::read(store.join(format!("{stem}.pem")));
    let (key, chain) = match (key, chain) {
        (Ok(key), Ok(chain)) => (key, chain),
        _ => return Err("the new pair cannot be read".into()),
    };
    // Issued but not shared: the other members order it themselves once the lock is let go.
    link.publish_pair(&stem, &key, &chain)
        .await
        .map_err(|e| format!("issued, but not shared with the fleet: {e}"))
}

/// The fleet's pair of `name`, written into the store, when it has one that is not due for
/// renewal: its end.
async fn fleet_pair(
    store: &Path,
    link: &FleetLink,
    name: &str,
) -> Result<Option<SystemTime>, String> {
    let stem = crate::certs::store::stem(name);
    let Some((key, chain)) = link.pair(&stem).await? else {
        return Ok(None);
    };
    let (from, until) = crate::certs::renewal::lifetime(&chain)?;
    if crate::certs::renewal::renew_at(from, until) <= SystemTime::now() {
        return Ok(None);
    }
    let write = crate::os::private_dir::write_private;
    write(&store.join(format!("{stem}.key")), &key)?;
    write(&store.join(format!("{stem}.pem")), &chain)?;
    Ok(Some(until))
}

/// The fleet's account: the one this member keeps, else the one another member published
/// (kept here from now on), else a new one registered and published.
pub(super) async fn account(
    following: &Following,
    settings: &AcmeSettings,
    store: &Path,
) -> Result<instant_acme::Account, String> {
    let file = crate::server::acme::account_file(settings, store);
    let name = file
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let link = link(following).await?;
    if !file.exists() {
        if let Some(json) = link.account(&name).await? {
            crate::os::private_dir::write_private(&file, &json)?;
        }
    }
    let account = crate::server::acme::account(settings, store).await?;
    if let Ok(json) = std::fs::read(&file) {
        link.publish_account(&name, &json).await?;
    }
    Ok(account)
}
