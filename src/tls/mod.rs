//! TLS for `https://` bindings, with rustls (AWS-LC provider, post-quantum key exchange
//! first: see [`crate::certs::provider`]): each site's certificate loaded
//! and checked, chosen per connection by SNI, and the server configuration of an https
//! address.
//!
//! Owns: certificates' expiry warnings, the SNI
//! resolver (a site's own certificate, or the store's for the name asked, or — for an ACME
//! directory's TLS-ALPN-01 validation — the challenge certificate of an order under way;
//! with `on_demand`, which handshakes are held for a certificate not yet there, see
//! [`on_demand`]), and the rustls `ServerConfig` (TLS 1.2 and 1.3 only, rustls's modern suites,
//! ALPN `http/1.1`, session tickets whose keys the pool's workers share ([`tickets`]; a
//! fleet's members too, their secrets sealed for its etcd: [`fleet_keys`]) and a
//! session cache shared by the threads of a worker — for HTTP/3's 0-RTT, by the pool's workers
//! ([`session_table`])),
//! with the client-certificate verifier of the address's sites' `client_certs`; and TLS as a
//! client ([`client`]: upstream servers, the load generator); what the kernel's TLS needs of
//! a connection ([`kernel`]).
//! Must not touch: the handshake's place among a connection's steps (`http::accept`) or
//! HTTP.
//!
//! A worker builds its configurations once, before it drops to its pool's user (key files
//! are usually readable by root alone), and its threads share them: a session resumed on
//! any thread of the worker — of its NUMA node — finds its cache entry, and one resumed by
//! ticket on any worker of the pool finds its key.

pub mod client;
pub mod fleet_keys;
pub mod kernel;
pub mod on_demand;
pub mod session_table;
pub mod tickets;

use crate::certs::store::StoreKeys;
use crate::certs::{load, provider, TlsFiles};
use crate::config::SiteSpec;
use crate::routing::hosts::HostTable;
use crate::routing::GroupRoutes;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The ALPN protocol of an ACME directory's TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// How close to its expiry a certificate is warned about, by `check` and at start.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// Sessions each worker's cache keeps for resumption without a ticket (TLS 1.2 clients
/// that do not take tickets).
const SESSION_CACHE: usize = 16 * 1024;

/// Each site certificate: the site, its files, its `notAfter` (read when the config was
/// loaded, so no file is read again) and the time left.
fn expiries(
    sites: &[std::sync::Arc<SiteSpec>],
    now: SystemTime,
) -> Vec<(&SiteSpec, &TlsFiles, SystemTime, Duration)> {
    sites
        .iter()
        .filter_map(|s| {
            let files = s.tls.as_ref()?;
            let not_after = UNIX_EPOCH + Duration::from_secs(files.not_after);
            Some((&**s, files, not_after, not_after.duration_since(now).ok()?))
        })
        .collect()
}

/// Each site certificate's whole days left: (site, file, days, who renews it), for
/// `espalier doctor`.
pub fn days_left(
    sites: &[std::sync::Arc<SiteSpec>],
    now: SystemTime,
) -> Vec<(String, String, i64, Option<String>)> {
    expiries(sites, now)
        .into_iter()
        .map(|(s, files, _, left)| {
            let days = (left.as_secs() / 86_400) as i64;
            (s.name.clone(), files.cert.display().to_string(), days, None)
        })
        .collect()
}

/// The sites' certificates that expire within [`EXPIRY_WARNING`] of `now`, as warning lines.
pub fn expiry_warnings(sites: &[std::sync::Arc<SiteSpec>], now: SystemTime) -> Vec<String> {
    expiries(sites, now)
        .into_iter()
        .filter(|(_, _, _, left)| *left < EXPIRY_WARNING)
        .map(|(s, files, not_after, left)| {
            format!(
                "warning: site `{}`: certificate {} expires on {} (in {} days); renew it",
                s.name,
                files.cert.display(),
                humantime::format_rfc3339_seconds(not_after),
                left.as_secs() / 86_400
            )
        })
        .collect()
}

/// Chooses a connection's certificate by SNI, as the address's hosts choose its site: an
/// exact name, then the longest wildcard, then the default site's; none → a handshake alert.
#[derive(Debug)]
struct BySni {
    hosts: HostTable,
    /// By site index (the config's): the certificate of each site on the address that names
    /// its own (`tls = {…}`).
    keys: Vec<Option<Arc<CertifiedKey>>>,
    /// The certificate store's pairs the master sent for the worker's sites without `tls`.
    store: Arc<StoreKeys>,
    /// Handshakes refused for want of a certificate, told to the operator.
    refusals: Refusals,
    /// With `[server.acme]`: the folder whose `tls-alpn-01/NAME.pem` and `.key` answer a
    /// directory's TLS-ALPN-01 validation of NAME while its order is under way.
    acme: Option<std::path::PathBuf>,
    /// With `[server.acme] on_demand`: the names held for their certificates.
    on_demand: Option<Arc<on_demand::OnDemand>>,
    /// The name a handshake without SNI is taken for: the address's one binding host that is
    /// an IP address — a client of `https://192.0.2.1/` sends none (SNI cannot carry an
    /// address, RFC 6066 §3) — so that its certificate for the address is found.
    without_sni: Option<String>,
}

impl BySni {
    fn certificate(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let name = name.or(self.without_sni.as_deref());
        let site = self.hosts.site(name)?;
        match self.keys.get(site)? {
            Some(key) => Some(Arc::clone(key)),
            None => self.store.find(name?),
        }
    }
}

/// An https address's handshakes that may be held for a certificate ordered on demand: a
/// name one of the address's sites takes, without a certificate yet.
#[derive(Debug, Clone)]
pub struct Held(Arc<BySni>);

impl Held {
    /// Waits for `name`'s certificate when the address has a site for it and no
    /// certificate (see [`on_demand`]); at once otherwise.
    pub async fn wait(&self, name: &str) {
        if let Some((demand, name)) = self.0.to_order(name) {
            demand.hold(&name).await
        }
    }

    /// The address's resolver for handshakes that cannot be held (QUIC's: quinn hands the
    /// ClientHello to rustls inside its handshake): as the address's own, and where it has no
    /// certificate for a name it would hold, it asks for it (see [`on_demand`]) — the
    /// handshake fails, and the client's next one finds the certificate.
    pub fn asking(&self) -> Arc<dyn ResolvesServerCert> {
        Arc::new(Asking(Arc::clone(&self.0)))
    }
}

/// See [`Held::asking`].
#[derive(Debug)]
struct Asking(Arc<BySni>);

impl ResolvesServerCert for Asking {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().map(str::to_owned);
        let key = self.0.resolve(hello);
        if key.is_none() {
            if let Some((demand, name)) = name.as_deref().and_then(|n| self.0.to_order(n)) {
                let _ = demand.ask(&name);
            }
        }
        key
    }
}

impl BySni {
    /// The way to order `name` (and the name as ordered) when certificates are ordered on
    /// demand and one of the address's sites takes it, without a certificate yet.
    fn to_order(&self, name: &str) -> Option<(&Arc<on_demand::OnDemand>, String)> {
        let demand = self.on_demand.as_ref()?;
        if !plain_host_name(name) || name.parse::<std::net::IpAddr>().is_ok() {
            return None;
        }
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if self.hosts.site(Some(&name)).is_none() || self.certificate(Some(&name)).is_some() {
            return None;
        }
        Some((demand, name))
    }
}

/// Whether `name` (the client's, from a ClientHello) is spelled as a host name: letters,
/// digits, `-` and `.`, no empty label, at most 253 bytes.
pub fn plain_host_name(name: &str) -> bool {
    let host = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'.';
    let at_most = 253; // a DNS name's longest
    !name.is_empty()
        && name.len() <= at_most
        && !name.starts_with('.')
        && !name.contains("..")
        && name.bytes().all(host)
}

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name();
        if let Some(dir) = &self.acme {
            let mut alpn = hello.alpn().into_iter().flatten();
            if alpn.any(|p| p == ACME_TLS_ALPN) {
                return name.and_then(|n| acme_certificate(dir, n));
            }
        }
        let key = self.certificate(name);
        if key.is_none() {
            let taken = self.hosts.site(name).is_some();
            self.refusals.note(name, taken);
        }
        key
    }
}

/// The TLS-ALPN-01 certificate the master made for `name`'s order under way (its
/// `acmeIdentifier` extension holds the key authorization's digest), read when asked: a
/// validation is rare, and the files live only while the order does.
fn acme_certificate(dir: &std::path::Path, name: &str) -> Option<Arc<CertifiedKey>> {
    // A name from the ClientHello is the client's: only a host name's bytes are looked up.
    if !plain_host_name(name) {
        return None;
    }
    // An IP address's validation names it by its reverse name (RFC 8738 §6).
    let address = crate::certs::dns01::reverse_name_address(name).map(|ip| ip.to_string());
    let name = address.as_deref().unwrap_or(name);
    let (cert, key) = (
        dir.join(format!("tls-alpn-01/{name}.pem")),
        dir.join(format!("tls-alpn-01/{name}.key")),
    );
    let (chain, key) = (std::fs::read(&cert).ok()?, std::fs::read(&key).ok()?);
    // Not `certs::from_pem`: its check that the key belongs to the certificate goes through
    // webpki, which refuses the critical `acmeIdentifier` extension it does not know — as it
    // should for a site's certificate, never served to a client that would verify this one.
    use rustls::pki_types::pem::PemObject;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(&chain)
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&key).ok()?;
    let signing = provider().key_provider.load_private_key(key).ok()?;
    Some(Arc::new(CertifiedKey::new(chain, signing)))
}

/// A handshake refused for a name no site has is logged — else a client sees only an alert
/// (curl: "access denied") and the operator nothing — bounded as every flood of one cause is
/// ([`crate::os::nth_worth_logging`]: the first ten, then each power of two, with the count so
/// far): names are the client's to choose, so a scan must not flood the log.
#[derive(Debug)]
struct Refusals {
    /// Who logs (the worker) and the address (`https://…`).
    who: String,
    url: String,
    /// Handshakes refused so far by this worker on this address.
    count: std::sync::atomic::AtomicU64,
}

impl Refusals {
    fn new(who: &str, url: String) -> Self {
        Refusals {
            who: who.to_string(),
            url,
            count: Default::default(),
        }
    }

    /// `taken`: a site takes the name, but no certificate of it is there (the store's pair
    /// missing, or not ordered yet).
    fn note(&self, name: Option<&str>, taken: bool) {
        let n = self
            .count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if !crate::os::nth_worth_logging(n) {
            return;
        }
        let asked = match name {
            // Names are the client's: shown escaped, cut short.
            Some(n) => format!(
                "the name `{}`",
                n.escape_debug().take(100).collect::<String>()
            ),
            None => "no name (the client sent none, as `curl https://IP/` does)".to_string(),
        };
        let why = if taken {
            "its site has no certificate for it (none in the store, or none ordered yet: see the master's `acme` lines)"
        } else {
            "no site of this address has it and none takes every name; add it to a site's bindings, or give one site a binding without a host"
        };
        crate::os::log(
            &self.who,
            format!(
                "{}: refused a TLS handshake for {asked}: {why} ({n} refused so far)",
                self.url
            ),
        );
    }
}

/// What a worker's https addresses answer for `[server.acme]`, beyond its sites'
/// certificates.
#[derive(Clone, Copy, Default)]
pub struct AcmeAnswers<'a> {
    /// The folder whose `tls-alpn-01/` holds the challenge certificates of orders under way.
    pub challenges: Option<&'a std::path::Path>,
    /// The names held for certificates ordered on demand.
    pub on_demand: Option<&'a Arc<on_demand::OnDemand>>,
}

/// The TLS configuration of an https address for the workers of `pool` (`who` in the log): the certificates of
/// the sites it serves, by SNI. Another pool's sites' keys are never read: their connections
/// are handed to that pool with the ClientHello unanswered (see `http::sni`), so pool A's
/// worker has no use for — and must not hold — pool B's private key.
pub fn server_config(
    group: &GroupRoutes,
    sites: &[std::sync::Arc<SiteSpec>],
    pool: &str,
    who: &str,
    store: &Arc<StoreKeys>,
    (kernel_tls, tickets): (bool, &Arc<tickets::SharedTicketer>),
    acme: AcmeAnswers<'_>,
) -> Result<(Arc<rustls::ServerConfig>, Option<Held>), String> {
    let AcmeAnswers {
        challenges: acme,
        on_demand,
    } = acme;
    let now = SystemTime::now();
    let mut keys: Vec<Option<Arc<CertifiedKey>>> = vec![None; sites.len()];
    for &(_, site) in &group.hosts {
        let Some(spec) = sites.get(site) else {
            continue;
        };
        if !spec.served_by(pool) {
            continue;
        }
        // Without `tls`, the site's names are in the store (the config made sure).
        let Some(files) = &spec.tls else {
            continue;
        };
        if keys[site].is_none() {
            keys[site] = Some(
                load(files, now)
                    .map_err(|e| format!("site `{}`: {e}", spec.name))?
                    .key,
            );
        }
    }
    let mut addresses = (group.hosts.iter())
        .filter_map(|(host, _)| host.as_deref())
        .filter(|h| crate::certs::store::host_address(h).is_some());
    let without_sni = match (addresses.next(), addresses.next()) {
        (Some(only), None) => Some(only.to_string()),
        _ => None,
    };
    let resolver = Arc::new(BySni {
        without_sni,
        hosts: HostTable::new(&group.hosts),
        keys,
        store: Arc::clone(store),
        refusals: Refusals::new(who, group.url()),
        acme: acme.map(std::path::Path::to_path_buf),
        on_demand: on_demand.cloned(),
    });
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?;
    // The sites of one address ask for client certificates alike (the config made sure).
    let asked = group
        .hosts
        .iter()
        .find_map(|&(_, site)| sites.get(site).and_then(|s| s.client_certs.as_ref()));
    let builder = match asked {
        None => builder.with_no_client_auth(),
        Some(c) => builder.with_client_cert_verifier(client_verifier(c)?),
    };
    let held = on_demand.map(|_| Held(Arc::clone(&resolver)));
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if acme.is_some() {
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
    // Ticket keys are the pool's, shared by its workers and rotated by the master (see
    // `tickets`): a client resumes whichever worker takes its next connection.
    config.ticketer = Arc::clone(tickets) as Arc<dyn rustls::server::ProducesTickets>;
    // The keys of a connection handed to the kernel (`http::ktls`) must be extractable.
    config.enable_secret_extraction = kernel_tls;
    Ok((Arc::new(config), held))
}

/// What checks a client's certificate: chained to the site's authority (and, `optional`, a
/// connection without one let in).
fn client_verifier(
    c: &crate::config::ClientCerts,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, String> {
    let name = c.ca.display().to_string();
    let pem = std::fs::read(&c.ca).map_err(|e| format!("{name} cannot be read: {e}"))?;
    let roots = crate::certs::client_roots(&pem, &name)?;
    let builder =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = if c.required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    builder
        .build()
        .map_err(|e| format!("client certificates of {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_challenge_certificate_is_read_for_host_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let alpn = dir.path().join("tls-alpn-01");
        std::fs::create_dir(&alpn).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(alpn.join("a.test.pem"), cert.pem()).unwrap();
        std::fs::write(alpn.join("a.test.key"), key.serialize_pem()).unwrap();
        // Beside the folder: what a name that climbs out of it would reach.
        std::fs::write(dir.path().join("x.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("x.key"), key.serialize_pem()).unwrap();
        assert!(acme_certificate(dir.path(), "a.test").is_some());
        let long = "a".repeat(300);
        for name in [
            "../x",
            "..",
            ".x",
            "a/../../x",
            "a\\x",
            "",
            "b.test",
            long.as_str(),
        ] {
            assert!(acme_certificate(dir.path(), name).is_none(), "{name}");
        }
    }
}
