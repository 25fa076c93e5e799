//! The command line: subcommands, their arguments, and how results and errors are printed.
//!
//! Owns: argument parsing (clap) and the contract that a user-caused error is one line on
//! stderr and a non-zero exit, never a panic. Must not touch: policy — every subcommand is a
//! few lines over the library modules.

use crate::config::Config;
use crate::placement;
use crate::topology::{self, render, SysfsPaths, Topology};
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "espalier",
    version,
    about = "A NUMA-aware web server and application-pool host for Linux"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Where to read the machine from: the live system, or a fixture tree.
#[derive(Args, Debug, Clone, Default)]
pub struct MachineArgs {
    /// Read the topology from this sysfs root instead of /sys (a fixture or another machine's copy).
    #[arg(long, value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Read interrupts and IRQ affinity from this procfs root (default: /proc, or a `proc`
    /// folder beside --sysfs).
    #[arg(long, value_name = "DIR")]
    pub procfs: Option<PathBuf>,
}

impl MachineArgs {
    /// The sysfs and procfs roots these arguments name.
    pub fn paths(&self) -> SysfsPaths {
        match &self.sysfs {
            None => SysfsPaths {
                sysfs: "/sys".into(),
                procfs: Some(self.procfs.clone().unwrap_or_else(|| "/proc".into())),
            },
            Some(s) => SysfsPaths::at(s.clone(), self.procfs.clone()),
        }
    }

    /// (sysfs, procfs) for commands that read more than the topology; a fixture without a
    /// `proc` folder reads the live /proc.
    pub fn roots(&self) -> (PathBuf, PathBuf) {
        let p = self.paths();
        (p.sysfs, p.procfs.unwrap_or_else(|| "/proc".into()))
    }

    pub fn read(&self) -> Result<Topology, String> {
        let paths = self.paths();
        topology::read(&paths).map_err(|e| e.to_string())
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show NUMA nodes, CPUs, L3 domains and NICs (the case study's Get-Numa / Get-Device).
    Topology {
        #[command(flatten)]
        machine: MachineArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate a config file without running it (like `nginx -t`).
    Check {
        /// The config file.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        machine: MachineArgs,
    },
    /// Run the server: a master and NUMA-placed worker processes.
    Serve(ServeArgs),
    /// Load an HTTP server and measure it (WCAT / weighttp / wrk for espalier).
    Bench(Box<BenchArgs>),
    /// The case study's scaling experiment on this machine: table, chart and report.
    Scale(ScaleArgs),
    /// Plan or apply NIC queue placement: interrupts, XPS and RPS on the NIC's own node.
    Nic {
        #[command(subcommand)]
        action: NicAction,
    },
    /// Check the machine's settings against what serving needs, and say how to fix them.
    Doctor {
        /// Also check against this config (backlogs, connections, hard affinity, pool CPUs).
        #[arg(short, long, value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(flatten)]
        machine: MachineArgs,
        #[arg(long)]
        json: bool,
    },
    /// Show the running server's pools and workers (from its admin endpoint).
    Status {
        #[command(flatten)]
        admin: AdminArgs,
        #[arg(long)]
        json: bool,
    },
    /// Stop or start a pool of the running server.
    Pool {
        #[command(subcommand)]
        action: PoolAction,
    },
    /// Re-read the running server's config file: unchanged pools keep running, changed ones are
    /// recycled overlapped; a config with errors is refused (also: SIGHUP to the master).
    Reload {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Recycle a pool's workers (overlapped unless the pool says otherwise).
    Recycle {
        /// The pool.
        pool: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Internal: a worker process, started by `espalier serve`.
    #[command(hide = true)]
    Worker,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// The config file; without one, serve ./www (or a welcome page) on 127.0.0.1:8080 with
    /// one worker per NUMA node.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Without a config file: the address to listen on.
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    pub listen: Option<SocketAddr>,
    /// Without a config file: the folder to serve.
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub root: Option<PathBuf>,
    /// Print the placement plan and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    #[command(flatten)]
    pub machine: MachineArgs,
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub action: Option<BenchAction>,
    /// URLs to load (http:// only). Connections are spread over them by --weights.
    #[arg(required = true, value_name = "URL")]
    pub urls: Vec<String>,
    /// Exactly this many measured requests (instead of --duration).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// How long to measure.
    #[arg(short, long, value_name = "DURATION", default_value = "10s")]
    pub duration: String,
    /// Open connections in all.
    #[arg(short, long, value_name = "N", default_value_t = 50)]
    pub connections: usize,
    /// Client threads, each with its own event loop.
    #[arg(short, long, value_name = "N", default_value_t = 1)]
    pub threads: usize,
    /// Pin client threads to these CPUs (cpu-list syntax), one thread per CPU in turn.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// A new connection for every request.
    #[arg(long)]
    pub no_keepalive: bool,
    /// Requests in flight per connection.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub pipeline: usize,
    /// Relative share of connections per URL, in URL order (`3,1`).
    #[arg(long, value_name = "W,W,…")]
    pub weights: Option<String>,
    /// Step the connection count FROM:TO:STEP, one result row per step.
    #[arg(long, value_name = "FROM:TO:STEP")]
    pub sweep: Option<String>,
    /// Open loop: this many requests per second in all, latency corrected for coordinated omission.
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Load before the measured window, not counted.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub warmup: String,
    /// Load after the measured window, not counted.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub cooldown: String,
    /// A request without a response for this long is a timeout error.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub timeout: String,
    #[arg(short, long, default_value = "GET")]
    pub method: String,
    /// A request header (`Name: value`); repeatable.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Request body.
    #[arg(long, value_name = "TEXT")]
    pub body: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Where the running server's admin endpoint is.
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Read the admin address from this config's `[server] admin`.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The admin address (default 127.0.0.1:9180).
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    pub admin: Option<SocketAddr>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum PoolAction {
    /// Stop a pool: its workers drain and its sites answer 503 (or reset, with load_balancer = "tcp").
    Stop {
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Start a stopped pool (also after rapid-fail protection stopped it).
    Start {
        name: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum NicAction {
    /// Print the plan (nothing is changed).
    Plan(NicArgs),
    /// Write the plan to /proc/irq and the queues' rps_cpus/xps_cpus (needs root); prints each
    /// change and the command that undoes it.
    Apply {
        #[command(flatten)]
        nic: NicArgs,
        /// Print the changes without making them.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Args, Debug, Clone)]
pub struct NicArgs {
    /// Interfaces to plan (default: every physical NIC).
    #[arg(value_name = "IFACE")]
    pub interfaces: Vec<String>,
    /// Keep interrupts off the CPUs this config's pools reserve with `cpus`.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub machine: MachineArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ScaleArgs {
    /// Static page only, short runs: finishes in under two minutes on a 2-core machine.
    #[arg(long)]
    pub quick: bool,
    /// Folder for results.json, report.md, chart.svg and report.html.
    #[arg(short, long, value_name = "DIR", default_value = "scale-report")]
    pub out: PathBuf,
    /// Workloads, in order: static, dynamic, cpu.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub workloads: Option<Vec<String>>,
    /// Configurations: hosting, garden, default.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub configs: Option<Vec<String>>,
    /// CPUs for the load generator (default: the machine's last unit).
    #[arg(long, value_name = "LIST")]
    pub load_cpus: Option<String>,
    /// Use at most this many units for the server.
    #[arg(long, value_name = "N")]
    pub max_units: Option<usize>,
    /// Measured time per run.
    #[arg(short, long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Warm-up per run.
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Load generator connections.
    #[arg(short, long, value_name = "N")]
    pub connections: Option<usize>,
    /// Also run the isolation experiment (a saturated pool beside a masked one).
    #[arg(long)]
    pub isolation: bool,
    /// Measure a server started by hand elsewhere (base URL; repeat for hosting's sites)
    /// instead of starting one here; the results join the report in --out.
    #[arg(long, value_name = "URL", requires_all = ["configuration", "units", "server_cpus"])]
    pub target: Vec<String>,
    /// With --target: the configuration that server runs (hosting, garden, default).
    #[arg(long, value_name = "NAME")]
    pub configuration: Option<String>,
    /// With --target: the step, in units the server was given.
    #[arg(long, value_name = "N")]
    pub units: Option<usize>,
    /// With --target: how many CPUs the server had at this step.
    #[arg(long, value_name = "N")]
    pub server_cpus: Option<usize>,
    /// With --target: what a unit is (node, l3, core).
    #[arg(long, value_name = "KIND", default_value = "node")]
    pub unit_kind: String,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BenchAction {
    /// Merge results (JSON from --json) of runs started together on several machines.
    Merge {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// Runs the command line; returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("espalier: {message}");
            1
        }
    }
}

fn run(cli: Cli) -> Result<i32, String> {
    match cli.command {
        Command::Topology { machine, json } => {
            let t = machine.read()?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&t).map_err(|e| e.to_string())?
                );
            } else {
                print!("{}", render::table(&t));
            }
            Ok(0)
        }
        Command::Check { config, machine } => {
            let t = machine.read()?;
            let c = Config::load(&config, &t).map_err(|e| e.to_string())?;
            let plan = placement::plan(&t, &c.pools, &[])
                .map_err(|e| format!("{}: {e}", config.display()))?;
            println!(
                "{}: ok — {} pool(s), {} site(s), {} worker(s) planned",
                config.display(),
                c.pools.len(),
                c.sites.len(),
                plan.workers.len()
            );
            Ok(0)
        }
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench(*args),
        Command::Scale(args) => scale(args),
        Command::Nic { action } => nic(action),
        Command::Status { admin, json } => status(&admin, json),
        Command::Pool { action } => match action {
            PoolAction::Stop { name, admin } => admin_post(&admin, &format!("/pools/{name}/stop")),
            PoolAction::Start { name, admin } => {
                admin_post(&admin, &format!("/pools/{name}/start"))
            }
        },
        Command::Recycle { pool, admin } => admin_post(&admin, &format!("/pools/{pool}/recycle")),
        Command::Reload { admin } => admin_post(&admin, "/reload"),
        Command::Doctor {
            config,
            machine,
            json,
        } => doctor(config, machine, json),
        Command::Worker => Ok(crate::server::worker::main()),
    }
}

/// The config `serve` runs: the file, or the built-in default.
pub fn serve_config(args: &ServeArgs, t: &Topology) -> Result<Config, String> {
    match &args.config {
        Some(path) => Config::load(path, t).map_err(|e| e.to_string()),
        None => {
            let listen = args
                .listen
                .unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid address"));
            let root = match &args.root {
                Some(r) if !r.is_dir() => {
                    return Err(format!(
                        "--root {}: no such folder; give a folder to serve",
                        r.display()
                    ))
                }
                Some(r) => Some(r.clone()),
                None => Some(PathBuf::from("www")).filter(|p| p.is_dir()),
            };
            Ok(Config::builtin(listen, root))
        }
    }
}

fn serve(args: ServeArgs) -> Result<i32, String> {
    let t = args.machine.read()?;
    let config = serve_config(&args, &t)?;
    let plan = placement::plan(&t, &config.pools, &[]).map_err(|e| e.to_string())?;
    if args.dry_run {
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&plan).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", placement::render(&plan));
        }
        return Ok(0);
    }
    crate::server::master::run(&config, &t, &plan)
}

fn duration_arg(flag: &str, text: &str) -> Result<std::time::Duration, String> {
    crate::units::parse_duration(text).map_err(|e| format!("{flag}: {e}"))
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
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate must be a number of requests per second above 0".into());
        }
        if a.pipeline > 1 {
            return Err(
                "--rate sends one request at a time per connection; drop --pipeline".into(),
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
    Ok(o)
}

fn bench(a: BenchArgs) -> Result<i32, String> {
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
                Some(t) => t.merge(&r),
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
    match &a.sweep {
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
        Some(sweep) => {
            let steps = crate::bench::parse_sweep(sweep)?;
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

fn scale(a: ScaleArgs) -> Result<i32, String> {
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
    if let Some(c) = a.connections {
        o.connections = c.max(1);
    }
    o.isolation = a.isolation;
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

fn nic(action: NicAction) -> Result<i32, String> {
    let (args, apply, dry_run) = match &action {
        NicAction::Plan(a) => (a, false, true),
        NicAction::Apply { nic, dry_run } => (nic, true, *dry_run),
    };
    let t = args.machine.read()?;
    let reserved = match &args.config {
        Some(path) => {
            let c = Config::load(path, &t).map_err(|e| e.to_string())?;
            c.pools
                .iter()
                .filter_map(|p| p.cpus.clone())
                .fold(crate::cpuset::CpuSet::new(), |a, m| a.union(&m))
        }
        None => crate::cpuset::CpuSet::new(),
    };
    let plans = crate::nic::plan(&t, &args.interfaces, &reserved)?;
    let (sysfs, procfs) = args.machine.roots();
    let irqbalance = crate::nic::irqbalance_running(&procfs);
    if irqbalance {
        eprintln!("espalier: warning: irqbalance is running and will move these interrupts again; stop it (systemctl disable --now irqbalance) before applying");
    }
    if !apply {
        if args.json {
            let v = serde_json::json!({ "nics": plans, "irqbalance_running": irqbalance });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", crate::nic::render(&plans));
        }
        return Ok(0);
    }
    let changes = crate::nic::changes(&plans, &sysfs, &procfs);
    let applied = crate::nic::apply(&changes, dry_run);
    let failed = applied.iter().filter(|a| a.error.is_some()).count();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "dry_run": dry_run, "changes": applied })
            )
            .map_err(|e| e.to_string())?
        );
    } else {
        for a in &applied {
            match &a.error {
                None => println!(
                    "{}{}: {} -> {}    # undo: {}",
                    if dry_run { "would set " } else { "" },
                    a.path.display(),
                    a.old,
                    a.new,
                    a.undo
                ),
                Some(e) => println!("FAILED {}: {e}", a.path.display()),
            }
        }
        if applied.is_empty() {
            println!("nothing to change");
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {} change(s) failed (see FAILED above; writing /proc/irq and queue masks needs root)", applied.len()));
    }
    Ok(0)
}

fn doctor(config: Option<PathBuf>, machine: MachineArgs, json: bool) -> Result<i32, String> {
    let t = machine.read()?;
    let c = config
        .as_ref()
        .map(|p| Config::load(p, &t).map_err(|e| e.to_string()))
        .transpose()?;
    let (sysfs, procfs) = machine.roots();
    let inputs = crate::doctor::read_inputs(&sysfs, &procfs);
    let findings = crate::doctor::check(&inputs, &t, c.as_ref());
    let warn = findings
        .iter()
        .any(|f| f.status == crate::doctor::Status::Warn);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "ok": !warn, "findings": findings }))
                .map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", crate::doctor::render(&findings));
    }
    Ok(if warn { 1 } else { 0 })
}

impl AdminArgs {
    fn address(&self) -> Result<SocketAddr, String> {
        if let Some(a) = self.admin {
            return Ok(a);
        }
        match &self.config {
            Some(path) => {
                let t = MachineArgs::default().read()?;
                Ok(Config::load(path, &t)
                    .map_err(|e| e.to_string())?
                    .server
                    .admin)
            }
            None => Ok(crate::config::ServerSettings::default().admin),
        }
    }
}

/// One request to the admin endpoint: (status, body).
fn admin_request(args: &AdminArgs, method: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let addr = args.address()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(3))
        .map_err(|e| format!("cannot reach espalier's admin endpoint at {addr}: {e} (is espalier serve running? give -c FILE or --admin ADDR)"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .map_err(|e| format!("{addr}: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr} did not answer HTTP"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

fn admin_post(args: &AdminArgs, path: &str) -> Result<i32, String> {
    let (status, body) = admin_request(args, "POST", path)?;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let message = v["message"].as_str().unwrap_or(body.trim());
    if status == 200 {
        println!("{message}");
        Ok(0)
    } else {
        Err(message.to_string())
    }
}

fn status(args: &AdminArgs, json: bool) -> Result<i32, String> {
    let (code, body) = admin_request(args, "GET", "/status")?;
    if code != 200 {
        return Err(format!(
            "the admin endpoint answered {code}: {}",
            body.trim()
        ));
    }
    if json {
        print!("{body}");
        return Ok(0);
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    println!(
        "{:<14} {:>5} {:>8} {:>5} {:<14} {:<10} {:>10} {:>10} {:>9} {:>8}  LAST EXIT",
        "POOL", "INDEX", "PID", "NODE", "CPUS", "STATE", "UPTIME", "REQUESTS", "RSS", "RECYCLED"
    );
    for p in v["pools"].as_array().into_iter().flatten() {
        if let Some(why) = p["stopped_because"].as_str() {
            println!("{} is STOPPED ({why})", p["name"].as_str().unwrap_or(""));
        }
        for w in p["workers"].as_array().into_iter().flatten() {
            let cpus: crate::cpuset::CpuSet = w["cpus"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_u64())
                .map(|c| c as u32)
                .collect();
            let opt = |x: &serde_json::Value| {
                if x.is_null() {
                    "-".to_string()
                } else {
                    x.to_string()
                }
            };
            println!(
                "{:<14} {:>5} {:>8} {:>5} {:<14} {:<10} {:>10} {:>10} {:>9} {:>8}  {}",
                p["name"].as_str().unwrap_or(""),
                w["index"].to_string(),
                opt(&w["pid"]),
                opt(&w["node"]),
                cpus.to_string(),
                w["state"].as_str().unwrap_or(""),
                w["uptime_s"]
                    .as_f64()
                    .map_or("-".into(), |s| crate::units::format_duration(
                        std::time::Duration::from_secs(s as u64)
                    )),
                w["requests"].to_string(),
                w["resident_bytes"]
                    .as_u64()
                    .map_or("-".into(), crate::units::format_bytes),
                w["recycles"].to_string(),
                w["last_exit"].as_str().unwrap_or("-")
            );
        }
    }
    Ok(0)
}
