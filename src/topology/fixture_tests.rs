//! Every fixture tree parses to what it holds, and this machine's sysfs reads consistently.

use crate::cpuset::CpuSet;
use crate::testutil::fixture;

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn dl980_is_the_case_study_machine() {
    let t = fixture("dl980");
    assert_eq!(t.nodes.len(), 8);
    assert_eq!(t.cpus.len(), 160);
    assert_eq!(t.online_cpus().len(), 160);
    assert_eq!(t.packages(), 8);
    assert!(t.smt());
    assert_eq!(t.l3_domains().len(), 8);
    let n3 = t.node(3).unwrap();
    assert_eq!(n3.cpus, set("30-39,110-119"));
    assert_eq!(n3.memory_total_bytes, 128 << 30);
    assert_eq!(n3.distances, vec![17, 17, 12, 10, 19, 19, 19, 19]);
    let total: u64 = t.nodes.iter().map(|n| n.memory_total_bytes).sum();
    assert_eq!(total, 1 << 40);
    let c = t.cpu(95).unwrap();
    assert_eq!((c.node, c.package, c.core), (Some(1), Some(1), Some(5)));
    assert_eq!(c.siblings, set("15,95"));
    assert_eq!(c.l3, Some(1));
    let nic = t.nics.iter().find(|n| n.name == "ens2f0").unwrap();
    assert_eq!(
        (nic.node, nic.rx_queues, nic.tx_queues, nic.is_virtual),
        (Some(2), 16, 16, false)
    );
    assert_eq!(nic.irqs.len(), 16);
    assert_eq!(nic.irqs[0].irq, 140);
    assert_eq!(nic.irqs[0].affinity, set("0"));
}

#[test]
fn epyc_has_two_l3_domains_per_node() {
    let t = fixture("epyc2s");
    assert_eq!(t.nodes.len(), 8);
    assert_eq!(t.packages(), 2);
    let l3 = t.l3_domains();
    assert_eq!(l3.len(), 16);
    assert_eq!(l3[0].1, set("0-3,64-67"));
    assert_eq!(l3[1].1, set("4-7,68-71"));
    assert_eq!(t.cpu(68).unwrap().l3, Some(1));
    let nic = t.nics.iter().find(|n| n.name == "ens3np0").unwrap();
    assert_eq!((nic.node, nic.rx_queues), (Some(5), 64));
    assert_eq!(nic.irqs.len(), 64, "mlx5 IRQs are found by PCI address");
    let small = t.nics.iter().find(|n| n.name == "eno1").unwrap();
    assert_eq!(
        (small.node, small.rx_queues, small.irqs.len()),
        (Some(0), 1, 1)
    );
}

#[test]
fn laptop_is_one_node() {
    let t = fixture("laptop");
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].cpus, set("0-3"));
    assert!(!t.smt());
    let lo = t.nics.iter().find(|n| n.name == "lo").unwrap();
    assert!(lo.is_virtual && lo.node.is_none());
    let wifi = t.nics.iter().find(|n| n.name == "wlp0s20f3").unwrap();
    assert!(
        !wifi.is_virtual && wifi.node.is_none(),
        "numa_node -1 is unknown"
    );
}

#[test]
fn awkward_machine_reads_without_error() {
    let t = fixture("awkward");
    let ids: Vec<u32> = t.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![0, 2, 5]);
    assert!(t.node(5).unwrap().cpus.is_empty(), "node 5 is memory only");
    assert_eq!(t.node(5).unwrap().memory_free_bytes, 31 << 30);
    assert_eq!(t.online_cpus(), set("0-5"));
    let off = t.cpu(7).unwrap();
    assert!(!off.online);
    assert_eq!(
        off.node,
        Some(2),
        "an offline CPU keeps its node from the cpuN/nodeK link"
    );
    assert_eq!(off.package, None);
    assert_eq!(t.node(2).unwrap().cpus, set("4-5"));
    let nic = &t.nics[0];
    assert_eq!(
        (nic.name.as_str(), nic.node, nic.rx_queues),
        ("ens4", None, 8)
    );
    assert_eq!(nic.irqs.len(), 8, "virtio IRQs are found by device name");
}

#[test]
fn no_node_folder_means_one_node_with_every_cpu() {
    let t = fixture("nonuma");
    assert_eq!(t.nodes.len(), 1);
    assert_eq!(t.nodes[0].cpus, set("0-1"));
    assert_eq!(
        t.nodes[0].memory_total_bytes,
        4 << 30,
        "memory comes from proc/meminfo"
    );
    assert!(t.cpus.iter().all(|c| c.node == Some(0)));
}

#[test]
fn live_machine_reads() {
    let t = crate::topology::read(&crate::topology::SysfsPaths::live()).unwrap();
    assert!(!t.nodes.is_empty());
    let online = t.online_cpus();
    assert!(!online.is_empty());
    // Every online CPU belongs to exactly one node.
    for c in online.iter() {
        assert_eq!(
            t.nodes.iter().filter(|n| n.cpus.contains(c)).count(),
            1,
            "cpu {c}"
        );
    }
    // And the kernel agrees on how many CPUs are online.
    let n = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    assert!(online.len() >= n);
}

#[test]
fn a_confined_process_places_only_on_its_cpus() {
    // A pod given CPUs 30-39 (node 3) by Kubernetes' static CPU manager on the DL980.
    let t = fixture("dl980").confined_to(&set("30-39"));
    assert_eq!(t.online_cpus(), set("30-39"));
    assert_eq!(t.node(3).unwrap().cpus, set("30-39"));
    assert!(t.node(2).unwrap().cpus.is_empty());
    assert_eq!(t.node(2).unwrap().memory_total_bytes, 128 << 30);
    let mut pool = crate::config::PoolSpec::with_defaults("web");
    pool.processes = crate::config::Processes::Auto;
    let plan = crate::placement::plan(&t, &[pool], &[]).unwrap();
    assert_eq!(plan.workers.len(), 1, "one node has CPUs left: one worker");
    assert!(plan.workers[0].cpus.is_subset(&set("30-39")));
    assert_eq!(plan.workers[0].node, Some(3));
}
