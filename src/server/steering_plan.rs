//! What `serve --dry-run` prints of the steering: per address, per node of the machine, the
//! CPUs that receive its connections and the workers whose threads take them — over TCP and,
//! where HTTP/3 answers, over QUIC, whose new connections go by the same node (see
//! [`super::quic_steering`]; a connection's later datagrams follow its ID).
//!
//! Owns: that table, and its rows as `--dry-run --json` gives them ([`steering`]). It is drawn from what the master attaches — the same socket owners
//! ([`super::listeners::group_owners`]) and CPU → socket table ([`super::steering`]) — so a
//! plan read here is the plan served. Must not touch: sockets (none is opened: the groups are
//! only the config's wanted ones).

use super::listeners::{group_owners, wanted_groups, SocketOwners};
use super::steering::{steering_table, SocketRun};
use crate::config::{Config, Steering};
use crate::cpuset::CpuSet;
use crate::placement::Plan;
use crate::topology::Topology;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The plan's workers (indices) whose sockets the connections received on `node_cpus` go to.
fn served_by(
    table: &[(u32, SocketRun)],
    owners: &SocketOwners,
    node_cpus: &[u32],
    by_cpu: bool,
) -> Vec<usize> {
    let mut served: Vec<usize> = match by_cpu {
        false => owners.iter().map(|o| o.worker).collect(),
        true => (table.iter())
            .filter(|(cpu, _)| node_cpus.contains(cpu))
            .flat_map(|(_, run)| &owners[run.start as usize..(run.start + run.count) as usize])
            .map(|o| o.worker)
            .collect(),
    };
    served.sort_unstable();
    served.dedup();
    served
}

/// The steering of every address the config serves, as `--dry-run --json` gives it.
#[derive(Debug, Serialize)]
pub struct SteeringPlan {
    /// `cpu` (by the receiving CPU's node) or `hash` (the kernel's).
    pub by: &'static str,
    pub rows: Vec<SteeringRow>,
}

/// One address and node: where the connections its CPUs receive go.
#[derive(Debug, Serialize)]
pub struct SteeringRow {
    /// `https://0.0.0.0:8443`.
    pub address: String,
    /// `tcp`, and `quic` where HTTP/3 answers.
    pub over: Vec<&'static str>,
    pub node: Option<u32>,
    pub received_on: CpuSet,
    pub served_by: Vec<ServedBy>,
    /// No worker has a thread on this node: its connections go to any (the steering's
    /// fallback).
    pub off_node: bool,
}

/// A worker that takes a row's connections.
#[derive(Debug, Serialize)]
pub struct ServedBy {
    pub pool: String,
    pub index: u32,
    pub cpus: CpuSet,
}

/// The steering, one row per address and node; none when no address is served. Drawn from
/// the same socket owners and CPU table the master attaches.
pub fn steering(config: &Config, topology: &Topology, plan: &Plan) -> SteeringPlan {
    let by_cpu = config.server.steering == Steering::Cpu;
    let mut rows = Vec::new();
    let online = topology.online_cpus();
    let mut by_node: BTreeMap<Option<u32>, Vec<u32>> = BTreeMap::new();
    for cpu in online.iter() {
        by_node
            .entry(topology.node_of_cpu(cpu))
            .or_default()
            .push(cpu);
    }
    for g in &wanted_groups(config) {
        let owners = group_owners(&g.pools, config, topology, plan);
        let cpus: Vec<u32> = owners.iter().map(|o| o.cpu).collect();
        let table = steering_table(&cpus, &online, |c| topology.node_of_cpu(c));
        let scheme = if g.routes.tls { "https" } else { "http" };
        let over = match g.answers_quic(config) {
            true => vec!["tcp", "quic"],
            false => vec!["tcp"],
        };
        for (node, node_cpus) in &by_node {
            let served = served_by(&table, &owners, node_cpus, by_cpu);
            let on_node = |&w: &usize| plan.workers[w].cpus.iter().any(|c| node_cpus.contains(&c));
            rows.push(SteeringRow {
                address: format!("{scheme}://{}", g.addr),
                over: over.clone(),
                node: *node,
                received_on: CpuSet::from_ids(node_cpus.iter().copied()),
                off_node: by_cpu && !served.is_empty() && !served.iter().any(on_node),
                served_by: (served.iter())
                    .map(|&w| ServedBy {
                        pool: plan.workers[w].pool.clone(),
                        index: plan.workers[w].index,
                        cpus: plan.workers[w].cpus.clone(),
                    })
                    .collect(),
            });
        }
    }
    let by = if by_cpu { "cpu" } else { "hash" };
    SteeringPlan { by, rows }
}

/// `pool/index (CPUs)` of each worker of a row; where none is on the node, said so.
fn names_of(row: &SteeringRow) -> String {
    let names: Vec<String> = (row.served_by.iter())
        .map(|w| format!("{}/{} ({})", w.pool, w.index, w.cpus))
        .collect();
    match (names.is_empty(), row.off_node) {
        (true, _) => "-".to_string(),
        (false, true) => format!("{} (no thread on this node: any)", names.join(", ")),
        (false, false) => names.join(", "),
    }
}

/// The table `serve --dry-run` prints, one row per address and node; empty when no address is
/// served.
pub fn render(config: &Config, topology: &Topology, plan: &Plan) -> String {
    let steering = steering(config, topology, plan);
    if steering.rows.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let how = match steering.by {
        "cpu" => "a connection goes to a thread of the node of the CPU that received it",
        _ => "by the kernel's hash (steering = \"hash\"): any thread",
    };
    let _ = writeln!(out, "\nSTEERING: {how}");
    let _ = writeln!(
        out,
        "{:<28} {:<10} {:>5} {:<20} SERVED BY",
        "ADDRESS", "OVER", "NODE", "RECEIVED ON"
    );
    let mut last_address = "";
    for row in &steering.rows {
        let first = row.address != last_address;
        last_address = &row.address;
        let _ = writeln!(
            out,
            "{:<28} {:<10} {:>5} {:<20} {}",
            if first { row.address.as_str() } else { "" },
            if first {
                row.over.join(", ")
            } else {
                String::new()
            },
            row.node.map_or("-".into(), |n| n.to_string()),
            row.received_on.to_string(),
            names_of(row)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    fn render_for(text: &str) -> String {
        let (config, t) = config_for(text);
        let plan = crate::placement::plan(&t, &config.pools, &[]).unwrap();
        render(&config, &t, &plan)
    }

    fn steering_for(text: &str) -> (SteeringPlan, Plan) {
        let (config, t) = config_for(text);
        let plan = crate::placement::plan(&t, &config.pools, &[]).unwrap();
        (steering(&config, &t, &plan), plan)
    }

    fn config_for(text: &str) -> (Config, Topology) {
        let t = fixture("dl980");
        // check reads the site's certificate (a self-signed one) and root, beside the file.
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("c.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).unwrap();
        std::fs::create_dir(dir.path().join("www")).unwrap();
        let file = dir.path().join("d.toml");
        (Config::parse(text, &file, &t).unwrap(), t)
    }

    const SITE: &str = "[[pool]]\nname = \"web\"\nprocesses = \"auto\"\n[[site]]\nbindings = [\"https://0.0.0.0:8443\"]\ntls = { cert = \"c.pem\", key = \"k.pem\" }\nroot = \"www\"\n[[site.app]]\npool = \"web\"\nhandler = \"static\"\n";

    #[test]
    fn each_node_is_served_by_the_worker_placed_on_it() {
        let text = render_for(&format!("[server]\nhttp3 = true\n{SITE}"));
        let rows: Vec<&str> = text.lines().filter(|l| l.contains("web/")).collect();
        let nodes = fixture("dl980").nodes.len();
        assert_eq!(rows.len(), nodes, "{text}");
        for row in &rows {
            // One worker per node, the one placed on it: its CPUs are the node's.
            let words: Vec<&str> = row.split_whitespace().collect();
            let n = words.len();
            assert_eq!(words[n - 1], format!("({})", words[n - 3]), "{row}");
            assert!(!row.contains(", web/"), "one worker per node: {row}");
        }
        assert!(rows[0].contains("https://0.0.0.0:8443") && rows[0].contains("tcp, quic"));
    }

    #[test]
    fn the_json_rows_name_each_nodes_worker_and_its_cpus() {
        let (steering, plan) = steering_for(&format!("[server]\nhttp3 = true\n{SITE}"));
        assert_eq!(steering.by, "cpu");
        assert_eq!(steering.rows.len(), fixture("dl980").nodes.len());
        for row in &steering.rows {
            assert_eq!(row.address, "https://0.0.0.0:8443");
            assert_eq!(row.over, ["tcp", "quic"]);
            assert!(!row.off_node);
            // The one worker placed on the node, with the node's CPUs.
            let [served] = &row.served_by[..] else {
                panic!("one worker per node: {row:?}")
            };
            let placed = &plan.workers[served.index as usize];
            assert_eq!(placed.node, row.node);
            assert_eq!((&served.pool[..], &served.cpus), ("web", &row.received_on));
        }
        let json = serde_json::to_value(&steering).unwrap();
        assert_eq!(json["rows"][0]["over"], serde_json::json!(["tcp", "quic"]));
        let (hashed, plan) = steering_for(&format!("[server]\nsteering = \"hash\"\n{SITE}"));
        assert_eq!(hashed.by, "hash");
        assert!(hashed
            .rows
            .iter()
            .all(|r| r.served_by.len() == plan.workers.len()));
    }

    #[test]
    fn by_the_kernels_hash_every_node_reaches_every_worker() {
        let text = render_for(&format!("[server]\nsteering = \"hash\"\n{SITE}"));
        let rows: Vec<&str> = text.lines().filter(|l| l.contains("web/")).collect();
        assert!(
            rows[0].contains("tcp ") && !rows[0].contains("quic"),
            "{text}"
        );
        assert!(
            rows.iter()
                .all(|r| r.contains("web/0 (") && r.contains("web/7 (")),
            "{text}"
        );
    }
}
