//! `transport = "fastcgi"`: the request forwarded to an app process (php-fpm, php-cgi) in
//! FastCGI records, its CGI answer turned back into an HTTP response — IIS's FastCGI module,
//! and nginx's `fastcgi_pass`.
//!
//! Owns: sending a request's records ([`super::cgi`] built them) and its body, and reading a
//! CGI response (`Status:`, `Location:`) back into HTTP. Must not touch: which
//! process answers or the client connection's loop (shared with [`super::forward`](mod@super::forward)).
//!
//! The record layer is written here rather than taken from the `fastcgi-client` crate: CGI
//! variables must carry a header's raw bytes (that crate's `Params` holds `str`), the body
//! must stream both ways through fixed buffers, and its buffered keep-alive call keeps only
//! the last STDOUT record of an answer (read in its source, 0.11). The protocol is eight-byte
//! headers and length-prefixed pairs (FastCGI 1.0 spec, §3–§5).
//!
//! FastCGI needs `CONTENT_LENGTH` in the records sent before the body. Where answers are
//! buffered (`buffer`, a FastCGI pool's default), a body is read whole before a child is
//! asked — a chunked one too, which then gets its length (as nginx does since 1.3.9) — and
//! the answer's records are read by [`super::fastcgi_records::fill`] at the child's speed.
//! With `buffer = false`, a chunked body is answered `411 Length Required`.
use super::cached;
use super::cgi::*;
use super::cgi_answer::{cgi_status, read_cgi_head, status_of};
use super::encode;
use super::fastcgi_cached;
use super::fastcgi_records::{fill, read_record, send_stdin, Record, Stdout};
use super::forward::{LentConnection, Outcome};
use super::head::{Head, Then, ToClient};
use super::request_body::take_body;
use super::route::ProxyRoute;
use super::spool::{self, Spool};
use super::upstream::Conn;
use super::wire::{
    head_to_client, kept_fields, send_continue, to_client, write_timeout, Fail, Instead, OwnAnswers,
};
use super::Endpoint;
use crate::compress::Stream;
use crate::features::head::ClientHead;
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// A FastCGI request sent whole, the first record of its answer read.
struct Asked {
    endpoint: Endpoint,
    conn: Conn,
    first: Record,
    /// What the request holds at its server (its share, its slot or its count in flight),
    /// until the answer is read.
    slot: super::route::Held,
}

/// Forwards a request to a FastCGI app process and relays its answer, in named steps as
/// [`super::forward`](mod@super::forward)'s: connect (with one retry) and send ([`ask`]); read and parse the CGI
/// header block; write the client's head ([`super::head`], the same writer as an HTTP
/// app's); relay the STDOUT records. Every failure is a [`Fail`] that one place answers.
pub async fn forward<C: AsyncRead + AsyncWrite + Unpin>(
    client: LentConnection<'_, C>,
    mut req: FastCgiRequest,
    route: &std::rc::Rc<ProxyRoute>,
) -> Outcome {
    let LentConnection {
        stream,
        rbuf,
        clock,
        max_body,
        max_framing,
        body_timeout,
        report,
        response,
        heads,
    } = client;
    let own = OwnAnswers {
        report,
        clock,
        client_minor: req.client_minor,
        head_only: req.head_only,
        response,
        heads,
    };
    let buffer = route.buffer(req.buffered);
    // A chunked body's length is known only once it is read whole, which buffering does.
    if req.chunked && buffer.is_none() {
        return own.fail(stream, route, Fail::Client(411)).await;
    }
    if !send_continue(stream, &own, req.expect_continue, body_timeout).await {
        return Outcome::Close;
    }
    // The route's response cache, as for an HTTP app (boxed: see `super::forward`'s).
    let view = fastcgi_cached::client_side(&mut req);
    let mut asking = cached::Asking::default();
    if let Some(view) = &view {
        let again = || fastcgi_cached::again(&req, view);
        let answering = Box::pin(cached::answer(
            stream,
            (view, again),
            route,
            &own,
            body_timeout,
        ));
        match answering.await {
            Ok(outcome) => return outcome,
            Err(how) => asking = how,
        }
    }
    let req = fastcgi_cached::ask_if_changed(req, view.as_ref(), &mut asking);
    // Where answers are buffered, so is the body: read whole before a child is asked.
    let taken = match buffer.filter(|_| req.body_len > 0 || req.chunked) {
        Some(b) => {
            let framing = match req.chunked {
                true => crate::http::Framing::Chunked,
                false => crate::http::Framing::Length(req.body_len),
            };
            let bounds = (max_body, max_framing);
            match take_body(
                stream,
                rbuf,
                framing,
                (b.request, b.disk),
                bounds,
                body_timeout,
            )
            .await
            {
                Ok(spool) => Some(spool),
                Err(fail) => return own.fail(stream, route, fail).await,
            }
        }
        None => None,
    };
    let req = match (&taken, req.chunked) {
        (Some(body), true) => req.with_length(body.bytes_held()),
        _ => req,
    };
    let asked = ask(
        stream,
        rbuf,
        &req,
        route,
        (body_timeout, taken.as_ref()),
        report,
    );
    let asked = match asked.await {
        Ok(asked) => asked,
        Err(fail) => {
            let kept = (&asking, view.as_ref(), &**route, &own);
            let stale = fastcgi_cached::stale_instead((stream, body_timeout), None, kept);
            if let Some(outcome) = Box::pin(stale).await {
                return outcome;
            }
            return own.fail(stream, route, fail).await;
        }
    };
    let Asked {
        endpoint,
        mut conn,
        first,
        slot,
    } = asked;
    let timeout = route.settings().response_timeout;
    let head = read_cgi_head(&mut conn, first, timeout, &endpoint).await;
    let (head, head_len) = match head {
        Ok(h) => h,
        Err(status) => {
            let cause =
                "ended or broke its answer before a whole CGI header block (or one over its bound)";
            return own
                .fail(stream, route, Fail::app(status, &endpoint, cause))
                .await;
        }
    };
    // On the site's page for the script's error, its body is left unread (the FastCGI
    // connection carries this request only: dropping it costs nothing more).
    let asked_cache = view.as_ref().and_then(|v| v.cache.as_ref());
    let answered = answer_head(&head, &endpoint, &req, &own, (route, asked_cache));
    // The stale answer kept standing in for the child's error (`stale-if-error`).
    if asking.has_stale() {
        let status = match &answered {
            Ok((_, relay)) => Some(relay.status),
            Err(Instead::Page(status, _)) => Some(*status),
            Err(_) => None,
        };
        let kept = (&asking, view.as_ref(), &**route, &own);
        let stale = fastcgi_cached::stale_instead((stream, body_timeout), status, kept);
        if let Some(outcome) = Box::pin(stale).await {
            return outcome;
        }
    }
    let (mut out, mut relay) = match answered {
        Ok(head) => head,
        Err(instead) => return own.instead(stream, route, instead).await,
    };
    let mut body = head[head_len..].to_vec();
    // An answer the route's cache may keep is read whole first (within its entry bound):
    // kept, then sent from memory; a longer one goes on as any.
    if let (Some((keeping, kept_head)), Some(view)) = (relay.keep.take(), &view) {
        let reading = (timeout, &endpoint);
        if Box::pin(super::cgi_answer::read_stdout_whole(
            &mut conn, &mut body, route, reading,
        ))
        .await
        {
            drop((conn, slot));
            let answer = (kept_head, body, endpoint);
            let kept = (view, &**route, &own);
            let to = (&mut *stream, body_timeout);
            return Box::pin(fastcgi_cached::keep_and_send(to, answer, keeping, kept)).await;
        }
    }
    if let Some(view) = &view {
        cached::mark(&mut out, view, &own, false);
    }
    report.head.set(out.head_len() as u64);
    let timeouts = (timeout, body_timeout);
    // The app's connection is not kept (nor asked to stay, see `cgi::BEGIN_REQUEST`): a
    // php-fpm child serves one connection at a time, so an idle kept connection holds a
    // child that another client is waiting for (nginx closes it too, without
    // `fastcgi_keep_conn`).
    match buffer.filter(|_| !relay.streams && relay.to_client != ToClient::NoBody) {
        Some(bounds) => {
            let spool = Spool::new(bounds.response, bounds.disk);
            let filling = fill(conn, endpoint, spool.clone(), slot, timeout);
            let mut source = Stdout::Spooled(spool.reader());
            let relaying = relay.records(out, body, &mut source, stream, &own, timeouts);
            spool::alongside(relaying, filling).await
        }
        None => {
            let mut source = Stdout::App(&mut conn, &endpoint);
            let outcome = relay
                .records(out, body, &mut source, stream, &own, timeouts)
                .await;
            drop((conn, slot));
            outcome
        }
    }
}

/// Connects to an app process (another, once, when a retryable request's connection failed
/// before any answer), sends the request's records and body, and reads the first record of
/// the answer.
async fn ask<C: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut C,
    rbuf: &mut Vec<u8>,
    req: &FastCgiRequest,
    route: &ProxyRoute,
    (body_timeout, taken): (Duration, Option<&Spool>),
    report: &crate::http::access_log::Report,
) -> Result<Asked, Fail> {
    let timeout = route.settings().response_timeout;
    let mut avoid = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let (endpoint, mut conn, slot) = route
            .connection(avoid.take(), &Default::default())
            .await
            .map_err(|(status, cause)| Fail::Unconnected(status, cause))?;
        if write_timeout(&mut conn, &req.records, timeout)
            .await
            .is_err()
        {
            if req.retryable && tries < 2 {
                avoid = Some(endpoint);
                continue;
            }
            return Err(Fail::app(
                502,
                &endpoint,
                "did not take the FastCGI request",
            ));
        }
        let timeouts = (body_timeout, timeout);
        match taken {
            // The body read whole before (the spool holds exactly its bytes).
            Some(spool) => {
                let (reader, none) = (&mut spool.reader(), &mut Vec::new());
                send_stdin(reader, none, &mut conn, req.body_len, timeouts, &endpoint).await?
            }
            None => send_stdin(stream, rbuf, &mut conn, req.body_len, timeouts, &endpoint).await?,
        }
        let asked = std::time::Instant::now();
        match read_record(&mut conn, timeout).await {
            Ok(first) => {
                route.answered(&endpoint, report, asked, &[]);
                return Ok(Asked {
                    endpoint,
                    conn,
                    first,
                    slot,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && req.retryable && tries < 2 => {
                avoid = Some(endpoint);
            }
            Err(e) => {
                let cause = format!("did not answer ({e})");
                return Err(Fail::app(status_of(e), &endpoint, cause));
            }
        }
    }
}

/// The script's CGI header block in `head` parsed, and the client's head made from it with
/// how the body is to be relayed. A function of its own, not a part of [`forward`]: the
/// parser's field array (3 KiB) lives on this stack frame, not in the forwarding future.
fn answer_head(
    head: &[u8],
    endpoint: &Endpoint,
    req: &FastCgiRequest,
    own: &OwnAnswers<'_>,
    (route, asked): (&ProxyRoute, Option<&super::cache::CacheRequest>),
) -> Result<(ClientHead, Relay), Instead> {
    let buffered = route.buffer(req.buffered).is_some();
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let parsed = match httparse::parse_headers(head, &mut fields) {
        Ok(httparse::Status::Complete((_, fields))) => cgi_status(fields).map(|s| (s, fields)),
        _ => Err("answered a CGI header block that does not parse"),
    };
    let ((status, length), fields) =
        parsed.map_err(|cause| Instead::Fail(Fail::app(502, endpoint, cause)))?;
    if own.replaces(status) {
        let kept = kept_fields(fields.iter().map(|f| (f.name, f.value)));
        return Err(Instead::Page(status, kept));
    }
    own.report.status.set(status);
    let (out, mut relay) = client_head(status, length, fields, req, own);
    // Looked for only where answers are buffered: a site without costs nothing.
    relay.streams = buffered && spool::streams(fields.iter().map(|f| (f.name, f.value)));
    if asked.is_some() {
        let named = fields.iter().map(|f| (f.name, f.value));
        relay.keep = super::answer::keeping(route, asked, (status, !req.head_only), named.clone())
            .map(|keeping| (keeping, super::cgi_answer::http_head(status, named)));
    }
    Ok((out, relay))
}

/// How a FastCGI answer's body goes to the client once its head is written.
struct Relay {
    status: u16,
    /// How the route's response cache may keep it, and the HTTP head it is kept with.
    keep: Option<super::cgi_answer::KeptCgi>,
    to_client: ToClient,
    then: Then,
    encoder: Option<Stream>,
    /// It streams by nature and is never buffered (see [`spool::streams`]).
    streams: bool,
}

/// The client's head for a CGI answer of `status` (with `fields`, the body's `length` if
/// said), through the response steps ([`Head`]), and how its body is to be relayed.
fn client_head(
    status: u16,
    length: Option<u64>,
    fields: &[httparse::Header<'_>],
    req: &FastCgiRequest,
    own: &OwnAnswers<'_>,
) -> (ClientHead, Relay) {
    let bodiless = req.head_only || status == 204 || status == 304;
    let plan = encode::plan(
        req.compress,
        status,
        req.head_only,
        fields.iter().map(|f| (f.name, f.value)),
    );
    let encoder = match plan {
        encode::Plan::Compress(c) if !bodiless => Stream::new(c).ok(),
        _ => None,
    };
    let to_client = match (
        bodiless,
        length.filter(|_| encoder.is_none()),
        req.client_minor,
    ) {
        (true, _, _) => ToClient::NoBody,
        (false, Some(n), _) => ToClient::Length(n),
        (false, None, 1) => ToClient::Chunked,
        (false, None, _) => ToClient::UntilClose,
    };
    let then = if req.keep_alive && to_client != ToClient::UntilClose {
        Then::KeepAlive
    } else {
        Then::Close
    };
    let head = Head {
        status,
        reason: "",
        client_minor: req.client_minor,
        plan,
        compressing: encoder.is_some(),
        to_client,
        then,
        listed: None,
    };
    let out = head.for_client(fields, own);
    let relay = Relay {
        status,
        keep: None,
        to_client: head.to_client,
        then,
        encoder,
        streams: false,
    };
    (out, relay)
}

impl Relay {
    /// Sends the head with the body: `data` (what came after the header block), then
    /// STDOUT from `source` to its end, framed for the client (compressed first, if so).
    async fn records<C: AsyncWrite + Unpin>(
        &mut self,
        head: ClientHead,
        mut data: Vec<u8>,
        source: &mut Stdout<'_>,
        stream: &mut C,
        own: &OwnAnswers<'_>,
        (timeout, body_timeout): (Duration, Duration),
    ) -> Outcome {
        let report = own.report;
        // An HTTP/1.1 client's head goes out with the body's start; a stream's relay takes
        // it structured, now.
        let mut out = match own.heads {
            Some(_) => match head_to_client(stream, own, (head, &[]), body_timeout).await {
                Ok(()) => Vec::new(),
                Err(_) => return Outcome::Close,
            },
            None => head.text,
        };
        let mut sent: u64 = 0;
        let mut clean = true;
        loop {
            // Compressed, the data is what the encoder gives for it.
            if let Some(e) = self.encoder.as_mut().filter(|_| !data.is_empty()) {
                if e.push(&data).is_err() {
                    return Outcome::Close;
                }
                data = e.take();
            }
            if !data.is_empty() {
                clean &= self.frame(&mut out, &data, &mut sent);
                data.clear();
            }
            // Write when a record's worth is waiting; small answers go out once, at the end.
            if out.len() >= MAX_RECORD {
                if to_client(stream, report, &out, body_timeout).await.is_err() {
                    return Outcome::Close;
                }
                out.clear();
            }
            match source.next(timeout).await {
                Ok(Some(stdout)) => data = stdout,
                Ok(None) => break,
                Err(_) => {
                    // The head may be out already: the client sees the close.
                    let _ = to_client(stream, report, &out, body_timeout).await;
                    return Outcome::Close;
                }
            }
        }
        if let Some(e) = self.encoder.take() {
            match e.finish() {
                Ok(tail) => {
                    self.frame(&mut out, &tail, &mut sent);
                }
                Err(_) => return Outcome::Close,
            }
        }
        if self.to_client == ToClient::Chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        let complete = match self.to_client {
            ToClient::Length(n) => sent == n,
            _ => true,
        };
        if to_client(stream, report, &out, body_timeout).await.is_err() {
            return Outcome::Close;
        }
        // The body was sent whole before the answer was read (`send_stdin`).
        match (complete && clean, self.then) {
            (true, Then::KeepAlive) => Outcome::KeepAlive,
            (true, _) => Outcome::Answered,
            (false, _) => Outcome::Close,
        }
    }

    /// `data` framed for the client into `out` (`sent`: the body's bytes so far, against a
    /// said length); false when it ran past that length.
    fn frame(&self, out: &mut Vec<u8>, data: &[u8], sent: &mut u64) -> bool {
        match self.to_client {
            ToClient::Length(n) => {
                let take = (data.len() as u64).min(n - *sent) as usize;
                out.extend_from_slice(&data[..take]);
                *sent += take as u64;
                take == data.len()
            }
            ToClient::Chunked if !data.is_empty() => {
                out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
                true
            }
            ToClient::UntilClose => {
                out.extend_from_slice(data);
                true
            }
            _ => true,
        }
    }
}
