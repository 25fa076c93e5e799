//! The supervisor's answers to handshakes held for certificates ordered on demand (see
//! `super::on_demand` for the judgement and its bounds): a worker's `want-certificate`
//! judged off the master's loop, the order queued, and the pair sent — or `no-certificate`,
//! and a log line, sparingly.
//!
//! Owns: those steps in the supervisor. Must not touch: the rules (`super::on_demand`), the
//! ordering (`super::acme`), the store's reading (`super::cert_store`).

use super::event::Event;
use super::on_demand::{judge, site_for, Judged, Taken, FAILED_FOR, REFUSED_FOR};
use super::Supervisor;
use crate::server::control::Message;
use crate::server::log;

impl Supervisor {
    /// A worker of generation `generation` holds a handshake for `name`, which it has no
    /// certificate for.
    pub(super) fn want_certificate(&mut self, generation: u64, name: &str) {
        let Some(slot) = self.slot_of(generation) else {
            return;
        };
        let pool = self.pools[self.slots[slot].pool].spec.name.clone();
        let name = name.to_ascii_lowercase();
        let acme = self.config.server.acme.as_ref();
        let (Some(settings), Some(store)) = (
            acme.and_then(|a| a.on_demand.clone()),
            self.config.server.certificates.clone(),
        ) else {
            return self.no_certificate(&name, &[pool], None);
        };
        if let Some((_, pools)) = self.on_demand.in_flight.get_mut(&name) {
            if !pools.contains(&pool) {
                pools.push(pool);
            }
            return;
        }
        if !crate::tls::plain_host_name(&name) {
            return self.no_certificate(&name, &[pool], Some("not a host name"));
        }
        if let Some(why) = self.on_demand.refused_now(&name, &settings) {
            return self.no_certificate(&name, &[pool], Some(&why));
        }
        let Some((taken, proof)) = site_for(&self.config, &pool, &name) else {
            let why = format!("no site of pool {pool} has an https binding that takes it");
            self.on_demand.refuse(&name, REFUSED_FOR, &why);
            return self.no_certificate(&name, &[pool], Some(&why));
        };
        let ask = match (taken, &settings.ask) {
            (Taken::Exact, _) => None,
            (Taken::Any, None) => {
                let why = "only a binding without a host takes it, and such names are ordered only when `ask` approves them (set [server.acme] ask)";
                self.on_demand.refuse(&name, REFUSED_FOR, why);
                return self.no_certificate(&name, &[pool], Some(why));
            }
            (_, ask) => ask.clone(),
        };
        self.on_demand
            .in_flight
            .insert(name.clone(), (proof, vec![pool]));
        let events = self.events.clone();
        let fleet = (self.fleet.link.borrow().clone()).map(|link| (link, settings.per_hour));
        tokio::spawn(async move {
            let judged = judge(name.clone(), store, ask, fleet).await;
            let _ = events.send(Event::OnDemandJudged { name, judged });
        });
    }

    /// `name`'s judgement came back.
    pub(super) fn on_demand_judged(&mut self, name: &str, judged: Judged) {
        let Some((proof, pools)) = self.on_demand.in_flight.get(name).cloned() else {
            return;
        };
        let settings = self
            .config
            .server
            .acme
            .as_ref()
            .and_then(|a| a.on_demand.clone());
        match judged {
            Judged::Stored => {
                self.on_demand.in_flight.remove(name);
                self.acme.want(name, proof, false);
                self.serve_stored(name, &pools);
            }
            Judged::Approved if settings.is_some_and(|s| !self.on_demand.may_start(&s)) => {
                self.on_demand.in_flight.remove(name);
                let why = "the hour's orders are spent (on_demand_per_hour)";
                self.no_certificate(name, &pools, Some(why));
            }
            Judged::Counted(false) => {
                self.on_demand.in_flight.remove(name);
                let why = "the fleet's orders of the hour are spent (on_demand_per_hour)";
                self.no_certificate(name, &pools, Some(why));
            }
            Judged::Approved | Judged::Counted(true) => {
                log(
                    "master",
                    format!("acme: {name}: asked for by a handshake; ordering it"),
                );
                self.acme.want(name, proof, true);
            }
            Judged::Refused(why) => {
                self.on_demand.in_flight.remove(name);
                self.on_demand.refuse(name, REFUSED_FOR, &why);
                self.no_certificate(name, &pools, Some(&why));
            }
        }
    }

    /// An order ended: a name asked for on demand is served, or its handshakes let go.
    pub(super) fn on_demand_ordered(&mut self, name: &str, issued: bool) {
        let Some((_, pools)) = self.on_demand.in_flight.remove(name) else {
            return;
        };
        if issued {
            self.serve_stored(name, &pools);
        } else {
            self.on_demand
                .refuse(name, FAILED_FOR, "its order failed lately");
            self.no_certificate(name, &pools, None);
        }
    }

    /// `name`'s pair is in the store: the pools' workers get it now (and from now on, as
    /// every store name of theirs: at their start, and when its files change).
    fn serve_stored(&mut self, name: &str, pools: &[String]) {
        for pool in pools {
            self.cert_store.add(pool, name);
        }
        self.cert_store.seen.remove(name);
        self.cert_store.scan_now();
        self.scan_certificate_store();
    }

    /// The handshakes `pools` hold for `name` go on without a certificate; `why`, when
    /// given, is logged (the first ten, then each power of two).
    fn no_certificate(&mut self, name: &str, pools: &[String], why: Option<&str>) {
        if let Some(why) = why {
            self.on_demand.refusals += 1;
            let n = self.on_demand.refusals;
            if crate::os::nth_worth_logging(n) {
                let shown: String = name.escape_debug().take(100).collect();
                log(
                    "master",
                    format!(
                        "acme: on demand: no certificate for `{shown}`: {why} ({n} refused so far)"
                    ),
                );
            }
        }
        let line = Message::NoCertificate(name.to_string()).line();
        for pool in pools {
            self.send_to_pool(pool, &line);
        }
    }
}
