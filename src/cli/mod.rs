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
    pub fn read(&self) -> Result<Topology, String> {
        let paths = match &self.sysfs {
            None => match &self.procfs {
                None => SysfsPaths::live(),
                Some(p) => SysfsPaths {
                    sysfs: "/sys".into(),
                    procfs: Some(p.clone()),
                },
            },
            Some(s) => SysfsPaths::at(s.clone(), self.procfs.clone()),
        };
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
