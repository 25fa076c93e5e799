//! Validation of a site's TLS: its `tls` files (loaded, matched, and for https bindings), or
//! the certificate store's names for them, and its `client_certs` authority.
//!
//! Owns: those keys' rules. Must not touch: loading certificates for serving
//! (`crate::certs`), which this only asks whether they load.

use super::super::locate::Seg;
use super::super::model::*;
use super::super::raw;
use super::super::site::*;
use super::Validator;
use std::path::Path;

impl Validator {
    /// A site's `tls`: its files load and match, and it has https bindings (and they it).
    pub(super) fn site_tls(
        &mut self,
        i: usize,
        raw: Option<raw::RawTls>,
        base: &Path,
        bindings: &[Binding],
    ) -> Option<TlsFiles> {
        let at = |k: &'static str| [Seg::Key("site"), Seg::Index(i), Seg::Key(k)];
        let https = bindings.iter().position(|b| b.tls);
        let Some(raw) = raw else {
            // With a store, each named https binding finds its certificate there by name;
            // a binding without a name has none to look for — but the names a handshake
            // asks for, ordered on demand once `ask` approves them.
            let unnamed = bindings.iter().position(|b| b.tls && b.host.is_none());
            if let (true, Some(k), false) = (self.store, unnamed, self.asks) {
                self.err(
                    &[Seg::Key("site"), Seg::Index(i), Seg::Key("bindings"), Seg::Index(k)],
                    "is https without a host name, and the certificate store ([server] certificates) finds certificates by name; add the host (\"https://*:443:example.com\"), give the site tls = { cert, key }, or have names ordered as they are asked for ([server.acme] on_demand = true with ask)",
                );
            } else if let (false, Some(k)) = (self.store, https) {
                self.err(
                    &[Seg::Key("site"), Seg::Index(i), Seg::Key("bindings"), Seg::Index(k)],
                    "is https, but the site has no certificate; add tls = { cert = \"certs/site.pem\", key = \"certs/site.key\" } (PEM chain and key), or keep HOST.pem and HOST.key in a certificate store ([server] certificates = \"certs/\")",
                );
            }
            return None;
        };
        let (Some(cert), Some(key)) = (raw.cert, raw.key) else {
            self.err(
                &at("tls"),
                "needs both files; write tls = { cert = \"certs/site.pem\", key = \"certs/site.key\" }",
            );
            return None;
        };
        if https.is_none() {
            self.err(
                &at("tls"),
                "applies to https:// bindings, and the site has none; add one (\"https://*:443:host\") or remove tls",
            );
            return None;
        }
        let mut files = TlsFiles {
            cert: base.join(cert),
            key: base.join(key),
            ocsp: raw.ocsp.map(|o| base.join(o)),
            not_after: 0,
            fingerprint: 0,
        };
        match crate::certs::load(&files, std::time::SystemTime::now()) {
            Ok(loaded) => {
                files.not_after = loaded
                    .not_after
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                files.fingerprint = crate::certs::fingerprint(&files);
                Some(files)
            }
            Err(e) => {
                self.err(&at("tls"), e);
                None
            }
        }
    }

    /// A site's `client_certs`: its authority's file reads as PEM certificates, and the site
    /// has https bindings.
    pub(super) fn client_certs(
        &mut self,
        i: usize,
        raw: Option<raw::RawClientCerts>,
        base: &Path,
        bindings: &[Binding],
    ) -> Option<ClientCerts> {
        let raw = raw?;
        let at = |k: Option<&'static str>| {
            let mut p = vec![Seg::Key("site"), Seg::Index(i), Seg::Key("client_certs")];
            p.extend(k.map(Seg::Key));
            p
        };
        let required = match raw.mode.as_deref() {
            None | Some("required") => true,
            Some("optional") => false,
            Some(other) => {
                self.err(&at(Some("mode")), format!("`{other}` is not a mode; use \"required\" (no certificate, no connection) or \"optional\" (a certificate names the client when given)"));
                true
            }
        };
        let Some(ca) = raw.ca else {
            self.err(&at(None), "needs ca = \"FILE\": the PEM certificate of the authority that issues the clients' certificates");
            return None;
        };
        if !bindings.iter().any(|b| b.tls) {
            self.err(&at(None), "asks clients for certificates in the TLS handshake, and the site has no https:// binding; add one or remove client_certs");
            return None;
        }
        let ca = base.join(ca);
        let read = std::fs::read(&ca).map_err(|e| {
            format!("{} cannot be read ({e}); fix the path (relative paths are from the config file's folder)", ca.display())
        });
        match read.and_then(|pem| crate::certs::client_roots(&pem, &ca.display().to_string())) {
            Ok(_) => Some(ClientCerts { ca, required }),
            Err(why) => {
                self.err(&at(Some("ca")), why);
                None
            }
        }
    }
}
