//! Request heads and chunked bodies from arbitrary bytes: no panic, limits respected, and a
//! chunked body decodes the same whether it arrives whole or in two pieces.
//! Run: `cargo +nightly fuzz run request_head` (from the repository root).
#![no_main]

use espalier::http::{decode_chunked, parse_head, ChunkedDecoder, Head, HeadLimits, MAX_HEADERS};
use libfuzzer_sys::fuzz_target;
use std::mem::MaybeUninit;

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 512,
    max_header_size: 2048,
    max_headers: 32,
    max_body_size: 4096,
};

fuzz_target!(|data: &[u8]| {
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    if let Ok(Head::Complete { len, .. }) = parse_head(data, &LIMITS, &mut headers) {
        assert!(len <= data.len() && len <= LIMITS.max_header_size);
    }
    let whole = decode_chunked(data, LIMITS.max_body_size, LIMITS.max_header_size);
    // The same bytes in two reads, as a connection sees them.
    let cut = data.first().map_or(0, |&b| b as usize % (data.len() + 1));
    let mut dec = ChunkedDecoder::new(&LIMITS);
    let mut buf = data[..cut].to_vec();
    let mut body = 0;
    let mut consumed = 0;
    let mut split = Ok(None);
    for next in [&data[cut..], &[][..]] {
        match dec.decode(&mut buf[body..]) {
            Err(e) => {
                split = Err(e);
                break;
            }
            Ok(d) => {
                buf.drain(body + d.produced..body + d.consumed);
                body += d.produced;
                consumed += d.consumed;
                if d.done {
                    buf.truncate(body);
                    split = Ok(Some((consumed, buf.clone())));
                    break;
                }
            }
        }
        buf.extend_from_slice(next);
    }
    if let (Ok(Some(a)), Ok(Some(b))) = (&whole, &split) {
        assert_eq!(a, b);
    }
});
