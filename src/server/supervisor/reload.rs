//! Reload (SIGHUP or `espalier reload`): the config file read again and applied without a
//! restart, as nginx's reload builds its new cycle beside the old one.
//!
//! Owns: the difference between the running configuration and the new one — unchanged pools
//! keep running untouched; a changed pool gets new workers on its existing sockets (more
//! opened if it grew) and its old workers drain once the new ones are all ready; a new pool
//! starts; a removed pool's workers drain and its listeners close with them. Transactional:
//! everything that can fail (the config, the plan, binding new addresses, opening sockets) is
//! done before anything running changes, so a refused reload changes nothing.
//! Must not touch: how workers start or drain (see [`super::slots`]).

use super::slots::{PoolRt, Slot};
use super::Supervisor;
use crate::config::Config;
use crate::os;
use crate::server::lifecycle;
use crate::server::listeners::ListenerGroup;
use crate::server::log;
use std::time::Instant;

impl Supervisor {
    /// Re-reads the config file and applies it: unchanged pools keep running untouched; a
    /// changed pool gets new workers on its existing sockets (more opened if it grew) and its
    /// old workers drain once the new ones are all ready; a new pool starts; a removed pool's
    /// workers drain and its listeners close with them. A config with errors changes nothing.
    fn reload(&mut self) -> Result<String, String> {
        let path = self
            .config
            .source
            .clone()
            .ok_or("espalier serve was started without -c FILE: there is no file to reload")?;
        let file = path.display().to_string();
        let new = Config::load(&path, &self.topology).map_err(|e| e.to_string())?;
        let plan = crate::placement::plan(&self.topology, &new.pools, &[])
            .map_err(|e| format!("{file}: {e}"))?;
        let mut notes = Vec::new();
        if new.server.admin != self.config.server.admin {
            notes.push(format!(
                "the admin address stays {} until a restart",
                self.config.server.admin
            ));
        }
        let mut old_server = self.config.server.clone();
        old_server.admin = new.server.admin;
        let server_changed = old_server != new.server;
        let mut wanted = crate::server::listeners::wanted_groups(&new);
        // An address may not move between pools while the old pool's workers still hold it.
        for w in &wanted {
            if let Some(g) = self
                .groups
                .iter()
                .find(|g| g.addr == w.addr && g.pool != w.pool)
            {
                return Err(format!("{file}: http://{} moves from pool {} to pool {}: restart espalier serve to apply that", w.addr, g.pool, w.pool));
            }
        }
        let sites_of = |c: &Config, pool: &str| {
            c.sites
                .iter()
                .filter(|s| s.pool() == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let planned = |pool: &str| {
            plan.workers
                .iter()
                .filter(|w| w.pool == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let old_plan = crate::placement::plan(&self.topology, &self.config.pools, &[])
            .map_err(|e| e.to_string())?;
        let was_planned = |pool: &str| {
            old_plan
                .workers
                .iter()
                .filter(|w| w.pool == pool)
                .cloned()
                .collect::<Vec<_>>()
        };
        let changed: Vec<String> = new
            .pools
            .iter()
            .filter(|p| {
                server_changed
                    || self.config.pool(&p.name) != Some(*p)
                    || sites_of(&self.config, &p.name) != sites_of(&new, &p.name)
                    || was_planned(&p.name) != planned(&p.name)
            })
            .map(|p| p.name.clone())
            .collect();
        let removed: Vec<String> = self
            .config
            .pools
            .iter()
            .filter(|p| new.pool(&p.name).is_none())
            .map(|p| p.name.clone())
            .collect();

        // Listener groups, in two phases, like nginx's reload building its new cycle beside
        // the old one: first everything that can fail — binding new addresses, opening the
        // sockets a grown pool needs — into new sockets only; then, when all of it succeeded,
        // the switch, which cannot fail. A refused reload changes nothing that serves.
        let mut fresh: Vec<ListenerGroup> = Vec::new();
        let mut grown: Vec<(
            usize,
            Vec<socket2::Socket>,
            crate::server::listeners::SocketOwners,
        )> = Vec::new();
        for w in wanted.iter_mut().filter(|w| changed.contains(&w.pool)) {
            let owners =
                crate::server::listeners::group_owners(&w.pool, &new, &self.topology, &plan);
            match self
                .groups
                .iter()
                .position(|g| g.pool == w.pool && g.addr == w.addr)
            {
                Some(i) => {
                    let sockets = crate::server::listeners::open_missing(
                        &self.groups[i],
                        owners.len(),
                        &new,
                        &file,
                    )?;
                    grown.push((i, sockets, owners));
                }
                None => {
                    if let Err(e) = std::net::TcpListener::bind(w.addr) {
                        let site = crate::server::listeners::site_of(&new, w.addr);
                        return Err(crate::server::listeners::bind_error(
                            site, w.addr, &e, &file,
                        ));
                    }
                    let mut g = ListenerGroup {
                        pool: w.pool.clone(),
                        addr: w.addr,
                        routes: std::mem::take(&mut w.routes),
                        sockets: Vec::new(),
                        owners: Vec::new(),
                    };
                    crate::server::listeners::fill_group(
                        &mut g,
                        &new,
                        &self.topology,
                        &plan,
                        &file,
                    )?;
                    fresh.push(g);
                }
            }
        }
        // The switch: grown groups take their new sockets, routes and owners; groups no pool
        // wants any more close (the master's copies now; the old workers' with them).
        for (i, sockets, owners) in grown {
            let g = &mut self.groups[i];
            g.sockets.extend(sockets);
            if let Some(w) = wanted
                .iter_mut()
                .find(|w| w.pool == g.pool && w.addr == g.addr)
            {
                g.routes = std::mem::take(&mut w.routes);
            }
            crate::server::listeners::arm_group(g, &owners, &new, &self.topology);
        }
        let mut closed = 0;
        let mut groups: Vec<ListenerGroup> = Vec::new();
        for g in std::mem::take(&mut self.groups) {
            let keep_as_is = !changed.contains(&g.pool) && !removed.contains(&g.pool);
            let still_wanted = wanted.iter().any(|w| w.pool == g.pool && w.addr == g.addr);
            if keep_as_is || still_wanted {
                groups.push(g);
            } else {
                closed += 1;
            }
        }
        groups.extend(fresh);
        self.groups = groups;

        // Workers: changed and removed pools' processes retire; changed and new pools get slots.
        let specs = crate::server::spawn::worker_specs(&new, &plan, &self.groups);
        let mut slots = Vec::new();
        for mut slot in std::mem::take(&mut self.slots) {
            let pool = slot.spec.pool.clone();
            if changed.contains(&pool) || removed.contains(&pool) {
                let gone = removed.contains(&pool);
                for mut p in slot
                    .current
                    .take()
                    .into_iter()
                    .chain(slot.replacing.take())
                    .chain(slot.draining.drain(..))
                {
                    if gone || p.stopping {
                        p.stopping = true;
                        let _ = os::process::kill(p.pid, libc::SIGTERM);
                    }
                    self.retiring.push((pool.clone(), p));
                }
            } else {
                slots.push(slot);
            }
        }
        let mut pools: Vec<PoolRt> = Vec::new();
        for p in &new.pools {
            let old = self
                .pools
                .iter()
                .position(|x| x.spec.name == p.name)
                .map(|i| self.pools.remove(i));
            let mut rt = old.unwrap_or_else(|| PoolRt::new(p.clone()));
            rt.spec = p.clone();
            pools.push(rt);
        }
        for gone in self.pools.drain(..) {
            for r in gone.responders {
                r.abort();
            }
            // Its control group is removed at exit, once its workers are gone.
            if let Some(g) = gone.cpu_group {
                self.cpusets.push(g);
            }
        }
        self.pools = pools;
        let first_new = slots.len();
        for spec in specs.into_iter().filter(|s| changed.contains(&s.pool)) {
            slots.extend(Slot::for_spec(spec, 0, &new));
        }
        for s in &mut slots {
            s.pool = self
                .pools
                .iter()
                .position(|p| p.spec.name == s.spec.pool)
                .expect("slot of a configured pool");
        }
        self.slots = slots;
        self.config = new;
        // Pool indices moved: every proxied pool's fronts hear again where its apps are.
        self.upstreams_unsent = (0..self.pools.len()).collect();
        self.make_cgroups_for(first_new);
        for i in first_new..self.slots.len() {
            if self.pools[self.slots[i].pool].stopped.is_some() {
                continue;
            }
            if let Err(e) = self.start(i, false) {
                log("master", format!("{e}; trying again shortly"));
                self.slots[i].respawn_at = Some(Instant::now() + lifecycle::MAX_BACKOFF);
            }
        }
        let kept = self.pools.len() - changed.len();
        let mut summary = format!(
            "reloaded {file}: {kept} pool(s) unchanged, {} changed or new (their workers replaced, overlapped), {} removed, {closed} listener group(s) closed",
            changed.len(),
            removed.len()
        );
        for n in notes {
            summary.push_str("; ");
            summary.push_str(&n);
        }
        Ok(summary)
    }

    /// Reloads (SIGHUP or `espalier reload`) and logs the outcome; the message is the log line.
    pub(super) fn reload_logged(&mut self) -> Result<String, String> {
        let outcome = self
            .reload()
            .map_err(|e| format!("reload refused, the running configuration keeps serving: {e}"));
        let (Ok(line) | Err(line)) = &outcome;
        log("master", line);
        if outcome.is_ok() {
            // As nginx's reload: logs moved away are reopened by the workers that stay.
            self.reopen_logs();
        }
        outcome
    }
}
