//! Certificates ordered on demand (`[server.acme] on_demand = true`), the master's side: a
//! worker holding a handshake for a name without a certificate asks (`want-certificate`);
//! the master judges the name — one of the pool's sites must take it on an https binding; a
//! name no binding writes out (a wildcard's, or a binding without a host's) must be approved
//! by `ask` when it is set, and a binding without a host takes names only through `ask` —
//! finds its pair in the store or has it ordered (`super::acme`'s task, ahead of renewals),
//! and answers with the pair (the store's scan, as for any new pair) or `no-certificate`.
//!
//! Owns: that judgement (which site takes a name and how it is proven, `ask`'s word), the
//! bounds a flood of made-up names meets (names in flight at once, orders started per hour,
//! a refused name remembered for a while), and which pools wait for which name — the data;
//! the supervisor's acting on it (the messages, the log) is `super::on_demand_answers`. Must
//! not touch: the ACME protocol (`server::acme`), the queue of orders (`super::acme`), the
//! handshakes (the workers, see `tls::on_demand`).
//!
//! Cost: nothing without `on_demand`. With it, a request only for a name a worker has no
//! certificate for, once per name in flight.

use crate::config::{Config, OnDemandSettings};
use crate::server::acme::Proof;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The longest an `ask` service is waited for.
const ASK_WITHIN: Duration = Duration::from_secs(10);

/// How long a name stays refused: after `ask` said no or no site takes it, and after its
/// order failed (its handshakes fail at once meanwhile, and the CA is not asked again).
pub(super) const REFUSED_FOR: Duration = Duration::from_secs(600);
pub(super) const FAILED_FOR: Duration = Duration::from_secs(120);

/// The most refused names remembered (a flood of made-up names must not grow the master).
const REMEMBERED: usize = 10_000;

/// What the master knows of the names asked for on demand.
#[derive(Default)]
pub(super) struct OnDemandOrders {
    /// By name: being judged or ordered now, how it is proven, and the pools whose
    /// handshakes wait for it.
    pub(super) in_flight: HashMap<String, (Proof, Vec<String>)>,
    /// When each order of the last hour started.
    started: VecDeque<Instant>,
    /// By name: refused until when, and why.
    refused: HashMap<String, (Instant, String)>,
    /// Refusals so far (the log says the first ten, then each power of two).
    pub(super) refusals: u64,
}

/// What a name's judgement found (the task's, off the master's loop).
#[derive(Debug)]
pub enum Judged {
    /// Its pair is in the store already (ordered before a restart): served from it.
    Stored,
    /// To be ordered.
    Approved,
    /// Not to be ordered, and why.
    Refused(String),
    /// Approved, and counted in the fleet's hour (`[server.cluster]`): whether it fits.
    Counted(bool),
}

/// How a site's https binding takes a name: written out, by a wildcard, or as the binding
/// without a host.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Taken {
    Any,
    Wildcard,
    Exact,
}

/// How `pattern` (a binding's host: `None` for every name) takes `name`, if it does.
fn takes(pattern: Option<&str>, name: &str) -> Option<Taken> {
    match pattern {
        None => Some(Taken::Any),
        Some(p) if p == name => Some(Taken::Exact),
        Some(p) => {
            let suffix = p.strip_prefix('*')?;
            (name.len() > suffix.len() && name.ends_with(suffix)).then_some(Taken::Wildcard)
        }
    }
}

/// Which of `pool`'s sites without `tls` takes `name` on an https binding — the closest, as
/// the address's host table picks — and how the name is proven: HTTP-01 where that site
/// answers it over http://, else TLS-ALPN-01.
pub(super) fn site_for(config: &Config, pool: &str, name: &str) -> Option<(Taken, Proof)> {
    let sites = (config.sites.iter()).filter(|s| s.tls.is_none() && s.served_by(pool));
    let (taken, site) = sites
        .filter_map(|s| {
            let https = s.bindings.iter().filter(|b| b.tls);
            let best = https.filter_map(|b| takes(b.host.as_deref(), name)).max()?;
            Some((best, s))
        })
        .max_by_key(|(taken, _)| *taken)?;
    let http = (site.bindings.iter()).any(|b| !b.tls && takes(b.host.as_deref(), name).is_some());
    Some((
        taken,
        if http {
            Proof::Http01
        } else {
            Proof::TlsAlpn01
        },
    ))
}

impl OnDemandOrders {
    /// Why `name` is refused now without a look, if it is.
    pub(super) fn refused_now(
        &mut self,
        name: &str,
        settings: &OnDemandSettings,
    ) -> Option<String> {
        let now = Instant::now();
        if let Some((until, why)) = self.refused.get(name) {
            if *until > now {
                return Some(why.clone());
            }
            self.refused.remove(name);
        }
        if self.in_flight.len() >= settings.in_flight as usize {
            return Some(format!(
                "{} names are being ordered already (on_demand_in_flight)",
                self.in_flight.len()
            ));
        }
        None
    }

    /// Whether another order may start this hour; if so, it is counted.
    pub(super) fn may_start(&mut self, settings: &OnDemandSettings) -> bool {
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        while self.started.front().is_some_and(|t| now - *t >= hour) {
            self.started.pop_front();
        }
        if self.started.len() >= settings.per_hour as usize {
            return false;
        }
        self.started.push_back(now);
        true
    }

    /// Remembers `name` as refused for `wait`.
    pub(super) fn refuse(&mut self, name: &str, wait: Duration, why: &str) {
        if self.refused.len() >= REMEMBERED {
            let now = Instant::now();
            self.refused.retain(|_, (until, _)| *until > now);
            if self.refused.len() >= REMEMBERED {
                self.refused.clear();
            }
        }
        let until = Instant::now() + wait;
        self.refused
            .insert(name.to_string(), (until, why.to_string()));
    }
}

/// Judges `name` off the master's loop: its pair in `store`, else `ask`'s word when it must
/// be asked.
pub(super) async fn judge(
    name: String,
    store: std::path::PathBuf,
    ask: Option<crate::config::AskUrl>,
    fleet: Option<(crate::server::acme_fleet::FleetLink, u32)>,
) -> Judged {
    let judged = judge_here(name, store, ask).await;
    // In a fleet the hour's orders are the fleet's; etcd unreachable, this member counts.
    match (judged, fleet) {
        (Judged::Approved, Some((link, per_hour))) => match link.start_on_demand(per_hour).await {
            Ok(fits) => Judged::Counted(fits),
            Err(_) => Judged::Approved,
        },
        (judged, _) => judged,
    }
}

/// [`judge`]'s look at the store and `ask`.
async fn judge_here(
    name: String,
    store: std::path::PathBuf,
    ask: Option<crate::config::AskUrl>,
) -> Judged {
    let stored = {
        let name = name.clone();
        let now = std::time::SystemTime::now();
        tokio::task::spawn_blocking(move || {
            crate::certs::store::StoreCert::read(&store, &name, now)
        })
    };
    if let Ok(Ok(Some(_))) = stored.await {
        return Judged::Stored;
    }
    let Some(ask) = ask else {
        return Judged::Approved;
    };
    match crate::server::upstream_probe::get_status(&ask.authority, &ask.target(&name), ASK_WITHIN)
        .await
    {
        Ok(status) if (200..300).contains(&status) => Judged::Approved,
        Ok(status) => Judged::Refused(format!("{} answered {status}", ask.url)),
        Err(e) => Judged::Refused(format!("{} could not be asked: {e}", ask.url)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_takes_its_name_its_wildcards_names_and_without_a_host_every_name() {
        assert_eq!(takes(Some("a.test"), "a.test"), Some(Taken::Exact));
        assert_eq!(takes(Some("*.a.test"), "x.a.test"), Some(Taken::Wildcard));
        assert_eq!(takes(Some("*.a.test"), "y.x.a.test"), Some(Taken::Wildcard));
        assert_eq!(takes(Some("*.a.test"), "a.test"), None);
        assert_eq!(takes(Some("*.a.test"), "xa.test"), None);
        assert_eq!(takes(Some("b.test"), "a.test"), None);
        assert_eq!(takes(None, "a.test"), Some(Taken::Any));
        assert!(Taken::Exact > Taken::Wildcard && Taken::Wildcard > Taken::Any);
    }

    #[test]
    fn limits_refuse_past_the_flight_and_the_hour() {
        let settings = OnDemandSettings {
            ask: None,
            in_flight: 1,
            per_hour: 2,
        };
        let mut orders = OnDemandOrders::default();
        assert_eq!(orders.refused_now("a.test", &settings), None);
        orders
            .in_flight
            .insert("a.test".into(), (Proof::Http01, vec![]));
        assert!(orders
            .refused_now("b.test", &settings)
            .unwrap()
            .contains("on_demand_in_flight"));
        assert!(orders.may_start(&settings) && orders.may_start(&settings));
        assert!(!orders.may_start(&settings), "two an hour");
        orders.refuse("c.test", REFUSED_FOR, "ask said no");
        orders.in_flight.clear();
        assert_eq!(
            orders.refused_now("c.test", &settings).as_deref(),
            Some("ask said no")
        );
    }
}
