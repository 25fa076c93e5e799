//! A load run's result: counts, bytes, errors by kind and the latency histogram — printed as
//! text, written as JSON, and merged exactly (histograms included), so runs from several client
//! machines started together combine the way WCAT's controller combines its clients.
//!
//! Owns: the result format. Must not touch: how load is generated.

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Latencies are recorded in microseconds, from 1 µs to 1 hour, with 3 significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Errors by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// Could not connect.
    pub connect: u64,
    /// The connection failed or closed before a whole response arrived, or the response was
    /// not HTTP.
    pub read: u64,
    /// No response within the request timeout.
    pub timeout: u64,
    #[serde(rename = "4xx")]
    pub status_4xx: u64,
    #[serde(rename = "5xx")]
    pub status_5xx: u64,
}

impl ErrorCounts {
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.timeout + self.status_4xx + self.status_5xx
    }

    pub fn add(&mut self, o: &ErrorCounts) {
        self.connect += o.connect;
        self.read += o.read;
        self.timeout += o.timeout;
        self.status_4xx += o.status_4xx;
        self.status_5xx += o.status_5xx;
    }
}

/// The measured part of a run.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// Responses received (any status).
    pub requests: u64,
    /// Response bytes received (heads and bodies).
    pub bytes: u64,
    pub errors: ErrorCounts,
    /// Length of the measured window.
    pub duration: Duration,
    pub latency_us: Histogram<u64>,
    /// When the load began (Unix seconds; 0 = unknown), and for merged runs, how far apart
    /// the runs began and how many there were.
    pub started_unix_s: f64,
    pub start_spread_s: f64,
    pub runs: u32,
    /// Over HTTP/3, the UDP datagrams received over the connections' lives and their bytes:
    /// how large the server's path-MTU discovery let them grow (0 over TCP).
    pub datagrams: u64,
    pub datagram_bytes: u64,
}

/// The JSON form: the documented fields plus the serialized histogram.
#[derive(Debug, Serialize, Deserialize)]
pub struct BenchJson {
    pub requests: u64,
    pub errors: u64,
    pub duration_s: f64,
    pub rps: f64,
    pub bytes: u64,
    pub bytes_per_s: f64,
    pub latency_ms: Latency,
    pub errors_by_kind: ErrorCounts,
    /// HdrHistogram V2 (deflate) of latencies in microseconds, base64.
    pub histogram: String,
    /// When the load began, in Unix seconds (0 in results of older versions).
    #[serde(default)]
    pub started_unix_s: f64,
    /// For merged results: how far apart the runs began, in seconds.
    #[serde(default)]
    pub start_spread_s: f64,
    #[serde(default = "one")]
    pub runs: u32,
    #[serde(default)]
    pub datagrams: u64,
    #[serde(default)]
    pub datagram_bytes: u64,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl BenchResult {
    pub fn empty() -> Self {
        BenchResult {
            requests: 0,
            bytes: 0,
            errors: ErrorCounts::default(),
            duration: Duration::ZERO,
            latency_us: new_histogram(),
            started_unix_s: 0.0,
            start_spread_s: 0.0,
            runs: 1,
            datagrams: 0,
            datagram_bytes: 0,
        }
    }

    pub fn rps(&self) -> f64 {
        let s = self.duration.as_secs_f64();
        if s > 0.0 {
            self.requests as f64 / s
        } else {
            0.0
        }
    }

    pub fn latency(&self) -> Latency {
        let h = &self.latency_us;
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Latency {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                max: 0.0,
            };
        }
        Latency {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }

    /// Adds another thread's (or machine's) counts. Durations of runs that were started together
    /// overlap, so the merged window is the longest, not the sum.
    pub fn merge(&mut self, other: &BenchResult) {
        self.requests += other.requests;
        self.bytes += other.bytes;
        self.datagrams += other.datagrams;
        self.datagram_bytes += other.datagram_bytes;
        self.errors.add(&other.errors);
        self.duration = self.duration.max(other.duration);
        if other.started_unix_s > 0.0 {
            let (first, last) = if self.started_unix_s > 0.0 {
                (
                    self.started_unix_s.min(other.started_unix_s),
                    (self.started_unix_s + self.start_spread_s)
                        .max(other.started_unix_s + other.start_spread_s),
                )
            } else {
                (
                    other.started_unix_s,
                    other.started_unix_s + other.start_spread_s,
                )
            };
            self.started_unix_s = first;
            self.start_spread_s = last - first;
        }
        self.latency_us
            .add(&other.latency_us)
            .expect("histograms with the same bounds");
    }

    pub fn to_json(&self) -> BenchJson {
        let mut raw = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.latency_us, &mut raw)
            .expect("serialize histogram");
        let secs = self.duration.as_secs_f64();
        BenchJson {
            requests: self.requests,
            errors: self.errors.total(),
            duration_s: secs,
            rps: self.rps(),
            bytes: self.bytes,
            bytes_per_s: if secs > 0.0 {
                self.bytes as f64 / secs
            } else {
                0.0
            },
            latency_ms: self.latency(),
            errors_by_kind: self.errors,
            histogram: base64::engine::general_purpose::STANDARD.encode(raw),
            started_unix_s: self.started_unix_s,
            start_spread_s: self.start_spread_s,
            runs: self.runs,
            datagrams: self.datagrams,
            datagram_bytes: self.datagram_bytes,
        }
    }

    pub fn from_json(j: &BenchJson) -> Result<BenchResult, String> {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&j.histogram)
            .map_err(|e| format!("histogram is not base64: {e}"))?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &raw[..])
            .map_err(|e| format!("histogram does not decode: {e:?}"))?;
        let mut latency_us = new_histogram();
        latency_us
            .add(&h)
            .map_err(|e| format!("histogram out of range: {e:?}"))?;
        Ok(BenchResult {
            requests: j.requests,
            bytes: j.bytes,
            errors: j.errors_by_kind,
            duration: Duration::from_secs_f64(j.duration_s.max(0.0)),
            latency_us,
            started_unix_s: j.started_unix_s,
            start_spread_s: j.start_spread_s,
            runs: j.runs.max(1),
            datagrams: j.datagrams,
            datagram_bytes: j.datagram_bytes,
        })
    }

    /// The human-readable summary.
    pub fn render(&self) -> String {
        let l = self.latency();
        let e = &self.errors;
        format!(
            "{} requests in {:.2}s, {} read\n\
             requests/s: {:.1}   transfer/s: {}\n\
             latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n\
             errors: {} (connect {}, read {}, timeout {}, 4xx {}, 5xx {})\n",
            self.requests,
            self.duration.as_secs_f64(),
            crate::units::format_bytes(self.bytes),
            self.rps(),
            crate::units::format_bytes(self.to_json().bytes_per_s as u64),
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            e.total(),
            e.connect,
            e.read,
            e.timeout,
            e.status_4xx,
            e.status_5xx
        ) + &self.render_datagrams()
            + &self.render_runs()
    }

    /// Over HTTP/3: how many datagrams came, and their mean size.
    fn render_datagrams(&self) -> String {
        if self.datagrams == 0 {
            return String::new();
        }
        format!(
            "datagrams received: {}, mean {} bytes\n",
            self.datagrams,
            self.datagram_bytes / self.datagrams
        )
    }

    /// For merged results: how many runs, and how close together they began.
    fn render_runs(&self) -> String {
        if self.runs < 2 {
            return String::new();
        }
        if self.started_unix_s > 0.0 {
            format!(
                "runs: {} merged, begun within {:.1} ms of each other\n",
                self.runs,
                self.start_spread_s * 1000.0
            )
        } else {
            format!("runs: {} merged\n", self.runs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(requests: u64, latencies: &[u64]) -> BenchResult {
        let mut r = BenchResult::empty();
        r.requests = requests;
        r.bytes = requests * 100;
        r.duration = Duration::from_secs(2);
        r.errors.status_5xx = 1;
        for &l in latencies {
            r.latency_us.record(l).unwrap();
        }
        r
    }

    #[test]
    fn json_round_trips_and_merges_exactly() {
        let a = result(3, &[100, 200, 300]);
        let b = result(2, &[5000, 7000]);
        let a2 = BenchResult::from_json(
            &serde_json::from_str(&serde_json::to_string(&a.to_json()).unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(a2.latency_us, a.latency_us);
        let mut m = a2;
        m.merge(&b);
        assert_eq!(m.requests, 5);
        assert_eq!(m.errors.status_5xx, 2);
        assert_eq!(m.latency_us.len(), 5);
        assert_eq!(m.latency_us.max(), b.latency_us.max());
        assert_eq!(m.duration, Duration::from_secs(2));
        assert_eq!(m.to_json().rps, 2.5);
    }
}
