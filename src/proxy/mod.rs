//! The reverse proxy of `transport = "proxy"` pools and of `[[upstream]]` groups: espalier's
//! worker threads forward each request to an application process on their own NUMA node — no
//! maintained proxy chooses its upstream by node — or to a server of a group espalier did not
//! start, chosen by the thread's own balancer ([`group`]).
//!
//! Owns: where an app process listens ([`Endpoint`]), which processes a thread may use (its
//! node's first, by `crate::topology::nearest`), an upstream group's servers as a thread
//! reaches them and their health in a process ([`group`]), the one dispatch of a routed request
//! ([`Dispatch`]), and the forwarding itself
//! ([`forward`](mod@forward): the upstream connection pools, request and response bodies streamed both
//! ways (`request_body`: the client's side while the app is asked), `X-Forwarded-*`, Upgrade tunnels, timeouts, 502/504, one retry), in HTTP/1.1 or, for
//! `transport = "fastcgi"`, in FastCGI records ([`fastcgi`]); to an app or server spoken to
//! in HTTP/2 (`protocol = "http2"`), the same exchange on a stream of the thread's one
//! connection to it (`h2_exchange`), or the client's HTTP/2 stream as a stream of its own,
//! trailers and both directions streaming, for gRPC (`h2_stream`). An app's answer head is
//! read once for all of them (`answer`); answers HTTP caching lets a shared cache keep are
//! kept per process and given again while fresh (`cache_responses`: the rules in [`cache`],
//! the stores in [`cache_store`], a purge in [`cache_purge`], the forwarder's side in
//! `cached`).
//! Must not touch: the client connection's own protocol loop (that is [`crate::http::conn`],
//! which lends a connection here through the service and takes it back) or app processes'
//! lives.

mod answer;
mod answer_read;
pub mod cache;
mod cache_disk;
pub mod cache_purge;
mod cache_refresh;
pub mod cache_store;
mod cached;
mod cgi;
mod cgi_answer;
mod dispatch;
mod encode;
mod endpoint;
pub mod fastcgi;
mod fastcgi_cached;
mod fastcgi_records;
pub mod forward;
mod forward_head;
mod group;
mod h2_exchange;
mod h2_stream;
mod head;
pub mod queue;
mod relay;
mod request;
mod request_body;
mod route;
mod script;
mod share;
mod spool;
pub mod trace_export;
mod upstream;
pub mod verify;
mod wire;

pub use cgi::FastCgiRequest;
pub use dispatch::{Dispatch, ProxyTarget};
pub use endpoint::Endpoint;
pub use forward::forward;
pub use group::{GroupHealth, GroupSource};
pub use queue::Backpressure;
pub use request::ForwardRequest;
pub use route::{ProxyRoute, ProxySettings, SharedTiers, UNRESPONSIVE_AFTER, WAIT_FOR_READY};
pub use script::{Script, Scripts};
