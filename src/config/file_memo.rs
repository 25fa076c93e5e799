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
//! Within a change through the configuration API ([`files_read_once`]) even that look is
//! spared where it can be: the folders listed are watched (inotify, `os::folder_watch`), and
//! a file kept from a watched folder, with no event naming it since, is used without a
//! `statx` — nor is the folder listed again: an entry that came or went is put in or taken
//! out of the listing kept, as are the files the change writes itself
//! ([`files_written_here`]). At 10,000 sites those looks were a fifth of a change's time,
//! and listing the folder again a tenth of an added site's. A file of a folder the kernel
//! would not watch, a symbolic link (its target may change elsewhere), or any after the watch's queue
//! overflowed is looked at as before. Not seen: a file with a second name (a hard link)
//! outside the folder, written through that name — its next look (a reload, `check`, or a
//! change after the file's own folder moved) reads it. `reload`, `check` and the start
//! always look.
//!
//! Owns: the kept texts and tables, and when they may be used. Must not touch: what the
//! tables mean (`validate`), or which files are read (`include`, `document`).

use super::raw::{RawConfig, RawPool, RawSite};
use crate::os::folder_watch::{FolderWatch, Seen};
// A fast hasher: 10,000 paths are looked up in these at each change; they are the
// configuration's own files, not a client's input.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
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
    /// Whether a change to it would be seen (its folder watched since before it was last
    /// looked at, and it no symbolic link): within a change through the API it is then
    /// used without a look.
    trusted: bool,
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
    // A trusted file first: nearly all of a hoster's are, and were each looked up in the
    // span's reads in vain. A file the span looked at has the same text kept, or none
    // trusted (`look` trusts only a text that stands).
    if trusting() {
        if let Some(k) = kept().get(path).filter(|k| k.trusted) {
            return Ok((k.text.clone(), k.stamp));
        }
    }
    let seen = SPAN.with_borrow(|s| s.as_ref().and_then(|s| s.read.get(path).cloned()));
    if let Some(seen) = seen {
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
    #[cfg(test)]
    LOOKS.with(|n| n.set(n.get() + 1));
    // Watched before the look: a change after it is an event.
    let watched = watched_folder(path);
    let stamp = Stamp::of(&std::fs::metadata(path)?);
    if let Some(k) = kept().get_mut(path).filter(|k| k.stamp == stamp) {
        if watched && !k.trusted {
            k.trusted = not_a_link(path);
        }
        return Ok((k.text.clone(), stamp));
    }
    let text: Arc<str> = std::fs::read_to_string(path)?.into();
    // Its metadata again: a write between the first look and the read would pair the new
    // text with the old stamp.
    let after = Stamp::of(&std::fs::metadata(path)?);
    if after == stamp && stamp.settled(SystemTime::now()) {
        let raw = None;
        let text = text.clone();
        let trusted = watched && not_a_link(path);
        let k = Kept {
            stamp,
            text,
            raw,
            trusted,
        };
        kept().insert(path.to_path_buf(), k);
    }
    Ok((text, stamp))
}

#[cfg(test)]
thread_local! {
    /// The files looked at on disk by this thread (tests: what a watch spares).
    static LOOKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The folders listed on disk by this thread.
    static LISTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether `path` is a file itself, not a symbolic link (whose target may change where no
/// watch sees it).
fn not_a_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// The folders watched; `None` when the kernel gives no inotify (every file is then looked
/// at, as without it).
fn watch() -> std::sync::MutexGuard<'static, Option<FolderWatch>> {
    static WATCH: std::sync::LazyLock<Mutex<Option<FolderWatch>>> =
        std::sync::LazyLock::new(|| Mutex::new(FolderWatch::new().ok()));
    WATCH
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `path`'s folder is watched.
fn watched_folder(path: &Path) -> bool {
    let folder = path.parent().unwrap_or(Path::new("/"));
    watch().as_ref().is_some_and(|w| w.watches(folder))
}

/// Forgets what the watched folders say changed: those files' kept texts, those folders'
/// kept listings; after a lost folder or an overflow, every trust in them.
fn take_changes() {
    let seen = match watch().as_mut() {
        Some(w) => w.changes(),
        None => return,
    };
    if seen.is_empty() {
        return;
    }
    let (mut kept, mut listings) = (kept(), kept_listings());
    for s in seen {
        match s {
            Seen::File(path) => {
                kept.remove(&path);
            }
            // A listing is mended, not made again (10,000 entries read and sorted at each
            // site a panel adds): a file come is put in its place, one gone taken out. A
            // file replaced by a rename (the configuration API's every write) leaves it as
            // it was. Whether it is a file is asked now, as a listing now would.
            Seen::Came(path) => mend(&mut listings, &path, path.is_file()),
            Seen::Went(path) => mend(&mut listings, &path, false),
            Seen::Lost(folder) => {
                let inside = |p: &Path| p.parent() == Some(folder.as_path());
                (kept.iter_mut())
                    .filter(|(p, _)| inside(p))
                    .for_each(|(_, k)| k.trusted = false);
                listings.retain(|(f, _), _| *f != folder);
            }
            Seen::Overflow => {
                kept.values_mut().for_each(|k| k.trusted = false);
                listings.clear();
            }
        }
    }
}

/// How a file name is matched (as `include` lists): `*` matches no leading dot — an
/// editor's `.shop.toml` is not a site.
pub(super) fn name_options() -> glob::MatchOptions {
    glob::MatchOptions {
        require_literal_leading_dot: true,
        ..glob::MatchOptions::new()
    }
}

/// Whether `path`'s file name is one the file-name pattern `name` matches; a pattern that
/// does not parse matches everything (whoever asks then lists again).
fn name_matches(name: &str, path: &Path) -> bool {
    let file = path.file_name().and_then(|n| n.to_str());
    match (glob::Pattern::new(name), file) {
        (Ok(pattern), Some(file)) => pattern.matches_with(file, name_options()),
        _ => true,
    }
}

/// The place of `path` among a listing's `files` (sorted by name), or where it would go.
fn place(files: &[PathBuf], path: &Path) -> Result<usize, usize> {
    files.binary_search_by(|p| p.file_name().cmp(&path.file_name()))
}

/// Each listing as it is with `path` a file there now (`there`) or not: put in its place,
/// or taken out. A name a listing would not read (not UTF-8: `include` skips it) is never
/// put in.
fn mend(listings: &mut Listings, path: &Path, there: bool) {
    let named = path.file_name().and_then(|n| n.to_str()).is_some();
    for ((folder, pattern), files) in listings.iter_mut() {
        if path.parent() != Some(folder.as_path()) || !name_matches(pattern, path) {
            continue;
        }
        *files = match (place(files, path), there && named) {
            (Err(at), true) => {
                let mut now = Vec::with_capacity(files.len() + 1);
                now.extend_from_slice(&files[..at]);
                now.push(path.to_path_buf());
                now.extend_from_slice(&files[at..]);
                now.into()
            }
            (Ok(at), false) => [&files[..at], &files[at + 1..]].concat().into(),
            _ => continue,
        };
    }
}

/// Folder listings kept across changes through the API while their folder is watched and
/// no entry came or went.
type Listings = HashMap<(PathBuf, String), Arc<[PathBuf]>>;

fn kept_listings() -> std::sync::MutexGuard<'static, Listings> {
    static KEPT: std::sync::LazyLock<Mutex<Listings>> = std::sync::LazyLock::new(Default::default);
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
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
/// files are there): what is kept stays the size of the configurations read. Within a
/// change through the API, a file removed from a watched folder was forgotten as the watch
/// told it, and a pass over every kept file is spared (the next reload makes it).
pub(super) fn keep_only(folder: &Path, read: &HashSet<PathBuf>) {
    if trusting() {
        return;
    }
    kept().retain(|path, _| !path.starts_with(folder) || read.contains(path));
}

/// Whether this thread is in a [`files_read_once`] span that uses watched files without a
/// look (an API change, unless it had to put files back).
pub(super) fn trusting() -> bool {
    SPAN.with_borrow(|s| s.as_ref().is_some_and(|s| s.trusting))
}

/// Folder listings and files' texts kept for the span of one [`files_read_once`]: a change
/// through the configuration API lists a hoster's `sites.d` and reads its files to edit
/// it, then again to validate the result; 10,000 entries read, matched and sorted, and
/// 10,000 files looked at, twice. Nothing is kept past that span (a folder's or a file's
/// times do not tell two changes within a clock tick apart). What the span writes itself
/// is mended in it ([`files_written_here`]); a write it cannot account for file by file (a
/// failed one put back) forgets it all ([`files_written`]).
#[derive(Default)]
struct Span {
    listings: Listings,
    read: HashMap<PathBuf, (Arc<str>, Stamp)>,
    /// Whether watched files and listings are used without a look: from the span's start
    /// (once the watch's events are taken) until [`files_written`] (whose writes' events
    /// come after).
    trusting: bool,
}

thread_local! {
    static SPAN: std::cell::RefCell<Option<Span>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with each folder listed, and each file looked at, once within it (see [`Span`]).
pub fn files_read_once<R>(f: impl FnOnce() -> R) -> R {
    // Only the outermost span ends the keeping (an inner one may meet no listing yet).
    let outermost = SPAN.with_borrow(|s| s.is_none());
    if outermost {
        take_changes();
        SPAN.with_borrow_mut(|s| {
            *s = Some(Span {
                trusting: true,
                ..Span::default()
            })
        });
    }
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

/// What this process itself just wrote (`true`: a file there now) or removed — a change
/// through the configuration API, once written: each file's kept text is forgotten (it is
/// looked at again), and the listings kept, the span's and the watched folders', are
/// mended as its events would mend them. The span goes on trusting the rest: without it,
/// the write's validation listed 10,000 entries and looked at 10,000 files again. Its own
/// events, taken at the next span, find the listings already as they say.
pub fn files_written_here(changes: &[(&Path, bool)]) {
    let (mut kept, mut listings) = (kept(), kept_listings());
    for &(path, there) in changes {
        kept.remove(path);
        mend(&mut listings, path, there);
    }
    SPAN.with_borrow_mut(|s| {
        if let Some(s) = s {
            for &(path, there) in changes {
                s.read.remove(path);
                mend(&mut s.listings, path, there);
            }
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
    let (kept, trusting) = SPAN.with_borrow(|s| match s {
        Some(s) => (s.listings.get(&key).cloned(), s.trusting),
        None => (None, false),
    });
    if let Some(kept) = kept {
        return Ok(kept);
    }
    let mut watched = false;
    if trusting {
        if let Some(kept) = kept_listings().get(&key).cloned() {
            return Ok(kept);
        }
        // Watched before it is listed: an entry made after is an event.
        watched = watch().as_mut().is_some_and(|w| w.watch(folder).is_ok());
    }
    #[cfg(test)]
    LISTS.with(|n| n.set(n.get() + 1));
    let found: Arc<[PathBuf]> = list()?.into();
    if watched {
        kept_listings().insert(key.clone(), found.clone());
    }
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
    kept().insert(
        path.to_path_buf(),
        Kept {
            stamp,
            text,
            raw,
            trusted: false,
        },
    );
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
                trusted: false,
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
    fn a_watched_file_is_not_looked_at_again_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("sites.d");
        std::fs::create_dir(&folder).unwrap();
        let (a, b) = (folder.join("a.toml"), folder.join("b.toml"));
        std::fs::write(&a, "one").unwrap();
        keep_now(&a);
        let pattern = folder.join("*.toml");
        let pattern = pattern.to_str().unwrap();
        let list = || {
            super::super::include::matching_files(pattern, Path::new("/"), &Default::default())
                .unwrap()
        };
        let looks = || LOOKS.with(std::cell::Cell::get);
        // The first span watches the folder as it lists it; its look trusts the kept text.
        files_read_once(|| {
            assert_eq!(list(), std::slice::from_ref(&a));
            assert_eq!(&*read(&a).unwrap().0, "one");
        });
        // The next one looks at nothing.
        let before = looks();
        files_read_once(|| {
            assert_eq!(list(), std::slice::from_ref(&a));
            assert_eq!(&*read(&a).unwrap().0, "one");
        });
        assert_eq!(looks(), before);
        // Outside a span (a reload, `check`), every read looks.
        assert_eq!(&*read(&a).unwrap().0, "one");
        assert_eq!(looks(), before + 1);
        // Written, and a file made: both seen at the next span.
        std::fs::write(&a, "two").unwrap();
        std::fs::write(&b, "").unwrap();
        files_read_once(|| {
            assert_eq!(list(), [a.clone(), b.clone()]);
            assert_eq!(&*read(&a).unwrap().0, "two");
        });
        // Replaced by a rename, as the configuration API writes: read again, its folder not
        // listed again.
        std::fs::write(folder.join(".a.toml.new"), "four").unwrap();
        std::fs::rename(folder.join(".a.toml.new"), &a).unwrap();
        let lists = LISTS.with(std::cell::Cell::get);
        files_read_once(|| {
            assert_eq!(list(), [a.clone(), b.clone()]);
            assert_eq!(&*read(&a).unwrap().0, "four");
        });
        assert_eq!(LISTS.with(std::cell::Cell::get), lists);
        // Removed, and others made (one a folder, one named as no listing reads): the
        // listing mended from the events, the folder not listed again.
        std::fs::remove_file(&b).unwrap();
        files_read_once(|| assert_eq!(list(), std::slice::from_ref(&a)));
        let first = folder.join("0.toml");
        std::fs::write(&first, "").unwrap();
        std::fs::create_dir(folder.join("d.toml")).unwrap();
        std::fs::write(folder.join("e.txt"), "").unwrap();
        files_read_once(|| assert_eq!(list(), [first.clone(), a.clone()]));
        std::fs::remove_file(&first).unwrap();
        files_read_once(|| assert_eq!(list(), std::slice::from_ref(&a)));
        assert_eq!(LISTS.with(std::cell::Cell::get), lists);
        // A symbolic link is always looked at: its target may change where no watch sees.
        let elsewhere = dir.path().join("c.toml");
        std::fs::write(&elsewhere, "three").unwrap();
        let c = folder.join("c.toml");
        std::os::unix::fs::symlink(&elsewhere, &c).unwrap();
        keep_now(&c);
        files_read_once(|| assert_eq!(&*read(&c).unwrap().0, "three"));
        let before = looks();
        files_read_once(|| assert_eq!(&*read(&c).unwrap().0, "three"));
        assert_eq!(looks(), before + 1);
        // The span's own write: looked at again within it (its events come after).
        keep_now(&a);
        files_read_once(|| assert_eq!(&*read(&a).unwrap().0, "four"));
        let before = looks();
        files_read_once(|| assert_eq!(&*read(&a).unwrap().0, "four"));
        assert_eq!(looks(), before);
        files_read_once(|| {
            files_written();
            let before = looks();
            assert_eq!(&*read(&a).unwrap().0, "four");
            assert_eq!(looks(), before + 1);
        });
    }

    #[test]
    fn what_a_span_writes_itself_is_mended_in_what_it_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("sites.d");
        std::fs::create_dir(&folder).unwrap();
        let (a, b, c) = (
            folder.join("a.toml"),
            folder.join("b.toml"),
            folder.join("c.toml"),
        );
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&c, "three").unwrap();
        let pattern = folder.join("*.toml");
        let pattern = pattern.to_str().unwrap();
        let list = || {
            super::super::include::matching_files(pattern, Path::new("/"), &Default::default())
                .unwrap()
        };
        files_read_once(|| assert_eq!(list(), [a.clone(), c.clone()]));
        files_read_once(|| {
            assert_eq!(&*read(&a).unwrap().0, "one");
            let lists = LISTS.with(std::cell::Cell::get);
            // b made, a rewritten and c removed, as the configuration API writes.
            std::fs::write(&b, "two").unwrap();
            std::fs::write(&a, "four").unwrap();
            std::fs::remove_file(&c).unwrap();
            files_written_here(&[(&b, true), (&a, true), (&c, false)]);
            assert_eq!(list(), [a.clone(), b.clone()]);
            assert_eq!(&*read(&a).unwrap().0, "four");
            assert_eq!(&*read(&b).unwrap().0, "two");
            assert_eq!(LISTS.with(std::cell::Cell::get), lists, "listed again");
        });
        // Their events, taken at the next span, leave the listing as it is.
        let lists = LISTS.with(std::cell::Cell::get);
        files_read_once(|| assert_eq!(list(), [a.clone(), b.clone()]));
        assert_eq!(LISTS.with(std::cell::Cell::get), lists);
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
