//! Tests of the HTTP/1.1 parser and response writer: framing, keep-alive, limits and the
//! status each violation gets.

use super::*;

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 64,
    max_header_size: 256,
    max_headers: 4,
    max_body_size: 100,
};

fn parse(buf: &[u8]) -> Result<Option<(String, usize, Framing, bool)>, ProtocolError> {
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    match parse_head(buf, &LIMITS, &mut headers)? {
        Head::Partial => Ok(None),
        Head::Complete {
            request,
            len,
            framing,
            keep_alive,
            ..
        } => Ok(Some((
            format!(
                "{} {} ?{}",
                request.method_text, request.path, request.query
            ),
            len,
            framing,
            keep_alive,
        ))),
    }
}

#[test]
fn complete_partial_and_pipelined() {
    let req = b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n";
    let (line, len, framing, keep) = parse(req).unwrap().unwrap();
    assert_eq!(line, "GET /a ?b=1");
    assert_eq!(len, 32);
    assert_eq!(framing, Framing::None);
    assert!(keep);
    assert!(
        parse(&req[len..]).unwrap().is_none(),
        "the next request is partial"
    );
}

#[test]
fn keep_alive_rules() {
    let (_, _, _, keep) = parse(b"GET / HTTP/1.0\r\n\r\n").unwrap().unwrap();
    assert!(!keep, "HTTP/1.0 closes by default");
    let (_, _, _, keep) = parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(keep);
    let (_, _, _, keep) = parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!keep);
}

#[test]
fn framing_and_its_errors() {
    let (_, _, f, _) = parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(f, Framing::Length(5));
    let (_, _, f, _) = parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap()
        .unwrap();
    assert_eq!(f, Framing::Chunked);
    assert_eq!(
        parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 101\r\n\r\n").unwrap_err(),
        ProtocolError::BodyTooLarge
    );
    assert_eq!(
        parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            .unwrap_err(),
        ProtocolError::BadRequest
    );
    assert_eq!(
        parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n").unwrap_err(),
        ProtocolError::BadRequest
    );
    assert_eq!(
        parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap_err(),
        ProtocolError::BadRequest,
        "both framings at once is request smuggling"
    );
    assert_eq!(
        parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n").unwrap_err(),
        ProtocolError::NotImplemented
    );
}

#[test]
fn limits_map_to_statuses() {
    let long_line = format!("GET /{} HTTP/1.1\r\n", "a".repeat(80));
    assert_eq!(parse(long_line.as_bytes()).unwrap_err().status(), 414);
    assert_eq!(
        parse(
            "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                .as_bytes()
        )
        .unwrap_err()
        .status(),
        414
    );
    let many = b"GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
    assert_eq!(parse(many).unwrap_err().status(), 431);
    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\n", "b".repeat(300));
    assert_eq!(parse(big.as_bytes()).unwrap_err().status(), 431);
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n\r\n").unwrap_err().status(),
        400,
        "HTTP/1.1 needs Host"
    );
    assert_eq!(parse(b"GARBAGE\r\n\r\n").unwrap_err().status(), 400);
    assert_eq!(parse(b"NOT HTTP AT ALL\r\n\r\n").unwrap_err().status(), 400);
    assert_eq!(
        parse(b"GET / HTTP/2.0\r\nHost: x\r\n\r\n")
            .unwrap_err()
            .status(),
        505
    );
    assert_eq!(
        parse(b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_err()
            .status(),
        400
    );
}

#[test]
fn chunked_bodies() {
    assert_eq!(
        decode_chunked(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\nNEXT", 100, 64).unwrap(),
        Some((24, b"Wikipedia".to_vec()))
    );
    assert_eq!(
        decode_chunked(b"4\r\nWiki\r\n0\r\nTrailer: x\r\n\r\n", 100, 64)
            .unwrap()
            .unwrap()
            .1,
        b"Wiki"
    );
    assert_eq!(decode_chunked(b"4\r\nWi", 100, 64).unwrap(), None);
    assert_eq!(
        decode_chunked(b"4\r\nWiki\r\n0\r\n", 100, 64).unwrap(),
        None
    );
    assert_eq!(
        decode_chunked(b"zz\r\n", 100, 64).unwrap_err(),
        ProtocolError::BadRequest
    );
    assert_eq!(
        decode_chunked(b"ff\r\n", 100, 64).unwrap_err(),
        ProtocolError::BodyTooLarge
    );
    assert_eq!(
        decode_chunked(b"2\r\nabXY", 100, 64).unwrap_err(),
        ProtocolError::BadRequest
    );
}

#[test]
fn ambiguous_framing_is_refused() {
    let status = |req: &[u8]| parse(req).map(|_| 0).unwrap_or_else(|e| e.status());
    assert_eq!(
        status(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400,
        "HTTP/1.0 has no transfer codings"
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        400,
        "two Transfer-Encoding lines are not merged"
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"),
        400,
        "a repeated Content-Length is refused even when equal, as nginx does"
    );
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
        413
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
    for te in [
        &b"Transfer-Encoding:\tchunked"[..],
        b"Transfer-Encoding: chunked\t",
        b"Transfer-Encoding: \x0bchunked",
        b"Content-Length:\t3",
        b"Content-Length: 3\t",
        b"Host:\tx",
    ] {
        let mut req = b"POST / HTTP/1.1\r\nHost: y\r\n".to_vec();
        if te.starts_with(b"Host") {
            req = b"POST / HTTP/1.1\r\n".to_vec();
        }
        req.extend_from_slice(te);
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(&req), 400, "{:?}", String::from_utf8_lossy(te));
    }
    assert_eq!(
        status(b"POST / HTTP/1.1\r\nHost: y\r\nTransfer-Encoding:   chunked   \r\n\r\n"),
        0,
        "spaces are fine"
    );
    assert_eq!(
        status(b"GET / HTTP/1.1\r\nHost:x\r\n\r\n"),
        0,
        "no space at all is fine"
    );
    assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), 400);
    for bad in [
        "", "a/b", "a b", "a@b", "a:b:c", "a:8x", ".a", "a..b", "[::1", "[zz]", "[::1]x", "a%zz",
        "a\\b", "a:123456",
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
        assert_eq!(status(req.as_bytes()), 400, "Host: {bad:?}");
    }
    for good in [
        "example.com",
        "Example.COM.",
        "a-b_c~d",
        "127.0.0.1:8080",
        "[::1]",
        "[::1]:80",
        "h:",
        "xn--bcher-kva.example",
        "a%41b",
    ] {
        let req = format!("GET / HTTP/1.1\r\nHost: {good}\r\n\r\n");
        assert_eq!(status(req.as_bytes()), 0, "Host: {good:?}");
    }
}

#[test]
fn http2_names_its_host_once_and_validly() {
    use super::h2_host;
    let none = std::iter::empty::<&[u8]>;
    assert_eq!(h2_host(Some(b"a.test"), none()), Ok(Some(&b"a.test"[..])));
    assert_eq!(
        h2_host(None, [&b"a.test:8443"[..]].into_iter()),
        Ok(Some(&b"a.test:8443"[..]))
    );
    assert_eq!(
        h2_host(Some(b"A.test"), [&b"a.test"[..]].into_iter()),
        Ok(Some(&b"a.test"[..]))
    );
    assert_eq!(h2_host(None, none()), Ok(None));
    // What HTTP/1.1 refuses in Host, HTTP/2 refuses in either place.
    for bad in [
        &b"evil<script>"[..],
        b"evil.test/@app.test",
        b"user@app.test",
        b"a..test",
        b"",
    ] {
        assert_eq!(h2_host(Some(bad), none()), Err(400), "{bad:?}");
        assert_eq!(h2_host(None, [bad].into_iter()), Err(400), "{bad:?}");
    }
    // Two host fields, or two names that differ.
    assert_eq!(
        h2_host(None, [&b"a.test"[..], b"a.test"].into_iter()),
        Err(400)
    );
    assert_eq!(
        h2_host(Some(b"a.test"), [&b"b.test"[..]].into_iter()),
        Err(400)
    );
}

#[test]
fn partial_heads_are_reparsed_only_at_a_line_end() {
    let l = &LIMITS;
    assert!(!head_may_be_complete(b"GET / HT", 5, l));
    assert!(head_may_be_complete(b"GET / HTTP/1.1\r\n", 5, l));
    assert!(!head_may_be_complete(b"GET / HTTP/1.1\r\nHost: x", 16, l));
    let long = vec![b'a'; 65];
    assert!(
        head_may_be_complete(&long, 64, l),
        "past a limit: parse, to refuse it"
    );
}

/// Decodes `encoded` fed in the given pieces, as a connection would see it arrive.
fn decode_in_pieces(
    encoded: &[u8],
    cuts: &[usize],
    max_body: u64,
    max_framing: usize,
) -> Result<Option<(usize, Vec<u8>)>, ProtocolError> {
    let mut dec = ChunkedDecoder::with_bounds(max_body, max_framing);
    // The connection's buffer: decoded body, then what has arrived and is not decoded yet.
    let mut buf = Vec::new();
    let mut body_len = 0;
    let mut fed = 0;
    let mut consumed_total = 0;
    let mut points: Vec<usize> = cuts.iter().map(|&c| c.min(encoded.len())).collect();
    points.sort_unstable();
    points.push(encoded.len());
    for p in points {
        if p < fed {
            continue;
        }
        buf.extend_from_slice(&encoded[fed..p]);
        fed = p;
        let d = dec.decode(&mut buf[body_len..])?;
        buf.drain(body_len + d.produced..body_len + d.consumed);
        body_len += d.produced;
        consumed_total += d.consumed;
        if d.done {
            buf.truncate(body_len);
            return Ok(Some((consumed_total, buf)));
        }
    }
    Ok(None)
}

#[test]
fn chunk_sizes_and_lines_are_checked() {
    let status = |b: &[u8]| {
        decode_chunked(b, 100, 64)
            .map(|_| 0)
            .unwrap_or_else(|e| e.status())
    };
    // The panic the hardening issue found: a size that wraps when added.
    assert_eq!(
        status(b"1\r\na\r\nffffffffffffffff\r\nxxxxxxxxxxxxxxxxxxxxxxxx\r\n0\r\n\r\n"),
        413
    );
    assert_eq!(
        decode_chunked(
            b"1\r\na\r\nfffffffffffffff\r\nxx\r\n0\r\n\r\n",
            u64::MAX,
            64
        )
        .map(|o| o.is_none()),
        Ok(true),
        "a huge chunk with no body limit just waits for its bytes"
    );
    assert_eq!(
        decode_chunked(b"1\r\na\r\nffffffffffffffff\r\n", u64::MAX, 64),
        Err(ProtocolError::BodyTooLarge),
        "a total past 64 bits, even with no limit"
    );
    assert_eq!(status(b"10000000000000000\r\n"), 400, "past 64 bits");
    assert_eq!(
        status(b"0000000000000000000001\r\nx\r\n0\r\n\r\n"),
        0,
        "leading zeros"
    );
    assert_eq!(status(b"1\na\r\n0\r\n\r\n"), 400, "bare LF after a size");
    assert_eq!(status(b"1\r\na\n0\r\n\r\n"), 400, "bare LF after data");
    assert_eq!(status(b"1\r\na\r\n0\r\n\n"), 400, "bare LF at the end");
    assert_eq!(status(b"1\rX\r\n"), 400, "bare CR");
    assert_eq!(status(b"\r\n"), 400, "no size");
    assert_eq!(status(b"-1\r\n"), 400);
    assert_eq!(status(b"0x1\r\n"), 400);
    assert_eq!(
        status(b"1 ;a=b\r\nx\r\n0\r\n\r\n"),
        0,
        "whitespace before an extension"
    );
    assert_eq!(status(b"1;a=\"q\"\r\nx\r\n0\r\n\r\n"), 0);
    assert_eq!(
        status(b"1;a\x00\r\nx\r\n0\r\n\r\n"),
        400,
        "NUL in an extension"
    );
    assert_eq!(
        status(b"1;a\rb\r\nx\r\n0\r\n\r\n"),
        400,
        "CR in an extension"
    );
    assert_eq!(status(b"1 1\r\nx\r\n0\r\n\r\n"), 400, "two numbers");
    assert_eq!(
        status(b"0\r\nA: b\r\n c\r\n\r\n"),
        400,
        "obs-fold in a trailer"
    );
    assert_eq!(status(b"0\r\n\tA: b\r\n\r\n"), 400);
}

#[test]
fn chunk_extensions_and_trailers_are_bounded() {
    // The issue's `1;ext=` followed by hundreds of MiB: refused once past the framing bound,
    // after looking at each byte once, holding nothing.
    let mut flood = b"1;ext=".to_vec();
    flood.extend(std::iter::repeat_n(b'a', 100));
    assert_eq!(decode_chunked(&flood, 100, 64).unwrap_err().status(), 413);
    let mut dec = ChunkedDecoder::with_bounds(100, 1 << 20);
    let mut piece = vec![b'a'; 4096];
    let mut first = b"1;e=".to_vec();
    let d = dec.decode(&mut first).unwrap();
    assert_eq!((d.consumed, d.produced, d.done), (4, 0, false));
    let mut refused = None;
    for round in 0..1000 {
        match dec.decode(&mut piece) {
            Ok(d) => assert_eq!((d.consumed, d.produced), (4096, 0)),
            Err(e) => {
                refused = Some((round, e.status()));
                break;
            }
        }
    }
    assert_eq!(refused, Some((255, 413)), "refused at the bound, 1 MiB in");
    let mut trailers = b"0\r\n".to_vec();
    for i in 0..10 {
        trailers.extend_from_slice(format!("X-{i}: {}\r\n", "v".repeat(10)).as_bytes());
    }
    trailers.extend_from_slice(b"\r\n");
    assert_eq!(
        decode_chunked(&trailers, 100, 64).unwrap_err().status(),
        431
    );
    assert!(decode_chunked(&trailers, 100, 1000).unwrap().is_some());
}

#[test]
fn chunked_decoding_does_not_depend_on_how_bytes_arrive() {
    let encoded = b"4\r\nWiki\r\n5;x=y\r\npedia\r\nA\r\n in chunks\r\n0\r\nT: 1\r\n\r\nNEXT";
    let whole = decode_chunked(encoded, 100, 64).unwrap().unwrap();
    assert_eq!(whole.1, b"Wikipedia in chunks");
    assert_eq!(&encoded[whole.0..], b"NEXT");
    for cut in 0..encoded.len() {
        for cut2 in cut..encoded.len() {
            assert_eq!(
                decode_in_pieces(encoded, &[cut, cut2], 100, 64),
                Ok(Some(whole.clone())),
                "cut at {cut} and {cut2}"
            );
        }
    }
}

mod fuzz {
    //! The request path under random bytes: heads and chunked bodies, whole and split at
    //! random points. Bounded case counts, so it runs in every `cargo test`; the `fuzz/`
    //! directory holds the same harness for `cargo fuzz` where a nightly toolchain is at hand.
    use super::*;
    use proptest::prelude::*;

    /// Pieces requests are made of, so random input reaches the interesting states.
    fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop::sample::select(vec![
            &b"GET / HTTP/1.1\r\n"[..],
            b"POST /dyn HTTP/1.1\r\n",
            b"HEAD / HTTP/1.0\r\n",
            b"Host: x\r\n",
            b"Host: a:80\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"Transfer-Encoding: Chunked \r\n",
            b"Content-Length: 3\r\n",
            b"Content-Length: 18446744073709551616\r\n",
            b"Connection: close\r\n",
            b"Expect: 100-continue\r\n",
            b"\r\n",
            b"\n",
            b"\r",
            b"1\r\na\r\n",
            b"ffffffffffffffff\r\n",
            b"0\r\n\r\n",
            b";ext=1",
            b" ",
            b"\x00",
            b"abc",
        ]);
        prop::collection::vec(
            prop_oneof![
                3 => piece.prop_map(|p| p.to_vec()),
                1 => prop::collection::vec(any::<u8>(), 0..8),
            ],
            0..24,
        )
        .prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// HTTP/2's names are held to HTTP/1.1's Host rule, byte for byte: a name HTTP/1.1
        /// would refuse never reaches a site or an app through `:authority` or `host`.
        #[test]
        fn http2_hosts_follow_the_http1_rule(name in prop::collection::vec(any::<u8>(), 0..24)) {
            let valid = crate::http::valid_host(&name);
            let none = std::iter::empty::<&[u8]>;
            prop_assert_eq!(super::h2_host(Some(&name), none()).is_ok(), valid);
            prop_assert_eq!(super::h2_host(None, [&name[..]].into_iter()).is_ok(), valid);
            prop_assert_eq!(super::h2_host(Some(&name), [&name[..]].into_iter()).is_ok(), valid);
        }

        #[test]
        fn heads_never_panic_and_respect_limits(buf in request_bytes()) {
            let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
            match parse_head(&buf, &LIMITS, &mut headers) {
                Ok(Head::Complete { len, framing, .. }) => {
                    prop_assert!(len <= buf.len() && len <= LIMITS.max_header_size);
                    if let Framing::Length(n) = framing {
                        prop_assert!(n <= LIMITS.max_body_size);
                    }
                }
                Ok(Head::Partial) => prop_assert!(buf.len() <= LIMITS.max_header_size),
                Err(e) => prop_assert!(matches!(e.status(), 400 | 413 | 414 | 431 | 501 | 505)),
            }
        }

        #[test]
        fn chunked_bodies_never_panic_and_split_anywhere(
            buf in request_bytes(),
            cuts in prop::collection::vec(0usize..200, 0..6),
        ) {
            let whole = decode_chunked(&buf, 100, 64);
            let pieces = decode_in_pieces(&buf, &cuts, 100, 64);
            prop_assert_eq!(&whole, &pieces);
            // Measuring without copying agrees with decoding.
            let measured = chunked_len(&buf, 100, 64);
            prop_assert_eq!(
                measured,
                whole.clone().map(|o| o.map(|(used, _)| used))
            );
            if let Ok(Some((used, body))) = whole {
                prop_assert!(used <= buf.len());
                prop_assert!(body.len() <= 100);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
            let _ = parse_head(&buf, &LIMITS, &mut headers);
            let _ = decode_chunked(&buf, 100, 64);
            let _ = valid_host(&buf);
        }
    }
}

#[test]
fn responder_writes_heads() {
    let mut out = Vec::new();
    Responder::new(&mut out, b"Server: espalier\r\n", false, 1, false).simple(
        200,
        "text/plain",
        b"hi",
    );
    assert_eq!(out, b"HTTP/1.1 200 OK\r\nServer: espalier\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi");
    let mut out = Vec::new();
    Responder::new(&mut out, b"", true, 0, true).simple(404, "text/plain", b"gone");
    assert_eq!(out, b"HTTP/1.1 404 Not Found\r\nConnection: keep-alive\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n", "HEAD has no body; an HTTP/1.0 client reads 1.1 as 1.0");
    let mut out = Vec::new();
    Responder::new(&mut out, b"", false, 0, false).error(400);
    assert!(
        out.starts_with(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"),
        "closing is said to HTTP/1.0 clients too"
    );
}

#[test]
fn a_body_written_in_place_is_framed_by_its_length() {
    for (len, head_only) in [(1234, false), (1234, true), (0, false), (7, false)] {
        let mut out = b"earlier answer".to_vec();
        let mut resp = Responder::new(&mut out, b"Server: espalier\r\n", true, 1, head_only);
        resp.status(200)
            .header("Content-Type", "text/html")
            .body_written(|page| page.extend((0..len).map(|i| b'a' + (i % 26) as u8)));
        let answer = &out[b"earlier answer".len()..];
        let head = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let field = format!("\r\nContent-Length: {len}\r\n\r\n");
        assert!(answer[..head].ends_with(field.as_bytes()), "{answer:?}");
        let body: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        assert_eq!(&answer[head..], if head_only { &[][..] } else { &body[..] });
    }
}

#[test]
fn a_local_location_never_names_another_host() {
    for (given, sent) in [
        ("/a/b/", "/a/b/"),
        ("//evil%E3%80%82example/", "/evil%E3%80%82example/"),
        ("///evil.example/", "/evil.example/"),
        ("/\\evil.example/", "/evil.example/"),
        ("\\\\evil.example", "/evil.example"),
        ("/\t/evil.example", "/evil.example"),
        ("https://shop.example//x", "https://shop.example//x"),
        ("/", "/"),
    ] {
        assert_eq!(local_location(given), sent, "{given:?}");
    }
}
