//! A front worker thread's pool of app processes as it sees them: the master's latest tiers
//! taken when their version moved, a process chosen nearest first and round-robin within its
//! tier (under `max_requests_per_process`, or waiting in the queue), a wait for a first ready
//! one (an on-demand pool's app asked for then), and the processes that let requests time
//! out reported.
//!
//! Owns: choosing a process and connecting to it. Must not touch: an upstream group's
//! servers (`crate::proxy`'s `group`) or what is sent (the forwarders).

use super::super::queue::{Backpressure, Slot};
use super::{At, Conn, Endpoint, Pool, Processes, ProxyRoute, Tiers, UNRESPONSIVE_AFTER};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Processes {
    /// `endpoint` let a request time out; the [`UNRESPONSIVE_AFTER`]th in a row is reported
    /// to the master.
    pub(super) fn timed_out(&self, endpoint: &Endpoint) {
        let mut silent = self.silent.borrow_mut();
        let k = match silent.iter().position(|(e, _)| e == endpoint) {
            Some(k) => k,
            None => {
                silent.push((endpoint.clone(), 0));
                silent.len() - 1
            }
        };
        silent[k].1 += 1;
        if silent[k].1 >= UNRESPONSIVE_AFTER {
            silent.swap_remove(k);
            self.shared.report_unresponsive(endpoint);
        }
    }

    pub(super) fn tiers(&self, pool: &Pool) -> Arc<Tiers> {
        self.refresh(pool);
        Arc::clone(&self.seen.borrow().1)
    }

    /// Takes the master's latest tiers (and their gates) when they moved.
    fn refresh(&self, pool: &Pool) {
        let version = self.shared.version.load(Ordering::Acquire);
        let mut seen = self.seen.borrow_mut();
        if seen.0 != version {
            let (tiers, gates) = self
                .shared
                .tiers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            pool.retain(|e| tiers.tiers.iter().flatten().any(|t| t == e));
            *seen = (version, tiers, gates);
        }
    }
}

impl ProxyRoute {
    /// A connection to a ready process other than `avoid` when there is one: an idle one, or
    /// a new one (three processes tried before giving up); with `max_requests_per_process`,
    /// to a process under it, waiting in the queue for one (see [`super::super::queue`]), and the
    /// request's slot there, to keep until it is done. Fails with the status to answer: 503
    /// none ready (or the queue full, or the wait run out), 504 connecting timed out, 502
    /// refused.
    pub(super) async fn process_connection(
        &self,
        p: &Processes,
        avoid: Option<Endpoint>,
    ) -> Result<(Endpoint, Conn, Option<At>), (u16, Option<String>)> {
        // A request sent again (its first connection closed on it) goes on a new connection:
        // the app's other kept ones are as likely closed as the one that failed.
        let retry = avoid.is_some();
        let mut avoid = avoid;
        let mut tries = 0;
        loop {
            tries += 1;
            let (endpoint, slot) = match &self.settings.backpressure {
                None => match self.pick_waiting(p, avoid.as_ref()).await {
                    Some(e) => (e, None),
                    None => return Err((503, None)),
                },
                Some(bp) => {
                    let (e, slot) = self
                        .queued(p, avoid.as_ref(), bp)
                        .await
                        .map_err(|s| (s, None))?;
                    (e, Some(At::Slot(slot)))
                }
            };
            if let Some(c) = (!retry).then(|| self.idle(&endpoint)).flatten() {
                return Ok((endpoint, c, slot));
            }
            let unreached = || Some("could not be connected to".to_string());
            match Conn::connect(&endpoint, self.settings.connect_timeout).await {
                Ok(c) => match self
                    .opened(&endpoint, c, self.settings.connect_timeout)
                    .await
                {
                    Ok(c) => return Ok((endpoint, c, slot)),
                    Err(cause) => {
                        return Err((502, Some(format!("could not be spoken to: {cause}"))))
                    }
                },
                // Nothing was sent: another process may take it.
                Err(_) if tries < 3 => avoid = Some(endpoint),
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return Err((504, unreached())),
                Err(_) => return Err((502, unreached())),
            }
        }
    }

    /// A process with a free place under `cap` and its slot: the nearest tier first,
    /// round-robin within it, `avoid` last. `None` when every one is at its cap (or none
    /// is ready).
    fn pick_free(
        &self,
        p: &Processes,
        avoid: Option<&Endpoint>,
        cap: u32,
    ) -> Option<(Endpoint, Slot)> {
        p.refresh(&self.pool);
        let seen = p.seen.borrow();
        let (tiers, gates) = (&seen.1, &seen.2);
        let queue = &p.shared.queue;
        let n = p.next.get();
        p.next.set(n.wrapping_add(1));
        let mut last_resort = None;
        for (k, tier) in tiers.tiers.iter().enumerate() {
            for j in 0..tier.len() {
                let e = &tier[(n + j) % tier.len()];
                if Some(e) == avoid {
                    last_resort = Some((k, e));
                    continue;
                }
                if let Some(slot) = gates.get(e).and_then(|g| Slot::take(g, queue, cap)) {
                    if k > 0 || !tiers.local {
                        self.remote.set(self.remote.get() + 1);
                    }
                    return Some((e.clone(), slot));
                }
            }
        }
        let (k, e) = last_resort?;
        let slot = Slot::take(gates.get(e)?, queue, cap)?;
        if k > 0 || !tiers.local {
            self.remote.set(self.remote.get() + 1);
        }
        Some((e.clone(), slot))
    }

    /// The next process to use, round-robin within the nearest tier that has one other than
    /// `avoid` (a retry goes elsewhere when it can). `None` when none is ready.
    pub(super) fn pick(&self, p: &Processes, avoid: Option<&Endpoint>) -> Option<Endpoint> {
        let tiers = p.tiers(&self.pool);
        let usable = |tier: &Vec<Endpoint>| tier.iter().any(|e| Some(e) != avoid);
        let (k, tier) = tiers
            .tiers
            .iter()
            .enumerate()
            .find(|(_, t)| usable(t))
            .or_else(|| tiers.tiers.iter().enumerate().find(|(_, t)| !t.is_empty()))?;
        let n = p.next.get();
        p.next.set(n.wrapping_add(1));
        let others = tier.iter().filter(|e| Some(*e) != avoid).count();
        let chosen = if others == 0 {
            tier[n % tier.len()].clone()
        } else {
            tier.iter()
                .filter(|e| Some(*e) != avoid)
                .nth(n % others)
                .expect("counted above")
                .clone()
        };
        if k > 0 || !tiers.local {
            self.remote.set(self.remote.get() + 1);
        }
        Some(chosen)
    }

    /// A process under the cap and its slot, waiting in the queue when all are at it (after
    /// waiting, as [`Self::pick_waiting`], for a first one to be ready).
    async fn queued(
        &self,
        p: &Processes,
        avoid: Option<&Endpoint>,
        bp: &Backpressure,
    ) -> Result<(Endpoint, Slot), u16> {
        let cap = bp.max_requests_per_process;
        if let Some(found) = self.pick_free(p, avoid, cap) {
            return Ok(found);
        }
        if self.pick_waiting(p, avoid).await.is_none() {
            return Err(503);
        }
        p.shared
            .queue
            .wait_for(bp, || self.pick_free(p, avoid, cap))
            .await
            .map_err(|()| 503)
    }

    async fn pick_waiting(&self, p: &Processes, avoid: Option<&Endpoint>) -> Option<Endpoint> {
        let until = tokio::time::Instant::now() + self.settings.wait_for_ready;
        let mut asked = false;
        loop {
            if let Some(e) = self.pick(p, avoid) {
                return Some(e);
            }
            if !asked {
                p.shared.app_wanted.notify_one();
                asked = true;
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
