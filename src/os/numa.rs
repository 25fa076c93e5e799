//! CPU affinity and NUMA memory policy of the calling thread or a process.
//!
//! Owns: `sched_setaffinity`/`sched_getaffinity` and `set_mempolicy`. Must not touch: which
//! CPUs or nodes (the placement plan decides).

use crate::cpuset::CpuSet;
use std::io;

fn to_cpu_set(cpus: &CpuSet) -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let capacity = std::mem::size_of::<libc::cpu_set_t>() * 8;
    for cpu in cpus.iter() {
        if cpu as usize >= capacity {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond cpu_set_t"),
            ));
        }
        // SAFETY: the index is within the set's capacity, checked above.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    }
    Ok(set)
}

/// `sched_setaffinity(tid, cpus)`; `tid` 0 is the calling thread.
pub fn set_thread_affinity(tid: libc::pid_t, cpus: &CpuSet) -> io::Result<()> {
    let set = to_cpu_set(cpus)?;
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `sched_getaffinity(tid)`; `tid` 0 is the calling thread.
pub fn thread_affinity(tid: libc::pid_t) -> io::Result<CpuSet> {
    // SAFETY: zeroed cpu_set_t is valid; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let capacity = std::mem::size_of::<libc::cpu_set_t>() * 8;
    // SAFETY: indices are within the set's capacity.
    Ok((0..capacity)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| i as u32)
        .collect())
}

/// The NUMA memory policies espalier applies (`MPOL_*` in linux/mempolicy.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemPolicyMode {
    Default,
    Preferred,
    Bind,
}

/// `set_mempolicy(mode, nodes)` for the calling thread; threads it creates afterwards inherit
/// it. Called before the worker's threads start, so the whole worker allocates on its node.
pub fn set_memory_policy(mode: MemPolicyMode, nodes: &[u32]) -> io::Result<()> {
    PreparedMemPolicy::new(mode, nodes).apply()
}

/// A memory policy built ahead of time, so that applying it is one system call and no
/// allocation — safe between `fork` and `exec`, where the master applies it so that even the
/// worker's first pages (before its own code runs) come from its node. The policy survives
/// `exec`.
pub struct PreparedMemPolicy {
    mode: libc::c_int,
    mask: Vec<libc::c_ulong>,
    maxnode: libc::c_ulong,
}

impl PreparedMemPolicy {
    pub fn new(mode: MemPolicyMode, nodes: &[u32]) -> Self {
        let (mode, nodes) = match mode {
            MemPolicyMode::Default => (libc::MPOL_DEFAULT, &[][..]),
            MemPolicyMode::Preferred => (libc::MPOL_PREFERRED, nodes),
            MemPolicyMode::Bind => (libc::MPOL_BIND, nodes),
        };
        let bits = std::mem::size_of::<libc::c_ulong>() * 8;
        let max = nodes.iter().copied().max().map_or(0, |m| m as usize + 1);
        let mut mask = vec![0 as libc::c_ulong; max.div_ceil(bits).max(1)];
        for &n in nodes {
            mask[n as usize / bits] |= 1 << (n as usize % bits);
        }
        // maxnode is the number of bits the kernel may read, plus one (a historic off-by-one).
        let maxnode = if nodes.is_empty() {
            0
        } else {
            (mask.len() * bits + 1) as libc::c_ulong
        };
        PreparedMemPolicy {
            mode,
            mask,
            maxnode,
        }
    }

    pub fn apply(&self) -> io::Result<()> {
        let mask_ptr = if self.maxnode == 0 {
            std::ptr::null()
        } else {
            self.mask.as_ptr()
        };
        // SAFETY: mask holds maxnode-1 bits and outlives the call; a null mask with
        // MPOL_DEFAULT is what the man page asks for.
        let rc =
            unsafe { libc::syscall(libc::SYS_set_mempolicy, self.mode, mask_ptr, self.maxnode) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// A CPU affinity built ahead of time, applied without allocating (see [`PreparedMemPolicy`]).
pub struct PreparedAffinity(libc::cpu_set_t);

impl PreparedAffinity {
    pub fn new(cpus: &CpuSet) -> io::Result<Self> {
        Ok(PreparedAffinity(to_cpu_set(cpus)?))
    }

    /// Applies to the calling thread (and, before `exec`, to the process it becomes).
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY: a valid cpu_set_t of the size passed.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Sets the CPU affinity of every thread of process `pid` (read from `/proc/PID/task`).
pub fn set_process_affinity(pid: u32, cpus: &CpuSet) -> io::Result<()> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: libc::pid_t = task?
            .file_name()
            .to_string_lossy()
            .parse()
            .map_err(|_| io::Error::other("bad task id"))?;
        set_thread_affinity(tid, cpus)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_round_trips_on_this_thread() {
        let before = thread_affinity(0).unwrap();
        let first = CpuSet::from_ids([before.first().unwrap()]);
        std::thread::spawn(move || {
            set_thread_affinity(0, &first).unwrap();
            assert_eq!(thread_affinity(0).unwrap(), first);
        })
        .join()
        .unwrap();
        assert_eq!(
            thread_affinity(0).unwrap(),
            before,
            "other threads are untouched"
        );
    }

    #[test]
    fn memory_policy_applies_to_node_zero() {
        std::thread::spawn(|| {
            set_memory_policy(MemPolicyMode::Preferred, &[0]).unwrap();
            set_memory_policy(MemPolicyMode::Bind, &[0]).unwrap();
            set_memory_policy(MemPolicyMode::Default, &[]).unwrap();
            assert!(
                set_memory_policy(MemPolicyMode::Bind, &[200]).is_err(),
                "a node that does not exist"
            );
        })
        .join()
        .unwrap();
    }
}
