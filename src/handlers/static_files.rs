//! The `static` handler: files under a site's root, served safely and fast.
//!
//! Owns: URL-path → file resolution (percent-decoding, `..` and NUL refused, symlinks out of
//! root refused unless `follow_symlinks`), index files, the directory redirect, conditional
//! requests (`ETag`/`If-None-Match`, `Last-Modified`/`If-Modified-Since`), single byte ranges
//! (206/416), HEAD, 405 for other methods, and a per-thread cache.
//!
//! The cache is per worker thread (shared-nothing: no lock on the request path). Small files
//! are kept whole with their response headers preformatted, so a hit is a hash lookup and a
//! `memcpy`; large files keep an open descriptor and go out with `sendfile`. An entry is
//! re-checked with one `stat` at most once a second, so a changed file is noticed within a
//! second. The price, as the web-gardening seed says of web gardens, is one copy per thread.
//! Must not touch: the connection (it writes into a [`Responder`]).

use super::mime;
use crate::http::clock::Clock;
use crate::http::conn::{FileBody, Reply};
use crate::http::{Method, Request, Responder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Files up to this size are kept in memory.
pub const SMALL_FILE: u64 = 256 << 10;
/// Memory a thread's cache may hold before it is emptied.
const CACHE_BUDGET: usize = 32 << 20;
const CACHE_ENTRIES: usize = 8192;

/// The welcome page served when a site has no root.
const WELCOME: &str = include_str!("welcome.html");

struct Entry {
    fs_path: PathBuf,
    /// Formatted `Content-Type`, `ETag`, `Last-Modified`, `Accept-Ranges` lines.
    head: Vec<u8>,
    etag: String,
    mtime: SystemTime,
    size: u64,
    ino: u64,
    body: Body,
    /// The second (clock time) this entry was last checked against the file system.
    checked: u64,
}

enum Body {
    Memory(Box<[u8]>),
    Open(Rc<File>),
}

enum Resolved {
    File(Entry),
    Redirect(String),
    Status(u16),
}

/// One site's static files.
pub struct StaticFiles {
    root: Option<PathBuf>,
    canonical_root: Option<PathBuf>,
    index: Vec<String>,
    follow_symlinks: bool,
    cache: RefCell<HashMap<Box<str>, Entry>>,
    cached_bytes: std::cell::Cell<usize>,
}

impl StaticFiles {
    pub fn new(root: Option<PathBuf>, index: Vec<String>, follow_symlinks: bool) -> Self {
        let canonical_root = root.as_ref().and_then(|r| std::fs::canonicalize(r).ok());
        StaticFiles {
            root,
            canonical_root,
            index,
            follow_symlinks,
            cache: RefCell::new(HashMap::new()),
            cached_bytes: Default::default(),
        }
    }

    pub fn serve(&self, req: &Request<'_>, resp: &mut Responder<'_>, clock: &Clock) -> Reply {
        if !matches!(req.method, Method::Get | Method::Head) {
            resp.status(405)
                .header("Allow", "GET, HEAD")
                .header("Content-Type", "text/plain; charset=utf-8")
                .body(b"405 Method Not Allowed\n");
            return Reply::Done;
        }
        if self.root.is_none() {
            if req.path == "/" || req.path == "/index.html" {
                resp.simple(200, "text/html; charset=utf-8", WELCOME.as_bytes());
            } else {
                resp.error(404);
            }
            return Reply::Done;
        }
        let now = clock.unix_seconds();
        let mut cache = self.cache.borrow_mut();
        // A hit is one lookup; an entry checked in an earlier second is re-checked with one stat.
        match cache.get_mut(req.path) {
            Some(e) if e.checked == now => return respond(e, req, resp),
            Some(e) if still_valid(e) => {
                e.checked = now;
                return respond(e, req, resp);
            }
            Some(_) => {
                let gone = cache.remove(req.path).expect("entry present");
                self.cached_bytes
                    .set(self.cached_bytes.get().saturating_sub(gone.memory()));
            }
            None => {}
        }
        match self.resolve(req.path) {
            Resolved::Status(s) => {
                resp.error(s);
                Reply::Done
            }
            Resolved::Redirect(mut location) => {
                if !req.query.is_empty() {
                    location.push('?');
                    location.push_str(req.query);
                }
                resp.status(301)
                    .header("Location", &location)
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .body(b"301 Moved Permanently\n");
                Reply::Done
            }
            Resolved::File(mut entry) => {
                entry.checked = now;
                if cache.len() >= CACHE_ENTRIES
                    || self.cached_bytes.get() + entry.memory() > CACHE_BUDGET
                {
                    cache.clear();
                    self.cached_bytes.set(0);
                }
                self.cached_bytes
                    .set(self.cached_bytes.get() + entry.memory());
                let entry = cache.entry(req.path.into()).or_insert(entry);
                respond(entry, req, resp)
            }
        }
    }

    /// Maps a URL path to a file, refusing anything that could leave the root.
    fn resolve(&self, raw_path: &str) -> Resolved {
        let (Some(root), Some(canonical_root)) = (&self.root, &self.canonical_root) else {
            return Resolved::Status(404);
        };
        let segments = match normalize(raw_path) {
            Ok(s) => s,
            Err(status) => return Resolved::Status(status),
        };
        let mut path = root.clone();
        for s in &segments {
            path.push(OsStr::from_bytes(s));
        }
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        if meta.is_dir() {
            if !raw_path.ends_with('/') {
                return Resolved::Redirect(format!("{raw_path}/"));
            }
            for name in &self.index {
                let candidate = path.join(name);
                if let Ok(m) = std::fs::metadata(&candidate) {
                    if m.is_file() {
                        return self.open(candidate, canonical_root, name);
                    }
                }
            }
            return Resolved::Status(403);
        }
        if !meta.is_file() {
            return Resolved::Status(404);
        }
        let name = segments
            .last()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .unwrap_or_default();
        self.open(path, canonical_root, &name)
    }

    fn open(&self, path: PathBuf, canonical_root: &Path, name: &str) -> Resolved {
        if !self.follow_symlinks {
            // Symlinks may point anywhere; only what really lies under the root is served.
            match std::fs::canonicalize(&path) {
                Ok(real) if real.starts_with(canonical_root) => {}
                Ok(_) => return Resolved::Status(404),
                Err(e) => return Resolved::Status(io_status(&e)),
            }
        }
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        let meta = match file.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => return Resolved::Status(404),
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        let body = if meta.len() <= SMALL_FILE {
            let mut data = Vec::with_capacity(meta.len() as usize);
            if let Err(e) = file.read_to_end(&mut data) {
                return Resolved::Status(io_status(&e));
            }
            Body::Memory(data.into_boxed_slice())
        } else {
            Body::Open(Rc::new(file))
        };
        let size = match &body {
            Body::Memory(d) => d.len() as u64,
            Body::Open(_) => meta.len(),
        };
        Resolved::File(Entry::new(
            path,
            &meta,
            size,
            mime::content_type(name),
            body,
        ))
    }
}

impl Entry {
    fn new(fs_path: PathBuf, meta: &Metadata, size: u64, content_type: &str, body: Body) -> Self {
        let mtime = meta.modified().unwrap_or(UNIX_EPOCH);
        let secs = mtime.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // nginx's form: "<mtime hex>-<size hex>".
        let etag = format!("\"{secs:x}-{size:x}\"");
        // HTTP dates have whole seconds; compare and print the truncated time.
        let mtime = UNIX_EPOCH + Duration::from_secs(secs);
        let mut head = Vec::with_capacity(160);
        for (name, value) in [
            ("Content-Type", content_type),
            ("ETag", &etag),
            ("Last-Modified", &httpdate::fmt_http_date(mtime)),
            ("Accept-Ranges", "bytes"),
        ] {
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
            ino: meta.ino(),
            body,
            checked: 0,
        }
    }

    fn memory(&self) -> usize {
        self.head.len()
            + if let Body::Memory(d) = &self.body {
                d.len()
            } else {
                0
            }
    }
}

/// Whether the file behind an entry is unchanged (same inode, size and modification time).
fn still_valid(e: &Entry) -> bool {
    match std::fs::metadata(&e.fs_path) {
        Ok(m) => {
            let secs = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            m.ino() == e.ino
                && m.len() == e.size
                && UNIX_EPOCH + Duration::from_secs(secs) == e.mtime
        }
        Err(_) => false,
    }
}

fn io_status(e: &std::io::Error) -> u16 {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => 403,
        _ => 404,
    }
}

/// Splits a URL path into decoded segments, resolving `.` and `..`. Refuses (400) NUL bytes,
/// encoded slashes, malformed escapes and any `..` that would climb above the root.
pub fn normalize(raw: &str) -> Result<Vec<Vec<u8>>, u16> {
    if !raw.starts_with('/') {
        return Err(400);
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for seg in raw.split('/') {
        let decoded = percent_decode(seg.as_bytes()).ok_or(400u16)?;
        if decoded.contains(&0) || decoded.contains(&b'/') || decoded.contains(&b'\\') {
            return Err(400);
        }
        match decoded.as_slice() {
            b"" | b"." => {}
            b".." => {
                if out.pop().is_none() {
                    return Err(400);
                }
            }
            _ => out.push(decoded),
        }
    }
    Ok(out)
}

fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            out.push(v);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Writes the response for a cached entry: 304, 206, 416 or 200.
fn respond(e: &Entry, req: &Request<'_>, resp: &mut Responder<'_>) -> Reply {
    if not_modified(e, req) {
        resp.status(304).raw_headers(&e.head).end_head();
        return Reply::Done;
    }
    let range = match req.header("range") {
        Some(r) if req.method == Method::Get && if_range_matches(e, req) => parse_range(r, e.size),
        _ => RangeRequest::Full,
    };
    let (status, start, len) = match range {
        RangeRequest::Full => (200, 0, e.size),
        RangeRequest::Partial(start, end) => (206, start, end - start + 1),
        RangeRequest::Unsatisfiable => {
            resp.status(416)
                .header("Content-Range", &format!("bytes */{}", e.size))
                .header("Content-Type", "text/plain; charset=utf-8")
                .body(b"416 Range Not Satisfiable\n");
            return Reply::Done;
        }
    };
    resp.status(status).raw_headers(&e.head);
    if status == 206 {
        resp.header(
            "Content-Range",
            &format!("bytes {start}-{}/{}", start + len - 1, e.size),
        );
    }
    resp.content_length(len).end_head();
    if resp.head_only() {
        return Reply::Done;
    }
    match &e.body {
        Body::Memory(data) => {
            resp.append(&data[start as usize..(start + len) as usize]);
            Reply::Done
        }
        Body::Open(file) => Reply::File(FileBody {
            file: Rc::clone(file),
            offset: start,
            len,
        }),
    }
}

fn not_modified(e: &Entry, req: &Request<'_>) -> bool {
    if let Some(inm) = req.header("if-none-match") {
        // Weak comparison (RFC 9110 §13.1.2): W/ prefixes are ignored.
        return inm
            .split(',')
            .map(str::trim)
            .any(|t| t == "*" || t.trim_start_matches("W/") == e.etag);
    }
    if let Some(ims) = req.header("if-modified-since") {
        if let Ok(since) = httpdate::parse_http_date(ims) {
            return e.mtime <= since;
        }
    }
    false
}

fn if_range_matches(e: &Entry, req: &Request<'_>) -> bool {
    match req.header("if-range") {
        None => true,
        Some(v) if v.starts_with('"') => v == e.etag,
        Some(v) => httpdate::parse_http_date(v).is_ok_and(|t| t == e.mtime),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum RangeRequest {
    Full,
    /// Inclusive byte positions.
    Partial(u64, u64),
    Unsatisfiable,
}

/// Parses a `Range` header for one range. Several ranges, or a unit other than bytes, are
/// answered with the whole file — which RFC 9110 allows.
fn parse_range(header: &str, size: u64) -> RangeRequest {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return RangeRequest::Full;
    };
    if spec.contains(',') {
        return RangeRequest::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeRequest::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let num = |s: &str| s.parse::<u64>().ok();
    let (start, end) = match (a.is_empty(), b.is_empty()) {
        (true, true) => return RangeRequest::Full,
        (true, false) => {
            // Suffix: the last N bytes.
            let Some(n) = num(b) else {
                return RangeRequest::Full;
            };
            if n == 0 {
                return RangeRequest::Unsatisfiable;
            }
            (size.saturating_sub(n), size.saturating_sub(1))
        }
        (false, _) => {
            let Some(start) = num(a) else {
                return RangeRequest::Full;
            };
            let end = if b.is_empty() {
                size.saturating_sub(1)
            } else {
                match num(b) {
                    Some(e) if e >= start => e.min(size.saturating_sub(1)),
                    _ => return RangeRequest::Full,
                }
            };
            (start, end)
        }
    };
    if size == 0 || start >= size {
        return RangeRequest::Unsatisfiable;
    }
    RangeRequest::Partial(start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_refuses_escapes() {
        assert_eq!(
            normalize("/a/./b/../c").unwrap(),
            vec![b"a".to_vec(), b"c".to_vec()]
        );
        assert_eq!(normalize("/a%20b").unwrap(), vec![b"a b".to_vec()]);
        for bad in [
            "/..",
            "/../etc/passwd",
            "/a/../../b",
            "/%2e%2e/x",
            "/%2E%2e/",
            "/a%2fb",
            "/a%00b",
            "/a%5cb",
            "/%zz",
            "/%2",
            "x",
        ] {
            assert!(normalize(bad).is_err(), "{bad}");
        }
        assert_eq!(
            normalize("/a/%2e%2e/b").unwrap(),
            vec![b"b".to_vec()],
            "decoded dots that stay inside are fine"
        );
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), RangeRequest::Partial(0, 9));
        assert_eq!(parse_range("bytes=90-", 100), RangeRequest::Partial(90, 99));
        assert_eq!(parse_range("bytes=-10", 100), RangeRequest::Partial(90, 99));
        assert_eq!(
            parse_range("bytes=95-200", 100),
            RangeRequest::Partial(95, 99)
        );
        assert_eq!(parse_range("bytes=100-", 100), RangeRequest::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), RangeRequest::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeRequest::Full);
        assert_eq!(parse_range("items=0-1", 100), RangeRequest::Full);
        assert_eq!(parse_range("bytes=5-1", 100), RangeRequest::Full);
    }
}
