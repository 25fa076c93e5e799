//! What a site's requests cost and how they ended, for Prometheus (a site's `metrics = true`):
//! requests by status class, a latency histogram of the whole request and one of the app's
//! time to its answer's head, bytes in and out.
//!
//! Kept per thread and summed when the master asks (at its pings): each thread writes its own
//! [`SiteMeter`] — a load and a store per figure, no locked instruction and no line another
//! core writes — and the worker's main thread only reads them. The buckets are Prometheus's
//! defaults with three finer ones below 5 ms (a static page takes microseconds).
//!
//! Owns: recording an answered request's figures and adding them up. Must not touch: where
//! they are sent (the worker's control channel) or how they are shown (`server::meters`).

use super::access_log::Entry;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// The histograms' upper bounds, in µs (Prometheus's `le`; a last bucket holds the rest).
pub const BUCKETS_MICROS: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];
const SLOTS: usize = BUCKETS_MICROS.len() + 1;

/// A counter only its own thread adds to: a plain load and store, which the reader may see
/// a moment late but never torn.
#[derive(Default, Debug)]
struct Owned(AtomicU64);

impl Owned {
    fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default, Debug)]
struct Histogram {
    counts: [Owned; SLOTS],
    sum_micros: Owned,
}

impl Histogram {
    fn record(&self, micros: u64) {
        let slot = BUCKETS_MICROS.partition_point(|&le| le < micros);
        self.counts[slot].add(1);
        self.sum_micros.add(micros);
    }

    fn figures(&self) -> HistogramFigures {
        HistogramFigures {
            counts: self.counts.iter().map(Owned::get).collect(),
            sum_micros: self.sum_micros.get(),
        }
    }
}

/// One site's figures on one thread.
#[derive(Default, Debug)]
pub struct SiteMeter {
    classes: [Owned; 5],
    bytes_in: Owned,
    bytes_out: Owned,
    latency: Histogram,
    upstream: Histogram,
    limit_table_full: Owned,
    /// Answers of the response cache: hits, misses, stale.
    cache: [Owned; 3],
}

impl SiteMeter {
    /// A new client refused because the site's `limit` table was full.
    pub fn count_limit_table_full(&self) {
        self.limit_table_full.add(1);
    }

    /// An answered request, as its log entry says.
    pub fn record(&self, entry: &Entry<'_>) {
        if let Some(class) = (entry.status / 100).checked_sub(1).filter(|c| *c < 5) {
            self.classes[class as usize].add(1);
        }
        self.bytes_in.add(entry.req.body_in);
        self.bytes_out.add(entry.bytes);
        self.latency.record(entry.micros);
        if let Some(up) = entry.upstream_micros {
            self.upstream.record(up);
        }
        if let Some(seen) = entry.cache {
            self.cache[seen as usize].add(1);
        }
    }

    pub fn figures(&self) -> MeterFigures {
        MeterFigures {
            classes: std::array::from_fn(|k| self.classes[k].get()),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            latency: self.latency.figures(),
            upstream: self.upstream.figures(),
            limit_table_full: self.limit_table_full.get(),
            cache: std::array::from_fn(|k| self.cache[k].get()),
        }
    }
}

/// A histogram's counts per bucket (not cumulative; the last is above every bound) and the
/// sum of what it counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramFigures {
    pub counts: Vec<u64>,
    pub sum_micros: u64,
}

impl HistogramFigures {
    fn add(&mut self, other: &HistogramFigures) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_micros += other.sum_micros;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile in µs, interpolated within its bucket as Prometheus's
    /// `histogram_quantile` does (the last bucket's answer is the highest bound).
    pub fn quantile_micros(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut seen = 0u64;
        for (k, &n) in self.counts.iter().enumerate() {
            if n > 0 && (seen + n) as f64 >= rank {
                let Some(&upper) = BUCKETS_MICROS.get(k) else {
                    return Some(BUCKETS_MICROS[BUCKETS_MICROS.len() - 1] as f64);
                };
                let lower = if k == 0 { 0 } else { BUCKETS_MICROS[k - 1] };
                let within = (rank - seen as f64) / n as f64;
                return Some(lower as f64 + (upper - lower) as f64 * within.clamp(0.0, 1.0));
            }
            seen += n;
        }
        None
    }
}

/// A site's figures, from one thread or added up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterFigures {
    /// Requests answered 1xx, 2xx, 3xx, 4xx, 5xx.
    pub classes: [u64; 5],
    /// Request body bytes (as declared by `Content-Length`) and answer body bytes.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The whole request, first byte to last answer byte queued.
    pub latency: HistogramFigures,
    /// An app's time to its answer's head (proxied and FastCGI requests).
    pub upstream: HistogramFigures,
    /// New clients refused because the `limit`'s table of clients was full.
    #[serde(default)]
    pub limit_table_full: u64,
    /// Its requests the response cache answered fresh, had the app answer, and answered
    /// stale (`cache_responses`).
    #[serde(default)]
    pub cache: [u64; 3],
}

impl MeterFigures {
    pub fn add(&mut self, other: &MeterFigures) {
        for (a, b) in self.classes.iter_mut().zip(other.classes) {
            *a += b;
        }
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.latency.add(&other.latency);
        self.upstream.add(&other.upstream);
        self.limit_table_full += other.limit_table_full;
        for (a, b) in self.cache.iter_mut().zip(other.cache) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::access_log::Facts;

    fn entry(status: u16, micros: u64, upstream: Option<u64>, body_in: u64) -> Entry<'static> {
        Entry {
            req: Facts {
                method: b"GET",
                path: b"/",
                query: b"",
                minor_version: 1,
                host: None,
                referer: None,
                user_agent: None,
                body_in,
            },
            status,
            hop: None,
            trace: None,
            bytes: 100,
            micros,
            upstream_micros: upstream,
            cache: None,
            peer: "127.0.0.1",
        }
    }

    #[test]
    fn requests_land_in_their_class_and_bucket_and_threads_add_up() {
        let (a, b) = (SiteMeter::default(), SiteMeter::default());
        a.record(&entry(200, 300, None, 0));
        a.record(&entry(404, 800, None, 10));
        b.record(&entry(502, 30_000, Some(29_000), 0));
        b.record(&entry(200, 20_000_000, Some(19_000_000), 5));
        let mut sum = a.figures();
        sum.add(&b.figures());
        assert_eq!(sum.classes, [0, 2, 0, 1, 1]);
        assert_eq!((sum.bytes_in, sum.bytes_out), (15, 400));
        assert_eq!(sum.latency.counts[0], 1, "≤ 0.5 ms");
        assert_eq!(sum.latency.counts[1], 1, "≤ 1 ms");
        assert_eq!(sum.latency.counts[6], 1, "≤ 50 ms");
        assert_eq!(sum.latency.counts[SLOTS - 1], 1, "above 10 s");
        assert_eq!(sum.latency.sum_micros, 20_031_100);
        assert_eq!(sum.upstream.count(), 2);
    }

    #[test]
    fn quantiles_are_interpolated_within_their_bucket() {
        let m = SiteMeter::default();
        for _ in 0..98 {
            m.record(&entry(200, 2_000, None, 0)); // (1, 2.5] ms
        }
        for _ in 0..2 {
            m.record(&entry(200, 200_000, None, 0)); // (100, 250] ms
        }
        let f = m.figures().latency;
        let p50 = f.quantile_micros(0.5).unwrap();
        assert!((1_000.0..=2_500.0).contains(&p50), "{p50}");
        let p99 = f.quantile_micros(0.99).unwrap();
        assert!((100_000.0..=250_000.0).contains(&p99), "{p99}");
        assert_eq!(HistogramFigures::default().quantile_micros(0.5), None);
    }
}
