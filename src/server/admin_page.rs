//! The admin page (IIS Manager's view of pools and worker processes): one HTML file with its
//! CSS and script, embedded in the binary — no build step, no CDN, no framework. It draws the
//! machine as its NUMA nodes, L3 domains, cores with their SMT siblings and NICs, each CPU's
//! load, the processes of every pool on the CPUs they may use, a table of their figures, ten
//! minutes of requests per pool, and buttons for the admin endpoint's actions.
//!
//! Owns: the page, the machine feed (`GET /machine`), and the same drawing of a placement plan
//! for `espalier serve --dry-run --html FILE`. Must not touch: the live figures (the
//! supervisor builds them, `supervisor::live`) or the actions (the endpoint routes them, with
//! the token, in [`super::admin`]).

use super::status::{Live, PoolState, PoolStatus, Role, Status, WorkerState, WorkerStatus};
use crate::config::Config;
use crate::placement::Plan;
use crate::topology::Topology;

/// The page, as served at `/`.
pub const PAGE: &[u8] = include_bytes!("admin_page.html");

/// Where a plan's data is put into the page.
const PLAN_MARK: &str = "<!--ESPALIER-PLAN-->";

/// The machine the page draws: the topology as `espalier topology --json` prints it.
pub fn machine_json(topology: &Topology) -> Vec<u8> {
    serde_json::to_vec(topology).unwrap_or_default()
}

/// The page drawing `plan` on `topology` instead of a running server: the same picture, with
/// the planned processes in place of live ones, read-only, in one self-contained file.
pub fn plan_html(topology: &Topology, config: &Config, plan: &Plan) -> String {
    let pools: Vec<crate::server::status::PoolStatus> = config
        .pools
        .iter()
        .map(|p| PoolStatus {
            name: p.name.clone(),
            state: PoolState::Running,
            cpu_limit: p.cpu_limit,
            memory_limit: p.memory_limit,
            pids_limit: p.pids_limit,
            workers: plan
                .workers
                .iter()
                .filter(|w| w.pool == p.name)
                .map(|w| WorkerStatus {
                    index: w.index,
                    role: if p.app.is_some() {
                        Role::App
                    } else {
                        Role::Worker
                    },
                    endpoint: None,
                    pid: None,
                    node: w.node,
                    cpus: w.cpus.as_slice().to_vec(),
                    state: WorkerState::Starting,
                    started_unix: None,
                    uptime_s: None,
                    requests: 0,
                    connection_panics: 0,
                    remote_forwards: 0,
                    resident_bytes: None,
                    recycles: 0,
                    restarts: 0,
                    last_exit: None,
                    draining: Vec::new(),
                    widened_to: Vec::new(),
                    affinity: format!("{:?}", w.affinity).to_lowercase(),
                    memory_policy: format!(
                        "{}:{}",
                        crate::placement::policy_name(w.memory_policy),
                        w.memory_nodes
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    connections: 0,
                    accepted: 0,
                    steered: 0,
                    queue: Default::default(),
                    ticket_keys: 0,
                    cache: Default::default(),
                    meters: Vec::new(),
                    caches: Vec::new(),
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    let live = Live {
        time_unix: 0.0,
        status: Status {
            pools_total: pools.len(),
            pools_matched: pools.len(),
            counts: crate::server::status::StateCounts::default(),
            page: 0,
            per_page: 0,
            pools,
            addresses: Vec::new(),
            dispatcher: None,
            upstreams: Vec::new(),
            certificates: Vec::new(),
            config: None,
            cluster: None,
        },
        active: Vec::new(),
        cpu_load: Vec::new(),
        history: Vec::new(),
    };
    let data = serde_json::json!({ "machine": topology, "live": live });
    // `</` cannot end the script early inside a JSON string written as `<\/`.
    let script = format!(
        "<script>window.ESPALIER_PLAN = {};</script>",
        data.to_string().replace("</", "<\\/")
    );
    String::from_utf8_lossy(PAGE).replacen(PLAN_MARK, &script, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    #[test]
    fn a_plan_page_carries_the_machine_and_every_planned_process() {
        let topology = fixture("dl980");
        let config = Config::parse(
            "[[pool]]\nname = \"garden\"\nprocesses = \"auto\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"garden\"\n",
            std::path::Path::new("/x/espalier.toml"),
            &topology,
        )
        .unwrap();
        let plan = crate::placement::plan(&topology, &config.pools, &[]).unwrap();
        let html = plan_html(&topology, &config, &plan);
        assert!(!html.contains(PLAN_MARK));
        let start = html.find("window.ESPALIER_PLAN = ").unwrap() + 23;
        let end = html[start..].find(";</script>").unwrap() + start;
        let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(data["machine"]["cpus"].as_array().unwrap().len(), 160);
        let workers = data["live"]["status"]["pools"][0]["workers"]
            .as_array()
            .unwrap();
        assert_eq!(workers.len(), 8, "one per node of the DL980");
    }
}
