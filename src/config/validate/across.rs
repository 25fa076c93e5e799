//! What no one pool or site tells alone, checked over them all: names and bindings against
//! each other's (with `site`'s and `upstream`'s checks), on-demand bounds and warm-up pages
//! here. A whole validation runs them once at its end; a revision (`config::revise`) runs
//! them over the configuration it made.
//!
//! Owns: the order of those checks and the two kept here. Must not touch: a single pool's
//! or site's own keys (their modules').

use super::super::locate::Seg;
use super::super::model::*;
use super::super::site::SiteSpec;
use super::Validator;

impl Validator {
    /// What no one pool or site tells alone: their names and bindings against each other's,
    /// the upstream groups written (the first `written_groups`) used, logs' owners, warm-up
    /// pages, on-demand bounds, ACME's names, HTTP/3 (which also writes each https site's
    /// `alt_svc`). Each is an index or a pass, never pools × sites.
    pub(in crate::config) fn check_across(
        &mut self,
        server: &ServerSettings,
        written_groups: usize,
        sites: &mut [std::sync::Arc<SiteSpec>],
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        self.check_bindings(sites, pools);
        self.check_upstreams_used(written_groups, sites);
        self.check_log_owners(sites, pools);
        self.check_warmup_pages(sites, pools);
        self.check_on_demand_bounds(server, pools);
        self.check_acme_names(server, sites);
        self.check_http3(server, sites, pools);
        // A fleet's member may start before its first site is shared (it serves none yet).
        if sites.is_empty() && server.cluster.is_none() {
            self.err(
                &[Seg::Key("site")],
                "the config defines no [[site]]; add one with `bindings` and a `[[site.app]]`",
            );
        }
    }

    /// `on_demand_starting` and `on_demand_running` bound pools that start on demand: with
    /// none, they would do nothing.
    pub(super) fn check_on_demand_bounds(
        &mut self,
        server: &ServerSettings,
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        let on_demand = || pools.iter().filter(|p| p.start == StartMode::OnDemand);
        // A default no on-demand pool takes (each sets its own) acts on nothing either.
        for (key, set, own) in [
            (
                "on_demand_memory_limit",
                server.on_demand_memory_limit,
                on_demand().all(|p| p.memory_limit.is_some()),
            ),
            (
                "on_demand_pids_limit",
                server.on_demand_pids_limit,
                on_demand().all(|p| p.pids_limit.is_some()),
            ),
        ] {
            if set != TenantDefault::Auto && own && on_demand().next().is_some() {
                let limit = key.trim_start_matches("on_demand_");
                self.err(&[Seg::Key("server"), Seg::Key(key)], format!("is the {limit} of the on-demand pools that set none, and every one sets its own; remove it, or a pool's {limit}"));
            }
        }
        if on_demand().next().is_some() {
            return;
        }
        for (key, set) in [
            ("on_demand_starting", server.on_demand_starting.is_some()),
            ("on_demand_running", server.on_demand_running.is_some()),
            (
                "on_demand_memory_limit",
                server.on_demand_memory_limit != TenantDefault::Auto,
            ),
            (
                "on_demand_pids_limit",
                server.on_demand_pids_limit != TenantDefault::Auto,
            ),
        ] {
            if set {
                self.err(&[Seg::Key("server"), Seg::Key(key)], "bounds the pools that start on demand, and every pool here always runs; add start = \"on-demand\" to the pools it should bound, or remove it");
            }
        }
    }

    /// A `warmup_page` is answered by the master, which holds no TLS keys: its pool's sites
    /// must be plain http.
    pub(super) fn check_warmup_pages(
        &mut self,
        sites: &[std::sync::Arc<SiteSpec>],
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        if pools.iter().all(|p| p.warmup_page.is_none()) {
            return;
        }
        // Each pool's first site with https bindings, indexed once (not a search of every
        // site per pool: thousands of on-demand pools may each have a warm-up page).
        let mut https: std::collections::HashMap<&str, &SiteSpec> =
            std::collections::HashMap::new();
        for s in sites.iter().filter(|s| s.bindings.iter().any(|b| b.tls)) {
            for a in &s.apps {
                https.entry(a.pool.as_str()).or_insert(s);
            }
        }
        for (i, pool) in pools.iter().enumerate() {
            if pool.warmup_page.is_none() {
                continue;
            }
            if let Some(site) = https.get(pool.name.as_str()) {
                self.err(
                    &[Seg::Key("pool"), Seg::Index(i), Seg::Key("warmup_page")],
                    format!("is answered by the master, which holds no TLS keys, and site `{}` of this pool has https bindings; remove warmup_page (its clients then wait for the pool, as without it)", site.name),
                );
            }
        }
    }
}
