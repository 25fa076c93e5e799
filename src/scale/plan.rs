//! The scaling experiment's design for a machine: which units the server grows over (nodes,
//! else L3 domains, else cores — the case study's "core-disable utility" becomes CPU
//! restriction), where the load generator runs, the steps, and the config of each
//! configuration at each step.
//!
//! Owns: those decisions, as pure functions of the topology. Must not touch: processes or I/O.

use crate::cpuset::CpuSet;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// What the server grows over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    Node,
    L3,
    Core,
}

impl UnitKind {
    pub fn parse(s: &str) -> Option<UnitKind> {
        match s {
            "node" => Some(UnitKind::Node),
            "l3" => Some(UnitKind::L3),
            "core" => Some(UnitKind::Core),
            _ => None,
        }
    }

    pub fn noun(self, n: usize) -> String {
        let s = match self {
            UnitKind::Node => "node",
            UnitKind::L3 => "L3 domain",
            UnitKind::Core => "core",
        };
        if n == 1 {
            format!("1 {s}")
        } else {
            format!("{n} {s}s")
        }
    }
}

/// The three configurations of the case study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Configuration {
    /// 1 pool × 1 worker.
    Default,
    /// 1 pool × one worker per unit.
    Garden,
    /// N pools × 1 worker, one site and port each, load spread evenly.
    Hosting,
}

impl Configuration {
    pub const ALL: [Configuration; 3] = [
        Configuration::Hosting,
        Configuration::Garden,
        Configuration::Default,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Configuration::Default => "default",
            Configuration::Garden => "garden",
            Configuration::Hosting => "hosting",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Configuration::Default => "Default (1 pool × 1 process)",
            Configuration::Garden => "Web garden (1 pool × N processes)",
            Configuration::Hosting => "Hosting (N pools × 1 process)",
        }
    }

    pub fn parse(s: &str) -> Option<Configuration> {
        Configuration::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The workloads: the static-benchmark seed's 100-byte page, the case study's dynamic page,
/// and the web-gardening seed's CPU-heavy work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Static,
    Dynamic,
    Cpu,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Static, Workload::Dynamic, Workload::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Static => "static",
            Workload::Dynamic => "dynamic",
            Workload::Cpu => "cpu",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == s)
    }

    /// The path loaded for this workload.
    pub fn path(self) -> &'static str {
        match self {
            Workload::Static => "/100.html",
            Workload::Dynamic => "/dynamic",
            Workload::Cpu => "/cpu?ms=10",
        }
    }
}

/// The experiment's layout on this machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScalePlan {
    pub unit_kind: UnitKind,
    /// The units the server may use, in order; step k uses the first k.
    pub units: Vec<CpuSet>,
    pub load_cpus: CpuSet,
    /// True when the load generator shares CPUs with the server (machines too small to keep
    /// them apart): the figures then understate scaling.
    pub shared_load: bool,
    /// Units per step: 1, 2, 4, … and the largest.
    pub steps: Vec<usize>,
}

impl ScalePlan {
    /// The server's CPUs at a step (empty when the server is remote: `--target`).
    pub fn step_cpus(&self, units: usize) -> CpuSet {
        self.units[..units.min(self.units.len())]
            .iter()
            .fold(CpuSet::new(), |a, u| a.union(u))
    }
}

/// The units of a machine: nodes when there are several, else L3 domains, else cores (SMT
/// siblings together).
pub fn units(t: &Topology) -> (UnitKind, Vec<CpuSet>) {
    let nodes: Vec<CpuSet> = t
        .nodes
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.cpus.clone())
        .collect();
    if nodes.len() > 1 {
        return (UnitKind::Node, nodes);
    }
    let l3: Vec<CpuSet> = t.l3_domains().into_iter().map(|(_, c)| c).collect();
    if l3.len() > 1 {
        return (UnitKind::L3, l3);
    }
    let mut cores: Vec<CpuSet> = Vec::new();
    for c in t.cpus.iter().filter(|c| c.online) {
        if !cores.iter().any(|core| core.contains(c.id)) {
            cores.push(
                c.siblings
                    .intersection(&t.online_cpus())
                    .union(&CpuSet::from_ids([c.id])),
            );
        }
    }
    (UnitKind::Core, cores)
}

/// Lays out the experiment. `load_cpus`: where the load generator runs; by default the last
/// unit, kept apart from the server when the machine has at least three units, shared with it
/// otherwise (and said so).
pub fn plan(
    t: &Topology,
    load_cpus: Option<CpuSet>,
    max_units: Option<usize>,
) -> Result<ScalePlan, String> {
    let (kind, all) = units(t);
    if all.is_empty() {
        return Err("the machine has no online CPU".into());
    }
    let (load, server_units, shared) = match load_cpus {
        Some(load) => {
            if load.is_empty() || !load.is_subset(&t.online_cpus()) {
                return Err(format!(
                    "--load-cpus {load}: give online CPUs of this machine ({})",
                    t.online_cpus()
                ));
            }
            let apart: Vec<CpuSet> = all
                .iter()
                .map(|u| u.difference(&load))
                .filter(|u| !u.is_empty())
                .collect();
            if apart.is_empty() {
                (load, all.clone(), true)
            } else {
                // Load inside a unit the server still uses shares its node, cache or core.
                let shared = all
                    .iter()
                    .any(|u| !u.intersection(&load).is_empty() && !u.difference(&load).is_empty());
                (load, apart, shared)
            }
        }
        None if all.len() >= 3 => {
            let load = all.last().expect("units").clone();
            (load, all[..all.len() - 1].to_vec(), false)
        }
        None => (all.last().expect("units").clone(), all.clone(), true),
    };
    let mut server_units = server_units;
    if let Some(m) = max_units {
        server_units.truncate(m.max(1));
    }
    let n = server_units.len();
    let mut steps: Vec<usize> = std::iter::successors(Some(1usize), |s| Some(s * 2))
        .take_while(|&s| s <= n)
        .collect();
    if steps.last() != Some(&n) {
        steps.push(n);
    }
    Ok(ScalePlan {
        unit_kind: kind,
        units: server_units,
        load_cpus: load,
        shared_load: shared,
        steps,
    })
}

/// The espalier config for a configuration at a step, serving `www` (a folder beside the
/// config) on `ports` (hosting uses one port per pool; the others use the first).
pub fn config_text(
    plan: &ScalePlan,
    configuration: Configuration,
    units: usize,
    ports: &[u16],
    transport: super::Transport,
) -> String {
    let cpus = plan.step_cpus(units);
    let mut out = String::from("# Generated by espalier scale.\n");
    // A load generator sharing the server's CPUs would have every connection steered to the
    // thread on its own CPU; the kernel's hash spreads them instead.
    if plan.shared_load {
        out.push_str("[server]\nsteering = \"hash\"\n");
    }
    let site = |name: &str, pool: &str, port: u16| {
        format!(
            "\n[[site]]\nname = \"{name}\"\n{}root = \"www\"\n\
             [[site.app]]\npath = \"/\"\npool = \"{pool}\"\n\
             [[site.app]]\npath = \"/dynamic\"\npool = \"{pool}\"\nhandler = \"dynamic\"\n\
             [[site.app]]\npath = \"/cpu\"\npool = \"{pool}\"\nhandler = \"cpu\"\n",
            transport.site_lines(port)
        )
    };
    match configuration {
        Configuration::Default => {
            out.push_str(&format!(
                "\n[[pool]]\nname = \"default\"\nprocesses = 1\ncpus = \"{cpus}\"\n"
            ));
            out.push_str(&site("default", "default", ports[0]));
        }
        Configuration::Garden => {
            let (processes, unit) = match plan.unit_kind {
                UnitKind::Node => ("\"auto\"".to_string(), "node"),
                UnitKind::L3 => ("\"auto\"".to_string(), "l3"),
                UnitKind::Core => (units.to_string(), "node"),
            };
            out.push_str(&format!("\n[[pool]]\nname = \"garden\"\nprocesses = {processes}\nunit = \"{unit}\"\ncpus = \"{cpus}\"\n"));
            out.push_str(&site("garden", "garden", ports[0]));
        }
        Configuration::Hosting => {
            for (i, unit) in plan.units[..units].iter().enumerate() {
                out.push_str(&format!("\n[[pool]]\nname = \"site{i}\"\nprocesses = 1\naffinity = \"hard\"\ncpus = \"{unit}\"\n"));
            }
            for (i, port) in ports.iter().enumerate().take(units) {
                out.push_str(&site(&format!("site{i}"), &format!("site{i}"), *port));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::placement;
    use crate::testutil::fixture;

    #[test]
    fn units_by_machine() {
        let (k, u) = units(&fixture("dl980"));
        assert_eq!((k, u.len()), (UnitKind::Node, 8));
        let (k, u) = units(&fixture("laptop"));
        assert_eq!((k, u.len()), (UnitKind::Core, 4));
        // One node with one L3 shared by all: cores.
        let (k, u) = units(&fixture("nonuma"));
        assert_eq!((k, u.len()), (UnitKind::Core, 2));
    }

    #[test]
    fn steps_and_load_placement() {
        let p = plan(&fixture("dl980"), None, None).unwrap();
        assert_eq!(p.steps, vec![1, 2, 4, 7]);
        assert_eq!(
            p.load_cpus.to_string(),
            "70-79,150-159",
            "the last node drives the load"
        );
        assert!(!p.shared_load);
        let p = plan(
            &fixture("dl980"),
            Some(CpuSet::parse("150-159").unwrap()),
            None,
        )
        .unwrap();
        assert_eq!(p.steps, vec![1, 2, 4, 8]);
        assert!(
            p.shared_load,
            "node 7 keeps CPUs 70-79 for the server but shares its socket"
        );
        let p = plan(&fixture("nonuma"), None, None).unwrap();
        assert_eq!(
            (p.steps.clone(), p.shared_load),
            (vec![1, 2], true),
            "two cores: load shares"
        );
        let p = plan(&fixture("laptop"), None, None).unwrap();
        assert_eq!(
            (p.steps.clone(), p.load_cpus.to_string()),
            (vec![1, 2, 3], "3".to_string())
        );
        assert!(plan(&fixture("laptop"), Some(CpuSet::parse("9").unwrap()), None).is_err());
    }

    #[test]
    fn configs_place_as_the_case_study_describes() {
        let t = fixture("dl980");
        let p = plan(&t, None, None).unwrap();
        let ports = [8001, 8002, 8003, 8004];
        for (c, workers, pools) in [
            (Configuration::Default, 1, 1),
            (Configuration::Garden, 4, 1),
            (Configuration::Hosting, 4, 4),
        ] {
            let text = config_text(&p, c, 4, &ports, super::super::Transport::default());
            let config = Config::parse(&text, std::path::Path::new("scale.toml"), &t)
                .unwrap_or_else(|e| panic!("{text}\n{e}"));
            assert_eq!(config.pools.len(), pools);
            let plan = placement::plan(&t, &config.pools, &[]).unwrap();
            assert_eq!(plan.workers.len(), workers, "{c:?}");
            let mut nodes: Vec<u32> = plan.workers.iter().map(|w| w.node.unwrap()).collect();
            nodes.sort();
            nodes.dedup();
            assert_eq!(nodes.len(), workers, "{c:?}: one worker per node");
            assert!(plan
                .workers
                .iter()
                .all(|w| w.cpus.is_subset(&p.step_cpus(4))));
        }
        // On a one-node machine the garden splits the step's cores.
        let t = fixture("laptop");
        let p = plan(&t, None, None).unwrap();
        let config = Config::parse(
            &config_text(
                &p,
                Configuration::Garden,
                2,
                &ports,
                super::super::Transport::default(),
            ),
            std::path::Path::new("s.toml"),
            &t,
        )
        .unwrap();
        let plan = placement::plan(&t, &config.pools, &[]).unwrap();
        let cpus: Vec<String> = plan.workers.iter().map(|w| w.cpus.to_string()).collect();
        assert_eq!(cpus, ["0", "1"]);
    }
}
