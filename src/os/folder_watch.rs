//! Folders watched for changes (inotify): what in them was written, made, removed or
//! renamed since the last look — so that a hoster's 10,000 included files need not each be
//! looked at (`statx`) to learn that one changed.
//!
//! Owns: the inotify descriptor and its watches, and turning its events into what changed.
//! Must not touch: what a change means to whoever watches (`config::file_memo` decides).

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a look at the watched folders found.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// A file in a watched folder was written, made, removed or renamed (its path), or its
    /// metadata changed.
    File(PathBuf),
    /// A watched folder gained an entry (made, or renamed to): its path.
    Came(PathBuf),
    /// A watched folder lost an entry (removed, or renamed from): its path.
    Went(PathBuf),
    /// A folder is watched no more (removed, renamed, or its file system unmounted): what
    /// was known of it cannot be trusted.
    Lost(PathBuf),
    /// The kernel's queue overflowed: events were lost, nothing can be trusted.
    Overflow,
}

/// The folders watched, by their watch.
pub struct FolderWatch {
    inotify: Inotify,
    folders: HashMap<WatchDescriptor, PathBuf>,
    watched: HashMap<PathBuf, WatchDescriptor>,
}

/// Every event that may change a file's text or a folder's entries.
fn wanted() -> AddWatchFlags {
    AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

impl FolderWatch {
    pub fn new() -> std::io::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        Ok(FolderWatch {
            inotify,
            folders: HashMap::new(),
            watched: HashMap::new(),
        })
    }

    /// Whether `folder` is watched.
    pub fn watches(&self, folder: &Path) -> bool {
        self.watched.contains_key(folder)
    }

    /// Watches `folder` (again: nothing new). What changes in it from now on is seen.
    pub fn watch(&mut self, folder: &Path) -> std::io::Result<()> {
        if self.watched.contains_key(folder) {
            return Ok(());
        }
        let wd = self.inotify.add_watch(folder, wanted())?;
        // A second path to a folder watched already is the same watch.
        if let Some(other) = self.folders.insert(wd, folder.to_path_buf()) {
            self.watched.remove(&other);
        }
        self.watched.insert(folder.to_path_buf(), wd);
        Ok(())
    }

    /// What changed since the last look, in order.
    pub fn changes(&mut self) -> Vec<Seen> {
        let mut seen = Vec::new();
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) if !events.is_empty() => events,
                // EAGAIN: nothing more. Another error: the watch cannot be trusted.
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => return seen,
                Err(_) => {
                    seen.push(Seen::Overflow);
                    return seen;
                }
            };
            for e in events {
                if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    seen.push(Seen::Overflow);
                    continue;
                }
                let Some(folder) = self.folders.get(&e.wd).cloned() else {
                    continue;
                };
                let gone = AddWatchFlags::IN_IGNORED
                    | AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_UNMOUNT;
                if e.mask.intersects(gone) {
                    self.folders.remove(&e.wd);
                    self.watched.remove(&folder);
                    let _ = self.inotify.rm_watch(e.wd);
                    seen.push(Seen::Lost(folder));
                    continue;
                }
                let Some(name) = e.name.filter(|n| !n.as_bytes().is_empty()) else {
                    continue;
                };
                let path = folder.join(name);
                let came = AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
                let went = AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM;
                if e.mask.intersects(came) {
                    seen.push(Seen::Came(path.clone()));
                }
                if e.mask.intersects(went) {
                    seen.push(Seen::Went(path.clone()));
                }
                seen.push(Seen::File(path));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_folder_tells_each_file_written_made_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().to_path_buf();
        std::fs::write(folder.join("a.toml"), "one").unwrap();
        let mut w = FolderWatch::new().unwrap();
        w.watch(&folder).unwrap();
        assert!(w.watches(&folder));
        assert_eq!(w.changes(), []);
        std::fs::write(folder.join("a.toml"), "two").unwrap();
        let seen = w.changes();
        // Written (its truncation, its write, its close: one or more, as the kernel merges).
        assert!(!seen.is_empty(), "{seen:?}");
        assert!(
            seen.iter().all(|s| *s == Seen::File(folder.join("a.toml"))),
            "{seen:?}"
        );
        std::fs::write(folder.join("b.toml"), "").unwrap();
        std::fs::rename(folder.join("b.toml"), folder.join("c.toml")).unwrap();
        let seen = w.changes();
        for name in ["b.toml", "c.toml"] {
            assert!(seen.contains(&Seen::File(folder.join(name))), "{seen:?}");
        }
        assert!(
            seen.contains(&Seen::Came(folder.join("b.toml"))),
            "{seen:?}"
        );
        assert!(
            seen.contains(&Seen::Went(folder.join("b.toml"))),
            "{seen:?}"
        );
        assert!(
            seen.contains(&Seen::Came(folder.join("c.toml"))),
            "{seen:?}"
        );
        assert_eq!(w.changes(), []);
        std::fs::remove_file(folder.join("a.toml")).unwrap();
        std::fs::remove_file(folder.join("c.toml")).unwrap();
        drop(dir);
        let seen = w.changes();
        assert!(seen.contains(&Seen::Lost(folder.clone())), "{seen:?}");
        assert!(!w.watches(&folder));
    }
}
