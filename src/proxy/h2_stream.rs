//! A client's HTTP/2 stream forwarded as a stream of an upstream's HTTP/2 connection: what
//! gRPC needs and an HTTP/1.1 exchange cannot carry — the answer streaming back while the
//! request still streams out (bidirectional streaming), and trailer fields both ways
//! (`grpc-status`, `grpc-message`).
//!
//! Taken by a request to a group or pool spoken to in HTTP/2 whose client takes trailers
//! (`TE: trailers`, which every gRPC client sends); other requests go by the HTTP/1.1
//! forwarder over [`super::h2_exchange`]. The request's head is the forwarder's own
//! ([`super::request`]), its answer's head goes through the same response steps
//! ([`super::answer::answer_head`]: the site's field edits, error pages, sticky cookie), and
//! a failure is answered and logged by the one place ([`OwnAnswers`]). Not compressed here:
//! a gRPC message is framed, and compressed if at all, by gRPC itself.
//!
//! Owns: the two directions' pumps. Must not touch: the client's connection (the HTTP/2
//! engine lent the stream, see `crate::http::h2::LentStream`) or choosing the server
//! ([`super::route`]).

use super::answer::answer_head;
use super::h2_exchange::{head_of_response, request_of};
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::upstream::Conn;
use super::wire::{Fail, Instead, OwnAnswers};
use super::Endpoint;
use crate::http::h2::{send_data, LentStream, StreamReply};
use crate::http::heads::AnswerHeads;
use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Forwards the lent stream's request to an HTTP/2 server of `route` and its answer back.
pub async fn forward_stream(stream: LentStream<'_>, mut req: ForwardRequest, route: &ProxyRoute) {
    let LentStream {
        body,
        whole,
        max_body,
        mut reply,
        clock,
        response,
    } = stream;
    req.compress = None;
    let heads = AnswerHeads::default();
    let own = OwnAnswers {
        report: reply.report,
        clock,
        client_minor: 1,
        head_only: req.head_only,
        response,
        heads: Some(&heads),
    };
    let sent = Sent {
        body,
        whole,
        max_body,
    };
    if let Err(instead) = exchange(sent, &req, route, &own, &mut reply).await {
        // espalier's own answer: its head comes structured (`heads`), its body written here.
        let mut body = Vec::with_capacity(256);
        own.instead(&mut body, route, instead).await;
        if let Some(head) = heads.take() {
            reply.answer(head, body, req.head_only);
        }
    }
}

/// The request's body as the client sends it.
struct Sent {
    body: Option<RecvStream>,
    whole: Bytes,
    max_body: u64,
}

/// Sends the request on a new stream of a server's connection, its body streaming while the
/// answer comes back. `Err` with what to answer instead while no answer's head was sent.
async fn exchange(
    sent: Sent,
    req: &ForwardRequest,
    route: &ProxyRoute,
    own: &OwnAnswers<'_>,
    reply: &mut StreamReply<'_>,
) -> Result<(), Instead> {
    let (endpoint, conn, _held) = (route.connection(None, &req.choose).await)
        .map_err(|(status, cause)| Instead::Fail(Fail::Unconnected(status, cause)))?;
    let failed = |status, cause: String| Instead::Fail(Fail::app(status, &endpoint, cause));
    let Some((sender, https)) = (match conn {
        Conn::H2(exchange) => exchange.into_sender(),
        _ => None,
    }) else {
        return Err(failed(502, "is not spoken to in HTTP/2".into()));
    };
    let (request, _) = request_of(&req.head, https, true).map_err(|c| failed(502, c))?;
    let mut sender = (sender.ready().await)
        .map_err(|e| failed(502, format!("closed its HTTP/2 connection: {e}")))?;
    let bodiless = sent.body.is_none() && sent.whole.is_empty();
    let (response, mut up) = (sender.send_request(request, bodiless))
        .map_err(|e| failed(502, format!("did not take a new stream: {e}")))?;
    let asked = Instant::now();
    let too_large = Cell::new(false);
    let timeout = reply.timeout;
    let pumping = async {
        if !bodiless {
            pump(sent, &mut up, timeout, &too_large).await;
        }
    };
    let answering = answer(
        response,
        req,
        route,
        own,
        reply,
        (&endpoint, asked),
        &too_large,
    );
    let mut answering = std::pin::pin!(answering);
    // A server may answer before the request's body is whole (and a gRPC server streams
    // while it reads): the body goes on while the answer does, and stops with it.
    tokio::select! {
        answered = &mut answering => answered,
        () = pumping => answering.await,
    }
}

/// Relays the server's answer: its head through the response steps, then its data and
/// trailers as the client's window takes them.
async fn answer(
    response: ResponseFuture,
    req: &ForwardRequest,
    route: &ProxyRoute,
    own: &OwnAnswers<'_>,
    reply: &mut StreamReply<'_>,
    (endpoint, asked): (&Endpoint, Instant),
    too_large: &Cell<bool>,
) -> Result<(), Instead> {
    let failed = |status, cause: String| Instead::Fail(Fail::app(status, endpoint, cause));
    let timeout = route.settings().response_timeout;
    let answered = tokio::time::timeout(timeout, response).await;
    if too_large.get() {
        return Err(Instead::Status(413));
    }
    let answered = match answered {
        Ok(Ok(answered)) => answered,
        Ok(Err(e)) => return Err(failed(502, format!("reset the stream unanswered: {e}"))),
        Err(_) => {
            let cause = format!("did not answer within response_timeout ({timeout:?})");
            return Err(failed(504, cause));
        }
    };
    let (parts, mut recv) = answered.into_parts();
    let ended = recv.is_end_stream() || req.head_only;
    let (head, _) = head_of_response(&parts, ended, req.head_only);
    route.answered(endpoint, own.report, asked, &head);
    let (out, _) = answer_head((&head, true), endpoint, req, route, own)?;
    if reply.head(out, ended).is_none() || ended {
        return Ok(());
    }
    loop {
        match tokio::time::timeout(timeout, recv.data()).await {
            Ok(Some(Ok(data))) => {
                let n = data.len();
                reply
                    .data(data, false)
                    .await
                    .ok_or(Instead::Fail(Fail::Close))?;
                let _ = recv.flow_control().release_capacity(n);
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                cut(route, reply, endpoint, &format!("reset its answer: {e}"));
                return Ok(());
            }
            Err(_) => {
                let cause = "sent no more of its answer within response_timeout";
                cut(route, reply, endpoint, cause);
                return Ok(());
            }
        }
    }
    match tokio::time::timeout(timeout, recv.trailers()).await {
        Ok(Ok(Some(trailers))) => {
            reply.trailers(trailers);
        }
        Ok(Ok(None)) => {
            reply.data(Bytes::new(), true).await;
        }
        _ => cut(route, reply, endpoint, "did not end its answer"),
    }
    Ok(())
}

/// An answer cut after its head went out: the client's stream is reset, the cause logged.
fn cut(route: &ProxyRoute, reply: &mut StreamReply<'_>, endpoint: &Endpoint, cause: &str) {
    reply.reset(h2::Reason::INTERNAL_ERROR);
    route.log_failure(Some(endpoint), 502, cause);
}

/// Sends the client's body up the server's stream as it arrives, each piece's window given
/// back to the client once the server's window took it, then its trailers (or its end). A
/// body over `max_body` (`too_large` set), a client that resets or goes silent for
/// `timeout`: the server's stream is reset.
async fn pump(sent: Sent, up: &mut SendStream<Bytes>, timeout: Duration, too_large: &Cell<bool>) {
    let Sent {
        body,
        whole,
        max_body,
    } = sent;
    if !whole.is_empty()
        && send_data(up, whole, body.is_none(), timeout)
            .await
            .is_none()
    {
        return;
    }
    let Some(mut recv) = body else { return };
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(timeout, recv.data()).await {
            Ok(Some(Ok(data))) => {
                total += data.len() as u64;
                if total > max_body {
                    too_large.set(true);
                    return up.send_reset(h2::Reason::CANCEL);
                }
                let n = data.len();
                if send_data(up, data, false, timeout).await.is_none() {
                    return;
                }
                let _ = recv.flow_control().release_capacity(n);
            }
            Ok(None) => break,
            _ => return up.send_reset(h2::Reason::CANCEL),
        }
    }
    match tokio::time::timeout(timeout, recv.trailers()).await {
        Ok(Ok(Some(trailers))) => {
            let _ = up.send_trailers(trailers);
        }
        Ok(Ok(None)) => {
            let _ = up.send_data(Bytes::new(), true);
        }
        _ => up.send_reset(h2::Reason::CANCEL),
    }
}
