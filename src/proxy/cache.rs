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
//! - **Where** (`super::cache_store`): one store per pool or upstream group in each worker process —
//!   shared by the process's engine threads (a hit on any thread reads what one stored), and
//!   so on the process's own NUMA node: every worker process is placed on one node and its
//!   memory is first touched there, so a hit never reads another node's memory. A process a
//!   node is enough: the node's threads share its one store under a lock held for a lookup
//!   or an insert, never across I/O.
//! - **One request asks** (`Store::fill`): requests that miss a URL while another asks
//!   the app for it wait for that answer and look again (request collapsing).
//! - **Stale answers** (`Store::look`): an expired answer with a validator is kept for
//!   the app to confirm (`super::cached` asks with `If-None-Match` or `If-Modified-Since`;
//!   a `304` renews its lifetime as it was), one with `stale-while-revalidate` (RFC 5861) is
//!   given that long past its lifetime while one request asks the app in the background,
//!   and one with `stale-if-error` stands in for the app's 5xx or silence that long past
//!   its lifetime; any other is taken out.
//! - **Purged** (`super::cache_purge`) by URL, prefix or the app's tags (`Cache-Tag`,
//!   `Surrogate-Key`), in every store of every worker (the admin endpoint's
//!   `POST /cache/purge`, told to each worker by the master).
//! - **Bounded** by `size` (the stored answers' bytes and their keys), least recently used
//!   first out: an answer looked up again moves to the back. LRU rather than LFU: a site's
//!   popular pages change (a new article), and LRU forgets the old ones without a decay to
//!   tune. An answer over `entry` bytes is relayed, not kept.
//! - **What the client sees**: `Age` (RFC 9111 §5.1) and `Cache-Status` (RFC 9211:
//!   `espalier; hit`, `espalier; fwd=miss; stored`, `espalier; fwd=request` when the request
//!   itself asked for the app).
//!
//! Owns: those rules, pure, and what a kept answer is ([`Stored`]). Must not touch: the
//! stores (`super::cache_store`) or the connections (the forwarder reads the app and writes
//! the client, `super::cached`).

use crate::config::upstream::CacheKeyPart;
use crate::http::Request;
use bytes::Bytes;
use std::time::{Duration, Instant, SystemTime};

/// Statuses an answer may be kept with, when it says how long (RFC 9110 §15.1).
const KEPT_STATUSES: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// The most variants kept of one URL (`Vary`), in memory and on disk each: a lookup looks
/// through a URL's variants, and a client sending a new value each time (`Accept-Language`
/// made up) must not make that walk long. Past it, the least recently used variant goes.
pub const MAX_VARIANTS: usize = 32;

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
#[derive(Debug, Clone)]
pub struct CacheRequest {
    /// `scheme://host/path?query`.
    pub(super) key: String,
    pub use_: Use,
    /// Its fields (names lowercase), for `Vary` and the conditional fields.
    fields: Vec<(String, Vec<u8>)>,
}

impl CacheRequest {
    /// The cache's view of `req` (over TLS when `https`, its body framed `carries_nothing`),
    /// or `None` where the cache has nothing to do with it.
    pub fn of(
        req: &Request<'_>,
        (https, carries_nothing): (bool, bool),
        parts: &[CacheKeyPart],
    ) -> Option<CacheRequest> {
        let unsafe_method = matches!(req.method_text, "POST" | "PUT" | "DELETE" | "PATCH");
        let readable = matches!(req.method_text, "GET" | "HEAD") && carries_nothing;
        if !readable && !unsafe_method {
            return None;
        }
        let scheme = if https { "https" } else { "http" };
        let host = req.host().unwrap_or("").to_ascii_lowercase();
        let query = if req.query.is_empty() { "" } else { "?" };
        let mut key = format!("{scheme}://{host}{}{query}{}", req.path, req.query);
        // The parts the config adds (`key`), after a byte no URL holds.
        for part in parts {
            let value = match part {
                CacheKeyPart::Field(name) => req.header(name).unwrap_or(""),
                CacheKeyPart::Cookie(name) => (req.cookie(name))
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .unwrap_or(""),
            };
            key.push('\n');
            key.push_str(value);
        }
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
    pub(super) fn values(&self, name: &str) -> Option<Vec<u8>> {
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

    /// Whether the client asked on a condition of its own (`If-None-Match`,
    /// `If-Modified-Since`).
    pub fn conditional(&self) -> bool {
        (self.fields.iter()).any(|(n, _)| n == "if-none-match" || n == "if-modified-since")
    }

    /// The `Cache-Status` field line of an answer the app gave it (`stored`: it was kept).
    pub fn status_line(&self, stored: bool) -> &'static str {
        match (self.use_, stored) {
            (Use::Read, true) => "Cache-Status: espalier; fwd=miss; stored\r\n",
            (Use::Read, false) => "Cache-Status: espalier; fwd=miss\r\n",
            (_, true) => "Cache-Status: espalier; fwd=request; stored\r\n",
            (_, false) => "Cache-Status: espalier; fwd=request\r\n",
        }
    }

    /// That line's value alone.
    pub fn status(&self, stored: bool) -> &'static str {
        let line = self.status_line(stored);
        &line["Cache-Status: ".len()..line.len() - 2]
    }
}

/// What an answer's head says for keeping it: for how long it is fresh, how old it was when
/// it came, and the fields it varies by (lowercase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keep {
    pub lifetime: Duration,
    pub age: Duration,
    pub vary: Vec<String>,
    /// How long past its lifetime it may stand in for the app's error (`stale-if-error`,
    /// RFC 5861).
    pub stale_if_error: Duration,
    /// How long past its lifetime it may still be given while the app is asked for a new
    /// one in the background (`stale-while-revalidate`, RFC 5861).
    pub stale_while_revalidate: Duration,
    /// Its tags (`Cache-Tag`, `Surrogate-Key`: comma- or space-separated), for a purge.
    pub tags: Vec<String>,
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
    let stale_if_error = number("stale-if-error").map_or(Duration::ZERO, Duration::from_secs);
    let stale_while_revalidate =
        number("stale-while-revalidate").map_or(Duration::ZERO, Duration::from_secs);
    let tags = (named("cache-tag").chain(named("surrogate-key")))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split([',', ' '])
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    (lifetime > age).then_some(Keep {
        lifetime,
        age,
        vary,
        stale_if_error,
        stale_while_revalidate,
        tags,
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
    pub(super) keep: Keep,
    /// Its validators, for a client's conditional request.
    etag: Option<Vec<u8>>,
    last_modified: Option<SystemTime>,
    /// The tags the app gave it (`Cache-Tag`, `Surrogate-Key`), for a purge by tag.
    tags: Vec<String>,
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
        let tags = keep.tags.clone();
        Stored {
            raw,
            head_len,
            endpoint,
            stored,
            keep,
            etag,
            last_modified,
            tags,
        }
    }

    /// Its age at `now` (RFC 9111 §4.2.3: as it came, and since).
    pub fn age(&self, now: Instant) -> Duration {
        self.keep.age + now.duration_since(self.stored)
    }

    pub(super) fn fresh(&self, now: Instant) -> bool {
        self.age(now) < self.keep.lifetime
    }

    /// How long past its lifetime it is at `now` (zero while fresh).
    pub fn past_lifetime(&self, now: Instant) -> Duration {
        self.age(now).saturating_sub(self.keep.lifetime)
    }

    /// Whether, stale, it may stand in for the app's error at `now` (`stale-if-error`).
    pub fn stands_in_for_errors(&self, now: Instant) -> bool {
        let allowed = self.keep.stale_if_error;
        !allowed.is_zero() && self.past_lifetime(now) <= allowed
    }

    /// Whether, stale, it may still be given at `now` while the app is asked for a new one
    /// in the background (`stale-while-revalidate`).
    pub fn serves_while_revalidating(&self, now: Instant) -> bool {
        let allowed = self.keep.stale_while_revalidate;
        !allowed.is_zero() && self.past_lifetime(now) <= allowed
    }

    /// Whether a stale answer is worth keeping: the app may confirm it (it has a
    /// validator), or it may stand in for the app's error or be given while the app is
    /// asked.
    pub(super) fn worth_keeping_stale(&self, now: Instant) -> bool {
        self.etag.is_some()
            || self.last_modified.is_some()
            || self.stands_in_for_errors(now)
            || self.serves_while_revalidating(now)
    }

    /// The tags the app gave it, for a purge by tag.
    pub fn tags(&self) -> &[String] {
        &self.tags
    }

    /// The request field that asks the app whether it changed: `If-None-Match` with its
    /// `ETag`, else `If-Modified-Since` with its `Last-Modified` (none: it has no validator).
    pub fn validator_field(&self) -> Option<(&'static str, String)> {
        Some(match self.validators() {
            (Some(etag), _) => ("If-None-Match", String::from_utf8_lossy(etag).into_owned()),
            (None, Some(modified)) => ("If-Modified-Since", httpdate::fmt_http_date(modified)),
            (None, None) => return None,
        })
    }

    /// Its validators, for asking the app whether it changed (RFC 9111 §4.3.1).
    pub fn validators(&self) -> (Option<&[u8]>, Option<SystemTime>) {
        (self.etag.as_deref(), self.last_modified)
    }

    /// The same answer held as `raw`: its bytes read back from the disk tier, or none — what
    /// the disk tier keeps of it in memory (`super::cache_disk`).
    pub fn with_raw(&self, raw: Bytes) -> Stored {
        Stored {
            raw,
            head_len: self.head_len,
            endpoint: self.endpoint.clone(),
            stored: self.stored,
            keep: self.keep.clone(),
            etag: self.etag.clone(),
            last_modified: self.last_modified,
            tags: self.tags.clone(),
        }
    }

    /// The same answer, confirmed by the app now with a `304` that says `keep` (its
    /// freshness; the old one's when it says none), as new.
    pub fn confirmed(&self, keep: Option<Keep>) -> Stored {
        let mut keep = keep.unwrap_or_else(|| self.keep.clone());
        keep.vary = self.keep.vary.clone();
        let validators = (self.etag.clone(), self.last_modified);
        let (raw, head_len, endpoint) = (self.raw.clone(), self.head_len, self.endpoint.clone());
        Stored::new(raw, head_len, endpoint, keep, validators)
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

#[cfg(test)]
mod tests;
