//! `espalier bench` and `espalier scale`: measuring, from the command line.
//!
//! Owns: turning flags into [`crate::bench::BenchOptions`] and [`crate::scale::ScaleOptions`],
//! and printing results. Must not touch: load generation itself.

use super::{BenchAction, BenchArgs, MachineArgs, ScaleArgs};

fn duration_arg(flag: &str, text: &str) -> Result<std::time::Duration, String> {
    crate::units::parse_duration(text).map_err(|e| format!("{flag}: {e}"))
}

/// Which certificates the load generator believes: `-k`, `--cacert FILE…`, or the system's.
fn trust(insecure: bool, cacert: &[std::path::PathBuf]) -> crate::bench::Trust {
    if insecure {
        crate::bench::Trust::Insecure
    } else if cacert.is_empty() {
        crate::bench::Trust::System
    } else {
        crate::bench::Trust::CaFiles(cacert.to_vec())
    }
}

/// Builds bench options from the command line.
pub fn bench_options(a: &BenchArgs) -> Result<crate::bench::BenchOptions, String> {
    use crate::bench::{BenchOptions, Target};
    let weights: Vec<u32> = match &a.weights {
        None => vec![1; a.urls.len()],
        Some(w) => {
            let w: Vec<u32> = w
                .split(',')
                .map(|x| x.trim().parse::<u32>())
                .collect::<Result<_, _>>()
                .map_err(|_| format!("--weights `{w}`: write whole numbers like 3,1"))?;
            if w.len() != a.urls.len() || w.contains(&0) {
                return Err(format!(
                    "--weights: give one weight above 0 per URL ({} URLs)",
                    a.urls.len()
                ));
            }
            w
        }
    };
    let targets = a
        .urls
        .iter()
        .zip(weights)
        .map(|(u, w)| Target::parse(u, w))
        .collect::<Result<Vec<_>, _>>()?;
    let mut o = BenchOptions::new(targets);
    if a.connections == 0 || a.threads == 0 || a.pipeline == 0 {
        return Err("-c, -t and --pipeline must be at least 1".into());
    }
    o.connections = a.connections;
    o.threads = a.threads;
    o.cpus = a
        .cpus
        .as_deref()
        .map(|c| crate::cpuset::CpuSet::parse(c).map_err(|e| format!("--cpus: {e}")))
        .transpose()?;
    o.requests = a.requests;
    o.duration = duration_arg("--duration", &a.duration)?;
    o.warmup = duration_arg("--warmup", &a.warmup)?;
    o.cooldown = duration_arg("--cooldown", &a.cooldown)?;
    o.timeout = duration_arg("--timeout", &a.timeout)?;
    o.keepalive = !a.no_keepalive;
    o.pipeline = a.pipeline;
    o.h2 = a.h2;
    o.h3 = a.h3;
    o.retry_unanswered = !a.no_retry;
    let choice = match a.io.as_str() {
        "uring" => crate::config::IoChoice::Uring,
        "epoll" => crate::config::IoChoice::Epoll,
        _ => crate::config::IoChoice::Auto,
    };
    let override_ = std::env::var("ESPALIER_IO").ok();
    let path = choice.resolve_as(
        |v| format!("--io {v}"),
        override_.as_deref(),
        crate::os::uring::probe,
    )?;
    o.uring = path.uring;
    o.io_path = path.why;
    if a.h3 && a.no_keepalive {
        return Err(
            "--no-keepalive: HTTP/3 connections carry many requests; drop --no-keepalive or --h3"
                .into(),
        );
    }
    if a.h3 && o.targets.iter().any(|t| !t.tls) {
        return Err(
            "--h3: HTTP/3 is spoken over QUIC, which is always TLS; give https:// URLs".into(),
        );
    }
    if a.h2 && a.no_keepalive {
        return Err(
            "--no-keepalive: HTTP/2 connections carry many requests; drop --no-keepalive or --h2"
                .into(),
        );
    }
    // TLS's own options act on https:// URLs alone.
    let tls_only = [
        ("--tls-groups", a.tls_groups.is_some()),
        ("--no-resumption", a.no_resumption),
    ];
    if let Some((flag, _)) = (tls_only.iter()).find(|(_, set)| *set) {
        if !o.targets.iter().any(|t| t.tls) {
            return Err(format!("{flag}: shapes TLS handshakes, and no URL is https://; give an https:// URL or drop {flag}"));
        }
    }
    o.trust = trust(a.insecure, &a.cacert);
    o.tls_groups = (a.tls_groups.as_deref())
        .map(crate::bench::parse_tls_groups)
        .transpose()?;
    o.resume = !a.no_resumption;
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate must be a number of requests per second above 0".into());
        }
        if a.pipeline > 1 {
            return Err(
                "--rate sends one request at a time per connection; drop --pipeline/--streams"
                    .into(),
            );
        }
    }
    o.rate = a.rate;
    o.method = a.method.clone();
    for h in &a.headers {
        let (n, v) = h
            .split_once(':')
            .ok_or_else(|| format!("--header `{h}`: write it as `Name: value`"))?;
        o.headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    o.body = a.body.clone().unwrap_or_default().into_bytes();
    o.progress = !a.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    o.start_at = a
        .start_at
        .as_deref()
        .map(|t| start_time(t, std::time::SystemTime::now()))
        .transpose()?;
    Ok(o)
}

/// The furthest ahead `--start-at` may be: further is more likely a typo than a plan.
const MAX_START_AHEAD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// `--start-at`: an RFC 3339 time in UTC, or Unix seconds; in the future (as of `now`), at
/// most a day ahead.
fn start_time(text: &str, now: std::time::SystemTime) -> Result<std::time::SystemTime, String> {
    let at = match text.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => {
            std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(secs)
        }
        _ => humantime::parse_rfc3339_weak(text).map_err(|e| {
            format!("--start-at `{text}`: {e}; write a UTC time like 2026-11-22T21:50:00Z, or Unix seconds")
        })?,
    };
    match at.duration_since(now) {
        Err(_) => Err(format!(
            "--start-at `{text}` has already passed (it is now {}); give a time ahead, with room for every client to be started",
            humantime::format_rfc3339_seconds(now)
        )),
        Ok(ahead) if ahead > MAX_START_AHEAD => Err(format!(
            "--start-at `{text}` is more than a day ahead; check the date"
        )),
        Ok(_) => Ok(at),
    }
}

pub(super) fn bench(a: BenchArgs) -> Result<i32, String> {
    use crate::bench::result::{BenchJson, BenchResult};
    if let Some(BenchAction::Merge { files, json }) = &a.action {
        let mut total: Option<BenchResult> = None;
        for f in files {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
            let j: BenchJson = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "{}: not a result of `espalier bench --json`: {e}",
                    f.display()
                )
            })?;
            let r = BenchResult::from_json(&j).map_err(|e| format!("{}: {e}", f.display()))?;
            match &mut total {
                None => total = Some(r),
                Some(t) => {
                    t.merge(&r);
                    t.runs += r.runs;
                }
            }
        }
        let total = total.expect("at least one file");
        if *json {
            println!(
                "{}",
                serde_json::to_string_pretty(&total.to_json()).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", total.render());
        }
        return Ok(0);
    }
    let opts = bench_options(&a)?;
    let steps = a
        .sweep
        .as_deref()
        .map(crate::bench::parse_sweep)
        .transpose()?;
    if !a.json {
        eprintln!("espalier bench: connections' I/O: {}", opts.io_path);
    }
    match steps {
        None => {
            let r = crate::bench::run(&opts)?;
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r.to_json()).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", r.render());
            }
        }
        Some(steps) => {
            let mut rows = Vec::new();
            if !a.json {
                println!(
                    "{:>11} {:>12} {:>10} {:>10} {:>10} {:>8}",
                    "connections", "requests/s", "p50 ms", "p99 ms", "max ms", "errors"
                );
            }
            for c in steps {
                let mut o = opts.clone();
                o.connections = c;
                let r = crate::bench::run(&o)?;
                let l = r.latency();
                if !a.json {
                    println!(
                        "{:>11} {:>12.1} {:>10.3} {:>10.3} {:>10.3} {:>8}",
                        c,
                        r.rps(),
                        l.p50,
                        l.p99,
                        l.max,
                        r.errors.total()
                    );
                }
                let mut v = serde_json::to_value(r.to_json()).map_err(|e| e.to_string())?;
                v["connections"] = c.into();
                rows.push(v);
            }
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "steps": rows }))
                        .map_err(|e| e.to_string())?
                );
            }
        }
    }
    Ok(0)
}

pub(super) fn scale(a: ScaleArgs) -> Result<i32, String> {
    use crate::scale::plan::{Configuration, Workload};
    use crate::scale::{self, ScaleOptions};
    let mut o = if a.quick {
        ScaleOptions::quick(a.out.clone())
    } else {
        ScaleOptions::full(a.out.clone())
    };
    if let Some(w) = &a.workloads {
        o.workloads = w
            .iter()
            .map(|x| {
                Workload::parse(x)
                    .ok_or_else(|| format!("--workloads: `{x}` is not static, dynamic or cpu"))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(c) = &a.configs {
        o.configurations = c
            .iter()
            .map(|x| {
                Configuration::parse(x)
                    .ok_or_else(|| format!("--configs: `{x}` is not hosting, garden or default"))
            })
            .collect::<Result<_, _>>()?;
    }
    o.load_cpus = a
        .load_cpus
        .as_deref()
        .map(|c| crate::cpuset::CpuSet::parse(c).map_err(|e| format!("--load-cpus: {e}")))
        .transpose()?;
    o.max_units = a.max_units;
    if let Some(d) = &a.duration {
        o.duration = duration_arg("--duration", d)?;
    }
    if let Some(d) = &a.warmup {
        o.warmup = duration_arg("--warmup", d)?;
    }
    o.requests = match a.requests {
        Some(0) => {
            return Err("--requests: give the responses each run measures, 1 or more".into())
        }
        n => n,
    };
    if let Some(c) = a.connections {
        o.connections = c.max(1);
    }
    o.isolation = a.isolation;
    o.transport = scale::Transport {
        tls: a.tls,
        h2: a.h2,
    };
    o.trust = trust(a.insecure, &a.cacert);
    let t = MachineArgs::default().read()?;
    if a.target.is_empty() {
        scale::run(&o, &t)?;
    } else {
        let step = scale::TargetStep {
            targets: a.target.clone(),
            configuration: a
                .configuration
                .as_deref()
                .and_then(Configuration::parse)
                .ok_or("--configuration: give hosting, garden or default")?,
            unit_kind: crate::scale::plan::UnitKind::parse(&a.unit_kind)
                .ok_or("--unit-kind: give node, l3 or core")?,
            units: a
                .units
                .filter(|&u| u > 0)
                .ok_or("--units: give the step's number of units, 1 or more")?,
            server_cpus: a
                .server_cpus
                .filter(|&c| c > 0)
                .ok_or("--server-cpus: give the server's CPU count, 1 or more")?,
        };
        scale::run_target(&o, &step, &t)?;
    }
    println!(
        "{}",
        std::fs::read_to_string(o.out.join("report.md")).map_err(|e| e.to_string())?
    );
    eprintln!(
        "scale: wrote {}/results.json, report.md, chart.svg and report.html",
        o.out.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::start_time;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn start_times_are_utc_or_unix_seconds_and_ahead() {
        let now = UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let at = start_time("2026-11-18T20:30:00Z", now).unwrap();
        assert_eq!(at, UNIX_EPOCH + Duration::from_secs(1_795_033_800));
        assert_eq!(
            start_time("1795000060", now).unwrap(),
            now + Duration::from_secs(60)
        );
        let past = start_time("1794999999", now).unwrap_err();
        assert!(past.contains("has already passed"), "{past}");
        let far = start_time("2027-01-01T00:00:00Z", now).unwrap_err();
        assert!(far.contains("more than a day ahead"), "{far}");
        let bad = start_time("tomorrow", now).unwrap_err();
        assert!(bad.contains("write a UTC time like"), "{bad}");
    }
}
