//! A configuration's version (the API's `ETag`): the hash of its files' paths and texts.
//!
//! Owns: the hash. Must not touch: which files are read (the parent's) or what they say.

use std::path::Path;

/// A configuration's version: the first 16 bytes of SHA-256 over each file's path and text,
/// in the order of the paths' bytes, hex (the API's `ETag`). Any change — through the API
/// or by hand — gives another.
pub(super) fn version_of(mut texts: Vec<(&Path, &str)>) -> String {
    // By bytes, not `Path`'s order: a path's compare reads its components, and 10,000 of
    // them sorted again were a tenth of a change's time at 10,000 sites. They come in order
    // but for a file the change made (put last): the stable sort merges that one in, where
    // the unstable sort took them all apart.
    fn bytes<'a>((path, _): &(&'a Path, &str)) -> &'a [u8] {
        path.as_os_str().as_encoded_bytes()
    }
    if !texts.is_sorted_by(|a, b| bytes(a) <= bytes(b)) {
        texts.sort_by(|a, b| bytes(a).cmp(bytes(b)));
    }
    // Fed in chunks: four calls per file, 40,000 at 10,000 sites, each copying its few
    // bytes into the hash's block, cost a third as much again as the hashing.
    const CHUNK: usize = 64 * 1024;
    let mut hash = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut chunk = Vec::with_capacity(CHUNK);
    for (path, text) in &texts {
        for part in [path.as_os_str().as_encoded_bytes(), text.as_bytes()] {
            chunk.extend_from_slice(part);
            chunk.push(0);
            if chunk.len() >= CHUNK {
                hash.update(&chunk);
                chunk.clear();
            }
        }
    }
    hash.update(&chunk);
    let digest = hash.finish();
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
