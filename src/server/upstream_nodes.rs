//! Finding the NUMA node of an upstream server that runs on this machine: a loopback address
//! whose listening process's CPUs all lie in one node is on that node, and the front threads
//! of that node prefer it (`routing::balance`), as a pool's app processes are chosen.
//!
//! Owns: that finding, at `serve` and at each reload (a server started since is found at the
//! next). Must not touch: a server whose node the config says (`node=N` wins), or a remote
//! one. Why here, not in `config`: it reads the running processes (`/proc`), which `check`
//! must not depend on.

use crate::config::upstream::ServerAddress;
use crate::config::Config;
use crate::cpuset::CpuSet;
use crate::os::log;
use crate::topology::Topology;

/// Fills in the node of every loopback server of `config` whose listening process runs
/// within one node of `topology`, saying so in the log.
pub fn find_local_nodes(config: &mut Config, topology: &Topology) {
    for group in &mut config.upstreams {
        for server in group.servers.iter_mut().filter(|s| s.node.is_none()) {
            let ServerAddress::Tcp(addr) = server.address else {
                continue;
            };
            if !addr.ip().is_loopback() {
                continue;
            }
            let Some((pid, cpus, node)) = local_node(addr, topology) else {
                continue;
            };
            server.node = Some(node);
            if topology.nodes.iter().filter(|n| !n.cpus.is_empty()).count() > 1 {
                log(
                    "master",
                    format!(
                        "upstream `{}`: server {} is local, on node {node} (pid {pid} listens there, on CPUs {cpus}); that node's threads prefer it",
                        group.name, server.name
                    ),
                );
            }
        }
    }
}

/// The process listening where `addr`'s connections land, its CPUs, and the one node they
/// lie in (`None` when no process is found, or its CPUs span nodes).
fn local_node(addr: std::net::SocketAddr, topology: &Topology) -> Option<(u32, CpuSet, u32)> {
    let listener = crate::os::sockets_of::listeners_at(addr)
        .into_iter()
        .next()?;
    let pid = *crate::os::sockets_of::holders_of(listener.inode).first()?;
    let cpus = crate::os::numa::thread_affinity(pid as libc::pid_t).ok()?;
    let node = node_of(&cpus, topology)?;
    Some((pid, cpus, node))
}

/// The one node every CPU of `cpus` belongs to.
pub fn node_of(cpus: &CpuSet, topology: &Topology) -> Option<u32> {
    let mut nodes = cpus.iter().map(|c| topology.node_of_cpu(c));
    let first = nodes.next()??;
    nodes.all(|n| n == Some(first)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_on_one_nodes_cpus_is_on_that_node_and_one_across_nodes_on_none() {
        let sysfs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/dl980/sys");
        let paths = crate::topology::sysfs::SysfsPaths::at(sysfs.into(), None);
        let t = crate::topology::sysfs::read(&paths).unwrap();
        let node1 = &t.nodes.iter().find(|n| n.id == 1).unwrap().cpus;
        assert_eq!(node_of(node1, &t), Some(1));
        let across = CpuSet::from_ids(node1.iter().chain([0]));
        assert_eq!(node_of(&across, &t), None);
        assert_eq!(node_of(&CpuSet::from_ids([]), &t), None);
    }
}
