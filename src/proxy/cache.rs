//! `cache_responses`: an app's or an upstream server's answers kept in memory and given
//! again while HTTP caching (RFC 9111) says they are fresh — what nginx's `proxy_cache` and
//! IIS's output caching do, by the rules the app already sends.
//!
//! - **What is asked of it** ([`CacheRequest`]): a `GET` or `HEAD` without a body, a range,
//!   credentials (`Authorization`) or an upgrade. Its `Cache-Control: no-cache` (or
//!   `max-age=0`, or `Pragma: no-cache`) goes to the app and may refresh the entry;
//!   `no-store` neither reads nor writes it. A client's own conditional request
//!   (`If-None-Match`, else `If-Modified-Since`) is answered `304` from a fresh entry whose
//!   validators match. An unsafe method (`POST`, `PUT`, `DELETE`, `PATCH`) answered below
//!   400 takes its URL's entries out (RFC 9111 §4.4).
//! - **What is kept** ([`keep`]): an answer whose status may be (RFC 9110 §15.1: 200, 203,
//!   204, 300, 301, 308, 404, 405, 410, 414, 501) and which says for how long: `s-maxage`,
//!   else `max-age`, else `Expires` less `Date`. Never one with `no-store`, `private`,
//!   `no-cache`, `Set-Cookie` or `Vary: *`; `Vary` keeps a variant per value of the fields
//!   it names. An answer read to its end within the entry bound, and framed by its length or
//!   in chunks, is kept as the app sent it (head and body).
//! - **Where** ([`Store`]): one store per pool or upstream group in each worker process —
//!   shared by the process's engine threads (a hit on any thread reads what one stored), and
//!   so on the process's own NUMA node: every worker process is placed on one node and its
//!   memory is first touched there, so a hit never reads another node's memory. A process a
//!   node is enough: the node's threads share its one store under a lock held for a lookup
//!   or an insert, never across I/O.
//! - **One request asks** ([`Store::fill`]): requests that miss a URL while another asks
//!   the app for it wait for that answer and look again (request collapsing).
//! - **Bounded** by `size` (the stored answers' bytes and their keys), least recently used
//!   first out: an answer looked up again moves to the back. LRU rather than LFU: a site's
//!   popular pages change (a new article), and LRU forgets the old ones without a decay to
//!   tune. An answer over `entry` bytes is relayed, not kept.
//! - **What the client sees**: `Age` (RFC 9111 §5.1) and `Cache-Status` (RFC 9211:
//!   `espalier; hit`, `espalier; fwd=miss; stored`, `espalier; fwd=request` when the request
//!   itself asked for the app).
//!
//! Owns: those rules, pure, and the stores. Must not touch: the connections (the forwarder
//! reads the app and writes the client, `super::cached`).

use crate::config::upstream::ResponseCache;
use crate::http::Request;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Statuses an answer may be kept with, when it says how long (RFC 9110 §15.1).
const KEPT_STATUSES: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// What an entry costs besides its bytes (its key, its variant's fields, the maps' slots).
const ENTRY_OVERHEAD: u64 = 256;

/// What the cache does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A fresh entry answers it; its answer may be kept.
    Read,
    /// It goes to the app (it asked to), and its answer may be kept.
    Refresh,
    /// It goes to the app, and nothing is kept (`no-store`).
    Pass,
    /// An unsafe method: its URL's entries go once the app accepts it.
    Invalidate,
}

/// What of a request the cache looks at, taken when it is dispatched on a route that keeps
/// answers (a route without costs nothing).
#[derive(Debug)]
pub struct CacheRequest {
    /// `scheme://host/path?query`.
    key: String,
    pub use_: Use,
    /// Its fields (names lowercase), for `Vary` and the conditional fields.
    fields: Vec<(String, Vec<u8>)>,
}

impl CacheRequest {
    /// The cache's view of `req` (over TLS when `https`, its body framed `carries_nothing`),
    /// or `None` where the cache has nothing to do with it.
    pub fn of(req: &Request<'_>, https: bool, carries_nothing: bool) -> Option<CacheRequest> {
        let unsafe_method = matches!(req.method_text, "POST" | "PUT" | "DELETE" | "PATCH");
        let readable = matches!(req.method_text, "GET" | "HEAD") && carries_nothing;
        if !readable && !unsafe_method {
            return None;
        }
        let scheme = if https { "https" } else { "http" };
        let host = req.host().unwrap_or("").to_ascii_lowercase();
        let query = if req.query.is_empty() { "" } else { "?" };
        let key = format!("{scheme}://{host}{}{query}{}", req.path, req.query);
        if unsafe_method {
            let fields = Vec::new();
            let use_ = Use::Invalidate;
            return Some(CacheRequest { key, use_, fields });
        }
        let has = |name: &str| req.header(name).is_some();
        if has("authorization") || has("range") || has("upgrade") {
            return None;
        }
        let directives = directives(
            (req.headers.iter())
                .filter(|h| h.name.eq_ignore_ascii_case("cache-control"))
                .map(|h| h.value),
        );
        let said = |d: &str| directives.iter().any(|(n, _)| n == d);
        let max_age_zero = directives
            .iter()
            .any(|(n, v)| n == "max-age" && v.as_deref() == Some("0"));
        let pragma = directives.is_empty()
            && req
                .header("pragma")
                .is_some_and(|p| p.to_ascii_lowercase().contains("no-cache"));
        let use_ = if said("no-store") {
            Use::Pass
        } else if said("no-cache") || max_age_zero || pragma {
            Use::Refresh
        } else {
            Use::Read
        };
        let fields = (req.headers.iter())
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        Some(CacheRequest { key, use_, fields })
    }

    /// The values of its field `name` (lowercase), joined as one: how `Vary` compares them.
    fn values(&self, name: &str) -> Option<Vec<u8>> {
        let mut all = self
            .fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v);
        let mut joined = all.next()?.clone();
        for v in all {
            joined.extend_from_slice(b", ");
            joined.extend_from_slice(v);
        }
        Some(joined)
    }

    /// The `Cache-Status` of an answer the app gave it (`stored`: it was kept).
    pub fn status_line(&self, stored: bool) -> &'static str {
        match (self.use_, stored) {
            (Use::Read, true) => "Cache-Status: espalier; fwd=miss; stored\r\n",
            (Use::Read, false) => "Cache-Status: espalier; fwd=miss\r\n",
            (_, true) => "Cache-Status: espalier; fwd=request; stored\r\n",
            (_, false) => "Cache-Status: espalier; fwd=request\r\n",
        }
    }
}

/// What an answer's head says for keeping it: for how long it is fresh, how old it was when
/// it came, and the fields it varies by (lowercase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keep {
    pub lifetime: Duration,
    pub age: Duration,
    pub vary: Vec<String>,
}

/// Whether an answer with `status` and `fields` may be kept, and how, at `now`.
pub fn keep<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a str, &'a [u8])> + Clone,
    now: SystemTime,
) -> Option<Keep> {
    if !KEPT_STATUSES.contains(&status) {
        return None;
    }
    let named = |name: &'static str| {
        fields
            .clone()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let control = directives(named("cache-control"));
    let number = |d: &str| {
        (control.iter())
            .find(|(n, _)| n == d)
            .and_then(|(_, v)| v.as_deref()?.parse::<u64>().ok())
    };
    if control
        .iter()
        .any(|(n, _)| matches!(n.as_str(), "no-store" | "private" | "no-cache"))
        || named("set-cookie").next().is_some()
    {
        return None;
    }
    let mut vary = Vec::new();
    for value in named("vary") {
        for name in String::from_utf8_lossy(value).split(',') {
            let name = name.trim().to_ascii_lowercase();
            if name == "*" {
                return None;
            }
            if !name.is_empty() && !vary.contains(&name) {
                vary.push(name);
            }
        }
    }
    let date = |name: &'static str| {
        let value = named(name).next()?;
        httpdate::parse_http_date(std::str::from_utf8(value).ok()?.trim()).ok()
    };
    let lifetime = match number("s-maxage").or_else(|| number("max-age")) {
        Some(seconds) => Duration::from_secs(seconds),
        None => {
            let expires = date("expires")?;
            expires
                .duration_since(date("date").unwrap_or(now))
                .unwrap_or_default()
        }
    };
    let age = named("age")
        .next()
        .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_secs);
    (lifetime > age).then_some(Keep {
        lifetime,
        age,
        vary,
    })
}

/// The directives of `Cache-Control` values: (name lowercase, value unquoted).
fn directives<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for value in values {
        for part in String::from_utf8_lossy(value).split(',') {
            let (name, arg) = match part.split_once('=') {
                Some((n, a)) => (n, Some(a.trim().trim_matches('"').to_string())),
                None => (part, None),
            };
            let name = name.trim().to_ascii_lowercase();
            if !name.is_empty() {
                out.push((name, arg));
            }
        }
    }
    out
}

/// A kept answer's validators (its `ETag`, its `Last-Modified`), for a client's conditional
/// request.
pub type Validators = (Option<Vec<u8>>, Option<SystemTime>);

/// An answer kept: as the app sent it, and what the cache knows of it.
#[derive(Debug)]
pub struct Stored {
    /// Its head (`head_len` bytes) and body, as the app sent them.
    pub raw: Bytes,
    pub head_len: usize,
    /// Who answered it (said in a failure's line, as for any answer of the app's).
    pub endpoint: super::Endpoint,
    stored: Instant,
    keep: Keep,
    /// Its validators, for a client's conditional request.
    etag: Option<Vec<u8>>,
    last_modified: Option<SystemTime>,
}

impl Stored {
    /// `raw`'s answer (head `head_len` bytes) from `endpoint`, kept as `keep` says.
    pub fn new(
        raw: Bytes,
        head_len: usize,
        endpoint: super::Endpoint,
        keep: Keep,
        validators: Validators,
    ) -> Stored {
        let (etag, last_modified) = validators;
        let stored = Instant::now();
        Stored {
            raw,
            head_len,
            endpoint,
            stored,
            keep,
            etag,
            last_modified,
        }
    }

    /// Its age at `now` (RFC 9111 §4.2.3: as it came, and since).
    pub fn age(&self, now: Instant) -> Duration {
        self.keep.age + now.duration_since(self.stored)
    }

    fn fresh(&self, now: Instant) -> bool {
        self.age(now) < self.keep.lifetime
    }

    /// Whether `req` is conditional and this answer's validators match it: it is answered
    /// `304` (RFC 9110 §13.2.2: `If-None-Match` first, then `If-Modified-Since`).
    pub fn not_modified_for(&self, req: &CacheRequest) -> bool {
        if let Some(asked) = req.values("if-none-match") {
            let Some(etag) = &self.etag else { return false };
            let weak = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
            let ours = weak(etag);
            return String::from_utf8_lossy(&asked)
                .split(',')
                .map(str::trim)
                .any(|t| t == "*" || weak(t.as_bytes()) == ours);
        }
        let since = req
            .values("if-modified-since")
            .and_then(|v| httpdate::parse_http_date(std::str::from_utf8(&v).ok()?.trim()).ok());
        matches!((since, self.last_modified), (Some(s), Some(m)) if m <= s)
    }
}

/// What a process's stores did since it started (a worker's `cache` in `status`): answers
/// given from them, asked of the app instead, kept, and put out for room; and what they hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub hits: u64,
    pub misses: u64,
    pub stored: u64,
    pub evicted: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// One variant of a URL's answer.
struct Variant {
    id: u64,
    /// The fields it varies by, with the request's values then.
    vary: Vec<(String, Option<Vec<u8>>)>,
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
        Store {
            bounds,
            entries,
            filling,
        }
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
        let now = Instant::now();
        let mut e = self.entries();
        let found = (e.by_key.get(&req.key)).and_then(|variants| {
            let v = variants.iter().find(|v| matches(v, req))?;
            Some((v.id, v.used, v.answer.fresh(now)))
        });
        match found {
            Some((id, used, true)) => {
                e.counts.hits += 1;
                e.tick += 1;
                let tick = e.tick;
                e.order.remove(&used);
                e.order.insert(tick, (req.key.clone(), id));
                let variants = e.by_key.get_mut(&req.key)?;
                let v = variants.iter_mut().find(|v| v.id == id)?;
                v.used = tick;
                Some(v.answer.clone())
            }
            Some((id, _, false)) => {
                e.counts.misses += 1;
                e.remove(&req.key, id);
                None
            }
            None => {
                e.counts.misses += 1;
                None
            }
        }
    }

    /// Keeps `answer` for `req` (its variant replacing the one kept for the same values),
    /// making room by the least recently used; nothing when it is over the entry bound.
    pub fn put(&self, req: &CacheRequest, answer: Stored) {
        let cost = answer.raw.len() as u64 + req.key.len() as u64 + ENTRY_OVERHEAD;
        if answer.raw.len() as u64 > self.bounds.entry || cost > self.bounds.size {
            return;
        }
        let vary: Vec<_> = (answer.keep.vary.iter())
            .map(|name| (name.clone(), req.values(name)))
            .collect();
        let mut e = self.entries();
        let same = (e.by_key.get(&req.key))
            .and_then(|variants| variants.iter().find(|v| v.vary == vary).map(|v| v.id));
        if let Some(id) = same {
            e.remove(&req.key, id);
        }
        while e.counts.bytes + cost > self.bounds.size {
            let Some((_, (key, id))) = e.order.pop_first() else {
                break;
            };
            e.remove(&key, id);
            e.counts.evicted += 1;
        }
        e.tick += 1;
        e.next_id += 1;
        let (used, id) = (e.tick, e.next_id);
        e.order.insert(used, (req.key.clone(), id));
        e.counts.bytes += cost;
        e.counts.entries += 1;
        e.counts.stored += 1;
        let answer = Arc::new(answer);
        let variant = Variant {
            id,
            vary,
            answer,
            cost,
            used,
        };
        e.by_key.entry(req.key.clone()).or_default().push(variant);
        drop(e);
        // Those waiting for this URL's answer look again now, not when its client is served.
        self.filling().by_key.remove(&req.key);
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
    }

    pub fn counts(&self) -> Counts {
        self.entries().counts
    }
}

impl Entries {
    fn remove(&mut self, key: &str, id: u64) {
        let Some(variants) = self.by_key.get_mut(key) else {
            return;
        };
        let Some(at) = variants.iter().position(|v| v.id == id) else {
            return;
        };
        let gone = variants.swap_remove(at);
        if variants.is_empty() {
            self.by_key.remove(key);
        }
        self.order.remove(&gone.used);
        self.counts.bytes -= gone.cost;
        self.counts.entries -= 1;
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
    for store in stores().values() {
        let c = store.counts();
        all.hits += c.hits;
        all.misses += c.misses;
        all.stored += c.stored;
        all.evicted += c.evicted;
        all.bytes += c.bytes;
        all.entries += c.entries;
    }
    all
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

#[cfg(test)]
mod tests;
