//! espalier: a NUMA-aware web server and application-pool host for Linux.
//!
//! The crate is a library with a thin binary (`src/main.rs` → [`cli::main`]) over it, like
//! ripgrep.
//!
//! # A request's road
//! 1. `espalier serve` ([`cli`]) reads the machine ([`topology`]) and the config ([`config`],
//!    its certificates checked by [`certs`]), plans where each worker goes ([`placement`]) and
//!    hands the plan to the master ([`server::master`]), which opens one reuseport socket per
//!    worker thread ([`server::listeners`], steered by CPU with [`server::steering`]) and
//!    starts the placed worker processes ([`server::spawn`]); [`server::supervisor`] keeps
//!    them alive, each process's life one state ([`server::supervisor`]'s `life`).
//! 2. A worker ([`server::worker`]) runs one event loop per CPU it owns; a connection is
//!    accepted there and served in a contained task ([`server::conn_task`]).
//! 3. Its first steps ([`http::accept`]): a PROXY protocol header where the address expects
//!    one, then on an https address the TLS handshake ([`tls`]: the certificate by SNI; ALPN
//!    chooses HTTP/2 or HTTP/1.1). On a shared address, a ClientHello naming another pool's
//!    site hands the connection there before the handshake ([`handoff`]).
//! 4. HTTP/1.1 ([`http::conn`]): the connection is a state moved by named steps — parse each
//!    request head ([`http::parse_head`]), frame its body ([`http::chunked`]), and ask the
//!    thread's service ([`http::service::Service`]) where it goes. HTTP/2 ([`http::h2`], the
//!    `h2` crate's framing) makes each stream a request for the same service; so does h2c.
//! 5. The service ([`handlers`]) routes by listener and `Host` ([`routing`]) and runs the
//!    site's request chain once (rules, the route by path, access, limit, sign-in — the
//!    order is [`config::chain`]'s), making the request's context
//!    ([`http::service::RequestCtx`]: what the chain decided, its site, its log, the fields
//!    added to its answer), which travels with the request to its answer and its log line;
//!    every answer's head then runs the site's response chain
//!    ([`http::response_chain`]: error page, `headers`, [`features`]' steps).
//!    Then one of three: it answers here into a [`http::Responder`]
//!    ([`handlers::static_files`], [`handlers::dynamic`], [`handlers::cpu`]); it has the
//!    connection lent to an application ([`proxy::Dispatch`]: the request built once, in
//!    HTTP/1.1 or FastCGI, for an HTTP/1.1 connection or an HTTP/2 stream alike, to a
//!    process on the thread's node, chosen by [`topology::nearest`], or to a server of an
//!    `[[upstream]]` group, chosen by the thread's own balancer, [`routing::balance`]); or, on an address
//!    several pools share, it hands the connection to the pool that serves it ([`handoff`]).
//! 6. The answers of every request in the buffer go out in one `write` (or `sendfile` for a
//!    large file, through the kernel's TLS where [`http::ktls`] hands it over), back in
//!    [`http::conn`] — on the io_uring path ([`os::uring`], `[server] io`) a cleartext
//!    connection's reads and writes go through the thread's ring instead, the sends of a
//!    whole loop turn in one submission; the access log ([`http::access_log`]) takes a line
//!    per request.
//!
//! # The modules
//!
//! Lowest layer first; a module imports only its own layer's and lower ones, and no two
//! files import each other (`.ci/imports` draws the graph and checks both).
//!
//! | module | owns | pure? |
//! | --- | --- | --- |
//! | [`cpuset`] | CPU sets and the cpu-list syntax | yes |
//! | [`units`] | durations, sizes, percentages | yes |
//! | [`compress`] | the content codings (gzip, brotli, zstd): a whole body, or a stream | yes |
//! | [`topology`] | nodes, CPUs, caches, NICs as read from sysfs; ranking by distance ([`topology::nearest`]) | parsing and ranking yes; reading in `topology::sysfs` |
//! | [`routing`] | the routing tables a worker is given: sites by address and host name, path prefixes, a site's redirect and rewrite rules, choosing an upstream server | yes |
//! | [`features`] | site features that are a module each (`status_headers`): their typed keys, checks and compiled response steps | yes |
//! | [`os`] | every syscall: affinity, memory policy, sockets, kTLS, io_uring, processes, cgroups, private folders | no — every `unsafe` of the crate |
//! | [`certs`] | certificate files: loaded, checked, fingerprinted | reads files |
//! | [`config`] | the TOML config, defaults, validation | yes, but it checks that roots, programs and certificates exist and are usable |
//! | [`placement`] | which worker goes where | yes |
//! | [`tls`] | SNI, the rustls server configuration, which connections kTLS may take | yes but for building keys |
//! | [`handoff`] | passing a connection to another pool's thread on a shared address | no |
//! | [`http`] | the engine: HTTP/1.1 parsing and connection, HTTP/2 streams, the service contract, access logs | parsing yes; I/O in `http::conn`, `http::h2` |
//! | [`proxy`] | forwarding to application processes in HTTP/1.1 or FastCGI, and to upstream groups' servers | building requests yes; forwarding no |
//! | [`handlers`] | routing a request, static files, the dynamic page, the CPU-heavy page | no: static files stat, open and read on the event loop, as nginx does |
//! | [`server`] | the master, the supervisor, the workers, the admin endpoint | decisions yes (`lifecycle`, `supervisor`'s `life`, `soft`, `steering`); the rest no |
//! | [`bench`](mod@bench) | the load generator and its mergeable results | no |
//! | [`nic`] | NIC queue interrupts on their node: plan and apply | plan yes |
//! | [`doctor`] | the OS settings serving needs | checks yes; reading inputs no |
//! | [`scale`] | the scaling experiment: plan, runner, report | plan yes |
//! | [`cli`] | subcommands: arguments and output | no |
//!
//! Beside them: `async_io` (`delegate_async_io!`: tokio's read and write traits for an enum
//! of streams, by delegation) and `testutil` (fixtures for the crate's unit tests).

pub(crate) mod async_io;
pub mod bench;
pub mod certs;
pub mod cli;
pub mod compress;
pub mod config;
pub mod cpuset;
pub mod doctor;
pub mod features;
pub mod handlers;
pub mod handoff;
pub mod http;
pub mod nic;
pub mod os;
pub mod placement;
pub mod proxy;
pub mod routing;
pub mod scale;
pub mod server;
pub mod tls;
pub mod topology;
pub mod units;

#[cfg(test)]
mod testutil;
