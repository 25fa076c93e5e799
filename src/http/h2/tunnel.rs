//! An HTTP/2 stream carrying a WebSocket (RFC 8441's extended CONNECT, made an upgrade
//! request at the edge by [`crate::http::websocket`]): lent to its app or upstream server,
//! the stream then its tunnel.
//!
//! Owns: that one decision. Must not touch: the stream's other ways (the parent's).

use super::{send_error, Body, Connection, Lending, Routed, Work};
use crate::http::service::{Route, Service};
use crate::http::{websocket, Framing};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use std::time::Instant;

impl<S: Service + 'static> Connection<S> {
    /// A WebSocket's stream (see [`websocket`]): lent to its app or upstream server, the
    /// stream then its tunnel; one its site answers here gets that answer — a redirect, a
    /// refusal — or, for a path of espalier's own content or a FastCGI app, `501`: neither
    /// speaks WebSocket.
    pub(super) async fn tunnel(
        &self,
        routed: Routed<S::Target>,
        parts: http::request::Parts,
        recv: RecvStream,
        mut respond: SendResponse<Bytes>,
        arrived: Instant,
    ) {
        let nowhere = match &routed {
            Ok((target, ctx, _)) => {
                websocket::nowhere(Some(self.env.service.needs_length(target)), &ctx.decided)
            }
            Err(Some(ctx)) => websocket::nowhere(None, &ctx.decided),
            Err(None) => false,
        };
        if nowhere {
            return send_error(&mut respond, &self.env, 501);
        }
        let work = match routed {
            Ok((target, ctx, facts)) => {
                let lending = Lending {
                    target,
                    ctx,
                    respond,
                    facts,
                    arrived,
                };
                Some(Work::Forward(Box::new(lending)))
            }
            Err(Some(ctx)) => self.answer(&parts, &[], respond, arrived, Some(Route::Here(ctx))),
            Err(None) => {
                send_error(&mut respond, &self.env, 421);
                None
            }
        };
        if let Some(work) = work {
            let body = Body::Arriving(recv, Framing::None, false);
            Box::pin(self.run(work, &parts, body)).await;
        }
    }
}
