//! An HTTP/1.1 exchange carried on a stream of an upstream's HTTP/2 connection: the
//! forwarder's request head goes out as the stream's request, made from the head's parts
//! ([`super::forward_head`]: no text read back), its re-chunked body as DATA frames, and the
//! stream's response comes back as an HTTP/1.1 answer (its head, its body by length or in
//! chunks, its trailers as the chunked body's).
//!
//! Why a translation rather than a second forwarder: every site feature already applies to
//! the HTTP/1.1 forwarder's exchange — the request's rewriting, retries, the answer's field
//! edits, error pages, compression, sticky cookies, logging — so a server spoken to in
//! HTTP/2 gets them all by being one more kind of connection ([`super::upstream::Conn`]).
//! What HTTP/1.1 cannot carry — a response streaming while its request still streams, and
//! trailers to an HTTP/2 client (gRPC) — goes by `super::h2_stream` instead, which shares
//! this module's request and response heads.
//!
//! Owns: [`H2Exchange`] and the two heads' translation ([`request_of`],
//! [`head_of_response`]). Must not touch: choosing or connecting (see [`super::route`]), or
//! the HTTP/2 protocol itself (the `h2` crate's: framing, flow control, HPACK).

use super::forward_head::ForwardHead;
use crate::http::{ChunkedDecoder, Framing};
use bytes::{Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most a chunk's size line and extensions may take in the forwarder's re-chunked body.
const MAX_CHUNK_LINE: usize = 128 << 10;

/// Fields that describe an HTTP/1.1 connection, which HTTP/2 forbids (RFC 9113 §8.2.2).
const CONNECTION_FIELDS: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
];

/// How the request's body comes from the forwarder, as its head's fields say.
fn framing_of(head: &ForwardHead) -> Result<Framing, String> {
    if let Some(length) = head.get("content-length") {
        let n = std::str::from_utf8(length)
            .ok()
            .and_then(|v| v.parse().ok());
        return Ok(Framing::Length(
            n.ok_or("the request's Content-Length is not a number")?,
        ));
    }
    Ok(match head.get("transfer-encoding") {
        Some(_) => Framing::Chunked,
        None => Framing::None,
    })
}

/// The HTTP/2 request for the head the forwarder made (`head`'s parts: no text is read
/// again), to a server over TLS when `https`; with `te: trailers` when `trailers`. `Err`
/// names what HTTP/2 cannot carry.
pub(super) fn request_of(
    head: &ForwardHead,
    https: bool,
    trailers: bool,
) -> Result<(http::Request<()>, Framing), String> {
    let framing = framing_of(head)?;
    let mut authority = "localhost";
    let mut request = http::Request::builder().method(head.method());
    for (name, value) in head.fields() {
        if name.eq_ignore_ascii_case("upgrade") {
            return Err("the request asks to upgrade its connection (a WebSocket), which an HTTP/2 server is not asked for here: give that path a group with protocol = \"http1\"".into());
        }
        if name.eq_ignore_ascii_case("host") {
            if let Ok(host) = std::str::from_utf8(value) {
                if !host.is_empty() {
                    authority = host;
                }
            }
            continue;
        }
        if CONNECTION_FIELDS
            .iter()
            .any(|c| name.eq_ignore_ascii_case(c))
        {
            continue;
        }
        request = request.header(name, value);
    }
    if trailers {
        request = request.header("te", "trailers");
    }
    let scheme = if https { "https" } else { "http" };
    let uri = format!("{scheme}://{authority}{}", head.target());
    let request = request
        .uri(uri)
        .body(())
        .map_err(|e| format!("the request cannot be sent in HTTP/2: {e}"))?;
    Ok((request, framing))
}

/// The HTTP/1.1 head of an HTTP/2 response, and whether its body comes in chunks (no
/// length given, and a body to come): `head_only` for an answer to `HEAD`.
pub(super) fn head_of_response(
    response: &http::response::Parts,
    body_ended: bool,
    head_only: bool,
) -> (Vec<u8>, bool) {
    let status = response.status;
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut length_given = false;
    for (name, value) in &response.headers {
        length_given |= name == http::header::CONTENT_LENGTH;
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = head_only
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED;
    let chunked = !length_given && !bodiless && !body_ended;
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else if !length_given && !bodiless {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"\r\n");
    (out, chunked)
}

/// Trailer fields as a chunked body's end: the last chunk, the fields, the empty line.
pub(super) fn last_chunk(trailers: Option<&http::HeaderMap>, out: &mut BytesMut) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// One request on an upstream's HTTP/2 connection, written and read as an HTTP/1.1
/// connection is by the forwarder (one exchange: it never goes back to the idle pool).
pub struct H2Exchange {
    sender: Option<SendRequest<Bytes>>,
    https: bool,
    head_only: bool,
    outgoing: Option<Outgoing>,
    response: Option<ResponseFuture>,
    incoming: Option<Incoming>,
    /// The answer's HTTP/1.1 bytes not yet read.
    out: BytesMut,
}

/// The request's body on its way out.
struct Outgoing {
    send: SendStream<Bytes>,
    framing: Framing,
    decoder: ChunkedDecoder,
    /// Decoded, waiting for the server's window.
    pending: Bytes,
    /// All of it decoded: the stream ends once `pending` is out.
    whole: bool,
    ended: bool,
}

/// The response's body on its way in.
struct Incoming {
    recv: RecvStream,
    chunked: bool,
    done: bool,
}

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e.to_string())
}

impl H2Exchange {
    /// An exchange on the connection `sender` sends on, to a server over TLS when `https`.
    pub fn new(sender: SendRequest<Bytes>, https: bool) -> Self {
        H2Exchange {
            sender: Some(sender),
            https,
            head_only: false,
            outgoing: None,
            response: None,
            incoming: None,
            out: BytesMut::new(),
        }
    }

    /// The connection it would send on (for a stream forwarded as itself), and whether the
    /// server is spoken to over TLS.
    pub(super) fn into_sender(self) -> Option<(SendRequest<Bytes>, bool)> {
        Some((self.sender?, self.https))
    }

    /// Sends the request `head` on a new stream (once the connection takes one); its body
    /// follows by writes, framed as the head says.
    pub(super) async fn send_head(&mut self, head: &ForwardHead) -> io::Result<()> {
        let (request, framing) = request_of(head, self.https, false)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.head_only = request.method() == http::Method::HEAD;
        let sender = self
            .sender
            .as_mut()
            .ok_or_else(|| broken("no connection"))?;
        std::future::poll_fn(|cx| sender.poll_ready(cx))
            .await
            .map_err(broken)?;
        let bodiless = framing.carries_nothing();
        let (response, send) = sender.send_request(request, bodiless).map_err(broken)?;
        self.response = Some(response);
        self.outgoing = Some(Outgoing {
            send,
            framing,
            decoder: ChunkedDecoder::with_bounds(u64::MAX, MAX_CHUNK_LINE),
            pending: Bytes::new(),
            whole: bodiless,
            ended: bodiless,
        });
        Ok(())
    }
}

impl Outgoing {
    /// Sends what waits as the server's window allows; ready when nothing waits.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            if self.send.capacity() == 0 {
                self.send.reserve_capacity(self.pending.len());
                match ready!(self.send.poll_capacity(cx)) {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Poll::Ready(Err(broken(e))),
                    None => return Poll::Ready(Err(broken("the stream was closed"))),
                }
            }
            let n = self.send.capacity().min(self.pending.len());
            let piece = self.pending.split_to(n);
            let end = self.whole && self.pending.is_empty();
            self.send.send_data(piece, end).map_err(broken)?;
            self.ended |= end;
        }
        if self.whole && !self.ended {
            self.send.send_data(Bytes::new(), true).map_err(broken)?;
            self.ended = true;
        }
        Poll::Ready(Ok(()))
    }

    /// Takes body bytes as the forwarder framed them: how many were used.
    fn take(&mut self, buf: &[u8]) -> io::Result<usize> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        match self.framing {
            Framing::None => Err(bad("no body was announced")),
            Framing::Length(left) => {
                let n = (left.min(buf.len() as u64)) as usize;
                self.framing = Framing::Length(left - n as u64);
                self.whole = left == n as u64;
                self.pending = Bytes::copy_from_slice(&buf[..n]);
                Ok(n)
            }
            Framing::Chunked => {
                let mut data = buf.to_vec();
                let d = (self.decoder.decode(&mut data)).map_err(|_| bad("bad chunked body"))?;
                data.truncate(d.produced);
                self.pending = Bytes::from(data);
                self.whole = d.done;
                Ok(d.consumed)
            }
        }
    }
}

impl AsyncWrite for H2Exchange {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(out) = &mut this.outgoing {
            ready!(out.poll_send(cx))?;
            if out.whole {
                return Poll::Ready(Err(broken("the request's body is already whole")));
            }
            let n = out.take(buf)?;
            // Sent as far as the window allows now; the rest at the next write or flush.
            if let Poll::Ready(Err(e)) = out.poll_send(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(n));
        }
        // A head is sent by `send_head`, as its parts: nothing written goes before it.
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a request's head goes to an HTTP/2 server by Conn::send_head",
        )))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().outgoing {
            Some(out) => out.poll_send(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

impl AsyncRead for H2Exchange {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                buf.put_slice(&this.out.split_to(n));
                return Poll::Ready(Ok(()));
            }
            // The body still going out (the server may answer first) moves as reads wait.
            if let Some(out) = &mut this.outgoing {
                if let Poll::Ready(Err(e)) = out.poll_send(cx) {
                    if this.incoming.is_none() && this.response.is_none() {
                        return Poll::Ready(Err(e));
                    }
                }
            }
            if let Some(response) = &mut this.response {
                let answer = match ready!(Pin::new(response).poll(cx)) {
                    Ok(answer) => answer,
                    // Refused before the server did anything with it: as a connection closed
                    // before any answer, which the forwarder may send again.
                    Err(e) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => {
                        this.response = None;
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) => return Poll::Ready(Err(broken(e))),
                };
                this.response = None;
                let (parts, recv) = answer.into_parts();
                let ended = recv.is_end_stream();
                let (head, chunked) = head_of_response(&parts, ended, this.head_only);
                this.out.extend_from_slice(&head);
                this.incoming = Some(Incoming {
                    recv,
                    chunked,
                    done: ended || this.head_only,
                });
                continue;
            }
            let Some(incoming) = &mut this.incoming else {
                return Poll::Ready(Ok(()));
            };
            if incoming.done {
                return Poll::Ready(Ok(()));
            }
            match ready!(incoming.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = incoming.recv.flow_control().release_capacity(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    if incoming.chunked {
                        let mut size = itoa_hex(data.len());
                        size.extend_from_slice(b"\r\n");
                        this.out.extend_from_slice(&size);
                        this.out.extend_from_slice(&data);
                        this.out.extend_from_slice(b"\r\n");
                    } else {
                        this.out.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Poll::Ready(Err(broken(e))),
                None => {
                    if incoming.chunked {
                        let trailers = ready!(incoming.recv.poll_trailers(cx)).map_err(broken)?;
                        last_chunk(trailers.as_ref(), &mut this.out);
                    }
                    incoming.done = true;
                }
            }
        }
    }
}

/// `n` in hexadecimal, a chunk's size line.
fn itoa_hex(n: usize) -> Vec<u8> {
    format!("{n:x}").into_bytes()
}

use std::future::Future;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_head_becomes_an_http2_request() {
        let head = |method, target: &str, fields: &[(&str, &str)]| {
            let (path, query) = target.split_once('?').unwrap_or((target, ""));
            let mut head = ForwardHead::new(method, path, query);
            for (name, value) in fields {
                head.field(name, value.as_bytes());
            }
            head
        };
        let post = head(
            "POST",
            "/api/v1?x=1",
            &[
                ("Host", "example.test"),
                ("Content-Type", "application/json"),
                ("Transfer-Encoding", "chunked"),
                ("X-Forwarded-For", "10.0.0.1"),
                ("Connection", "keep-alive"),
            ],
        );
        let (req, framing) = request_of(&post, true, true).unwrap();
        assert_eq!(framing, Framing::Chunked);
        assert_eq!(req.uri().to_string(), "https://example.test/api/v1?x=1");
        assert_eq!(req.method(), http::Method::POST);
        assert!(req.headers().get("transfer-encoding").is_none());
        assert!(req.headers().get("connection").is_none());
        assert!(req.headers().get("host").is_none());
        assert_eq!(req.headers()["te"], "trailers");
        assert_eq!(req.headers()["x-forwarded-for"], "10.0.0.1");
        let get = head("GET", "/", &[("Host", ""), ("Content-Length", "3")]);
        let (req, framing) = request_of(&get, false, false).unwrap();
        assert_eq!(framing, Framing::Length(3));
        assert_eq!(req.uri().to_string(), "http://localhost/");
        assert!(req.headers().get("te").is_none());
        let bad = head("GET", "/", &[("Content-Length", "x")]);
        assert!(request_of(&bad, false, false)
            .unwrap_err()
            .contains("not a number"));
        let ws = head(
            "GET",
            "/ws",
            &[
                ("Host", "a"),
                ("Connection", "upgrade"),
                ("Upgrade", "websocket"),
            ],
        );
        assert!(request_of(&ws, false, false)
            .unwrap_err()
            .contains("WebSocket"));
    }

    #[test]
    fn a_response_gets_the_framing_http1_needs() {
        let parts = |status: u16, length: Option<&str>| {
            let mut r = http::Response::builder()
                .status(status)
                .header("grpc-encoding", "identity");
            if let Some(l) = length {
                r = r.header("content-length", l);
            }
            r.body(()).unwrap().into_parts().0
        };
        let (head, chunked) = head_of_response(&parts(200, None), false, false);
        assert!(chunked);
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("grpc-encoding: identity\r\n"));
        assert!(text.ends_with("transfer-encoding: chunked\r\n\r\n"));
        let (head, chunked) = head_of_response(&parts(200, Some("5")), false, false);
        assert!(!chunked && !String::from_utf8(head).unwrap().contains("chunked"));
        let (head, chunked) = head_of_response(&parts(404, None), true, false);
        assert!(
            !chunked
                && String::from_utf8(head)
                    .unwrap()
                    .contains("content-length: 0")
        );
        let (head, _) = head_of_response(&parts(204, None), true, false);
        assert!(!String::from_utf8(head).unwrap().contains("content-length"));
        let mut end = BytesMut::new();
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        last_chunk(Some(&trailers), &mut end);
        assert_eq!(&end[..], b"0\r\ngrpc-status: 0\r\n\r\n");
    }
}
