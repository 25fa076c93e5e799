//! espalier's patch: the Huffman codes of the values a thread encoded lately. A server's
//! answers repeat most of their values (its name, the date for a second, a file's validators,
//! `Alt-Svc`), and QPACK without its dynamic table sends each one whole every time, so each was
//! Huffman-coded again every time — ~4 800 instructions of a 100-byte answer's ~57 000. HTTP/2's
//! HPACK sends such values as an index into its dynamic table instead. Here the wire is the
//! same as before; only the coding is remembered, in a small direct-mapped table per thread.

use std::cell::RefCell;

/// Values shorter than this are coded at once (cheaper than a look-up).
pub const SHORTEST: usize = 8;
/// Values longer than this are coded at once (rarely repeated: cookies, long URLs).
pub const LONGEST: usize = 128;
const SLOTS: usize = 64;

/// A value and its code: `None` where Huffman is not shorter (sent as it is).
struct Slot {
    value: Box<[u8]>,
    huffman: Option<Box<[u8]>>,
}

thread_local! {
    static RECENT: RefCell<[Option<Slot>; SLOTS]> = const { RefCell::new([const { None }; SLOTS]) };
}

/// The slot of a value of `SHORTEST..=LONGEST` bytes: from its length and its first and last 8
/// bytes (a date's seconds and a validator's end differ there); a collision only costs a miss.
fn slot_of(value: &[u8]) -> usize {
    let n = value.len();
    let eight = |at: usize| u64::from_le_bytes(value[at..at + 8].try_into().unwrap_or_default());
    let mixed = eight(0) ^ eight(n - 8).rotate_left(29) ^ n as u64;
    (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// Calls `write` with `value`'s Huffman code (`None` where sending it as it is is no longer),
/// remembered or made now; `None` where the thread's table is gone (its end).
pub fn with_code<R>(value: &[u8], write: impl FnOnce(Option<&[u8]>) -> R) -> Option<R> {
    debug_assert!((SHORTEST..=LONGEST).contains(&value.len()));
    RECENT
        .try_with(|recent| {
            let mut recent = recent.borrow_mut();
            let slot = &mut recent[slot_of(value)];
            if slot.as_ref().is_none_or(|s| *s.value != *value) {
                let len = super::encode::huffman_len(value);
                let huffman = (len < value.len()).then(|| {
                    let mut code = Vec::with_capacity(len);
                    super::encode::put_huffman(value, &mut code);
                    code.into_boxed_slice()
                });
                *slot = Some(Slot {
                    value: value.into(),
                    huffman,
                });
            }
            let slot = slot.as_ref().expect("filled above");
            write(slot.huffman.as_deref())
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::super::{decode, encode};
    use super::*;

    /// `encode` as it is without the table: Huffman where shorter.
    fn coded_at_once(size: u8, flags: u8, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let len = super::super::encode::huffman_len(value);
        if len < value.len() {
            crate::qpack::prefix_int::encode(size - 1, flags << 1 | 1, len as u64, &mut out);
            super::super::encode::put_huffman(value, &mut out);
        } else {
            crate::qpack::prefix_int::encode(size - 1, flags << 1, value.len() as u64, &mut out);
            out.extend_from_slice(value);
        }
        out
    }

    #[test]
    fn remembered_codes_match_codes_made_at_once_and_decode_back() {
        let mut values: Vec<Vec<u8>> = vec![
            b"Sat, 28 Nov 2026 16:19:47 GMT".to_vec(),
            b"Sat, 28 Nov 2026 16:19:48 GMT".to_vec(),
            b"\"6b0aff21.1e87798-64\"".to_vec(),
            b"h3=\":18443\"; ma=86400".to_vec(),
            b"espalier".to_vec(),
            b"1234567".to_vec(),
            b"0123456789abcdef0123456789".to_vec(),
            (0u8..=255).cycle().take(LONGEST).collect(),
            (0u8..=255).cycle().take(LONGEST + 1).collect(),
            vec![0xff; SHORTEST],
        ];
        // Same length, first and last 8 bytes: the same slot, told apart by the whole value.
        for middle in [b'a', b'b', b'c'] {
            let mut v = b"12345678--------87654321".to_vec();
            v[10] = middle;
            values.push(v);
        }
        // Many more values than slots: each one evicts another now and then.
        for i in 0..500u32 {
            values.push(format!("value number {i} of a few").into_bytes());
        }
        for round in 0..3 {
            for value in &values {
                for (size, flags) in [(8, 0b0), (6, 0b01), (4, 0b101)] {
                    let mut out = Vec::new();
                    encode(size, flags, value, &mut out).unwrap();
                    assert_eq!(
                        out,
                        coded_at_once(size, flags, value),
                        "round {round}: {value:?}"
                    );
                    let mut read = std::io::Cursor::new(&out);
                    assert_eq!(&decode(size, &mut read).unwrap(), value);
                }
            }
        }
    }
}
