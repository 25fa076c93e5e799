//! A worker's side of its control channel, once it is ready: it answers the master's pings
//! (its threads' figures, the upstream servers it ejected, the app processes that let its
//! requests time out), takes what the master sends (app processes' places, upstream checks,
//! certificates, session ticket keys, reopening the logs, a dispatcher's new hosts), and asks for what its requests wait on (a certificate
//! a handshake holds, a sleeping app) — until SIGTERM, SIGINT or the master's going away,
//! when the worker drains.
//!
//! Owns: the lines read and written after `ready`. Must not touch: the engine threads (they
//! share only what is passed here: health, tiers, upstream groups, the certificate store).

use crate::certs::store::StoreKeys;
use crate::proxy::{GroupHealth, SharedTiers};
use crate::server::control::Message;
use crate::server::hosts_update::{Hosts, HostsUpdate};
use crate::server::log;
use crate::server::spec::WorkerSpec;
use crate::server::worker_health::{cache_figures, pong, site_meters, ThreadHealth};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// What the control loop reads and changes of the worker's shared state.
pub(super) struct Shared<'a> {
    pub(super) health: &'a [Arc<ThreadHealth>],
    pub(super) tiers: &'a SharedTiers,
    pub(super) upstreams: &'a [Arc<GroupHealth>],
    pub(super) store: &'a StoreKeys,
    pub(super) tickets: &'a crate::tls::tickets::SharedTicketer,
}

/// A dispatcher's new hosts, made whole from what it holds and passed on to its
/// threads, and which update each took (see `supervisor::hosts_live`).
pub(super) struct HostsTold {
    to_threads: tokio::sync::watch::Sender<Option<Arc<Hosts>>>,
    taken: tokio::sync::mpsc::UnboundedReceiver<(usize, u64)>,
    /// Per thread, the last update it took.
    took: Vec<u64>,
    /// What the last update gave the process: its spec's, update 0, until the first — which
    /// the master sends as a change of those (`after: 0`: at 10,000 sites, the first site a
    /// panel added sent all 10,000 again), and whole (`after: None`) after one it was not
    /// told was taken.
    held: Arc<Hosts>,
}

impl HostsTold {
    pub(super) fn new(
        to_threads: tokio::sync::watch::Sender<Option<Arc<Hosts>>>,
        taken: tokio::sync::mpsc::UnboundedReceiver<(usize, u64)>,
        spec: &WorkerSpec,
    ) -> Self {
        HostsTold {
            to_threads,
            taken,
            took: vec![0; spec.threads.len()],
            held: Arc::new(Hosts::of_spec(spec)),
        }
    }

    /// Passes the master's `hosts` line on to the threads, made whole. One that changes
    /// what this process does not hold is refused with a line: its threads keep
    /// their hosts, and the master, never told they took it, answers the change late and
    /// sends every site with the next.
    fn tell(&mut self, spec: &WorkerSpec, json: &str) {
        match hosts_from(json, &self.held) {
            Ok(hosts) => {
                self.held = Arc::new(hosts);
                self.to_threads.send_replace(Some(Arc::clone(&self.held)));
            }
            Err(e) => log(&spec.name(), format!("{e}: not taken")),
        }
    }

    /// Thread `t` took update `generation`: the `hosts-taken` line when every thread has
    /// taken it (or a later one).
    fn took(&mut self, (t, generation): (usize, u64)) -> Option<String> {
        let before = self.took.iter().copied().min()?;
        if let Some(took) = self.took.get_mut(t) {
            *took = (*took).max(generation);
        }
        let all = self.took.iter().copied().min()?;
        (all > before).then(|| Message::HostsTaken(all).line())
    }
}

/// The master's `hosts` line made whole over what this process holds (`held`: update 0,
/// its spec's, before the first), or why not.
pub(super) fn hosts_from(json: &str, held: &Hosts) -> Result<Hosts, String> {
    let update = serde_json::from_str::<HostsUpdate>(json)
        .map_err(|e| format!("unreadable hosts from the master: {e}"))?;
    match update.after {
        None => update.into_hosts(&Hosts::default()),
        Some(after) if after == held.generation => update.into_hosts(held),
        Some(after) => Err(format!(
            "hosts from the master change update {after}'s, and this process holds update {}'s",
            held.generation
        )),
    }
}

/// With `[server.acme] on_demand`: the handshakes held, and the names they ask for.
pub(super) type OnDemandAsks = (
    Arc<crate::tls::on_demand::OnDemand>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
);

/// Runs the control loop (see the module doc) until the worker is to drain.
pub(super) fn serve_master(
    spec: &WorkerSpec,
    control: &UnixStream,
    shared: Shared<'_>,
    (on_demand, mut hosts): (Option<OnDemandAsks>, HostsTold),
) -> Result<(), String> {
    let tiers = shared.tiers;
    // Answer the master's pings with the requests served; on SIGTERM/SIGINT (or the master
    // going away), drain.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("signal handler");
        let mut int = signal(SignalKind::interrupt()).expect("signal handler");
        let control = control.try_clone().expect("clone control socket");
        control
            .set_nonblocking(true)
            .expect("nonblocking control socket");
        let control = tokio::net::UnixStream::from_std(control).expect("register control socket");
        let (read_half, mut write_half) = control.into_split();
        let mut lines = tokio::io::BufReader::new(read_half);
        let mut line = String::new();
        let (demand, mut asked) = match on_demand {
            Some((demand, asked)) => (Some(demand), Some(asked)),
            None => (None, None),
        };
        loop {
            line.clear();
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                () = tiers.app_wanted.notified() => {
                    if write_half.write_all(Message::WantApp.line().as_bytes()).await.is_err() {
                        break;
                    }
                }
                Some(took) = hosts.taken.recv() => {
                    if let Some(line) = hosts.took(took) {
                        if write_half.write_all(line.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                }
                Some(name) = next_asked(&mut asked) => {
                    let ask = Message::WantCertificate(name).line();
                    if write_half.write_all(ask.as_bytes()).await.is_err() {
                        break;
                    }
                }
                r = tokio::io::AsyncBufReadExt::read_line(&mut lines, &mut line) => match r {
                    // The master closed the control socket (it is gone): stop too.
                    Ok(0) | Err(_) => break,
                    Ok(_) => match Message::parse(&line) {
                        Some(Message::Ping) => {
                            let answer = pong_lines(spec, &shared);
                            if write_half.write_all(answer.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                        Some(Message::Hosts(json)) => hosts.tell(spec, &json),
                        Some(told) => take(spec, &shared, demand.as_deref(), told),
                        None => {}
                    },
                },
            }
        }
    });
    Ok(())
}

/// The answer to a ping: the pong, the sites' meters, the response caches' figures, the upstream servers ejected now and
/// the app processes that let requests time out.
fn pong_lines(spec: &WorkerSpec, shared: &Shared<'_>) -> String {
    let queue = shared.tiers.queue.figures();
    let mut answer = pong(spec, shared.health, queue, shared.tickets.generation());
    if let Some(meters) = site_meters(spec, shared.health) {
        answer.push_str(&meters.line());
    }
    if let Some(caches) = cache_figures() {
        answer.push_str(&caches.line());
    }
    if let Some(line) = ejected_line(shared.upstreams) {
        answer.push_str(&line);
    }
    for endpoint in shared.tiers.take_unresponsive() {
        answer.push_str(&Message::Unresponsive(endpoint.to_string()).line());
    }
    answer
}

/// Takes what the master `told`: logs reopened, the app processes' places, an upstream
/// server's check, a certificate for the store (or none for a held handshake's name).
fn take(
    spec: &WorkerSpec,
    shared: &Shared<'_>,
    demand: Option<&crate::tls::on_demand::OnDemand>,
    told: Message,
) {
    match told {
        Message::Reopen => {
            crate::http::access_log::REOPEN.fetch_add(1, Ordering::Relaxed);
        }
        Message::Upstreams(json) => match serde_json::from_str(&json) {
            Ok(t) => shared.tiers.publish(t),
            Err(e) => log(
                &spec.name(),
                format!("unreadable upstreams from the master: {e}"),
            ),
        },
        Message::UpstreamHealth(what) => set_checked(shared.upstreams, &what),
        Message::Certificate(json) => {
            let cert = serde_json::from_str::<crate::certs::store::StoreCert>(&json)
                .map_err(|e| format!("unreadable certificate from the master: {e}"))
                .and_then(|c| shared.store.insert(&c).map(|()| c.host));
            match cert {
                Ok(host) => {
                    if let Some(demand) = demand {
                        demand.answered(&host);
                    }
                }
                Err(e) => log(&spec.name(), format!("certificate store: {e}")),
            }
        }
        Message::TicketKeys(keys) => match crate::tls::tickets::decode(&keys) {
            Ok(keys) => shared.tickets.set(&keys),
            Err(e) => log(&spec.name(), e),
        },
        Message::NoCertificate(name) => {
            if let Some(demand) = demand {
                demand.answered(&name);
            }
        }
        Message::Purge(what) => {
            if let Some(purge) = crate::proxy::cache_purge::Purge::of_line(&what) {
                crate::proxy::cache_store::purge_all(&purge);
            }
        }
        _ => {}
    }
}

/// The next name a held handshake asks the master for (never, without on-demand ordering).
async fn next_asked(
    asked: &mut Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
) -> Option<String> {
    match asked {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// The `ejected` message of the upstream servers this worker has ejected now, if any.
fn ejected_line(groups: &[Arc<GroupHealth>]) -> Option<String> {
    let pairs: Vec<String> = (groups.iter())
        .flat_map(|g| {
            g.ejected_now()
                .map(move |i| format!("{} {}", g.spec.name, g.spec.servers[i].address))
        })
        .collect();
    (!pairs.is_empty()).then(|| Message::Ejected(pairs.join(" ")).line())
}

/// An `upstream-health` message (`GROUP ADDRESS up|down`) applied to the worker's groups.
fn set_checked(groups: &[Arc<GroupHealth>], what: &str) {
    let mut words = what.split_whitespace();
    let (Some(group), Some(address), Some(state)) = (words.next(), words.next(), words.next())
    else {
        return;
    };
    for g in groups.iter().filter(|g| g.spec.name == group) {
        for (k, s) in g.spec.servers.iter().enumerate() {
            if s.address.to_string() == address {
                g.set_checked(k, state == "down");
            }
        }
    }
}
