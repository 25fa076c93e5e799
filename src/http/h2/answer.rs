//! Answers onto HTTP/2 streams: [`H2Out`], the stream as `streams`' relay and file pieces
//! send on it (through `send`'s flow-control windows), and espalier's own errors.
//!
//! Owns: sending those answers on an HTTP/2 stream. Must not touch: which answer a request
//! gets (the service decides) or the connection's streams (see the parent module).

use super::send::{send_answer, send_data, window};
use crate::http::service::ConnEnv;
use crate::http::streams::own_error;
use crate::http::streams::StreamOut;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::SendStream;
use std::time::Duration;

/// An HTTP/2 stream to answer on: its response not sent yet (`respond`), or its data
/// (`send`, once the head went, or for a file whose head is sent already).
pub(super) struct H2Out<'a> {
    respond: Option<&'a mut SendResponse<Bytes>>,
    send: Option<SendStream<Bytes>>,
}

impl<'a> H2Out<'a> {
    pub(super) fn answering(respond: &'a mut SendResponse<Bytes>) -> Self {
        H2Out {
            respond: Some(respond),
            send: None,
        }
    }

    pub(super) fn sending(send: SendStream<Bytes>) -> Self {
        H2Out {
            respond: None,
            send: Some(send),
        }
    }
}

impl StreamOut for H2Out<'_> {
    async fn head(&mut self, response: http::Response<()>, end: bool) -> Option<()> {
        let send = self.respond.as_mut()?.send_response(response, end).ok()?;
        if !end {
            self.send = Some(send);
        }
        Some(())
    }

    async fn informational(&mut self, response: http::Response<()>) {
        if let Some(respond) = &mut self.respond {
            let _ = respond.send_informational(response);
        }
    }

    async fn room(&mut self, want: usize, timeout: Duration) -> Option<usize> {
        window(self.send.as_mut()?, want, timeout).await
    }

    async fn data(&mut self, data: Bytes, end: bool, timeout: Duration) -> Option<()> {
        send_data(self.send.as_mut()?, data, end, timeout).await
    }

    fn cut(&mut self) {
        if let Some(send) = &mut self.send {
            send.send_reset(h2::Reason::INTERNAL_ERROR);
        }
    }

    async fn reset(&mut self) {
        let _ = std::future::poll_fn(|cx| match (&mut self.send, &mut self.respond) {
            (Some(send), _) => send.poll_reset(cx),
            (None, Some(respond)) => respond.poll_reset(cx),
            (None, None) => std::task::Poll::Pending,
        })
        .await;
    }
}

/// espalier's own error answer on a stream, written and queued as its handlers' are.
pub(super) fn send_error<S>(respond: &mut SendResponse<Bytes>, env: &ConnEnv<S>, status: u16) {
    let written = own_error(&env.clock.common(), status);
    let _ = send_answer(respond, (written.out, &written.index), false, false);
}
