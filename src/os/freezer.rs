//! Freezing a process tree and giving back its memory: IIS 8.5's idle page-out on Linux.
//!
//! Owns: the freezer cgroups (`cgroup.freeze` in the unified hierarchy; the v1 `freezer`
//! controller's `freezer.state` where only v1 has it), moving a process and its descendants
//! into one, and reclaim — `memory.reclaim` where the group has the v2 memory controller,
//! else `process_madvise(MADV_PAGEOUT)` over every mapping of every process. Must not touch:
//! when a process is frozen or thawed (the supervisor decides).
//!
//! Why a cgroup and not SIGSTOP: a stop is seen by the process's parent (and a shell's job
//! control), and must reach every descendant one by one — a gunicorn or php-fpm master and
//! its children, some forked meanwhile. A frozen cgroup holds every task in it, children
//! forked later included, and thaws them at once; nothing in it can tell.
//!
//! Where the group is made: the unified hierarchy's group is a child of the process's own
//! (so a worker's cpuset or CPU cap still applies to it, the child's limits being its
//! parent's); v1's under the `freezer` hierarchy's `espalier-<master pid>/`.
//!
//! Reclaim and swap: without swap the kernel cannot page anonymous memory out, so what comes
//! back is the file-backed pages (the program's and its libraries' text, its page cache); with
//! swap the heap goes too. The freeze stands either way.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long freezing may take before it is called failed (the kernel stops each task at its
/// next return to user space; a task in a long uninterruptible sleep delays it).
const FREEZE_WAIT: Duration = Duration::from_secs(2);

/// The start of a freezer group's name: `espalier-suspend-<master pid>-<pool>-<index>`.
pub const GROUP_PREFIX: &str = "espalier-suspend-";

/// The freezer this machine offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freezer {
    /// The unified hierarchy mounted at `root` (`cgroup.freeze`, Linux 5.2+).
    V2 { root: PathBuf },
    /// The v1 `freezer` controller's hierarchy at `root`.
    V1 { root: PathBuf },
}

/// Finds a freezer under `base` (normally `/sys/fs/cgroup`): the unified hierarchy where it
/// has `cgroup.freeze` (it is in every non-root group; its root has `cgroup.procs` and
/// `cgroup.controllers`), else v1's; `prefer_v1` checks v1 first (for tests of both on a
/// machine that has both).
pub fn detect(base: &Path, prefer_v1: bool) -> Option<Freezer> {
    let v2 = [base.to_path_buf(), base.join("unified")]
        .into_iter()
        .find(|r| r.join("cgroup.controllers").exists())
        .map(|root| Freezer::V2 { root });
    let v1 = Some(base.join("freezer"))
        .filter(|r| r.join("tasks").exists())
        .map(|root| Freezer::V1 { root });
    if prefer_v1 {
        v1.or(v2)
    } else {
        v2.or(v1)
    }
}

/// A frozen (or thawed, kept for the next freeze) group: where it is and its interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezeGroup {
    pub dir: PathBuf,
    v2: bool,
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `pid`'s group in the unified hierarchy, from `/proc/PID/cgroup`'s `0::/path`.
fn v2_group_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().trim_start_matches('/').to_string())
}

impl Freezer {
    /// Moves `pids` (a process first, then its descendants) into a freezer group named
    /// `name` and freezes it; returns once every task is frozen.
    pub fn freeze(&self, name: &str, pids: &[u32]) -> Result<FreezeGroup, String> {
        let first = *pids.first().ok_or("no process to freeze")?;
        let group = match self {
            Freezer::V2 { root } => {
                let own = v2_group_of(first).ok_or("the process has no unified cgroup")?;
                // Already in its freezer group (frozen before, thawed since): stay there.
                let current = root.join(&own);
                let dir = if current
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy() == name)
                {
                    current
                } else {
                    current.join(name)
                };
                FreezeGroup { dir, v2: true }
            }
            Freezer::V1 { root } => FreezeGroup {
                dir: root
                    .join(format!("espalier-{}", std::process::id()))
                    .join(name),
                v2: false,
            },
        };
        std::fs::create_dir_all(&group.dir)
            .map_err(|e| format!("cannot create {}: {e}", group.dir.display()))?;
        let _ = std::fs::set_permissions(&group.dir, std::fs::Permissions::from_mode(0o755));
        for pid in pids {
            // A process that exited meanwhile is no error.
            if let Err(e) = write(&group.dir.join("cgroup.procs"), &pid.to_string()) {
                if super::process::kill(*pid, 0).is_ok() {
                    return Err(e);
                }
            }
        }
        group.set(true)?;
        Ok(group)
    }
}

impl Freezer {
    /// Ends what servers that are gone left frozen: their processes would otherwise hold their
    /// ports and queues forever (a frozen process cannot act on the SIGTERM its master's death
    /// sent it). Looked for where this master would make its own groups — under its own
    /// unified group (descending only into `espalier-*` groups), or v1's `espalier-<pid>/` —
    /// and only groups whose master (the pid in the name) is no running `espalier serve`. Each
    /// is thawed, its processes killed, and removed. How many processes were ended.
    pub fn end_leftovers(&self) -> usize {
        let groups = match self {
            Freezer::V2 { root } => {
                let Some(own) = v2_group_of(std::process::id()) else {
                    return 0;
                };
                let mut found = Vec::new();
                leftover_v2_groups(&root.join(own), 0, &mut found);
                found
                    .into_iter()
                    .map(|dir| FreezeGroup { dir, v2: true })
                    .collect::<Vec<_>>()
            }
            Freezer::V1 { root } => std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_prefix("espalier-")
                        .and_then(|pid| pid.parse().ok())
                        .is_some_and(master_gone)
                })
                .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
                .filter(|e| e.path().is_dir())
                .map(|e| FreezeGroup {
                    dir: e.path(),
                    v2: false,
                })
                .collect(),
        };
        let mut ended = 0;
        for g in groups {
            let procs_file = g.dir.join(if g.v2 { "cgroup.procs" } else { "tasks" });
            let pids = |f: &Path| -> Vec<u32> {
                std::fs::read_to_string(f)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect()
            };
            let _ = g.set(false);
            for pid in pids(&procs_file) {
                if super::process::kill(pid, libc::SIGKILL).is_ok() {
                    ended += 1;
                }
            }
            let deadline = Instant::now() + FREEZE_WAIT;
            while !pids(&procs_file).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = std::fs::remove_dir(&g.dir);
            if !g.v2 {
                if let Some(parent) = g.dir.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
        }
        ended
    }
}

/// The `espalier-suspend-<pid>-…` groups under `dir` whose master is gone, descending only
/// into `espalier-*` groups, at most 6 deep.
fn leftover_v2_groups(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if depth > 6 {
        return;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("espalier-") || !e.path().is_dir() {
            continue;
        }
        let master = name
            .strip_prefix(GROUP_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse().ok());
        match master {
            Some(pid) if master_gone(pid) => found.push(e.path()),
            Some(_) => {}
            None => leftover_v2_groups(&e.path(), depth + 1, found),
        }
    }
}

/// Whether `pid` is no running `espalier serve` (gone, or its number reused by another).
fn master_gone(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !cmdline.split(|&b| b == 0).any(|a| a == b"serve")
}

impl FreezeGroup {
    fn set(&self, frozen: bool) -> Result<(), String> {
        let (file, value) = match (self.v2, frozen) {
            (true, true) => ("cgroup.freeze", "1"),
            (true, false) => ("cgroup.freeze", "0"),
            (false, true) => ("freezer.state", "FROZEN"),
            (false, false) => ("freezer.state", "THAWED"),
        };
        write(&self.dir.join(file), value)?;
        if !frozen {
            return Ok(());
        }
        let deadline = Instant::now() + FREEZE_WAIT;
        while !self.is_frozen() {
            if Instant::now() >= deadline {
                let _ = self.set(false);
                return Err(format!(
                    "{} did not freeze within {}s",
                    self.dir.display(),
                    FREEZE_WAIT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Whether every task in the group is frozen now.
    pub fn is_frozen(&self) -> bool {
        if self.v2 {
            std::fs::read_to_string(self.dir.join("cgroup.events"))
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "frozen 1"))
        } else {
            std::fs::read_to_string(self.dir.join("freezer.state"))
                .is_ok_and(|t| t.trim() == "FROZEN")
        }
    }

    /// Lets the group's tasks run again.
    pub fn thaw(&self) -> Result<(), String> {
        self.set(false)
    }

    /// Gives back the group's memory: `memory.reclaim` where the group has it, else each of
    /// `pids`' mappings paged out. The bytes the kernel was asked to reclaim are not what it
    /// reclaimed; the caller measures resident memory before and after.
    pub fn reclaim(&self, pids: &[u32]) -> Result<(), String> {
        let file = self.dir.join("memory.reclaim");
        // A large request: the kernel reclaims what it can and says EAGAIN for the rest.
        if file.exists() && std::fs::write(&file, "1T").is_ok() {
            return Ok(());
        }
        let mut last = Ok(());
        for &pid in pids {
            if let Err(e) = page_out(pid) {
                last = Err(format!("process_madvise(MADV_PAGEOUT) of pid {pid}: {e}"));
            }
        }
        last
    }

    /// Removes the group (empty once its processes are gone); thawed first, as a frozen v1
    /// group's tasks could not even die.
    pub fn remove(&self) {
        let _ = self.set(false);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Asks the kernel to page out every mapping of `pid` (`process_madvise(MADV_PAGEOUT)`,
/// Linux 5.10+; needs `CAP_SYS_NICE` over another user's process). The kernel's own special
/// mappings are left out, since the call refuses them.
pub fn page_out(pid: u32) -> io::Result<()> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    // SAFETY: pidfd_open takes a pid and flags; the descriptor is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) } as i32;
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut result = Ok(());
    for line in maps.lines() {
        if line.ends_with("[vsyscall]")
            || line.ends_with("[vvar]")
            || line.ends_with("[vdso]")
            || line.contains("[vvar_vclock]")
        {
            continue;
        }
        let Some((range, _)) = line.split_once(' ') else {
            continue;
        };
        let Some((from, to)) = range.split_once('-') else {
            continue;
        };
        let (Ok(from), Ok(to)) = (
            usize::from_str_radix(from, 16),
            usize::from_str_radix(to, 16),
        ) else {
            continue;
        };
        let iov = libc::iovec {
            iov_base: from as *mut libc::c_void,
            iov_len: to - from,
        };
        // SAFETY: the iovec names a range of the other process; the kernel only reads it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd,
                &iov as *const libc::iovec,
                1usize,
                libc::MADV_PAGEOUT,
                0u32,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            // A mapping gone meanwhile, or one the kernel will not page (locked, PFN-mapped):
            // the rest still goes.
            if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOMEM)) {
                result = Err(e);
                break;
            }
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(pidfd) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_hierarchy_first_and_v1_when_asked() {
        let base = tempfile::tempdir().unwrap();
        assert_eq!(detect(base.path(), false), None);
        std::fs::create_dir_all(base.path().join("freezer")).unwrap();
        std::fs::write(base.path().join("freezer/tasks"), "").unwrap();
        std::fs::create_dir_all(base.path().join("unified")).unwrap();
        std::fs::write(base.path().join("unified/cgroup.controllers"), "").unwrap();
        let v2 = Freezer::V2 {
            root: base.path().join("unified"),
        };
        let v1 = Freezer::V1 {
            root: base.path().join("freezer"),
        };
        assert_eq!(detect(base.path(), false), Some(v2));
        assert_eq!(detect(base.path(), true), Some(v1.clone()));
        std::fs::remove_dir_all(base.path().join("unified")).unwrap();
        assert_eq!(detect(base.path(), false), Some(v1));
    }

    /// `RssFile` of `pid`, in KiB.
    fn rss_file_kib(pid: u32) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[test]
    fn paging_out_gives_back_a_processs_file_pages() {
        use std::io::BufRead;
        // A 16 MiB file of its own, mapped and read by a child: pages only it maps, which
        // the kernel can drop without swap.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, vec![7u8; 16 << 20]).unwrap();
        let script = "import mmap,sys,time\nf=open(sys.argv[1],'rb')\nm=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)\nsum(m[i] for i in range(0,len(m),4096))\nprint('ready',flush=True)\ntime.sleep(60)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        let before = rss_file_kib(child.id());
        page_out(child.id()).unwrap();
        let after = rss_file_kib(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(before >= 16 << 10, "the mapping was read: {before} KiB");
        assert!(
            before - after >= 12 << 10,
            "paged out: {before} → {after} KiB"
        );
    }
}
