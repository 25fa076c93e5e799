//! WebSocket over HTTP/2 and HTTP/3 (RFC 8441, RFC 9220): a stream's extended CONNECT
//! (`:method CONNECT`, `:protocol websocket`) is made, at the codec's edge, into the request
//! the rest of the server already knows — a `GET` with `Upgrade: websocket` — so the site's
//! request chain (rules, access lists, limits, sign-in) runs on it as on any request, and the
//! one forwarder opens the tunnel to a pool's app or an upstream server over HTTP/1.1, as it
//! does for an HTTP/1.1 client. The app's `101 Switching Protocols` is made back into the
//! stream's `200`, after which the stream's DATA carries the WebSocket's frames both ways
//! (they are the same bytes on a stream as on a TCP connection).
//!
//! Owns: that translation both ways ([`take`], [`answer`]), where a WebSocket cannot go
//! ([`nowhere`]) and the mark a tunnel's request
//! carries ([`Tunnel`]). Must not touch: the tunnel's bytes (the stream's pump and relay in
//! [`super::stream_forward`] and [`super::streams`] carry them) or the settings frame that
//! offers extended CONNECT (each protocol's module sends it).

use super::service::Decided;
use http::request::Parts;
use http::{HeaderValue, Method, StatusCode};

/// The mark of a stream's request that opens a WebSocket: once answered `200`, its stream
/// is the tunnel (its request has no body: what the client sends is the WebSocket's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tunnel;

/// Whether the stream's request is a WebSocket's (see [`take`]).
pub(crate) fn is_tunnel(parts: &Parts) -> bool {
    parts.extensions.get::<Tunnel>().is_some()
}

/// Makes a stream's extended CONNECT with `:protocol` `protocol` into HTTP/1.1's upgrade
/// request: `GET`, `Connection: upgrade`, `Upgrade: websocket` and a fresh
/// `Sec-WebSocket-Key` (RFC 8441 §5 drops the key from the stream's request; an app speaking
/// RFC 6455 needs one, and its `Sec-WebSocket-Accept` goes no further than this server).
/// Any other request is left as it came; a CONNECT for another protocol (WebTransport,
/// CONNECT-UDP) is refused with `501`, as nothing here speaks it.
pub(crate) fn take(parts: &mut Parts, protocol: Option<&str>) -> Result<(), u16> {
    let Some(protocol) = protocol else {
        return Ok(());
    };
    if parts.method != Method::CONNECT || !protocol.eq_ignore_ascii_case("websocket") {
        return Err(501);
    }
    parts.method = Method::GET;
    let fields = &mut parts.headers;
    fields.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    fields.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    // A nonce the app hashes into its accept value, which only this server sees (RFC 6455
    // §4.1 asks it be random; it guards against caches between client and app, and there
    // is none here): 16 bytes, base64.
    let key = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        fastrand::u128(..).to_ne_bytes(),
    );
    if let Ok(key) = HeaderValue::from_str(&key) {
        fields.insert(http::header::SEC_WEBSOCKET_KEY, key);
    }
    parts.extensions.insert(Tunnel);
    Ok(())
}

/// Whether a WebSocket routed to `decided` has nowhere to go (`501`): espalier's own content
/// (no app: `to_fastcgi` is `None`, the answer an app's path of the site) or a FastCGI app
/// (`to_fastcgi`), neither of which speaks WebSocket. A site's refusal or redirect is
/// answered as it is.
pub(crate) fn nowhere(to_fastcgi: Option<bool>, decided: &Decided) -> bool {
    to_fastcgi.unwrap_or(matches!(decided, Decided::App { .. }))
}

/// What the app's answer to a WebSocket's request makes of its stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answered {
    /// It switched protocols: the stream's answer is `200` and its DATA is the tunnel.
    Opened,
    /// It refused (a 3xx, 4xx or 5xx): passed on as it is, and the stream ends with it.
    Refused,
    /// It answered with a success that is no switch (an app that ignored the upgrade and
    /// served a page): a client would take that `2xx` for an open tunnel, so it is `502`.
    NotSwitched,
}

/// Makes the app's answer `response` to a WebSocket's request into the stream's: a `101`
/// becomes `200` without `Sec-WebSocket-Accept` (RFC 8441 §5: the stream's answer has none);
/// a success that is no switch becomes a bare `502`.
pub(crate) fn answer(response: &mut http::Response<()>) -> Answered {
    let status = response.status();
    if status == StatusCode::SWITCHING_PROTOCOLS {
        *response.status_mut() = StatusCode::OK;
        response
            .headers_mut()
            .remove(http::header::SEC_WEBSOCKET_ACCEPT);
        return Answered::Opened;
    }
    if status.is_success() {
        *response = http::Response::new(());
        *response.status_mut() = StatusCode::BAD_GATEWAY;
        return Answered::NotSwitched;
    }
    Answered::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect(method: Method) -> Parts {
        let (mut parts, ()) = http::Request::builder()
            .method(method)
            .uri("https://a.example/chat?room=1")
            .header("sec-websocket-version", "13")
            .body(())
            .unwrap()
            .into_parts();
        parts.headers.insert(
            http::header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("c2VudCBieSB0aGUgY2xpZW50"),
        );
        parts
    }

    #[test]
    fn an_extended_connect_becomes_an_upgrade_with_a_fresh_key() {
        let mut parts = connect(Method::CONNECT);
        take(&mut parts, Some("websocket")).unwrap();
        assert_eq!(parts.method, Method::GET);
        assert_eq!(parts.uri.path_and_query().unwrap(), "/chat?room=1");
        assert_eq!(parts.headers["upgrade"], "websocket");
        assert_eq!(parts.headers["connection"], "upgrade");
        assert_eq!(parts.headers["sec-websocket-version"], "13");
        let key = parts.headers["sec-websocket-key"].to_str().unwrap();
        assert_ne!(key, "c2VudCBieSB0aGUgY2xpZW50");
        let raw = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, key);
        assert_eq!(raw.unwrap().len(), 16);
        assert!(is_tunnel(&parts));
    }

    #[test]
    fn other_requests_pass_and_other_protocols_are_refused() {
        let mut plain = connect(Method::CONNECT);
        take(&mut plain, None).unwrap();
        assert_eq!(plain.method, Method::CONNECT);
        assert!(!is_tunnel(&plain));
        let mut get = connect(Method::GET);
        take(&mut get, None).unwrap();
        assert!(get.headers.get("upgrade").is_none());
        assert_eq!(
            take(&mut connect(Method::CONNECT), Some("webtransport")),
            Err(501)
        );
        assert_eq!(take(&mut connect(Method::GET), Some("websocket")), Err(501));
    }

    #[test]
    fn a_switch_opens_the_stream_and_a_page_is_no_tunnel() {
        let mut switched = http::Response::builder()
            .status(101)
            .header("sec-websocket-accept", "x")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        assert_eq!(answer(&mut switched), Answered::Opened);
        assert_eq!(switched.status(), 200);
        assert!(switched.headers().get("sec-websocket-accept").is_none());
        assert_eq!(switched.headers()["sec-websocket-protocol"], "chat");
        let mut page = http::Response::builder()
            .status(200)
            .header("content-type", "text/html")
            .body(())
            .unwrap();
        assert_eq!(answer(&mut page), Answered::NotSwitched);
        assert_eq!(page.status(), 502);
        assert!(page.headers().is_empty());
        let mut denied = http::Response::builder().status(403).body(()).unwrap();
        assert_eq!(answer(&mut denied), Answered::Refused);
        assert_eq!(denied.status(), 403);
    }
}
