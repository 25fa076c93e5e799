//! `espalier serve`: the config it runs (a file, or the built-in default) and the plan, printed
//! with `--dry-run` or handed to the master.
//!
//! Owns: the default configuration's arguments. Must not touch: serving (see
//! [`crate::server`]).

use super::ServeArgs;
use crate::config::Config;
use crate::placement;
use crate::topology::Topology;
use std::path::PathBuf;

/// The config `serve` runs: the file, or the built-in default.
pub fn serve_config(args: &ServeArgs, t: &Topology) -> Result<Config, String> {
    let mut config = file_or_default(args, t)?;
    if let Some(admin) = args.admin {
        config.server.admin = admin;
    }
    Ok(config)
}

fn file_or_default(args: &ServeArgs, t: &Topology) -> Result<Config, String> {
    match &args.config {
        Some(path) => Config::load_kept(path, t).map_err(|e| e.to_string()),
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

pub(super) fn serve(args: ServeArgs) -> Result<i32, String> {
    let t = args.machine.read_placeable()?;
    let config = serve_config(&args, &t)?;
    let config = crate::server::dispatcher::with_dispatcher(config, crate::os::process::is_root())
        .map_err(|e| match &args.config {
            Some(file) => format!("{}: {e}", file.display()),
            None => e,
        })?;
    let mut config = config;
    if !args.dry_run {
        crate::server::upstream_nodes::find_local_nodes(&mut config, &t);
    }
    let plan = placement::plan(&t, &config.pools, &[]).map_err(|e| e.to_string())?;
    if args.dry_run {
        if args.json {
            // The plan's own fields, and the steering beside them.
            let mut json = serde_json::to_value(&plan).map_err(|e| e.to_string())?;
            let steering = crate::server::steering_plan::steering(&config, &t, &plan);
            if let Some(fields) = json.as_object_mut() {
                let steering = serde_json::to_value(steering).map_err(|e| e.to_string())?;
                fields.insert("steering".into(), steering);
            }
            println!(
                "{}",
                serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?
            );
        } else {
            print!("{}", placement::render(&plan));
            print!(
                "{}",
                crate::server::steering_plan::render(&config, &t, &plan)
            );
        }
        if let Some(path) = &args.html {
            let page = crate::server::admin_page::plan_html(&t, &config, &plan);
            std::fs::write(path, page)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("espalier: the plan's drawing is in {}", path.display());
        }
        return Ok(0);
    }
    let io = crate::server::io_path(&config.server).map_err(|e| match &config.source {
        Some(file) => format!("{}: {e}", file.display()),
        None => e,
    })?;
    crate::server::log("master", format_args!("connections' I/O: {}", io.why));
    crate::server::master::run(config, &t, &plan)
}
