//! The reverse proxy of `transport = "proxy"` pools: espalier's worker threads forward each
//! request to an application process on their own NUMA node — no maintained proxy chooses its
//! upstream by node.
//!
//! Owns: where an app process listens ([`Endpoint`]), which processes a thread may use, nearest
//! first ([`Tiers`], decided by the master in [`tiers_for`], pure), and the forwarding itself
//! ([`forward`]: the upstream connection pools, request and response bodies streamed both
//! ways, `X-Forwarded-*`, Upgrade tunnels, timeouts, 502/504, one retry), in HTTP/1.1 or, for
//! `transport = "fastcgi"`, in FastCGI records ([`fastcgi`]).
//! Must not touch: the client connection's own protocol loop (that is [`crate::http::conn`],
//! which lends a connection here through the service and takes it back) or app processes'
//! lives.

mod cgi;
pub mod fastcgi;
pub mod forward;
mod request;
mod route;
mod script;
mod upstream;

/// What a request is handed to: an HTTP app, or a FastCGI app with the script the request
/// names (checked: one the app may run).
pub enum ProxyTarget {
    Http(std::rc::Rc<ProxyRoute>),
    FastCgi(std::rc::Rc<ProxyRoute>, Box<Script>),
}

impl ProxyTarget {
    /// FastCGI sends `CONTENT_LENGTH` before the body: a body of unknown length must be read
    /// whole first (over HTTP/2; over HTTP/1.1 a chunked one is refused with 411).
    pub fn needs_length(&self) -> bool {
        matches!(self, ProxyTarget::FastCgi(..))
    }
}

/// A request on its way to an application, its head built once for the app's protocol. The
/// one dispatch of both HTTP/1.1 connections and HTTP/2 streams (a stream's connection is
/// the far end of a pipe, see `http::h2`).
pub enum Dispatch {
    Http(std::rc::Rc<ProxyRoute>, ForwardRequest),
    FastCgi(std::rc::Rc<ProxyRoute>, FastCgiRequest),
}

impl Dispatch {
    /// `req` for `target`, as its connection framed and sent it.
    pub fn new(target: ProxyTarget, req: &Request<'_>, lent: &LentHead<'_>) -> Self {
        match target {
            ProxyTarget::Http(route) => Dispatch::Http(route, ForwardRequest::new(req, lent)),
            ProxyTarget::FastCgi(route, script) => {
                Dispatch::FastCgi(route, FastCgiRequest::new(req, &script, lent))
            }
        }
    }

    /// Sends it, its body from `conn`, and the app's answer back to `conn`.
    pub async fn run<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        self,
        conn: LentConnection<'_, C>,
    ) -> Outcome {
        match self {
            Dispatch::Http(route, req) => forward(conn, req, &route).await,
            Dispatch::FastCgi(route, req) => fastcgi::forward(conn, req, &route).await,
        }
    }
}

use crate::http::service::{LentConnection, LentHead, Outcome};
use crate::http::Request;
pub use cgi::FastCgiRequest;
pub use forward::forward;
pub use request::ForwardRequest;
pub use route::{ProxyRoute, ProxySettings, SharedTiers, UNRESPONSIVE_AFTER};
pub use script::{Script, Scripts};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Where an app process accepts connections.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "http://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The app processes a front worker may forward to, grouped by distance from its node:
/// `tiers[0]` the nearest (its own node, when it has a ready process), then the next
/// nearest, … A thread uses the first tier that has a process; a forward off its own node is
/// counted as remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiers<E = Endpoint> {
    pub tiers: Vec<Vec<E>>,
    /// Whether `tiers[0]` is the front's own node (or locality is unknown: no home node).
    pub local: bool,
}

impl<E> Default for Tiers<E> {
    fn default() -> Self {
        Tiers {
            tiers: Vec::new(),
            local: true,
        }
    }
}

/// The tiers for a front worker on `front_node`, from the ready app processes `(node,
/// endpoint)`, by the kernel's distance table (`distance(a, b)`). A front or app with no home
/// node (`placement = "none"`) is equally near to all. The same ranking places a connection
/// handed to another pool (see [`crate::handoff`]), with hand-off sockets as the endpoints.
pub fn tiers_for<E: Clone>(
    front_node: Option<u32>,
    apps: &[(Option<u32>, E)],
    distance: impl Fn(u32, u32) -> u32,
) -> Tiers<E> {
    let mut ranked: Vec<(u32, &E)> = apps
        .iter()
        .map(|(node, e)| {
            let d = match (front_node, node) {
                (Some(f), Some(a)) => distance(f, *a),
                _ => 0,
            };
            (d, e)
        })
        .collect();
    ranked.sort_by_key(|&(d, _)| d);
    let mut tiers: Vec<Vec<E>> = Vec::new();
    let mut last = None;
    for (d, e) in ranked {
        if last != Some(d) {
            tiers.push(Vec::new());
            last = Some(d);
        }
        tiers.last_mut().expect("pushed above").push(e.clone());
    }
    let local = front_node.is_none_or(|f| apps.iter().any(|(n, _)| n.is_none_or(|n| n == f)));
    Tiers { tiers, local }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(port: u16) -> Endpoint {
        Endpoint::Tcp(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// A 4-node ring: 10 to itself, 20 to its neighbours, 30 across.
    fn ring(a: u32, b: u32) -> u32 {
        match (a as i32 - b as i32).rem_euclid(4) {
            0 => 10,
            1 | 3 => 20,
            _ => 30,
        }
    }

    #[test]
    fn own_node_first_then_by_distance() {
        let apps = vec![
            (Some(0), ep(1)),
            (Some(1), ep(2)),
            (Some(2), ep(3)),
            (Some(3), ep(4)),
            (Some(1), ep(5)),
        ];
        let t = tiers_for(Some(1), &apps, ring);
        assert!(t.local);
        assert_eq!(
            t.tiers,
            vec![vec![ep(2), ep(5)], vec![ep(1), ep(3)], vec![ep(4)]]
        );
    }

    #[test]
    fn a_node_without_its_app_falls_back_to_the_nearest() {
        let apps = vec![(Some(0), ep(1)), (Some(2), ep(3))];
        let t = tiers_for(Some(3), &apps, ring);
        // Node 3: node 0 is a neighbour (20), node 2 too (20): one tier of both.
        assert_eq!(t.tiers, vec![vec![ep(1), ep(3)]]);
        assert!(
            !t.local,
            "node 3 has no process of its own: every forward is remote"
        );
        let t = tiers_for(Some(1), &[(Some(3), ep(4)), (Some(0), ep(1))], ring);
        assert_eq!(t.tiers, vec![vec![ep(1)], vec![ep(4)]]);
        assert!(!t.local);
    }

    #[test]
    fn no_home_node_means_one_tier() {
        let apps = vec![(None, ep(1)), (None, ep(2))];
        assert_eq!(
            tiers_for(Some(0), &apps, ring).tiers,
            vec![vec![ep(1), ep(2)]]
        );
        assert!(tiers_for(Some(0), &apps, ring).local);
        assert_eq!(
            tiers_for::<Endpoint>(None, &[], ring).tiers,
            Vec::<Vec<Endpoint>>::new()
        );
    }
}
