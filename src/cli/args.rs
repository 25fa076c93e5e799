//! The command line's definitions (clap): every subcommand and flag, with its help text.
//!
//! Owns: names, defaults and help of flags. Must not touch: what a command does with them.

use crate::topology::{self, SysfsPaths, Topology};
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

    /// The machine as placement may use it: on the live machine, only the CPUs this process
    /// may run on (in a container or under `taskset`, some CPUs are not ours to place on),
    /// said in one line when that is fewer than the online CPUs.
    pub fn read_placeable(&self) -> Result<Topology, String> {
        let t = self.read()?;
        if self.sysfs.is_some() {
            return Ok(t);
        }
        let Ok(allowed) = crate::os::numa::thread_affinity(0) else {
            return Ok(t);
        };
        let online = t.online_cpus();
        if online.is_subset(&allowed) {
            return Ok(t);
        }
        let usable = online.intersection(&allowed);
        if usable.is_empty() {
            return Ok(t);
        }
        eprintln!("espalier: this process may run on CPUs {usable} of the {} online (its cpuset or affinity); pools are placed there", online.len());
        Ok(t.confined_to(&allowed))
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
        /// Only pools whose name contains this, or matches it with `*` (`shop-*`).
        #[arg(long)]
        pool: Option<String>,
        /// Only pools in this state: running, idle, suspended or stopped.
        #[arg(long)]
        state: Option<String>,
        /// The page to show (pools come 100 to a page by default once there are more).
        #[arg(long, default_value_t = 1)]
        page: usize,
        /// Pools per page (at most 1000).
        #[arg(long)]
        per_page: Option<usize>,
        /// Every matched pool on one page, however many.
        #[arg(long)]
        all: bool,
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
    /// Replace the running server by the espalier binary now on disk, without dropping a
    /// connection: a new master takes over the listening sockets, and the old one drains
    /// (also: SIGUSR2 to the master). A new binary that fails leaves the old one serving.
    Upgrade {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Read or change the running server's configuration through its configuration API
    /// (`/config` on the admin endpoint): only what changes is applied, and the files are
    /// rewritten to say so.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The fleet this server's config names (`[server.cluster]`, etcd).
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
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
    /// Internal: hands a pool's sockets to its application and runs it (`espalier serve`).
    #[command(hide = true, name = "app-exec")]
    AppExec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
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
    /// The admin endpoint's address, instead of the config's `[server] admin` (default
    /// 127.0.0.1:9180): for a second server on the machine.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// Print the placement plan and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
    /// With --dry-run: also write the admin page's drawing of the plan to this HTML file.
    #[arg(long, value_name = "FILE", requires = "dry_run")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub machine: MachineArgs,
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub action: Option<BenchAction>,
    /// URLs to load (http:// or https://). Connections are spread over them by --weights.
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
    /// How client threads do their connections' I/O: `auto` (io_uring where the kernel
    /// allows it, else epoll), `uring` or `epoll`. TLS connections always use epoll.
    #[arg(long, value_name = "PATH", default_value = "auto", value_parser = ["auto", "uring", "epoll"])]
    pub io: String,
    /// A new connection for every request.
    #[arg(long)]
    pub no_keepalive: bool,
    /// Requests in flight per connection (with --h2: concurrent streams).
    #[arg(long, visible_alias = "streams", value_name = "K", default_value_t = 1)]
    pub pipeline: usize,
    /// Speak HTTP/2: over https:// by ALPN, over http:// with prior knowledge (h2c).
    #[arg(long)]
    pub h2: bool,
    /// Speak HTTP/3 over QUIC (https:// targets, the server's UDP port of the same number).
    #[arg(long, conflicts_with = "h2")]
    pub h3: bool,
    /// Trust the CA certificates in this PEM file (repeatable) instead of the system's.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Vec<PathBuf>,
    /// Believe any server certificate (as `curl -k`), for self-signed test servers.
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// Offer only these TLS key exchange groups, in this order (`X25519MLKEM768`, `X25519`,
    /// `secp256r1`, `secp384r1`): whether a server takes the post-quantum one, and its cost.
    #[arg(long, value_name = "G,G,…", value_delimiter = ',')]
    pub tls_groups: Option<Vec<String>>,
    /// Make every TLS handshake a full one (no session resumption), to measure them.
    #[arg(long)]
    pub no_resumption: bool,
    /// Count every request the server left unanswered as an error, even one a browser
    /// would send again (a keep-alive connection closed while idle, an HTTP/2 GOAWAY).
    #[arg(long)]
    pub no_retry: bool,
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
    /// Begin the load at this time (UTC, `2026-11-22T21:50:00Z`, or Unix seconds), so runs
    /// on several client machines begin together; merge their `--json` files with
    /// `espalier bench merge`.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
}

/// Where the running server's admin endpoint is.
#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Read the admin address from this config's `[server] admin`.
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The admin address (default: the config's `[server] admin`, else 127.0.0.1:9180); with
    /// `-c`, the server there must be that file's (one started with `serve -c FILE --admin
    /// ADDR`).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,
    /// The admin token for actions (default: $ESPALIER_ADMIN_TOKEN, the config's
    /// admin_token, or the token file the server made on this machine).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum ClusterAction {
    /// Put FILE's pools, upstream groups and sites into the fleet's etcd (each a key of its
    /// own), checked as `check` checks FILE first; one that is there already is refused
    /// unless `--replace`.
    Import {
        file: PathBuf,
        /// The config whose `[server.cluster]` names the fleet.
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        #[command(flatten)]
        machine: MachineArgs,
        /// Replace parts the fleet has already.
        #[arg(long)]
        replace: bool,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum ConfigAction {
    /// Print a part as JSON: `/` (everything), `server`, `sites`, `sites/NAME`, `pools/NAME`,
    /// `upstreams/NAME`.
    Get {
        path: String,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Create or replace a part (`/` replaces everything) with the JSON — or TOML — object in
    /// FILE (`-`: standard input).
    Set {
        path: String,
        file: PathBuf,
        /// Refuse unless the configuration is still this version (what `get` printed to
        /// standard error): another writer's change is not overwritten.
        #[arg(long, value_name = "VERSION")]
        if_match: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Create a part, refused when it is there already.
    Add {
        path: String,
        file: PathBuf,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Change a part by the JSON merge patch in FILE (RFC 7396: `null` removes a key).
    Patch {
        path: String,
        file: PathBuf,
        #[arg(long, value_name = "VERSION")]
        if_match: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Remove a pool, site or upstream group.
    Rm {
        path: String,
        #[arg(long, value_name = "VERSION")]
        if_match: Option<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
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
    /// Exactly this many measured responses per run, instead of --duration (the isolation
    /// experiment keeps --duration).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Warm-up per run.
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Load generator connections.
    #[arg(short, long, value_name = "N")]
    pub connections: Option<usize>,
    /// Also run the isolation experiment (a saturated pool beside a masked one).
    #[arg(long)]
    pub isolation: bool,
    /// Serve and load over TLS (HTTPS), with a certificate made for the run.
    #[arg(long, conflicts_with = "target")]
    pub tls: bool,
    /// Load in HTTP/2 (over TLS with --tls or https targets, else h2c).
    #[arg(long)]
    pub h2: bool,
    /// With https targets: trust the CA certificates in this PEM file (repeatable).
    #[arg(
        long,
        value_name = "FILE",
        requires = "target",
        conflicts_with = "insecure"
    )]
    pub cacert: Vec<PathBuf>,
    /// With https targets: believe any server certificate.
    #[arg(short = 'k', long, requires = "target")]
    pub insecure: bool,
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
