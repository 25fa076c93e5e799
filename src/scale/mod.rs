//! `espalier scale`: the case study's experiment on the machine at hand. For each workload,
//! each step (1, 2, 4, … units of the machine) and each configuration (hosting, web garden,
//! default), it starts `espalier serve` restricted to the step's CPUs, loads it with the
//! built-in load generator on CPUs the server does not use, and writes the results as JSON, a
//! Markdown table in the case study's form, an SVG chart and an HTML page.
//!
//! With `--isolation` it also runs the web-gardening seed's second experiment: pool A
//! saturated with CPU-heavy work, pool B serving light requests, with and without a `cpus`
//! mask that gives B its own CPU — and reports B's latency both ways.
//!
//! With `--tls` and `--h2` the servers are spoken to over HTTPS and in HTTP/2 (`transport`).
//!
//! Owns: running the experiment. Must not touch: the machine's CPUs beyond starting servers
//! with configs that restrict them (the design is in [`plan`], what was measured in
//! `results`, the output in [`report`]).

pub mod plan;
pub mod report;
mod results;
mod transport;

use crate::bench::{self, BenchOptions, Target};
use crate::cpuset::CpuSet;
use crate::topology::Topology;
use plan::{Configuration, ScalePlan, Workload};
pub use results::{Isolation, Row, ScaleResults};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use transport::make_certificate;
pub use transport::Transport;

/// How to run the experiment.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub out: PathBuf,
    pub workloads: Vec<Workload>,
    pub configurations: Vec<Configuration>,
    pub load_cpus: Option<CpuSet>,
    pub max_units: Option<usize>,
    pub duration: Duration,
    pub warmup: Duration,
    /// Each run measures exactly this many responses after its warm-up, in place of
    /// `duration` (the isolation experiment keeps `duration`: its question is a load held
    /// for a time).
    pub requests: Option<u64>,
    pub connections: usize,
    pub isolation: bool,
    /// Over TLS and/or in HTTP/2.
    pub transport: Transport,
    /// Which certificates the load generator believes in `--target` mode (a server started
    /// here gets a certificate made for the run, believed exactly).
    pub trust: bench::Trust,
}

impl ScaleOptions {
    /// `--quick`: the static page only, short runs — under two minutes on a 2-core machine.
    pub fn quick(out: PathBuf) -> Self {
        ScaleOptions {
            out,
            workloads: vec![Workload::Static],
            configurations: Configuration::ALL.to_vec(),
            load_cpus: None,
            max_units: None,
            duration: Duration::from_secs(2),
            warmup: Duration::from_millis(500),
            requests: None,
            connections: 32,
            isolation: false,
            transport: Transport::default(),
            trust: bench::Trust::System,
        }
    }

    pub fn full(out: PathBuf) -> Self {
        ScaleOptions {
            workloads: Workload::ALL.to_vec(),
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            connections: 64,
            ..ScaleOptions::quick(out)
        }
    }
}

/// A server started for one measurement; stopped on drop.
struct RunningServer {
    child: Child,
    workers: usize,
}

impl RunningServer {
    /// Starts `serve -c config` with its admin endpoint on `admin`: a server already on the
    /// default admin address (the operator's own) would make it refuse to start.
    fn start(config: &Path, cwd: &Path, admin: u16) -> Result<RunningServer, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["serve", "-c"])
            .arg(config)
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start espalier serve: {e}"))?;
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel::<String>();
        // Keep reading the server's log for its whole life (the lines are dropped once it is
        // ready), so the server never writes into a closed pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut log = Vec::new();
        let mut workers = 0;
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) if line.contains(" worker(s) serving") => break,
                Ok(line) => {
                    if line.contains("]: worker ") && line.contains(" started:") {
                        workers += 1;
                    }
                    log.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("the server did not start:\n{}", log.join("\n")));
                }
            }
        }
        Ok(RunningServer { child, workers })
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = crate::os::process::kill(self.child.id(), libc::SIGTERM);
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Ports for the servers a run starts, from below the ephemeral range (see
/// [`crate::os::net::free_loopback_ports`]): the load's own connections take ephemeral ports,
/// and one of them could take a port chosen there before the server binds it.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    crate::os::net::free_loopback_ports(n).map_err(|e| format!("no free port: {e}"))
}

fn load_options(
    opts: &ScaleOptions,
    plan: &ScalePlan,
    urls: &[String],
    trust: &bench::Trust,
) -> Result<BenchOptions, String> {
    let targets = urls
        .iter()
        .map(|u| Target::parse(u, 1))
        .collect::<Result<Vec<_>, _>>()?;
    let mut b = BenchOptions::new(targets);
    b.connections = opts.connections.max(urls.len());
    b.threads = plan.load_cpus.len().max(1);
    b.cpus = Some(plan.load_cpus.clone());
    b.duration = opts.duration;
    b.warmup = opts.warmup;
    b.requests = opts.requests;
    b.timeout = Duration::from_secs(10);
    b.h2 = opts.transport.h2;
    b.trust = trust.clone();
    Ok(b)
}

/// Runs the experiment and writes its report into `opts.out`.
pub fn run(opts: &ScaleOptions, topology: &Topology) -> Result<ScaleResults, String> {
    let plan = plan::plan(topology, opts.load_cpus.clone(), opts.max_units)?;
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let work = tempfile_dir()?;
    std::fs::create_dir_all(work.join("www")).map_err(|e| e.to_string())?;
    std::fs::write(work.join("www/100.html"), format!("{}\n", "x".repeat(99)))
        .map_err(|e| e.to_string())?;
    let trust = if opts.transport.tls {
        make_certificate(&work)?
    } else {
        bench::Trust::System
    };
    let scheme = opts.transport.scheme();
    let units_text: Vec<String> = plan
        .steps
        .iter()
        .map(|&s| format!("{} (CPUs {})", plan.unit_kind.noun(s), plan.step_cpus(s)))
        .collect();
    eprintln!(
        "scale: server steps {}; load generator on CPUs {}{}",
        units_text.join(", "),
        plan.load_cpus,
        if plan.shared_load {
            " (shared with the server: this machine is too small to keep them apart)"
        } else {
            ""
        }
    );
    let mut rows = Vec::new();
    for &workload in &opts.workloads {
        for &step in &plan.steps {
            for &configuration in &opts.configurations {
                // The last for the server's admin endpoint, its own (see RunningServer::start).
                let mut ports = free_ports(step + 1)?;
                let admin = ports.pop().expect("asked for one more");
                let config = work.join("espalier.toml");
                std::fs::write(
                    &config,
                    plan::config_text(&plan, configuration, step, &ports, opts.transport),
                )
                .map_err(|e| e.to_string())?;
                let server = RunningServer::start(&config, &work, admin)?;
                let urls: Vec<String> = match configuration {
                    Configuration::Hosting => ports
                        .iter()
                        .map(|p| format!("{scheme}://127.0.0.1:{p}{}", workload.path()))
                        .collect(),
                    _ => vec![format!(
                        "{scheme}://127.0.0.1:{}{}",
                        ports[0],
                        workload.path()
                    )],
                };
                let result = bench::run(&load_options(opts, &plan, &urls, &trust)?)?;
                let workers = server.workers;
                drop(server);
                let cpus = plan.step_cpus(step);
                eprintln!(
                    "scale: {:<7} {:<13} {:<8} {:>10.0} requests/s  p99 {:.2} ms  errors {}",
                    workload.name(),
                    plan.unit_kind.noun(step),
                    configuration.name(),
                    result.rps(),
                    result.latency().p99,
                    result.errors.total()
                );
                rows.push(Row {
                    workload,
                    configuration,
                    units: step,
                    cpu_count: cpus.len(),
                    cpus: cpus.to_string(),
                    workers,
                    rps: result.rps(),
                    latency_ms: result.latency(),
                    errors: result.errors.total(),
                });
            }
        }
    }
    let isolation = if opts.isolation {
        Some(isolation(opts, &plan, &work, &trust)?)
    } else {
        None
    };
    let _ = std::fs::remove_dir_all(&work);
    let results = ScaleResults {
        date: httpdate::fmt_http_date(std::time::SystemTime::now()),
        machine: machine_summary(topology),
        plan,
        duration_s: opts.duration.as_secs_f64(),
        warmup_s: opts.warmup.as_secs_f64(),
        requests: opts.requests,
        connections: opts.connections,
        rows,
        isolation,
        transport: opts.transport,
    };
    report::write_all(&results, &opts.out)?;
    Ok(results)
}

/// `--target` mode: the server runs elsewhere, started by hand for each step (for example
/// `espalier serve -c garden.toml` restricted with `cpus` to the step's nodes). One call
/// measures one configuration at one step against `targets` (base URLs; several for hosting)
/// and merges the rows into the report already in `opts.out`, replacing any earlier
/// measurement of the same configuration and step.
pub struct TargetStep {
    pub targets: Vec<String>,
    pub configuration: Configuration,
    pub unit_kind: plan::UnitKind,
    pub units: usize,
    pub server_cpus: usize,
}

pub fn run_target(
    opts: &ScaleOptions,
    step: &TargetStep,
    topology: &Topology,
) -> Result<ScaleResults, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("{}: {e}", opts.out.display()))?;
    let load_cpus = opts
        .load_cpus
        .clone()
        .unwrap_or_else(|| topology.online_cpus());
    let existing = opts.out.join("results.json");
    let mut results = match std::fs::read_to_string(&existing) {
        Ok(text) => {
            let r: ScaleResults = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "{}: not a report of espalier scale: {e}",
                    existing.display()
                )
            })?;
            if r.plan.unit_kind != step.unit_kind {
                return Err(format!(
                    "{} measures {:?} steps; use --unit-kind {:?} or another --out",
                    existing.display(),
                    r.plan.unit_kind,
                    r.plan.unit_kind
                ));
            }
            r
        }
        Err(_) => ScaleResults {
            date: String::new(),
            machine: format!("remote server at {}", step.targets.join(", ")),
            plan: ScalePlan {
                unit_kind: step.unit_kind,
                units: Vec::new(),
                load_cpus: load_cpus.clone(),
                shared_load: false,
                steps: Vec::new(),
            },
            duration_s: opts.duration.as_secs_f64(),
            warmup_s: opts.warmup.as_secs_f64(),
            requests: opts.requests,
            connections: opts.connections,
            rows: Vec::new(),
            isolation: None,
            transport: opts.transport,
        },
    };
    results.transport = Transport {
        tls: step.targets.iter().any(|t| t.starts_with("https://")),
        h2: opts.transport.h2,
    };
    let plan = ScalePlan {
        load_cpus,
        ..results.plan.clone()
    };
    for &workload in &opts.workloads {
        let urls: Vec<String> = step
            .targets
            .iter()
            .map(|t| format!("{}{}", t.trim_end_matches('/'), workload.path()))
            .collect();
        let r = bench::run(&load_options(opts, &plan, &urls, &opts.trust)?)?;
        eprintln!(
            "scale: {:<7} {:<13} {:<8} {:>10.0} requests/s  p99 {:.2} ms  errors {}",
            workload.name(),
            step.unit_kind.noun(step.units),
            step.configuration.name(),
            r.rps(),
            r.latency().p99,
            r.errors.total()
        );
        results.rows.retain(|x| {
            !(x.workload == workload
                && x.configuration == step.configuration
                && x.units == step.units)
        });
        results.rows.push(Row {
            workload,
            configuration: step.configuration,
            units: step.units,
            cpus: format!("{} remote", step.server_cpus),
            cpu_count: step.server_cpus,
            workers: 0,
            rps: r.rps(),
            latency_ms: r.latency(),
            errors: r.errors.total(),
        });
    }
    let mut steps: Vec<usize> = results.rows.iter().map(|r| r.units).collect();
    steps.sort_unstable();
    steps.dedup();
    results.plan.steps = steps;
    results.date = httpdate::fmt_http_date(std::time::SystemTime::now());
    report::write_all(&results, &opts.out)?;
    Ok(results)
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("espalier-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn machine_summary(t: &Topology) -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!(
        "{} online CPUs, {} NUMA node(s), {} L3 domain(s){}, {model}",
        t.online_cpus().len(),
        t.nodes.iter().filter(|n| !n.cpus.is_empty()).count(),
        t.l3_domains().len(),
        if t.smt() { ", SMT on" } else { "" }
    )
}

/// The web-gardening seed's isolation experiment.
fn isolation(
    opts: &ScaleOptions,
    plan: &ScalePlan,
    work: &Path,
    trust: &bench::Trust,
) -> Result<Isolation, String> {
    let t = opts.transport;
    let all = plan.step_cpus(plan.units.len());
    if all.len() < 2 {
        return Err("--isolation needs at least two CPUs for the server".into());
    }
    let b_cpu = CpuSet::from_ids([all.as_slice()[all.len() - 1]]);
    let a_cpus = all.difference(&b_cpu);
    let rate = 50.0;
    let mut measured = Vec::new();
    for masked in [false, true] {
        let mut ports = free_ports(3)?;
        let admin = ports.pop().expect("asked for three");
        let (a, b) = if masked {
            (a_cpus.to_string(), b_cpu.to_string())
        } else {
            (all.to_string(), all.to_string())
        };
        let text = format!(
            "# Generated by espalier scale --isolation.\n\
             [[pool]]\nname = \"a\"\nprocesses = 1\ncpus = \"{a}\"\n\
             [[pool]]\nname = \"b\"\nprocesses = 1\ncpus = \"{b}\"\n\
             [[site]]\nname = \"a\"\n{}[[site.app]]\npool = \"a\"\nhandler = \"cpu\"\n\
             [[site]]\nname = \"b\"\n{}root = \"www\"\n[[site.app]]\npool = \"b\"\n",
            t.site_lines(ports[0]),
            t.site_lines(ports[1])
        );
        let config = work.join("isolation.toml");
        std::fs::write(&config, text).map_err(|e| e.to_string())?;
        let _server = RunningServer::start(&config, work, admin)?;
        let mut heavy = load_options(
            opts,
            plan,
            &[format!("{}://127.0.0.1:{}/cpu?ms=50", t.scheme(), ports[0])],
            trust,
        )?;
        heavy.connections = 4 * all.len();
        heavy.requests = None;
        let mut light = load_options(
            opts,
            plan,
            &[format!("{}://127.0.0.1:{}/100.html", t.scheme(), ports[1])],
            trust,
        )?;
        light.connections = 2;
        light.threads = 1;
        light.rate = Some(rate);
        light.requests = None;
        let heavy_run = std::thread::spawn(move || bench::run(&heavy));
        let light_result = bench::run(&light)?;
        let heavy_result = heavy_run
            .join()
            .map_err(|_| "load thread panicked".to_string())??;
        eprintln!(
            "scale: isolation {}: pool A {:.0} requests/s of CPU work; pool B p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
            if masked { "with the mask   " } else { "without the mask" },
            heavy_result.rps(),
            light_result.latency().p50,
            light_result.latency().p99,
            light_result.latency().max
        );
        measured.push((heavy_result.rps(), light_result.latency()));
    }
    Ok(Isolation {
        pool_a_cpus_masked: a_cpus.to_string(),
        pool_b_cpus_masked: b_cpu.to_string(),
        pool_b_rate: rate,
        pool_a_rps_unmasked: measured[0].0,
        pool_a_rps_masked: measured[1].0,
        pool_b_unmasked: measured[0].1,
        pool_b_masked: measured[1].1,
    })
}
