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
        decode_chunked(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\nNEXT", 100).unwrap(),
        Some((24, b"Wikipedia".to_vec()))
    );
    assert_eq!(
        decode_chunked(b"4\r\nWiki\r\n0\r\nTrailer: x\r\n\r\n", 100)
            .unwrap()
            .unwrap()
            .1,
        b"Wiki"
    );
    assert_eq!(decode_chunked(b"4\r\nWi", 100).unwrap(), None);
    assert_eq!(decode_chunked(b"4\r\nWiki\r\n0\r\n", 100).unwrap(), None);
    assert_eq!(
        decode_chunked(b"zz\r\n", 100).unwrap_err(),
        ProtocolError::BadRequest
    );
    assert_eq!(
        decode_chunked(b"ff\r\n", 100).unwrap_err(),
        ProtocolError::BodyTooLarge
    );
    assert_eq!(
        decode_chunked(b"2\r\nabXY", 100).unwrap_err(),
        ProtocolError::BadRequest
    );
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
    assert_eq!(out, b"HTTP/1.0 404 Not Found\r\nConnection: keep-alive\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n", "HEAD has no body");
}
