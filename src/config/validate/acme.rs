//! Validation of `[server.acme]`: the directory's URL, the contact, the authorities its TLS
//! certificate is checked against, External Account Binding's key, and the certificate
//! store the issued pairs go into.
//!
//! Owns: those rules, and that some site has a name to order. Must not touch: ordering
//! (the master's, `server::acme`).

use super::super::locate::Seg;
use super::super::model::AcmeSettings;
use super::super::raw::RawAcme;
use super::Validator;
use std::path::Path;

impl Validator {
    /// `[server.acme]`, or `None` (with its errors said) when it cannot be used; `store`:
    /// whether `[server] certificates` names the store the pairs go into.
    pub(super) fn acme(&mut self, raw: RawAcme, base: &Path, store: bool) -> Option<AcmeSettings> {
        let at = |k: &'static str| [Seg::Key("server"), Seg::Key("acme"), Seg::Key(k)];
        if !store {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme")],
                "puts the certificates it orders into the certificate store, and there is none; add [server] certificates = \"certs/\" (a folder)",
            );
        }
        let directory = match raw.directory {
            Some(d) if d.starts_with("https://") && d.len() > "https://".len() => d,
            Some(d) => {
                self.err(&at("directory"), format!("`{d}` is not an https:// URL; write the directory's URL, like \"https://acme-v02.api.letsencrypt.org/directory\""));
                return None;
            }
            None => {
                self.err(&[Seg::Key("server"), Seg::Key("acme")], "has no `directory`; add directory = \"https://acme-v02.api.letsencrypt.org/directory\" (or your CA's)");
                return None;
            }
        };
        let email = raw.email.filter(|e| {
            let ok = e.contains('@') && !e.starts_with('@') && !e.bytes().any(|b| b <= b' ');
            if !ok {
                self.err(&at("email"), format!("`{e}` is not an email address"));
            }
            ok
        });
        let ca = raw.ca.map(|c| base.join(c));
        if let Some(ca) = &ca {
            let checked = std::fs::read(ca)
                .map_err(|e| format!("{} cannot be read ({e})", ca.display()))
                .and_then(|pem| crate::certs::client_roots(&pem, &ca.display().to_string()));
            if let Err(e) = checked {
                self.err(&at("ca"), format!("{e}; give the PEM certificate(s) of the authority that signs the directory's own TLS certificate"));
            }
        }
        let eab = match (raw.eab_kid, raw.eab_hmac_key) {
            (None, None) => None,
            (Some(kid), Some(key)) => {
                use base64::Engine;
                let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                match engine.decode(key.trim_end_matches('=')) {
                    Ok(bytes) if !bytes.is_empty() && !kid.is_empty() => Some((kid, bytes)),
                    _ => {
                        self.err(&at("eab_hmac_key"), "is not a base64url key; write the MAC key the directory gave with the key id, as it gave it");
                        None
                    }
                }
            }
            (Some(_), None) => {
                self.err(&at("eab_kid"), "needs its key: add eab_hmac_key = \"…\" (the MAC key the directory gave with this id)");
                None
            }
            (None, Some(_)) => {
                self.err(&at("eab_hmac_key"), "needs its key id: add eab_kid = \"…\"");
                None
            }
        };
        (store).then_some(AcmeSettings {
            directory,
            email,
            ca,
            eab,
        })
    }

    /// `[server.acme]` must have a name to order: a host name of an https binding of a site
    /// that takes its certificates from the store (a wildcard can be proven by neither
    /// HTTP-01 nor TLS-ALPN-01). Without one it would do nothing, said nowhere.
    pub(super) fn check_acme_names(
        &mut self,
        server: &crate::config::ServerSettings,
        sites: &[crate::config::SiteSpec],
    ) {
        if server.acme.is_none() || sites.is_empty() {
            return;
        }
        let orderable = (sites.iter().filter(|s| s.tls.is_none()))
            .flat_map(|s| s.bindings.iter())
            .any(|b| b.tls && b.host.as_deref().is_some_and(|h| !h.starts_with("*.")));
        if !orderable {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme")],
                "orders the certificates of https:// bindings' host names of sites without `tls`, and no site has one (a wildcard name cannot be ordered); add such a binding (\"https://*:443:shop.example.com\") or remove [server.acme]",
            );
        }
    }
}
