//! What HTTP/2 and HTTP/3 share: a stream's request as the service sees it, the answer
//! espalier writes itself, and an application's HTTP/1.1 answer or a file's pieces carried
//! back onto a stream — written once for both, over [`StreamOut`], each protocol's way of
//! sending on one of its streams.
//!
//! Owns: [`request_of`], [`answer_here`], [`relay`], [`send_file`] and [`response_of`] (an
//! answer's indexed head as the stream's response: no text is parsed back). Must not
//! touch: a request lent to a forwarder (see [`super::stream_forward`]), the connections,
//! their limits and their streams' lives (see `h2` and `h3`), or routing and content (the
//! [`Service`]).

use super::access_log::{Entry, Facts};
use super::heads::AnswerHeads;
use super::service::{ConnEnv, FileBody, Reply, RequestCtx, Service};
use super::{Method, Request, Responder};
use crate::features::head::AnswerIndex;
use bytes::Bytes;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Pieces of a file or an application's answer.
const PIECE: usize = 64 << 10;

/// One stream's way back to its client: HTTP/2's (its flow-control windows waited for here)
/// or HTTP/3's (QUIC's, waited for inside its sends).
pub(crate) trait StreamOut {
    /// Sends the response head; `end` ends the stream with it.
    async fn head(&mut self, response: http::Response<()>, end: bool) -> Option<()>;
    /// Sends an informational (1xx) head; a failure shows at the next send.
    async fn informational(&mut self, response: http::Response<()>);
    /// Waits until the client takes at least one byte, and says how many, up to `want`; a
    /// client that takes none for `timeout` has its stream cut (`None`).
    async fn room(&mut self, want: usize, timeout: Duration) -> Option<usize>;
    /// Sends `data` (waiting for the client as needed, bounded by `timeout`); `end` ends
    /// the stream.
    async fn data(&mut self, data: Bytes, end: bool, timeout: Duration) -> Option<()>;
    /// Ends the stream as cut short (an answer shorter than it said, a file that shrank).
    fn cut(&mut self);
    /// Ends when the client resets (cancels) the stream: what was asked for it can stop.
    async fn reset(&mut self);
}

/// A stream's request as the service sees it (`http2` set: a multiplexed connection, never
/// handed to another pool), or the status refusing it.
pub(crate) fn request_of<'a>(
    parts: &'a http::request::Parts,
    headers: &'a mut Vec<httparse::Header<'a>>,
    body: &'a [u8],
    client: (&'a str, Option<std::net::SocketAddr>),
    max_headers: usize,
) -> Result<Request<'a>, u16> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // `:authority` stands for Host (RFC 9113 §8.3.1, RFC 9114 §4.3.1), checked as
    // HTTP/1.1's Host is; the one name goes on as `host`.
    let host = crate::http::h2_host(
        parts.uri.authority().map(|a| a.as_str().as_bytes()),
        parts
            .headers
            .get_all(http::header::HOST)
            .iter()
            .map(|v| v.as_bytes()),
    )?;
    if let Some(host) = host {
        headers.push(httparse::Header {
            name: "host",
            value: host,
        });
    }
    for (name, value) in &parts.headers {
        if name == http::header::HOST {
            continue;
        }
        headers.push(httparse::Header {
            name: name.as_str(),
            value: value.as_bytes(),
        });
    }
    // More fields than `max_headers`: 431, as HTTP/1.1's parser answers them.
    if headers.len() > max_headers {
        return Err(431);
    }
    if !path.starts_with('/') {
        return Err(400);
    }
    let method_text = parts.method.as_str();
    Ok(Request {
        method: Method::from_bytes(method_text),
        method_text,
        path,
        query,
        minor_version: 1,
        headers,
        body,
        client: client.0,
        client_ip: client.1.map(|a| a.ip()),
        http2: true,
    })
}

/// An answer espalier writes itself, as HTTP/1.1 (head and in-memory body) with its head's
/// index, the file whose pieces follow and whether the service refused to answer at all.
pub(crate) struct Written {
    pub(crate) out: Vec<u8>,
    /// Boxed, as `ClientHead`'s: a `Written` is held across the sends' awaits.
    pub(crate) index: Box<AnswerIndex>,
    pub(crate) file: Option<FileBody>,
    pub(crate) refused: bool,
}

/// Answers a request routed here (`ctx`): the service writes its answer, and the site's log
/// gets its line, the protocol written as `protocol` (see `access_log::HTTP2`).
pub(crate) fn answer_here<S: Service>(
    env: &ConnEnv<S>,
    group: usize,
    ctx: &RequestCtx,
    request: &Request<'_>,
    (arrived, client, protocol): (Instant, &str, u8),
) -> Written {
    let mut out = Vec::with_capacity(1024);
    let (reply, index) = {
        let common = env.clock.common();
        let head_only = request.method == Method::Head;
        let mut resp = Responder::new(&mut out, &common, true, 1, head_only);
        resp.index_fields(true);
        let reply = env.service.call(group, ctx, request, &mut resp);
        (reply, resp.into_index())
    };
    let refused = matches!(reply, Reply::Refuse);
    let file = match reply {
        Reply::File(f) => Some(f),
        Reply::Done | Reply::Refuse => None,
    };
    if ctx.logged {
        let mut req = Facts::of(request);
        req.minor_version = protocol;
        let file_len = file.as_ref().map_or(0, |f| f.len);
        let answer: &[u8] = if refused {
            crate::http::access_log::REFUSED
        } else {
            &out
        };
        let entry = Entry::answered(req, answer, file_len, Some(arrived), client);
        env.service.log(ctx, &entry);
    }
    Written {
        out,
        index,
        file,
        refused,
    }
}

/// espalier's own error answer for `status`, written as its handlers' are (`common`: the
/// thread's common lines).
pub(crate) fn own_error(common: &[u8], status: u16) -> Written {
    let mut out = Vec::with_capacity(256);
    let mut resp = Responder::new(&mut out, common, true, 1, false);
    resp.index_fields(true);
    resp.error(status);
    let index = resp.into_index();
    Written {
        out,
        index,
        file: None,
        refused: false,
    }
}

/// An answer espalier wrote (`out`, its head indexed by `index`) as a stream's response —
/// its status, and its fields but those the protocol forbids, their values sharing `out`'s
/// bytes (no copy per field, and no text read back) — with where its body starts. `None`
/// when no whole head was written, or a field is not one HTTP/2 can carry.
pub(crate) fn response_of(out: &Bytes, index: &AnswerIndex) -> Option<(http::Response<()>, usize)> {
    let head = index.head()?;
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(index.status()).ok()?;
    let fields = response.headers_mut();
    for (name, value) in index.fields() {
        let name = &out[name];
        if connection_specific(name) {
            continue;
        }
        let name = http::HeaderName::from_bytes(name).ok()?;
        let value = http::HeaderValue::from_maybe_shared(out.slice(value)).ok()?;
        fields.append(name, value);
    }
    Some((response, head.end))
}

/// The forwarder's side of a stream's pipe (`stream`, the body's start in `rbuf`; the
/// answer's heads sent to `heads`), bounded as the request's path says: what a stream lends
/// its app through, over HTTP/2 and HTTP/3.
pub(crate) fn lent_connection<'a, C, S>(
    (stream, heads): (&'a mut C, &'a super::heads::AnswerHeads),
    rbuf: &'a mut Vec<u8>,
    env: &'a ConnEnv<S>,
    ctx: &'a RequestCtx,
    report: &'a super::access_log::Report,
) -> super::service::LentConnection<'a, C> {
    super::service::LentConnection {
        stream,
        rbuf,
        clock: &env.clock,
        max_body: ctx.body_bound(env.limits.max_body_size),
        max_framing: env.limits.max_header_size,
        body_timeout: env.timeouts.body,
        report,
        response: ctx.response.as_deref(),
        heads: Some(heads),
    }
}

/// Header fields HTTP/2 and HTTP/3 forbid (RFC 9113 §8.2.2, RFC 9114 §4.2): dropped from
/// HTTP/1.1 answers.
fn connection_specific(name: &[u8]) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
}

/// Whether the client waits for `100 Continue` before sending its body.
pub(crate) fn expects_continue(parts: &http::request::Parts) -> bool {
    parts.headers.get(http::header::EXPECT).is_some_and(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"100-continue")
    })
}

/// The body's length as the client declared it (`content-length`), if it did; the status
/// refusing it, by HTTP/1.1's rule (one field, digits only): the h3 crate passes the field as
/// sent, and a `+5` or two values would frame the body otherwise than another server would.
pub(crate) fn declared_length(parts: &http::request::Parts) -> Result<Option<u64>, u16> {
    let mut values = parts.headers.get_all(http::header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(400);
    }
    match super::fields::content_length(first.as_bytes()) {
        Ok(n) => Ok(Some(n)),
        Err(super::fields::BadLength::Malformed) => Err(400),
        Err(super::fields::BadLength::TooLarge) => Err(413),
    }
}

/// Writes one piece of a body into the forwarder's pipe: as it is, or as a chunk.
pub(crate) async fn write_piece<W: tokio::io::AsyncWrite + Unpin>(
    to: &mut W,
    data: &[u8],
    chunked: bool,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    if !chunked {
        return to.write_all(data).await;
    }
    let mut size = [0u8; 18];
    let line = {
        use std::io::Write;
        let mut cursor = std::io::Cursor::new(&mut size[..]);
        let _ = write!(cursor, "{:x}\r\n", data.len());
        cursor.position() as usize
    };
    to.write_all(&size[..line]).await?;
    to.write_all(data).await?;
    to.write_all(b"\r\n").await
}

/// `100 Continue`, as an informational response.
pub(crate) fn continue_response() -> http::Response<()> {
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::CONTINUE;
    response
}

/// Sends the forwarder's answer on the stream: its heads as they come from `heads` —
/// interim ones skipped but 100 Continue, sent on as an informational response — made a
/// response from their index, then its body read from the pipe `from`, the framing
/// (length, chunked or close) undone. For a WebSocket's request (`tunnel`), the app's `101`
/// is the stream's `200` and what follows it the tunnel's bytes, relayed until the app ends
/// them (see [`super::websocket`]).
pub(crate) async fn relay<R: AsyncRead + Unpin, O: StreamOut>(
    (heads, from): (&AnswerHeads, &mut R),
    out: &mut O,
    (head_only, tunnel): (bool, bool),
    timeout: Duration,
) -> Option<()> {
    let head = loop {
        // A client that cancels its stream while the app thinks ends the wait (and, in the
        // caller, the app's exchange), as an HTTP/1.1 client's close does.
        let head = tokio::select! {
            head = tokio::time::timeout(timeout, heads.recv()) => head.ok()??,
            () = out.reset() => return None,
        };
        match head.index.as_ref().map_or(0, |i| i.status()) {
            status if (100..200).contains(&status) && !(tunnel && status == 101) => {
                // The forwarder's 100 Continue to a client that waits for it; the others
                // (an app's interim answers are the forwarder's to drop) are skipped.
                if status == 100 {
                    out.informational(continue_response()).await;
                }
            }
            _ => break head,
        }
    };
    let text = Bytes::from(head.text);
    let index = head.index?;
    let (mut response, _) = response_of(&text, &index)?;
    let (length, mut chunked) = index.framing(&text);
    let mut length =
        length.and_then(|value| std::str::from_utf8(value).ok()?.trim().parse::<u64>().ok());
    if tunnel {
        match super::websocket::answer(&mut response) {
            // The tunnel's bytes, until the app's close.
            super::websocket::Answered::Opened => (length, chunked) = (None, false),
            super::websocket::Answered::Refused => {}
            // Its 502 ends the stream, and the app's page is nobody's: the exchange ends now
            // (its connection to the app closed) rather than wait on it.
            super::websocket::Answered::NotSwitched => {
                out.head(response, true).await;
                return None;
            }
        }
    }
    let status = response.status().as_u16();
    let no_body = head_only || status == 204 || status == 304 || length == Some(0);
    out.head(response, no_body).await?;
    if no_body {
        return Some(());
    }
    let mut buf = Vec::new();
    let mut decoder = chunked.then(|| crate::http::ChunkedDecoder::with_bounds(u64::MAX, 64 << 10));
    let mut left = length.filter(|_| !chunked);
    loop {
        // Nothing more is read from the app than the client takes: a client that does not
        // read stops the app's answer in the forwarder's pipe (bounded), and this stream
        // holds no buffer while it waits.
        if buf.is_empty() && read_within_room(from, &mut buf, out, timeout).await? == 0 {
            // The close ends a body framed by it; a shorter one is cut.
            if left.is_some_and(|l| l > 0) || decoder.is_some() {
                out.cut();
                return None;
            }
            out.data(Bytes::new(), true, timeout).await?;
            return Some(());
        }
        let (data, done) = match &mut decoder {
            Some(d) => {
                let got = d.decode(&mut buf).ok()?;
                (piece_of(&mut buf, got.produced, got.consumed), got.done)
            }
            None => {
                let take = left.map_or(buf.len(), |l| (l as usize).min(buf.len()));
                if let Some(l) = &mut left {
                    *l -= take as u64;
                }
                (piece_of(&mut buf, take, take), left == Some(0))
            }
        };
        out.data(data, done, timeout).await?;
        if done {
            return Some(());
        }
    }
}

/// The first `len` bytes of `buf` as a piece to send, `used` bytes of it spent. Where that
/// is all of it, the buffer itself becomes the piece (no copy) and `buf` is left with none:
/// a stream waiting for its client holds only the piece it waits to send.
fn piece_of(buf: &mut Vec<u8>, len: usize, used: usize) -> Bytes {
    if used == buf.len() {
        buf.truncate(len);
        return Bytes::from(std::mem::take(buf));
    }
    let piece = Bytes::copy_from_slice(&buf[..len]);
    buf.drain(..used);
    piece
}

/// Reads at most what the client takes now from `from` onto the empty `buf`, waiting for
/// room first, with no buffer held meanwhile; `None` on an error, a timeout or a stream the
/// client reset.
async fn read_within_room<R: AsyncRead + Unpin, O: StreamOut>(
    from: &mut R,
    buf: &mut Vec<u8>,
    out: &mut O,
    timeout: Duration,
) -> Option<usize> {
    let room = out.room(PIECE, timeout).await?;
    *buf = Vec::with_capacity(room);
    match tokio::time::timeout(timeout, from.read_buf(buf)).await {
        Ok(Ok(n)) => Some(n),
        _ => None,
    }
}

/// Sends a file's range in pieces, as the client takes them (see [`StreamOut::room`] for
/// `timeout`). A piece is read only once the client takes it: a stream waiting for a client
/// that does not read holds a file position, not bytes.
pub(crate) async fn send_file<O: StreamOut>(
    out: &mut O,
    f: FileBody,
    timeout: Duration,
) -> Option<()> {
    use std::os::unix::fs::FileExt;
    let mut offset = f.offset;
    let stop = f.offset + f.len;
    while offset < stop {
        let room = ((stop - offset) as usize).min(PIECE);
        let want = out.room(room, timeout).await?.min(room);
        let mut piece = vec![0u8; want];
        let n = f.file.read_at(&mut piece, offset).ok()?;
        if n == 0 {
            out.cut();
            return None;
        }
        piece.truncate(n);
        offset += n as u64;
        out.data(Bytes::from(piece), offset >= stop, timeout)
            .await?;
    }
    if f.len == 0 {
        out.data(Bytes::new(), true, timeout).await?;
    }
    Some(())
}
