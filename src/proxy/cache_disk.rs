//! The response cache's second tier (`cache_responses = { disk = SIZE, folder = PATH }`):
//! answers put out of memory for room are written to one file per store and worker process,
//! and a lookup that misses memory finds them there — read back (its bytes, with what the
//! cache knows of it, which stays in memory) and moved to memory again.
//!
//! - **The file** is unnamed (`O_TMPFILE` in the folder, see `crate::os::temp_file`): it is
//!   gone with the process, so a crash leaves nothing to clean, and no other process can
//!   open it by a path. Each worker process has its own, as its memory tier: on its node.
//! - **A ring**, bounded by `disk`: answers are written one after the other, and when the
//!   next does not fit before the end, writing starts over at the start, taking out the
//!   oldest answers it writes over. Oldest out first, rather than least recently used: an
//!   answer read from here goes back to memory (its place here is free to be written over),
//!   so what stays here is what nobody asked for since it left memory — the order it left in
//!   is the order of its last use. No free-space map, and no file that grows past its bound.
//! - **Its index stays in memory, bounded**: what the cache knows of each answer on disk
//!   (its key, its variant's values, its validators and tags) is kept in memory, at most
//!   `index_bound` bytes of it — else answers of a few bytes each would fill memory through
//!   a disk bound of gigabytes. Past it, the oldest answers go, as when the ring comes round.
//! - **Reads and writes** are `pread`/`pwrite` on the engine thread, as `super::spool`'s: an
//!   answer is at most `entry` bytes, and a recent one is in the page cache.
//!
//! Owns: [`Disk`]. Must not touch: what may be kept (`super::cache`), the memory tier and
//! its order (`super::cache_store`).

use super::cache::Stored;
use super::cache_purge::Purge;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// The fields a variant varies by, with the request's values it was kept for.
pub(super) type VaryValues = Vec<(String, Option<Vec<u8>>)>;

/// The variants in `by_key` that `purge` names, each as (key, id) — `of` telling a
/// variant's answer and id: what either tier takes out for a purge.
pub(super) fn purged<T>(
    by_key: &HashMap<String, Vec<T>>,
    purge: &Purge,
    of: impl Fn(&T) -> (&Stored, u64),
) -> Vec<(String, u64)> {
    (by_key.iter())
        .flat_map(|(key, variants)| variants.iter().map(move |v| (key, v)))
        .filter(|(key, v)| purge.takes(key, of(v).0))
        .map(|(key, v)| (key.clone(), of(v).1))
        .collect()
}

/// Takes the variant kept for `key` that `is` picks out of `by_key` (a URL left without
/// variants leaves the map): how either tier, this and memory's, lets one go.
pub(super) fn take_variant<T>(
    by_key: &mut HashMap<String, Vec<T>>,
    key: &str,
    is: impl Fn(&T) -> bool,
) -> Option<T> {
    let variants = by_key.get_mut(key)?;
    let at = variants.iter().position(is)?;
    let gone = variants.swap_remove(at);
    if variants.is_empty() {
        by_key.remove(key);
    }
    Some(gone)
}

/// One answer in the file.
struct Spilled {
    id: u64,
    vary: VaryValues,
    /// Where it starts in the file, and its bytes (head and body).
    at: u64,
    len: u64,
    /// What the cache knows of it, without its bytes.
    answer: Stored,
    /// What it costs the index in memory (see [`index_cost`]).
    cost: u64,
}

/// What an answer on disk costs the index in memory: its key, its variant's values, its
/// validator and tags, and the maps' slots and the entry itself (a generous 256 bytes).
fn index_cost(key: &str, vary: &VaryValues, answer: &Stored) -> u64 {
    let vary: usize = (vary.iter())
        .map(|(n, v)| n.len() + v.as_ref().map_or(0, Vec::len))
        .sum();
    let tags: usize = answer.tags().iter().map(String::len).sum();
    let etag = answer.validators().0.map_or(0, <[u8]>::len);
    (2 * key.len() + vary + tags + etag + 256) as u64
}

/// A store's answers on disk, in one worker process.
pub struct Disk {
    file: File,
    bound: u64,
    /// The most its index may cost in memory, and what it costs now.
    index_bound: u64,
    index_bytes: u64,
    /// Where the next answer is written.
    next_at: u64,
    by_key: HashMap<String, Vec<Spilled>>,
    /// Where each answer starts: (key, id) — what the ring writes over next, in order.
    by_start: BTreeMap<u64, (String, u64)>,
    next_id: u64,
    bytes: u64,
    entries: u64,
}

impl Disk {
    /// A new, empty tier of at most `bound` bytes in a file in `folder`, its index at most
    /// `index_bound` bytes of memory.
    pub fn open(folder: &Path, bound: u64, index_bound: u64) -> std::io::Result<Disk> {
        Ok(Disk {
            file: crate::os::temp_file::unnamed_in(folder)?,
            bound,
            index_bound,
            index_bytes: 0,
            next_at: 0,
            by_key: HashMap::new(),
            by_start: BTreeMap::new(),
            next_id: 0,
            bytes: 0,
            entries: 0,
        })
    }

    /// Writes `answer` (kept for `key`, its variant `vary`) into the ring, in place of the
    /// variant kept for the same values and of the oldest answers where it goes. An answer
    /// larger than the ring, or one the file would not take, is let go.
    pub fn spill(&mut self, key: &str, vary: VaryValues, answer: &Stored) {
        let len = answer.raw.len() as u64;
        if len == 0 || len > self.bound {
            return;
        }
        self.forget_variant(key, &vary);
        // Bounded as in memory: past it, the URL's oldest variant here goes.
        let many = self
            .by_key
            .get(key)
            .filter(|vs| vs.len() >= super::cache::MAX_VARIANTS);
        if let Some(oldest) = many.and_then(|vs| vs.iter().map(|v| v.id).min()) {
            self.remove(key, oldest);
        }
        let cost = index_cost(key, &vary, answer);
        if cost > self.index_bound {
            return;
        }
        while self.index_bytes + cost > self.index_bound {
            // The oldest: the first the ring will write over (the last lap's, then this one's).
            let oldest = (self.by_start.range(self.next_at..).next())
                .or_else(|| self.by_start.iter().next())
                .map(|(_, k)| k.clone());
            let Some((gone_key, id)) = oldest else {
                break;
            };
            self.remove(&gone_key, id);
        }
        if self.next_at + len > self.bound {
            self.next_at = 0;
        }
        let at = self.next_at;
        let over: Vec<(String, u64)> = (self.by_start.range(at..at + len))
            .map(|(_, gone)| gone.clone())
            .collect();
        for (gone_key, id) in over {
            self.remove(&gone_key, id);
        }
        if self.file.write_all_at(&answer.raw, at).is_err() {
            return;
        }
        self.next_at = at + len;
        self.next_id += 1;
        let id = self.next_id;
        self.by_start.insert(at, (key.to_string(), id));
        self.bytes += len;
        self.entries += 1;
        self.index_bytes += cost;
        let answer = answer.with_raw(Bytes::new());
        let spilled = Spilled {
            id,
            vary,
            at,
            len,
            answer,
            cost,
        };
        self.by_key
            .entry(key.to_string())
            .or_default()
            .push(spilled);
    }

    /// Takes the answer kept for `key` whose variant `matches`, read back whole (`None`
    /// when there is none, or its bytes could not be read).
    pub fn take(
        &mut self,
        key: &str,
        matches: impl Fn(&VaryValues) -> bool,
    ) -> Option<(VaryValues, Arc<Stored>)> {
        let found = self.by_key.get(key)?.iter().find(|v| matches(&v.vary))?;
        let (id, at, len) = (found.id, found.at, found.len);
        let mut raw = vec![0u8; len as usize];
        let read = self.file.read_exact_at(&mut raw, at);
        let spilled = self.remove(key, id)?;
        read.ok()?;
        let answer = Arc::new(spilled.answer.with_raw(Bytes::from(raw)));
        Some((spilled.vary, answer))
    }

    /// Takes out the answer kept for `key` with the variant `vary`, if any.
    pub fn forget_variant(&mut self, key: &str, vary: &VaryValues) {
        let same =
            (self.by_key.get(key)).and_then(|vs| vs.iter().find(|v| v.vary == *vary).map(|v| v.id));
        if let Some(id) = same {
            self.remove(key, id);
        }
    }

    /// Takes out every answer kept for `key`.
    pub fn forget(&mut self, key: &str) {
        let ids: Vec<u64> = (self.by_key.get(key).into_iter().flatten())
            .map(|v| v.id)
            .collect();
        for id in ids {
            self.remove(key, id);
        }
    }

    /// Takes out what `purge` names: how many answers.
    pub fn purge(&mut self, purge: &Purge) -> usize {
        let gone = purged(&self.by_key, purge, |v| (&v.answer, v.id));
        for (key, id) in &gone {
            self.remove(key, *id);
        }
        gone.len()
    }

    /// The bytes of the answers it holds, and how many.
    pub fn held(&self) -> (u64, u64) {
        (self.bytes, self.entries)
    }

    /// What its index costs in memory now.
    #[cfg(test)]
    pub fn index_bytes(&self) -> u64 {
        self.index_bytes
    }

    fn remove(&mut self, key: &str, id: u64) -> Option<Spilled> {
        let gone = take_variant(&mut self.by_key, key, |v| v.id == id)?;
        self.by_start.remove(&gone.at);
        self.bytes -= gone.len;
        self.entries -= 1;
        self.index_bytes -= gone.cost;
        Some(gone)
    }
}
