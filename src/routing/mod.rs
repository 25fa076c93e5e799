//! The routing tables a worker is given: per address it listens on, which sites answer there
//! and by which host names — pure data and matching, below both the config that checks them
//! and the TLS layer that picks certificates by them.
//!
//! Owns: [`GroupRoutes`], host matching ([`hosts`]), path-prefix matching ([`under_prefix`]),
//! a site's redirect and rewrite rules ([`rules`]), who may come in: allow and deny
//! lists ([`access`]), per-client limits ([`limits`]) and sign-in ([`auth`], and by another service:
//! [`auth_request`]), and which
//! server of an upstream group a request goes to ([`balance`]). Must not touch: requests
//! (the handlers route them) or sockets.

/// The name of espalier's own pool in front of a shared address (see `server::dispatcher`),
/// with a dot no configured pool's name may have.
pub const DISPATCHER: &str = "espalier.dispatcher";

pub mod access;
pub mod auth;
pub mod auth_request;
pub mod balance;
pub mod hosts;
pub mod limits;
pub mod rules;

/// One address a worker listens on: which sites it answers for, `(host, site)` with `site` an
/// index into the config's sites; a `None` host answers any (the default site).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupRoutes {
    pub addr: std::net::SocketAddr,
    pub hosts: Vec<(Option<String>, usize)>,
    /// Whether its connections start with a PROXY protocol header (its sites agree, see
    /// `config::validate`).
    #[serde(default)]
    pub proxy_protocol: bool,
    /// The peers that send it, when not every one (its sites agree).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy_protocol_from: Vec<access::Cidr>,
    /// An https address: TLS with its sites' certificates, by SNI.
    #[serde(default)]
    pub tls: bool,
    /// A shared address as a pool behind the dispatcher sees it: `hosts` are its own sites'
    /// alone, and a request for any other host or pool goes back to the dispatcher, which
    /// knows them all (see `server::dispatcher`).
    #[serde(default)]
    pub dispatched: bool,
}

impl GroupRoutes {
    /// The address as its clients write it: `https://127.0.0.1:8443`, `http://[::1]:8080`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
}

/// Whether `path` lies under the prefix `prefix` (given without a trailing slash): on a
/// segment boundary, as IIS applications and nginx's prefix locations with a slash match
/// (`/api` holds `/api` and `/api/x`, not `/apix`); the empty prefix holds every path.
pub fn under_prefix(path: &[u8], prefix: &str) -> bool {
    prefix.is_empty()
        || (path.starts_with(prefix.as_bytes())
            && matches!(path.get(prefix.len()), None | Some(b'/')))
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefixes_match_on_segment_boundaries() {
        assert!(super::under_prefix(b"/api/x", "/api"));
        assert!(super::under_prefix(b"/api", "/api"));
        assert!(!super::under_prefix(b"/apix", "/api"));
        assert!(super::under_prefix(b"/anything", ""));
    }
}
