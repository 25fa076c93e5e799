//! `[server.acme]`'s typed settings: the directory, the account, the on-demand bounds, the
//! `ask` URL and DNS-01's (`[server.acme.dns]`), with their defaults.
//!
//! Owns: those types. Must not touch: how TOML becomes them (`super::validate`'s `acme`), or
//! ordering (`crate::server::acme`).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `[server.acme]`: where certificates are ordered (RFC 8555) and as whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcmeSettings {
    /// The directory's URL (`https://acme-v02.api.letsencrypt.org/directory`).
    pub directory: String,
    /// The account's contact, if any.
    pub email: Option<String>,
    /// Authorities the directory's own TLS certificate must chain to (PEM; a private or test
    /// directory's), over the system's.
    pub ca: Option<PathBuf>,
    /// External Account Binding, for a directory that asks for it: the key's id and the MAC
    /// key (decoded from its base64url). Never serialized: the master alone holds it.
    #[serde(skip)]
    pub eab: Option<(String, Vec<u8>)>,
    /// `on_demand = true`: a name's certificate is ordered at its first handshake, not at
    /// start.
    pub on_demand: Option<OnDemandSettings>,
    /// How long one request to the directory may take (`timeout`, default 20 s): a
    /// directory that takes connections and never answers fails the order.
    #[serde(default = "default_acme_timeout")]
    pub timeout: std::time::Duration,
    /// The certificate profile asked for in each order (the ACME profiles extension: Let's
    /// Encrypt's `shortlived`, `tlsserver`, `classic`); `None`: the directory's default.
    #[serde(default)]
    pub profile: Option<String>,
    /// `[server.acme.dns]`: DNS-01, for wildcards (and every name, with `names = "all"`).
    #[serde(default)]
    pub dns: Option<DnsChallenge>,
}

/// `[server.acme.dns]`: how DNS-01's TXT records are published, and for which names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsChallenge {
    pub publish: TxtPublishing,
    /// `names = "all"`: every name is proven by DNS-01; else wildcards alone (a name with an
    /// http:// or https:// route is proven there, with nothing to add to its DNS).
    pub all_names: bool,
    /// Where `check` and `doctor` look the delegations up (`resolver`); `None`: the
    /// system's resolvers (`/etc/resolv.conf`).
    pub resolver: Option<std::net::SocketAddr>,
}

/// Where DNS-01's TXT records go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxtPublishing {
    /// `listen` and `zone`: espalier's own authoritative DNS server for `zone`, a zone
    /// delegated to it; each name's `_acme-challenge` is a CNAME into it (once, by its owner).
    Own {
        listen: std::net::SocketAddr,
        /// Lowercase, without the final dot.
        zone: String,
    },
    /// `update` and `tsig_key`: RFC 2136 dynamic updates, signed with TSIG, sent to the
    /// name's own DNS server.
    Update {
        server: std::net::SocketAddr,
        key: TsigKey,
    },
}

/// A TSIG key, as `tsig-keygen` writes it (`key "NAME" { algorithm …; secret "…"; };`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TsigKey {
    /// The key's name, without the final dot.
    pub name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    /// The shared secret, decoded. Never serialized: the master alone holds it.
    #[serde(skip)]
    pub secret: Vec<u8>,
}

fn default_acme_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(20)
}

/// How certificates are ordered on demand (`[server.acme] on_demand = true`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnDemandSettings {
    /// Asked before a name that no binding writes out (one a wildcard or a binding without a
    /// host takes) is ordered: `GET <ask>?domain=NAME`, a 2xx answer approving it.
    pub ask: Option<AskUrl>,
    /// Names being asked about or ordered on demand at once; a handshake for one more is
    /// refused at once.
    pub in_flight: u32,
    /// Orders started on demand in any hour.
    pub per_hour: u32,
}

/// An `ask` URL (`http://HOST:PORT/PATH`), taken apart for the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskUrl {
    /// As written, for the log.
    pub url: String,
    /// `HOST:PORT` (port 80 when not written): connected to, and the `Host` field.
    pub authority: String,
    /// The path with any query, to which `?domain=NAME` (or `&domain=`) is added.
    pub path: String,
}

impl AskUrl {
    /// `http://HOST[:PORT][/PATH]`, or why not.
    pub fn parse(url: &str) -> Result<AskUrl, String> {
        let rest = (url.strip_prefix("http://")).ok_or("is not an http:// URL")?;
        let (authority, path) = match rest.find(['/', '?']) {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        let bad = |b: u8| b <= b' ' || b == 0x7f || b == b'#';
        if authority.is_empty() || authority.contains('@') || authority.bytes().any(bad) {
            return Err("has no host (write http://127.0.0.1:PORT/PATH)".into());
        }
        if path.bytes().any(bad) {
            return Err("has a space, a control byte or a fragment in its path".into());
        }
        // `[::1]:9000`, `[::1]`, `host:9000` or `host`.
        let port = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").map(|(_, p)| p),
            None => authority.split_once(':').map(|(_, p)| p),
        };
        let authority = match port {
            Some(p) if p.parse::<u16>().is_ok() => authority.to_string(),
            Some(p) => return Err(format!("has `{p}` for a port")),
            None => format!("{authority}:80"),
        };
        Ok(AskUrl {
            url: url.to_string(),
            authority,
            path,
        })
    }

    /// The request target that asks about `name` (a host name: nothing to escape).
    pub fn target(&self, name: &str) -> String {
        let join = if self.path.contains('?') { '&' } else { '?' };
        format!("{}{join}domain={name}", self.path)
    }
}
