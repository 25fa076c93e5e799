//! A stream lent whole to what forwards it as a stream of its own (an upstream spoken to in
//! HTTP/2, see `Service::lend_stream`): its body as the client sends it, trailers included,
//! and the way back — the answer's head written as HTTP/1.1 by the one response writer and
//! translated here, then data and trailers as they come, within the client's windows.
//!
//! Owns: [`StreamReply`]'s sending and the lending (the types are the service's, which names
//! them in `Service::lend_stream`). Must not touch: what is forwarded or where (the
//! service's), or the connection (see the parent module).

use super::body::Body;
use super::send::send_data;
use super::Connection;
use crate::http::access_log::Report;
use crate::http::service::{LentStream, RequestCtx, Service, StreamReply};
use crate::http::streams::{continue_response, translate};
use bytes::Bytes;
use h2::server::SendResponse;

impl StreamReply<'_> {
    /// Sends an answer espalier wrote whole (head and body, as HTTP/1.1, through the
    /// forwarder's writer: its head is translated, see `streams::translate`).
    pub fn answer(&mut self, out: Vec<u8>, head_only: bool) {
        self.report.bytes.set(out.len() as u64);
        let out = Bytes::from(out);
        let Some(head_len) = memchr::memmem::find(&out, b"\r\n\r\n").map(|e| e + 4) else {
            return;
        };
        let Some(translated) = translate(&out.slice(..head_len)) else {
            return;
        };
        let body = if head_only {
            Bytes::new()
        } else {
            out.slice(head_len..)
        };
        let end = body.is_empty();
        if let Ok(mut send) = self.respond.send_response(translated.response, end) {
            if !end {
                let _ = send.send_data(body, true);
            }
        }
    }

    /// Sends the answer's head (written as HTTP/1.1, through its empty line); `end`: it has
    /// no body or trailers. `None` when the client is gone or the head is not HTTP.
    pub fn head(&mut self, head: Vec<u8>, end: bool) -> Option<()> {
        self.report.head.set(head.len() as u64);
        self.report.bytes.set(head.len() as u64);
        let head = Bytes::from(head);
        let response = translate(&head)?.response;
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
