//! Pools as a whole: stopping one (by rapid-fail protection or by command) and starting it
//! again, the admin endpoint's commands, and the status report.
//!
//! Owns: what a stopped pool's sites get (a 503 with `Retry-After`, or a reset with
//! `load_balancer = "tcp"`, answered by the master on copies of the pool's sockets and its
//! hand-off sockets; on an address other pools still serve, the stopped pool's sockets are
//! steered around and what reaches them is passed on to a pool that serves) and the
//! [`crate::server::status::Status`] built from the supervisor's state. Must not touch: a slot's process state
//! machine (see [`super::slots`]).

use super::life::{Happening, Restart};
use super::Supervisor;
use crate::config::LoadBalancer;
use crate::os;
use crate::server::admin::{AdminCommand, AdminReply};
use crate::server::log;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

pub(super) fn done(status: u16, message: impl Into<String>) -> AdminReply {
    AdminReply::Done {
        status,
        message: message.into(),
    }
}

impl Supervisor {
    /// Stops pool `name` (`why`: who asked): its processes drain, and the master answers its
    /// sockets and what is handed to it — 503, or a reset — until it starts again.
    pub(super) fn stop_pool(&mut self, name: &str, why: &str) {
        let Some(p) = self.pools.iter().position(|p| p.spec.name == name) else {
            return;
        };
        self.pools[p].stopped = Some(why.to_string());
        self.halt_slots(p);
        // A pool asleep on a shared address has no hand-off socket: it gets them now, for the
        // master to answer what the dispatcher hands it.
        if self.groups.iter().any(|g| g.shared() && g.serves(name)) {
            let slots: Vec<usize> = (0..self.slots.len())
                .filter(|&i| self.slots[i].pool == p)
                .collect();
            for i in slots {
                if let Err(e) = self.open_handoffs(i) {
                    log("master", format!("pool {name}: {e}"));
                }
            }
        }
        let lb = self.pools[p].spec.load_balancer;
        let stopped = self.stopped_pools();
        let away = self.pools_away();
        let mut responders = Vec::new();
        for g in self.groups.iter().filter(|g| g.serves(name)) {
            let everyone_stopped = g.pools.iter().all(|p| stopped.contains(p));
            // On a shared address whose other pools serve on, the stopped pool's sockets
            // are steered around; what they still get (already queued, or steering off) is
            // passed to a pool that serves, which routes it — back to us if it is ours.
            let pass_to = (!everyone_stopped)
                .then(|| {
                    crate::server::listeners::steer(g, &self.config, &self.topology, &away);
                    self.handoffs
                        .sockets
                        .iter()
                        .find(|h| g.serves(&h.pool) && !stopped.contains(&h.pool))
                        .map(|h| h.path.clone())
                })
                .flatten();
            for (k, socket) in g.sockets.iter().enumerate() {
                let ours = g.owner_pools.get(k).is_none_or(|(_, p)| p == name);
                if !everyone_stopped && !ours {
                    continue;
                }
                let listener = match listener_copy(socket.as_raw_fd()) {
                    Ok(l) => l,
                    Err(e) => {
                        log(
                            "master",
                            format!("cannot answer for stopped pool {name} on {}: {e}", g.addr),
                        );
                        continue;
                    }
                };
                // Over TLS the master has no handshake to answer in: a reset, which clients and
                // load balancers take as the pool's absence at once.
                let lb_here = if g.routes.tls { LoadBalancer::Tcp } else { lb };
                responders.push(match &pass_to {
                    Some(path) => {
                        let header =
                            crate::handoff::header(&self.handoffs.key, g.addr, 0, None, None);
                        tokio::spawn(pass_on(listener, header, path.clone()))
                    }
                    None => tokio::spawn(answer_accepted(
                        listener,
                        Answer::stopped(lb_here, name, &self.config.sites),
                    )),
                });
            }
        }
        responders.extend(self.answer_handed_to(name, lb));
        // Those of a start whose workers were not ready yet end here: these take over.
        for r in std::mem::replace(&mut self.pools[p].responders, responders) {
            r.abort();
        }
        let answer = match lb {
            LoadBalancer::Http => "answer 503 Service Unavailable",
            LoadBalancer::Tcp => "reset connections (load_balancer = \"tcp\")",
        };
        log("master", format!("POOL {name} STOPPED by {why}: its sites {answer}; `espalier pool start {name}` brings it back"));
    }

    /// Pool `p`'s slots stop: no restart, no sleep or watch, their processes drain.
    fn halt_slots(&mut self, p: usize) {
        for s in self.slots.iter_mut().filter(|s| s.pool == p) {
            s.restart = Restart::No;
            // Asleep no more: stopped, its sockets answered by the master (below).
            s.asleep = false;
            s.after_app = false;
            if let Some(w) = s.watcher.take() {
                w.abort();
            }
            for a in s.page_answerers.drain(..) {
                a.abort();
            }
            for proc_ in s.current.take().into_iter().chain(s.replacing.take()) {
                let mut proc_ = proc_;
                proc_.happen(Happening::Stop { handover: None }, Instant::now());
                s.draining.push(proc_);
            }
        }
    }

    /// Answers, for stopped pool `name`, the connections other pools hand to it.
    fn answer_handed_to(&self, name: &str, lb: LoadBalancer) -> Vec<tokio::task::JoinHandle<()>> {
        let mut answerers = Vec::new();
        let tls_addrs: Vec<std::net::SocketAddr> = self
            .groups
            .iter()
            .filter(|g| g.routes.tls)
            .map(|g| g.addr)
            .collect();
        let senders = crate::server::handoffs::senders(&self.config.pools);
        for h in self.handoffs.sockets.iter().filter(|h| h.pool == name) {
            match handoff_copy(h.socket.as_raw_fd(), senders.clone(), self.handoffs.key) {
                Ok(receiver) => answerers.push(tokio::spawn(answer_handed(
                    receiver,
                    Answer::stopped(lb, name, &self.config.sites),
                    tls_addrs.clone(),
                ))),
                Err(e) => log(
                    "master",
                    format!(
                        "cannot answer for stopped pool {name} on {}: {e}",
                        h.path.display()
                    ),
                ),
            }
        }
        answerers
    }

    /// From the moment the server stops, what still reaches its listening sockets is answered
    /// by the master — `503` with `Connection: close` over http, a reset over https (no keys
    /// here to answer in) — instead of queueing behind workers that drain and never accept
    /// again, where a client would wait for its own timeout. The tasks, to keep until exit.
    pub(super) fn answer_while_stopping(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut answering = Vec::new();
        for g in &self.groups {
            let answer = if g.routes.tls {
                Answer::Reset
            } else {
                Answer::Unavailable
            };
            for socket in &g.sockets {
                match listener_copy(socket.as_raw_fd()) {
                    Ok(l) => answering.push(tokio::spawn(answer_accepted(l, answer.clone()))),
                    Err(e) => log(
                        "master",
                        format!("cannot answer on {} while stopping: {e}", g.addr),
                    ),
                }
            }
        }
        answering
    }

    /// Ends the master's answers for started pool `p` once its workers are all ready (or
    /// asleep); called as each gets ready. Until then it answered its sockets as while it
    /// was stopped, so a connection that came during the workers' start was answered, not
    /// left in the queue for as long as the start took, nor closed unanswered when it failed
    /// (see the test `pools::a_started_pools_sockets_are_answered_until_its_workers_are_ready`).
    pub(super) fn end_answers_once_started(&mut self, p: usize) {
        if self.pools[p].stopped.is_some() || self.pools[p].responders.is_empty() {
            return;
        }
        if (self.slots.iter().filter(|s| s.pool == p)).all(super::procs::Slot::ready_or_asleep) {
            for r in self.pools[p].responders.drain(..) {
                r.abort();
            }
        }
    }

    pub(super) fn start_pool(&mut self, name: &str) -> bool {
        let Some(p) = self.pools.iter().position(|p| p.spec.name == name) else {
            return false;
        };
        let pool = &mut self.pools[p];
        if pool.stopped.take().is_none() {
            return true;
        }
        pool.crashes.clear();
        let now = Instant::now();
        let on_demand = self.pools[p].spec.start == crate::config::StartMode::OnDemand;
        // An on-demand pool's sockets are the wake's to watch from now; an activated app's
        // are its own, made blocking for it (the master's accept on them would block its
        // thread). Another's stay answered here until its workers are ready
        // (`end_answers_once_started`): else what comes meanwhile waits in the queue
        // for as long as they take to start.
        let activated = (self.pools[p].spec.app.as_ref())
            .is_some_and(|a| a.transport == crate::config::Transport::Activation);
        if on_demand || activated {
            for r in self.pools[p].responders.drain(..) {
                r.abort();
            }
        }
        if !on_demand {
            // Its sockets on shared addresses take connections again (an on-demand pool's
            // once it wakes).
            self.steer_around_away();
        }
        for i in 0..self.slots.len() {
            if self.slots[i].pool != p {
                continue;
            }
            self.slots[i].young_deaths = 0;
            if on_demand {
                self.sleep_slot(i);
            } else {
                self.slots[i].restart = Restart::At(now);
            }
        }
        if on_demand {
            self.steer_around_away();
        }
        log("master", format!("pool {name} started"));
        true
    }

    /// Answers an admin command on `reply`: at once, or — a configuration change, an
    /// upgrade — once its outcome is known (see `config_api`, `upgrade`).
    pub(super) fn admin(&mut self, cmd: AdminCommand, reply: oneshot::Sender<AdminReply>) {
        let known = |sv: &Self, name: &str| sv.pools.iter().any(|p| p.spec.name == name);
        let answer = match cmd {
            AdminCommand::Config(call) => return self.config_call(call, reply),
            AdminCommand::Upgrade => return self.begin_upgrade(Some(reply)),
            AdminCommand::Status(q) => AdminReply::Status(Box::new(self.status(&q))),
            AdminCommand::Live(q) => AdminReply::Live(Box::new(self.live(&q))),
            AdminCommand::Reload => match self.reload_logged() {
                Ok(summary) => done(200, summary),
                Err(message) => done(400, message),
            },
            AdminCommand::PurgeCache(purge) => {
                let line = crate::server::control::Message::Purge(purge.line()).line();
                let pools = self.pools_with_workers();
                for pool in &pools {
                    self.send_to_pool(pool, &line);
                }
                let said = format!("cache purge ({}) sent to the workers of {} pool(s)", purge.line(), pools.len());
                log("master", &said);
                done(200, said)
            }
            AdminCommand::RotateTicketKeys => {
                let pools = self.rotate_ticket_keys();
                let said = format!("session ticket keys rotated; the workers of {pools} pool(s) told (tickets of the two keys before still resume)");
                log("master", &said);
                done(200, said)
            }
            // Stopping it would stop every pool of every shared address at once.
            AdminCommand::StopPool(name) if name == crate::server::dispatcher::POOL => done(
                409,
                format!("{name} routes every shared address and cannot be stopped; stop the pools behind it, or recycle it"),
            ),
            AdminCommand::StopPool(name) if known(self, &name) => {
                if self
                    .pools
                    .iter()
                    .any(|p| p.spec.name == name && p.stopped.is_none())
                {
                    self.stop_pool(&name, "command");
                }
                done(200, format!("pool {name} stopped"))
            }
            AdminCommand::StartPool(name) if known(self, &name) => {
                self.start_pool(&name);
                done(200, format!("pool {name} starting"))
            }
            AdminCommand::Recycle(name) if known(self, &name) => {
                if self
                    .pools
                    .iter()
                    .any(|p| p.spec.name == name && p.stopped.is_some())
                {
                    let _ = reply.send(done(409, format!("pool {name} is stopped; start it first")));
                    return;
                }
                let slots: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.pools[self.slots[i].pool].spec.name == name)
                    .collect();
                for i in &slots {
                    log(
                        "master",
                        format!("recycling worker {} on request", self.slots[*i].spec.name()),
                    );
                    self.recycle_slot(*i);
                }
                done(
                    200,
                    format!("recycling {} worker(s) of pool {name}", slots.len()),
                )
            }
            AdminCommand::StopPool(name)
            | AdminCommand::StartPool(name)
            | AdminCommand::Recycle(name) => {
                let names: Vec<&str> = self.pools.iter().map(|p| p.spec.name.as_str()).collect();
                done(
                    404,
                    format!("no pool is named `{name}` (pools: {})", names.join(", ")),
                )
            }
        };
        let _ = reply.send(answer);
    }
}

impl Supervisor {
    /// The names of the pools stopped now.
    pub(super) fn stopped_pools(&self) -> Vec<String> {
        self.pools
            .iter()
            .filter(|p| p.stopped.is_some())
            .map(|p| p.spec.name.clone())
            .collect()
    }
}

/// What the master answers on a pool's behalf: a stopped pool's 503 or reset, or an
/// on-demand pool's `warmup_page` while it starts.
#[derive(Clone)]
pub(super) enum Answer {
    /// A reset, so a load balancer in front fails over at once (`load_balancer = "tcp"`, and
    /// over TLS, where the master has no handshake to answer in).
    Reset,
    /// `503 Service Unavailable`.
    Unavailable,
    /// `503` with `Retry-After` (seconds) and this page (HTML unless `content_type` says).
    Page {
        body: std::sync::Arc<[u8]>,
        retry_after: u64,
        content_type: &'static str,
    },
}

impl Answer {
    fn of(lb: LoadBalancer) -> Answer {
        match lb {
            LoadBalancer::Tcp => Answer::Reset,
            LoadBalancer::Http => Answer::Unavailable,
        }
    }

    /// A stopped pool's answer over HTTP: the `503` page of the first of its sites that has
    /// one (the master answers before any request is routed; a pool per site, as hosters
    /// run them, gets its site's own), else espalier's text.
    fn stopped(
        lb: LoadBalancer,
        name: &str,
        sites: &[std::sync::Arc<crate::config::SiteSpec>],
    ) -> Answer {
        let page = sites
            .iter()
            .filter(|s| s.served_by(name))
            .find_map(|s| s.errors.iter().find(|(status, _)| *status == 503))
            .map(|(_, path)| path);
        match (lb, page) {
            (LoadBalancer::Http, Some(path)) => match std::fs::read(path) {
                Ok(body) => Answer::Page {
                    body: body.into(),
                    retry_after: 5,
                    content_type: crate::handlers::mime::content_type(&path.to_string_lossy()),
                },
                Err(e) => {
                    log("master", format!("pool {name}: cannot read the 503 page {} ({e}): espalier's own text answers", path.display()));
                    Answer::Unavailable
                }
            },
            _ => Answer::of(lb),
        }
    }

    /// The response's bytes, dated now.
    fn bytes(&self) -> Vec<u8> {
        match self {
            Answer::Reset => Vec::new(),
            Answer::Unavailable => crate::http::unavailable_now(),
            Answer::Page {
                body,
                retry_after,
                content_type,
            } => {
                let mut out = b"HTTP/1.1 503 Service Unavailable\r\n".to_vec();
                out.extend_from_slice(&crate::http::clock::common_now());
                out.extend_from_slice(
                    format!("Retry-After: {retry_after}\r\nContent-Type: {content_type}\r\nCache-Control: no-store\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes(),
                );
                out.extend_from_slice(body);
                out
            }
        }
    }
}

/// A copy of the master's listening socket `fd` for its own event loop. Non-blocking again:
/// an activated app made the shared description blocking.
pub(super) fn listener_copy(fd: std::os::fd::RawFd) -> std::io::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::from(os::process::duplicate(fd)?);
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// A copy of the master's hand-off socket `fd`, receiving what `senders` hand it with `key`.
pub(super) fn handoff_copy(
    fd: std::os::fd::RawFd,
    senders: Vec<u32>,
    key: crate::handoff::Key,
) -> std::io::Result<crate::handoff::Receiver> {
    crate::handoff::Receiver::new(os::process::duplicate(fd)?, senders, key)
}

/// Answers the connections on a copy of one of a pool's listener sockets.
pub(super) async fn answer_accepted(listener: tokio::net::TcpListener, answer: Answer) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(answer_one(stream, answer.clone(), false));
    }
}

/// Answers the connections other pools hand to a pool (their request head is read); those
/// of an https address (`tls`) are reset.
pub(super) async fn answer_handed(
    mut receiver: crate::handoff::Receiver,
    answer: Answer,
    tls: Vec<std::net::SocketAddr>,
) {
    while let Ok(got) = receiver.next().await {
        let answer = if tls.contains(&got.addr) {
            Answer::Reset
        } else {
            answer.clone()
        };
        if let Ok(stream) = tokio::net::TcpStream::from_std(got.stream) {
            tokio::spawn(answer_one(stream, answer, true));
        }
    }
}

/// One connection's answer, then its close.
async fn answer_one(mut stream: tokio::net::TcpStream, answer: Answer, head_read: bool) {
    if let Answer::Reset = answer {
        let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        return;
    }
    if !head_read {
        // Read the request head (bounded) so the answer is not overtaken by a reset.
        let mut buf = [0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
    }
    let _ = stream.write_all(&answer.bytes()).await;
    let _ = stream.shutdown().await;
}

/// Passes the connections still arriving on a stopped pool's socket of a shared address to a
/// pool that serves there (unread: it routes them as if it had accepted them).
/// `header` is the message's (no client: unread, the receiver reads a PROXY protocol header
/// if the address expects one).
async fn pass_on(listener: tokio::net::TcpListener, header: Vec<u8>, to: PathBuf) {
    let socket = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|s| s.connect(&to).map(|()| s))
        .and_then(|s| s.set_nonblocking(true).map(|()| s));
    let Ok(socket) = socket else {
        return answer_accepted(listener, Answer::Unavailable).await;
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // A full queue: wait for room, bounded; the connection closes if there is none.
        for _ in 0..400 {
            match os::fdpass::send_with_fd(socket.as_raw_fd(), stream.as_raw_fd(), &[&header]) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                _ => break,
            }
        }
    }
}
