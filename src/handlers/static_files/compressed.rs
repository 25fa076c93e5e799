//! A static file's compressed forms (IIS static compression, nginx `gzip_static` and `gzip`,
//! Caddy `precompressed` and `encode`): the coding a request gets, and each form made once
//! per worker thread at its first request — a precompressed file beside the original
//! (`app.js.br`, `.zst`, `.gz`, sent by `sendfile` when large), else the cached bytes
//! compressed here (files kept in memory only: up to [`super::SMALL_FILE`]).
//!
//! Owns: choosing and making variants. Must not touch: the cache's bounds (the parent counts
//! a variant's memory) or HTTP semantics (`respond`).

use super::entry::{Body, Entry, Variant};
use super::{Resolved, StaticFiles};
use crate::compress::{self, Coding};
use crate::http::Request;

impl StaticFiles {
    /// The coding `req` gets for `e`: none when the site compresses nothing, the file is not
    /// worth it, or a byte range is asked (ranges are served of the file as it is).
    pub(super) fn coding_for(&self, e: &Entry, req: &Request<'_>) -> Option<Coding> {
        if self.codings.is_empty() || !e.compressible || req.header("range").is_some() {
            return None;
        }
        crate::http::coding::choose(req.header("accept-encoding"), &self.codings)
    }

    /// Makes `e`'s variant in `coding` if it was never asked for; the memory it added.
    pub(super) fn make_variant(&self, e: &mut Entry, coding: Coding) -> usize {
        if !matches!(e.variants[coding.index()], Variant::Unmade) {
            return 0;
        }
        let before = e.memory();
        let variant = match self.precompressed(e, coding) {
            Some((body, size)) => Variant::Made(Box::new(e.variant(coding, body, size))),
            None => match &e.body {
                Body::Memory(data) => match compress::whole(coding, data) {
                    Ok(packed) if packed.len() < data.len() => {
                        let size = packed.len() as u64;
                        Variant::Made(Box::new(e.variant(
                            coding,
                            Body::Memory(packed.into()),
                            size,
                        )))
                    }
                    _ => Variant::Absent,
                },
                Body::Open(_) => Variant::Absent,
            },
        };
        e.variants[coding.index()] = variant;
        e.memory() - before
    }

    /// The precompressed file beside `e`'s, opened as any file of the root is (no symlink
    /// out of it, no FIFO): its body and size.
    fn precompressed(&self, e: &Entry, coding: Coding) -> Option<(Body, u64)> {
        let canonical_root = self.canonical_root.as_deref()?;
        let mut path = e.fs_path.clone().into_os_string();
        path.push(coding.suffix());
        match self.open(path.into(), canonical_root, "") {
            Resolved::File(found) => Some((found.body, found.size)),
            _ => None,
        }
    }
}
