//! What the fleet's etcd holds of ACME, copied onto this member's disk (`[server.cluster]`):
//! the fleet's certificate pairs into the store (the key opened with the fleet's key, mode
//! 0600) — the store's scan hands them to the workers, and a restart without etcd serves
//! them — the challenges' proofs into the folder the workers answer them from (and said
//! back to etcd, so that the ordering member tells the directory to look only once every
//! member can answer), DNS-01's records into the own zone's server (`[server.acme.dns]`
//! `listen`, said back alike), and the ACME account into the store's `.acme/`.
//!
//! A pair deleted from etcd stays in the store: a certificate is never taken from a member
//! because etcd lost it. Owns: that copy, off the master's loop. Must not touch: etcd's keys
//! (`server::acme_fleet`), or when names are ordered (`acme`).

use super::Supervisor;
use crate::server::acme_fleet::{self, FleetLink};
use crate::server::cluster::SharedFile;
use crate::server::log;
use crate::tls::fleet_keys::FleetKeys;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the copies go.
struct Places {
    store: Option<PathBuf>,
    /// The challenges' folder (or why there is none).
    challenges: Result<PathBuf, String>,
    keys: Option<Arc<FleetKeys>>,
}

/// What a batch copied: pairs taken, proofs now in the folder.
#[derive(Default)]
struct Copied {
    pairs: Vec<String>,
    proofs: Vec<String>,
    refused: Vec<String>,
}

impl Supervisor {
    /// The fleet's `files` changed (or, after a connection, are all of them): copied here.
    pub(super) fn on_fleet_files(&mut self, files: Vec<SharedFile>) {
        let places = Places {
            store: self.config.server.certificates.clone(),
            challenges: crate::server::acme::challenge_dir(),
            keys: self.fleet.keys.clone(),
        };
        let link: Option<FleetLink> = self.fleet.link.borrow().clone();
        let (records, files): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| {
            (f.path.strip_prefix("acme/proofs/")).is_some_and(|p| p.starts_with("dns-01/"))
        });
        let dns = self.acme.dns_publisher();
        tokio::spawn(async move {
            let answered = match records.is_empty() {
                true => Vec::new(),
                false => answer_records(dns, records).await,
            };
            let copied = tokio::task::spawn_blocking(move || copy(&places, files)).await;
            let Ok(copied) = copied else { return };
            if let Some(link) = link {
                for proof in copied.proofs.iter().chain(&answered) {
                    if let Err(e) = link.has_proof(proof).await {
                        log("master", format!("cluster: {e}"));
                    }
                }
            }
            if !copied.pairs.is_empty() {
                let n = copied.pairs.len();
                let first = copied.pairs.iter().take(3).cloned().collect::<Vec<_>>();
                let more = if n > 3 { ", …" } else { "" };
                log("master", format!("cluster: {n} certificate(s) taken from the fleet into the store ({}{more})", first.join(", ")));
            }
            for why in copied.refused.iter().take(3) {
                log("master", format!("cluster: {why}"));
            }
        });
    }
}

/// Other members' DNS-01 records (`acme/proofs/dns-01/IDENTIFIER`) answered by this member's
/// own zone too, or taken from it once deleted: the proofs this member can say it has — all
/// of them when it answers no zone (the CA's resolver never asks it), none when its server
/// could not start.
async fn answer_records(
    dns: Option<impl std::future::Future<Output = super::acme_dns::DnsStarted>>,
    records: Vec<SharedFile>,
) -> Vec<String> {
    let publisher = match dns {
        Some(started) => match started.await {
            Ok(publisher) => Some(publisher),
            Err(_) => return Vec::new(),
        },
        None => None,
    };
    let mut answered = Vec::new();
    for record in records {
        let proof = record.path.trim_start_matches("acme/proofs/");
        let Some(identifier) = acme_fleet::dns_proof_identifier(proof) else {
            log(
                "master",
                format!("cluster: the fleet's DNS-01 record {proof:?} names no host; left out"),
            );
            continue;
        };
        let value = record.value.as_deref().map(String::from_utf8_lossy);
        let mirrored = match &publisher {
            Some(publisher) => publisher.mirror(identifier, value.as_deref()).await,
            None => Ok(false),
        };
        match mirrored {
            Ok(_) if value.is_some() => answered.push(proof.to_string()),
            Ok(_) => {}
            Err(e) => log(
                "master",
                format!("acme: {identifier}: the fleet's DNS-01 record is not answered here: {e}"),
            ),
        }
    }
    answered
}

/// Whether `name` from etcd can be a file's name in the store: nothing that leaves it, no
/// hidden file (a store name is a host's, `_.` for a wildcard, or an address).
fn file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-:[]".contains(&b))
}

/// Copies `files` into their places.
fn copy(places: &Places, files: Vec<SharedFile>) -> Copied {
    let mut copied = Copied::default();
    for file in files {
        let outcome = if let Some(stem) = file.path.strip_prefix("certs/") {
            copy_pair(places, stem, file.value.as_deref()).map(|taken| {
                if taken {
                    copied.pairs.push(stem.to_string());
                }
            })
        } else if let Some(proof) = file.path.strip_prefix("acme/proofs/") {
            let folder = places.challenges.as_ref().map_err(String::clone);
            let copied_here = folder.and_then(|f| copy_proof(f, proof, file.value.as_deref()));
            copied_here.map(|here| {
                if here {
                    copied.proofs.push(proof.to_string());
                }
            })
        } else if let Some(account) = file.path.strip_prefix("acme/accounts/") {
            copy_account(places, account, file.value.as_deref())
        } else {
            Ok(())
        };
        if let Err(e) = outcome {
            copied.refused.push(e);
        }
    }
    copied
}

/// `stem`'s pair written into the store when it differs from what is there: whether it was.
fn copy_pair(places: &Places, stem: &str, value: Option<&[u8]>) -> Result<bool, String> {
    let (Some(store), Some(keys), Some(value)) = (&places.store, &places.keys, value) else {
        return Ok(false);
    };
    if !file_name(stem) {
        return Err(format!(
            "the fleet's certificate {stem:?} is not a store name; left out"
        ));
    }
    let (key, chain) = acme_fleet::open_pair(keys, stem, value)?;
    let (key_file, chain_file) = (
        store.join(format!("{stem}.key")),
        store.join(format!("{stem}.pem")),
    );
    if std::fs::read(&chain_file).is_ok_and(|c| c == chain)
        && std::fs::read(&key_file).is_ok_and(|k| k == key)
    {
        return Ok(false);
    }
    // The key first: the store's scan takes a pair when its chain changes.
    crate::os::private_dir::write_private(&key_file, &key)?;
    crate::os::private_dir::write_private(&chain_file, &chain)?;
    Ok(true)
}

/// A challenge's proof put into (or, deleted, taken from) the folder the workers answer
/// from: whether it is there now.
fn copy_proof(folder: &Path, file: &str, value: Option<&[u8]>) -> Result<bool, String> {
    if !acme_fleet::is_proof_file(file) {
        return Err(format!(
            "the fleet's proof {file:?} is not a token's; left out"
        ));
    }
    let path = folder.join(file);
    let Some(bytes) = value else {
        let _ = std::fs::remove_file(&path);
        return Ok(false);
    };
    use std::os::unix::fs::PermissionsExt;
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    let parent = path.parent().unwrap_or(folder);
    std::fs::create_dir_all(parent)
        .and_then(|()| open(folder))
        .and_then(|()| open(parent))
        .and_then(|()| std::fs::write(&path, bytes))
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

/// The fleet's ACME account kept in the store's `.acme/` when this member has none.
fn copy_account(places: &Places, file: &str, value: Option<&[u8]>) -> Result<(), String> {
    let (Some(store), Some(keys), Some(value)) = (&places.store, &places.keys, value) else {
        return Ok(());
    };
    if !file_name(file) {
        return Err(format!(
            "the fleet's account {file:?} is not a file name; left out"
        ));
    }
    let path = store.join(".acme").join(file);
    if path.exists() {
        return Ok(());
    }
    let text = std::str::from_utf8(value).map_err(|_| "the fleet's account is not text")?;
    let json = crate::tls::fleet_keys::open_account(keys, file, text)?;
    crate::os::private_dir::write_private(&path, &json)
}
