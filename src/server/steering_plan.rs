//! What `serve --dry-run` prints of the steering: per address, per node of the machine, the
//! CPUs that receive its connections and the workers whose threads take them — over TCP and,
//! where HTTP/3 answers, over QUIC, whose new connections go by the same node (see
//! [`super::quic_steering`]; a connection's later datagrams follow its ID).
//!
//! Owns: that table. It is drawn from what the master attaches — the same socket owners
//! ([`super::listeners::group_owners`]) and CPU → socket table ([`super::steering`]) — so a
//! plan read here is the plan served. Must not touch: sockets (none is opened: the groups are
//! only the config's wanted ones).

use super::listeners::{group_owners, wanted_groups, SocketOwners};
use super::steering::{steering_table, SocketRun};
use crate::config::{Config, Steering};
use crate::cpuset::CpuSet;
use crate::placement::Plan;
use crate::topology::Topology;
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

/// `pool/index (CPUs)` of each of `served`; where none is on the node (steering's fallback:
/// every thread), said so.
fn names_of(plan: &Plan, served: &[usize], node_cpus: &[u32], by_cpu: bool) -> String {
    let on_node = |&w: &usize| plan.workers[w].cpus.iter().any(|c| node_cpus.contains(&c));
    let names: Vec<String> = (served.iter())
        .map(|&w| {
            let w = &plan.workers[w];
            format!("{}/{} ({})", w.pool, w.index, w.cpus)
        })
        .collect();
    match (names.is_empty(), by_cpu && !served.iter().any(on_node)) {
        (true, _) => "-".to_string(),
        (false, true) => format!("{} (no thread on this node: any)", names.join(", ")),
        (false, false) => names.join(", "),
    }
}

/// The table, one row per address and node; empty when no address is served.
pub fn render(config: &Config, topology: &Topology, plan: &Plan) -> String {
    let groups = wanted_groups(config);
    if groups.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let how = match config.server.steering {
        Steering::Cpu => "a connection goes to a thread of the node of the CPU that received it",
        Steering::Hash => "by the kernel's hash (steering = \"hash\"): any thread",
    };
    let _ = writeln!(out, "\nSTEERING: {how}");
    let _ = writeln!(
        out,
        "{:<28} {:<10} {:>5} {:<20} SERVED BY",
        "ADDRESS", "OVER", "NODE", "RECEIVED ON"
    );
    let online = topology.online_cpus();
    let mut by_node: BTreeMap<Option<u32>, Vec<u32>> = BTreeMap::new();
    for cpu in online.iter() {
        by_node
            .entry(topology.node_of_cpu(cpu))
            .or_default()
            .push(cpu);
    }
    for g in &groups {
        let owners = group_owners(&g.pools, config, topology, plan);
        let cpus: Vec<u32> = owners.iter().map(|o| o.cpu).collect();
        let table = steering_table(&cpus, &online, |c| topology.node_of_cpu(c));
        let scheme = if g.routes.tls { "https" } else { "http" };
        let over = match g.answers_quic(config) {
            true => "tcp, quic",
            false => "tcp",
        };
        let by_cpu = config.server.steering == Steering::Cpu;
        let mut first = true;
        for (node, node_cpus) in &by_node {
            let served = served_by(&table, &owners, node_cpus, by_cpu);
            let names = names_of(plan, &served, node_cpus, by_cpu);
            let address = match first {
                true => format!("{scheme}://{}", g.addr),
                false => String::new(),
            };
            let _ = writeln!(
                out,
                "{:<28} {:<10} {:>5} {:<20} {}",
                address,
                if first { over } else { "" },
                node.map_or("-".into(), |n| n.to_string()),
                CpuSet::from_ids(node_cpus.iter().copied()).to_string(),
                names
            );
            first = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::fixture;

    fn render_for(text: &str) -> String {
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
        let config = Config::parse(text, &file, &t).unwrap();
        let plan = crate::placement::plan(&t, &config.pools, &[]).unwrap();
        render(&config, &t, &plan)
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
