//! The config files read before, kept in the process: a hoster's 10,000 included files are
//! read and parsed again at every change through the configuration API and every reload,
//! though one of them changed. A file whose metadata is as it was when it was read (device,
//! inode, size, modification and change times) is not read again, and its parsed tables are
//! cloned rather than parsed again (#57: one site changed at 10,000 sites).
//!
//! A file changed twice within the file system's clock tick keeps its times and may keep its
//! size, so a text read within [`SETTLED`] of its last change is used but not kept: it is read
//! again next time, until its change is older than that (git's "racy" index entries, the
//! same rule).
//!
//! Owns: the kept texts and tables, and when they may be used. Must not touch: what the
//! tables mean (`validate`), or which files are read (`include`, `document`).

use super::raw::{RawConfig, RawPool, RawSite};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// How long after its last change a file's text is kept: longer than any file system's
/// timestamp granularity (ext4 and XFS: a clock tick; FAT: 2 s).
const SETTLED: Duration = Duration::from_secs(3);

/// A file itself, whatever path names it: its device and inode.
pub(super) type Node = (u64, u64);

/// What a file's metadata says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Stamp {
    /// The file itself (device and inode): two paths to it are one file.
    pub node: Node,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl Stamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            node: (meta.dev(), meta.ino()),
            len: meta.len(),
            modified: (meta.mtime(), meta.mtime_nsec()),
            changed: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether its last change is older than [`SETTLED`] at `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let (secs, nanos) = self.changed;
        let changed = u64::try_from(secs)
            .ok()
            .map(|s| SystemTime::UNIX_EPOCH + Duration::new(s, u32::try_from(nanos).unwrap_or(0)));
        changed.is_some_and(|c| now.duration_since(c).is_ok_and(|age| age >= SETTLED))
    }
}

struct Kept {
    stamp: Stamp,
    text: Arc<str>,
    /// Its pools and sites, once parsed as an included file (which holds nothing else):
    /// about 3 KiB a file, 30 MiB for 10,000 sites' files.
    raw: Option<(Vec<RawPool>, Vec<RawSite>)>,
}

fn kept() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Kept>> {
    static KEPT: std::sync::LazyLock<Mutex<HashMap<PathBuf, Kept>>> =
        std::sync::LazyLock::new(Default::default);
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A file's text and stamp: the kept one when its metadata is unchanged, else read now (and
/// kept once settled). Within a [`files_read_once`] span a file is looked at once: a change
/// through the configuration API reads every included file to edit one, then again to
/// validate the result (10,000 `statx` calls each time).
pub(super) fn read(path: &Path) -> std::io::Result<(Arc<str>, Stamp)> {
    if let Some(seen) = SPAN.with_borrow(|s| s.as_ref().and_then(|s| s.read.get(path).cloned())) {
        return Ok(seen);
    }
    let (text, stamp) = look(path)?;
    SPAN.with_borrow_mut(|s| {
        if let Some(s) = s {
            s.read.insert(path.to_path_buf(), (text.clone(), stamp));
        }
    });
    Ok((text, stamp))
}

fn look(path: &Path) -> std::io::Result<(Arc<str>, Stamp)> {
    let stamp = Stamp::of(&std::fs::metadata(path)?);
    if let Some(k) = kept().get(path).filter(|k| k.stamp == stamp) {
        return Ok((k.text.clone(), stamp));
    }
    let text: Arc<str> = std::fs::read_to_string(path)?.into();
    // Its metadata again: a write between the first look and the read would pair the new
    // text with the old stamp.
    let after = Stamp::of(&std::fs::metadata(path)?);
    if after == stamp && stamp.settled(SystemTime::now()) {
        let raw = None;
        let text = text.clone();
        kept().insert(path.to_path_buf(), Kept { stamp, text, raw });
    }
    Ok((text, stamp))
}

/// `text`'s pools and sites as kept for included file `path`, when it is the text kept for
/// it.
pub(super) fn parsed(path: &Path, text: &str) -> Option<RawConfig> {
    let kept = kept();
    let k = kept.get(path).filter(|k| &*k.text == text)?;
    let (pool, site) = k.raw.clone()?;
    Some(RawConfig {
        pool,
        site,
        ..RawConfig::default()
    })
}

/// Keeps the pools and sites of `raw`, an included file's valid tables (nothing else), as
/// those of `path`'s kept text, when `text` is that text.
pub(super) fn keep_parsed(path: &Path, text: &str, raw: &RawConfig) {
    if let Some(k) = kept().get_mut(path).filter(|k| &*k.text == text) {
        k.raw = Some((raw.pool.clone(), raw.site.clone()));
    }
}

/// Forgets the files under `folder` not in `read` (removed from the configuration whose
/// files are there): what is kept stays the size of the configurations read.
pub(super) fn keep_only(folder: &Path, read: &std::collections::HashSet<PathBuf>) {
    kept().retain(|path, _| !path.starts_with(folder) || read.contains(path));
}

/// Folder listings and files' texts kept for the span of one [`files_read_once`]: a change
/// through the configuration API lists a hoster's `sites.d` and reads its files to edit
/// it, then again to validate the result; 10,000 entries read, matched and sorted, and
/// 10,000 files looked at, twice. Nothing is kept past that span (a folder's or a file's
/// times do not tell two changes within a clock tick apart), and it is forgotten at once
/// when the span writes a file ([`files_written`]).
#[derive(Default)]
struct Span {
    listings: HashMap<(PathBuf, String), Arc<[PathBuf]>>,
    read: HashMap<PathBuf, (Arc<str>, Stamp)>,
}

thread_local! {
    static SPAN: std::cell::RefCell<Option<Span>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with each folder listed, and each file looked at, once within it (see [`Span`]).
pub fn files_read_once<R>(f: impl FnOnce() -> R) -> R {
    // Only the outermost span ends the keeping (an inner one may meet no listing yet).
    let outermost = SPAN.with_borrow_mut(|s| {
        let none = s.is_none();
        s.get_or_insert_with(Span::default);
        none
    });
    let result = f();
    if outermost {
        SPAN.with_borrow_mut(|s| *s = None);
    }
    result
}

/// Forgets the listings and texts kept: a file was written or removed.
pub fn files_written() {
    SPAN.with_borrow_mut(|s| {
        if let Some(s) = s {
            *s = Span::default();
        }
    });
}

/// The files of `folder` named by `pattern`, as `list` finds them: listed once within a
/// [`files_read_once`], else each time.
pub(super) fn listed(
    folder: &Path,
    pattern: &str,
    list: impl FnOnce() -> Result<Vec<PathBuf>, String>,
) -> Result<Arc<[PathBuf]>, String> {
    let key = (folder.to_path_buf(), pattern.to_string());
    let kept = SPAN.with_borrow(|s| s.as_ref().and_then(|s| s.listings.get(&key).cloned()));
    if let Some(kept) = kept {
        return Ok(kept);
    }
    let found: Arc<[PathBuf]> = list()?.into();
    SPAN.with_borrow_mut(|s| {
        if let Some(s) = s {
            s.listings.insert(key, found.clone());
        }
    });
    Ok(found)
}

/// Keeps `path`'s text now, settled or not (tests: a file's change time cannot be set back).
#[cfg(test)]
pub(super) fn keep_now(path: &Path) {
    let stamp = Stamp::of(&std::fs::metadata(path).unwrap());
    let text = std::fs::read_to_string(path).unwrap().into();
    let raw = None;
    kept().insert(path.to_path_buf(), Kept { stamp, text, raw });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_settled_file_is_read_once_and_a_changed_one_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[[site]]\nname = \"a\"\n").unwrap();
        // Just written: used, not kept.
        assert_eq!(&*read(&path).unwrap().0, "[[site]]\nname = \"a\"\n");
        assert!(!kept().contains_key(&path));
        // Its change time cannot be set back: the settled rule is tested on the stamp, and
        // the keeping by putting one in as `read` would once it settled.
        let now = SystemTime::now();
        let stamp = Stamp::of(&std::fs::metadata(&path).unwrap());
        assert!(!stamp.settled(now));
        assert!(stamp.settled(now + SETTLED + Duration::from_secs(1)));
        let text: Arc<str> = "kept text".into();
        kept().insert(
            path.clone(),
            Kept {
                stamp,
                text: text.clone(),
                raw: None,
            },
        );
        assert_eq!(&*read(&path).unwrap().0, "kept text");
        // Tables kept for that text only.
        let raw = RawConfig::default();
        keep_parsed(&path, "another text", &raw);
        assert!(parsed(&path, "kept text").is_none());
        keep_parsed(&path, "kept text", &raw);
        assert!(parsed(&path, "kept text").is_some());
        assert!(parsed(&path, "another text").is_none());
        // Any write changes the stamp: read again.
        let mut f = std::fs::File::options().append(true).open(&path).unwrap();
        f.write_all(b"# more\n").unwrap();
        drop(f);
        assert_eq!(&*read(&path).unwrap().0, "[[site]]\nname = \"a\"\n# more\n");
        keep_only(dir.path(), &Default::default());
        assert!(!kept().contains_key(&path));
    }

    #[test]
    fn a_folder_is_listed_once_within_a_span_and_again_after_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("*.toml");
        let pattern = pattern.to_str().unwrap();
        let list = || {
            super::super::include::matching_files(pattern, Path::new("/"), &Default::default())
                .unwrap()
        };
        std::fs::write(dir.path().join("a.toml"), "").unwrap();
        files_read_once(|| {
            assert_eq!(list().len(), 1);
            // Made within the span, by someone else: this span's listing stands.
            std::fs::write(dir.path().join("b.toml"), "").unwrap();
            assert_eq!(list().len(), 1);
            // The span's own write: listed again.
            files_written();
            assert_eq!(list().len(), 2);
            // A span within it, ended, leaves the outer one's listing kept.
            files_read_once(|| ());
            std::fs::write(dir.path().join("c.toml"), "").unwrap();
            assert_eq!(list().len(), 2);
        });
        // Outside a span, every call lists.
        std::fs::write(dir.path().join("d.toml"), "").unwrap();
        let names: Vec<String> = list()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.toml", "b.toml", "c.toml", "d.toml"]);
    }

    #[test]
    fn a_file_is_looked_at_once_within_a_span_and_again_after_a_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "one").unwrap();
        files_read_once(|| {
            assert_eq!(&*read(&path).unwrap().0, "one");
            // Changed by someone else within the span: the span's text stands.
            std::fs::write(&path, "two").unwrap();
            assert_eq!(&*read(&path).unwrap().0, "one");
            // The span's own write: read again.
            files_written();
            assert_eq!(&*read(&path).unwrap().0, "two");
        });
        std::fs::write(&path, "three").unwrap();
        assert_eq!(&*read(&path).unwrap().0, "three");
    }
}
