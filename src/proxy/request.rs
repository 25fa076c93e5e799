//! The request as it goes to an HTTP application: the head rewritten for the hop (hop-by-hop
//! fields dropped, `X-Forwarded-For/-Proto/-Host`, `X-Remote-User` and `X-Client-Subject` set
//! by espalier, a client's `Forwarded` extended with espalier's element, fields whose names
//! hold `_` dropped, HTTP/2's and HTTP/3's cookie crumbs joined into one `Cookie`, the body
//! re-framed by length or chunks), and what forwarding it needs to know (retry, upgrade,
//! keep-alive).
//!
//! Why underscored names are dropped (nginx's `underscores_in_headers off`): CGI, WSGI, Rack
//! and PHP map both `X-Remote-User` and `X_Remote_User` onto `HTTP_X_REMOTE_USER`, so a
//! client's `X_Remote_User: admin` would reach the app as if espalier had set the field it
//! promises apps can trust. `pass_underscored_fields = true` keeps them for an app that
//! needs one.
//!
//! Owns: those rules, pure. Must not touch: sockets (see [`super::forward`](mod@super::forward)).

use super::forward_head::ForwardHead;
use crate::http::service::LentHead;
use crate::http::{Framing, Method, Request};

/// A request as it goes to the app: its head rewritten, and what the forwarding needs to know.
pub struct ForwardRequest {
    pub(super) head: ForwardHead,
    pub(super) body: Framing,
    pub(super) retryable: bool,
    pub(super) head_only: bool,
    pub(super) upgrade: bool,
    pub(super) client_minor: u8,
    pub(super) keep_alive: bool,
    pub(super) expect_continue: bool,
    /// The site's compression for this request: `None` when it compresses nothing, else
    /// the coding the client accepts, if any (see [`super::encode`]).
    pub(super) compress: Option<Option<crate::compress::Coding>>,
    /// What an upstream group chooses the server by (a hash key, a sticky cookie).
    pub(super) choose: super::group::Choose,
    /// The client takes trailer fields (`TE: trailers`, as every gRPC client says); looked at
    /// only for a server spoken to in HTTP/2 (see [`takes_trailers`]).
    pub(super) trailers: bool,
    /// What the route's response cache makes of it (`None`: nothing, or no cache).
    pub(super) cache: Option<super::cache::CacheRequest>,
    /// Its path takes its route's buffering (`buffer`), if the route has any.
    pub(super) buffered: bool,
}

/// Fields that describe one connection, not the message (RFC 9110 §7.6.1).
pub(super) const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Fields a `Connection` list cannot make hop-by-hop: what says which site a message is for,
/// who sends it and what it holds. `Connection: Host, Authorization` once stripped both on
/// their way to the app; they stay now.
const END_TO_END: [&str; 4] = ["host", "authorization", "cookie", "content-type"];

/// Whether a request field stays behind: hop-by-hop, named in `Connection` (`listed`, but for
/// [`END_TO_END`] fields), or one espalier sets itself (framing, `Expect`, `X-Forwarded-*`).
pub(super) fn dropped_on_the_way(name: &str, listed: &[&str]) -> bool {
    const OWN: [&str; 7] = [
        "content-length",
        "expect",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-forwarded-host",
        // Who signed in, whose certificate: espalier's to say, never the client's.
        "x-remote-user",
        "x-client-subject",
    ];
    HOP_BY_HOP
        .iter()
        .chain(OWN.iter())
        .any(|h| name.eq_ignore_ascii_case(h))
        || named_hop(name, listed)
}

/// W3C trace context's fields, which a traced request's hop writes itself.
pub(super) fn is_trace_field(name: &str) -> bool {
    name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate")
}

/// Whether a message's `Connection` (its tokens `listed`) makes field `name` hop-by-hop: but
/// for the [`END_TO_END`] fields, which it cannot.
pub(super) fn named_hop(name: &str, listed: &[&str]) -> bool {
    listed.iter().any(|h| name.eq_ignore_ascii_case(h))
        && !END_TO_END.iter().any(|e| name.eq_ignore_ascii_case(e))
}

/// The tokens of every `Connection` field.
pub(super) fn connection_tokens<'a>(
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<&'a str> {
    headers
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

/// Whether `req`'s client takes trailer fields (`TE: trailers`).
pub(super) fn takes_trailers(req: &Request<'_>) -> bool {
    req.header("te").is_some_and(|te| {
        te.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
    })
}

impl ForwardRequest {
    /// A chunked body read whole (`buffer`) goes to the app with its `length` instead, as
    /// nginx sends it after buffering: many WSGI and CGI apps read `Content-Length` alone,
    /// and an HTTP/2 or HTTP/3 upload need not say one. The framing line is espalier's own
    /// (the client's `Transfer-Encoding` never passes), replaced in its place; a body the
    /// client framed by length keeps its field.
    pub(super) fn framed_by_length(&mut self, length: u64) {
        if self.body == Framing::Chunked {
            let mut digits = itoa::Buffer::new();
            let value = digits.format(length).as_bytes();
            (self.head).replace_field("Transfer-Encoding", "Content-Length", value);
            self.body = Framing::Length(length);
        }
    }

    /// The request `req`, as its connection (`lent`) framed and sent it, as it goes to the app.
    pub fn new(req: &Request<'_>, lent: &LentHead<'_>, pass_underscored: bool) -> Self {
        let (framing, keep_alive, expect_continue) =
            (lent.framing, lent.keep_alive, lent.expect_continue);
        let peer = Some(lent.client_text).filter(|p| !p.is_empty());
        let proto = if lent.https { "https" } else { "http" };
        let fields = || req.headers.iter().map(|h| (h.name, h.value));
        let listed = connection_tokens(fields());
        // `Upgrade: h2c` is the client asking espalier for HTTP/2, not the app: it is not
        // passed on (an app's 101 to it once opened a raw tunnel), and a 101 is then a 502.
        let upgrade = listed.iter().any(|t| t.eq_ignore_ascii_case("upgrade"))
            && req
                .header("upgrade")
                .is_some_and(|u| !u.split(',').any(|t| t.trim().eq_ignore_ascii_case("h2c")))
            && req.minor_version == 1;
        let mut head = ForwardHead::new(req.method_text, req.path, req.query);
        // An HTTP/1.0 request may come without Host; one in HTTP/1.1 must have it, empty
        // when there is no authority to name (RFC 9112 §3.2).
        if req.header("host").is_none() {
            head.field("Host", b"");
        }
        let mut cookies = 0;
        for h in req.headers {
            if dropped_on_the_way(h.name, &listed)
                || (!pass_underscored && h.name.contains('_'))
                || h.name.eq_ignore_ascii_case("forwarded")
                || lent.granted.is_some_and(|g| g.replaces(h.name))
                || (lent.trace.is_some() && is_trace_field(h.name))
            {
                continue;
            }
            // HTTP/2 and HTTP/3 send each cookie as a field of its own (RFC 9113 §8.2.3);
            // an HTTP/1.1 app takes one `Cookie` line, its crumbs joined with `; `.
            if h.name.eq_ignore_ascii_case("cookie") {
                cookies += 1;
                if cookies == 1 {
                    head.field_with("Cookie", |value| join_cookies(value, req));
                }
                continue;
            }
            head.field(h.name, h.value);
        }
        forwarded_for(&mut head, req, peer);
        forwarded(&mut head, req, peer, proto);
        head.field("X-Forwarded-Proto", proto.as_bytes());
        if let Some(host) = req.host() {
            head.field("X-Forwarded-Host", host.as_bytes());
        }
        if let Some(user) = lent.remote_user {
            head.field("X-Remote-User", user.as_bytes());
        }
        if let Some(subject) = lent.client_cert {
            head.field("X-Client-Subject", subject.as_bytes());
        }
        // The hop's trace: its span the app's spans hang under (the client's fields dropped).
        if let Some(trace) = lent.trace {
            head.field("traceparent", &trace.traceparent());
            if !trace.state.is_empty() {
                head.field("tracestate", trace.state.as_bytes());
            }
        }
        // Who the path's verifier let in, in the fields it names (the client's own dropped).
        for (name, value) in lent.granted.iter().flat_map(|g| &g.fields) {
            head.field(name, value);
        }
        match framing {
            Framing::None => {}
            Framing::Length(n) => {
                head.field("Content-Length", itoa::Buffer::new().format(n).as_bytes())
            }
            Framing::Chunked => head.field("Transfer-Encoding", b"chunked"),
        }
        if upgrade {
            let protocol = req.header("upgrade").unwrap_or_default();
            head.field("Upgrade", protocol.as_bytes());
            head.field("Connection", b"upgrade");
        } else {
            head.field("Connection", b"keep-alive");
        }
        let idempotent = matches!(
            req.method_text,
            "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE" | "TRACE"
        );
        ForwardRequest {
            head,
            body: framing,
            // An empty body (HTTP/2's and HTTP/3's GET) is resent as safely as none.
            retryable: idempotent && framing.carries_nothing() && !upgrade,
            head_only: req.method == Method::Head,
            upgrade,
            client_minor: req.minor_version,
            keep_alive,
            expect_continue,
            compress: None,
            choose: Default::default(),
            trailers: false,
            cache: None,
            buffered: true,
        }
    }
}

/// `X-Forwarded-For`: the client's own list (every line of it), then the client `peer`.
fn forwarded_for(head: &mut ForwardHead, req: &Request<'_>, peer: Option<&str>) {
    let listed = || {
        (req.headers.iter())
            .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
            .map(|h| h.value)
            .chain(peer.map(str::as_bytes))
    };
    if listed().next().is_none() {
        return;
    }
    head.field_with("X-Forwarded-For", |value| {
        for (k, one) in listed().enumerate() {
            if k > 0 {
                value.extend_from_slice(b", ");
            }
            value.extend_from_slice(one);
        }
    });
}

/// Every `Cookie` field's value of `req`, joined with `; ` (HTTP/2's and HTTP/3's crumbs
/// made the one value an HTTP/1.1 or CGI app reads).
pub(super) fn join_cookies(value: &mut Vec<u8>, req: &Request<'_>) {
    let crumbs = (req.headers.iter()).filter(|h| h.name.eq_ignore_ascii_case("cookie"));
    for (k, h) in crumbs.enumerate() {
        if k > 0 {
            value.extend_from_slice(b"; ");
        }
        value.extend_from_slice(h.value);
    }
}

/// `Forwarded` (RFC 7239), when the client sent one: its elements, then espalier's own
/// (`for`, `proto`, `host`) — the last element is always espalier's, as the last
/// `X-Forwarded-For` address is. None is added when the client sent none (nothing to
/// correct, and nothing spent per request).
fn forwarded(head: &mut ForwardHead, req: &Request<'_>, peer: Option<&str>, proto: &str) {
    let sent = || (req.headers.iter()).filter(|h| h.name.eq_ignore_ascii_case("forwarded"));
    if sent().next().is_none() {
        return;
    }
    head.field_with("Forwarded", |value| {
        for h in sent() {
            value.extend_from_slice(h.value);
            value.extend_from_slice(b", ");
        }
        if let Some(peer) = peer {
            // An IPv6 address is quoted and bracketed (RFC 7239 §6).
            if peer.contains(':') {
                value.extend_from_slice(format!("for=\"[{peer}]\";").as_bytes());
            } else {
                value.extend_from_slice(format!("for={peer};").as_bytes());
            }
        }
        value.extend_from_slice(b"proto=");
        value.extend_from_slice(proto.as_bytes());
        if let Some(host) = req.host().filter(|h| !h.contains('"') && !h.contains('\\')) {
            value.extend_from_slice(format!(";host=\"{host}\"").as_bytes());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    fn forwarded(raw: &[u8], peer: Option<&str>) -> String {
        String::from_utf8(forward_request(raw, peer).head.text().to_vec()).expect("text")
    }

    fn forward_request(raw: &[u8], peer: Option<&str>) -> ForwardRequest {
        let limits = crate::http::HeadLimits {
            max_request_line: 8192,
            max_header_size: 16384,
            max_headers: 100,
            max_body_size: 1 << 20,
        };
        let mut headers: [MaybeUninit<httparse::Header<'_>>; crate::http::MAX_HEADERS] =
            [const { MaybeUninit::uninit() }; crate::http::MAX_HEADERS];
        let head = crate::http::parse_head(raw, &limits, &mut headers).expect("parses");
        let crate::http::Head::Complete {
            request,
            framing,
            keep_alive,
            expect_continue,
            ..
        } = head
        else {
            panic!("complete head")
        };
        let lent = LentHead {
            framing,
            keep_alive,
            expect_continue,
            client: None,
            client_text: peer.unwrap_or_default(),
            local: None,
            https: false,
            remote_user: None,
            granted: None,
            trace: None,
            client_cert: None,
        };
        ForwardRequest::new(&request, &lent, false)
    }

    #[test]
    fn underscored_names_are_dropped_cookies_joined_and_forwarded_extended() {
        let head = forwarded(
            b"GET / HTTP/1.1\r\nHost: shop.example\r\nX_Remote_User: admin\r\nX_Forwarded_Proto: https\r\ncookie: a=1\r\nX-Ok: 1\r\ncookie: b=2\r\nForwarded: for=10.0.0.9\r\nForwarded: for=10.0.0.8;proto=https\r\n\r\n",
            Some("192.0.2.7"),
        );
        assert!(
            !head.contains("X_Remote_User") && !head.contains("X_Forwarded"),
            "{head}"
        );
        assert!(head.contains("Cookie: a=1; b=2\r\nX-Ok: 1\r\n"), "{head}");
        assert_eq!(head.matches("ookie").count(), 1, "{head}");
        assert!(
            head.contains("Forwarded: for=10.0.0.9, for=10.0.0.8;proto=https, for=192.0.2.7;proto=http;host=\"shop.example\"\r\n"),
            "{head}"
        );
        assert_eq!(head.matches("Forwarded:").count(), 1, "{head}");
        // None added when the client sent none.
        let head = forwarded(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", Some("::1"));
        assert!(!head.contains("Forwarded:"), "{head}");
    }

    #[test]
    fn hop_by_hop_fields_are_dropped_and_forwarded_ones_set() {
        let head = forwarded(
            b"GET /a?b=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nAccept: */*\r\n\r\n",
            Some("192.0.2.7"),
        );
        assert!(
            head.starts_with("GET /a?b=1 HTTP/1.1\r\nHost: shop.example\r\n"),
            "{head}"
        );
        for gone in ["X-Secret", "Keep-Alive", "TE:", "https"] {
            assert!(!head.contains(gone), "{gone} in {head}");
        }
        assert!(head.contains("Accept: */*\r\n"));
        assert!(
            head.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
            "{head}"
        );
        assert!(head.contains("X-Forwarded-Proto: http\r\n"));
        assert!(head.contains("X-Forwarded-Host: shop.example\r\n"));
        assert!(head.ends_with("Connection: keep-alive\r\n\r\n"));
    }

    #[test]
    fn bodies_are_reframed_and_upgrades_kept() {
        let head = forwarded(
            b"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
            None,
        );
        assert!(head.contains("Transfer-Encoding: chunked\r\n"));
        assert!(!head.contains("Expect"));
        // Read whole (buffered), it goes with its length.
        let raw = b"POST /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
        let mut req = forward_request(raw, None);
        req.framed_by_length(11);
        let head = String::from_utf8(req.head.text().to_vec()).unwrap();
        assert!(head.contains("Host: a\r\n"), "{head}");
        assert!(head.contains("Content-Length: 11\r\n") && !head.contains("Transfer-Encoding"));
        assert_eq!(req.body, Framing::Length(11));
        let head = forwarded(
            b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n",
            None,
        );
        assert!(
            head.contains("Upgrade: websocket\r\nConnection: upgrade\r\n\r\n"),
            "{head}"
        );
        assert!(head.contains("Sec-WebSocket-Key: x\r\n"));
        // h2c is asked of espalier, never passed on as an upgrade.
        let head = forwarded(
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
            None,
        );
        assert!(
            !head.contains("Upgrade") && !head.contains("HTTP2-Settings"),
            "{head}"
        );
    }

    #[test]
    fn a_request_without_host_goes_on_with_an_empty_one() {
        let head = forwarded(b"GET / HTTP/1.0\r\n\r\n", None);
        assert!(head.starts_with("GET / HTTP/1.1\r\nHost: \r\n"), "{head}");
    }

    #[test]
    fn connection_cannot_strip_the_requests_own_fields() {
        let head = forwarded(
            b"GET / HTTP/1.1\r\nHost: a.test\r\nAuthorization: Basic eA==\r\nCookie: s=1\r\nConnection: Host, Authorization, Cookie, X-Drop\r\nX-Drop: 1\r\n\r\n",
            None,
        );
        for kept in ["Host: a.test", "Authorization: Basic eA==", "Cookie: s=1"] {
            assert!(head.contains(kept), "{kept} missing from {head}");
        }
        assert!(!head.contains("X-Drop"), "{head}");
    }
}
