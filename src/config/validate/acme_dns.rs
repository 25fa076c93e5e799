//! Validation of `[server.acme.dns]`: DNS-01 by espalier's own DNS server for a delegated
//! zone (`listen`, `zone`) or by RFC 2136 updates signed with TSIG (`update`, `tsig_key`),
//! which names it proves (`names`), and where `check` looks delegations up (`resolver`).
//!
//! Owns: those rules (one way of publishing, the key file read and its algorithm one the
//! updates can sign with). Must not touch: publishing (`crate::server::acme_dns`).

use super::super::acme_settings::{DnsChallenge, TsigKey, TxtPublishing};
use super::super::locate::Seg;
use super::super::raw::RawAcmeDns;
use super::Validator;
use std::net::SocketAddr;
use std::path::Path;

/// The TSIG algorithms updates are signed with (hickory signs these three).
const TSIG_ALGORITHMS: [&str; 3] = ["hmac-sha256", "hmac-sha384", "hmac-sha512"];

/// `IP:PORT`, or a bare IP on DNS's port.
fn dns_address(written: &str) -> Option<SocketAddr> {
    (written.parse::<SocketAddr>().ok())
        .or_else(|| (written.parse::<std::net::IpAddr>().ok()).map(|ip| SocketAddr::new(ip, 53)))
}

impl Validator {
    /// `[server.acme.dns]`, or `None` (its errors said) when it cannot be used.
    pub(super) fn acme_dns(&mut self, raw: RawAcmeDns, base: &Path) -> Option<DnsChallenge> {
        let at = |k: &'static str| {
            [
                Seg::Key("server"),
                Seg::Key("acme"),
                Seg::Key("dns"),
                Seg::Key(k),
            ]
        };
        let table = [Seg::Key("server"), Seg::Key("acme"), Seg::Key("dns")];
        let address = |v: &mut Self, key: &'static str, written: Option<String>| {
            let written = written?;
            let parsed = dns_address(&written);
            if parsed.is_none() {
                v.err(
                    &at(key),
                    format!("`{written}` is not an address; write IP:PORT, like \"0.0.0.0:53\""),
                );
            }
            parsed
        };
        let (listen, update) = (raw.listen.is_some(), raw.update.is_some());
        let publish = match (listen, update) {
            (true, true) => {
                self.err(&table, "has both `listen` (espalier's own DNS server) and `update` (your DNS server's, by RFC 2136); keep the one that publishes the challenges");
                return None;
            }
            (false, false) => {
                self.err(&table, "publishes the challenges nowhere; add listen = \"0.0.0.0:53\" and zone = \"acme.example.net\" (a zone delegated to this machine), or update = \"IP:53\" and tsig_key = \"FILE\" (your DNS server's, by RFC 2136)");
                return None;
            }
            (true, false) => {
                for (key, set) in [("tsig_key", raw.tsig_key.is_some())] {
                    if set {
                        self.err(&at(key), "signs RFC 2136 updates, and there is no `update`; remove it, or publish with update = \"IP:53\" instead of listen");
                    }
                }
                let listen = address(self, "listen", raw.listen)?;
                let zone = match raw
                    .zone
                    .map(|z| z.trim_end_matches('.').to_ascii_lowercase())
                {
                    Some(z) if crate::certs::dns01::is_zone_name(&z) => z,
                    Some(z) => {
                        self.err(&at("zone"), format!("`{z}` is not a zone's name; write the zone delegated to this server, like \"acme.example.net\""));
                        return None;
                    }
                    None => {
                        self.err(&table, "has `listen` and no `zone`; add zone = \"acme.example.net\" (the zone whose NS records name this machine)");
                        return None;
                    }
                };
                TxtPublishing::Own { listen, zone }
            }
            (false, true) => {
                if raw.zone.is_some() {
                    self.err(&at("zone"), "names espalier's own zone, and there is no `listen` (with `update`, each name's zone is found by asking the server); remove it");
                }
                let server = address(self, "update", raw.update)?;
                let Some(file) = raw.tsig_key else {
                    self.err(&table, "has `update` and no `tsig_key`; add tsig_key = \"FILE\", the key your DNS server takes updates with (what `tsig-keygen NAME` prints)");
                    return None;
                };
                let key = self.tsig_key(&base.join(file), &at("tsig_key"))?;
                TxtPublishing::Update { server, key }
            }
        };
        let all_names = match raw.names.as_deref() {
            None | Some("wildcards") => false,
            Some("all") => true,
            Some(other) => {
                self.err(&at("names"), format!("`{other}` is not one of \"wildcards\" (the default: names with an http:// or https:// route are proven there) or \"all\""));
                false
            }
        };
        // Delegations are looked up for espalier's own zone alone.
        if raw.resolver.is_some() && matches!(publish, TxtPublishing::Update { .. }) {
            self.err(&at("resolver"), "is where check and doctor look up the CNAMEs into espalier's own zone, and with `update` there are none; remove it");
        }
        let resolver = address(self, "resolver", raw.resolver);
        Some(DnsChallenge {
            publish,
            all_names,
            resolver,
        })
    }

    /// The TSIG key in `file`, read and checked.
    fn tsig_key(&mut self, file: &Path, at: &[Seg]) -> Option<TsigKey> {
        let shown = file.display();
        let read = std::fs::read_to_string(file)
            .map_err(|e| format!("{shown} cannot be read ({e})"))
            .and_then(|text| {
                crate::certs::dns01::parse_tsig_key(&text).map_err(|e| format!("{shown} {e}"))
            });
        let (name, algorithm, secret) = match read {
            Ok(key) => key,
            Err(e) => {
                self.err(at, format!("{e}; give the file `tsig-keygen NAME` writes, the key your DNS server's update-policy names"));
                return None;
            }
        };
        if !TSIG_ALGORITHMS.contains(&algorithm.as_str()) {
            self.err(at, format!("{shown}: algorithm `{algorithm}` cannot sign updates here; make the key with one of {} (`tsig-keygen -a hmac-sha256 NAME`)", TSIG_ALGORITHMS.join(", ")));
            return None;
        }
        use base64::Engine;
        match base64::engine::general_purpose::STANDARD.decode(&secret) {
            Ok(secret) if !secret.is_empty() => Some(TsigKey {
                name,
                algorithm,
                secret,
            }),
            _ => {
                self.err(at, format!("{shown}: the secret is not base64; write the file as `tsig-keygen NAME` prints it"));
                None
            }
        }
    }
}
