//! A cached file: what a response needs of it (its head lines, validators, size, body in
//! memory or an open descriptor), its compressed forms once made, and whether it is still
//! the file on disk.
//!
//! Owns: [`Entry`], its [`Variant`]s' shape and its identity check. Must not touch: finding
//! files, making variants, the cache's bounds (see the parent) or HTTP semantics (see
//! `respond`).

use crate::compress::Coding;
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
    /// Worth compressing for its site: a compressible type, at least [`MIN_COMPRESS`] bytes.
    pub(super) compressible: bool,
    /// Its compressed forms by coding ([`Coding::index`]), each made at its first request.
    pub(super) variants: [Variant; 3],
}

/// Smaller files are sent as they are: a coding's own overhead would eat the gain.
pub(super) const MIN_COMPRESS: u64 = 256;

/// A compressed form of a cached file.
pub(super) enum Variant {
    /// Not asked for yet.
    Unmade,
    /// There is none worth sending (no precompressed file, and too large to compress here,
    /// or no smaller compressed).
    Absent,
    Made(Box<Rep>),
}

/// A representation's own response parts.
pub(super) struct Rep {
    /// Its field lines: the file's, with its own `ETag` and `Content-Encoding`.
    pub(super) head: Vec<u8>,
    pub(super) etag: String,
    pub(super) size: u64,
    pub(super) body: Body,
}

/// What a response shows of a file: the file itself or one of its compressed forms.
pub(super) struct Shown<'a> {
    pub(super) head: &'a [u8],
    pub(super) etag: &'a str,
    pub(super) mtime: SystemTime,
    pub(super) size: u64,
    pub(super) body: &'a Body,
    /// Byte ranges are served of the file as it is only.
    pub(super) ranges: bool,
}

/// What describes a file in its head, beside its validators.
pub(super) struct Described<'a> {
    pub(super) size: u64,
    pub(super) content_type: &'a str,
    pub(super) cache_control: Option<&'a str>,
    /// Its site compresses this file's type: its answers vary with `Accept-Encoding`.
    pub(super) compressed: bool,
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
    /// The entry of the file at `fs_path`, described by `d`.
    pub(super) fn new(fs_path: PathBuf, meta: &Metadata, d: Described<'_>, body: Body) -> Self {
        let Described {
            size,
            content_type,
            cache_control,
            compressed,
        } = d;
        let compressible = compressed && size >= MIN_COMPRESS;
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
            ("Vary", if compressible { "Accept-Encoding" } else { "" }),
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
            compressible,
            variants: [Variant::Unmade, Variant::Unmade, Variant::Unmade],
        }
    }

    /// Bytes it keeps in memory, its variants' included.
    pub(super) fn memory(&self) -> usize {
        let body = |b: &Body| if let Body::Memory(d) = b { d.len() } else { 0 };
        let variants: usize = self
            .variants
            .iter()
            .map(|v| match v {
                Variant::Made(r) => r.head.len() + body(&r.body),
                _ => 0,
            })
            .sum();
        self.head.len() + body(&self.body) + variants
    }

    /// The file as it is.
    pub(super) fn shown(&self) -> Shown<'_> {
        Shown {
            head: &self.head,
            etag: &self.etag,
            mtime: self.mtime,
            size: self.size,
            body: &self.body,
            ranges: true,
        }
    }

    /// Its variant in `coding`, if made.
    pub(super) fn shown_in(&self, coding: Coding) -> Option<Shown<'_>> {
        match &self.variants[coding.index()] {
            Variant::Made(r) => Some(Shown {
                head: &r.head,
                etag: &r.etag,
                mtime: self.mtime,
                size: r.size,
                body: &r.body,
                ranges: false,
            }),
            _ => None,
        }
    }

    /// The representation of its compressed form `body` (`size` bytes) in `coding`: the
    /// file's fields but its own `ETag` (the file's with the coding and the size: a
    /// precompressed file rewritten alone gets a new one) and `Content-Encoding`; no
    /// `Accept-Ranges` (ranges are served of the file as it is).
    pub(super) fn variant(&self, coding: Coding, body: Body, size: u64) -> Rep {
        let inner = self.etag.trim_matches('"');
        let etag = format!("\"{inner}-{}-{size:x}\"", coding.token());
        let mut head = Vec::with_capacity(self.head.len() + 48);
        for line in self.head.split_inclusive(|&b| b == b'\n') {
            if !(line.starts_with(b"ETag:") || line.starts_with(b"Accept-Ranges:")) {
                head.extend_from_slice(line);
            }
        }
        for (name, value) in [
            ("ETag", etag.as_str()),
            ("Content-Encoding", coding.token()),
        ] {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        Rep {
            head,
            etag,
            size,
            body,
        }
    }
}

/// Whether the file behind an entry is unchanged (see [`FileIdentity`]).
pub(super) fn still_valid(e: &Entry) -> bool {
    std::fs::metadata(&e.fs_path).is_ok_and(|m| FileIdentity::of(&m) == e.identity)
}
