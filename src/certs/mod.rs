//! A site's certificate files: loaded and checked (a PEM chain and key that belong together,
//! the leaf not expired, an OCSP response that is DER) and fingerprinted — below the config,
//! which checks them where they are named, and the TLS layer, which serves them.
//!
//! Owns: [`TlsFiles`], [`load`], [`fingerprint`], the certificate store's naming rule
//! and key cache ([`store`]), when a certificate is renewed ([`renewal`]), and DNS-01's
//! names ([`dns01`]). Must not touch: SNI, handshakes or the server configuration
//! (see `crate::tls`).

pub mod dns01;
pub mod renewal;
pub mod store;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A site's certificate: PEM files, resolved against the config file's folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsFiles {
    /// The chain, leaf first.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A DER OCSP response for the certificate, stapled to handshakes (renewed by whoever
    /// fetches it, then `espalier reload`); `None` = no stapling.
    #[serde(default)]
    pub ocsp: Option<PathBuf>,
    /// The leaf's `notAfter` (Unix seconds) when the config was loaded, for expiry warnings.
    #[serde(default)]
    pub not_after: u64,
    /// A hash of the files' contents when the config was loaded: a reload that finds new
    /// contents under the same names replaces the workers that serve them.
    #[serde(default)]
    pub fingerprint: u64,
}

/// A site's certificate, loaded and checked.
#[derive(Debug)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// The leaf's `notAfter`.
    pub not_after: SystemTime,
}

/// The crypto provider of every TLS configuration, server and client, over TCP and QUIC:
/// AWS-LC (aws-lc-rs), its key exchange groups X25519MLKEM768 first (a hybrid of X25519 and
/// the post-quantum ML-KEM-768, which current browsers send first), then X25519, P-256 and
/// P-384 for a client that offers only classical ones. ring, used before, has no ML-KEM:
/// traffic recorded today could be decrypted by a future quantum computer.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Loads `files` and checks them: PEM that holds a chain and a key, the key belonging to the
/// leaf, and the leaf not expired at `now`. `Err` is the reason and its fix, for one line.
pub fn load(files: &TlsFiles, now: SystemTime) -> Result<Loaded, String> {
    let (cert_path, key_path) = (files.cert.display(), files.key.display());
    let chain = std::fs::read(&files.cert)
        .map_err(|e| format!("cannot read certificate {cert_path}: {e}"))?;
    let key = std::fs::read(&files.key).map_err(|e| {
        format!("cannot read a private key from {key_path}: {e}; give a PEM key (PKCS#8, PKCS#1 or SEC1)")
    })?;
    let (mut key, not_after) = from_pem(
        &chain,
        &key,
        &cert_path.to_string(),
        &key_path.to_string(),
        now,
    )?;
    if let Some(ocsp) = &files.ocsp {
        let response = std::fs::read(ocsp)
            .map_err(|e| format!("cannot read the OCSP response {}: {e}", ocsp.display()))?;
        // An OCSPResponse is a DER SEQUENCE; a PEM or empty file is a mistake to say now.
        if response.first() != Some(&0x30) {
            return Err(format!(
                "{} is not a DER OCSP response; write it with `openssl ocsp … -respout FILE`",
                ocsp.display()
            ));
        }
        key.ocsp = Some(response);
    }
    Ok(Loaded {
        key: Arc::new(key),
        not_after,
    })
}

/// A chain and a key as PEM text, checked as [`load`] checks files (`cert_name` and
/// `key_name` name them in errors): the key belongs to the leaf, which has not expired at
/// `now`. The one check for a site's `tls` files and the certificate store's pairs.
pub fn from_pem(
    chain: &[u8],
    key: &[u8],
    cert_name: &str,
    key_name: &str,
    now: SystemTime,
) -> Result<(CertifiedKey, SystemTime), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate {cert_name} is not valid PEM: {e}"))?;
    let Some(leaf) = chain.first() else {
        return Err(format!(
            "certificate {cert_name} holds no CERTIFICATE block; give the PEM chain, leaf first"
        ));
    };
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        format!("cannot read a private key from {key_name}: {e}; give a PEM key (PKCS#8, PKCS#1 or SEC1)")
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("private key {key_name} cannot sign: {e}"))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("certificate {cert_name} does not parse: {e}"))?;
    let not_after_secs = parsed.validity().not_after.timestamp();
    let not_after = UNIX_EPOCH + Duration::from_secs(not_after_secs.max(0) as u64);
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| {
        format!("private key {key_name} does not belong to certificate {cert_name}; give the key the certificate was issued for")
    })?;
    if not_after <= now {
        return Err(format!(
            "certificate {cert_name} expired on {}; renew it",
            humantime::format_rfc3339_seconds(not_after)
        ));
    }
    Ok((key, not_after))
}

/// The certificate authorities of a site's client certificates (`client_certs.ca`): every
/// CERTIFICATE block of `pem` (`name` names it in errors), as trust anchors.
pub fn client_roots(pem: &[u8], name: &str) -> Result<rustls::RootCertStore, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{name} is not valid PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "{name} holds no CERTIFICATE block; give the PEM certificate(s) of the authority that issues your clients' certificates"
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("{name}: a certificate is not usable as an authority: {e}"))?;
    }
    Ok(roots)
}

/// The subject of a verified client certificate (its leaf, DER), its parts in the
/// certificate's order, comma-separated (`CN=alice, O=Shop`), for the app; `None` when it
/// does not parse.
pub fn subject_of(leaf: &[u8]) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).ok()?;
    let subject = parsed.subject().to_string();
    // One header line, one CGI variable: no control characters.
    (!subject.chars().any(char::is_control)).then_some(subject)
}

/// A hash of the files' contents (0 where one cannot be read).
pub fn fingerprint(files: &TlsFiles) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for path in [Some(&files.cert), Some(&files.key), files.ocsp.as_ref()]
        .into_iter()
        .flatten()
    {
        std::fs::read(path).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}
