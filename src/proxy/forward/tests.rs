use super::*;

#[test]
fn response_framing_follows_rfc_9112() {
    let f = |name: &'static str, value: &'static [u8]| httparse::Header { name, value };
    assert_eq!(
        body_kind(200, true, &[f("Content-Length", b"5")]),
        Some(BodyKind::None)
    );
    assert_eq!(body_kind(304, false, &[]), Some(BodyKind::None));
    assert_eq!(
        body_kind(200, false, &[f("Content-Length", b"5")]),
        Some(BodyKind::Length(5))
    );
    assert_eq!(
        body_kind(
            200,
            false,
            &[
                f("Transfer-Encoding", b"gzip, chunked"),
                f("Content-Length", b"5")
            ]
        ),
        Some(BodyKind::Chunked)
    );
    assert_eq!(body_kind(200, false, &[]), Some(BodyKind::UntilClose));
    assert_eq!(
        body_kind(
            200,
            false,
            &[f("Content-Length", b"5"), f("Content-Length", b"6")]
        ),
        None
    );
    assert_eq!(body_kind(200, false, &[f("Content-Length", b"x")]), None);
    // An encoding that does not end in chunked runs to the close; two lines are refused
    // (once read as close-delimited, whichever came first).
    assert_eq!(
        body_kind(200, false, &[f("Transfer-Encoding", b"gzip")]),
        Some(BodyKind::UntilClose)
    );
    for pair in [[&b"gzip"[..], b"chunked"], [b"chunked", b"chunked"]] {
        let two = [
            f("Transfer-Encoding", pair[0]),
            f("Transfer-Encoding", pair[1]),
        ];
        assert_eq!(body_kind(200, false, &two), None, "{pair:?}");
    }
}

#[test]
fn a_chunked_request_body_is_framed_again_without_its_trailers() {
    let mut decoder = ChunkedDecoder::with_bounds(1 << 20, 4096);
    let mut body =
        b"5;ext=1\r\nhello\r\n0\r\nHost: evil\r\nX-Forwarded-For: 1.2.3.4\r\n\r\nGET".to_vec();
    let d = decoder.decode(&mut body).unwrap();
    assert!(d.done);
    let mut out = Vec::new();
    chunk_again(&mut out, &body[..d.produced], d.done);
    assert_eq!(out, b"5\r\nhello\r\n0\r\n\r\n");
    assert_eq!(&body[d.consumed..], b"GET");
}
