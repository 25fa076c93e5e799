//! Choosing a server of an upstream group for a request — pure decisions over a thread's
//! own view (requests in flight, answer times), given which servers may be used now.
//!
//! Owns: the four ways to balance ([`Policy`]), the order of preference among servers (the
//! thread's NUMA node's first, then any; backups only when no other is usable), the latency
//! average, and the consistent-hash ring. Must not touch: health (the caller says which
//! servers are usable), connections, clocks (times are passed in) or anything shared
//! between threads: each engine thread has its own `Balancer`, so a pick takes no lock and
//! writes no shared cache line.
//!
//! Why P2C over a peak EWMA × in-flight is the default (Finagle's and Linkerd's balancer,
//! what Caddy and Envoy offer as least-request with two choices): comparing two servers
//! drawn at random costs O(1) and never herds every thread onto the one server that looks
//! best at an instant, while the score moves away at once from a server whose answers slow
//! down (the peak is taken as it comes, then decays) or pile up (in flight).
//!
//! Why a server's cost decays with time, not only when it is picked (Finagle's and tower's
//! peak EWMA read the cost as "observe nothing now"): with two servers, P2C compares both on
//! every pick, so a server whose cost only moved when it was picked and that once looked slow
//! was never picked again — a recovered server stayed unused for good. A failure is not a
//! latency: it makes the server [`Balancer::penalize`]d — avoided while another candidate is
//! not — for a window that doubles with each failure in a row (1 s … 8 s) and ends at its
//! first answer, so a server back from the dead takes requests again within 8 s whatever its
//! check says.

use xxhash_rust::xxh3::xxh3_64;

/// Points per unit of weight on the hash ring (ketama's 160, as nginx's `hash … consistent`).
pub const HASH_POINTS: u32 = 160;

/// The latency average's time constant: a sample this old weighs 1/e of a new one.
const DECAY_US: f64 = 10_000_000.0;

/// The first failure's penalty window; each failure in a row doubles it, up to
/// [`PENALTY_MAX_US`].
const PENALTY_FIRST_US: u64 = 1_000_000;
const PENALTY_MAX_US: u64 = 8_000_000;

/// A server as the balancer sees it, fixed for the life of its configuration.
#[derive(Debug, Clone)]
pub struct Server {
    /// Stable across threads, processes and reloads: places the server on the hash ring.
    pub key: String,
    pub weight: u32,
    pub backup: bool,
    /// On the thread's own NUMA node.
    pub local: bool,
}

/// How a request chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    LeastTime,
    RoundRobin,
    LeastRequests,
    Hash,
}

/// What the balancer keeps of each server, per thread.
#[derive(Debug, Clone, Default)]
struct Seen {
    in_flight: u32,
    /// Peak EWMA of answer times, microseconds; 0 until the first answer.
    ewma_us: f64,
    stamp_us: u64,
    /// Smooth weighted round robin's running weight.
    current: i64,
    /// Avoided while another candidate is not, until this time (0: never penalized).
    penalized_until_us: u64,
    /// Failures since its last answer: each doubles the next penalty's window.
    failures: u32,
}

/// One thread's balancer for one group.
pub struct Balancer {
    policy: Policy,
    servers: Vec<Server>,
    seen: Vec<Seen>,
    /// (point, server), sorted by point; only for [`Policy::Hash`].
    ring: Vec<(u32, u16)>,
    rng: fastrand::Rng,
    turn: usize,
}

impl Balancer {
    /// `seed` differs per thread, so threads do not draw the same pairs.
    pub fn new(policy: Policy, servers: Vec<Server>, seed: u64) -> Self {
        let ring = if policy == Policy::Hash {
            ring_of(&servers)
        } else {
            Vec::new()
        };
        Balancer {
            policy,
            seen: vec![Seen::default(); servers.len()],
            servers,
            ring,
            rng: fastrand::Rng::with_seed(seed),
            turn: 0,
        }
    }

    #[cfg(test)]
    fn servers(&self) -> &[Server] {
        &self.servers
    }

    #[cfg(test)]
    fn in_flight(&self, i: usize) -> u32 {
        self.seen[i].in_flight
    }

    /// The server for a request (`key`: its hash key's hash under [`Policy::Hash`]), among
    /// those `usable` says may be used, never one of `tried`: from the most preferred set
    /// that has one (local primaries, primaries, local backups, backups). `None` when none
    /// may be used. The caller counts the request in flight with [`Self::start`]. `now_us`
    /// ages the costs and ends penalties.
    pub fn pick(
        &mut self,
        usable: impl Fn(usize) -> bool,
        tried: &[usize],
        key: Option<u64>,
        now_us: u64,
    ) -> Option<usize> {
        let ok = |i: usize| usable(i) && !tried.contains(&i);
        let level = (0..4).find(|&l| (0..self.servers.len()).any(|i| ok(i) && self.at(l, i)))?;
        let mut mask = Mask::default();
        for i in (0..self.servers.len()).filter(|&i| ok(i) && self.at(level, i)) {
            mask.set(i);
        }
        let candidate = |i: usize| mask.has(i);
        match self.policy {
            Policy::LeastTime => self.two_choices(candidate, now_us),
            Policy::RoundRobin => self.smooth_round_robin(candidate),
            Policy::LeastRequests => self.least_requests(candidate),
            Policy::Hash => self.on_ring(candidate, key.unwrap_or(xxh3_64(b""))),
        }
    }

    /// Whether server `i` belongs to preference set `level`: 0 local primaries, 1 primaries,
    /// 2 local backups, 3 backups.
    fn at(&self, level: u8, i: usize) -> bool {
        let s = &self.servers[i];
        s.backup == (level >= 2) && (level % 2 == 1 || s.local)
    }

    /// A request sent to `i`.
    pub fn start(&mut self, i: usize) {
        self.seen[i].in_flight += 1;
    }

    /// A request of `i` done.
    pub fn finish(&mut self, i: usize) {
        let s = &mut self.seen[i];
        s.in_flight = s.in_flight.saturating_sub(1);
    }

    /// `i` answered a request's head in `answer_us`, at `now_us`: its penalty, if any, ends.
    pub fn observe(&mut self, i: usize, answer_us: u64, now_us: u64) {
        let s = &mut self.seen[i];
        s.failures = 0;
        s.penalized_until_us = 0;
        Self::sample(s, answer_us, now_us);
    }

    /// A request `i` kept waiting `waited_us` before its client gave up: its answer takes at
    /// least that long, a sample as good as an answer's (a frozen server, whose kernel still
    /// accepts connections, is avoided at once), though the server has not answered.
    pub fn abandoned(&mut self, i: usize, waited_us: u64, now_us: u64) {
        Self::sample(&mut self.seen[i], waited_us, now_us);
    }

    fn sample(s: &mut Seen, answer_us: u64, now_us: u64) {
        let sample = answer_us as f64;
        if s.ewma_us == 0.0 || sample > s.ewma_us {
            // The peak is taken at once: a server that slows down is avoided now.
            s.ewma_us = sample;
        } else {
            let age = now_us.saturating_sub(s.stamp_us) as f64;
            let w = (-age / DECAY_US).exp();
            s.ewma_us = s.ewma_us * w + sample * (1.0 - w);
        }
        s.stamp_us = now_us;
    }

    /// A failure (refused, timed out): the server is avoided while another candidate is not,
    /// for a window that doubles with each failure since its last answer (at most
    /// [`PENALTY_MAX_US`]); then it is drawn as before, and its answer ends the penalty.
    pub fn penalize(&mut self, i: usize, now_us: u64) {
        let s = &mut self.seen[i];
        let window = (PENALTY_FIRST_US << s.failures.min(8)).min(PENALTY_MAX_US);
        s.failures = s.failures.saturating_add(1);
        s.penalized_until_us = now_us + window;
    }

    /// What sending `i` a request is expected to cost now: its answer time, aged toward 0
    /// as time passes without a sample (a server not drawn for a while is drawn again and
    /// measured), times the requests it holds, per its weight; infinite while penalized.
    fn score(&self, i: usize, now_us: u64) -> f64 {
        let s = &self.seen[i];
        if s.penalized_until_us > now_us {
            return f64::INFINITY;
        }
        let age = now_us.saturating_sub(s.stamp_us) as f64;
        let ewma = s.ewma_us * (-age / DECAY_US).exp();
        // An unmeasured server costs what a fast one does: it gets requests, and its first
        // answer measures it.
        (ewma + 1.0) * f64::from(s.in_flight + 1) / f64::from(self.servers[i].weight)
    }

    fn two_choices(&mut self, candidate: impl Fn(usize) -> bool, now_us: u64) -> Option<usize> {
        let n = (0..self.servers.len()).filter(|&i| candidate(i)).count();
        let nth = |k: usize| (0..self.servers.len()).filter(|&i| candidate(i)).nth(k);
        match n {
            0 => None,
            1 => nth(0),
            _ => {
                let a = self.rng.usize(..n);
                let b = (a + 1 + self.rng.usize(..n - 1)) % n;
                let (a, b) = (nth(a)?, nth(b)?);
                Some(if self.score(b, now_us) < self.score(a, now_us) {
                    b
                } else {
                    a
                })
            }
        }
    }

    /// nginx's smooth weighted round robin: each candidate gains its weight, the highest is
    /// chosen and loses the candidates' total — `a a b` for weights 2 and 1 comes out
    /// `a b a`, never bunched.
    fn smooth_round_robin(&mut self, candidate: impl Fn(usize) -> bool) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for i in (0..self.servers.len()).filter(|&i| candidate(i)) {
            let w = i64::from(self.servers[i].weight);
            self.seen[i].current += w;
            total += w;
            if best.is_none_or(|b| self.seen[i].current > self.seen[b].current) {
                best = Some(i);
            }
        }
        let b = best?;
        self.seen[b].current -= total;
        Some(b)
    }

    fn least_requests(&mut self, candidate: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.servers.len();
        self.turn = self.turn.wrapping_add(1);
        let start = self.turn % n.max(1);
        let load = |i: usize| {
            u64::from(self.seen[i].in_flight + 1) * 1000 / u64::from(self.servers[i].weight)
        };
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| candidate(i))
            .min_by_key(|&i| load(i))
    }

    /// The first candidate at or after the key's point on the ring (`key`: its xxh3 hash).
    fn on_ring(&self, candidate: impl Fn(usize) -> bool, key: u64) -> Option<usize> {
        if self.ring.is_empty() {
            return None;
        }
        let h = key as u32;
        let start = self.ring.partition_point(|&(p, _)| p < h);
        (0..self.ring.len())
            .map(|k| self.ring[(start + k) % self.ring.len()].1 as usize)
            .find(|&i| candidate(i))
    }
}

/// A set of servers' indices (a group has at most 256, `config::upstream::MAX_SERVERS`).
#[derive(Default, Clone, Copy)]
struct Mask([u64; 4]);

impl Mask {
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn has(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

fn ring_of(servers: &[Server]) -> Vec<(u32, u16)> {
    let mut ring = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        for k in 0..HASH_POINTS * s.weight {
            let point = xxh3_64(format!("{}-{k}", s.key).as_bytes()) as u32;
            ring.push((point, i as u16));
        }
    }
    ring.sort_unstable();
    ring
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(weights: &[u32]) -> Vec<Server> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &w)| Server {
                key: format!("10.0.0.{i}:80"),
                weight: w,
                backup: false,
                local: false,
            })
            .collect()
    }

    fn counts(b: &mut Balancer, n: usize, usable: impl Fn(usize) -> bool) -> Vec<usize> {
        let mut c = vec![0; b.servers().len()];
        for _ in 0..n {
            let i = b.pick(&usable, &[], None, 1).unwrap();
            c[i] += 1;
        }
        c
    }

    #[test]
    fn round_robin_follows_the_weights_without_bunching() {
        let mut b = Balancer::new(Policy::RoundRobin, servers(&[2, 1]), 1);
        let order: Vec<usize> = (0..6)
            .map(|_| b.pick(|_| true, &[], None, 1).unwrap())
            .collect();
        assert_eq!(order, [0, 1, 0, 0, 1, 0]);
        let mut b = Balancer::new(Policy::RoundRobin, servers(&[3, 1, 1]), 1);
        assert_eq!(counts(&mut b, 500, |_| true), [300, 100, 100]);
    }

    #[test]
    fn an_unusable_or_tried_server_is_never_chosen() {
        for policy in [
            Policy::LeastTime,
            Policy::RoundRobin,
            Policy::LeastRequests,
            Policy::Hash,
        ] {
            let mut b = Balancer::new(policy, servers(&[1, 1, 1]), 7);
            for k in 0..200u32 {
                let key = xxh3_64(&k.to_be_bytes());
                let i = b.pick(|i| i != 1, &[0], Some(key), 1).unwrap();
                assert_eq!(i, 2, "{policy:?}");
            }
            assert_eq!(b.pick(|_| false, &[], None, 1), None);
        }
    }

    #[test]
    fn backups_serve_only_when_no_primary_can_and_local_servers_come_first() {
        let mut s = servers(&[1, 1, 1, 1]);
        s[0].local = true;
        s[2].backup = true;
        s[3].backup = true;
        s[3].local = true;
        let mut b = Balancer::new(Policy::RoundRobin, s, 3);
        assert_eq!(counts(&mut b, 10, |_| true), [10, 0, 0, 0]);
        assert_eq!(counts(&mut b, 10, |i| i != 0), [0, 10, 0, 0]);
        assert_eq!(counts(&mut b, 10, |i| i >= 2), [0, 0, 0, 10]);
        assert_eq!(counts(&mut b, 10, |i| i == 2), [0, 0, 10, 0]);
    }

    #[test]
    fn least_time_sends_less_to_a_slow_server_and_to_one_with_requests_piled_up() {
        let mut b = Balancer::new(Policy::LeastTime, servers(&[1, 1]), 11);
        // Server 1 answers in 50 ms, server 0 in 1 ms.
        b.observe(0, 1_000, 1);
        b.observe(1, 50_000, 1);
        let c = counts(&mut b, 1000, |_| true);
        assert_eq!(c, [1000, 0], "two choices of two always compare both");
        // Server 0 holds 100 requests that do not come back: server 1 takes over.
        for _ in 0..100 {
            b.start(0);
        }
        assert_eq!(b.pick(|_| true, &[], None, 1), Some(1));
        // Among many, the slow one is drawn rarely.
        let mut b = Balancer::new(Policy::LeastTime, servers(&[1; 5]), 5);
        for i in 0..5 {
            b.observe(i, if i == 4 { 100_000 } else { 1_000 }, 1);
        }
        let c = counts(&mut b, 5000, |_| true);
        assert_eq!(c[4], 0, "{c:?}");
    }

    #[test]
    fn the_peak_is_taken_at_once_and_decays() {
        let mut b = Balancer::new(Policy::LeastTime, servers(&[1]), 1);
        b.start(0);
        b.observe(0, 1_000, 0);
        b.observe(0, 90_000, 1_000);
        assert_eq!(b.seen[0].ewma_us, 90_000.0);
        b.observe(0, 1_000, 31_000_000);
        b.finish(0);
        assert!(b.seen[0].ewma_us < 10_000.0, "{}", b.seen[0].ewma_us);
        assert_eq!(b.in_flight(0), 0);
    }

    #[test]
    fn a_failed_server_is_avoided_for_a_window_then_drawn_again() {
        let mut b = Balancer::new(Policy::LeastTime, servers(&[1, 1]), 3);
        b.observe(0, 1_000, 1);
        b.observe(1, 1_000, 1);
        // Server 0 refuses a connection: only 1 is drawn for the first window (1 s)...
        b.penalize(0, 10);
        let at = |b: &mut Balancer, now: u64| {
            let mut c = [0; 2];
            (0..200).for_each(|_| c[b.pick(|_| true, &[], None, now).unwrap()] += 1);
            c
        };
        assert_eq!(at(&mut b, 500_000), [0, 200]);
        // ...then it is drawn again; another failure doubles the window.
        assert!(at(&mut b, 1_100_000)[0] > 0);
        b.penalize(0, 1_100_000);
        assert_eq!(at(&mut b, 3_000_000), [0, 200]);
        assert!(at(&mut b, 3_200_000)[0] > 0);
        // Windows stop growing at 8 s; an answer ends the penalty and the run.
        (0..20).for_each(|k| b.penalize(0, 4_000_000 + k));
        assert_eq!(at(&mut b, 11_000_000), [0, 200]);
        assert!(at(&mut b, 12_100_000)[0] > 0);
        b.penalize(0, 13_000_000);
        b.observe(0, 1_000, 13_000_001);
        b.observe(1, 1_000, 13_000_001);
        assert!(at(&mut b, 13_000_002)[0] > 0);
        // The only candidate is still drawn while penalized.
        b.penalize(1, 13_000_003);
        assert_eq!(b.pick(|i| i == 1, &[], None, 13_000_004), Some(1));
    }

    #[test]
    fn a_cost_ages_without_samples_so_a_once_slow_server_is_measured_again() {
        let mut b = Balancer::new(Policy::LeastTime, servers(&[1, 1]), 5);
        b.observe(0, 900_000, 0);
        b.observe(1, 1_000, 0);
        assert_eq!(b.pick(|_| true, &[], None, 1), Some(1));
        // Server 1 keeps answering in 1 ms; 70 s on, server 0's 900 ms has aged below
        // that: it is drawn and measured again.
        b.observe(1, 1_000, 60_000_000);
        assert_eq!(b.pick(|_| true, &[], None, 60_000_000), Some(1));
        b.observe(1, 1_000, 70_000_000);
        assert_eq!(b.pick(|_| true, &[], None, 70_000_000), Some(0));
        // A client that gave up after 40 s on server 0 makes it the costlier at once.
        b.abandoned(0, 40_000_000, 70_000_000);
        assert_eq!(b.pick(|_| true, &[], None, 70_000_001), Some(1));
    }

    #[test]
    fn least_requests_fills_the_emptiest_for_its_weight() {
        let mut b = Balancer::new(Policy::LeastRequests, servers(&[1, 2]), 1);
        for _ in 0..30 {
            let i = b.pick(|_| true, &[], None, 1).unwrap();
            b.start(i);
        }
        assert_eq!((b.in_flight(0), b.in_flight(1)), (10, 20));
    }

    #[test]
    fn a_hash_key_keeps_its_server_and_a_removed_server_moves_only_its_own_keys() {
        let mut b = Balancer::new(Policy::Hash, servers(&[1, 1, 1, 1]), 1);
        let keys: Vec<String> = (0..2000).map(|k| format!("user-{k}")).collect();
        let before: Vec<usize> = keys
            .iter()
            .map(|k| {
                b.pick(|_| true, &[], Some(xxh3_64(k.as_bytes())), 1)
                    .unwrap()
            })
            .collect();
        let again: Vec<usize> = keys
            .iter()
            .map(|k| {
                b.pick(|_| true, &[], Some(xxh3_64(k.as_bytes())), 1)
                    .unwrap()
            })
            .collect();
        assert_eq!(before, again);
        let mut share = [0; 4];
        before.iter().for_each(|&i| share[i] += 1);
        assert!(share.iter().all(|&n| n > 300), "{share:?}");
        // Server 2 removed (a new ring without it, as a reload makes): only its keys move.
        let mut rest = servers(&[1, 1, 1, 1]);
        rest.remove(2);
        let mut c = Balancer::new(Policy::Hash, rest, 9);
        let keys_of = |i: usize| if i >= 2 { i + 1 } else { i };
        for (k, &was) in keys.iter().zip(&before) {
            let now = keys_of(
                c.pick(|_| true, &[], Some(xxh3_64(k.as_bytes())), 1)
                    .unwrap(),
            );
            if was != 2 {
                assert_eq!(now, was, "{k}");
            }
        }
    }
}
