//! A stream lent whole to what forwards it as a stream of its own (an upstream spoken to in
//! HTTP/2, see `Service::lend_stream`): its body as the client sends it, trailers included,
//! and the way back — the answer's head written as HTTP/1.1 by the one response writer and
//! translated here, then data and trailers as they come, within the client's windows.
//!
//! Owns: [`StreamReply`]'s sending and the lending (the types are the service's, which names
//! them in `Service::lend_stream`). Must not touch: what is forwarded or where (the
//! service's), or the connection (see the parent module).

use super::body::Body;
use super::send::{send_answer, send_data};
use super::Connection;
use crate::features::head::ClientHead;
use crate::http::access_log::Report;
use crate::http::service::{LentStream, RequestCtx, Service, StreamReply};
use crate::http::streams::{continue_response, response_of};
use bytes::Bytes;
use h2::server::SendResponse;

impl StreamReply<'_> {
    /// Sends an answer espalier wrote whole: its head (made a response from its index) and
    /// `body`.
    pub fn answer(&mut self, head: ClientHead, body: Vec<u8>, head_only: bool) {
        let head_len = head.head_len();
        self.report.bytes.set((head_len + body.len()) as u64);
        // The body was written apart from the head (see `proxy::wire::head_to_client`).
        let more = !body.is_empty() && !head_only;
        let Some(index) = head.index else {
            return;
        };
        let head = (head.text, &*index);
        if let Some(Some(mut send)) = send_answer(self.respond, head, more, head_only) {
            let _ = send.send_data(Bytes::from(body), true);
        }
    }

    /// Sends the answer's head (made a response from its index); `end`: it has no body or
    /// trailers. `None` when the client is gone or no whole head was written.
    pub fn head(&mut self, head: ClientHead, end: bool) -> Option<()> {
        let head_len = head.head_len() as u64;
        self.report.head.set(head_len);
        self.report.bytes.set(head_len);
        let (response, _) = response_of(&Bytes::from(head.text), head.index.as_deref()?)?;
        let send = self.respond.send_response(response, end).ok()?;
        self.send = (!end).then_some(send);
        Some(())
    }

    /// Sends a piece of the body, once the client's window takes it; `end` ends the stream.
    pub async fn data(&mut self, data: Bytes, end: bool) -> Option<()> {
        let send = self.send.as_mut()?;
        let n = data.len() as u64;
        send_data(send, data, end, self.timeout).await?;
        self.report.bytes.set(self.report.bytes.get() + n);
        Some(())
    }

    /// Ends the stream with trailer fields.
    pub fn trailers(&mut self, trailers: http::HeaderMap) -> Option<()> {
        self.send.as_mut()?.send_trailers(trailers).ok()
    }

    /// Ends the stream in error (`reason`): an answer under way was cut.
    pub fn reset(&mut self, reason: h2::Reason) {
        match &mut self.send {
            Some(send) => send.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }
}

impl<S: Service + 'static> Connection<S> {
    /// A request whose app takes it as a stream of its own (an HTTP/2 upstream, for a client
    /// that takes trailers): lent whole, its body and its answer streaming both ways.
    pub(super) async fn lend_stream(
        &self,
        lent: S::Lent,
        body: Body<'_>,
        ctx: &RequestCtx,
        report: &Report,
        mut respond: SendResponse<Bytes>,
    ) {
        let env = &self.env;
        let (whole, recv) = match body {
            Body::Whole(whole) => (Bytes::copy_from_slice(whole), None),
            Body::Arriving(recv, _, expects_continue) => {
                if expects_continue {
                    let _ = respond.send_informational(continue_response());
                }
                (Bytes::new(), Some(recv))
            }
        };
        let stream = LentStream {
            body: recv,
            whole,
            max_body: ctx.body_bound(env.limits.max_body_size),
            reply: StreamReply {
                respond: &mut respond,
                send: None,
                timeout: env.timeouts.body,
                report,
            },
            clock: &env.clock,
            response: ctx.response.as_deref(),
        };
        env.service.lend_stream(lent, stream).await;
    }
}
