//! The certificate store (IIS's Central Certificate Store): `[server] certificates = "DIR"`
//! holds `HOST.pem` (the chain, leaf first) and `HOST.key` for each host name, and
//! `_.example.com.pem` / `.key` for `*.example.com`. A site with `https://` bindings and no
//! `tls` takes its certificates from there, by the host names of its bindings.
//!
//! Owns: the naming rule ([`files_for`]), a file pair's identity for noticing a change
//! ([`Stamp`]), the store certificate as the master sends it to a worker ([`StoreCert`]) and
//! the worker's cache of them ([`StoreKeys`]). Must not touch: which worker gets which
//! certificate or when (the supervisor) or handshakes (`crate::tls`).
//!
//! Who reads the files: the master, as the user `serve` runs as (often root, the only one
//! who may read the keys), for the host names of a pool's sites when its worker starts, and
//! again when the files change; it checks them as `tls = {…}` is checked (a chain and a key
//! that belong together, not expired) and sends each worker only its own sites' pairs. A
//! pool's worker, running as its own user, never opens the store: with one store for
//! thousands of tenants, a pool must not be able to read its neighbours' keys.

use super::TlsFiles;
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// The IP address a binding's host names, when it names one (`192.0.2.1`, or `[2001:db8::1]`
/// as a binding writes an IPv6 address): its certificate is an IP certificate (RFC 8738).
pub fn host_address(host: &str) -> Option<std::net::IpAddr> {
    host.trim_matches(['[', ']']).parse().ok()
}

/// The stem of the store's pair for the certificate of `name`: the name, a wildcard's `*`
/// written `_` (`_.example.com.pem` holds `*.example.com`).
pub fn stem(name: &str) -> String {
    match name.strip_prefix("*.") {
        Some(parent) => format!("_.{parent}"),
        None => name.to_string(),
    }
}

/// The file pairs that may hold the certificate of a binding's host `pattern` (lowercase;
/// `*.example.com` for a wildcard), in the order they are tried: the name's own pair, then
/// the wildcard pair of its parent (a store may hold one `_.example.com` for many names).
pub fn files_for(dir: &Path, pattern: &str) -> Vec<TlsFiles> {
    let pair = |stem: &str| TlsFiles {
        cert: dir.join(format!("{stem}.pem")),
        key: dir.join(format!("{stem}.key")),
        ocsp: None,
        not_after: 0,
        fingerprint: 0,
    };
    match pattern.strip_prefix("*.") {
        Some(_) => vec![pair(&stem(pattern))],
        None => {
            let mut pairs = vec![pair(pattern)];
            // An IP address has no parent a wildcard could cover.
            if let (Some((_, parent)), None) = (pattern.split_once('.'), host_address(pattern)) {
                if parent.contains('.') {
                    pairs.push(pair(&format!("_.{parent}")));
                }
            }
            pairs
        }
    }
}

/// What identifies a file pair's contents without reading them: each file's inode, size and
/// modification time, or `None` where a file is missing. Certificate tools replace files by
/// renaming a new one in place (a new inode) or rewrite them (a new time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp([Option<(u64, u64, i64, i64)>; 2]);

impl Stamp {
    pub fn of(files: &TlsFiles) -> Stamp {
        let one = |p: &Path| {
            std::fs::metadata(p)
                .ok()
                .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        };
        Stamp([one(&files.cert), one(&files.key)])
    }
}

/// A store certificate as the master hands it to a worker: the host pattern it serves and
/// the two files' contents (PEM), already checked by the master.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreCert {
    pub host: String,
    pub chain: String,
    pub key: String,
}

impl std::fmt::Debug for StoreCert {
    // A key never reaches a log line by a `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreCert({})", self.host)
    }
}

impl StoreCert {
    /// Reads the first pair [`files_for`] names whose two files are there (each read once)
    /// and checks it as `tls = {…}` is checked; `Ok(None)` when the store has none for
    /// `pattern`.
    pub fn read(dir: &Path, pattern: &str, now: SystemTime) -> Result<Option<StoreCert>, String> {
        let text = |p: &Path| match std::fs::read_to_string(p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", p.display())),
        };
        for files in files_for(dir, pattern) {
            let (Some(chain), Some(key)) = (text(&files.cert)?, text(&files.key)?) else {
                continue;
            };
            let cert = StoreCert {
                host: pattern.to_string(),
                chain,
                key,
            };
            let names = (
                files.cert.display().to_string(),
                files.key.display().to_string(),
            );
            cert.checked(&names.0, &names.1, now)?;
            return Ok(Some(cert));
        }
        Ok(None)
    }

    fn checked(
        &self,
        cert_name: &str,
        key_name: &str,
        now: SystemTime,
    ) -> Result<CertifiedKey, String> {
        super::from_pem(
            self.chain.as_bytes(),
            self.key.as_bytes(),
            cert_name,
            key_name,
            now,
        )
        .map(|(key, _)| key)
    }

    /// The pair, parsed for rustls (and checked again: the same rule, where it is served).
    pub fn certified_key(&self) -> Result<Arc<CertifiedKey>, String> {
        let (cert, key) = (format!("for {}", self.host), format!("for {}", self.host));
        self.checked(&cert, &key, SystemTime::now()).map(Arc::new)
    }
}

/// A worker's store certificates by host pattern, shared by its threads and its https
/// addresses; the master's updates replace entries while handshakes read them.
#[derive(Debug, Default)]
pub struct StoreKeys(RwLock<HashMap<String, Arc<CertifiedKey>>>);

impl StoreKeys {
    /// Adds or replaces `cert`.
    pub fn insert(&self, cert: &StoreCert) -> Result<(), String> {
        let key = cert.certified_key()?;
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.insert(cert.host.clone(), key);
        Ok(())
    }

    /// The certificate for the name a client asked for: its own, else the nearest wildcard
    /// (`a.b.example.com` → `*.b.example.com`, then `*.example.com`).
    pub fn find(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let map = self.0.read().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = map.get(&name) {
            return Some(Arc::clone(k));
        }
        let mut rest = name.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(k) = map.get(&format!("*.{parent}")) {
                return Some(Arc::clone(k));
            }
            rest = parent;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_their_own_pair_then_the_parents_wildcard() {
        let d = Path::new("/store");
        let names = |p: &str| -> Vec<String> {
            files_for(d, p)
                .iter()
                .map(|f| f.cert.display().to_string())
                .collect()
        };
        assert_eq!(
            names("www.example.com"),
            ["/store/www.example.com.pem", "/store/_.example.com.pem"]
        );
        assert_eq!(names("*.example.com"), ["/store/_.example.com.pem"]);
        // A wildcard for a top-level domain is never looked for.
        assert_eq!(names("example.com"), ["/store/example.com.pem"]);
        assert_eq!(files_for(d, "a.b")[0].key, Path::new("/store/a.b.key"));
    }
}
