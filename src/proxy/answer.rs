//! An app's answer head as forwarding takes it: parsed (the app side's HTTP/1.1 codec, with
//! [`body_kind`]'s framing rules), the client's head made from it through the response steps
//! ([`super::head`]), how its body is to be relayed ([`Relay`]) and whether the route's
//! response cache may keep it ([`super::cache`]'s rules) — for the forwarder, the gRPC
//! stream forwarder and the response cache alike.
//!
//! Owns: that reading and the relay's plan. Must not touch: the connections (the forwarder's)
//! or the body's bytes.

use super::cache::{Keep, Use, Validators};
use super::encode;
use super::head::{client_framing, Head, Then, ToClient};
use super::request::{connection_tokens, ForwardRequest};
use super::route::ProxyRoute;
use super::spool;
use super::wire::{kept_fields, BodyKind, Fail, Instead, OwnAnswers};
use super::Endpoint;
use crate::features::head::ClientHead;
use std::time::SystemTime;

/// The app's response head `head` parsed, and the client's head made from it with how the
/// body is to be relayed — and, when it comes `from_app` (not from the response cache), what
/// of it may be kept. A function of its own, not a part of `forward`: the parser's field
/// array (3 KiB) lives on this stack frame, not in the forwarding future that is moved into
/// its box on every lent request.
pub(super) fn answer_head(
    (head, from_app): (&[u8], bool),
    endpoint: &Endpoint,
    req: &ForwardRequest,
    route: &ProxyRoute,
    own: &OwnAnswers<'_>,
) -> Result<(ClientHead, Relay), Instead> {
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut fields);
    let answer = match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => answer_of(&resp, req),
        _ => Err("answered a response head that does not parse"),
    }
    .map_err(|cause| Instead::Fail(Fail::app(502, endpoint, cause)))?;
    own.report.status.set(answer.status);
    if own.replaces(answer.status) {
        let kept = kept_fields(resp.headers.iter().map(|h| (h.name, h.value)));
        return Err(Instead::Page(answer.status, kept));
    }
    let sticky_line = route.sticky_line(endpoint, &req.choose);
    let (out, mut relay) =
        client_head(&answer, resp.headers, req, own, sticky_line).map_err(Instead::Status)?;
    // Looked for only where answers are buffered: a site without costs nothing.
    relay.streams = route.buffer(req.buffered).is_some()
        && spool::streams(resp.headers.iter().map(|h| (h.name, h.value)));
    if from_app && req.cache.is_some() {
        let fields = resp.headers.iter().map(|h| (h.name, h.value));
        let framed = !req.head_only && answer.kind != BodyKind::UntilClose;
        relay.keep = keeping(route, req.cache.as_ref(), (answer.status, framed), fields);
    }
    Ok((out, relay))
}

/// What an app's response head says, as forwarding needs it.
struct Answer<'h> {
    status: u16,
    reason: &'h str,
    /// The tokens of its `Connection` fields.
    listed: Vec<&'h str>,
    kind: BodyKind,
    /// The app closes its connection after this answer.
    upstream_closes: bool,
    /// A `101` to a request that asked for an upgrade: the connection becomes a tunnel.
    switching: bool,
}

/// What the parsed head `resp` says for `req`, or why it cannot be relayed.
fn answer_of<'h>(
    resp: &httparse::Response<'_, 'h>,
    req: &ForwardRequest,
) -> Result<Answer<'h>, &'static str> {
    let status = resp.code.unwrap_or(502);
    if !(100..=599).contains(&status) {
        return Err("answered a status outside 100–599");
    }
    let listed = connection_tokens(resp.headers.iter().map(|h| (h.name, h.value)));
    let upstream_closes =
        listed.iter().any(|t| t.eq_ignore_ascii_case("close")) || resp.version == Some(0);
    let Some(kind) = body_kind(status, req.head_only, resp.headers) else {
        return Err("answered with a framing that cannot be relayed (Content-Length and Transfer-Encoding disagree or are malformed)");
    };
    if status == 101 && !req.upgrade {
        return Err("switched protocols (101) on a request that asked for no upgrade");
    }
    Ok(Answer {
        status,
        listed,
        reason: resp.reason.unwrap_or(""),
        kind,
        upstream_closes,
        switching: status == 101,
    })
}

/// How an answer is kept by the response cache, and its validators.
pub(super) type Keeping = (Keep, Validators);

/// How the body is relayed once the client's head is written.
pub(super) struct Relay {
    pub(super) kind: BodyKind,
    pub(super) upstream_closes: bool,
    pub(super) to_client: ToClient,
    pub(super) then: Then,
    /// Its encoder, when it is compressed.
    pub(super) encoder: Option<crate::compress::Stream>,
    /// It streams by nature and is never buffered (see [`spool::streams`]).
    pub(super) streams: bool,
    /// It may be kept by the route's response cache, so (see [`super::cached`]).
    pub(super) keep: Option<Keeping>,
}

/// The client's head for `answer` (with the app's `fields`), through the response steps
/// ([`Head`]), and how its body is to be relayed; `Err` with the status to answer instead.
fn client_head(
    answer: &Answer<'_>,
    fields: &[httparse::Header<'_>],
    req: &ForwardRequest,
    own: &OwnAnswers<'_>,
    sticky_line: Option<String>,
) -> Result<(ClientHead, Relay), u16> {
    let plan = encode::plan(
        req.compress,
        answer.status,
        req.head_only,
        fields.iter().map(|h| (h.name, h.value)),
    );
    // The encoder is made with the plan, not after the head is sent: it is what counts
    // toward the thread's bound on answers being compressed (see `encode::MAX_COMPRESSING`).
    let encoder = match plan {
        encode::Plan::Compress(c) if answer.kind != BodyKind::None => {
            Some(crate::compress::Stream::new(c).map_err(|_| 500u16)?)
        }
        _ => None,
    };
    let (to_client, then) = client_framing(
        (answer.kind, answer.switching),
        req,
        fields,
        encoder.is_some(),
    );
    let head = Head {
        status: answer.status,
        reason: answer.reason,
        client_minor: req.client_minor,
        plan,
        compressing: encoder.is_some(),
        to_client,
        then,
        listed: Some(&answer.listed),
    };
    let mut out = head.for_client(fields, own);
    if let Some(line) = sticky_line {
        // Before the blank line that ends the head.
        out.add_lines(line.as_bytes());
    }
    let relay = Relay {
        kind: answer.kind,
        upstream_closes: answer.upstream_closes,
        to_client: head.to_client,
        then,
        encoder,
        streams: false,
        keep: None,
    };
    Ok((out, relay))
}

/// What may be kept of the app's answer with `status` and `fields` to the request the cache
/// sees as `asked` (`framed`: a body whose end can be told, to a request not `HEAD`): how,
/// and its validators. An unsafe method's answer below 400 takes its URL's kept answers out
/// here.
pub(super) fn keeping<'a>(
    route: &ProxyRoute,
    asked: Option<&super::cache::CacheRequest>,
    (status, framed): (u16, bool),
    fields: impl Iterator<Item = (&'a str, &'a [u8])> + Clone,
) -> Option<Keeping> {
    let (store, asked) = (route.cache.as_ref()?, asked?);
    match asked.use_ {
        Use::Invalidate if status < 400 => {
            store.invalidate(asked);
            return None;
        }
        Use::Read | Use::Refresh if framed => {}
        _ => return None,
    }
    kept_as(status, fields)
}

/// How an answer with `status` and `fields` is kept, if it may be, and its validators.
fn kept_as<'a>(
    status: u16,
    fields: impl Iterator<Item = (&'a str, &'a [u8])> + Clone,
) -> Option<(Keep, Validators)> {
    let keep = super::cache::keep(status, fields.clone(), SystemTime::now())?;
    let field = |name: &str| {
        let mut all = fields.clone();
        all.find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let etag = field("etag").map(<[u8]>::to_vec);
    let modified = field("last-modified")
        .and_then(|v| httpdate::parse_http_date(std::str::from_utf8(v).ok()?.trim()).ok());
    Some((keep, (etag, modified)))
}

/// An answer the response cache asked for itself (to refresh a stale entry in the
/// background, `super::cache_refresh`), its head `head`: its status, framing, and how it is
/// kept if it may be.
pub(super) fn refreshed(head: &[u8]) -> Option<(u16, BodyKind, Option<Keeping>)> {
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut resp = httparse::Response::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = resp.parse(head) else {
        return None;
    };
    let status = resp.code?;
    let kind = body_kind(status, false, resp.headers)?;
    let keep = (kind != BodyKind::UntilClose)
        .then(|| kept_as(status, resp.headers.iter().map(|h| (h.name, h.value))))
        .flatten();
    Some((status, kind, keep))
}

/// How the app's response is framed (RFC 9112 §6.3); `None` when it cannot be told.
fn body_kind(status: u16, head_only: bool, fields: &[httparse::Header<'_>]) -> Option<BodyKind> {
    if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
        return Some(BodyKind::None);
    }
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut encodings = 0;
    for f in fields {
        if f.name.eq_ignore_ascii_case("transfer-encoding") {
            // Two lines are refused (502), as the request parser refuses them: read one way
            // here and another by the next hop, they would frame the body differently.
            encodings += 1;
            if encodings > 1 {
                return None;
            }
            let v = std::str::from_utf8(f.value).ok()?;
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if f.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = std::str::from_utf8(f.value).ok()?.trim().parse().ok()?;
            if length.is_some_and(|l| l != n) {
                return None;
            }
            length = Some(n);
        }
    }
    Some(match (chunked, length) {
        // An encoding that does not end in chunked: the body runs to the close.
        _ if encodings == 1 && !chunked => BodyKind::UntilClose,
        (true, _) => BodyKind::Chunked,
        (false, Some(n)) => BodyKind::Length(n),
        (false, None) => BodyKind::UntilClose,
    })
}

#[cfg(test)]
mod tests;
