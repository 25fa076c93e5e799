//! A stream lent whole to what forwards it as a stream of its own (an upstream spoken to in
//! HTTP/2, see `Service::lend_stream`): its body as the client sends it, trailers included,
//! and the way back — the answer's head written as HTTP/1.1 by the one response writer and
//! translated here, then data and trailers as they come, within the client's windows.
//!
//! Owns: [`LentStream`] and [`StreamReply`]. Must not touch: what is forwarded or where (the
//! service's), or the connection (see the parent module).

use super::answer::{send_answer, send_data, translate};
use crate::http::access_log::Report;
use crate::http::clock::Clock;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use std::time::Duration;

/// A stream lent for its request's forwarding.
pub struct LentStream<'a> {
    /// Its body still arriving (`None`: it had none, or it was read whole into `whole`).
    pub body: Option<RecvStream>,
    pub whole: Bytes,
    /// The largest body it may carry.
    pub max_body: u64,
    pub reply: StreamReply<'a>,
    /// The thread's clock, for espalier's own answers.
    pub clock: &'a Clock,
    /// The field edits and error pages of the request's site.
    pub fields: Option<&'a crate::http::edits::FieldEdits>,
    pub pages: Option<&'a crate::http::error_pages::ErrorPages>,
}

/// The answer's way back on a lent stream.
pub struct StreamReply<'a> {
    pub(super) respond: &'a mut SendResponse<Bytes>,
    pub(super) send: Option<SendStream<Bytes>>,
    /// A client that opens no window for this long gets the stream reset.
    pub timeout: Duration,
    /// What was answered, for the access log.
    pub report: &'a Report,
}

impl StreamReply<'_> {
    /// Sends an answer espalier wrote whole (head and body, as HTTP/1.1).
    pub fn answer(&mut self, out: Vec<u8>, head_only: bool) {
        self.report.bytes.set(out.len() as u64);
        let _ = send_answer(self.respond, Bytes::from(out), false, head_only);
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
