//! How fast and how much one client may ask of a site (IIS Dynamic IP Restrictions'
//! `denyByRequestRate` and `denyByConcurrentRequests`, nginx's `limit_req` with `burst` and
//! `limit_conn`): a request rate with a burst, and a number of requests in flight, per
//! client address.
//!
//! Where the counts live, and why: **per worker process** (one per NUMA node), in one
//! account per client address that the process's threads share, each thread drawing on it
//! in **leases** — a few requests' worth of rate, or a few in-flight slots, taken with one
//! compare-and-swap and then spent on the thread alone. So the account's cache line is
//! written once per lease, not per request, and only for that client (there is no counter
//! every core writes); a client over its limit only *reads* its account, so a flood of
//! refused requests moves no cache line between cores. Leases make the count inexact in one
//! direction mostly: tokens leased but not yet spent wait on their thread, so a client may
//! be refused by up to `(threads − 1) × lease` requests early, and a lease older than
//! [`LEASE_LIFE`] is dropped, so at most `(threads − 1) × (lease − 1)` requests more than
//! its burst can be let through in the second a stale lease may still be spent. A lease is
//! at most a quarter of the limit over the threads (at least 1), so the error stays within a
//! quarter of the burst or of the concurrent limit. A client whose connections land on
//! several nodes is counted on each: across the machine it gets up to the limit per node —
//! a bound the steering keeps small (a connection stays on its node), and the price of
//! never moving a count across the interconnect on the request path.
//!
//! The rate is a generic cell rate algorithm (GCRA, the token bucket as one timestamp): an
//! account keeps the theoretical arrival time of its next request; a request is let in when
//! that time is no further ahead of now than the burst's worth.
//!
//! Owns: the limits' spec and those counts; pure (time is given, no syscalls). Must not
//! touch: requests or answers (the handlers ask and answer), or who the client is
//! ([`super::access::client`] says).

use super::access::DenyAction;
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A site's `limit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitSpec {
    /// Requests per period (`"50/s"`), if the rate is limited.
    pub rate: Option<Rate>,
    /// Requests that may come at once above the rate (`burst`; the rate's count by default,
    /// as IIS's "N requests in an interval" allows N together).
    pub burst: u32,
    /// Requests one client may have in flight at once, if limited.
    pub concurrent: Option<u32>,
    /// What a limited client gets: 429 with `Retry-After` by default.
    pub action: DenyAction,
}

/// `N` requests per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    pub requests: u32,
    pub per: Duration,
}

impl Rate {
    /// `"50/s"`, `"600/m"`, `"10000/h"`, `"5/10s"`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!("`{text}` is not a rate; write requests per period, like \"50/s\", \"600/m\" or \"5/10s\"")
        };
        let (n, period) = text.split_once('/').ok_or_else(bad)?;
        let requests: u32 = n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(bad)?;
        let period = period.trim();
        let split = period.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let count: u64 = if split == 0 {
            1
        } else {
            period[..split]
                .parse()
                .ok()
                .filter(|&c| c > 0)
                .ok_or_else(bad)?
        };
        let unit = match &period[split..] {
            "s" => 1,
            "m" | "min" => 60,
            "h" => 3600,
            _ => return Err(bad()),
        };
        let secs = count
            .checked_mul(unit)
            .filter(|&s| s <= MAX_PERIOD.as_secs())
            .ok_or_else(|| format!("`{text}`: the period must be a day at most"))?;
        Ok(Rate {
            requests,
            per: Duration::from_secs(secs),
        })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.per.as_secs() {
            1 => write!(f, "{}/s", self.requests),
            60 => write!(f, "{}/m", self.requests),
            3600 => write!(f, "{}/h", self.requests),
            s => write!(f, "{}/{s}s", self.requests),
        }
    }
}

/// The longest period a rate may have.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// How long a thread may keep leased tokens: after it, unspent ones are dropped (they
/// could let a burst through twice).
pub const LEASE_LIFE: Duration = Duration::from_secs(1);

/// Clients a site's accounts track per worker process; past it, room is made — first the
/// idle (a full bucket, nothing in flight), then, as nginx's `limit_req` lets its oldest
/// entries go, the accounts no thread has used for a few seconds and made more than
/// [`EVICTABLE_AFTER`] ago, the oldest activity first ([`EVICTED_WHEN_FULL`] of the shard at
/// once): a table full of clients that each asked once at `2/h` no longer turns every new
/// client away for half an hour, while a flood of new addresses within seconds still finds
/// it full. Only when it is full of clients in use or that came in the last seconds is a new
/// client refused (the site's action, `Retry-After: 1`) until
/// there is room: letting it in uncounted would make a flood from many addresses (IPv6 gives
/// anyone millions) a way around every limit.
pub const MAX_CLIENTS: usize = 65_536;
const SHARDS: usize = 16;
/// The share of a full shard let go at once when no account in it is idle: room for the
/// next clients without a scan per new one.
const EVICTED_WHEN_FULL: usize = 8;
/// How old an account must be before a full table may let it go while it is still charged.
const EVICTABLE_AFTER: Duration = Duration::from_secs(60);
/// How often a thread drops the clients it has not seen for a while.
const LOCAL_SWEEP: Duration = Duration::from_secs(2);

/// One client's account, shared by a worker's threads.
#[derive(Default)]
struct Account {
    /// The theoretical arrival time of its next request, in ns since [`Accounts::epoch`].
    tat: AtomicU64,
    /// In-flight slots taken by threads (in flight or held free by a thread).
    slots: AtomicU32,
    /// Whether it is being limited (for the log's start and stop lines).
    limited: AtomicBool,
    /// Requests refused since it started being limited (added by threads in batches).
    refused: AtomicU64,
    /// When it was made, in ns since [`Accounts::epoch`] (never written again).
    made: u64,
}

/// A share of a site's accounts, by address, behind its own lock (taken when a thread first
/// sees a client, not per request).
type Shard = Mutex<HashMap<IpAddr, Arc<Account>>>;

/// A site's limits and its clients' accounts in one worker process.
pub struct Accounts {
    spec: LimitSpec,
    site: String,
    epoch: Instant,
    /// ns between requests at the rate, and the burst's worth of them.
    interval: u64,
    tolerance: u64,
    token_lease: u32,
    slot_lease: u32,
    shards: Box<[Shard]>,
    /// Where a client's start and stop of being limited is said (the worker's log).
    report: Box<dyn Fn(String) + Send + Sync>,
    /// When a full shard was last swept (ns since `epoch`): at most every 100 ms, so a flood
    /// of new addresses does not buy a sweep each.
    swept: AtomicU64,
    /// New clients refused because the table was full of active ones (written only then).
    refused_full: AtomicU64,
}

impl Accounts {
    /// `threads`: how many threads of the worker share them (sizes the leases); `report`
    /// is given a line when a client starts or stops being limited.
    pub fn new(
        site: &str,
        spec: LimitSpec,
        threads: usize,
        report: Box<dyn Fn(String) + Send + Sync>,
    ) -> Accounts {
        let lease = |limit: u32| (limit / (4 * threads.max(1) as u32)).clamp(1, 16);
        let interval = spec.rate.map_or(0, |r| {
            (r.per.as_nanos() as u64 / u64::from(r.requests)).max(1)
        });
        Accounts {
            interval,
            tolerance: interval.saturating_mul(u64::from(spec.burst.max(1))),
            token_lease: lease(spec.burst),
            slot_lease: lease(spec.concurrent.unwrap_or(1)),
            site: site.to_string(),
            spec,
            epoch: Instant::now(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            report,
            swept: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
        }
    }

    /// A new client refused for a full table: counted, and said in the log at the first and
    /// then at powers of two (a flood of addresses must not flood the log).
    fn refused_for_full_table(&self) {
        let n = self.refused_full.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            (self.report)(format!(
                "site {}: the limit's client table is full ({MAX_CLIENTS} active clients): new clients are refused until some go quiet ({n} so far)",
                self.site
            ));
        }
    }

    fn ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// Up to `want` tokens of `account`'s rate at `now`, or how long until one is there.
    fn take_tokens(&self, account: &Account, now: u64, want: u32) -> Result<u32, u64> {
        let mut tat = account.tat.load(Ordering::Relaxed);
        loop {
            // Saturating: a burst of billions at a slow rate is "no limit", never a wrap.
            let base = tat.max(now);
            let horizon = now.saturating_add(self.tolerance);
            let room = horizon.saturating_sub(base) / self.interval;
            if room == 0 {
                return Err(base.saturating_add(self.interval).saturating_sub(horizon));
            }
            let n = room.min(u64::from(want)) as u32;
            match account.tat.compare_exchange_weak(
                tat,
                base.saturating_add(u64::from(n).saturating_mul(self.interval)),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(n),
                Err(seen) => tat = seen,
            }
        }
    }

    /// Up to `want` in-flight slots of `account` (at least one), or none when it is full.
    fn take_slots(&self, account: &Account, limit: u32, want: u32) -> Option<u32> {
        let mut held = account.slots.load(Ordering::Relaxed);
        loop {
            let n = limit.saturating_sub(held).min(want);
            if n == 0 {
                return None;
            }
            match account.slots.compare_exchange_weak(
                held,
                held + n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(n),
                Err(seen) => held = seen,
            }
        }
    }

    /// The account of `ip`, made when new (`None` when the table is full of active ones).
    fn account(&self, ip: IpAddr, now: u64) -> Option<Arc<Account>> {
        let shard = &self.shards[shard_of(ip)];
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = map.get(&ip) {
            return Some(Arc::clone(a));
        }
        let last = self.swept.load(Ordering::Relaxed);
        if map.len() >= MAX_CLIENTS / SHARDS && now >= last + 100_000_000 {
            self.swept.store(now, Ordering::Relaxed);
            let in_use =
                |a: &Arc<Account>| Arc::strong_count(a) > 1 || a.slots.load(Ordering::Relaxed) > 0;
            let young = EVICTABLE_AFTER.as_nanos() as u64;
            // Those no thread holds, with a full bucket and nothing in flight.
            map.retain(|ip, a| {
                let active = in_use(a) || a.tat.load(Ordering::Relaxed) > now;
                if !active && a.limited.load(Ordering::Relaxed) {
                    self.report_stopped(*ip, a, 0);
                }
                active
            });
            if map.len() >= MAX_CLIENTS / SHARDS {
                // None idle: the least recently charged of those no thread uses now go.
                let mut unused: Vec<(u64, IpAddr)> = (map.iter())
                    .filter(|(_, a)| !in_use(a) && a.made + young <= now)
                    .map(|(ip, a)| (a.tat.load(Ordering::Relaxed), *ip))
                    .collect();
                let n = (MAX_CLIENTS / SHARDS / EVICTED_WHEN_FULL).min(unused.len());
                if n > 0 && n < unused.len() {
                    unused.select_nth_unstable(n);
                }
                for (_, ip) in unused.iter().take(n) {
                    map.remove(ip);
                }
            }
        }
        if map.len() >= MAX_CLIENTS / SHARDS {
            return None;
        }
        Some(Arc::clone(map.entry(ip).or_insert_with(|| {
            Arc::new(Account {
                made: now,
                ..Account::default()
            })
        })))
    }

    fn report_started(&self, ip: IpAddr, why: &str) {
        let action = match self.spec.action {
            DenyAction::Status(s) => format!("answering {s}"),
            DenyAction::Close => "closing its connections".to_string(),
        };
        (self.report)(format!(
            "site {}: client {ip} limited ({why}): {action}",
            self.site
        ));
    }

    fn report_stopped(&self, ip: IpAddr, account: &Account, local_refused: u64) {
        let refused = account.refused.swap(0, Ordering::Relaxed) + local_refused;
        (self.report)(format!(
            "site {}: client {ip} no longer limited ({refused} requests refused)",
            self.site
        ));
    }

    fn why_rate(&self) -> String {
        let r = self.spec.rate.expect("a rate");
        format!("over {r}, burst {}", self.spec.burst)
    }
}

fn shard_of(ip: IpAddr) -> usize {
    let v = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    // Fold and mix so neighbouring addresses land apart.
    let x = (v as u64) ^ ((v >> 64) as u64);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
}

/// A thread's share of one client's account: what it has leased and not spent.
struct Lease {
    ip: IpAddr,
    /// `None` when the table was full: the client is refused.
    account: Option<Arc<Account>>,
    tokens: Cell<u32>,
    leased_at: Cell<u64>,
    /// Slots this thread holds free, and its requests in flight.
    free: Cell<u32>,
    busy: Cell<u32>,
    refused: Cell<u64>,
    seen: Cell<u64>,
}

/// What a limited site decides for one request.
pub enum Verdict {
    /// Let in; for a held request, its slot, given back when dropped.
    Admit(Option<Held>),
    /// Refused: the site's action, and the seconds after which to try again; `table_full`
    /// when the client is new and the table of clients is full of active ones.
    Refuse {
        action: DenyAction,
        retry_after: u32,
        table_full: bool,
    },
}

/// One in-flight slot of a client, given back when the request is done (dropped).
pub struct Held {
    lease: Rc<Lease>,
    accounts: Arc<Accounts>,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held({})", self.lease.ip)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let l = &self.lease;
        l.busy.set(l.busy.get() - 1);
        l.free.set(l.free.get() + 1);
        // Slots a quiet thread keeps would be missed by the client's other connections.
        let keep = if l.busy.get() == 0 {
            0
        } else {
            self.accounts.slot_lease
        };
        let extra = l.free.get().saturating_sub(keep);
        if extra > 0 {
            l.free.set(l.free.get() - extra);
            if let Some(a) = &l.account {
                a.slots.fetch_sub(extra, Ordering::Relaxed);
            }
        }
    }
}

/// A site's limits as one thread applies them.
pub struct ThreadLimits {
    accounts: Arc<Accounts>,
    local: RefCell<HashMap<IpAddr, Rc<Lease>>>,
    swept: Cell<u64>,
}

impl ThreadLimits {
    pub fn new(accounts: Arc<Accounts>) -> ThreadLimits {
        ThreadLimits {
            accounts,
            local: RefCell::default(),
            swept: Cell::new(0),
        }
    }

    /// Whether `ip` may make a request at `now`. `hold`: the request stays in flight after
    /// this call (lent to an app), so it takes a slot until the returned [`Held`] is dropped;
    /// otherwise the slots are only looked at.
    pub fn admit(&self, ip: IpAddr, now: Instant, hold: bool) -> Verdict {
        let a = &*self.accounts;
        let now = a.ns(now);
        let lease = self.lease(ip, now);
        let Some(account) = lease.account.as_deref() else {
            a.refused_for_full_table();
            return Verdict::Refuse {
                action: a.spec.action,
                retry_after: 1,
                table_full: true,
            };
        };
        lease.seen.set(now);
        let mut shared = false;
        // In flight first: a request refused for it spends no token.
        let mut held = None;
        if let Some(limit) = a.spec.concurrent {
            let room = lease.free.get() > 0
                || if hold {
                    match a.take_slots(account, limit, a.slot_lease) {
                        Some(n) => {
                            lease.free.set(lease.free.get() + n);
                            shared = true;
                            true
                        }
                        None => false,
                    }
                } else {
                    account.slots.load(Ordering::Relaxed) < limit
                };
            if !room {
                return self.refuse(&lease, account, 1, || {
                    format!("over {limit} requests in flight")
                });
            }
            if hold {
                lease.free.set(lease.free.get() - 1);
                lease.busy.set(lease.busy.get() + 1);
                held = Some(Held {
                    lease: Rc::clone(&lease),
                    accounts: Arc::clone(&self.accounts),
                });
            }
        }
        if a.spec.rate.is_some() {
            let fresh = now < lease.leased_at.get() + LEASE_LIFE.as_nanos() as u64;
            if lease.tokens.get() > 0 && fresh {
                lease.tokens.set(lease.tokens.get() - 1);
            } else {
                match a.take_tokens(account, now, a.token_lease) {
                    Ok(n) => {
                        lease.tokens.set(n - 1);
                        lease.leased_at.set(now);
                        shared = true;
                    }
                    Err(wait) => {
                        drop(held);
                        let secs = wait.div_ceil(1_000_000_000).max(1) as u32;
                        return self.refuse(&lease, account, secs, || a.why_rate());
                    }
                }
            }
        }
        if shared
            && account.limited.load(Ordering::Relaxed)
            && account.limited.swap(false, Ordering::Relaxed)
        {
            a.report_stopped(ip, account, lease.refused.replace(0));
        }
        Verdict::Admit(held)
    }

    fn refuse(
        &self,
        lease: &Lease,
        account: &Account,
        retry_after: u32,
        why: impl FnOnce() -> String,
    ) -> Verdict {
        let a = &*self.accounts;
        if !account.limited.load(Ordering::Relaxed)
            && !account.limited.swap(true, Ordering::Relaxed)
        {
            a.report_started(lease.ip, &why());
        }
        // Counted here, added to the account in batches (a flood writes no shared line).
        let refused = lease.refused.get() + 1;
        if refused >= 256 {
            account.refused.fetch_add(refused, Ordering::Relaxed);
            lease.refused.set(0);
        } else {
            lease.refused.set(refused);
        }
        Verdict::Refuse {
            action: a.spec.action,
            retry_after,
            table_full: false,
        }
    }

    /// This thread's lease of `ip`'s account, made when new.
    fn lease(&self, ip: IpAddr, now: u64) -> Rc<Lease> {
        if let Some(l) = self.local.borrow().get(&ip) {
            return Rc::clone(l);
        }
        let full = self.local.borrow().len() >= MAX_CLIENTS;
        self.sweep(now, full);
        // Still full of clients seen in the last seconds: this one is refused (as when the
        // process's table is full), its lease not kept.
        let keep = self.local.borrow().len() < MAX_CLIENTS;
        let lease = Rc::new(Lease {
            ip,
            account: keep.then(|| self.accounts.account(ip, now)).flatten(),
            tokens: Cell::new(0),
            leased_at: Cell::new(0),
            free: Cell::new(0),
            busy: Cell::new(0),
            refused: Cell::new(0),
            seen: Cell::new(now),
        });
        if keep {
            self.local.borrow_mut().insert(ip, Rc::clone(&lease));
        }
        lease
    }

    /// Drops the leases of clients not seen for a while, giving back what they hold, so
    /// the process's table can let their accounts go; every [`LOCAL_SWEEP`], or when `full`
    /// every twentieth of it (a flood of new addresses must not buy a sweep each).
    fn sweep(&self, now: u64, full: bool) {
        let every = LOCAL_SWEEP.as_nanos() as u64;
        let gap = if full { every / 20 } else { every };
        if now < self.swept.get() + gap {
            return;
        }
        self.swept.set(now);
        self.local.borrow_mut().retain(|_, l| {
            let keep = l.busy.get() > 0 || l.seen.get() + every > now;
            if !keep {
                if let Some(a) = &l.account {
                    a.slots.fetch_sub(l.free.replace(0), Ordering::Relaxed);
                    a.refused.fetch_add(l.refused.replace(0), Ordering::Relaxed);
                }
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests;
