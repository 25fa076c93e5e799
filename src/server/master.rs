//! The master (`espalier serve`): the WAS + HTTP.sys of espalier. It opens every listener
//! itself ([`super::listeners`]), builds one worker spec per planned slot
//! ([`super::spawn`]) with its hand-off sockets on shared addresses ([`super::handoffs`]),
//! and hands them to the supervisor, which starts the workers, keeps them
//! alive and stops everything gracefully on SIGTERM/SIGINT.
//!
//! Owns: the order of start-up. Must not touch: requests — the master never serves one.

use crate::config::Config;
use crate::placement::Plan;
use crate::topology::Topology;

/// Runs the server until it is stopped. Returns the exit code.
pub fn run(config: &Config, topology: &Topology, plan: &Plan) -> Result<i32, String> {
    let file = config
        .source
        .as_ref()
        .map_or("the command line".to_string(), |p| p.display().to_string());
    // Every access log can be written, or `serve` says which cannot and why, before anything
    // starts (workers open their own descriptors of them).
    for site in &config.sites {
        if let Some(spec) = &site.access_log {
            crate::http::access_log::open(&spec.path).map_err(|e| {
                format!(
                    "{file}: site `{}`: cannot open access log {}: {e}; fix access_log.path or the folder's permissions",
                    site.name,
                    spec.path.display()
                )
            })?;
        }
    }
    let groups = super::listeners::open_listeners(config, topology, plan, &file)?;
    let mut handoffs = super::handoffs::Handoffs::default();
    handoffs.ensure(&groups, &config.pools, plan)?;
    let specs = super::spawn::worker_specs(config, plan, &groups, &handoffs, topology);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(super::supervisor::run(
        config, topology, groups, handoffs, specs,
    ))
}
