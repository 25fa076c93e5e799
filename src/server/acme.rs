//! Ordering one certificate from an ACME directory (RFC 8555) for the master, with
//! instant-acme — a kept, async, pure-Rust client made for this and tested against pebble by
//! its authors (its nonce handling retries `badNonce` by itself). Its HTTP client is
//! hyper-rustls; a private directory's TLS authority is `[server.acme] ca`.
//!
//! Owns: the account (made once per directory — bound to an external account where the
//! directory asks, EAB — its credentials kept in the store's `.acme/` folder, mode 0600,
//! read by the master alone, never by a pool), one order for one
//! host name by HTTP-01 (the key authorization written where the workers answer
//! `/.well-known/acme-challenge/` from, see [`challenge_dir`]), TLS-ALPN-01 or DNS-01 (its
//! record published by `super::acme_dns` — and in a fleet, where the own zone answers it,
//! through etcd for every member's zone), the new key and its CSR
//! (rcgen), and the issued pair written into the store atomically (the key, then the chain,
//! each renamed into place, mode 0600). Must not touch: when to order (the supervisor's
//! `acme`), or serving the pair (the store's pickup hands it to the workers).

use super::causes::causes;
use crate::config::{AcmeSettings, Config};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long an order may wait for the directory to validate and to issue.
const ORDER_WAIT: Duration = Duration::from_secs(60);

/// `step` bounded by `wait` — `[server.acme] timeout`, one request's time (`patience` more
/// where it polls) — so that a directory that takes the connection and never answers does
/// not hold an order (and the on-demand slot it fills) for ever: its error, or that the
/// directory did not answer `what` in time.
async fn within<T, E: std::fmt::Display>(
    what: &str,
    (wait, patience): (Duration, Duration),
    step: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(wait + patience, step).await {
        Ok(r) => r.map_err(|e| format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: the directory did not answer within {:?}",
            wait + patience
        )),
    }
}

/// Whether an order's error says the directory no longer knows the account (RFC 8555
/// §7.3.1: a CA reset, or an account deactivated elsewhere).
pub fn account_gone(cause: &str) -> bool {
    cause.contains("accountDoesNotExist")
}

/// Moves `settings`' account file in `store` aside (`….json.gone-<unix time>`), so the next
/// [`account`] registers a new one; the file kept aside, in case the directory was wrong.
pub fn set_account_aside(settings: &AcmeSettings, store: &Path) -> Result<PathBuf, String> {
    let file = account_file(settings, store);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let aside = file.with_extension(format!("json.gone-{stamp}"));
    std::fs::rename(&file, &aside)
        .map_err(|e| format!("cannot move {} aside: {e}", file.display()))?;
    Ok(aside)
}

/// Where the master writes HTTP-01 key authorizations and every worker reads them from: a
/// folder in this master's own runtime folder (random name, removed when it stops), readable
/// by every pool's user (a key authorization is public: the token and the account key's
/// thumbprint). Not named by the admin port, as it was: two servers in two network
/// namespaces may share a port and `/run`, and an upgrade's new master shares its old one's
/// — the old master's stop took the folder of the new one's orders under way.
pub fn challenge_dir() -> Result<PathBuf, String> {
    Ok(super::runtime::ensure_runtime_dir()?.join("acme"))
}

/// The account for `settings`' directory: the one kept in `store/.acme/` if there is one,
/// else a new one registered now and kept there.
pub async fn account(settings: &AcmeSettings, store: &Path) -> Result<Account, String> {
    let file = account_file(settings, store);
    let builder = || match &settings.ca {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    };
    let builder = builder().map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    if let Ok(text) = std::fs::read_to_string(&file) {
        let credentials: AccountCredentials = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not an account's credentials: {e}", file.display()))?;
        let from = async {
            (builder.from_credentials(credentials).await)
                .map_err(|e| format!("cannot reach {}: {}", settings.directory, causes(&e)))
        };
        return within("the account", (settings.timeout, Duration::ZERO), from).await;
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contacts,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let binding = (settings.eab.as_ref())
        .map(|(kid, key)| instant_acme::ExternalAccountKey::new(kid.clone(), key));
    let created = async {
        let created = builder.create(&new, settings.directory.clone(), binding.as_ref());
        (created.await).map_err(|e| {
            let why = causes(&e);
            format!(
                "cannot register an account at {}: {why}",
                settings.directory
            )
        })
    };
    let (account, credentials) =
        within("a new account", (settings.timeout, Duration::ZERO), created).await?;
    let text = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
    crate::os::private_dir::write_private(&file, &text)?;
    Ok(account)
}

/// `store/.acme/account-<hash of the directory's URL>.json`: one account per directory.
pub fn account_file(settings: &AcmeSettings, store: &Path) -> PathBuf {
    let hash = xxhash_rust::xxh3::xxh3_64(settings.directory.as_bytes());
    store
        .join(".acme")
        .join(format!("account-{hash:016x}.json"))
}

/// How a name's control is proven to the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proof {
    /// HTTP-01: a key authorization at `/.well-known/acme-challenge/TOKEN` on port 80.
    Http01,
    /// TLS-ALPN-01 (RFC 8737): a certificate of the key authorization's digest, shown in a
    /// handshake with ALPN `acme-tls/1` on port 443 — for a name with no http:// binding.
    TlsAlpn01,
    /// DNS-01: a TXT record at `_acme-challenge.NAME` — a wildcard's only proof
    /// (`[server.acme.dns]`).
    Dns01,
}

/// The host names `config` orders certificates for — those of https bindings of sites that
/// take theirs from the store — and how each is proven: by DNS-01 where
/// `[server.acme.dns]` says (every wildcard, which nothing else proves, and every name with
/// `names = "all"`, but an IP address), else by HTTP-01 where a site has an http:// binding
/// that answers the name, else by TLS-ALPN-01 on its https address. Without DNS-01,
/// wildcards are left out. A host that is an IP address gets an IP certificate (RFC 8738).
pub fn names(config: &Config) -> Vec<(String, Proof)> {
    let dns = config.server.acme.as_ref().and_then(|a| a.dns.as_ref());
    let mut names: std::collections::BTreeMap<String, Proof> = Default::default();
    for site in config.sites.iter().filter(|s| s.tls.is_none()) {
        let hosts = (site.bindings.iter())
            .filter(|b| b.tls)
            .filter_map(|b| b.host.as_deref())
            .filter(|h| dns.is_some() || !h.starts_with("*."));
        for host in hosts {
            let http = (site.bindings.iter())
                .any(|b| !b.tls && b.host.as_deref().is_none_or(|h| h == host));
            // An address cannot be proven in DNS (RFC 8738 §7).
            let address = crate::certs::store::host_address(host).is_some();
            let proof = match (dns, http) {
                (Some(d), _) if (d.all_names && !address) || host.starts_with("*.") => Proof::Dns01,
                (_, true) => Proof::Http01,
                (_, false) => Proof::TlsAlpn01,
            };
            let known = names.entry(host.to_string()).or_insert(proof);
            // A name any site answers over http:// is proven there.
            if proof == Proof::Http01 {
                *known = proof;
            }
        }
    }
    names.into_iter().collect()
}

/// Where an order's proofs go: the folder the workers answer HTTP-01 and TLS-ALPN-01 from
/// (`TOKEN`, or `tls-alpn-01/NAME.pem` and `.key`), and DNS-01's publisher, when there is
/// one (`[server.acme.dns]`).
#[derive(Clone, Copy)]
pub struct Answering<'a> {
    pub files: &'a Path,
    pub dns: Option<&'a crate::server::acme_dns::TxtPublisher>,
    /// A fleet's etcd, where the files are published too: every member answers them.
    pub fleet: Option<&'a super::acme_fleet::FleetLink>,
}

/// How long an order waits for every member of its fleet to have a challenge's proof before
/// the directory is told to look: a member slow to copy it fails one validation, no more.
const FLEET_PROOFS_WAIT: Duration = Duration::from_secs(5);

/// What an order put out for the directory to see, taken away when it ends.
#[derive(Default)]
struct Proofs {
    files: Vec<PathBuf>,
    records: Vec<crate::server::acme_dns::Published>,
    /// The files' names as the fleet's etcd holds them.
    shared: Vec<String>,
}

/// Orders a certificate for `name` (a wildcard's is `*.shop.example`, by DNS-01), proven
/// `how`, with the certificate profile `profile` when one is set, and writes it into `store`
/// (`NAME.key`, then `NAME.pem`; a wildcard's `_.shop.example.*`, the store's naming); what
/// answers the challenge is put where `answering` says while the directory validates, and
/// taken away after, whatever the outcome.
pub async fn order(
    account: &Account,
    (name, how, profile): (&str, Proof, Option<&str>),
    answering: Answering<'_>,
    store: &Path,
    wait: Duration,
) -> Result<(), String> {
    // An IP address's certificate (RFC 8738: `[::1]` as a binding writes it, `::1` to the CA).
    let address = crate::certs::store::host_address(name);
    let subject = address.map_or(name.to_string(), |ip| ip.to_string());
    let identifiers = [match address {
        Some(ip) => Identifier::Ip(ip),
        None => Identifier::Dns(name.to_string()),
    }];
    if let Some(profile) = profile {
        offered_profile(account, profile)?;
    }
    // A renewal names the certificate it replaces (ARI, RFC 9773 §5): a CA may give it its
    // own rate limits, and knows which certificate may be revoked. A directory without ARI,
    // or one that refuses the field (a certificate of another account or CA), gets the order
    // without it, as §5 asks.
    let stem = crate::certs::store::stem(name);
    let replaced = (std::fs::read(store.join(format!("{stem}.pem"))).ok())
        .and_then(|chain| identifier_of(&chain).ok());
    let refused = "the order was refused";
    let asked = match replaced {
        Some(replaced) => {
            let new_order = new_order(&identifiers, profile, Some(replaced));
            let asked = within(
                refused,
                (wait, Duration::ZERO),
                account.new_order(&new_order),
            );
            asked.await.ok()
        }
        None => None,
    };
    let mut order = match asked {
        Some(order) => order,
        None => {
            let new_order = new_order(&identifiers, profile, None);
            within(
                refused,
                (wait, Duration::ZERO),
                account.new_order(&new_order),
            )
            .await?
        }
    };
    let mut proofs = Proofs::default();
    let answered = answer_challenges(&mut order, how, (answering, wait), &mut proofs).await;
    let issued = match answered {
        Ok(()) => finish(&mut order, &subject, wait).await,
        Err(e) => Err(e),
    };
    for file in proofs.files {
        let _ = std::fs::remove_file(file);
    }
    if let Some(fleet) = answering.fleet {
        fleet.withdraw_proofs(&proofs.shared).await;
    }
    for record in proofs.records {
        if let Some(dns) = answering.dns {
            if let Err(e) = dns.withdraw(record, wait).await {
                super::log(
                    "master",
                    format!("acme: {name}: the DNS-01 record stays: {e}"),
                );
            }
        }
    }
    let hint = answering.dns.and_then(|dns| dns.hint(name));
    let issued = match (issued, hint) {
        (Err(e), Some(hint)) if how == Proof::Dns01 => Err(format!("{e} ({hint})")),
        (issued, _) => issued,
    };
    let (key, chain) = issued?;
    let stem = crate::certs::store::stem(name);
    crate::os::private_dir::write_private(&store.join(format!("{stem}.key")), key.as_bytes())?;
    crate::os::private_dir::write_private(&store.join(format!("{stem}.pem")), chain.as_bytes())
}

/// Whether the directory lists the certificate profile `profile` (its `meta.profiles`): one
/// it does not would be refused by it, or — by a directory without the profiles extension —
/// silently ignored, giving a certificate of another lifetime than the one asked for.
fn offered_profile(account: &Account, profile: &str) -> Result<(), String> {
    let offered: Vec<&str> = account.profiles().map(|p| p.name).collect();
    if offered.contains(&profile) {
        return Ok(());
    }
    let listed = match offered.is_empty() {
        true => "none: it does not speak the ACME profiles extension".to_string(),
        false => offered.join(", "),
    };
    Err(format!("the directory offers no certificate profile `{profile}` (it offers {listed}); set [server.acme] profile to one it offers, or remove it"))
}

/// Puts every pending authorization's proof where the directory will look (the files the
/// workers answer from, or DNS-01's record), noted in `proofs`, and tells the directory it
/// may look.
async fn answer_challenges(
    order: &mut instant_acme::Order,
    how: Proof,
    (answering, wait): (Answering<'_>, Duration),
    proofs: &mut Proofs,
) -> Result<(), String> {
    let folder = proof_folder(how, &answering)?;
    let kind = match how {
        Proof::Http01 => ChallengeType::Http01,
        Proof::TlsAlpn01 => ChallengeType::TlsAlpn01,
        Proof::Dns01 => ChallengeType::Dns01,
    };
    let mut authorizations = order.authorizations();
    loop {
        let next = async { Ok::<_, String>(authorizations.next().await) };
        let Some(authorization) = within("authorization", (wait, Duration::ZERO), next).await?
        else {
            break;
        };
        let mut authorization = authorization.map_err(|e| format!("authorization: {e}"))?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("the authorization is {other:?}")),
        }
        let mut challenge = (authorization.challenge(kind.clone()))
            .ok_or(format!("the directory offers no {kind:?} challenge"))?;
        let proof = challenge.key_authorization();
        let files: Vec<(PathBuf, Vec<u8>)> = match (how, &folder) {
            (Proof::Http01, Some(folder)) => {
                let token = challenge.token.clone();
                let word = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
                if token.is_empty() || !token.bytes().all(word) {
                    return Err(format!(
                        "the directory sent a token that is no base64url word: {token:?}"
                    ));
                }
                vec![(folder.join(token), proof.as_str().as_bytes().to_vec())]
            }
            (Proof::TlsAlpn01, Some(folder)) => {
                let name = challenge.identifier().to_string();
                let (cert, key) = alpn_certificate(&name, proof.digest().as_ref())?;
                vec![
                    (folder.join(format!("{name}.key")), key.into_bytes()),
                    (folder.join(format!("{name}.pem")), cert.into_bytes()),
                ]
            }
            _ => {
                let dns = answering
                    .dns
                    .ok_or("DNS-01 has no publisher ([server.acme.dns])")?;
                // `*.shop.example` for a wildcard's authorization.
                let name = challenge.identifier().to_string();
                let value = proof.dns_value();
                proofs.records.push(dns.publish(&name, &value, wait).await?);
                // Every member's server of the zone answers it: the CA's resolver may ask any.
                vec![(
                    super::acme_fleet::dns_proof_file(&name).into(),
                    value.into(),
                )]
            }
        };
        let shared = place_proofs(how, &answering, files, proofs).await?;
        if let Some(fleet) = answering.fleet.filter(|_| !shared.is_empty()) {
            fleet.wait_for_proofs(&shared, FLEET_PROOFS_WAIT).await;
        }
        within(
            "the challenge was refused",
            (wait, Duration::ZERO),
            challenge.set_ready(),
        )
        .await?;
    }
    Ok(())
}

/// The folder the workers answer `how`'s proofs from (none for DNS-01), made and opened to
/// them.
fn proof_folder(how: Proof, answering: &Answering<'_>) -> Result<Option<PathBuf>, String> {
    let folder = match how {
        Proof::Http01 => answering.files.to_path_buf(),
        Proof::TlsAlpn01 => answering.files.join("tls-alpn-01"),
        Proof::Dns01 => return Ok(None),
    };
    // `answering.files` is in the master's own runtime folder, made fresh by it (a folder
    // planted by another user would let it answer for our names): no one else's.
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    std::fs::create_dir_all(&folder)
        .and_then(|()| open(answering.files))
        .and_then(|()| open(&folder))
        .map_err(|e| format!("cannot use {}: {e}", folder.display()))?;
    Ok(Some(folder))
}

/// Writes one authorization's proof `files` where the workers answer them (a DNS-01
/// record's only to a fleet), each noted in `proofs`; the names shared with the fleet.
async fn place_proofs(
    how: Proof,
    answering: &Answering<'_>,
    files: Vec<(PathBuf, Vec<u8>)>,
    proofs: &mut Proofs,
) -> Result<Vec<String>, String> {
    let mut shared = Vec::new();
    for (file, bytes) in files {
        // DNS-01's record, shared when the own zone answers it (an update is the name's).
        if how == Proof::Dns01 {
            let own = answering.dns.is_some_and(|dns| dns.is_own());
            if let Some(fleet) = answering.fleet.filter(|_| own) {
                let file = file.to_string_lossy().into_owned();
                fleet.publish_proof(&file, &bytes).await?;
                proofs.shared.push(file.clone());
                shared.push(file);
            }
            continue;
        }
        std::fs::write(&file, &bytes)
            .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        if let (Some(fleet), Ok(name)) = (answering.fleet, file.strip_prefix(answering.files)) {
            let name = name.to_string_lossy().into_owned();
            fleet.publish_proof(&name, &bytes).await?;
            proofs.shared.push(name.clone());
            shared.push(name);
        }
        proofs.files.push(file);
    }
    Ok(shared)
}

/// The TLS-ALPN-01 certificate of `name` (RFC 8737 §3): self-signed, its critical
/// `acmeIdentifier` extension the SHA-256 `digest` of the key authorization; (chain, key)
/// in PEM. Its key is made for it and thrown away with it.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("cannot make the TLS-ALPN-01 certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Waits for the order to be ready, sends the CSR of a new key, and waits for the chain:
/// the key and the chain, PEM.
async fn finish(
    order: &mut instant_acme::Order,
    name: &str,
    wait: Duration,
) -> Result<(String, String), String> {
    let patience = RetryPolicy::new().timeout(ORDER_WAIT);
    let status = within(
        "the directory did not validate the challenge",
        (wait, ORDER_WAIT),
        order.poll_ready(&patience),
    )
    .await?;
    if status != OrderStatus::Ready {
        return Err(format!("the order is {status:?}, not ready"));
    }
    let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
    let params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    let csr = params
        .serialize_request(&key)
        .map_err(|e| format!("cannot make the CSR: {e}"))?;
    within(
        "the CSR was refused",
        (wait, Duration::ZERO),
        order.finalize_csr(csr.der()),
    )
    .await?;
    let chain = within(
        "no certificate came",
        (wait, ORDER_WAIT),
        order.poll_certificate(&patience),
    )
    .await?;
    Ok((key.serialize_pem(), chain))
}

/// The directory's renewal information (ARI, RFC 9773) for the certificate whose chain (PEM,
/// leaf first) is `chain`: a time picked uniformly at random in its suggested window (now,
/// when the window has begun) and how long until it may be asked again; `Ok(None)` when the
/// directory offers no renewal information (then espalier's own schedule stands).
pub async fn renewal_time(
    account: &Account,
    chain: &[u8],
) -> Result<Option<(std::time::SystemTime, Duration)>, String> {
    let id = identifier_of(chain)?;
    match account.renewal_info(&id).await {
        Ok((info, again)) => {
            let window = &info.suggested_window;
            let at = pick_in_window(window.start.unix_timestamp(), window.end.unix_timestamp());
            Ok(Some((at, again)))
        }
        Err(instant_acme::Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(format!("renewal information: {e}")),
    }
}

/// What ARI calls the certificate whose chain (PEM, leaf first) is `chain`: its authority
/// key identifier and serial number (RFC 9773 §4.1).
fn identifier_of(chain: &[u8]) -> Result<instant_acme::CertificateIdentifier<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain)
        .next()
        .ok_or("no certificate in the pair")?
        .map_err(|e| format!("the pair's certificate cannot be read: {e}"))?;
    Ok(instant_acme::CertificateIdentifier::try_from(&leaf)?.into_owned())
}

/// The new-order request for `identifiers`, with the certificate profile `profile` and the
/// certificate it `replaces`, where given.
fn new_order<'a>(
    identifiers: &'a [Identifier],
    profile: Option<&'a str>,
    replaces: Option<instant_acme::CertificateIdentifier<'a>>,
) -> NewOrder<'a> {
    let mut order = NewOrder::new(identifiers);
    if let Some(profile) = profile {
        order = order.profile(profile);
    }
    if let Some(replaces) = replaces {
        order = order.replaces(replaces);
    }
    order
}

/// A uniformly random time in the window from `start` to `end` (Unix seconds; RFC 9773 §4.2:
/// so that a CA's many certificates are not all renewed at once) — never before now.
fn pick_in_window(start: i64, end: i64) -> std::time::SystemTime {
    let span = end.saturating_sub(start).max(0) as f64;
    let secs = start.saturating_add((fastrand::f64() * span) as i64).max(0) as u64;
    let at = std::time::UNIX_EPOCH + Duration::from_secs(secs);
    at.max(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn a_renewal_window_is_picked_in_and_never_before_now() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        for _ in 0..100 {
            let at = pick_in_window(now + 1000, now + 2000);
            let secs = at.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
            assert!((now + 1000..=now + 2000).contains(&secs), "{secs}");
        }
        // A window already begun (a CA asking for renewal now, after a mass revocation).
        let past = pick_in_window(now - 2000, now - 1000);
        assert!(past >= SystemTime::now() - Duration::from_secs(1));
        // A window whose end is before its start is taken as its start.
        let odd = pick_in_window(now + 500, now + 100);
        assert_eq!(
            odd.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            now + 500
        );
    }

    #[test]
    fn a_renewal_names_the_certificate_it_replaces() {
        let identifiers = [Identifier::Dns("a.test".into())];
        let (aki, serial) = ([1u8, 2, 3, 4], [0x0au8, 0xbc]);
        let id = instant_acme::CertificateIdentifier::new(aki[..].into(), serial[..].into());
        let order = new_order(&identifiers, Some("shortlived"), Some(id));
        let sent = serde_json::to_value(&order).unwrap();
        assert_eq!(sent["replaces"], "AQIDBA.Crw");
        assert_eq!(sent["profile"], "shortlived");
        let first = serde_json::to_value(new_order(&identifiers, None, None)).unwrap();
        assert!(first.get("replaces").is_none() && first.get("profile").is_none());
    }

    #[test]
    fn an_issued_certificate_is_named_as_ari_names_it() {
        // RFC 9773 §4.1: base64url(AKI keyIdentifier) "." base64url(serial), as a CA's
        // certificate signed by an authority carries them.
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![1, 2, 3, 4]);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x0a, 0xbc]));
        leaf.use_authority_key_identifier_extension = true;
        let leaf = leaf.signed_by(&key, &ca, &ca_key).unwrap();
        let id = instant_acme::CertificateIdentifier::try_from(leaf.der()).unwrap();
        assert_eq!(id.to_string(), "AQIDBA.Crw");
    }
}
