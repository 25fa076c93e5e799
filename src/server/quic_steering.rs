//! QUIC steering: which UDP socket of an https address's reuseport group a datagram goes to
//! — every datagram of a connection to the thread that holds it, a new connection to a thread
//! on the node of the CPU that received it, and across a recycle the old worker's connections
//! to the old worker while new ones go to its successor.
//!
//! Owns: the pure part — the layout of the connection IDs espalier's endpoints issue and the
//! classic-BPF program that reads them. Must not touch: sockets (the master opens them and
//! attaches the program, [`super::listeners`]) or QUIC itself (quinn, [`super::quic`]).
//!
//! **Sockets.** The master opens UDP sockets per thread that answers HTTP/3 on the address
//! (two to begin with; see [`super::quic_sockets`]). A starting worker's thread reads one no
//! live process reads, so a recycle's successor reads beside the draining worker and neither
//! sees the other's datagrams; new connections then go to the successor's. The master keeps
//! every socket for its whole life, as it keeps the TCP ones: the group's indices never move
//! under a running connection.
//!
//! **Connection IDs** (the server's, [`CID_LEN`] bytes): a tag the master draws at start,
//! then the socket's index in the group, then random bytes. Every ID a connection is known by
//! names the socket it was accepted on, so the program sends its datagrams there whatever the
//! client's address or port becomes (NAT rebinding, migration). Like QUIC-LB's plaintext mode
//! (draft-ietf-quic-load-balancers), the index is readable by an observer: it links a
//! connection's IDs to one of a few sockets, never to more than that; a classic-BPF program
//! cannot decrypt, and eBPF would need a loader this server does without.
//!
//! **The program**, run by the kernel on each datagram's payload:
//! - an ID with the tag and an index inside the group (a short header's at byte 1, a long
//!   header's at byte 6 when its length is [`CID_LEN`]) → that socket;
//! - anything else — a client's first Initial (its ID is the client's random choice), a
//!   stale or made-up ID — → a live thread on the receiving CPU's node (every live thread
//!   when the node has none), chosen by the ID's first four bytes. By the ID and not by the
//!   CPU itself: a client's first flight may span datagrams received on different CPUs of a
//!   node (loopback, RPS), and they must all reach one thread; the node keeps its memory
//!   local, which is what steering is for.

use super::steering::{
    insn, BpfInsn, BPF_ALU_ADD_K, BPF_ALU_MOD_K, BPF_ALU_MUL_K, BPF_JMP_JA, BPF_JMP_JEQ_K,
    BPF_JMP_JGE_K, BPF_JMP_JSET_K, BPF_LD_B_ABS, BPF_LD_H_ABS, BPF_LD_W_ABS, BPF_RET_A, BPF_RET_K,
    MAX_INSNS, SKF_AD_CPU, SKF_AD_OFF,
};
use crate::cpuset::CpuSet;

/// The length of the connection IDs espalier issues: tag (2), socket index (2), random (8).
pub const CID_LEN: usize = 12;

/// A connection ID naming socket `index` of the group, under the master's `tag`.
pub fn cid(tag: u16, index: u16, random: [u8; 8]) -> [u8; CID_LEN] {
    let mut id = [0u8; CID_LEN];
    id[..2].copy_from_slice(&tag.to_be_bytes());
    id[2..4].copy_from_slice(&index.to_be_bytes());
    id[4..].copy_from_slice(&random);
    id
}

/// What the program is built from.
pub struct QuicGroup<'a> {
    /// Per thread, its CPU, or `None` when no process reads its sockets (a stopped pool).
    pub owners: &'a [Option<u32>],
    /// Per thread, the socket its newest worker reads.
    pub current: &'a [u32],
    /// Sockets in the group (those of threads a reload took away are never chosen for new
    /// connections).
    pub sockets: u32,
    /// The master's tag (see [`cid`]).
    pub tag: u16,
    /// Whether new connections go by the receiving CPU's node (`[server] steering`), or by
    /// the ID alone over every thread.
    pub by_node: bool,
}

/// The program for `group`; `None` when no thread is live (nothing to steer to).
pub fn quic_program(
    group: &QuicGroup,
    online: &CpuSet,
    node_of: impl Fn(u32) -> Option<u32>,
) -> Option<Vec<BpfInsn>> {
    // The live threads, in socket order (so a node's threads are contiguous).
    let live: Vec<(usize, u32)> = (group.owners.iter().enumerate())
        .filter_map(|(i, cpu)| Some((i, (*cpu)?)))
        .collect();
    if live.is_empty() {
        return None;
    }
    let runs = match group.by_node {
        true => node_runs(&live, online, &node_of),
        false => Vec::new(),
    };
    let with_cpus = assemble(group, &live, runs);
    if with_cpus.len() <= MAX_INSNS {
        return Some(with_cpus);
    }
    let by_id = assemble(group, &live, Vec::new());
    if by_id.len() <= MAX_INSNS {
        return Some(by_id);
    }
    // Past ~2 000 threads on one address the table of threads does not fit either: new
    // connections go by the ID to socket 2k, each thread's first as the group was opened
    // (two each, in order): a successor reading another takes no new connection until a
    // later one reads that first socket again.
    let mut prog = by_id[..HEADER].to_vec();
    prog.extend([
        insn(BPF_LD_W_ABS, 0, 0, LONG_DCID),
        insn(BPF_ALU_MOD_K, 0, 0, group.owners.len() as u32),
        insn(BPF_ALU_MUL_K, 0, 0, 2),
        insn(BPF_RET_A, 0, 0, 0),
    ]);
    Some(prog)
}

/// The instructions that read an ID of ours (see [`assemble`]).
const HEADER: usize = 14;

/// Per online CPU, the run `[start, start + count)` of live threads (positions in `live`)
/// on its node; CPUs of a node without live threads are left out (they take every thread).
fn node_runs(
    live: &[(usize, u32)],
    online: &CpuSet,
    node_of: &impl Fn(u32) -> Option<u32>,
) -> Vec<(u32, u32, u32)> {
    let mut runs = Vec::new();
    for cpu in online.iter() {
        let Some(node) = node_of(cpu) else { continue };
        let on_node: Vec<usize> = (live.iter().enumerate())
            .filter(|(_, &(_, c))| node_of(c) == Some(node))
            .map(|(k, _)| k)
            .collect();
        if let (Some(&first), Some(&last)) = (on_node.first(), on_node.last()) {
            // Sorted by node, so one node's threads are one run.
            runs.push((cpu, first as u32, (last - first + 1) as u32));
        }
    }
    runs
}

/// Whether a datagram (its first bytes, its whole length) can open a QUIC connection: a long
/// header with the fixed bit, in a datagram of at least 1 200 bytes (RFC 9000 §14.1: a
/// client's Initial is padded so). What wakes a sleeping pool over HTTP/3 — a stray or made-up
/// short datagram does not.
pub fn opens_a_connection(first: &[u8], len: usize) -> bool {
    len >= 1200 && first.first().is_some_and(|b| b & 0xc0 == 0xc0)
}

/// Offsets of a datagram's destination connection ID: after a short header's first byte, and
/// after a long header's first byte, version and ID length.
const SHORT_DCID: u32 = 1;
const LONG_DCID_LEN: u32 = 5;
const LONG_DCID: u32 = 6;
/// The long-header bit of the first byte (RFC 9000 §17.2).
const LONG_HEADER: u32 = 0x80;

fn assemble(group: &QuicGroup, live: &[(usize, u32)], runs: Vec<(u32, u32, u32)>) -> Vec<BpfInsn> {
    let tag = u32::from(group.tag);
    // The header part; `new` is the first instruction after it.
    let new = HEADER as u8;
    let to_new = |pc: u8| new - pc - 1;
    let mut prog = vec![
        insn(BPF_LD_B_ABS, 0, 0, 0),
        insn(BPF_JMP_JSET_K, 5, 0, LONG_HEADER),
        // Short header: the ID at byte 1.
        insn(BPF_LD_H_ABS, 0, 0, SHORT_DCID),
        insn(BPF_JMP_JEQ_K, 0, to_new(3), tag),
        insn(BPF_LD_H_ABS, 0, 0, SHORT_DCID + 2),
        insn(BPF_JMP_JGE_K, to_new(5), 0, group.sockets),
        insn(BPF_RET_A, 0, 0, 0),
        // Long header: the ID at byte 6 when it has our length.
        insn(BPF_LD_B_ABS, 0, 0, LONG_DCID_LEN),
        insn(
            BPF_JMP_JEQ_K,
            0,
            to_new(8),
            super::quic_steering::CID_LEN as u32,
        ),
        insn(BPF_LD_H_ABS, 0, 0, LONG_DCID),
        insn(BPF_JMP_JEQ_K, 0, to_new(10), tag),
        insn(BPF_LD_H_ABS, 0, 0, LONG_DCID + 2),
        insn(BPF_JMP_JGE_K, to_new(12), 0, group.sockets),
        insn(BPF_RET_A, 0, 0, 0),
    ];
    debug_assert_eq!(prog.len(), new as usize);
    // A new connection: the receiving CPU's node's run, then one thread of it by the ID. The
    // `JA`s to the table of threads are patched once its place is known.
    let mut to_table = Vec::new();
    let hash = insn(BPF_LD_W_ABS, 0, 0, LONG_DCID);
    if !runs.is_empty() {
        prog.push(insn(BPF_LD_W_ABS, 0, 0, (SKF_AD_OFF + SKF_AD_CPU) as u32));
        for (cpu, start, count) in runs {
            if count == 1 {
                prog.push(insn(BPF_JMP_JEQ_K, 0, 1, cpu));
                prog.push(insn(BPF_RET_K, 0, 0, group.current[live[start as usize].0]));
            } else {
                prog.push(insn(BPF_JMP_JEQ_K, 0, 4, cpu));
                prog.extend([
                    hash,
                    insn(BPF_ALU_MOD_K, 0, 0, count),
                    insn(BPF_ALU_ADD_K, 0, 0, start),
                ]);
                to_table.push(prog.len());
                prog.push(insn(BPF_JMP_JA, 0, 0, 0));
            }
        }
    }
    // A CPU of no run: every live thread.
    prog.extend([hash, insn(BPF_ALU_MOD_K, 0, 0, live.len() as u32)]);
    // The table of threads: position in `live` → the socket its current worker reads.
    let table = prog.len();
    for (k, &(i, _)) in live.iter().enumerate() {
        prog.push(insn(BPF_JMP_JEQ_K, 0, 1, k as u32));
        prog.push(insn(BPF_RET_K, 0, 0, group.current[i]));
    }
    prog.push(insn(BPF_RET_K, 0, 0, group.current[live[0].0]));
    for at in to_table {
        prog[at].k = (table - at - 1) as u32;
    }
    prog
}

#[cfg(test)]
mod tests {
    use super::super::steering::interpret_packet;
    use super::*;

    #[test]
    fn only_a_padded_long_header_datagram_opens_a_connection() {
        assert!(opens_a_connection(&[0xc1, 0, 0, 0, 1], 1200));
        assert!(!opens_a_connection(&[0xc1, 0, 0, 0, 1], 1199)); // not padded to 1 200
        assert!(!opens_a_connection(&[0x41], 1300)); // short header
        assert!(!opens_a_connection(&[0x81], 1300)); // no fixed bit
        assert!(!opens_a_connection(&[], 0));
    }

    const TAG: u16 = 0xbeef;

    fn short(id: &[u8]) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend(id);
        p.extend([0u8; 20]);
        p
    }

    fn long(kind: u8, id: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0 | (kind << 4), 0, 0, 0, 1, id.len() as u8];
        p.extend(id);
        p.extend([8, 1, 2, 3, 4, 5, 6, 7, 8]);
        p.extend([0u8; 20]);
        p
    }

    /// Two nodes of two CPUs; threads on CPUs 0, 1 (node 0) and 2, 3 (node 1).
    fn four(current: &[u32]) -> Vec<BpfInsn> {
        let group = QuicGroup {
            owners: &[Some(0), Some(1), Some(2), Some(3)],
            current,
            sockets: 8,
            tag: TAG,
            by_node: true,
        };
        quic_program(&group, &CpuSet::parse("0-3").unwrap(), |c| Some(c / 2)).unwrap()
    }

    #[test]
    fn a_connections_datagrams_reach_the_socket_its_id_names_from_any_cpu() {
        let prog = four(&[0, 2, 4, 6]);
        for index in 0..8u16 {
            let id = cid(TAG, index, [7; 8]);
            for cpu in 0..4 {
                assert_eq!(
                    interpret_packet(&prog, cpu, 0, &short(&id)),
                    u32::from(index)
                );
                // Handshake (2) and a client's Initial after the server's (0) carry it too.
                assert_eq!(
                    interpret_packet(&prog, cpu, 0, &long(2, &id)),
                    u32::from(index)
                );
                assert_eq!(
                    interpret_packet(&prog, cpu, 0, &long(0, &id)),
                    u32::from(index)
                );
            }
        }
    }

    #[test]
    fn a_new_connection_goes_to_its_nodes_threads_and_stays_with_one() {
        let prog = four(&[0, 2, 5, 6]);
        let mut seen = std::collections::BTreeSet::new();
        for n in 0..64u8 {
            let id = [n, n.wrapping_mul(31), 3, n ^ 0x55, 9, 9, 9, 9];
            let on_node0 = interpret_packet(&prog, 0, 0, &long(0, &id));
            assert!([0, 2].contains(&on_node0), "{on_node0}");
            // The first flight's datagrams received on the node's other CPU: same thread.
            assert_eq!(interpret_packet(&prog, 1, 0, &long(0, &id)), on_node0);
            let on_node1 = interpret_packet(&prog, 3, 0, &long(0, &id));
            assert!([5, 6].contains(&on_node1), "{on_node1}");
            seen.insert(on_node0);
            seen.insert(on_node1);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 2, 5, 6]);
    }

    #[test]
    fn after_a_recycle_new_connections_go_to_the_successor_and_old_ones_stay() {
        // Thread 0's worker was replaced: its successor reads socket 1.
        let prog = four(&[1, 2, 4, 6]);
        for n in 0..32u8 {
            let id = [n, 1, 2, 3, 4, 5, 6, n];
            assert_ne!(interpret_packet(&prog, 0, 0, &long(0, &id)), 0);
        }
        // The old worker's connection, named socket 0, still reaches it.
        let old = cid(TAG, 0, [1; 8]);
        assert_eq!(interpret_packet(&prog, 0, 0, &short(&old)), 0);
    }

    #[test]
    fn ids_that_are_not_ours_are_steered_as_new() {
        let prog = four(&[0, 2, 4, 6]);
        // Another tag, an index past the group, a shorter ID: as a new connection on node 1.
        for id in [cid(0x1234, 1, [5; 8]), cid(TAG, 8, [5; 8])] {
            assert!([4, 6].contains(&interpret_packet(&prog, 2, 0, &short(&id))));
            assert!([4, 6].contains(&interpret_packet(&prog, 2, 0, &long(0, &id))));
        }
        assert!([4, 6].contains(&interpret_packet(&prog, 3, 0, &long(0, &[TAG as u8; 8]))));
    }

    #[test]
    fn stopped_threads_and_cpus_of_nodes_without_threads_are_handled() {
        // Thread 1 (CPU 1) is not read; CPUs 4-5 (node 2) have no thread.
        let group = QuicGroup {
            owners: &[Some(0), None, Some(2)],
            current: &[0, 2, 4],
            sockets: 6,
            tag: TAG,
            by_node: true,
        };
        let prog = quic_program(&group, &CpuSet::parse("0-5").unwrap(), |c| Some(c / 2)).unwrap();
        for n in 0..32u8 {
            let id = [n, 7, n, 7, 0, 0, 0, 0];
            assert_eq!(interpret_packet(&prog, 1, 0, &long(0, &id)), 0);
            assert!([0, 4].contains(&interpret_packet(&prog, 5, 0, &long(0, &id))));
        }
        let none = QuicGroup {
            owners: &[None],
            current: &[0],
            sockets: 2,
            tag: TAG,
            by_node: true,
        };
        assert!(quic_program(&none, &CpuSet::parse("0").unwrap(), |_| Some(0)).is_none());
    }

    #[test]
    fn huge_machines_steer_by_the_id_alone_within_the_kernels_bound() {
        let online: CpuSet = (0..3000).collect();
        for threads in [1500u32, 3000] {
            let cpus: Vec<Option<u32>> = (0..threads).map(Some).collect();
            let current: Vec<u32> = (0..threads).map(|i| 2 * i + 1).collect();
            let group = QuicGroup {
                owners: &cpus,
                current: &current,
                sockets: 2 * threads,
                tag: TAG,
                by_node: true,
            };
            let prog = quic_program(&group, &online, |c| Some(c / 100)).unwrap();
            assert!(prog.len() <= MAX_INSNS);
            let id = cid(TAG, 2221, [0; 8]);
            assert_eq!(interpret_packet(&prog, 17, 0, &short(&id)), 2221);
            let picked = interpret_packet(&prog, 17, 0, &long(0, &[1, 2, 3, 4, 5, 6, 7, 8]));
            assert!(picked < 2 * threads);
            // Within the table's bound, the newest reader's socket; past it, the first.
            assert_eq!(picked % 2, u32::from(threads == 1500));
        }
    }
}
