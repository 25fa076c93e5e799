//! Edits of a formatted HTTP/1.1 answer head, shared by the response features: fields taken
//! out by name, lines put in before the blank line.
//!
//! Owns: finding a head's lines in an output buffer. Must not touch: which fields a feature
//! edits, or anything past the head's blank line.

/// Takes every field of the head at `out[mark..]` whose name `removes` out (in place, one
/// pass), then puts `lines` (whole `Name: value\r\n` lines) in before its blank line with one
/// move of what follows. A buffer without a whole head is left as it is.
pub fn replace_fields(
    out: &mut Vec<u8>,
    mark: usize,
    removes: impl FnMut(&[u8]) -> bool,
    lines: &[u8],
) {
    if let Some(at) = take_fields(out, mark, removes) {
        insert(out, at, lines);
    }
}

/// Takes every field of the head at `out[mark..]` whose name `removes` out (in place, one
/// pass; it sees every field's name), and says where its blank line now starts. `None`: not a
/// whole head (the one writer never leaves one; what was taken out stays out).
pub fn take_fields(
    out: &mut Vec<u8>,
    mark: usize,
    mut removes: impl FnMut(&[u8]) -> bool,
) -> Option<usize> {
    let first = memchr::memmem::find(&out[mark..], b"\r\n")?;
    let mut at = mark + first + 2;
    loop {
        // No blank line: not a head.
        let len = memchr::memchr(b'\n', &out[at..]).map(|i| i + 1)?;
        if len <= 2 {
            return Some(at);
        }
        let line = &out[at..at + len];
        let name = &line[..memchr::memchr(b':', line).unwrap_or(0)];
        if removes(name) {
            out.drain(at..at + len);
            continue;
        }
        at += len;
    }
}

/// Puts `bytes` into `out` at `at`, moving what follows once.
pub fn insert(out: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let (n, old) = (bytes.len(), out.len());
    out.resize(old + n, 0);
    out.copy_within(at..old, at + n);
    out[at..at + n].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_fields_go_and_lines_come_before_the_blank_line() {
        let mut out =
            b"prevHTTP/1.1 500 Oops\r\nCache-Control: max-age=9\r\nX-A: 1\r\n\r\nbody".to_vec();
        replace_fields(
            &mut out,
            4,
            |n| n.eq_ignore_ascii_case(b"cache-control"),
            b"Cache-Control: no-store\r\n",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "prevHTTP/1.1 500 Oops\r\nX-A: 1\r\nCache-Control: no-store\r\n\r\nbody"
        );
        // Not a whole head: nothing put in.
        let mut out = b"HTTP/1.1 200 OK\r\nX-A: 1\r\n".to_vec();
        replace_fields(&mut out, 0, |_| false, b"X-B: 2\r\n");
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nX-A: 1\r\n");
    }
}
