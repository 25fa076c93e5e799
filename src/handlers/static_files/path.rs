//! URL paths of static files: decoding and normalizing a request path into segments that
//! cannot leave the root, and the cache key every spelling of one path shares.
//!
//! Owns: path grammar (percent-decoding, `.` and `..`, refused bytes). Must not touch: the
//! file system.

/// Whether a request path is already in normal form: no escapes, empty segments or dot
/// segments. Its cache key is then the path itself.
pub fn is_plain(raw: &str) -> bool {
    // One tight pass, no searcher to build: this runs on every request.
    let mut after_slash = false;
    for &c in raw.as_bytes() {
        if c == b'%' || (after_slash && (c == b'/' || c == b'.')) {
            return false;
        }
        after_slash = c == b'/';
    }
    true
}

/// The cache key of a path not in normal form: its decoded segments joined by `/`, with the
/// trailing slash kept (`/dir/` is the index, `/dir` the redirect) — the key the plain
/// spelling of the same path has.
pub fn joined_key(raw: &str, segments: &[Vec<u8>]) -> Vec<u8> {
    let mut key = Vec::with_capacity(raw.len());
    for s in segments {
        key.push(b'/');
        key.extend_from_slice(s);
    }
    if key.is_empty() || raw.ends_with('/') {
        key.push(b'/');
    }
    key
}

/// A request path in normal form, decoded: the path itself when it already is (no
/// allocation), else its normalized spelling (see [`joined_key`]); an error status for a path
/// that cannot be normalized. What routing and the file cache both key on, so that `/%61pi`
/// is `/api` to both, as nginx matches locations on the normalized URI.
#[inline]
pub fn normal_form(raw: &str) -> Result<std::borrow::Cow<'_, [u8]>, u16> {
    if is_plain(raw) {
        return Ok(std::borrow::Cow::Borrowed(raw.as_bytes()));
    }
    normalize(raw).map(|segments| std::borrow::Cow::Owned(joined_key(raw, &segments)))
}

/// Splits a URL path into decoded segments, resolving `.` and `..`. Refuses (400) NUL bytes,
/// encoded slashes, malformed escapes and any `..` that would climb above the root.
pub fn normalize(raw: &str) -> Result<Vec<Vec<u8>>, u16> {
    if !raw.starts_with('/') {
        return Err(400);
    }
    let mut out: Vec<Vec<u8>> = Vec::new();
    for seg in raw.split('/') {
        let decoded = crate::http::percent_decode(seg.as_bytes()).ok_or(400u16)?;
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
    fn every_spelling_of_a_path_has_one_key() {
        let key = |raw: &str| {
            if is_plain(raw) {
                raw.as_bytes().to_vec()
            } else {
                joined_key(raw, &normalize(raw).unwrap())
            }
        };
        for spelling in [
            "//big.bin",
            "///big.bin",
            "/./big.bin",
            "/%62ig.bin",
            "/a/../big.bin",
        ] {
            assert_eq!(key(spelling), b"/big.bin", "{spelling}");
        }
        assert_eq!(key("/dir//"), b"/dir/");
        assert_eq!(key("/dir/./"), key("/dir/"));
        assert_eq!(key("//"), b"/");
        assert_eq!(key("/%2e/"), b"/");
    }
}
