//! `[server] http3`: where HTTP/3 can answer, and each https site's `Alt-Svc`.
//!
//! Owns: the refusals of `http3` (and `http3_early_data`) where it could not act, and
//! [`SiteSpec::alt_svc`]. Must not
//! touch: the QUIC endpoints (see `server::quic`) or the answers (see `http::h3`).
//!
//! A QUIC connection is a flow of datagrams that only the thread holding its state can
//! read: unlike a TCP connection, it cannot be accepted by one pool's worker and handed to
//! another's (the shared-address dispatcher's way), and a site whose application accepts its
//! own connections (`transport = "activation"`) has no espalier worker to answer it. Both
//! are refused rather than left answering HTTP/1.1 and HTTP/2 only, unsaid.

use super::{Seg, Validator};
use crate::config::{PoolSpec, ServerSettings, SiteSpec};
use std::collections::HashMap;
use std::net::SocketAddr;

/// How long a client may remember the HTTP/3 alternative (a day, as nginx and Caddy say).
const ALT_SVC_MAX_AGE: u32 = 86_400;

impl Validator {
    pub(super) fn check_http3(
        &mut self,
        server: &ServerSettings,
        sites: &mut [std::sync::Arc<SiteSpec>],
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        if !server.http3 {
            if server.http3_early_data {
                let at = [Seg::Key("server"), Seg::Key("http3_early_data")];
                self.err(&at, "is about HTTP/3's 0-RTT, and http3 is off; set http3 = true, or remove http3_early_data");
            }
            return;
        }
        let at = [Seg::Key("server"), Seg::Key("http3")];
        let https = |s: &std::sync::Arc<SiteSpec>| s.bindings.iter().any(|b| b.tls);
        if !sites.iter().any(https) {
            self.err(&at, "answers on https addresses, and no site has an https:// binding; add one, or remove http3");
            return;
        }
        // Indexed once, not searched per site (10,000 of each on a hoster's machine).
        let activations: std::collections::HashSet<&str> = (pools.iter())
            .filter(|p| p.activated())
            .map(|p| p.name.as_str())
            .collect();
        let activated = |s: &SiteSpec| s.apps.iter().any(|a| activations.contains(a.pool.as_str()));
        // Per https address, its first site and the pools serving its sites.
        let mut addresses: HashMap<SocketAddr, (usize, Vec<&str>)> = HashMap::new();
        for (i, s) in sites.iter().enumerate() {
            if activated(s) && https(s) {
                self.err(&at, format!("cannot answer site `{}`: its application accepts its own connections (transport = \"activation\"), so no espalier worker holds its https address; use transport = \"proxy\" there, or remove http3", s.name));
            }
            for b in s.bindings.iter().filter(|b| b.tls) {
                let (_, serving) = addresses.entry(b.addr).or_insert((i, Vec::new()));
                for pool in s.pools() {
                    if !serving.contains(&pool) {
                        serving.push(pool);
                    }
                }
            }
        }
        if server.http3_early_data {
            let at = [Seg::Key("server"), Seg::Key("http3_early_data")];
            for s in sites
                .iter()
                .filter(|s| https(s) && s.client_certs.is_some())
            {
                self.err(&at, format!("cannot act on site `{}`: it asks for client certificates, which come with the handshake, after a request in 0-RTT; remove client_certs there, or http3_early_data", s.name));
            }
        }
        let mut shared: Vec<(SocketAddr, usize, String)> = addresses
            .iter()
            .filter(|(_, (_, pools))| pools.len() > 1)
            .map(|(addr, (site, pools))| (*addr, *site, pools.join(", ")))
            .collect();
        shared.sort();
        for (addr, site, pools) in shared {
            self.err(&at, format!("cannot answer https://{addr} (site `{}`): pools {pools} share it, and a QUIC connection cannot be handed from one pool to another as a TCP one is; give the address to one pool, or remove http3", sites[site].name));
        }
        for s in sites.iter_mut().filter(|s| https(s)) {
            let mut ports: Vec<u16> = s
                .bindings
                .iter()
                .filter(|b| b.tls)
                .map(|b| b.addr.port())
                .collect();
            ports.dedup();
            let entries: Vec<String> = ports
                .iter()
                .map(|p| format!("h3=\":{p}\"; ma={ALT_SVC_MAX_AGE}"))
                .collect();
            let alt_svc = entries.join(", ");
            // Written only where it changes: a site kept from the last validation is
            // shared with it, and stays so.
            if s.alt_svc.as_deref() != Some(alt_svc.as_str()) {
                std::sync::Arc::make_mut(s).alt_svc = Some(alt_svc);
            }
        }
    }
}
