//! The command line: subcommands, their arguments, and how results and errors are printed.
//!
//! Owns: the contract that a user-caused error is one line on stderr and a non-zero exit,
//! never a panic. Must not touch: policy — every subcommand is a few lines over the library
//! modules. Laid out as ripgrep lays out its flags: the clap definitions in [`args`], then one
//! file per group of subcommands:
//! - `machine`: `topology`, `check`, `nic`, `doctor` — the machine and the config, inspected;
//! - `serve`: `serve` (and `--dry-run`);
//! - `bench`: `bench` and `scale` — measuring;
//! - `admin`: `status`, `pool`, `recycle`, `reload`, `upgrade` — the running server,
//!   through its admin endpoint;
//! - `config`: `config get|set|add|patch|rm` — its configuration API;
//! - `cluster`: `cluster import` — a fleet's shared configuration, in etcd.

mod admin;
pub mod args;
mod bench;
mod cluster;
mod config;
mod machine;
mod serve;

pub use args::*;
pub use bench::bench_options;
use clap::Parser;
pub use serve::serve_config;

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
        Command::Topology { machine, json } => machine::topology(&machine, json),
        Command::Check { config, machine } => machine::check(&config, &machine),
        Command::Serve(args) => serve::serve(args),
        Command::Bench(args) => bench::bench(*args),
        Command::Scale(args) => bench::scale(args),
        Command::Nic { action } => machine::nic(action),
        Command::Status {
            admin,
            json,
            pool,
            state,
            page,
            per_page,
            all,
        } => {
            let wanted = admin::Wanted {
                pool,
                state,
                page,
                per_page: if all {
                    None
                } else {
                    Some(per_page.unwrap_or(100))
                },
            };
            admin::status(&admin, json, &wanted)
        }
        Command::Pool { action } => match action {
            PoolAction::Stop { name, admin } => admin::post(&admin, &format!("/pools/{name}/stop")),
            PoolAction::Start { name, admin } => {
                admin::post(&admin, &format!("/pools/{name}/start"))
            }
        },
        Command::Recycle { pool, admin } => admin::post(&admin, &format!("/pools/{pool}/recycle")),
        Command::Reload { admin } => admin::post(&admin, "/reload"),
        Command::Config { action } => config::run(action),
        Command::Cluster { action } => cluster::run(action),
        Command::Upgrade { admin } => admin::post(&admin, "/upgrade"),
        Command::Doctor {
            config,
            machine,
            json,
        } => machine::doctor(config, machine, json),
        Command::Worker => Ok(crate::server::worker::main()),
        Command::AppExec { argv } => Ok(crate::server::app_exec::main(argv)),
    }
}
