//! Header-field rules beyond what the parser checks, for the fields that decide framing and
//! routing: the grammar of `Host`, and the whitespace allowed around the values of `Host`,
//! `Content-Length` and `Transfer-Encoding`.
//!
//! Owns: these rules, pure and cheap (they run on every request: one pass each, no searcher
//! to build). Must not touch: what a request means once its fields are valid.

/// Why a `Content-Length` value is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BadLength {
    /// Not digits alone (400).
    Malformed,
    /// More digits than a u64 holds: a body no bound lets in (413).
    TooLarge,
}

/// A `Content-Length` value (spaces around it trimmed): digits only (RFC 9110 §8.6).
pub(super) fn content_length(value: &[u8]) -> Result<u64, BadLength> {
    let v = value.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(BadLength::Malformed);
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or(BadLength::TooLarge)
}

/// Whether the whitespace around a header's value, in the raw bytes, is plain spaces. The
/// parser strips tabs and other whitespace too; for the headers that decide framing and
/// routing that is a known smuggling gadget (`Transfer-Encoding:\tchunked` is chunked here,
/// refused by nginx, and ignored by some proxies), so anything but spaces is refused.
/// Runs for `Host` on every request: plain loops over the few bytes concerned, no searcher.
pub(super) fn spaces_only_around_value(buf: &[u8], h: &httparse::Header<'_>) -> bool {
    if h.value.is_empty() {
        return true;
    }
    let base = buf.as_ptr() as usize;
    let offset = |p: *const u8| (p as usize).checked_sub(base).filter(|&o| o <= buf.len());
    let (Some(name_start), Some(value_start)) = (offset(h.name.as_ptr()), offset(h.value.as_ptr()))
    else {
        return false;
    };
    let name_end = name_start + h.name.len();
    let value_end = value_start + h.value.len();
    if name_end >= value_start || value_end > buf.len() {
        return false;
    }
    // Between the colon and the value.
    if buf[name_end + 1..value_start].iter().any(|&b| b != b' ') {
        return false;
    }
    // The value's own trailing whitespace, then what follows it up to the line end.
    if h.value
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_whitespace())
        .any(|&b| b != b' ')
    {
        return false;
    }
    for &b in &buf[value_end..] {
        match b {
            b' ' => {}
            b'\r' | b'\n' => return true,
            _ => return false,
        }
    }
    true
}

/// The class of each byte in a Host value: what the one-pass check does with it.
const HOST_OTHER: u8 = 0;
const HOST_NAME: u8 = 1;
const HOST_DOT: u8 = 2;
const HOST_COLON: u8 = 3;
const HOST_PERCENT: u8 = 4;
const HOST_CLASS: [u8; 256] = {
    let mut t = [HOST_OTHER; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        // RFC 3986 reg-name: unreserved and sub-delims (the dot apart).
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            )
        {
            t[c] = HOST_NAME;
        }
        c += 1;
    }
    t[b'.' as usize] = HOST_DOT;
    t[b':' as usize] = HOST_COLON;
    t[b'%' as usize] = HOST_PERCENT;
    t
};

/// Whether a Host value is `host[:port]` as RFC 3986 spells it: an IP literal in brackets,
/// or a reg-name (letters, digits, `-._~`, sub-delims, `%XX`) with no empty label between
/// dots; then an optional `:` and at most five digits. Stricter than nginx in what a name may
/// hold, as strict in refusing `..`, `/`, `\\` and NUL: a Host picks the site and the pool.
/// One pass with a byte-class table: it runs on every request.
pub fn valid_host(value: &[u8]) -> bool {
    if value.first() == Some(&b'[') {
        return valid_ip_literal_host(value);
    }
    // A leading dot counts as following an empty label.
    let mut after_dot = true;
    let mut i = 0;
    while i < value.len() {
        match HOST_CLASS[value[i] as usize] {
            HOST_NAME => after_dot = false,
            HOST_DOT if after_dot => return false,
            HOST_DOT => after_dot = true,
            HOST_COLON => return i > 0 && valid_port(&value[i + 1..]),
            HOST_PERCENT => {
                let hex = |k: usize| value.get(k).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                after_dot = false;
                i += 2;
            }
            _ => return false,
        }
        i += 1;
    }
    !value.is_empty()
}

/// The host an HTTP/2 request names, checked as HTTP/1.1's `Host` is ([`valid_host`]): the
/// `:authority` (which may carry no userinfo, RFC 9113 §8.3.1) and the `host` field, each
/// at most once, and the same name when both came — a request whose two names differ is
/// ambiguous (which site, which pool?) and refused. `Err` is the status: 400.
pub fn h2_host<'a>(
    authority: Option<&'a [u8]>,
    mut hosts: impl Iterator<Item = &'a [u8]>,
) -> Result<Option<&'a [u8]>, u16> {
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(400);
    }
    for name in [authority, host].into_iter().flatten() {
        if !valid_host(name) {
            return Err(400);
        }
    }
    match (authority, host) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => Err(400),
        (a, h) => Ok(h.or(a)),
    }
}

/// `[v6 or future literal]` then an optional port.
fn valid_ip_literal_host(value: &[u8]) -> bool {
    let Some(close) = value.iter().position(|&b| b == b']') else {
        return false;
    };
    let literal = &value[1..close];
    if literal.is_empty()
        || !literal
            .iter()
            .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return false;
    }
    match &value[close + 1..] {
        [] => true,
        [b':', port @ ..] => valid_port(port),
        _ => false,
    }
}

/// A port after `:`: up to five digits (none is allowed, as RFC 3986's `*DIGIT` says).
fn valid_port(port: &[u8]) -> bool {
    port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
}
