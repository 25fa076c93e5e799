//! Sites' figures (`metrics = true`) as the master shows them: per site, per pool and per
//! worker process, in Prometheus's text format — requests by status class, the request and
//! upstream latency histograms (in seconds, cumulative `le` buckets, `_sum` and `_count`),
//! bytes in and out — and in the status JSON the admin page reads (its p50, p99 and 5xx rate
//! per pool).
//!
//! Each worker adds up its threads' figures when pinged (see `http::meters`); a worker's
//! series restarts from zero with the process, as Prometheus's counters expect.
//!
//! Owns: [`SiteMeters`] and the text. Must not touch: recording (the engine threads).

use crate::http::meters::{HistogramFigures, MeterFigures, BUCKETS_MICROS};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

/// One site's figures in one worker process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteMeters {
    pub site: String,
    #[serde(flatten)]
    pub figures: MeterFigures,
}

/// Reads a worker's `meters` message.
pub fn parse(json: &str) -> Vec<SiteMeters> {
    serde_json::from_str::<Vec<(String, MeterFigures)>>(json)
        .map(|v| {
            v.into_iter()
                .map(|(site, figures)| SiteMeters { site, figures })
                .collect()
        })
        .unwrap_or_default()
}

/// A series of one site in one worker: `(pool, index, site figures)`.
pub type Series<'a> = (&'a str, u32, &'a SiteMeters);

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Appends the sites' metric families to `out`.
pub fn render(out: &mut String, series: &[Series<'_>]) {
    if series.is_empty() {
        return;
    }
    let labels = |(pool, index, m): &Series<'_>| {
        format!("site=\"{}\",pool=\"{pool}\",index=\"{index}\"", m.site)
    };
    let _ = writeln!(out, "# HELP espalier_site_requests_total requests answered, by status class\n# TYPE espalier_site_requests_total counter");
    for s in series {
        for (class, n) in CLASSES.iter().zip(s.2.figures.classes) {
            let _ = writeln!(
                out,
                "espalier_site_requests_total{{{},class=\"{class}\"}} {n}",
                labels(s)
            );
        }
    }
    histogram(
        out,
        series,
        "espalier_site_request_duration_seconds",
        "time from a request's first byte to its answer's last byte queued",
        |f| &f.latency,
        &labels,
    );
    histogram(
        out,
        series,
        "espalier_site_upstream_duration_seconds",
        "an app's time to its answer's head (proxied and FastCGI requests)",
        |f| &f.upstream,
        &labels,
    );
    for (name, help, value) in [
        (
            "espalier_site_received_bytes_total",
            "request body bytes, as Content-Length declared them",
            (|f: &MeterFigures| f.bytes_in) as fn(&MeterFigures) -> u64,
        ),
        (
            "espalier_site_sent_bytes_total",
            "answer body bytes sent",
            |f: &MeterFigures| f.bytes_out,
        ),
        (
            "espalier_site_limit_table_full_total",
            "new clients refused because the limit's table of clients was full of active ones",
            |f: &MeterFigures| f.limit_table_full,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for s in series {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(s), value(&s.2.figures));
        }
    }
    // Only for sites whose paths a response cache looked at.
    let cached: Vec<_> = series
        .iter()
        .filter(|s| s.2.figures.cache != [0; 3])
        .collect();
    if cached.is_empty() {
        return;
    }
    let name = "espalier_site_cache_answers_total";
    let _ = writeln!(out, "# HELP {name} requests a response cache looked at (cache_responses), by what it did: hit (fresh), miss (the app answered), stale\n# TYPE {name} counter");
    for s in cached {
        for (what, n) in ["hit", "miss", "stale"].iter().zip(s.2.figures.cache) {
            let _ = writeln!(out, "{name}{{{},result=\"{what}\"}} {n}", labels(s));
        }
    }
}

fn histogram(
    out: &mut String,
    series: &[Series<'_>],
    name: &str,
    help: &str,
    of: fn(&MeterFigures) -> &HistogramFigures,
    labels: &dyn Fn(&Series<'_>) -> String,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for s in series {
        let h = of(&s.2.figures);
        let l = labels(s);
        let mut cumulative = 0;
        for (k, le) in BUCKETS_MICROS.iter().enumerate() {
            cumulative += h.counts.get(k).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{{l},le=\"{}\"}} {cumulative}",
                *le as f64 / 1e6
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {}", h.count());
        let _ = writeln!(out, "{name}_sum{{{l}}} {}", h.sum_micros as f64 / 1e6);
        let _ = writeln!(out, "{name}_count{{{l}}} {}", h.count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_renders_as_prometheus_histograms_and_counters() {
        let figures = MeterFigures {
            classes: [0, 3, 0, 1, 1],
            latency: HistogramFigures {
                counts: vec![2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                sum_micros: 25_001_500,
            },
            bytes_out: 400,
            ..Default::default()
        };
        let m = SiteMeters {
            site: "shop".into(),
            figures,
        };
        let json = serde_json::to_string(&vec![("shop".to_string(), m.figures.clone())]).unwrap();
        assert_eq!(parse(&json), vec![m.clone()]);
        let mut out = String::new();
        render(&mut out, &[("web", 0, &m)]);
        let l = "site=\"shop\",pool=\"web\",index=\"0\"";
        for line in [
            format!("espalier_site_requests_total{{{l},class=\"2xx\"}} 3"),
            format!("espalier_site_requests_total{{{l},class=\"5xx\"}} 1"),
            format!("espalier_site_request_duration_seconds_bucket{{{l},le=\"0.0005\"}} 2"),
            format!("espalier_site_request_duration_seconds_bucket{{{l},le=\"0.001\"}} 3"),
            format!("espalier_site_request_duration_seconds_bucket{{{l},le=\"10\"}} 3"),
            format!("espalier_site_request_duration_seconds_bucket{{{l},le=\"+Inf\"}} 5"),
            format!("espalier_site_request_duration_seconds_count{{{l}}} 5"),
            format!("espalier_site_request_duration_seconds_sum{{{l}}} 25.0015"),
            format!("espalier_site_sent_bytes_total{{{l}}} 400"),
            format!("espalier_site_limit_table_full_total{{{l}}} 0"),
        ] {
            assert!(out.lines().any(|x| x == line), "{line} in\n{out}");
        }
        assert_eq!(out.matches("# TYPE").count(), 6);
        // A site a response cache looked at has its answers by what the cache did.
        let mut cached = m.clone();
        cached.figures.cache = [7, 2, 1];
        let mut out = String::new();
        render(&mut out, &[("web", 0, &cached)]);
        assert_eq!(out.matches("# TYPE").count(), 7);
        for (what, n) in [("hit", 7), ("miss", 2), ("stale", 1)] {
            let line = format!("espalier_site_cache_answers_total{{{l},result=\"{what}\"}} {n}");
            assert!(out.lines().any(|x| x == line), "{line} in\n{out}");
        }
    }
}
