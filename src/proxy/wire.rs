//! What the forwarders (HTTP and FastCGI) share on the wire: reads and writes with a time
//! limit, counted writes to the client, `100 Continue`, how an app frames its answer's body,
//! the answers espalier writes itself on a lent connection ([`OwnAnswers`]), and the one
//! error type every forwarder's failure ends in ([`Fail`]), which one place
//! ([`OwnAnswers::fail`], pingora's `fail_to_proxy`) logs and turns into the client's answer.
//!
//! Owns: those helpers. Must not touch: a request's forwarding (the forwarders own it).

use crate::features::head::ClientHead;
use crate::http::access_log::Report;
use crate::http::error_pages::KEPT_FIELDS;
use crate::http::heads::AnswerHeads;
use crate::http::response_chain::{ResponseChain, Whose};
use crate::http::service::Outcome;
use crate::http::Responder;
use std::borrow::Cow;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// A write to the client, counted for the access log.
pub(super) async fn to_client<C: AsyncWrite + Unpin>(
    stream: &mut C,
    report: &Report,
    buf: &[u8],
    timeout: Duration,
) -> io::Result<()> {
    write_timeout(stream, buf, timeout).await?;
    report.bytes.set(report.bytes.get() + buf.len() as u64);
    Ok(())
}

/// How the app frames its response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyKind {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// The client's head (`head.text`, perhaps with the start of the body after it) and `more`
/// of the body, counted for the access log: an HTTP/1.1 client's connection gets them as
/// text, in one write; a stream's relay (`own.heads`) gets the head structured, and the body
/// through the pipe.
pub(super) async fn head_to_client<C: AsyncWrite + Unpin>(
    stream: &mut C,
    own: &OwnAnswers<'_>,
    (mut head, more): (ClientHead, &[u8]),
    timeout: Duration,
) -> io::Result<()> {
    let Some(heads) = own.heads else {
        head.text.extend_from_slice(more);
        return to_client(stream, own.report, &head.text, timeout).await;
    };
    // An answer of espalier's own is written whole: its body is taken off its head.
    let body = match head.head_len() {
        len if len < head.text.len() => head.text.split_off(len),
        _ => Vec::new(),
    };
    let report = own.report;
    report
        .bytes
        .set(report.bytes.get() + head.text.len() as u64);
    heads.send(head);
    for part in [&body[..], more].into_iter().filter(|p| !p.is_empty()) {
        to_client(stream, report, part, timeout).await?;
    }
    Ok(())
}

/// `100 Continue` to a client that expects it, before its body is forwarded: the app never
/// sees `Expect` (a hop's business). False when the client is gone.
pub(super) async fn send_continue<C: AsyncWrite + Unpin>(
    stream: &mut C,
    own: &OwnAnswers<'_>,
    expected: bool,
    timeout: Duration,
) -> bool {
    let head = || ClientHead::bare(100, "Continue", own.heads.is_some());
    !expected
        || head_to_client(stream, own, (head(), &[]), timeout)
            .await
            .is_ok()
}

/// A write with a time limit, flushed.
pub(super) async fn write_timeout<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    buf: &[u8],
    d: Duration,
) -> io::Result<()> {
    // Flushed: over TLS, bytes may wait in the record layer (a no-op on a plain socket).
    let write = async {
        w.write_all(buf).await?;
        w.flush().await
    };
    match tokio::time::timeout(d, write).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// A read with a time limit.
pub(super) async fn read_timeout<R: AsyncReadExt + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    d: Duration,
) -> io::Result<usize> {
    match tokio::time::timeout(d, r.read(buf)).await {
        Ok(r) => r,
        Err(_) => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// The whole lines of an app's answer fields a page replacing it keeps (`Retry-After`, …).
pub(super) fn kept_fields<'h>(fields: impl Iterator<Item = (&'h str, &'h [u8])>) -> Vec<u8> {
    let mut kept = Vec::new();
    for (name, value) in fields {
        if KEPT_FIELDS.iter().any(|k| k.eq_ignore_ascii_case(name)) {
            kept.extend_from_slice(name.as_bytes());
            kept.extend_from_slice(b": ");
            kept.extend_from_slice(value);
            kept.extend_from_slice(b"\r\n");
        }
    }
    kept
}

/// Why a forwarded request got no answer from its app. Every forwarder's step ends in it, and
/// [`OwnAnswers::fail`] alone logs it and answers the client.
pub(super) enum Fail {
    /// No server could be connected to: this status, and why when it is worth a log line
    /// (`None` for a pool's 503 — none ready, or its queue full: the queue's to say).
    Unconnected(u16, Option<String>),
    /// The app at this endpoint failed the request: answered with the status, logged with
    /// the cause (504 also counts toward the endpoint's silence).
    App(u16, super::Endpoint, Cow<'static, str>),
    /// The client's request cannot go on (a body too large or badly framed, a body FastCGI
    /// cannot take): this status, nothing logged.
    Client(u16),
    /// Nothing can be answered: the client is gone, or an answer is under way.
    Close,
}

impl Fail {
    /// The app at `endpoint` failed with `status`, for `cause`.
    pub fn app(
        status: u16,
        endpoint: &super::Endpoint,
        cause: impl Into<Cow<'static, str>>,
    ) -> Fail {
        Fail::App(status, endpoint.clone(), cause.into())
    }
}

/// What the client gets in place of an app's answer whose head was read.
pub(super) enum Instead {
    /// The forwarder failed ([`OwnAnswers::fail`]).
    Fail(Fail),
    /// The site's page for the app's error status, with these field lines of the app's.
    Page(u16, Vec<u8>),
    /// This status of espalier's own.
    Status(u16),
}

/// What espalier answers itself on a lent connection (the app down, late, or refused a
/// body): the site's page for the status if it has one, else the status's text, with the
/// site's field edits — as its other answers.
pub(super) struct OwnAnswers<'a> {
    pub report: &'a Report,
    pub clock: &'a crate::http::clock::Clock,
    pub client_minor: u8,
    pub head_only: bool,
    /// The response chain of the request's site and path.
    pub response: Option<&'a ResponseChain>,
    /// A stream's: where the answer's heads go (see [`head_to_client`]).
    pub heads: Option<&'a AnswerHeads>,
}

impl OwnAnswers<'_> {
    /// Answers `status` and closes.
    pub async fn answer<C: AsyncWrite + Unpin>(&self, stream: &mut C, status: u16) -> Outcome {
        self.replace(stream, status, &[]).await
    }

    /// [`Self::answer`] for no connection to the app: a 503 (none ready, or the queue full)
    /// says when to try again.
    pub async fn unavailable<C: AsyncWrite + Unpin>(&self, stream: &mut C, status: u16) -> Outcome {
        let kept: &[u8] = if status == 503 {
            b"Retry-After: 1\r\n"
        } else {
            b""
        };
        self.replace(stream, status, kept).await
    }

    /// Answers `status` with `kept` field lines of the answer it replaces, and closes.
    pub async fn replace<C: AsyncWrite + Unpin>(
        &self,
        stream: &mut C,
        status: u16,
        kept: &[u8],
    ) -> Outcome {
        self.report.status.set(status);
        let mut text = Vec::with_capacity(256);
        let (head_len, index) = {
            // Borrowed and let go before the write: the clock's own task refreshes the lines.
            let common = self.clock.common();
            let mut resp =
                Responder::new(&mut text, &common, false, self.client_minor, self.head_only);
            resp.index_fields(self.response.is_some() || self.heads.is_some());
            resp.error_keeping(status, kept);
            resp.response_steps(0, self.response, Whose::Own);
            (resp.head_end(), self.heads.map(|_| resp.into_index()))
        };
        let head = ClientHead::new(text, head_len, index);
        self.report.head.set(head.head_len() as u64);
        let _ = head_to_client(stream, self, (head, &[]), Duration::from_secs(5)).await;
        Outcome::Close
    }

    /// The client's answer for a forwarder's failure, logged where it is the app's.
    pub async fn fail<C: AsyncWrite + Unpin>(
        &self,
        stream: &mut C,
        route: &super::ProxyRoute,
        fail: Fail,
    ) -> Outcome {
        match fail {
            Fail::Unconnected(status, cause) => {
                if let Some(cause) = cause {
                    route.log_failure(None, status, &cause);
                }
                self.unavailable(stream, status).await
            }
            Fail::App(status, endpoint, cause) => {
                route.failed(&endpoint, status, &cause);
                route.log_failure(Some(&endpoint), status, &cause);
                self.answer(stream, status).await
            }
            Fail::Client(status) => self.answer(stream, status).await,
            Fail::Close => Outcome::Close,
        }
    }

    /// The client's answer in place of an app's.
    pub async fn instead<C: AsyncWrite + Unpin>(
        &self,
        stream: &mut C,
        route: &super::ProxyRoute,
        instead: Instead,
    ) -> Outcome {
        match instead {
            Instead::Fail(fail) => self.fail(stream, route, fail).await,
            Instead::Page(status, kept) => self.replace(stream, status, &kept).await,
            Instead::Status(status) => self.answer(stream, status).await,
        }
    }

    /// Whether an app's own answer with `status` is to be replaced by the site's page.
    pub fn replaces(&self, status: u16) -> bool {
        status >= 400
            && (self.response.and_then(ResponseChain::pages))
                .is_some_and(|p| p.replace_app_errors && p.get(status).is_some())
    }
}
