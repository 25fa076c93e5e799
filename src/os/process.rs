//! Processes: handing file descriptors to a child, signals, reaping, and reading /proc.
//!
//! Owns: those syscalls and small /proc readers. Must not touch: when to start or stop a
//! worker (the supervisor decides).

use std::io;
use std::os::fd::RawFd;

/// The running executable, opened once, and the path it was started from.
struct OwnExecutable {
    file: Option<std::fs::File>,
    name: std::path::PathBuf,
}

static OWN_EXE: std::sync::OnceLock<OwnExecutable> = std::sync::OnceLock::new();

fn own() -> &'static OwnExecutable {
    OWN_EXE.get_or_init(|| OwnExecutable {
        file: std::fs::File::open("/proc/self/exe").ok(),
        name: std::env::current_exe().unwrap_or_else(|_| "espalier".into()),
    })
}

/// Opens the running executable, once: call it at start, before anything could replace the
/// file (a package upgrade or a rebuild unlinks it and writes a new one).
pub fn hold_own_executable() {
    own();
}

/// A path that starts the executable this process runs, even after its file was replaced or
/// removed: its own path while that still names the same file (so wrappers that exec it
/// again, such as valgrind's `--trace-children`, work as usual), else `/proc/self/fd/N` of
/// the descriptor [`hold_own_executable`] opened (a forked child has the same descriptor,
/// and exec opens the file before close-on-exec closes it).
pub fn own_executable() -> io::Result<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    let own = own();
    let Some(f) = &own.file else {
        return std::env::current_exe();
    };
    let same = |held: &std::fs::Metadata, named: &std::fs::Metadata| {
        held.dev() == named.dev() && held.ino() == named.ino()
    };
    match (f.metadata(), std::fs::metadata(&own.name)) {
        (Ok(held), Ok(named)) if same(&held, &named) => Ok(own.name.clone()),
        _ => Ok(std::path::PathBuf::from(format!(
            "/proc/self/fd/{}",
            f.as_raw_fd()
        ))),
    }
}

/// The path the executable was started from: the `argv[0]` its children get, so `ps`,
/// `pgrep -f` and service managers show `/usr/bin/espalier worker …`, not `/proc/self/fd/N`.
pub fn own_executable_name() -> &'static std::path::Path {
    &own().name
}

/// Clears `O_NONBLOCK` on `fd`: sockets passed to an application by socket activation are
/// blocking, as systemd passes them (`NonBlocking=no`); a program that accepts in a blocking
/// loop (Perl's `HTTP::Daemon`) would otherwise see `EAGAIN` and stop.
pub fn set_blocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clears close-on-exec on `fd`, so a child started after this (in `pre_exec`) inherits it.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    set_cloexec_flag(fd, false)
}

/// Sets close-on-exec on `fd`.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    set_cloexec_flag(fd, true)
}

fn set_cloexec_flag(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `signal` to process `pid`. A process that is already gone is not an error.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes plain integers.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(s) => write!(
                f,
                "signal {s}{}",
                signal_name(*s)
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
        }
    }
}

fn signal_name(s: i32) -> Option<&'static str> {
    Some(match s {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGBUS => "SIGBUS",
        _ => return None,
    })
}

/// Reaps one exited child without blocking: `Some((pid, status))`, or `None` when no child
/// has exited.
pub fn reap_child() -> Option<(u32, ExitStatus)> {
    let mut status: libc::c_int = 0;
    // SAFETY: status is a valid pointer.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
    if pid <= 0 {
        return None;
    }
    let st = if libc::WIFEXITED(status) {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    } else {
        ExitStatus::Signal(libc::WTERMSIG(status))
    };
    Some((pid as u32, st))
}

/// Asks the kernel to send SIGTERM to this process when its parent dies, so a worker never
/// outlives a master that was killed with SIGKILL.
pub fn die_with_parent() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This process's limits on open files.
fn nofile_limits() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

/// The current limit on open files (the soft one, which is what `open` meets).
pub fn descriptor_limit() -> io::Result<u64> {
    Ok(nofile_limits()?.rlim_cur)
}

/// Raises this process's soft descriptor limit to its hard limit (as nginx's
/// `worker_rlimit_nofile` and systemd's `LimitNOFILE=` do): the soft limit a shell leaves is
/// often 1024 while the hard one allows far more. When `needed` is more than the hard limit,
/// root raises the hard one too (to `needed`, at most the kernel's `nr_open`). Returns the
/// limit now in force.
pub fn raise_descriptor_limit(needed: u64) -> io::Result<u64> {
    let lim = nofile_limits()?;
    // Root (CAP_SYS_RESOURCE) may raise the hard limit too, up to the kernel's `nr_open`: a
    // hoster's thousands of pools take a socket per listening CPU and address each.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<libc::rlim_t>().ok());
    let wanted = nr_open.map(|n| n.min(needed as libc::rlim_t));
    if let Some(max) = wanted.filter(|&m| m > lim.rlim_max) {
        let raised = libc::rlimit {
            rlim_cur: max,
            rlim_max: max,
        };
        // SAFETY: setrlimit reads the struct we pass; EPERM (not root) leaves it unchanged.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(max);
        }
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
    }
    Ok(lim.rlim_cur)
}

/// Gives this process's stdout and stderr, when they are pipes (the master's, capturing an
/// app's output), to `uid`/`gid` before it becomes that user: a program that reopens them by
/// path (php-fpm's `error_log = /proc/self/fd/2`) is then allowed to, as with a terminal
/// or systemd's journal stream.
pub fn give_output_pipes(uid: u32, gid: u32) {
    for fd in [1, 2] {
        // SAFETY: fstat and fchown on this process's own standard descriptors; `st` is ours.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO {
                libc::fchown(fd, uid, gid);
            }
        }
    }
}

/// Makes this process non-dumpable: no process of the same user (a pool's app code) may
/// ptrace it or read its memory, environment or descriptors in /proc — OpenSSH's defence
/// for its privilege-separated children. A change of user resets it, so it is set after.
pub fn not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The OOM killer's preference for this process (`/proc/self/oom_score_adj`, -1000 to 1000;
/// lowering it needs root). The master lowers its own and its workers and apps raise theirs,
/// so that under memory pressure a pool's process dies before the master.
pub fn set_oom_score_adj(value: i32) -> io::Result<()> {
    std::fs::write("/proc/self/oom_score_adj", value.to_string())
}

/// A process and all its descendants (from every thread's `/proc/PID/task/TID/children`),
/// parents first: an application's whole tree — gunicorn's arbiter and its workers.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut k = 0;
    while k < tree.len() {
        let p = tree[k];
        k += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for c in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if !tree.contains(&c) {
                    tree.push(c);
                }
            }
        }
    }
    tree
}

/// Resident memory of `pids` together (a process tree), in bytes; `None` when none is there.
pub fn resident_bytes_of(pids: &[u32]) -> Option<u64> {
    let sizes: Vec<u64> = pids.iter().filter_map(|&p| resident_bytes(p)).collect();
    (!sizes.is_empty()).then(|| sizes.iter().sum())
}

/// Resident memory of a process, from `/proc/PID/statm`.
pub fn resident_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf takes an integer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page.max(4096) as u64)
}

/// Seconds since local midnight (for recycle schedules).
pub fn local_second_of_day() -> u32 {
    // SAFETY: time and localtime_r write only into the values passed.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&now, &mut tm).is_null() {
            return 0;
        }
        (tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) as u32
    }
}

/// Spawns `cmd` with placement applied between fork and exec: the fds in `inherit` lose
/// close-on-exec, the memory policy and CPU affinity prepared before the fork are applied
/// (failures are left for the child to report: it applies both again), and the child gets
/// SIGTERM when its parent dies.
pub fn spawn_placed(
    cmd: &mut std::process::Command,
    inherit: Vec<RawFd>,
    policy: super::numa::PreparedMemPolicy,
    affinity: Option<super::numa::PreparedAffinity>,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only async-signal-safe system calls run (fcntl, prctl,
    // set_mempolicy, sched_setaffinity), on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                clear_cloexec(fd)?;
            }
            let _ = policy.apply();
            if let Some(a) = &affinity {
                let _ = a.apply();
            }
            die_with_parent()
        });
    }
    cmd.spawn()
}

/// Takes ownership of a Unix stream socket this process inherited.
///
/// # Safety contract (checked by the caller's protocol, not here)
/// `fd` must be an open socket handed to this process for its exclusive use; the worker gets
/// its control socket's number from the master, which created it for that worker alone.
pub fn adopt_unix_stream(fd: RawFd) -> std::os::unix::net::UnixStream {
    use std::os::fd::FromRawFd;
    // SAFETY: see the contract above: the fd is open, a socket, and owned by no one else.
    unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) }
}

/// Takes ownership of a descriptor this process inherited (a worker thread's hand-off
/// socket), under [`adopt_unix_stream`]'s contract: open, and handed to this process for the
/// caller's exclusive use.
pub fn adopt_fd(fd: RawFd) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: see the contract above.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

/// A descriptor of its own (close-on-exec) for the open file `fd` names, which the caller
/// keeps open meanwhile.
pub fn duplicate(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: fcntl duplicates a descriptor number; an invalid one fails with EBADF.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` was just made and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(copy) })
}

/// A sealed in-memory file (`memfd_create`) holding `bytes`, its offset at the start: what
/// the master hands a worker (its spec), which may be far larger than an environment variable
/// or an argument can be (the kernel's limit is 128 KiB for one). Close-on-exec: the spawn
/// passes it to the one child that reads it. Sealed, so the reader sees what was written.
pub fn sealed_memfd(name: &str, bytes: &[u8]) -> io::Result<std::os::fd::OwnedFd> {
    use std::io::{Seek, Write};
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `name` is a valid C string for the call's duration.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    let seals = libc::F_SEAL_WRITE | libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::os::fd::OwnedFd::from(file))
}

/// Reads the whole of descriptor `fd`, inherited for this purpose alone, and closes it (see
/// [`sealed_memfd`]).
///
/// # Safety contract (checked by the caller's protocol, not here)
/// `fd` must be open and handed to this process for its exclusive use: the worker gets the
/// number from the master, which made the file for that worker alone.
pub fn read_inherited(fd: RawFd) -> io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    if fd < 0 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: see the contract above: the fd is open and owned by no one else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The text of `/proc/stat` (per-CPU times, for soft affinity's load sample), or "" where it
/// cannot be read.
pub fn proc_stat() -> String {
    std::fs::read_to_string("/proc/stat").unwrap_or_default()
}

/// Moves the descriptors `fds` to `first`, `first + 1`, … in order, without close-on-exec, as
/// socket activation hands them over (fd 3 onwards). A descriptor already at a target number
/// is handled: all are first duplicated above every target, then put in place. The
/// duplicates and originals outside the targets keep close-on-exec.
pub fn place_fds(fds: &[RawFd], first: RawFd) -> io::Result<()> {
    let high = dup_above(fds, first + fds.len() as RawFd)?;
    let placed = put_at(&high, first);
    for d in high {
        // SAFETY: closes our own duplicate.
        unsafe { libc::close(d) };
    }
    placed
}

/// Close-on-exec duplicates of `fds`, each numbered `above` or higher: none is at a number
/// [`put_at`] then writes over.
fn dup_above(fds: &[RawFd], above: RawFd) -> io::Result<Vec<RawFd>> {
    let mut high = Vec::with_capacity(fds.len());
    for &fd in fds {
        // SAFETY: fcntl duplicates an fd this process owns; no memory is passed.
        let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above) };
        if d < 0 {
            let e = io::Error::last_os_error();
            for d in high {
                // SAFETY: closes a duplicate made above.
                unsafe { libc::close(d) };
            }
            return Err(e);
        }
        high.push(d);
    }
    Ok(high)
}

/// Puts `high` (from [`dup_above`]) at `first`, `first + 1`, …, close-on-exec cleared. Only
/// `dup2`: async-signal-safe, so it may run between fork and exec.
fn put_at(high: &[RawFd], first: RawFd) -> io::Result<()> {
    for (k, &d) in high.iter().enumerate() {
        // SAFETY: dup2 onto a number this process reserves for the handed-over sockets;
        // the new descriptor has close-on-exec cleared, as the exec'd program needs.
        if unsafe { libc::dup2(d, first + k as RawFd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Spawns `cmd` with the descriptors `fds` at 3, 4, … in order (as socket activation hands
/// them over), and nothing else of this process's open descriptors: a new master taking
/// over an upgrading one's sockets. The copies are made before the fork (so the child only
/// moves descriptors, as it may between fork and exec); the child outlives this process.
pub fn spawn_passing(
    cmd: &mut std::process::Command,
    fds: &[RawFd],
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let raw = dup_above(fds, 3 + fds.len() as RawFd)?;
    let high: Vec<_> = raw.iter().map(|&d| adopt_fd(d)).collect();
    // SAFETY: between fork and exec only `put_at` runs (dup2 alone, async-signal-safe),
    // over a list made before the fork.
    unsafe {
        cmd.pre_exec(move || put_at(&raw, 3));
    }
    let child = cmd.spawn();
    drop(high);
    child
}

/// The variable an upgrading master names the new master's readiness socket by (see
/// [`spawn_passing`]).
pub const UPGRADE_READY_FD: &str = "ESPALIER_UPGRADE_READY_FD";

/// The socket on which this master, started by an upgrading one, says it serves: taken
/// once at start (close-on-exec, its variable removed, so no child sees either).
pub fn take_upgrade_ready() -> Option<std::os::unix::net::UnixStream> {
    let fd: RawFd = std::env::var(UPGRADE_READY_FD).ok()?.parse().ok()?;
    std::env::remove_var(UPGRADE_READY_FD);
    // SAFETY: fstat writes only into `st`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return None;
    }
    let _ = set_cloexec(fd);
    Some(adopt_unix_stream(fd))
}

/// Makes this process the leader of a new process group, so that the whole tree an
/// application starts (gunicorn's workers, say) can be killed with one signal.
pub fn own_process_group() -> io::Result<()> {
    // SAFETY: setpgid with integer arguments.
    if unsafe { libc::setpgid(0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to every process of the group led by `pgid`. A group that is gone is not
/// an error.
pub fn kill_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes plain integers; a negative pid names a process group.
    if unsafe { libc::kill(-(pgid as libc::pid_t), signal) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Whether this process runs as root (effective user 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_tree_holds_the_children_and_theirs() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let sh = child.id();
        let mut tree = Vec::new();
        for _ in 0..100 {
            tree = super::process_tree(std::process::id());
            if tree.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = super::kill_group(sh, libc::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&sh), "{tree:?}");
        assert!(tree.len() >= 3, "the sleep under sh: {tree:?}");
    }
}
