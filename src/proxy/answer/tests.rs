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
