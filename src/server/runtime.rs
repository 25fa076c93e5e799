//! The master's runtime state on disk: the folder for hand-off, notify and unix upstream
//! sockets, each pool's own folder in it, the folder of the admin token, and the access logs
//! the master creates for its pools.
//!
//! Every folder here is made so that nobody else can have made it (see
//! [`crate::os::private_dir`]): the base is `/run/espalier` for root (a root-owned place no
//! one else can write), else (or without `/run`) `$XDG_RUNTIME_DIR` or `espalier-<uid>` in
//! the temporary folder,
//! used only when it is ours and closed to others; the master's own folder in it has a random
//! name, is created by this master and removed when it stops. A symlink there is never
//! followed, and only a path the master just created or opened itself is given to a pool's
//! user (by its descriptor, so a link swapped in meanwhile changes nothing).
//!
//! Owns: those paths, their modes and owners. Must not touch: what the sockets carry
//! ([`super::handoffs`], [`super::app`]) or what the logs say ([`crate::http::access_log`]).

use crate::config::Config;
use crate::os::identity::Identity;
use crate::os::private_dir;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The folder every runtime path of this user's espalier lives in (not created here): for
/// root `/run/espalier` (where the machine has a `/run`, as every systemd one does).
pub fn base_dir() -> PathBuf {
    if crate::os::process::is_root() && Path::new("/run").is_dir() {
        PathBuf::from("/run/espalier")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| {
                let uid = crate::os::identity::effective_uid();
                std::env::temp_dir().join(format!("espalier-{uid}"))
            })
    }
}

/// [`base_dir`], created if missing, or refused when someone else could have made or changed
/// it. Traversable by all (pool users reach their sockets by exact path), listable by none.
pub fn ensure_base_dir() -> Result<PathBuf, String> {
    let base = base_dir();
    private_dir::owned_dir(&base, 0o711)?;
    Ok(base)
}

/// This master's runtime folder, and a descriptor of it held while the master runs: with
/// several masters on a machine, `ls -l /proc/PID/fd` says which folder is whose.
static MASTER_DIR: OnceLock<(PathBuf, std::fs::File)> = OnceLock::new();

/// This master's runtime folder, if it has made one yet.
pub fn runtime_dir() -> Option<&'static Path> {
    MASTER_DIR.get().map(|(dir, _)| dir.as_path())
}

/// This master's runtime folder (mode 0711, random name), made at the first call.
pub fn ensure_runtime_dir() -> Result<PathBuf, String> {
    if let Some(dir) = runtime_dir() {
        return Ok(dir.to_path_buf());
    }
    let base = ensure_base_dir()?;
    let dir = private_dir::fresh_dir(&base, "master-", 0o711)?;
    let held = private_dir::hold_dir(&dir)?;
    // One thread (the master's supervisor) makes it; keep whichever came first.
    let _ = MASTER_DIR.set((dir, held));
    Ok(runtime_dir().map(Path::to_path_buf).unwrap_or_default())
}

/// Removes the runtime folder when the master stops.
pub fn remove_runtime_dir() {
    if let Some(dir) = runtime_dir() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A pool's own folder in the runtime folder, where its app processes create their sockets
/// (`upstream = "unix"`): owned by the pool's user, closed to the others. Made by the master
/// in a folder only it can write, so the name cannot have been taken by anyone else.
pub fn ensure_pool_dir(pool: &str, identity: Option<&Identity>) -> Result<PathBuf, String> {
    let dir = ensure_runtime_dir()?.join(format!("pool-{pool}"));
    private_dir::owned_dir(&dir, 0o700)?;
    give_to(&dir, identity)?;
    Ok(dir)
}

/// Makes `path` — a path in a folder only the master writes — its pool's user's (and
/// group's), when the pool has one; a symlink is not followed.
pub fn give_to(path: &Path, owner: Option<&Identity>) -> Result<(), String> {
    match owner {
        None => Ok(()),
        Some(id) => std::os::unix::fs::lchown(path, Some(id.uid), Some(id.gid))
            .map_err(|e| format!("cannot give {} to user `{}`: {e}", path.display(), id.user)),
    }
}

/// Creates every access log that is missing (mode 0640: a pool's query strings are its own)
/// and gives it to the user of the pools that write it, so their workers — which open their
/// own descriptors, and reopen them after logrotate — can; or says which log cannot be and
/// why. The log is opened without following a symlink and given away by its descriptor. Run
/// at start, and by SIGUSR1 before the workers reopen.
pub fn prepare_access_logs(config: &Config) -> Result<(), String> {
    // The pools' identities by name, once: looked up per site, 10,000 sites' logs against
    // 10,000 pools made every reload of a hoster's configuration quadratic.
    let identities: std::collections::HashMap<&str, &Identity> = config
        .pools
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.identity.as_ref()?)))
        .collect();
    (config.sites.iter())
        .try_for_each(|site| prepare_access_log(site, |pool| identities.get(pool).copied()))
}

/// [`prepare_access_logs`] for the sites at `sites` alone (a change of those sites).
pub fn prepare_access_logs_of(config: &Config, sites: &[usize]) -> Result<(), String> {
    let identity = |pool: &str| config.pool(pool).and_then(|p| p.identity.as_ref());
    (sites.iter().filter_map(|&i| config.sites.get(i)))
        .try_for_each(|site| prepare_access_log(site, identity))
}

/// `site`'s access log, if it has one, made and given to its pools' user (`identity` of a
/// pool's name).
fn prepare_access_log<'c>(
    site: &crate::config::SiteSpec,
    identity: impl Fn(&str) -> Option<&'c Identity>,
) -> Result<(), String> {
    let Some(spec) = &site.access_log else {
        return Ok(());
    };
    let fail = |e: String| {
        format!(
            "site `{}`: cannot open access log {}: {e}; fix access_log.path or the folder's permissions",
            site.name,
            spec.path.display()
        )
    };
    let file = crate::http::access_log::open(&spec.path).map_err(|e| fail(e.to_string()))?;
    // The sites' pools agree on one identity (checked with the config).
    let owner = site.apps.iter().find_map(|a| identity(a.pool.as_str()));
    if let Some(id) = owner {
        std::os::unix::fs::fchown(&file, Some(id.uid), Some(id.gid))
            .map_err(|e| fail(format!("cannot give it to user `{}`: {e}", id.user)))?;
    }
    Ok(())
}
