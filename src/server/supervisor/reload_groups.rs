//! A reload's listener groups: the sockets a change needs opened first (which may fail,
//! changing nothing), then the switch (which cannot) — every kept group takes its wanted
//! pools and routes, grown ones their new sockets and owners, unwanted ones close.
//!
//! Owns: the running groups' change at a reload or an add. Must not touch: which pools a
//! change replaces (`reload_diff`), or the workers (`reload`, `slots`).

use super::Supervisor;
use crate::config::Config;
use crate::server::listeners::ListenerGroup;
use std::collections::{HashMap, HashSet};

/// A grown listener group's change: its index, its new TCP and UDP sockets, its owners.
pub(super) type Grown = (
    usize,
    Vec<socket2::Socket>,
    Vec<socket2::Socket>,
    crate::server::listeners::SocketOwners,
);

impl Supervisor {
    /// The fallible half of the listeners' change, like nginx's reload building its new cycle
    /// beside the old one: binding new addresses, opening the sockets a grown group needs —
    /// into new sockets only. A refused reload changes nothing that serves. An address whose
    /// pools change (a site added on a shared port, a host moved to another pool) keeps its
    /// group: its sockets are shared out again among the new workers of every pool there,
    /// and the old ones drain. The new groups, and per grown group its new sockets.
    pub(super) fn open_listeners(
        &self,
        new: &Config,
        wanted: &mut [ListenerGroup],
        changed_set: &HashSet<String>,
        plan: &crate::placement::Plan,
        file: &str,
    ) -> Result<(Vec<ListenerGroup>, Vec<Grown>), String> {
        let mut fresh: Vec<ListenerGroup> = Vec::new();
        let mut grown: Vec<Grown> = Vec::new();
        for w in wanted.iter_mut() {
            if !w.pools.iter().any(|p| changed_set.contains(p)) {
                continue;
            }
            let owners =
                crate::server::listeners::group_owners(&w.pools, new, &self.topology, plan);
            match self.groups.iter().position(|g| g.addr == w.addr) {
                Some(i) => {
                    let sockets = crate::server::listeners::open_missing(
                        &self.groups[i],
                        owners.len(),
                        new,
                        file,
                    )?;
                    if self.groups[i].udp.is_empty() {
                        // HTTP/3 new on an address served already: its UDP port checked
                        // first, as a new address's is.
                        use crate::server::listeners::{probe_free, Patience, Proto};
                        probe_free(new, w.addr, &w.routes, (file, Patience::None), Proto::Udp)?;
                    }
                    let udp = crate::server::listeners::open_missing_udp(
                        &self.groups[i],
                        owners.len(),
                        new,
                        file,
                    )?;
                    grown.push((i, sockets, udp, owners));
                }
                None => {
                    use crate::server::listeners::{probe_free, Patience, Proto};
                    probe_free(new, w.addr, &w.routes, (file, Patience::None), Proto::Tcp)?;
                    probe_free(new, w.addr, &w.routes, (file, Patience::None), Proto::Udp)?;
                    let mut g = ListenerGroup::new(w.addr, w.pools.clone(), w.routes.clone());
                    crate::server::listeners::fill_group(&mut g, new, &self.topology, plan, file)?;
                    fresh.push(g);
                }
            }
        }
        Ok((fresh, grown))
    }

    /// The switch, which cannot fail: every kept group takes its wanted pools and routes,
    /// grown groups their new sockets and owners; groups no site wants any more close (the
    /// master's copies now; the old workers' with them). How many closed.
    pub(super) fn switch_listeners(
        &mut self,
        fresh: Vec<ListenerGroup>,
        grown: Vec<Grown>,
        wanted: Vec<ListenerGroup>,
        new: &Config,
        plan: &crate::placement::Plan,
    ) -> usize {
        let took = self.take_routes(wanted);
        for (i, sockets, udp, owners) in grown {
            let g = &mut self.groups[i];
            g.sockets.extend(sockets);
            crate::server::listeners::arm_group(g, &owners, udp, new, &self.topology);
        }
        let before = self.groups.len();
        let mut took = took.into_iter();
        self.groups.retain(|_| took.next().flatten().is_some());
        let closed = before - self.groups.len();
        self.groups.extend(fresh);
        self.handoffs.retain_planned(&self.groups, &new.pools, plan);
        closed
    }

    /// Every running group takes the pools and routes `wanted` has for its address — an
    /// unchanged one too: a site inserted before its sites shifts the site numbers its
    /// routes name, and `/status` and the next reload's comparison read them against the
    /// new sites. Per running group, its index in `wanted` (none: no site wants the address
    /// any more).
    pub(super) fn take_routes(&mut self, wanted: Vec<ListenerGroup>) -> Vec<Option<usize>> {
        let mut wanted: HashMap<std::net::SocketAddr, (usize, ListenerGroup)> = (wanted
            .into_iter())
        .enumerate()
        .map(|(k, w)| (w.addr, (k, w)))
        .collect();
        (self.groups.iter_mut())
            .map(|g| {
                let (k, w) = wanted.remove(&g.addr)?;
                (g.pools, g.routes) = (w.pools, w.routes);
                Some(k)
            })
            .collect()
    }
}
