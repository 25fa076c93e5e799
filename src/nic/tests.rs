//! Tests of the NIC planner on the fixtures: 1, 8, 16 and 64 queues, reserved CPUs, unknown
//! nodes, and applying changes (with undo) to a copy of the files.

use super::*;
use crate::testutil::fixture;

fn set(s: &str) -> CpuSet {
    CpuSet::parse(s).unwrap()
}

#[test]
fn irq_names_give_queue_numbers() {
    assert_eq!(irq_queue("eth0-TxRx-3", "eth0"), Some(3));
    assert_eq!(irq_queue("ens1f0-rx-12", "ens1f0"), Some(12));
    assert_eq!(irq_queue("mlx5_comp7@pci:0000:c1:00.0", "ens3np0"), Some(7));
    assert_eq!(irq_queue("virtio2-input.0", "eth0"), Some(0));
    assert_eq!(irq_queue("virtio2-output.0", "eth0"), None);
    assert_eq!(irq_queue("virtio2-config", "eth0"), None);
    assert_eq!(irq_queue("ens1f0-tx-2", "ens1f0"), None);
    assert_eq!(irq_queue("eth1", "eth1"), Some(0), "a single-vector NIC");
    assert_eq!(irq_queue("eth1-misc", "eth1"), None);
}

#[test]
fn sixteen_queues_on_the_nics_node_cores_first() {
    let t = fixture("dl980");
    let p = &plan(&t, &["ens2f0".into()], &CpuSet::new()).unwrap()[0];
    assert_eq!(p.node, Some(2));
    assert_eq!(p.rx.len(), 16);
    // Node 2 is CPUs 20-29 (cores) and 100-109 (their hyper-threads).
    let cpus: Vec<String> = p.rx.iter().map(|q| q.cpus.to_string()).collect();
    assert_eq!(
        cpus[..10],
        ["20", "21", "22", "23", "24", "25", "26", "27", "28", "29"]
    );
    assert_eq!(
        cpus[10..],
        ["100", "101", "102", "103", "104", "105"],
        "hyper-threads after the cores"
    );
    assert_eq!(p.rx[0].irq, Some(Some(140)));
    assert_eq!(p.rx[15].irq, Some(Some(155)));
    assert!(p.rps.is_empty(), "16 queues for 10 cores: no RPS");
    // XPS covers every CPU of the node once.
    let all = p.tx.iter().fold(CpuSet::new(), |a, q| a.union(&q.cpus));
    assert_eq!(all, set("20-29,100-109"));
    assert_eq!(p.tx.iter().map(|q| q.cpus.len()).sum::<usize>(), 20);
}

#[test]
fn eight_queue_nic_gets_rps_and_reserved_cpus_are_skipped() {
    let t = fixture("dl980");
    let p = &plan(&t, &["eno1".into()], &set("0-3")).unwrap()[0];
    assert_eq!(p.rx.len(), 8);
    let cpus: Vec<u32> = p.rx.iter().map(|q| q.cpus.first().unwrap()).collect();
    assert_eq!(
        cpus,
        vec![4, 5, 6, 7, 8, 9, 80, 81],
        "CPUs 0-3 are reserved by pools"
    );
    assert_eq!(p.rps.len(), 0, "8 queues, 6 free cores: enough");
    let p = &plan(&t, &["eno1".into()], &CpuSet::new()).unwrap()[0];
    assert_eq!(p.rps.len(), 8, "8 queues for 10 cores: RPS");
    assert_eq!(p.rps[0].cpus, set("0-9,80-89"));
}

#[test]
fn sixty_four_and_one_queue_nics() {
    let t = fixture("epyc2s");
    let plans = plan(&t, &[], &CpuSet::new()).unwrap();
    let big = plans.iter().find(|p| p.name == "ens3np0").unwrap();
    assert_eq!(big.rx.len(), 64);
    assert!(
        big.rx.iter().all(|q| q.irq.flatten().is_some()),
        "mlx5 IRQs matched to queues"
    );
    // Node 5: CPUs 40-47 and 104-111; 64 queues wrap around its 16 CPUs.
    assert!(big
        .rx
        .iter()
        .all(|q| q.cpus.is_subset(&set("40-47,104-111"))));
    assert_eq!(big.rx[16].cpus, big.rx[0].cpus);
    let small = plans.iter().find(|p| p.name == "eno1").unwrap();
    assert_eq!(small.rx.len(), 1);
    assert_eq!(small.rps.len(), 1, "one queue for 8 cores: RPS");
    assert!(small.tx.is_empty(), "one transmit queue: no XPS");
    assert_eq!(small.rps[0].cpus, set("0-7,64-71"));
}

#[test]
fn unknown_node_spreads_over_all_nodes() {
    let t = fixture("awkward");
    let p = &plan(&t, &[], &CpuSet::new()).unwrap()[0];
    assert_eq!((p.name.as_str(), p.node), ("ens4", None));
    assert!(p.notes.iter().any(|n| n.contains("unknown")));
    let cpus: Vec<u32> = p.rx.iter().map(|q| q.cpus.first().unwrap()).collect();
    // Nodes 0 (CPUs 0-3) and 2 (CPUs 4-5) in turn.
    assert_eq!(cpus, vec![0, 4, 1, 5, 2, 3, 0, 4]);
    assert!(
        p.rx.iter().all(|q| q.irq.flatten().is_some()),
        "virtio-input IRQs matched"
    );
}

#[test]
fn unknown_interface_is_an_error_naming_the_known_ones() {
    let e = plan(&fixture("laptop"), &["eth9".into()], &CpuSet::new()).unwrap_err();
    assert_eq!(
        e,
        "no network interface is named `eth9` (this machine has: lo, wlp0s20f3)"
    );
}

#[test]
fn changes_and_apply_with_undo() {
    let t = fixture("dl980");
    let plans = plan(&t, &["ens1f0".into()], &CpuSet::new()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (sys, proc_) = (dir.path().join("sys"), dir.path().join("proc"));
    let ch = changes(&plans, &sys, &proc_);
    assert_eq!(ch.len(), 16 + 16, "16 IRQs and 16 XPS maps");
    assert_eq!(
        ch[0],
        Change {
            path: proc_.join("irq/100/smp_affinity_list"),
            value: "0".into()
        }
    );
    let xps = ch
        .iter()
        .find(|c| c.path.ends_with("tx-0/xps_cpus"))
        .unwrap();
    // Queue 0 of 16 sends for the node's 1st and 17th CPUs in cores-first order: 0 and 86.
    assert_eq!(xps.value, CpuSet::from_ids([0, 86]).to_mask());
    assert_eq!(xps.value, "00400000,00000000,00000001");
    for c in &ch {
        std::fs::create_dir_all(c.path.parent().unwrap()).unwrap();
        std::fs::write(&c.path, "ff\n").unwrap();
    }
    let dry = apply(&ch, true);
    assert!(
        std::fs::read_to_string(&ch[1].path)
            .unwrap()
            .starts_with("ff"),
        "a dry run writes nothing"
    );
    assert_eq!(dry[1].undo, format!("echo ff > {}", ch[1].path.display()));
    let done = apply(&ch, false);
    assert!(done.iter().all(|a| a.error.is_none()));
    assert_eq!(std::fs::read_to_string(&ch[1].path).unwrap(), "1\n");
}
