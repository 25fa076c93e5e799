//! Connection steering: which listener socket of a reuseport group accepts a connection that
//! the kernel received on CPU k — the case study's "traffic received on a NIC is processed by
//! a core on the same node", end to end.
//!
//! Owns: the pure part — the CPU → socket table and the classic-BPF program that encodes it.
//! Must not touch: sockets (attaching the program is [`crate::os::net::attach_reuseport_cbpf`]).
//!
//! The master creates one socket per worker thread, sorted by the thread's node and then its
//! CPU, so a socket's index in the group is its position in that order, a node's sockets sit
//! together, and threads sharing a CPU (workers of a pool with `placement = "none"`) sit next
//! to each other. The table maps every CPU to a run `[start, start + count)` of sockets, one of
//! which is picked at random:
//! - a CPU owned by threads → those threads' sockets;
//! - a CPU owned by no thread → every socket of its node — traffic that lands on a CPU the pool
//!   does not use (a NIC queue outside the pool's `cpus`, or a loopback client) is spread over
//!   the node's threads as RSS would spread it, never piled on one;
//! - a node with no thread at all → every socket.

use crate::cpuset::CpuSet;

pub use crate::os::net::BpfInsn;

// Classic BPF opcodes and ancillary offsets (linux/filter.h, linux/bpf_common.h); the
// packet loads and the jumps past JEQ are for the QUIC program (`super::quic_steering`).
/// BPF_LD | BPF_W | BPF_ABS (BPF_LD and BPF_W are 0).
pub(super) const BPF_LD_W_ABS: u16 = 0x20;
/// BPF_LD | BPF_H | BPF_ABS: 16 bits, big-endian, at an offset of the packet.
pub(super) const BPF_LD_H_ABS: u16 = 0x28;
/// BPF_LD | BPF_B | BPF_ABS.
pub(super) const BPF_LD_B_ABS: u16 = 0x30;
/// BPF_JMP | BPF_JA: forward by `k`, whatever A holds.
pub(super) const BPF_JMP_JA: u16 = 0x05;
pub(super) const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
pub(super) const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
pub(super) const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
pub(super) const BPF_RET_K: u16 = 0x06;
pub(super) const BPF_RET_A: u16 = 0x06 | 0x10;
pub(super) const BPF_ALU_MOD_K: u16 = 0x04 | 0x90;
pub(super) const BPF_ALU_ADD_K: u16 = 0x04;
pub(super) const BPF_ALU_MUL_K: u16 = 0x04 | 0x20;
pub(super) const SKF_AD_OFF: i32 = -0x1000;
pub(super) const SKF_AD_CPU: i32 = 36;
const SKF_AD_RANDOM: i32 = 56;
/// The kernel refuses classic programs longer than this (BPF_MAXINSNS).
pub(super) const MAX_INSNS: usize = 4096;

/// A run of socket indices in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketRun {
    pub start: u32,
    pub count: u32,
}

/// The order sockets are created in: by node, then CPU.
pub fn socket_order_key(cpu: u32, node_of: impl Fn(u32) -> Option<u32>) -> (u32, u32) {
    (node_of(cpu).unwrap_or(u32::MAX), cpu)
}

/// The run of socket indices `members` (sorted) forms; where they have holes (sockets of a
/// stopped pool left out), the longest contiguous part of them.
fn run_of(members: &[u32]) -> Option<SocketRun> {
    let mut best: Option<SocketRun> = None;
    let mut k = 0;
    while k < members.len() {
        let mut end = k + 1;
        while end < members.len() && members[end] == members[end - 1] + 1 {
            end += 1;
        }
        let run = SocketRun {
            start: members[k],
            count: (end - k) as u32,
        };
        if best.is_none_or(|b| run.count > b.count) {
            best = Some(run);
        }
        k = end;
    }
    best
}

/// CPU → socket run, for every online CPU of the machine. `thread_cpus[i]` is the CPU of the
/// thread owning socket `i`, in [`socket_order_key`] order.
pub fn steering_table(
    thread_cpus: &[u32],
    online: &CpuSet,
    node_of: impl Fn(u32) -> Option<u32>,
) -> Vec<(u32, SocketRun)> {
    let cpus: Vec<Option<u32>> = thread_cpus.iter().map(|&c| Some(c)).collect();
    steering_table_of(&cpus, online, node_of)
}

/// As [`steering_table`], where a `None` socket is never chosen (its pool is stopped).
pub fn steering_table_of(
    thread_cpus: &[Option<u32>],
    online: &CpuSet,
    node_of: impl Fn(u32) -> Option<u32>,
) -> Vec<(u32, SocketRun)> {
    let live: Vec<(u32, u32)> = thread_cpus
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i as u32, (*c)?)))
        .collect();
    debug_assert!(
        live.windows(2)
            .all(|w| socket_order_key(w[0].1, &node_of) <= socket_order_key(w[1].1, &node_of)),
        "sockets are created in (node, CPU) order"
    );
    let all: Vec<u32> = live.iter().map(|&(i, _)| i).collect();
    let mut table = Vec::new();
    for cpu in online.iter() {
        let owned: Vec<u32> = live
            .iter()
            .filter(|&&(_, c)| c == cpu)
            .map(|&(i, _)| i)
            .collect();
        let node = node_of(cpu);
        let same_node: Vec<u32> = live
            .iter()
            .filter(|&&(_, c)| node.is_some() && node_of(c) == node)
            .map(|&(i, _)| i)
            .collect();
        let run = run_of(&owned)
            .or_else(|| run_of(&same_node))
            .or_else(|| run_of(&all))
            .unwrap_or(SocketRun { start: 0, count: 1 });
        table.push((cpu, run));
    }
    table
}

pub(super) fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
    BpfInsn { code, jt, jf, k }
}

/// The program: load the receiving CPU, find its run, return a socket index in it.
/// Falls back to `cpu % sockets` when the table would not fit in one program.
pub fn steering_program(table: &[(u32, SocketRun)], sockets: u32) -> Vec<BpfInsn> {
    let load_cpu = insn(BPF_LD_W_ABS, 0, 0, (SKF_AD_OFF + SKF_AD_CPU) as u32);
    let modulo = [
        insn(BPF_ALU_MOD_K, 0, 0, sockets.max(1)),
        insn(BPF_RET_A, 0, 0, 0),
    ];
    let mut prog = vec![load_cpu];
    for &(cpu, run) in table {
        if run.count <= 1 {
            prog.push(insn(BPF_JMP_JEQ_K, 0, 1, cpu));
            prog.push(insn(BPF_RET_K, 0, 0, run.start));
        } else {
            prog.push(insn(BPF_JMP_JEQ_K, 0, 4, cpu));
            prog.push(insn(
                BPF_LD_W_ABS,
                0,
                0,
                (SKF_AD_OFF + SKF_AD_RANDOM) as u32,
            ));
            prog.push(insn(BPF_ALU_MOD_K, 0, 0, run.count));
            prog.push(insn(BPF_ALU_ADD_K, 0, 0, run.start));
            prog.push(insn(BPF_RET_A, 0, 0, 0));
        }
    }
    prog.extend(modulo);
    if prog.len() > MAX_INSNS {
        let mut short = vec![load_cpu];
        short.extend(modulo);
        return short;
    }
    prog
}

/// Runs a program the way the kernel would for a connection received on `cpu`, with `random`
/// as the random number; used by the tests to check programs without a kernel.
pub fn interpret(prog: &[BpfInsn], cpu: u32, random: u32) -> u32 {
    interpret_packet(prog, cpu, random, &[])
}

/// As [`interpret`], for a datagram whose payload is `packet` (what a UDP reuseport program
/// loads from). A load past its end ends the program with 0, as in the kernel.
pub fn interpret_packet(prog: &[BpfInsn], cpu: u32, random: u32, packet: &[u8]) -> u32 {
    let load = |k: u32, width: usize| -> Option<u32> {
        let bytes = packet.get(k as usize..(k as usize).checked_add(width)?)?;
        Some(bytes.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b)))
    };
    let mut a: u32 = 0;
    let mut pc = 0;
    while pc < prog.len() {
        let i = prog[pc];
        let jump = |taken: bool| 1 + if taken { i.jt as usize } else { i.jf as usize };
        match i.code {
            BPF_LD_W_ABS if i.k == (SKF_AD_OFF + SKF_AD_CPU) as u32 => a = cpu,
            BPF_LD_W_ABS if i.k == (SKF_AD_OFF + SKF_AD_RANDOM) as u32 => a = random,
            BPF_LD_W_ABS | BPF_LD_H_ABS | BPF_LD_B_ABS => {
                let width = match i.code {
                    BPF_LD_W_ABS => 4,
                    BPF_LD_H_ABS => 2,
                    _ => 1,
                };
                match load(i.k, width) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            BPF_JMP_JA => {
                pc += 1 + i.k as usize;
                continue;
            }
            BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                pc += jump(match i.code {
                    BPF_JMP_JEQ_K => a == i.k,
                    BPF_JMP_JGE_K => a >= i.k,
                    _ => a & i.k != 0,
                });
                continue;
            }
            BPF_RET_K => return i.k,
            BPF_RET_A => return a,
            BPF_ALU_MOD_K => a %= i.k,
            BPF_ALU_ADD_K => a = a.wrapping_add(i.k),
            BPF_ALU_MUL_K => a = a.wrapping_mul(i.k),
            other => panic!("unexpected opcode {other:#x}"),
        }
        pc += 1;
    }
    panic!("program fell off its end")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_of_8x2(cpu: u32) -> Option<u32> {
        Some(cpu / 2)
    }

    #[test]
    fn owned_cpus_go_to_their_thread() {
        let online = CpuSet::parse("0-3").unwrap();
        let table = steering_table(&[0, 1, 2, 3], &online, |_| Some(0));
        let prog = steering_program(&table, 4);
        for cpu in 0..4 {
            assert_eq!(interpret(&prog, cpu, 12345), cpu);
        }
    }

    #[test]
    fn unowned_cpus_spread_over_their_node() {
        // Threads on CPUs 2 and 3 (node 1) and 4 (node 2); CPUs 0-1 (node 0) have none.
        let online = CpuSet::parse("0-5").unwrap();
        let threads = [2, 3, 4];
        let table = steering_table(&threads, &online, node_of_8x2);
        let prog = steering_program(&table, 3);
        assert_eq!(interpret(&prog, 2, 0), 0);
        assert_eq!(interpret(&prog, 4, 0), 2);
        // CPU 5 is on node 2 with the thread of CPU 4 → socket 2.
        assert_eq!(interpret(&prog, 5, 7), 2);
        // CPUs 0 and 1: node 0 has no thread → spread over all sockets.
        let picked: std::collections::BTreeSet<u32> =
            (0..6).map(|r| interpret(&prog, 0, r)).collect();
        assert_eq!(picked.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn a_node_with_unowned_cpus_shares_them_among_its_threads() {
        // One node, threads on CPUs 0-2; the load generator's CPU 3 is owned by none: its
        // connections go to all three threads, not one.
        let online = CpuSet::parse("0-3").unwrap();
        let table = steering_table(&[0, 1, 2], &online, |_| Some(0));
        let prog = steering_program(&table, 3);
        let picked: std::collections::BTreeSet<u32> =
            (0..9).map(|r| interpret(&prog, 3, r)).collect();
        assert_eq!(picked.len(), 3);
        assert_eq!(
            interpret(&prog, 1, 5),
            1,
            "owned CPUs still go to their own thread"
        );
    }

    #[test]
    fn shared_cpus_spread_randomly_over_their_run() {
        // Two workers with placement none: each has threads on CPUs 0 and 1.
        let online = CpuSet::parse("0-1").unwrap();
        let table = steering_table(&[0, 0, 1, 1], &online, |_| Some(0));
        let prog = steering_program(&table, 4);
        assert_eq!(interpret(&prog, 0, 0), 0);
        assert_eq!(interpret(&prog, 0, 1), 1);
        assert_eq!(interpret(&prog, 1, 6), 2);
        assert_eq!(interpret(&prog, 1, 7), 3);
    }

    #[test]
    fn a_stopped_pools_sockets_are_never_chosen() {
        // Sockets 0-3: CPUs 0,0,1,1 (pools a and b on each CPU); pool b (sockets 1 and 3)
        // is stopped; CPUs 2-3 own nothing.
        let online = CpuSet::parse("0-3").unwrap();
        let table = steering_table_of(&[Some(0), None, Some(1), None], &online, |_| Some(0));
        let prog = steering_program(&table, 4);
        for r in 0..8 {
            assert_eq!(interpret(&prog, 0, r), 0);
            assert_eq!(interpret(&prog, 1, r), 2);
            assert!([0, 2].contains(&interpret(&prog, 3, r)));
        }
    }

    #[test]
    fn huge_machines_fall_back_to_modulo() {
        let online: CpuSet = (0..3000).collect();
        let threads: Vec<u32> = (0..3000).collect();
        let table = steering_table(&threads, &online, |c| Some(c / 100));
        let prog = steering_program(&table, 3000);
        assert!(prog.len() <= MAX_INSNS);
        assert_eq!(interpret(&prog, 2999, 0), 2999);
    }
}
