//! An app process's view of the filesystem made, and its rights narrowed, before it execs
//! (`[pool.isolation]`, in `app-exec`): a mount namespace of its own, each step of the plan
//! `config::isolation` made applied in it, and Landlock's rules where the kernel has them
//! (the `landlock` crate, kept by Landlock's author: the ABI's versions and the rules'
//! structures are its to know).
//!
//! Owns: those syscalls, and the steps' vocabulary ([`MountStep`]). Must not touch: which
//! steps (the config's plan, `config::isolation`).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One step of making the view, in the order they are made (in a new mount namespace whose
/// mounts no longer propagate to the machine's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountStep {
    /// Every mount under the path read-only.
    ReadOnly(PathBuf),
    /// Every mount under the path writable again (`/dev` under a read-only system).
    Writable(PathBuf),
    /// The path bound onto itself, read-write or read-only (`true`), under the rest.
    Bind(PathBuf, bool),
    /// An empty read-only directory over the path.
    Hide(PathBuf),
    /// A tmpfs of this many bytes over the path, for every user (mode 1777).
    Tmp(PathBuf, u64),
}

/// `mount_setattr(2)`'s attribute change (linux/mount.h), not in the libc crate.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
}

/// `mount(2)` of `source` (or none) on `target` with `flags` and `data`.
fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(c_path).transpose()?;
    let target = c_path(target)?;
    let fstype = fstype.map(|f| CString::new(f).unwrap_or_default());
    let data = data.map(|d| CString::new(d).unwrap_or_default());
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is a valid C string or null for the call's duration.
    let r = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Every mount at and under `target` read-only (`true`) or writable again.
fn set_read_only(target: &Path, read_only: bool) -> io::Result<()> {
    let target = c_path(target)?;
    let attr = MountAttr {
        attr_set: if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: if read_only { 0 } else { MOUNT_ATTR_RDONLY },
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr with a valid path and a MountAttr of the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the calling process's mount namespace its own (no mount made in it reaches the
/// machine's) and applies `plan`; a path the plan hides or binds that does not exist is left
/// as it is (nothing there to see). An error names the step.
pub fn enter(plan: &[MountStep]) -> Result<(), String> {
    // SAFETY: unshare with a flag; it affects this (single-threaded) process alone.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } < 0 {
        return Err(format!(
            "cannot make a mount namespace: {} (isolation needs espalier to run as root)",
            io::Error::last_os_error()
        ));
    }
    let private = libc::MS_REC | libc::MS_PRIVATE;
    mount(None, Path::new("/"), None, private, None)
        .map_err(|e| format!("cannot make / private: {e}"))?;
    let hidden = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY;
    for step in plan {
        let done = match step {
            MountStep::ReadOnly(p) => set_read_only(p, true),
            MountStep::Writable(p) if p.exists() => set_read_only(p, false),
            MountStep::Hide(p) if p.is_dir() => {
                mount(None, p, Some("tmpfs"), hidden, Some("size=4k,mode=0755"))
            }
            MountStep::Tmp(p, size) if p.is_dir() => {
                let data = format!("size={size},mode=1777");
                let flags = libc::MS_NOSUID | libc::MS_NODEV;
                mount(None, p, Some("tmpfs"), flags, Some(&data))
            }
            MountStep::Bind(p, read_only) if p.exists() => {
                let flags = libc::MS_BIND | libc::MS_REC;
                mount(Some(p), p, None, flags, None).and_then(|()| set_read_only(p, *read_only))
            }
            _ => Ok(()),
        };
        done.map_err(|e| format!("isolation: {step:?}: {e}"))?;
    }
    Ok(())
}

/// Makes the calling process's network namespace its own, with its loopback up and nothing
/// else: it reaches no address of the machine's, and none reaches it.
pub fn leave_network() -> Result<(), String> {
    // SAFETY: unshare with a flag; it affects this (single-threaded) process alone.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
        return Err(format!(
            "cannot make a network namespace: {} (network = \"none\" needs espalier to run as root)",
            io::Error::last_os_error()
        ));
    }
    // A new namespace's loopback is down: brought up (SIOCSIFFLAGS on `lo`).
    // SAFETY: a datagram socket to make the request on, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("loopback: {}", io::Error::last_os_error()));
    }
    // SAFETY: a zeroed ifreq is valid; the name is copied within its bounds.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *to = *from as libc::c_char;
    }
    req.ifr_ifru.ifru_flags =
        (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS with a valid ifreq for the call's duration; the socket is ours.
    let r = unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &mut req) };
    let e = io::Error::last_os_error();
    // SAFETY: closes the socket made above.
    unsafe { libc::close(fd) };
    if r < 0 {
        return Err(format!("cannot bring the loopback up: {e}"));
    }
    Ok(())
}

/// Where the kernel has Landlock: the calling process and all it starts may write only
/// under `writable` (read and run everything else), and — on kernels with Landlock's network
/// rules (ABI 4, Linux 6.7) — bind TCP only to `ports`. What the kernel enforced: `Ok(None)`
/// without Landlock, else a word for the log.
pub fn restrict(
    writable: &[std::path::PathBuf],
    ports: &[u16],
) -> Result<Option<&'static str>, String> {
    use landlock::{
        Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, ABI,
    };
    let abi = ABI::V4;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        .handle_access(AccessNet::BindTcp)
        .map_err(fail)?
        .create()
        .map_err(fail)?;
    let everything = PathFd::new("/").map_err(|e| format!("Landlock: /: {e}"))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(everything, AccessFs::from_read(abi)))
        .map_err(fail)?;
    for path in writable.iter().filter(|p| p.exists()) {
        let fd = PathFd::new(path).map_err(|e| format!("Landlock: {}: {e}", path.display()))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, AccessFs::from_all(abi)))
            .map_err(fail)?;
    }
    for &port in ports {
        ruleset = ruleset
            .add_rule(NetPort::new(port, AccessNet::BindTcp))
            .map_err(fail)?;
    }
    let status = ruleset.restrict_self().map_err(fail)?;
    Ok(match status.ruleset {
        RulesetStatus::NotEnforced => None,
        RulesetStatus::PartiallyEnforced => {
            Some("partly (this kernel's Landlock lacks some rules)")
        }
        RulesetStatus::FullyEnforced => Some("fully"),
    })
}
