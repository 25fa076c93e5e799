//! The routing tables a worker is given: per address it listens on, which sites answer there
//! and by which host names — pure data and matching, below both the config that checks them
//! and the TLS layer that picks certificates by them.
//!
//! Owns: [`GroupRoutes`] and host matching ([`hosts`]). Must not touch: requests (the
//! handlers route them) or sockets.

pub mod hosts;

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
    /// An https address: TLS with its sites' certificates, by SNI.
    #[serde(default)]
    pub tls: bool,
}
