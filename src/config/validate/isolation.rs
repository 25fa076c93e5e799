//! Validation of `[pool.isolation]`: each key's words, `tmp_size` a size, `paths` absolute;
//! and, once every pool is read, the other pools' folders each isolated pool hides.
//!
//! Owns: those rules. Must not touch: the mounts (`crate::os::isolation`).

use super::super::isolation::{Isolation, PathAccess};
use super::super::locate::Seg;
use super::super::raw::RawIsolation;
use super::Validator;
use std::path::PathBuf;

/// A private `/tmp`'s size, by default: room for uploads in flight, not for a disk's worth.
const TMP_SIZE: u64 = 256 << 20;

impl Validator {
    /// Pool `i`'s `[pool.isolation]`, or `None` (its errors said).
    pub(super) fn isolation(&mut self, i: usize, raw: RawIsolation) -> Option<Isolation> {
        let at = |k: &'static str| {
            [
                Seg::Key("pool"),
                Seg::Index(i),
                Seg::Key("isolation"),
                Seg::Key(k),
            ]
        };
        let word =
            |v: &mut Self, key: &'static str, written: Option<String>, on: &str, off: &str| {
                match written.as_deref() {
                    None => false,
                    Some(w) if w == on => true,
                    Some(w) if w == off => false,
                    Some(w) => {
                        v.err(
                            &at(key),
                            format!("`{w}` is not one of \"{on}\" or \"{off}\""),
                        );
                        false
                    }
                }
            };
        let tmp = word(self, "tmp", raw.tmp, "private", "shared");
        let read_only_system = word(self, "system", raw.system, "read-only", "writable");
        let hide_home = word(self, "home", raw.home, "hidden", "visible");
        let no_network = word(self, "network", raw.network, "none", "shared");
        let size = raw
            .tmp_size
            .map(|s| (self.size(&at("tmp_size"), Some(s), TMP_SIZE), true));
        if let (Some(_), false) = (&size, tmp) {
            self.err(&at("tmp_size"), "sizes a private /tmp, and `tmp` is not \"private\"; add tmp = \"private\", or remove it");
        }
        let private_tmp = tmp.then(|| size.map_or(TMP_SIZE, |(s, _)| s));
        let mut paths = Vec::new();
        for (path, access) in raw.paths.unwrap_or_default() {
            let at = [
                Seg::Key("pool"),
                Seg::Index(i),
                Seg::Key("isolation"),
                Seg::Key("paths"),
            ];
            let Some(access) = PathAccess::parse(&access) else {
                self.err(&at, format!("`{path}` = `{access}`: not one of \"read-write\", \"read-only\" or \"hidden\""));
                continue;
            };
            let p = PathBuf::from(&path);
            if !p.is_absolute() || p.components().any(|c| c == std::path::Component::ParentDir) {
                self.err(&at, format!("`{path}` is not an absolute path; write it from /, like \"/srv/shop/uploads\""));
                continue;
            }
            if p == std::path::Path::new("/") {
                self.err(
                    &at,
                    "`/` is the whole system: say it with system = \"read-only\" or \"writable\"",
                );
                continue;
            }
            if tmp && crate::config::isolation::under_private_tmp(&p) {
                self.err(&at, format!("`{path}` is under /tmp or /var/tmp, which tmp = \"private\" replaces; name a path elsewhere, or share /tmp"));
                continue;
            }
            paths.push((p, access));
        }
        Some(Isolation {
            private_tmp,
            read_only_system,
            hide_home,
            paths,
            pool_dirs: Default::default(),
            landlock: raw.landlock.unwrap_or(true),
            no_network,
        })
    }
}

impl Validator {
    /// Every app pool's directory, once, in one list each isolated pool shares (see
    /// `Isolation::pool_dirs`).
    /// A pool kept from the last validation is written only where its list changes (it
    /// stays shared with it).
    pub(in crate::config) fn hide_other_pools(
        &self,
        pools: &mut [std::sync::Arc<crate::config::PoolSpec>],
    ) {
        let mut dirs: Vec<PathBuf> = (pools.iter())
            .filter_map(|p| Some(p.app.as_ref()?.directory.clone()))
            .collect();
        dirs.sort();
        dirs.dedup();
        // The list the kept pools share already, when it is the same: compared once, then
        // each pool by pointer (comparing each pool's list whole was pools × folders).
        let isolated = |p: &crate::config::PoolSpec| {
            let isolation = p.app.as_ref().and_then(|a| a.isolation.as_ref());
            isolation.map(|i| std::sync::Arc::clone(&i.pool_dirs))
        };
        let dirs: std::sync::Arc<[PathBuf]> = match pools.iter().find_map(|p| isolated(p)) {
            Some(kept) if *kept == *dirs => kept,
            _ => dirs.into(),
        };
        for pool in pools.iter_mut() {
            if isolated(pool).is_some_and(|d| !std::sync::Arc::ptr_eq(&d, &dirs)) {
                let pool = std::sync::Arc::make_mut(pool);
                let isolation = pool.app.as_mut().and_then(|a| a.isolation.as_mut());
                if let Some(isolation) = isolation {
                    isolation.pool_dirs = std::sync::Arc::clone(&dirs);
                }
            }
        }
    }
}
