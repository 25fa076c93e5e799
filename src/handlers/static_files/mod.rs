//! The `static` handler: files under a site's root, served safely and fast.
//!
//! Owns: URL-path → file resolution (percent-decoding, `..` and NUL refused, symlinks out of
//! root refused unless `follow_symlinks`), index files, the directory redirect, conditional
//! requests (`ETag`/`If-None-Match`, `Last-Modified`/`If-Modified-Since`), single byte ranges
//! (206/416), HEAD, 405 for other methods, a per-thread cache, the single-page app's
//! `fallback` and `autoindex` listings ([`listing`]).
//!
//! The cache is per worker thread (shared-nothing: no lock on the request path). Small files
//! are kept whole with their response headers preformatted, so a hit is a hash lookup and a
//! `memcpy`; large files keep an open descriptor and go out with `sendfile`. The price, as the
//! web-gardening seed says of web gardens, is one copy per thread.
//!
//! What a client cannot do to the cache, as nginx's `open_file_cache` also guards:
//! - grow it by spelling one file many ways: entries are keyed by the normalized path (`//a`,
//!   `/./a` and `/%61` are one entry), and a thread holds at most [`MAX_OPEN_FILES`]
//!   descriptors (past that, large files are opened afresh for the one response);
//! - get stale content: an entry is re-checked with one `stat` at most once a second, against
//!   inode, device, size and the nanosecond modification *and* change times, so a file
//!   rewritten in place with the same size within the same second is noticed;
//! - block a thread on a FIFO swapped in for a file: files are opened `O_NONBLOCK`, and what
//!   is checked is the opened descriptor (its type, and with `follow_symlinks = false` the path
//!   the kernel resolved it to), never the path looked at before the open;
//! - make a server fault look like a missing file: a file that exists but cannot be opened
//!   (out of descriptors, I/O error) answers 503 or 500, never a 404 that caches downstream.
//!
//! The handler does blocking `stat`/`open`/`read` on the event loop, as nginx does without
//! thread pools: they wait on the disk (or page cache) only, never on a peer.
//! Must not touch: the connection (it writes into a [`Responder`]).

mod compressed;
mod entry;
mod listing;
mod path;
mod respond;

use super::mime;
use crate::http::clock::Clock;
use crate::http::service::Reply;
use crate::http::{Method, Request, Responder};
use entry::{still_valid, Body, Described, Entry};
pub use path::{normal_form, normalize};
use respond::respond;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Files up to this size are kept in memory.
pub const SMALL_FILE: u64 = 256 << 10;
/// Memory a thread's cache may hold before it is emptied.
const CACHE_BUDGET: usize = 32 << 20;
const CACHE_ENTRIES: usize = 8192;
/// Descriptors a thread's cache may keep open (large files); past this a large file is opened
/// for its one response and closed after it.
pub const MAX_OPEN_FILES: usize = 128;

/// The welcome page served when a site has no root.
const WELCOME: &str = include_str!("welcome.html");

enum Resolved {
    /// Boxed: an entry is large, and found once per file per second at most.
    File(Box<Entry>),
    Redirect(String),
    Status(u16),
    /// A folder without an index file, to be listed (`autoindex`).
    Listing(PathBuf),
}

/// One site's static files.
pub struct StaticFiles {
    root: Option<PathBuf>,
    canonical_root: Option<PathBuf>,
    index: Vec<String>,
    follow_symlinks: bool,
    /// Keyed by the normalized, decoded path (see [`normal_form`]).
    cache: RefCell<HashMap<Box<[u8]>, Entry>>,
    cached_bytes: Cell<usize>,
    /// Entries holding an open descriptor.
    open_files: Cell<usize>,
    /// Extensions of the files never sent as files, in any case (a FastCGI app's `.php`:
    /// its source would leak): 403.
    refused: Vec<String>,
    /// `(content type pattern, Cache-Control value)`, the first match wins (see
    /// [`crate::config::SiteSpec::cache`]); written into each cached file's head once.
    cache_policy: Vec<(String, String)>,
    /// The codings its site offers, in its order of preference (none: nothing compressed).
    codings: Vec<crate::compress::Coding>,
    /// Leading path segments that name the app's prefix, not a folder under `root` (an
    /// `alias`: `/static/x.css` is `ROOT/x.css`); 0 as nginx's `root` (`ROOT/static/x.css`).
    skip: usize,
    /// The URL path answered for a path that names nothing (`fallback`: a single-page app's
    /// `/index.html`, as nginx's `try_files $uri $uri/ /index.html`).
    fallback: Option<Box<str>>,
    /// A folder without an index file is listed (`autoindex`); `None`: 403.
    autoindex: Option<crate::config::Autoindex>,
}

/// What a path names under the root, for a front controller's "the file if it exists".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A file, or something [`StaticFiles::serve`] answers itself (a file it may not send,
    /// a path it refuses).
    File,
    Directory,
    Missing,
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
            open_files: Default::default(),
            refused: Vec::new(),
            cache_policy: Vec::new(),
            codings: Vec::new(),
            skip: 0,
            fallback: None,
            autoindex: None,
        }
    }

    /// Lists a folder without an index file.
    pub fn with_autoindex(mut self, autoindex: Option<crate::config::Autoindex>) -> Self {
        self.autoindex = autoindex;
        self
    }

    /// Answers a path that names no file or folder with the file at URL path `fallback`.
    pub fn with_fallback(mut self, fallback: Option<&str>) -> Self {
        self.fallback = fallback.map(Into::into);
        self
    }

    /// Sends `Cache-Control` by content type: `policy` is `(type, value)`, the type exact,
    /// a family (`image/*`) or `*`, most specific first.
    pub fn with_cache(mut self, policy: Vec<(String, String)>) -> Self {
        self.cache_policy = policy;
        self
    }

    /// Serves `root` as the folder of the app prefix `prefix` (nginx's `alias`): the prefix's
    /// segments are not looked for under it.
    pub fn aliased(mut self, prefix: &str) -> Self {
        self.skip = prefix.split('/').filter(|s| !s.is_empty()).count();
        self
    }

    /// Compresses the files of compressible types in `codings` (the site's preference).
    pub fn compressing(mut self, codings: &[crate::compress::Coding]) -> Self {
        self.codings = codings.to_vec();
        self
    }

    /// Answers with `e` in the coding `req` gets, its variant made at the first request.
    fn respond_coded(&self, e: &mut Entry, req: &Request<'_>, resp: &mut Responder<'_>) -> Reply {
        if let Some(coding) = self.coding_for(e, req) {
            let added = self.make_variant(e, coding);
            self.cached_bytes.set(self.cached_bytes.get() + added);
            if let Some(shown) = e.shown_in(coding) {
                return respond(shown, req, resp);
            }
        }
        respond(e.shown(), req, resp)
    }

    /// The `Cache-Control` value of a file of `content_type` (`text/css; charset=utf-8`).
    fn cache_control(&self, content_type: &str) -> Option<&str> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        self.cache_policy.iter().find_map(|(pattern, value)| {
            let matches = pattern == "*"
                || pattern.eq_ignore_ascii_case(media)
                || pattern.strip_suffix('*').is_some_and(|family| {
                    media.len() > family.len() && media[..family.len()].eq_ignore_ascii_case(family)
                });
            matches.then_some(value.as_str())
        })
    }

    /// Never sends a file whose name ends with one of `extensions` (compared without case).
    pub fn refusing(mut self, extensions: &[String]) -> Self {
        self.refused = extensions.iter().map(|e| e.to_ascii_lowercase()).collect();
        self
    }

    fn refuses(&self, name: &[u8]) -> bool {
        self.refused.iter().any(|e| {
            name.len() >= e.len() && name[name.len() - e.len()..].eq_ignore_ascii_case(e.as_bytes())
        })
    }

    /// What `raw_path` (in normal form `key`) names under the root: a cached file is a file
    /// without a look at the disk; else one `stat`. Only an absent path is [`Found::Missing`]
    /// (a file that cannot be read is the static handler's to answer, never another's).
    pub fn lookup(&self, raw_path: &str, key: &[u8]) -> Found {
        if self.cache.borrow().contains_key(key) {
            return Found::File;
        }
        let (Some(root), Ok(segments)) = (&self.root, normalize(raw_path)) else {
            return Found::File;
        };
        let mut path = root.clone();
        for s in segments.iter().skip(self.skip) {
            path.push(OsStr::from_bytes(s));
        }
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => Found::Directory,
            Ok(_) => Found::File,
            Err(e) if io_status(&e) == 404 => Found::Missing,
            Err(_) => Found::File,
        }
    }

    /// Answers `req`, whose path in normal form (see [`normal_form`]) is `key`: the router
    /// has computed it already, and it is the cache's key — a hit costs one lookup.
    pub fn serve(
        &self,
        req: &Request<'_>,
        key: &[u8],
        resp: &mut Responder<'_>,
        clock: &Clock,
    ) -> Reply {
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
        match cache.get_mut(key) {
            Some(e) if e.checked == now => return self.respond_coded(e, req, resp),
            Some(e) if still_valid(e) => {
                e.checked = now;
                return self.respond_coded(e, req, resp);
            }
            Some(_) => {
                let gone = cache.remove(key).expect("entry present");
                self.forget(&gone);
            }
            None => {}
        }
        let segments = match normalize(req.path) {
            Ok(s) => s,
            Err(status) => {
                resp.error(status);
                return Reply::Done;
            }
        };
        match self.resolve(req.path, &segments) {
            Resolved::Status(404) if self.fallback.as_deref().is_some_and(|f| f != req.path) => {
                drop(cache);
                let fallback = self.fallback.as_deref().unwrap_or_default();
                // Its own normal form is itself (checked plain at `check`); a fallback gone
                // from the disk since answers 404 (its path is the request's then).
                self.serve(&req.retargeted(fallback), fallback.as_bytes(), resp, clock)
            }
            Resolved::Status(s) => {
                resp.error(s);
                Reply::Done
            }
            Resolved::Listing(dir) => {
                self.list(&dir, req, resp);
                Reply::Done
            }
            Resolved::Redirect(mut location) => {
                if !req.query.is_empty() {
                    location.push('?');
                    location.push_str(req.query);
                }
                resp.status(301)
                    .header("Location", &crate::http::local_location(&location))
                    .header("Content-Type", "text/plain; charset=utf-8")
                    .body(b"301 Moved Permanently\n");
                Reply::Done
            }
            Resolved::File(mut entry) => {
                entry.checked = now;
                self.keep(&mut cache, key, entry, req, resp)
            }
        }
    }

    /// Answers with a file just opened, and keeps it in the thread's cache under `key` (the
    /// cache emptied first when it is full; a large file past the open-descriptor bound is
    /// served once and closed).
    fn keep(
        &self,
        cache: &mut HashMap<Box<[u8]>, Entry>,
        key: &[u8],
        mut entry: Box<Entry>,
        req: &Request<'_>,
        resp: &mut Responder<'_>,
    ) -> Reply {
        let holds_fd = matches!(entry.body, Body::Open(_));
        if holds_fd && self.open_files.get() >= MAX_OPEN_FILES {
            // Served once, not kept: its descriptor closes after the response.
            return self.respond_coded(&mut entry, req, resp);
        }
        if cache.len() >= CACHE_ENTRIES || self.cached_bytes.get() + entry.memory() > CACHE_BUDGET {
            cache.clear();
            self.cached_bytes.set(0);
            self.open_files.set(0);
        }
        self.cached_bytes
            .set(self.cached_bytes.get() + entry.memory());
        self.open_files
            .set(self.open_files.get() + usize::from(holds_fd));
        let entry = cache.entry(key.into()).or_insert(*entry);
        self.respond_coded(entry, req, resp)
    }

    /// Answers with the listing of folder `dir` (`autoindex`), showing what the site serves.
    fn list(&self, dir: &Path, req: &Request<'_>, resp: &mut Responder<'_>) {
        let refused = |name: &[u8]| self.refuses(name);
        let shown = listing::Shown {
            dotfiles: self.autoindex.is_some_and(|a| a.dotfiles),
            refused: &refused,
            inside: self
                .canonical_root
                .as_deref()
                .filter(|_| !self.follow_symlinks),
        };
        listing::answer(dir, &shown, req, resp);
    }

    /// Takes a removed entry off the cache's accounts.
    fn forget(&self, gone: &Entry) {
        self.cached_bytes
            .set(self.cached_bytes.get().saturating_sub(gone.memory()));
        if matches!(gone.body, Body::Open(_)) {
            self.open_files.set(self.open_files.get().saturating_sub(1));
        }
    }

    /// Maps a URL path (already normalized into `segments`) to a file, refusing anything
    /// that could leave the root.
    fn resolve(&self, raw_path: &str, segments: &[Vec<u8>]) -> Resolved {
        let (Some(root), Some(canonical_root)) = (&self.root, &self.canonical_root) else {
            return Resolved::Status(404);
        };
        let mut path = root.clone();
        for s in segments.iter().skip(self.skip) {
            path.push(OsStr::from_bytes(s));
        }
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        if meta.is_dir() {
            // A directory reached through a symlink out of the root is as absent as a
            // missing one: a 301 or 403 would tell what exists outside.
            if !self.follow_symlinks && !self.inside_root(&path, canonical_root) {
                return Resolved::Status(404);
            }
            if !raw_path.ends_with('/') {
                return Resolved::Redirect(format!("{raw_path}/"));
            }
            for name in self.index.iter().filter(|n| !self.refuses(n.as_bytes())) {
                let candidate = path.join(name);
                if let Ok(m) = std::fs::metadata(&candidate) {
                    if m.is_file() {
                        return self.open(candidate, canonical_root, name);
                    }
                }
            }
            if self.autoindex.is_some() {
                return Resolved::Listing(path);
            }
            return Resolved::Status(403);
        }
        if !meta.is_file() {
            return Resolved::Status(404);
        }
        let last = segments.last().map_or(&[][..], |s| s.as_slice());
        if self.refuses(last) {
            return Resolved::Status(403);
        }
        let name = String::from_utf8_lossy(last).into_owned();
        self.open(path, canonical_root, &name)
    }

    fn inside_root(&self, path: &Path, canonical_root: &Path) -> bool {
        std::fs::canonicalize(path).is_ok_and(|real| real.starts_with(canonical_root))
    }

    fn open(&self, path: PathBuf, canonical_root: &Path, name: &str) -> Resolved {
        // O_NONBLOCK: a FIFO swapped in for the file opens at once instead of blocking the
        // thread until a writer comes; everything below checks the opened descriptor.
        let mut file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        let meta = match file.metadata() {
            Ok(m) if m.is_file() => m,
            Ok(_) => return Resolved::Status(404),
            Err(e) => return Resolved::Status(io_status(&e)),
        };
        if !self.follow_symlinks && !opened_inside(&file, &path, canonical_root) {
            // Symlinks may point anywhere; only what really lies under the root is served.
            return Resolved::Status(404);
        }
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
        let content_type = mime::content_type(name);
        let described = Described {
            size,
            content_type,
            cache_control: self.cache_control(content_type),
            compressed: !self.codings.is_empty() && crate::http::coding::compressible(content_type),
        };
        Resolved::File(Box::new(Entry::new(path, &meta, described, body)))
    }
}

/// Whether the file behind an open descriptor lies under the root: the kernel's own name for
/// the descriptor (`/proc/self/fd/N`), so a path swapped after the open changes nothing.
/// Without /proc, the path is resolved instead.
fn opened_inside(file: &File, path: &Path, canonical_root: &Path) -> bool {
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    match std::fs::read_link(by_fd) {
        Ok(real) => real.starts_with(canonical_root),
        Err(_) => std::fs::canonicalize(path).is_ok_and(|real| real.starts_with(canonical_root)),
    }
}

/// The status for a file that could not be looked at or opened: absent is 404, forbidden 403;
/// a file that exists but cannot be served now (out of descriptors or memory) is 503, and any
/// other failure 500 — never a 404 that would cache downstream.
fn io_status(e: &std::io::Error) -> u16 {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG | libc::ELOOP) => 404,
        Some(libc::EACCES | libc::EPERM) => 403,
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EAGAIN) => 503,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::io_status;
    use std::io::Error;

    #[test]
    fn a_file_that_exists_but_cannot_be_opened_is_never_a_404() {
        let status = |errno| io_status(&Error::from_raw_os_error(errno));
        assert_eq!(status(libc::ENOENT), 404);
        assert_eq!(status(libc::ENOTDIR), 404);
        assert_eq!(status(libc::EACCES), 403);
        assert_eq!(status(libc::EMFILE), 503, "out of descriptors");
        assert_eq!(status(libc::ENFILE), 503);
        assert_eq!(status(libc::ENOMEM), 503);
        assert_eq!(status(libc::EIO), 500);
        assert_eq!(io_status(&Error::other("no errno")), 500);
    }
}
