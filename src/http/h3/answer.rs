//! Answers onto HTTP/3 streams: [`H3Out`], a stream as `streams`' relay and file pieces send
//! on it (QUIC's flow control waited for inside each send), and an answer espalier wrote
//! ([`send_written`]).
//!
//! Owns: sending those answers on an HTTP/3 stream. Must not touch: which answer a request
//! gets (the service decides) or the connection's streams (see the parent module).

use crate::http::streams::{response_of, send_file, StreamOut, Written};
use bytes::Bytes;
use h3::error::Code;
use std::time::Duration;

/// A request stream of a QUIC connection, as h3 gives it.
pub(super) type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Sends an answer espalier wrote (head, in-memory body, and a file's pieces after them);
/// one the service refused stops the stream (HTTP/3's "no answer").
pub(super) async fn send_written(
    stream: &mut Stream,
    written: Written,
    head_only: bool,
    timeout: Duration,
) {
    if written.refused {
        stream.stop_stream(Code::H3_REQUEST_REJECTED);
        return;
    }
    let out = Bytes::from(written.out);
    let Some((response, head_len)) = response_of(&out, &written.index) else {
        return;
    };
    let body = out.slice(head_len..);
    let file = written.file.filter(|_| !head_only);
    let mut send = H3Out { stream, timeout };
    let end = (body.is_empty() || head_only) && file.is_none();
    if send.head(response, end).await.is_none() || end {
        return;
    }
    if !body.is_empty() && !head_only {
        let last = file.is_none();
        if send.data(body, last, timeout).await.is_none() || last {
            return;
        }
    }
    if let Some(file) = file {
        let _ = send_file(&mut send, file, timeout).await;
    }
}

/// An HTTP/3 stream as `streams` sends on it: QUIC's flow control is waited for inside each
/// send (bounded by the body timeout, after which the stream is cut).
pub(super) struct H3Out<'a, T: h3::quic::SendStream<Bytes>> {
    pub(super) stream: &'a mut h3::server::RequestStream<T, Bytes>,
    pub(super) timeout: Duration,
}

impl<'a, T: h3::quic::SendStream<Bytes>> H3Out<'a, T> {
    /// `100 Continue`, for a client that waits for it before its body.
    pub(super) async fn continuing(
        stream: &'a mut h3::server::RequestStream<T, Bytes>,
        timeout: Duration,
    ) {
        let mut out = H3Out { stream, timeout };
        out.informational(crate::http::streams::continue_response())
            .await;
    }
}

impl<T: h3::quic::SendStream<Bytes>> StreamOut for H3Out<'_, T> {
    async fn head(&mut self, response: http::Response<()>, end: bool) -> Option<()> {
        let sent = tokio::time::timeout(self.timeout, self.stream.send_response(response));
        if !matches!(sent.await, Ok(Ok(()))) {
            self.cut();
            return None;
        }
        if end {
            return self.data(Bytes::new(), true, self.timeout).await;
        }
        Some(())
    }

    async fn informational(&mut self, response: http::Response<()>) {
        let _ = tokio::time::timeout(self.timeout, self.stream.send_response(response)).await;
    }

    async fn room(&mut self, want: usize, _timeout: Duration) -> Option<usize> {
        Some(want)
    }

    async fn data(&mut self, data: Bytes, end: bool, timeout: Duration) -> Option<()> {
        if !data.is_empty() {
            match tokio::time::timeout(timeout, self.stream.send_data(data)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return None,
                Err(_) => {
                    self.cut();
                    return None;
                }
            }
        }
        if end {
            match tokio::time::timeout(timeout, self.stream.finish()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return None,
                Err(_) => {
                    self.cut();
                    return None;
                }
            }
        }
        Some(())
    }

    fn cut(&mut self) {
        self.stream.stop_stream(Code::H3_INTERNAL_ERROR);
    }

    /// h3 does not tell a stream's sender that its client stopped it (quinn's `stopped` is
    /// behind h3's stream types): a cancelled HTTP/3 request is seen at the next send.
    async fn reset(&mut self) {
        std::future::pending().await
    }
}
