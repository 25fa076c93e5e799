//! `[pool.isolation]`: the filesystem an app's processes see — a private `/tmp`, the system
//! read-only, homes and the other pools' directories hidden, paths of its own writable —
//! and, where the kernel has Landlock, what they may write and which TCP ports they may
//! bind. As Unit's `isolation` and systemd's `PrivateTmp=`, `ProtectSystem=strict`,
//! `ProtectHome=` and `ReadWritePaths=`.
//!
//! Owns: the typed settings and the mount plan they make ([`Isolation::mount_plan`]), pure.
//! Must not touch: the mounts themselves (`crate::os::isolation`, in `app-exec`).

pub use crate::os::isolation::MountStep;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A pool's isolation, as validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolation {
    /// `tmp = "private"`: `/tmp` and `/var/tmp` of the pool's own, each a tmpfs of this many
    /// bytes (`tmp_size`).
    pub private_tmp: Option<u64>,
    /// `system = "read-only"`: every mount read-only but `/dev`, the private `/tmp` and the
    /// `read-write` paths.
    pub read_only_system: bool,
    /// `home = "hidden"`: `/home`, `/root` and `/run/user` empty.
    pub hide_home: bool,
    /// `paths`: absolute paths and what the app may do there.
    pub paths: Vec<(PathBuf, PathAccess)>,
    /// Every app pool's directory, sorted, one list the isolated pools share (filled in once
    /// every pool is read: a list per pool would cost thousands of pools the square). Those
    /// not at or above this pool's own are hidden ([`Isolation::mount_plan`]).
    pub pool_dirs: std::sync::Arc<[PathBuf]>,
    /// `landlock` (on by default): where the kernel has Landlock, the app may write only
    /// under its `read-write` paths, its `/tmp` and `/dev`, and bind TCP only to its own port.
    pub landlock: bool,
    /// `network = "none"`: a network namespace of its own with loopback alone — it reaches
    /// nothing and nothing reaches it but through its unix socket or inherited listeners.
    #[serde(default)]
    pub no_network: bool,
}

/// What an app may do under one of its `paths`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PathAccess {
    ReadWrite,
    ReadOnly,
    Hidden,
}

impl PathAccess {
    /// `"read-write"`, `"read-only"` or `"hidden"`.
    pub fn parse(written: &str) -> Option<PathAccess> {
        match written {
            "read-write" => Some(PathAccess::ReadWrite),
            "read-only" => Some(PathAccess::ReadOnly),
            "hidden" => Some(PathAccess::Hidden),
            _ => None,
        }
    }
}

/// The folders `tmp = "private"` replaces with the pool's own.
pub const PRIVATE_TMP: [&str; 2] = ["/tmp", "/var/tmp"];

/// Whether `path` is under a folder `tmp = "private"` replaces (and so hidden from the app).
pub fn under_private_tmp(path: &std::path::Path) -> bool {
    PRIVATE_TMP.iter().any(|t| path.starts_with(t))
}

impl Isolation {
    /// The mounts that make this view, in order: the system read-only, then what it hides,
    /// then the private `/tmp`, then the paths bound back (last, so that a path of the
    /// pool's own under a hidden or read-only one is seen as asked).
    /// `directory` is the pool's own: it, and any folder above it or above one of the pool's
    /// own paths, is not hidden with the other pools' folders.
    pub fn mount_plan(&self, directory: &std::path::Path) -> Vec<MountStep> {
        let mut plan = Vec::new();
        if self.read_only_system {
            plan.push(MountStep::ReadOnly("/".into()));
            plan.push(MountStep::Writable("/dev".into()));
        }
        if self.hide_home {
            for home in ["/home", "/root", "/run/user"] {
                plan.push(MountStep::Hide(home.into()));
            }
        }
        let own = (self.paths.iter())
            .filter(|(_, a)| *a != PathAccess::Hidden)
            .map(|(p, _)| p.as_path())
            .chain([directory]);
        let own: Vec<&std::path::Path> = own.collect();
        let others = (self.pool_dirs.iter()).filter(|d| !own.iter().any(|o| o.starts_with(d)));
        plan.extend(others.cloned().map(MountStep::Hide));
        let hidden = self.paths.iter().filter(|(_, a)| *a == PathAccess::Hidden);
        plan.extend(hidden.map(|(p, _)| MountStep::Hide(p.clone())));
        if let Some(size) = self.private_tmp {
            plan.extend(PRIVATE_TMP.map(|t| MountStep::Tmp(t.into(), size)));
        }
        for (path, access) in &self.paths {
            match access {
                PathAccess::ReadWrite => plan.push(MountStep::Bind(path.clone(), false)),
                PathAccess::ReadOnly => plan.push(MountStep::Bind(path.clone(), true)),
                PathAccess::Hidden => {}
            }
        }
        plan
    }

    /// The paths the app may write under, for Landlock: its `read-write` paths, its `/tmp`
    /// (private or not) and `/dev`.
    pub fn writable(&self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = PRIVATE_TMP
            .iter()
            .chain(&["/dev"])
            .map(PathBuf::from)
            .collect();
        paths.extend(
            (self.paths.iter())
                .filter(|(_, a)| *a == PathAccess::ReadWrite)
                .map(|(p, _)| p.clone()),
        );
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_makes_the_system_read_only_then_hides_then_binds_the_pools_paths() {
        let isolation = Isolation {
            private_tmp: Some(1 << 20),
            read_only_system: true,
            hide_home: true,
            paths: vec![
                ("/srv/shop/data".into(), PathAccess::ReadWrite),
                ("/srv/secret".into(), PathAccess::Hidden),
            ],
            pool_dirs: ["/srv/other", "/srv/shop", "/srv"]
                .map(PathBuf::from)
                .into(),
            landlock: true,
            no_network: false,
        };
        let plan = isolation.mount_plan("/srv/shop".as_ref());
        // Its own folder, and the one above it, are not hidden with the other pool's.
        assert!(!plan.contains(&MountStep::Hide("/srv/shop".into())));
        assert!(!plan.contains(&MountStep::Hide("/srv".into())));
        assert_eq!(plan[0], MountStep::ReadOnly("/".into()));
        assert_eq!(plan[1], MountStep::Writable("/dev".into()));
        let at = |step: &MountStep| plan.iter().position(|s| s == step).unwrap();
        assert!(
            at(&MountStep::Hide("/srv/other".into())) < at(&MountStep::Tmp("/tmp".into(), 1 << 20))
        );
        assert!(
            at(&MountStep::Hide("/srv/secret".into()))
                < at(&MountStep::Bind("/srv/shop/data".into(), false))
        );
        assert_eq!(
            plan.last(),
            Some(&MountStep::Bind("/srv/shop/data".into(), false))
        );
        assert!(plan.contains(&MountStep::Hide("/home".into())));
        assert!(isolation
            .writable()
            .contains(&PathBuf::from("/srv/shop/data")));
        assert!(!isolation.writable().contains(&PathBuf::from("/srv/secret")));
    }
}
