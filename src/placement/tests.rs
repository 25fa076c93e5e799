//! Tests of the placement rules on the fixture machines: the case study's three
//! configurations at 2, 4 and 8 sockets, most-free-memory, hosting spread, L3 units, core splits.

use super::*;
use crate::config::{LoadBalancer, PoolSpec};
use crate::testutil::fixture;

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

fn pool(name: &str, processes: Processes) -> PoolSpec {
    let mut p = PoolSpec::with_defaults(name);
    p.processes = processes;
    p
}

/// DL980 CPUs of the first `sockets` sockets: the case study's core-disable steps.
fn first_sockets(sockets: u32) -> CpuSet {
    (0..sockets)
        .flat_map(|s| (10 * s..10 * s + 10).chain(80 + 10 * s..90 + 10 * s))
        .collect()
}

fn nodes_of(plan: &Plan) -> Vec<Option<u32>> {
    plan.workers.iter().map(|w| w.node).collect()
}

#[test]
fn web_garden_auto_on_dl980_is_one_worker_per_node() {
    let t = fixture("dl980");
    let plan = plan(&t, &[pool("garden", Processes::Auto)], &[]).unwrap();
    assert_eq!(plan.workers.len(), 8);
    // Most free memory first (node 3), then round-robin in node order from there.
    assert_eq!(nodes_of(&plan), [3, 4, 5, 6, 7, 0, 1, 2].map(Some));
    for w in &plan.workers {
        let node = t.node(w.node.unwrap()).unwrap();
        assert_eq!(
            w.cpus, node.cpus,
            "worker {} has its node's 20 logical CPUs",
            w.index
        );
        assert_eq!(w.threads, 20);
        assert_eq!(w.memory_policy, MemoryPolicy::Preferred);
        assert_eq!(w.memory_nodes, vec![node.id]);
        assert!(w.may_widen);
    }
}

#[test]
fn case_study_configurations_at_2_4_and_8_sockets() {
    let t = fixture("dl980");
    for sockets in [2u32, 4, 8] {
        let cpus = first_sockets(sockets);
        // Default: 1 pool × 1 worker, on the usable node with the most free memory.
        let mut default = pool("default", Processes::Count(1));
        default.cpus = Some(cpus.clone());
        let p = plan(&t, &[default], &[]).unwrap();
        assert_eq!(p.workers.len(), 1);
        let expect_node = if sockets > 3 { 3 } else { sockets - 1 };
        assert_eq!(p.workers[0].node, Some(expect_node), "{sockets} sockets");
        assert_eq!(p.workers[0].cpus.len(), 20);

        // Web garden: 1 pool × auto = one per usable node.
        let mut garden = pool("garden", Processes::Auto);
        garden.cpus = Some(cpus.clone());
        let p = plan(&t, &[garden], &[]).unwrap();
        assert_eq!(p.workers.len(), sockets as usize);
        let mut nodes: Vec<u32> = p.workers.iter().map(|w| w.node.unwrap()).collect();
        nodes.sort();
        assert_eq!(nodes, (0..sockets).collect::<Vec<_>>());
        assert!(p
            .workers
            .iter()
            .all(|w| w.cpus.is_subset(&cpus) && w.cpus.len() == 20));

        // Hosting: N pools × 1 worker, one pool per node.
        let pools: Vec<PoolSpec> = (0..sockets)
            .map(|i| {
                let mut p = pool(&format!("site{i}"), Processes::Count(1));
                p.cpus = Some(cpus.clone());
                p.affinity = Affinity::Hard;
                p.memory_policy = MemoryPolicy::Bind;
                p
            })
            .collect();
        let p = plan(&t, &pools, &[]).unwrap();
        let mut nodes: Vec<u32> = p.workers.iter().map(|w| w.node.unwrap()).collect();
        nodes.sort();
        assert_eq!(
            nodes,
            (0..sockets).collect::<Vec<_>>(),
            "hosting spreads at {sockets} sockets"
        );
        assert!(p
            .workers
            .iter()
            .all(|w| w.memory_policy == MemoryPolicy::Bind && !w.may_widen));
    }
}

#[test]
fn most_free_memory_starts_on_the_emptiest_node_and_round_robins() {
    let t = fixture("epyc2s"); // free memory falls with node id: node 0 has the most.
    let p = plan(&t, &[pool("a", Processes::Count(3))], &[]).unwrap();
    assert_eq!(nodes_of(&p), [0, 1, 2].map(Some));
    let t = fixture("awkward"); // node 2 has more free memory than node 0; node 5 has no CPU.
    let p = plan(&t, &[pool("a", Processes::Count(3))], &[]).unwrap();
    assert_eq!(nodes_of(&p), [2, 0, 2].map(Some));
    // Workers 0 and 2 share node 2 and split its online cores; offline CPUs 6-7 are never used.
    assert_eq!(p.workers[0].cpus, set("4"));
    assert_eq!(p.workers[2].cpus, set("5"));
    assert_eq!(p.workers[1].cpus, set("0-3"));
}

#[test]
fn hosting_spreads_and_round_robin_continues_across_pools() {
    let t = fixture("dl980");
    let pools: Vec<PoolSpec> = (0..10)
        .map(|i| pool(&format!("p{i}"), Processes::Count(1)))
        .collect();
    let p = plan(&t, &pools, &[]).unwrap();
    let mut per_node = [0; 8];
    for w in &p.workers {
        per_node[w.node.unwrap() as usize] += 1;
    }
    assert!(per_node.iter().all(|&n| n == 1 || n == 2), "{per_node:?}");
    assert_eq!(per_node.iter().sum::<i32>(), 10);

    let mut rr: Vec<PoolSpec> = (0..3)
        .map(|i| pool(&format!("r{i}"), Processes::Count(2)))
        .collect();
    for p in &mut rr {
        p.placement = Placement::RoundRobin;
    }
    let p = plan(&t, &rr, &[]).unwrap();
    assert_eq!(
        nodes_of(&p),
        [0, 1, 2, 3, 4, 5].map(Some),
        "one cursor shared by all pools"
    );
}

#[test]
fn already_placed_workers_are_counted() {
    let t = fixture("dl980");
    let already: Vec<PlacedWorker> = (0..7)
        .map(|n| PlacedWorker {
            node: Some(n),
            l3: None,
        })
        .collect();
    let p = plan(&t, &[pool("new", Processes::Count(1))], &already).unwrap();
    assert_eq!(nodes_of(&p), vec![Some(7)], "the only empty node");
}

#[test]
fn cpus_mask_forces_sharing() {
    let t = fixture("dl980");
    let pools: Vec<PoolSpec> = (0..2)
        .map(|i| {
            let mut p = pool(&format!("p{i}"), Processes::Count(1));
            p.cpus = Some(set("0-9"));
            p
        })
        .collect();
    let p = plan(&t, &pools, &[]).unwrap();
    assert_eq!(nodes_of(&p), vec![Some(0), Some(0)]);
    assert!(
        p.workers.iter().all(|w| w.cpus == set("0-9")),
        "different pools share their node's CPUs"
    );
}

#[test]
fn more_workers_than_nodes_split_by_whole_cores() {
    let t = fixture("dl980");
    let mut garden = pool("g", Processes::Count(2));
    garden.cpus = Some(first_sockets(1));
    let p = plan(&t, &[garden], &[]).unwrap();
    assert_eq!(p.workers[0].cpus, set("0-4,80-84"));
    assert_eq!(
        p.workers[1].cpus,
        set("5-9,85-89"),
        "SMT siblings stay together"
    );
    // Three workers on 10 cores: 4 + 3 + 3 cores.
    let mut garden = pool("g", Processes::Count(3));
    garden.cpus = Some(first_sockets(1));
    let p = plan(&t, &[garden], &[]).unwrap();
    let sizes: Vec<usize> = p.workers.iter().map(|w| w.cpus.len()).collect();
    assert_eq!(sizes, vec![8, 6, 6]);
    // More workers than cores: they share.
    let t = fixture("laptop");
    let p = plan(&t, &[pool("g", Processes::Count(6))], &[]).unwrap();
    assert!(p.workers.iter().all(|w| w.cpus == set("0-3")));
    let p = plan(&t, &[pool("g", Processes::Count(4))], &[]).unwrap();
    let cpus: Vec<String> = p.workers.iter().map(|w| w.cpus.to_string()).collect();
    assert_eq!(
        cpus,
        ["0", "1", "2", "3"],
        "a web garden on one node owns one core each"
    );
}

#[test]
fn l3_unit_places_per_cache_domain_spreading_nodes_first() {
    let t = fixture("epyc2s");
    let mut p = pool("a", Processes::Auto);
    p.unit = Unit::L3;
    let plan_all = plan(&t, &[p.clone()], &[]).unwrap();
    assert_eq!(plan_all.workers.len(), 16);
    assert!(plan_all.workers.iter().all(|w| w.cpus.len() == 8));
    p.processes = Processes::Count(8);
    let eight = plan(&t, &[p], &[]).unwrap();
    let mut nodes: Vec<u32> = eight.workers.iter().map(|w| w.node.unwrap()).collect();
    nodes.sort();
    assert_eq!(
        nodes,
        (0..8).collect::<Vec<_>>(),
        "one L3 domain on each node before doubling up"
    );
    assert_eq!(eight.workers[0].cpus, set("0-3,64-67"));
    assert_eq!(eight.workers[0].l3, Some(0));
}

#[test]
fn placement_none_gives_all_pool_cpus() {
    let t = fixture("dl980");
    let mut p = pool("n", Processes::Count(2));
    p.placement = Placement::None;
    p.cpus = Some(set("1-63"));
    let plan = plan(&t, &[p], &[]).unwrap();
    assert!(plan
        .workers
        .iter()
        .all(|w| w.node.is_none() && w.cpus == set("1-63") && w.threads == 63));
    assert!(plan
        .workers
        .iter()
        .all(|w| w.memory_policy == MemoryPolicy::Default));
}

#[test]
fn memory_only_and_nonuma_machines() {
    let t = fixture("awkward");
    let p = plan(&t, &[pool("a", Processes::Auto)], &[]).unwrap();
    assert_eq!(p.workers.len(), 2, "memory-only node 5 gets no worker");
    let t = fixture("nonuma");
    let p = plan(&t, &[pool("a", Processes::Auto)], &[]).unwrap();
    assert_eq!(p.workers.len(), 1);
    assert_eq!(p.workers[0].cpus, set("0-1"));
}

#[test]
fn plan_is_deterministic_and_renders_json() {
    let t = fixture("dl980");
    let mut p = pool("shop", Processes::Auto);
    p.load_balancer = LoadBalancer::Tcp;
    p.affinity = Affinity::Hard;
    p.memory_policy = MemoryPolicy::Bind;
    let a = plan(&t, &[p.clone()], &[]).unwrap();
    assert_eq!(a, plan(&t, &[p], &[]).unwrap());
    let json: serde_json::Value = serde_json::to_value(&a).unwrap();
    let w = &json["workers"][0];
    assert_eq!(w["pool"], "shop");
    assert_eq!(w["node"], 3);
    assert_eq!(w["threads"], 20);
    assert_eq!(w["affinity"], "hard");
    assert_eq!(w["memory_policy"], "bind");
    assert_eq!(w["cpus"][0], 30);
    assert!(render(&a).lines().count() == 9);
}

#[test]
fn auto_is_one_per_node_even_beside_another_pool() {
    // Found in the QEMU guest: a single-worker pool first took node 1, then a hard `auto`
    // garden put two workers on node 0 and none on node 1 (node 1 already held one worker, of
    // another pool). A pool now spreads over its own units first.
    let t = fixture("dl980");
    let mut garden = pool("garden", Processes::Auto);
    garden.affinity = Affinity::Hard;
    let plan = plan(&t, &[pool("capped", Processes::Count(1)), garden], &[]).unwrap();
    let mut nodes: Vec<u32> = plan
        .workers
        .iter()
        .filter(|w| w.pool == "garden")
        .map(|w| w.node.unwrap())
        .collect();
    nodes.sort_unstable();
    assert_eq!(
        nodes,
        (0..8).collect::<Vec<_>>(),
        "one garden worker per node"
    );
    for w in plan.workers.iter().filter(|w| w.pool == "garden") {
        assert_eq!(
            w.cpus,
            t.node(w.node.unwrap()).unwrap().cpus,
            "a whole node each"
        );
    }
}
