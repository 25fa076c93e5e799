//! The one way a request goes to an application, from an HTTP/1.1 connection or an HTTP/2
//! stream alike: its head built once for the app's protocol, then forwarded.
//!
//! Owns: [`ProxyTarget`] (what routing chose) and [`Dispatch`] (the built request and its
//! sending). Must not touch: routing (the service chooses the target) or the client's
//! protocol (the engine lends the connection, see `crate::http::service`).

use super::cgi::FastCgiRequest;
use super::request::ForwardRequest;
use super::route::ProxyRoute;
use super::script::Script;
use crate::config::PathUses;
use crate::http::service::{LentConnection, LentHead, Outcome};
use crate::http::Request;

/// What a request is handed to: an HTTP app, or a FastCGI app with the script the request
/// names (checked: one the app may run).
pub enum ProxyTarget {
    Http(std::rc::Rc<ProxyRoute>, PathUses),
    FastCgi(std::rc::Rc<ProxyRoute>, PathUses, Box<Script>),
}

impl ProxyTarget {
    /// FastCGI sends `CONTENT_LENGTH` before the body: a body of unknown length must be read
    /// whole first (over HTTP/2 by the stream; over HTTP/1.1 by the forwarder where the
    /// pool buffers, else refused with 411).
    pub fn needs_length(&self) -> bool {
        matches!(self, ProxyTarget::FastCgi(..))
    }
}

/// A request on its way to an application, its head built once for the app's protocol. The
/// one dispatch of both HTTP/1.1 connections and HTTP/2 streams (a stream's connection is
/// the far end of a pipe, see `http::h2`).
pub enum Dispatch {
    Http(std::rc::Rc<ProxyRoute>, ForwardRequest),
    FastCgi(std::rc::Rc<ProxyRoute>, FastCgiRequest),
}

impl Dispatch {
    /// `req` for `target`, as its connection framed and sent it; its site offers `codings`
    /// (its preference first; none: it compresses nothing).
    pub fn new(
        target: ProxyTarget,
        req: &Request<'_>,
        lent: &LentHead<'_>,
        codings: &[crate::compress::Coding],
    ) -> Self {
        let compress = (!codings.is_empty())
            .then(|| crate::http::coding::choose(req.header("accept-encoding"), codings));
        match target {
            ProxyTarget::Http(route, uses) => {
                let pass_underscored = route.settings().pass_underscored_fields;
                let mut forwarded = ForwardRequest::new(req, lent, pass_underscored);
                forwarded.compress = compress;
                forwarded.choose = route.choose(req);
                // Only a server spoken to in HTTP/2 has a use for it (see `Self::streams`).
                forwarded.trailers = route.settings().http2 && super::request::takes_trailers(req);
                if uses.cache_responses {
                    forwarded.cache = super::cached::request_of(&route, req, lent);
                }
                forwarded.buffered = uses.buffer;
                Dispatch::Http(route, forwarded)
            }
            ProxyTarget::FastCgi(route, uses, script) => {
                let mut forwarded = FastCgiRequest::new(req, &script, lent);
                forwarded.compress = compress;
                if uses.cache_responses {
                    forwarded.cache = super::cached::request_of(&route, req, lent);
                }
                forwarded.buffered = uses.buffer;
                Dispatch::FastCgi(route, forwarded)
            }
        }
    }

    /// Whether it goes as an HTTP/2 stream of its own (see [`Self::run_stream`]): to an app
    /// spoken to in HTTP/2, from a client that takes trailers.
    pub fn streams(&self) -> bool {
        matches!(self, Dispatch::Http(route, req) if route.settings().http2 && req.trailers)
    }

    /// Sends it as a stream of its own on the app's HTTP/2 connection, its body and answer
    /// streaming both ways (see `super::h2_stream`).
    pub async fn run_stream(self, stream: crate::http::h2::LentStream<'_>) {
        if let Dispatch::Http(route, req) = self {
            super::h2_stream::forward_stream(stream, req, &route).await
        }
    }

    /// Sends it, its body from `conn`, and the app's answer back to `conn`.
    pub async fn run<C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        self,
        conn: LentConnection<'_, C>,
    ) -> Outcome {
        match self {
            Dispatch::Http(route, req) => super::forward::forward(conn, req, &route).await,
            Dispatch::FastCgi(route, req) => super::fastcgi::forward(conn, req, &route).await,
        }
    }
}
