//! A pool's identity — IIS's ApplicationPoolIdentity: the user, group and supplementary groups
//! its worker and application processes run as, looked up by name, and the change to them.
//!
//! Owns: the user database lookups (`getpwnam`, `getgrnam`, `getgrouplist`, through `nix`)
//! and `setgroups`/`setgid`/`setuid`/`PR_SET_NO_NEW_PRIVS`. Must not touch: when a process
//! changes identity (a worker does it after joining its control groups and pinning itself,
//! `app-exec` before it execs the application) or which pool has which.

use nix::unistd::{Gid, Group, Uid, User};
use serde::{Deserialize, Serialize};
use std::ffi::CString;

/// Who a pool's processes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Every group the user is a member of (`/etc/group`), with `gid`.
    pub groups: Vec<u32>,
}

/// Looks `user` (and `group`, else the user's primary group) up in the user database.
/// `Err` is the fix for the config's error line.
pub fn lookup(user: &str, group: Option<&str>) -> Result<Identity, String> {
    let u = User::from_name(user)
        .map_err(|e| format!("cannot look user `{user}` up: {e}"))?
        .ok_or_else(|| {
            format!("user `{user}` does not exist; create it (useradd --system --no-create-home {user}) or name another")
        })?;
    let gid = match group {
        None => u.gid,
        Some(g) => {
            Group::from_name(g)
                .map_err(|e| format!("cannot look group `{g}` up: {e}"))?
                .ok_or_else(|| {
                    format!(
                    "group `{g}` does not exist; create it (groupadd --system {g}) or name another"
                )
                })?
                .gid
        }
    };
    let name = CString::new(user).map_err(|_| format!("user `{user}` has a NUL byte"))?;
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&name, gid)
        .map_err(|e| format!("cannot list the groups of `{user}`: {e}"))?
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    Ok(Identity {
        user: u.name,
        uid: u.uid.as_raw(),
        gid: gid.as_raw(),
        groups,
    })
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    Uid::effective().as_raw()
}

impl Identity {
    /// Becomes this identity for good — supplementary groups, group, then user (in that order:
    /// after `setuid` the others are no longer allowed) — and forbids gaining privileges
    /// again (`PR_SET_NO_NEW_PRIVS`: no setuid program or file capability works in this
    /// process or anything it execs). Checks that root cannot be regained.
    pub fn assume(&self) -> std::io::Result<()> {
        let groups: Vec<Gid> = self.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        nix::unistd::setgroups(&groups)?;
        nix::unistd::setgid(Gid::from_raw(self.gid))?;
        nix::unistd::setuid(Uid::from_raw(self.uid))?;
        no_new_privileges()?;
        if self.uid != 0 && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
            return Err(std::io::Error::other("root could be regained after setuid"));
        }
        Ok(())
    }
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)`.
pub fn no_new_privileges() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_groups_are_found_or_named_with_the_fix() {
        let root = lookup("root", None).unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
        let e = lookup("no-such-user-espalier", None).unwrap_err();
        assert!(e.contains("useradd --system"), "{e}");
        let e = lookup("root", Some("no-such-group-espalier")).unwrap_err();
        assert!(e.contains("groupadd --system"), "{e}");
    }
}
