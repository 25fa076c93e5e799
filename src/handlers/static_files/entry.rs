//! A cached file: what a response needs of it (its head lines, validators, size, body in
//! memory or an open descriptor) and whether it is still the file on disk.
//!
//! Owns: [`Entry`] and its identity check. Must not touch: finding files, the cache's bounds
//! (see the parent) or HTTP semantics (see `respond`).

use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) struct Entry {
    pub(super) fs_path: PathBuf,
    /// Formatted `Content-Type`, `ETag`, `Last-Modified`, `Accept-Ranges` lines.
    pub(super) head: Vec<u8>,
    pub(super) etag: String,
    /// Whole seconds, as HTTP dates carry them.
    pub(super) mtime: SystemTime,
    pub(super) size: u64,
    pub(super) identity: FileIdentity,
    pub(super) body: Body,
    /// The second (clock time) this entry was last checked against the file system.
    pub(super) checked: u64,
}

/// What must be unchanged for a cached file to still be the file on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileIdentity {
    pub(super) fn of(m: &Metadata) -> Self {
        FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

pub(super) enum Body {
    Memory(Box<[u8]>),
    Open(Rc<File>),
}

impl Entry {
    /// The entry of the file at `fs_path`, of `size` bytes and `content_type`, its head with
    /// `Cache-Control: cache_control` when the site sets one for the type.
    pub(super) fn new(
        fs_path: PathBuf,
        meta: &Metadata,
        (size, content_type): (u64, &str),
        cache_control: Option<&str>,
        body: Body,
    ) -> Self {
        let identity = FileIdentity::of(meta);
        let (secs, nanos) = identity.mtime;
        // nginx's form, "<mtime hex>-<size hex>", with the nanoseconds when the file system
        // has them: two versions written within one second must not share an ETag.
        let etag = if nanos == 0 {
            format!("\"{secs:x}-{size:x}\"")
        } else {
            format!("\"{secs:x}.{nanos:x}-{size:x}\"")
        };
        // HTTP dates have whole seconds; compare and print the truncated time.
        let mtime = UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64);
        let mut head = Vec::with_capacity(160);
        for (name, value) in [
            ("Content-Type", content_type),
            ("ETag", &etag),
            ("Last-Modified", &httpdate::fmt_http_date(mtime)),
            ("Accept-Ranges", "bytes"),
            ("Cache-Control", cache_control.unwrap_or_default()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        Entry {
            fs_path,
            head,
            etag,
            mtime,
            size,
            identity,
            body,
            checked: 0,
        }
    }

    pub(super) fn memory(&self) -> usize {
        self.head.len()
            + if let Body::Memory(d) = &self.body {
                d.len()
            } else {
                0
            }
    }
}

/// Whether the file behind an entry is unchanged (see [`FileIdentity`]).
pub(super) fn still_valid(e: &Entry) -> bool {
    std::fs::metadata(&e.fs_path).is_ok_and(|m| FileIdentity::of(&m) == e.identity)
}
