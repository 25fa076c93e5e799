//! The `dynamic` handler: the case study's "simple dynamic page" — HTML built per request from
//! the request itself (method, path, query, some headers), a per-thread request counter and the
//! time, so every response differs and costs real work.
//!
//! Owns: that page. Must not touch: I/O.

use crate::http::{Request, Responder};

/// Escapes text for HTML (the page reflects request data, which is attacker-controlled).
/// Copies runs of safe bytes whole: the five special characters are ASCII, so cutting the
/// string at them never splits a UTF-8 sequence.
pub fn escape_html(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let replacement: &[u8] = match b {
            b'&' => b"&amp;",
            b'<' => b"&lt;",
            b'>' => b"&gt;",
            b'"' => b"&quot;",
            b'\'' => b"&#39;",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(replacement);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Who is answering: shown on the page.
pub struct PageContext<'a> {
    pub worker: &'a str,
    pub served: u64,
    pub unix_seconds: u64,
}

/// The page's fixed text between the values, so each value costs two copies.
const PIECES: [&str; 12] = [
    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>espalier dynamic page</title></head><body>\n<h1>Hello from ",
    "</h1>\n<table>\n<tr><th>method</th><td>",
    "</td></tr>\n<tr><th>path</th><td>",
    "</td></tr>\n<tr><th>query</th><td>",
    "</td></tr>\n<tr><th>host</th><td>",
    "</td></tr>\n<tr><th>client</th><td>",
    "</td></tr>\n<tr><th>user-agent</th><td>",
    "</td></tr>\n<tr><th>accept</th><td>",
    "</td></tr>\n<tr><th>body bytes</th><td>",
    "</td></tr>\n<tr><th>requests served by this thread</th><td>",
    "</td></tr>\n<tr><th>unix time</th><td>",
    "</td></tr>\n</table>\n</body></html>\n",
];

/// The page's header lines, one copy rather than four per header.
const HEAD_LINES: &[u8] = b"Content-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n";

/// Answers with the page, written straight into the answer's buffer.
pub fn respond(req: &Request<'_>, ctx: &PageContext<'_>, resp: &mut Responder<'_>) {
    let (mut host, mut agent, mut accept) = ("", "", "");
    // One pass over the headers for the three the page shows.
    for h in req.headers {
        let slot = if h.name.eq_ignore_ascii_case("host") {
            &mut host
        } else if h.name.eq_ignore_ascii_case("user-agent") {
            &mut agent
        } else if h.name.eq_ignore_ascii_case("accept") {
            &mut accept
        } else {
            continue;
        };
        if slot.is_empty() {
            *slot = std::str::from_utf8(h.value).unwrap_or("");
        }
    }
    let (mut n1, mut n2, mut n3) = (
        itoa::Buffer::new(),
        itoa::Buffer::new(),
        itoa::Buffer::new(),
    );
    // (value, whether it comes from the request and must be escaped). The worker's name is
    // made of validated pool-name characters and a number; the counters are digits.
    let values = [
        (ctx.worker, false),
        (req.method_text, true),
        (req.path, true),
        (req.query, true),
        (host, true),
        // An IP address formatted by the engine.
        (req.client, false),
        (agent, true),
        (accept, true),
        (n1.format(req.body.len()), false),
        (n2.format(ctx.served), false),
        (n3.format(ctx.unix_seconds), false),
    ];
    resp.status(200)
        .raw_headers(HEAD_LINES)
        .body_written(|page| {
            for (piece, (value, from_request)) in PIECES.iter().zip(values) {
                page.extend_from_slice(piece.as_bytes());
                if from_request {
                    escape_html(value, page);
                } else {
                    page.extend_from_slice(value.as_bytes());
                }
            }
            page.extend_from_slice(PIECES[PIECES.len() - 1].as_bytes());
        });
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes() {
        let mut s = Vec::new();
        super::escape_html("<script>alert('x')&\"</script>", &mut s);
        assert_eq!(
            s,
            b"&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
        s.clear();
        super::escape_html("plain ünïcödé & more", &mut s);
        assert_eq!(String::from_utf8(s).unwrap(), "plain ünïcödé &amp; more");
    }
}
