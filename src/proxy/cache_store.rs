//! The response caches' stores (`cache_responses`): one per pool or upstream group in each
//! worker process, shared by its engine threads — every worker process runs on one NUMA
//! node, so a hit reads its own node's memory — bounded by bytes, least recently used out
//! first — to the store's disk tier where it has one (`super::cache_disk`), whence a lookup
//! that misses memory brings it back; with the requests asking the app for a URL now
//! (request collapsing), the process's registry of stores, and their counts for `status`.
//!
//! Why LRU rather than LFU: a site's popular pages change (a new article), and LRU forgets
//! the old ones without a decay to tune.
//!
//! Owns: [`Store`], [`Lookup`], [`Filling`], [`Counts`] and the registry ([`store`]). Must
//! not touch: what may be kept and for how long (`super::cache`'s rules) or the connections.

use super::cache::{CacheRequest, Stored, MAX_VARIANTS};
use super::cache_disk::{purged, take_variant, Disk, VaryValues};
use super::cache_purge::Purge;
use crate::config::upstream::ResponseCache;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What an entry costs besides its bytes (its key, its variant's fields, the maps' slots).
const ENTRY_OVERHEAD: u64 = 256;

/// What a store holds for a request (see [`Store::look`]).
pub enum Lookup {
    Fresh(Arc<Stored>),
    Stale(Arc<Stored>),
    Missing,
}

/// What a process's stores did since it started (a worker's `cache` in `status`): answers
/// given from them, asked of the app instead, given stale (of the misses: within
/// `stale-while-revalidate`, or standing in for the app's error), kept, and put out for
/// room; and what they hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
    #[serde(default)]
    pub stale: u64,
    pub stored: u64,
    pub evicted: u64,
    pub bytes: u64,
    pub entries: u64,
    /// What its disk tier holds (`cache_responses.disk`).
    #[serde(default)]
    pub disk_bytes: u64,
    #[serde(default)]
    pub disk_entries: u64,
}

/// One variant of a URL's answer.
struct Variant {
    id: u64,
    /// The fields it varies by, with the request's values then.
    vary: VaryValues,
    answer: Arc<Stored>,
    cost: u64,
    /// Its place in the use order.
    used: u64,
}

#[derive(Default)]
struct Entries {
    by_key: HashMap<String, Vec<Variant>>,
    /// Use order: (tick) → (key, variant id); the first goes first.
    order: BTreeMap<u64, (String, u64)>,
    tick: u64,
    next_id: u64,
    counts: Counts,
}

/// A pool's or group's kept answers in one worker process.
pub struct Store {
    bounds: ResponseCache,
    entries: Mutex<Entries>,
    /// The URLs whose answer one request is asking of the app now (see [`Store::fill`]):
    /// its hold's number, and what the others asking for them wait on (dropped when that
    /// answer is kept, or the hold let go).
    filling: Mutex<Filled>,
    /// Where answers put out for room go (`disk`), if anywhere.
    disk: Option<Mutex<Disk>>,
}

#[derive(Default)]
struct Filled {
    by_key: HashMap<String, (u64, tokio::sync::watch::Sender<()>)>,
    next: u64,
}

/// A request's part in asking the app for a URL the store lacks.
pub enum Filling {
    /// It asks; the others wait until this is dropped (its answer kept, or not keepable).
    Asks(FillGuard),
    /// Another request asks: this one waits for it to end, then looks again.
    Waits(tokio::sync::watch::Receiver<()>),
}

/// The asking request's hold on its URL: let go when its answer is kept, or when dropped,
/// whatever the outcome.
pub struct FillGuard {
    store: Arc<Store>,
    key: String,
    /// Its number: a later hold on the URL (after this one's answer was kept) is not this.
    id: u64,
}

impl Drop for FillGuard {
    fn drop(&mut self) {
        let mut filling = self.store.filling();
        if filling
            .by_key
            .get(&self.key)
            .is_some_and(|(id, _)| *id == self.id)
        {
            filling.by_key.remove(&self.key);
        }
    }
}

impl Store {
    pub fn new(bounds: ResponseCache) -> Store {
        let entries = Mutex::new(Entries::default());
        let filling = Mutex::default();
        let disk = (bounds.disk > 0).then(|| disk_tier(&bounds)).flatten();
        Store {
            bounds,
            entries,
            filling,
            disk: disk.map(Mutex::new),
        }
    }

    fn disk(&self) -> Option<std::sync::MutexGuard<'_, Disk>> {
        let disk = self.disk.as_ref()?;
        Some(disk.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Request collapsing: the first request to miss a URL asks the app
    /// ([`Filling::Asks`]); one that misses it while that one is under way waits for it
    /// ([`Filling::Waits`]) and looks again — so that a popular page expiring under load
    /// reaches the app once, not once per client.
    pub fn fill(self: &Arc<Self>, req: &CacheRequest) -> Filling {
        let mut filling = self.filling();
        if let Some((_, under_way)) = filling.by_key.get(&req.key) {
            return Filling::Waits(under_way.subscribe());
        }
        filling.next += 1;
        let id = filling.next;
        let (done, _) = tokio::sync::watch::channel(());
        filling.by_key.insert(req.key.clone(), (id, done));
        Filling::Asks(FillGuard {
            store: self.clone(),
            key: req.key.clone(),
            id,
        })
    }

    fn filling(&self) -> std::sync::MutexGuard<'_, Filled> {
        self.filling.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The largest answer kept, head and body.
    pub fn entry_bound(&self) -> u64 {
        self.bounds.entry
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh answer to `req`, if one is kept (counted a hit, or a miss); a stale one is
    /// taken out.
    pub fn get(&self, req: &CacheRequest) -> Option<Arc<Stored>> {
        match self.look(req) {
            Lookup::Fresh(answer) => Some(answer),
            Lookup::Stale(_) | Lookup::Missing => None,
        }
    }

    /// What is kept for `req`: a fresh answer (a hit), a stale one the app may be asked to
    /// confirm or that may stand in for its error (a miss, kept), or nothing (a miss). A
    /// stale answer good for neither is taken out.
    pub fn look(&self, req: &CacheRequest) -> Lookup {
        if let Some(found) = self.look_in_memory(req) {
            return found;
        }
        // Put out of memory for room: back from the disk tier, to memory again.
        let back = self.disk().and_then(|mut disk| {
            let values = |vary: &VaryValues| vary.iter().all(|(n, v)| req.values(n) == *v);
            disk.take(&req.key, values)
        });
        if let Some((vary, answer)) = back {
            self.insert(&req.key, vary, answer);
            if let Some(found) = self.look_in_memory(req) {
                return found;
            }
        }
        self.entries().counts.misses += 1;
        Lookup::Missing
    }

    /// [`Self::look`] in memory alone: `None` when memory holds no answer for `req`.
    fn look_in_memory(&self, req: &CacheRequest) -> Option<Lookup> {
        let now = Instant::now();
        let mut e = self.entries();
        let found = (e.by_key.get(&req.key)).and_then(|variants| {
            let v = variants.iter().find(|v| matches(v, req))?;
            Some((v.id, v.used, v.answer.clone()))
        });
        let (id, used, answer) = found?;
        let fresh = answer.fresh(now);
        if fresh {
            e.counts.hits += 1;
        } else {
            e.counts.misses += 1;
            if !answer.worth_keeping_stale(now) {
                e.remove(&req.key, id);
                return Some(Lookup::Missing);
            }
        }
        e.tick += 1;
        let tick = e.tick;
        e.order.remove(&used);
        e.order.insert(tick, (req.key.clone(), id));
        if let Some(v) =
            (e.by_key.get_mut(&req.key)).and_then(|vs| vs.iter_mut().find(|v| v.id == id))
        {
            v.used = tick;
        }
        Some(match fresh {
            true => Lookup::Fresh(answer),
            false => Lookup::Stale(answer),
        })
    }

    /// Keeps `answer` for `req` (its variant replacing the one kept for the same values),
    /// making room by the least recently used; nothing when it is over the entry bound.
    pub fn put(&self, req: &CacheRequest, answer: impl Into<Arc<Stored>>) {
        let answer: Arc<Stored> = answer.into();
        let vary: Vec<_> = (answer.keep.vary.iter())
            .map(|name| (name.clone(), req.values(name)))
            .collect();
        // An older variant for the same values on disk is this one's no more.
        if let Some(mut disk) = self.disk() {
            disk.forget_variant(&req.key, &vary);
        }
        if self.insert(&req.key, vary, answer) {
            self.entries().counts.stored += 1;
        }
    }

    /// Keeps `answer` for `key`, its variant `vary`, in memory: the least recently used go
    /// out for room (to the disk tier, where the store has one and they are worth keeping).
    /// Whether it was kept (not when over the entry bound).
    fn insert(&self, key: &str, vary: VaryValues, answer: Arc<Stored>) -> bool {
        let cost = answer.raw.len() as u64 + key.len() as u64 + ENTRY_OVERHEAD;
        if answer.raw.len() as u64 > self.bounds.entry || cost > self.bounds.size {
            return false;
        }
        let mut e = self.entries();
        let same = (e.by_key.get(key))
            .and_then(|variants| variants.iter().find(|v| v.vary == vary).map(|v| v.id));
        if let Some(id) = same {
            e.remove(key, id);
        }
        let mut out = Vec::new();
        // A URL's variants are bounded: each lookup looks through them. Past the bound, its
        // least recently used goes (counted as put out for room).
        let many = e.by_key.get(key).filter(|vs| vs.len() >= MAX_VARIANTS);
        if let Some(oldest) = many
            .and_then(|vs| vs.iter().min_by_key(|v| v.used))
            .map(|v| v.id)
        {
            if let Some(gone) = e.remove(key, oldest) {
                out.push((key.to_string(), gone));
            }
            e.counts.evicted += 1;
        }
        while e.counts.bytes + cost > self.bounds.size {
            let Some((_, (gone_key, id))) = e.order.pop_first() else {
                break;
            };
            if let Some(gone) = e.remove(&gone_key, id) {
                out.push((gone_key, gone));
            }
            e.counts.evicted += 1;
        }
        e.tick += 1;
        e.next_id += 1;
        let (used, id) = (e.tick, e.next_id);
        e.order.insert(used, (key.to_string(), id));
        e.counts.bytes += cost;
        e.counts.entries += 1;
        let variant = Variant {
            id,
            vary,
            answer,
            cost,
            used,
        };
        e.by_key.entry(key.to_string()).or_default().push(variant);
        drop(e);
        // Those waiting for this URL's answer look again now, not when its client is served.
        self.filling().by_key.remove(key);
        self.spill(out);
        true
    }

    /// Writes the answers put out of memory `out` to the disk tier, those still worth
    /// keeping (fresh, or good stale).
    fn spill(&self, out: Vec<(String, Variant)>) {
        let Some(mut disk) = self.disk().filter(|_| !out.is_empty()) else {
            return;
        };
        let now = Instant::now();
        for (key, gone) in out {
            if gone.answer.fresh(now) || gone.answer.worth_keeping_stale(now) {
                disk.spill(&key, gone.vary, &gone.answer);
            }
        }
    }

    /// Takes out every variant kept for `req`'s URL.
    pub fn invalidate(&self, req: &CacheRequest) {
        let mut e = self.entries();
        let ids: Vec<u64> = (e.by_key.get(&req.key).into_iter().flatten())
            .map(|v| v.id)
            .collect();
        for id in ids {
            e.remove(&req.key, id);
        }
        drop(e);
        if let Some(mut disk) = self.disk() {
            disk.forget(&req.key);
        }
    }

    pub fn counts(&self) -> Counts {
        let mut counts = self.entries().counts;
        if let Some(disk) = self.disk() {
            (counts.disk_bytes, counts.disk_entries) = disk.held();
        }
        counts
    }

    /// Counts a stale answer given (see [`Counts::stale`]).
    pub fn given_stale(&self) {
        self.entries().counts.stale += 1;
    }

    /// Takes out what `purge` names: how many answers.
    pub fn purge(&self, purge: &Purge) -> usize {
        let mut e = self.entries();
        let gone = purged(&e.by_key, purge, |v| (v.answer.as_ref(), v.id));
        for (key, id) in &gone {
            e.remove(key, *id);
        }
        drop(e);
        let on_disk = self.disk().map_or(0, |mut disk| disk.purge(purge));
        gone.len() + on_disk
    }
}

/// The disk tier `bounds` asks for (`None`, said once, where its file cannot be made).
fn disk_tier(bounds: &ResponseCache) -> Option<Disk> {
    let folder = (bounds.folder.clone()).unwrap_or_else(std::env::temp_dir);
    // The disk tier's index in memory: a quarter of the memory tier's bound beside it.
    let index_bound = (bounds.size / 4).max(64 << 10);
    match Disk::open(&folder, bounds.disk, index_bound) {
        Ok(disk) => Some(disk),
        Err(e) => {
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                eprintln!("espalier: cache_responses: no file for its disk tier in {} ({e}); answers put out of memory are let go", folder.display());
            }
            None
        }
    }
}

impl Entries {
    fn remove(&mut self, key: &str, id: u64) -> Option<Variant> {
        let gone = take_variant(&mut self.by_key, key, |v| v.id == id)?;
        self.order.remove(&gone.used);
        self.counts.bytes -= gone.cost;
        self.counts.entries -= 1;
        Some(gone)
    }
}

/// Whether variant `v` answers `req`: the request's values of every field it varies by are
/// those it was stored for.
fn matches(v: &Variant, req: &CacheRequest) -> bool {
    v.vary
        .iter()
        .all(|(name, value)| req.values(name) == *value)
}

impl Counts {
    /// Nothing counted: a worker without a cache.
    pub fn is_zero(&self) -> bool {
        *self == Counts::default()
    }
}

/// The registry of this process's stores, by pool or group.
fn stores() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Store>>> {
    static STORES: std::sync::LazyLock<Mutex<HashMap<String, Arc<Store>>>> =
        std::sync::LazyLock::new(Default::default);
    STORES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The figures of every store of this process, added up.
pub fn process_counts() -> Counts {
    let mut all = Counts::default();
    for (_, c) in store_counts() {
        all.hits += c.hits;
        all.misses += c.misses;
        all.stale += c.stale;
        all.stored += c.stored;
        all.evicted += c.evicted;
        all.bytes += c.bytes;
        all.entries += c.entries;
        all.disk_bytes += c.disk_bytes;
        all.disk_entries += c.disk_entries;
    }
    all
}

/// One store's figures in one worker process, by its name (`pool:NAME`, `upstream:NAME`):
/// how `status` shows each pool's and group's cache on each node.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreCounts {
    pub store: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The figures of each store of this process, by name.
pub fn store_counts() -> Vec<(String, Counts)> {
    let mut all: Vec<_> = (stores().iter())
        .map(|(name, store)| (name.clone(), store.counts()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Reads a worker's `caches` message (JSON of [`store_counts`]); nothing when it does not
/// parse.
pub fn parse_store_counts(json: &str) -> Vec<StoreCounts> {
    serde_json::from_str::<Vec<(String, Counts)>>(json)
        .map(|all| {
            (all.into_iter())
                .map(|(store, counts)| StoreCounts { store, counts })
                .collect()
        })
        .unwrap_or_default()
}

/// Takes what `purge` names out of every store of this process: how many answers.
pub fn purge_all(purge: &Purge) -> usize {
    stores().values().map(|s| s.purge(purge)).sum()
}

/// The store of pool or group `name` (`pool:NAME`, `upstream:NAME`) in this process, made
/// with `bounds` (again, empty, when its bounds changed): a reload that leaves them keeps
/// what it holds.
pub fn store(name: &str, bounds: ResponseCache) -> Arc<Store> {
    let mut stores = stores();
    let kept = stores.get(name).filter(|s| s.bounds == bounds).cloned();
    kept.unwrap_or_else(|| {
        let made = Arc::new(Store::new(bounds));
        stores.insert(name.to_string(), made.clone());
        made
    })
}
