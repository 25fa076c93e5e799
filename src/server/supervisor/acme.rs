//! The certificates the master orders for the store (`[server.acme]`): every host name of a
//! site that takes its certificates from the store is kept by one task of the master's own,
//! which reads each name's pair, waits until it is due (two thirds of its lifetime,
//! jittered; see `crate::certs::renewal`), and orders a new one — at once when there is
//! none. The store's scan (`cert_store`) then hands the new pair to the workers, as it does
//! a pair a person put there: no reload, no restart, and a restart finds the pair and orders
//! nothing.
//!
//! Where the directory offers renewal information (ARI, RFC 9773), a name's look asks it
//! (at most as often as its `Retry-After` says, within an hour and a day) and its suggested
//! time wins over our own (see [`ari`]).
//!
//! In a fleet (`[server.cluster]`) an order goes through [`fleet`]: one member orders each
//! name, the others take its pair from etcd.
//!
//! Owns: that task and its queue, how many orders run at once ([`MAX_ORDERING`]), the
//! back-off after a failure (one minute doubling to six hours; an hour at least after a rate
//! limit), and what the log says (once per change of a name's state). Must not touch: the
//! ACME protocol (`server::acme`) or the store's reading for the workers.

use super::acme_dns::{start_dns, DnsCell, DnsPart, DnsStarted};
use super::acme_schedule::{back_off, next_look, pair_due, read_pair, LOOK_AGAIN};
use super::event::{Event, Issued};
use crate::config::Config;
use crate::server::acme::Proof;
use crate::server::acme_fleet::FleetLink;
use crate::server::log;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// Orders in flight at once: a hoster's thousand new names are ordered a few at a time,
/// within what a CA's rate limits take.
pub(super) const MAX_ORDERING: usize = 4;

/// The ordering task of the running configuration, and what it told.
#[derive(Default)]
pub(super) struct Acme {
    task: Option<tokio::task::JoinHandle<()>>,
    /// To the task: a name to order now (`true`: asked for by a handshake, on demand) or to
    /// keep (`false`: its pair was found in the store).
    wanted: Option<tokio::sync::mpsc::UnboundedSender<(String, Proof, bool)>>,
    /// The names found or ordered on demand since the server started, and how each is
    /// proven: kept (renewed) as a configured name is, across reloads.
    pub(super) on_demand: std::collections::BTreeMap<String, Proof>,
    /// Whether names without a pair wait for a handshake (`on_demand`).
    demand: bool,
    /// By name: the last state said in the log (a failure's text, or "issued").
    said: HashMap<String, String>,
    /// By name, in order: what `status` shows.
    shown: std::collections::BTreeMap<String, Shown>,
    /// The names not yet looked at since the configuration started (for the one summary
    /// line: a hoster's ten thousand names say nothing each).
    unseen: std::collections::HashSet<String>,
    /// Of the names looked at since: how many have a pair, and the first renewal among them.
    kept: (usize, Option<SystemTime>),
    /// DNS-01's publisher and the settings it was made from (kept across a reload that
    /// leaves them as they were: its server keeps its sockets), or why it could not start.
    dns: DnsPart,
    /// What the running task was started for: its settings, store, fleet and configured
    /// names. A reload that leaves them as they were keeps it, and its orders under way.
    started_for: Option<StartedFor>,
}

/// What an ordering task is started for (see [`Acme::start`]).
type StartedFor = (
    crate::config::AcmeSettings,
    PathBuf,
    Option<crate::config::cluster::ClusterSpec>,
    Vec<(String, Proof)>,
);

/// A name's certificate as `status` shows it.
#[derive(Default)]
struct Shown {
    not_after: Option<SystemTime>,
    renew_at: Option<SystemTime>,
    error: Option<String>,
    /// On demand, and not asked for by a handshake yet.
    unasked: bool,
}

/// What the task of a configuration and its orders share.
struct Shared {
    settings: crate::config::AcmeSettings,
    store: PathBuf,
    challenges: PathBuf,
    /// The directory's account, once made (registered or read); `None` again when the
    /// directory forgot it.
    account: tokio::sync::Mutex<Option<instant_acme::Account>>,
    events: tokio::sync::mpsc::UnboundedSender<Event>,
    /// DNS-01's publisher (`settings.dns`'s).
    dns: Option<DnsCell>,
    /// The fleet's etcd, while reached (`None`: no fleet; see [`fleet`]).
    fleet: Option<tokio::sync::watch::Receiver<Option<FleetLink>>>,
}

impl Acme {
    /// Starts the task of `config` (none without `[server.acme]`), stopping the last
    /// configuration's: an order under way is dropped and starts again with the new task.
    /// A configuration with the same settings, store, fleet and names keeps the running task
    /// (a hosting panel changing one site's root every second would otherwise drop every
    /// order under way, and never finish one).
    pub(super) fn start(
        &mut self,
        config: &Config,
        events: &tokio::sync::mpsc::UnboundedSender<Event>,
        fleet: Option<tokio::sync::watch::Receiver<Option<FleetLink>>>,
    ) {
        let configured = (config.server.acme.as_ref())
            .zip(config.server.certificates.as_ref())
            .map(|(settings, store)| {
                let names = crate::server::acme::names(config);
                let cluster = config.server.cluster.clone();
                (settings.clone(), store.clone(), cluster, names)
            });
        let running = self.task.as_ref().is_some_and(|t| !t.is_finished());
        if running && configured.is_some() && configured == self.started_for {
            return;
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.started_for = configured;
        let (Some(settings), Some(store)) = (&config.server.acme, &config.server.certificates)
        else {
            self.shown.clear();
            // Its DNS-01 server, if it had one, lets its address go.
            self.dns = DnsPart::default();
            return;
        };
        let on_demand = settings.on_demand.is_some();
        self.demand = on_demand;
        if !on_demand {
            self.on_demand.clear();
        }
        let mut names = (self.started_for.as_ref()).map_or_else(Vec::new, |s| s.3.clone());
        names.extend(self.on_demand.iter().map(|(n, p)| (n.clone(), *p)));
        names.sort_unstable();
        names.dedup_by(|a, b| a.0 == b.0);
        let wanted: std::collections::HashSet<&str> =
            names.iter().map(|(n, _)| n.as_str()).collect();
        self.shown.retain(|n, _| wanted.contains(n.as_str()));
        for (n, proof) in &names {
            let shown = self.shown.entry(n.clone()).or_default();
            shown.unasked = on_demand && shown.not_after.is_none() && !at_start(n, *proof);
        }
        self.said.retain(|n, _| wanted.contains(n.as_str()));
        self.unseen = wanted.iter().map(|n| n.to_string()).collect();
        self.kept = (0, None);
        let challenges = match crate::server::acme::challenge_dir() {
            Ok(dir) => dir,
            Err(e) => {
                crate::server::log("acme", format!("no certificate is ordered: {e}"));
                return;
            }
        };
        // What is there is an order's no task runs any more: the last configuration's (its
        // task was stopped above). Its files answer nothing now; they go. In a fleet the
        // folder also holds the proofs of other members' orders under way (copied from
        // etcd), which a reload must not take.
        if fleet.is_none() {
            let _ = std::fs::remove_dir_all(&challenges);
        }
        let dns = self.dns.publisher(settings.dns.as_ref());
        let shared = Arc::new(Shared {
            dns,
            settings: settings.clone(),
            store: store.clone(),
            challenges,
            account: tokio::sync::Mutex::new(None),
            events: events.clone(),
            fleet,
        });
        let (wanted, asked) = tokio::sync::mpsc::unbounded_channel();
        self.wanted = Some(wanted);
        self.task = Some(tokio::spawn(keep(shared, names, on_demand, asked)));
    }

    /// A name asked for by a handshake (on demand): ordered now (`order`), or — its pair
    /// found in the store — kept from now on; shown in `status` either way.
    pub(super) fn want(&mut self, name: &str, proof: Proof, order: bool) {
        self.on_demand.insert(name.to_string(), proof);
        let shown = self.shown.entry(name.to_string()).or_default();
        shown.unasked = false;
        if let Some(wanted) = &self.wanted {
            let _ = wanted.send((name.to_string(), proof, order));
        }
    }

    /// DNS-01's publisher of the running configuration (once started), if it has one.
    pub(super) fn dns_publisher(
        &self,
    ) -> Option<impl std::future::Future<Output = DnsStarted> + 'static> {
        self.dns.running()
    }

    /// The server stops: orders under way are dropped. Their folder goes with the master's
    /// runtime folder, after this (no order outlives the master).
    pub(super) fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.started_for = None;
        self.dns = DnsPart::default();
    }

    /// What `status` shows of the names' certificates: every one, or (`all` false: the
    /// admin page's feed, asked every second) those that need a look — not
    /// valid, or ending within `tls::EXPIRY_WARNING` — so that ten thousand sound
    /// certificates do not ride along each time.
    pub(super) fn status(&self, all: bool) -> Vec<crate::server::status::CertificateStatus> {
        let soon = SystemTime::now() + crate::tls::EXPIRY_WARNING;
        let secs = |t: Option<SystemTime>| {
            t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
        };
        (self.shown.iter())
            .filter(|(_, s)| {
                let sound = s.error.is_none() && s.not_after.is_some_and(|end| end > soon);
                all || !sound
            })
            .map(|(name, s)| crate::server::status::CertificateStatus {
                name: name.clone(),
                not_after: secs(s.not_after),
                renew_at: secs(s.renew_at),
                state: match (&s.error, s.renew_at) {
                    (Some(_), _) => "failing",
                    (None, Some(_)) => "valid",
                    (None, None) if s.unasked => "on demand",
                    (None, None) => "ordering",
                }
                .into(),
                last_error: s.error.clone(),
            })
            .collect()
    }

    /// A name's pair was looked at: `pair` its renewal time and end, when it has one. The
    /// first look at every name since the configuration started is summed up in one line.
    pub(super) fn on_looked(&mut self, name: &str, pair: Option<(SystemTime, SystemTime)>) {
        if let (Some(shown), Some((due, not_after))) = (self.shown.get_mut(name), pair) {
            shown.not_after = Some(not_after);
            shown.renew_at = Some(due);
            if due > SystemTime::now() {
                shown.error = None;
            }
        }
        if !self.unseen.remove(name) {
            return;
        }
        if let Some((due, _)) = pair {
            self.kept.0 += 1;
            self.kept.1 = Some(self.kept.1.map_or(due, |d| d.min(due)));
        }
        if self.unseen.is_empty() {
            let (kept, first) = self.kept;
            let next = first.map_or(String::new(), |t| {
                format!(
                    " (the first renewed from {})",
                    humantime::format_rfc3339_seconds(t)
                )
            });
            let when = if self.demand {
                "ordered at its first handshake"
            } else {
                "to order now"
            };
            log(
                "master",
                format!(
                    "acme: {} name(s): {kept} with a certificate in the store{next}, {} {when}",
                    self.shown.len(),
                    self.shown.len() - kept
                ),
            );
        }
    }

    /// A name's order ended: said in the log when its state changed.
    pub(super) fn on_ordered(&mut self, name: &str, outcome: Result<Issued, String>) {
        let state = match &outcome {
            Ok(_) => "issued".to_string(),
            Err(e) => e.clone(),
        };
        let changed = self.said.get(name) != Some(&state);
        if let Some(shown) = self.shown.get_mut(name) {
            match &outcome {
                Ok(Issued { until, .. }) => {
                    shown.not_after = Some(*until);
                    shown.error = None;
                }
                Err(e) => shown.error = Some(e.clone()),
            }
        }
        match outcome {
            Ok(Issued {
                until,
                by: Some(by),
            }) => log(
                "master",
                format!(
                    "acme: {name}: certificate ordered by fleet member {by}, taken from etcd, valid until {} (in the store, served from the next handshake)",
                    humantime::format_rfc3339_seconds(until)
                ),
            ),
            Ok(Issued { until, by: None }) => log(
                "master",
                format!(
                    "acme: {name}: certificate issued, valid until {} (in the store, served from the next handshake)",
                    humantime::format_rfc3339_seconds(until)
                ),
            ),
            Err(e) if changed => log(
                "master",
                format!(
                    "acme: {name}: the order failed: {e} (tried again later, backing off; said again when the cause changes)"
                ),
            ),
            Err(_) => {}
        }
        self.said.insert(name.to_string(), state);
    }
}

/// Keeps every name's certificate in the store, in one task: each name's pair looked at (all
/// of them at first, off the master's loop), kept in a queue by when it is next looked at —
/// its renewal time, or within [`LOOK_AGAIN`] — and ordered when due, at most
/// [`MAX_ORDERING`] at once. One task and one queue entry per name, not a task per name: a
/// sleeping task holds its whole future, an order's included (measured, 10 000 names cost
/// the master 33 MiB that way).
///
/// `on_demand`: a name without a pair is ordered only once a handshake asks for it (it comes
/// through `wanted`, ahead of every renewal); such a name whose order fails leaves the queue
/// (the next handshake asks again, after the master's refusal wait), while a name that has
/// had a pair is retried with back-off as any.
async fn keep(
    shared: Arc<Shared>,
    names: Vec<(String, Proof)>,
    on_demand: bool,
    mut wanted: tokio::sync::mpsc::UnboundedReceiver<(String, Proof, bool)>,
) {
    let Some(mut queue) = first_queue(&shared, names, on_demand).await else {
        return;
    };
    // Names a handshake asked for that have had no pair yet.
    let mut fresh = std::collections::HashSet::new();
    let mut ari = ari::Ari::default();
    // Names being ordered now: a second entry of one (asked for while queued) waits on it.
    let mut under_way = std::collections::HashSet::new();
    let mut ordering = tokio::task::JoinSet::new();
    loop {
        let now = SystemTime::now();
        // Due names looked at again (their pair may have been renewed by hand), and ordered.
        while ordering.len() < MAX_ORDERING {
            let Some(Reverse((at, ..))) = queue.peek() else {
                break;
            };
            if *at > now {
                break;
            }
            let Some(Reverse((_, name, proof, failures))) = queue.pop() else {
                break;
            };
            if under_way.contains(&name) {
                continue;
            }
            let pair = look(&shared, &mut ari, &name).await;
            let _ = shared.events.send(Event::AcmeLooked {
                name: name.clone(),
                pair,
            });
            if pair.is_some_and(|(due, _)| due > now) {
                fresh.remove(&name);
                queue.push(Reverse((next_look(pair), name, proof, 0)));
                continue;
            }
            let shared = Arc::clone(&shared);
            under_way.insert(name.clone());
            ordering.spawn(async move {
                let outcome = order(&shared, &name, proof).await;
                (name, proof, failures, outcome)
            });
        }
        let wake = queue.peek().map(|Reverse((at, ..))| *at);
        let sleep = wake.map_or(LOOK_AGAIN, |at| at.duration_since(now).unwrap_or_default());
        tokio::select! {
            done = ordering.join_next(), if !ordering.is_empty() => {
                let Some(Ok((name, proof, failures, outcome))) = done else { continue };
                under_way.remove(&name);
                // A name asked for on demand that never had a pair leaves the queue when its
                // order fails (the next handshake asks again); any other is retried.
                let dropped = fresh.remove(&name) && outcome.is_err();
                let at = match &outcome {
                    Ok(_) => SystemTime::now(),
                    Err(cause) => SystemTime::now() + back_off(failures + 1, cause),
                };
                let failures = if outcome.is_ok() { 0 } else { failures + 1 };
                let _ = shared.events.send(Event::AcmeOrdered { name: name.clone(), outcome });
                if !dropped {
                    queue.push(Reverse((at, name, proof, failures)));
                }
            }
            Some((name, proof, order)) = wanted.recv() => {
                // Asked for by a handshake: first in the queue (the epoch is before every
                // renewal's time); a name already queued is queued again, harmlessly (its
                // look finds the pair).
                let at = if order { std::time::UNIX_EPOCH } else { SystemTime::now() };
                if order {
                    fresh.insert(name.clone());
                }
                queue.push(Reverse((at, name, proof, 0)));
            }
            () = tokio::time::sleep(sleep) => {}
        }
    }
}

/// When `name`'s pair in the store is due for renewal, and until when it is valid (none: no
/// pair): the directory's word on when to renew (ARI), where it gives one, over our own.
async fn look(
    shared: &Arc<Shared>,
    ari: &mut ari::Ari,
    name: &str,
) -> Option<(SystemTime, SystemTime)> {
    let pair = {
        let (store, name) = (shared.store.clone(), name.to_string());
        tokio::task::spawn_blocking(move || pair_due(&store, &name))
            .await
            .ok()
            .flatten()
    };
    let (due, until) = pair?;
    let asked = ari.due(shared.account(), &shared.store, name).await;
    Some((asked.unwrap_or(due), until))
}

/// Orders `name`'s certificate: here, or — in a fleet — under the fleet's lock for it.
async fn order(shared: &Arc<Shared>, name: &str, proof: Proof) -> Result<Issued, String> {
    let Some(link) = &shared.fleet else {
        return order_once(shared, name, proof, None)
            .await
            .map(|until| Issued { until, by: None });
    };
    // A member that cannot have its account (the directory unreachable from here) takes no
    // lock: the name is left to the members that can.
    shared.account().await?;
    let order = |link: FleetLink| {
        let (shared, name) = (Arc::clone(shared), name.to_string());
        async move { order_once(&shared, &name, proof, Some(&link)).await }
    };
    fleet::order(link, &shared.store, name, order).await
}

/// Whether `name` is ordered at start even on demand: a wildcard, which no handshake names.
fn at_start(name: &str, proof: Proof) -> bool {
    proof == Proof::Dns01 && name.starts_with("*.")
}

/// The renewal queue: (when to look, name, its proof, failures in a row), soonest first.
type Queue = BinaryHeap<Reverse<(SystemTime, String, Proof, u32)>>;

/// The queue of `names` as the store holds them now (each name's pair looked at, and told
/// to the supervisor); on demand, a name without a pair waits for a handshake to ask.
async fn first_queue(
    shared: &Arc<Shared>,
    names: Vec<(String, Proof)>,
    on_demand: bool,
) -> Option<Queue> {
    let store = shared.store.clone();
    let first = tokio::task::spawn_blocking(move || {
        (names.into_iter())
            .map(|(name, proof)| {
                let pair = pair_due(&store, &name);
                (name, proof, pair)
            })
            .collect::<Vec<_>>()
    });
    let first = first.await.ok()?;
    let mut queue = Queue::new();
    for (name, proof, pair) in first {
        if pair.is_some() || !on_demand || at_start(&name, proof) {
            queue.push(Reverse((next_look(pair), name.clone(), proof, 0)));
        }
        let _ = shared.events.send(Event::AcmeLooked { name, pair });
    }
    Some(queue)
}

impl Shared {
    /// The directory's account: the one made before, else the kept one read, else a new one
    /// registered (one at a time: orders wait for the first).
    async fn account(&self) -> Result<instant_acme::Account, String> {
        let mut held = self.account.lock().await;
        if let Some(account) = &*held {
            return Ok(account.clone());
        }
        let account = match &self.fleet {
            Some(link) => fleet::account(link, &self.settings, &self.store).await?,
            None => crate::server::acme::account(&self.settings, &self.store).await?,
        };
        *held = Some(account.clone());
        Ok(account)
    }

    /// The directory said it does not know the account: its file goes aside and the next
    /// order registers a new one (logged). Once per account: orders that fail together find
    /// it already gone.
    async fn forget_account(&self, gone: &instant_acme::Account) {
        let mut held = self.account.lock().await;
        if held.as_ref().is_none_or(|a| a.id() != gone.id()) {
            return;
        }
        *held = None;
        let kept = crate::server::acme::set_account_aside(&self.settings, &self.store);
        let said = match kept {
            Ok(aside) => format!("kept aside as {}", aside.display()),
            Err(e) => e,
        };
        log(
            "master",
            format!(
                "ACME: {} no longer knows our account ({said}); registering a new one",
                self.settings.directory
            ),
        );
    }
}

/// One order for `name`: the new certificate's end. An account the directory forgot is
/// replaced by a new one, and the order made again with it, once.
async fn order_once(
    shared: &Shared,
    name: &str,
    proof: Proof,
    fleet: Option<&FleetLink>,
) -> Result<SystemTime, String> {
    let store = &shared.store;
    let dns = match (&shared.dns, &shared.settings.dns) {
        (Some(cell), Some(settings)) => Some(cell.get_or_init(|| start_dns(settings)).await),
        _ => None,
    };
    let dns = match (dns, proof) {
        (Some(Ok(publisher)), _) => Some(&**publisher),
        (Some(Err(e)), Proof::Dns01) => return Err(format!("DNS-01 cannot be answered: {e}")),
        _ => None,
    };
    let answering = crate::server::acme::Answering {
        files: &shared.challenges,
        dns,
        fleet,
    };
    let mut again = true;
    loop {
        let account = shared.account().await?;
        let profile = shared.settings.profile.as_deref();
        match crate::server::acme::order(
            &account,
            (name, proof, profile),
            answering,
            store,
            shared.settings.timeout,
        )
        .await
        {
            Err(cause) if again && crate::server::acme::account_gone(&cause) => {
                shared.forget_account(&account).await;
                again = false;
            }
            r => break r?,
        }
    }
    let (store, owned) = (shared.store.clone(), name.to_string());
    let chain = tokio::task::spawn_blocking(move || read_pair(&store, &owned))
        .await
        .ok()
        .flatten()
        .ok_or("the new pair cannot be read")?;
    Ok(crate::certs::renewal::lifetime(&chain)?.1)
}

mod ari;
mod fleet;
#[cfg(test)]
mod tests;
