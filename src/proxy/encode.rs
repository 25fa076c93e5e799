//! An app's answer compressed as it streams (IIS dynamic compression, nginx `gzip` on
//! proxied answers, Caddy `encode`): which answers are, how their fields change, and the
//! relay that decodes the app's framing, compresses each read, and sends it chunked.
//!
//! An answer is compressed when its site offers a coding the client accepts, it has a body
//! (not HEAD, 204, 206, 304 or an upgrade), a compressible `Content-Type`, no
//! `Content-Encoding` of its own, no `Cache-Control: no-transform`, and no declared length
//! under [`MIN_LENGTH`]. Then `Content-Length` goes (the length is not known before the end),
//! a strong `ETag` becomes weak (the bytes differ from the app's; RFC 9110 §8.8.1),
//! `Accept-Ranges` goes, and `Vary: Accept-Encoding` is added — also to the answers of such a
//! site that could have been compressed for another client.
//!
//! Memory: one encoder per answer (a 256 KiB window, see [`crate::compress`]) and the relay's
//! buffer; each read from the app is compressed and flushed before the next, so a client
//! sees a slow stream (server-sent events) as it comes. At most [`MAX_COMPRESSING`] answers
//! of a thread are compressed at once (counted by `compress::live_streams`); others go as
//! they are.
//!
//! Owns: that decision and relay. Must not touch: the rest of the answer's head (the
//! forwarders write it) or which coding the client gets ([`crate::http::coding`]).

use super::wire::{read_timeout, to_client, BodyKind};
use crate::compress::{Coding, Stream};
use crate::http::access_log::Report;
use crate::http::ChunkedDecoder;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// A declared length below this is sent as it is.
pub const MIN_LENGTH: u64 = 256;

/// Answers a thread compresses at once, at most; past it an answer goes as it is (with
/// `Vary`). Each holds its encoder (about 0.5 MiB), and a stream a client never reads (an
/// HTTP/2 window left at zero) holds it as long as the client likes: 15 connections of 128
/// such streams once held 655 MiB. The bound caps a thread at about 32 MiB of encoders.
pub const MAX_COMPRESSING: usize = 64;

/// What a site's compression makes of one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// The site compresses nothing, or the answer is not compressible: as it is.
    AsIs,
    /// Compressible, but this client accepts none of the site's codings: as it is, with
    /// `Vary: Accept-Encoding`.
    Vary,
    /// Compressed in this coding.
    Compress(Coding),
}

/// The plan for an answer of `status` whose fields are `fields`, for a request that got
/// `offered` (`None`: the site compresses nothing; `Some(None)`: the client accepts none of
/// its codings).
pub fn plan<'h>(
    offered: Option<Option<Coding>>,
    status: u16,
    head_only: bool,
    fields: impl Iterator<Item = (&'h str, &'h [u8])> + Clone,
) -> Plan {
    let Some(coding) = offered else {
        return Plan::AsIs;
    };
    if head_only || matches!(status, 100..=199 | 204 | 206 | 304) {
        return Plan::AsIs;
    }
    let field = |name: &str| {
        fields
            .clone()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    };
    let compressible = field("content-type").is_some_and(crate::http::coding::compressible);
    let encoded =
        field("content-encoding").is_some_and(|v| !v.trim().eq_ignore_ascii_case("identity"));
    let no_transform = fields.clone().any(|(n, v)| {
        n.eq_ignore_ascii_case("cache-control")
            && String::from_utf8_lossy(v)
                .split(',')
                .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
    });
    let short = field("content-length")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n < MIN_LENGTH);
    if !compressible || encoded || no_transform || short {
        return Plan::AsIs;
    }
    match coding {
        Some(c) if crate::compress::live_streams() < MAX_COMPRESSING => Plan::Compress(c),
        _ => Plan::Vary,
    }
}

/// What happens to one of the app's fields when its answer is compressed: `None` drops it,
/// else its new value (a weak `ETag`, `Vary` with `Accept-Encoding`).
pub fn rewritten(name: &str, value: &[u8]) -> Option<Vec<u8>> {
    if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("accept-ranges") {
        return None;
    }
    if name.eq_ignore_ascii_case("etag") && value.starts_with(b"\"") {
        let mut weak = b"W/".to_vec();
        weak.extend_from_slice(value);
        return Some(weak);
    }
    if name.eq_ignore_ascii_case("vary") {
        return Some(with_accept_encoding(value));
    }
    Some(value.to_vec())
}

/// A `Vary` value that names `Accept-Encoding` (added unless it is there, or `*`).
pub fn with_accept_encoding(value: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(value);
    if text
        .split(',')
        .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept-encoding"))
    {
        return value.to_vec();
    }
    let mut v = value.to_vec();
    if !text.trim().is_empty() {
        v.extend_from_slice(b", ");
    }
    v.extend_from_slice(b"Accept-Encoding");
    v
}

/// Sends `data` to the client as one chunk (or as it is, for a close-delimited answer).
async fn send<C: AsyncWrite + Unpin>(
    client: &mut C,
    report: &Report,
    data: &[u8],
    chunked: bool,
    timeout: Duration,
) -> Result<(), ()> {
    if data.is_empty() {
        return Ok(());
    }
    if chunked {
        let mut framed = Vec::with_capacity(data.len() + 12);
        framed.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        framed.extend_from_slice(data);
        framed.extend_from_slice(b"\r\n");
        to_client(client, report, &framed, timeout).await
    } else {
        to_client(client, report, data, timeout).await
    }
    .map_err(|_| ())
}

/// Relays the app's body (framed as `kind`, its start in `pending`) compressed in `coding`,
/// chunked to the client (or close-delimited when `chunked` is false). `Ok(clean)`: the body
/// ended where its framing said, nothing after it (the app connection may be reused).
#[allow(clippy::too_many_arguments)]
pub async fn relay<R: AsyncRead + Unpin, C: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut R,
    client: &mut C,
    report: &Report,
    mut pending: Vec<u8>,
    kind: BodyKind,
    mut encoder: Stream,
    chunked: bool,
    (upstream_timeout, client_timeout): (Duration, Duration),
) -> Result<bool, ()> {
    let mut decoder =
        (kind == BodyKind::Chunked).then(|| ChunkedDecoder::with_bounds(u64::MAX, 64 << 10));
    let mut left = match kind {
        BodyKind::Length(n) => Some(n),
        _ => None,
    };
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let (data, consumed, done) = match (&mut decoder, &mut left) {
            (Some(d), _) => {
                let got = d.decode(&mut pending).map_err(|_| ())?;
                (got.produced, got.consumed, got.done)
            }
            (None, Some(l)) => {
                let take = (*l).min(pending.len() as u64) as usize;
                *l -= take as u64;
                (take, take, *l == 0)
            }
            (None, None) => (pending.len(), pending.len(), kind == BodyKind::None),
        };
        if data > 0 {
            encoder.push(&pending[..data]).map_err(|_| ())?;
            send(client, report, &encoder.take(), chunked, client_timeout).await?;
        }
        let extra = consumed < pending.len();
        pending.drain(..consumed);
        let ended = if done {
            true
        } else {
            match read_timeout(conn, &mut buf, upstream_timeout).await {
                Ok(0) if left.is_none() && decoder.is_none() => true,
                Ok(0) | Err(_) => return Err(()),
                Ok(n) => {
                    pending.extend_from_slice(&buf[..n]);
                    false
                }
            }
        };
        if ended {
            let tail = encoder.finish().map_err(|_| ())?;
            send(client, report, &tail, chunked, client_timeout).await?;
            if chunked {
                to_client(client, report, b"0\r\n\r\n", client_timeout)
                    .await
                    .map_err(|_| ())?;
            }
            return Ok(done && !extra && pending.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(list: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static [u8])> {
        list.iter().map(|(n, v)| (*n, v.as_bytes())).collect()
    }

    #[test]
    fn past_the_threads_bound_answers_go_as_they_are() {
        let html = fields(&[("Content-Type", "text/html")]);
        let p = || plan(Some(Some(Coding::Gzip)), 200, false, html.iter().copied());
        let mut live = Vec::new();
        while crate::compress::live_streams() < MAX_COMPRESSING {
            assert_eq!(p(), Plan::Compress(Coding::Gzip));
            live.push(Stream::new(Coding::Gzip).unwrap());
        }
        assert_eq!(p(), Plan::Vary);
        live.pop();
        assert_eq!(p(), Plan::Compress(Coding::Gzip));
    }

    #[test]
    fn only_compressible_bodies_without_a_coding_of_their_own_are_compressed() {
        let html = fields(&[("Content-Type", "text/html; charset=utf-8")]);
        let p = |offered, status, head_only, f: &[(&'static str, &'static [u8])]| {
            plan(offered, status, head_only, f.iter().copied())
        };
        assert_eq!(
            p(Some(Some(Coding::Brotli)), 200, false, &html),
            Plan::Compress(Coding::Brotli)
        );
        assert_eq!(p(Some(None), 200, false, &html), Plan::Vary);
        assert_eq!(p(None, 200, false, &html), Plan::AsIs);
        assert_eq!(
            p(Some(Some(Coding::Gzip)), 200, true, &html),
            Plan::AsIs,
            "HEAD"
        );
        assert_eq!(p(Some(Some(Coding::Gzip)), 206, false, &html), Plan::AsIs);
        assert_eq!(p(Some(Some(Coding::Gzip)), 304, false, &html), Plan::AsIs);
        let png = fields(&[("Content-Type", "image/png")]);
        assert_eq!(p(Some(Some(Coding::Gzip)), 200, false, &png), Plan::AsIs);
        let encoded = fields(&[("Content-Type", "text/html"), ("Content-Encoding", "gzip")]);
        assert_eq!(
            p(Some(Some(Coding::Gzip)), 200, false, &encoded),
            Plan::AsIs
        );
        let kept = fields(&[
            ("Content-Type", "text/html"),
            ("Cache-Control", "public, No-Transform"),
        ]);
        assert_eq!(p(Some(Some(Coding::Gzip)), 200, false, &kept), Plan::AsIs);
        let short = fields(&[("Content-Type", "text/html"), ("Content-Length", "12")]);
        assert_eq!(p(Some(Some(Coding::Gzip)), 200, false, &short), Plan::AsIs);
    }

    #[test]
    fn a_compressed_answers_fields_say_so() {
        assert_eq!(rewritten("Content-Length", b"10"), None);
        assert_eq!(rewritten("ETag", b"\"v1\""), Some(b"W/\"v1\"".to_vec()));
        assert_eq!(rewritten("ETag", b"W/\"v1\""), Some(b"W/\"v1\"".to_vec()));
        assert_eq!(
            rewritten("Vary", b"Cookie"),
            Some(b"Cookie, Accept-Encoding".to_vec())
        );
        assert_eq!(
            rewritten("vary", b"accept-encoding"),
            Some(b"accept-encoding".to_vec())
        );
        assert_eq!(rewritten("X-App", b"1"), Some(b"1".to_vec()));
    }
}
