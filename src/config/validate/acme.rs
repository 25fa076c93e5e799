//! Validation of `[server.acme]`: the directory's URL, the contact, the authorities its TLS
//! certificate is checked against, External Account Binding's key, and the certificate
//! store the issued pairs go into.
//!
//! Owns: those rules, and that some site has a name to order. Must not touch: ordering
//! (the master's, `server::acme`).

use super::super::acme_settings::{AcmeSettings, AskUrl, OnDemandSettings};
use super::super::locate::Seg;
use super::super::raw::RawAcme;
use super::Validator;
use std::path::Path;

/// On-demand orders at once, by default: a burst of new names is taken a score at a time.
const ON_DEMAND_IN_FLIGHT: u64 = 20;

/// On-demand orders in any hour, by default: Let's Encrypt takes 300 new orders per account
/// every three hours.
const ON_DEMAND_PER_HOUR: u64 = 100;

/// The on-demand keys as written.
struct RawOnDemand {
    on: Option<bool>,
    ask: Option<String>,
    in_flight: Option<i64>,
    per_hour: Option<i64>,
}

impl Validator {
    /// `[server.acme]`, or `None` (with its errors said) when it cannot be used; `store`:
    /// whether `[server] certificates` names the store the pairs go into.
    pub(super) fn acme(&mut self, raw: RawAcme, base: &Path, store: bool) -> Option<AcmeSettings> {
        let at = |k: &'static str| [Seg::Key("server"), Seg::Key("acme"), Seg::Key(k)];
        let raw_on_demand = RawOnDemand {
            on: raw.on_demand,
            ask: raw.ask,
            in_flight: raw.on_demand_in_flight,
            per_hour: raw.on_demand_per_hour,
        };
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
        let on_demand = self.on_demand(&raw_on_demand);
        let timeout = self.nonzero_duration(
            &at("timeout"),
            raw.timeout,
            std::time::Duration::from_secs(20),
        );
        // A profile's name is a word the directory lists in its `meta.profiles`: whether it
        // does is known only once the directory is asked (an order says so, once).
        let profile = raw.profile.filter(|p| {
            let word = !p.is_empty() && p.len() <= 64 && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
            if !word {
                self.err(&at("profile"), format!("`{p}` is not a profile's name; write one the directory lists, like \"shortlived\" (Let's Encrypt: \"classic\", \"tlsserver\", \"shortlived\")"));
            }
            word
        });
        let dns = raw.dns.and_then(|d| self.acme_dns(d, base));
        (store).then_some(AcmeSettings {
            dns,
            profile,
            timeout,
            directory,
            email,
            ca,
            eab,
            on_demand,
        })
    }

    /// `on_demand` and the keys that shape it (`None` when it is off); the shaping keys
    /// without it would do nothing, so they are refused.
    fn on_demand(&mut self, raw: &RawOnDemand) -> Option<OnDemandSettings> {
        let at = |k: &'static str| [Seg::Key("server"), Seg::Key("acme"), Seg::Key(k)];
        if raw.on != Some(true) {
            let shaping = [
                ("ask", raw.ask.is_some()),
                ("on_demand_in_flight", raw.in_flight.is_some()),
                ("on_demand_per_hour", raw.per_hour.is_some()),
            ];
            for (key, _) in shaping.iter().filter(|(_, set)| *set) {
                self.err(&at(key), "shapes on-demand ordering, which is off; add on_demand = true, or remove the key");
            }
            return None;
        }
        let ask = raw.ask.as_deref().and_then(|url| match AskUrl::parse(url) {
            Ok(ask) => Some(ask),
            Err(why) => {
                self.err(&at("ask"), format!("`{url}` {why}; write the URL of a service of yours that answers 2xx to GET ?domain=NAME for the names it approves, like \"http://127.0.0.1:5555/check\""));
                None
            }
        });
        Some(OnDemandSettings {
            ask,
            in_flight: self.count_up_to(
                &at("on_demand_in_flight"),
                raw.in_flight,
                ON_DEMAND_IN_FLIGHT,
                10_000,
            ),
            per_hour: self.count_up_to(
                &at("on_demand_per_hour"),
                raw.per_hour,
                ON_DEMAND_PER_HOUR,
                1_000_000,
            ),
        })
    }

    /// `[server.acme]` must have a name to order: a host name of an https binding of a site
    /// that takes its certificates from the store (a wildcard can be proven by DNS-01 alone,
    /// `[server.acme.dns]`). Without one it would do nothing, said nowhere.
    pub(super) fn check_acme_names(
        &mut self,
        server: &crate::config::ServerSettings,
        sites: &[std::sync::Arc<crate::config::SiteSpec>],
    ) {
        let Some(acme) = &server.acme else { return };
        if sites.is_empty() {
            return;
        }
        // On demand, a name a wildcard takes is ordered for itself, and one a binding without
        // a host takes once `ask` approves it.
        // With DNS-01, a wildcard is ordered as such.
        let on_demand = acme.on_demand.as_ref();
        let asks = on_demand.is_some_and(|d| d.ask.is_some());
        let wildcards = on_demand.is_some() || acme.dns.is_some();
        let orderable = (sites.iter().filter(|s| s.tls.is_none()))
            .flat_map(|s| s.bindings.iter())
            .any(|b| {
                b.tls
                    && match b.host.as_deref() {
                        Some(h) => !h.starts_with("*.") || wildcards,
                        None => asks,
                    }
            });
        // A fleet's member orders what the fleet's sites will name, which may be none yet.
        if !orderable && server.cluster.is_none() {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme")],
                "orders the certificates of https:// bindings' host names of sites without `tls`, and no site has one (a wildcard is ordered with [server.acme.dns]; without it, with on_demand = true, each name under it is); add such a binding (\"https://*:443:shop.example.com\") or remove [server.acme]",
            );
        }
        // Without `ask`, every name under a wildcard would be ordered for whoever points one at
        // the machine (the wildcard's DNS says yes to all), spending the CA's quota.
        let wildcard = (sites.iter().filter(|s| s.tls.is_none()))
            .flat_map(|s| s.bindings.iter())
            .find_map(|b| b.host.as_deref().filter(|h| b.tls && h.starts_with("*.")));
        // DNS-01 for wildcards alone, and none to prove: it would answer nothing.
        if acme.dns.as_ref().is_some_and(|d| !d.all_names) && wildcard.is_none() {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme"), Seg::Key("dns")],
                "proves wildcards (names = \"wildcards\"), and no https binding of a site without `tls` names one; add a wildcard binding (\"https://*:443:*.shop.example\"), or names = \"all\", or remove it",
            );
        }
        // With DNS-01 the wildcard itself is ordered, and no name under it.
        if let (Some(host), Some(_), false, None) = (wildcard, on_demand, asks, &acme.dns) {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme"), Seg::Key("on_demand")],
                format!("would order a certificate for any name under `{host}` that anyone points at this machine, spending the directory's quota; add ask = \"URL\" (a service of yours that approves each name), or name the hosts in the bindings"),
            );
        }
        // `ask` is asked only about names no binding writes out: with every https binding of
        // the store's sites naming its host, it would never be asked.
        let unwritten = (sites.iter().filter(|s| s.tls.is_none()))
            .flat_map(|s| s.bindings.iter())
            .any(|b| b.tls && b.host.as_deref().is_none_or(|h| h.starts_with("*.")));
        if asks && orderable && !unwritten {
            self.err(
                &[Seg::Key("server"), Seg::Key("acme"), Seg::Key("ask")],
                "is asked only about names no binding writes out (a wildcard's, or a binding without a host's), and every https binding here names its host; remove ask, or add such a binding (\"https://*:443:*.shop.example\")",
            );
        }
    }
}
