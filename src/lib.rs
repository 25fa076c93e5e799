//! espalier: a NUMA-aware web server and application-pool host for Linux.
//!
//! The crate is a library with a thin binary (`src/main.rs` → [`cli::main`]) over it, like
//! ripgrep.
//!
//! # A request's road
//! 1. `espalier serve` ([`cli`]) reads the machine ([`topology`]) and the config ([`config`]),
//!    plans where each worker goes ([`placement`]) and hands the plan to the master
//!    ([`server::master`]), which opens one reuseport socket per worker thread
//!    ([`server::listeners`], steered by CPU with [`server::steering`]) and starts the placed
//!    worker processes ([`server::spawn`], then [`server::supervisor`] keeps them alive).
//! 2. A worker ([`server::worker`]) runs one event loop per CPU it owns; a connection is
//!    accepted there and served in a contained task ([`server::conn_task`]).
//! 3. The connection loop ([`http::conn`]) reads, parses each request head
//!    ([`http::parse_head`]) and body ([`http::chunked`]), and asks the thread's service.
//! 4. The service ([`handlers`]) picks the site by listener and `Host` — returned with the
//!    answer as an [`http::conn::SiteRef`], which the request carries to its HSTS line and its
//!    access-log line — the app by path, and the handler answers into a [`http::Responder`]: [`handlers::static_files`],
//!    [`handlers::dynamic`] or [`handlers::cpu`]. On an address several pools share, a
//!    request of another pool's app has its connection handed to that pool ([`handoff`]).
//! 5. The answers of every request in the buffer go out in one `write` (or `sendfile` for a
//!    large file), back in [`http::conn`].
//!
//! # The modules
//!
//! | module | owns | pure? |
//! | --- | --- | --- |
//! | [`cpuset`] | CPU sets and the cpu-list syntax | yes |
//! | [`units`] | durations, sizes, percentages | yes |
//! | [`topology`] | nodes, CPUs, caches, NICs as read from sysfs | parsing yes; reading in `topology::sysfs` |
//! | [`config`] | the TOML config, defaults, validation | yes, but for checking that each `root` is a directory |
//! | [`placement`] | which worker goes where | yes |
//! | [`os`] | every syscall: affinity, memory policy, sockets, processes, cgroups | no — the only `unsafe` |
//! | [`http`] | the HTTP/1.1 engine: parsing, chunked bodies, responses, limits, the connection loop | parsing yes; I/O in `http::conn` |
//! | [`handoff`] | passing a connection to another pool's thread on a shared address | no |
//! | [`handlers`] | routing, static files, the dynamic page, the CPU-heavy page | no: static files stat, open and read on the event loop, as nginx does |
//! | [`server`] | the master, the supervisor, the workers, the admin endpoint | decisions yes (`lifecycle`, `soft`, `steering`); the rest no |
//! | [`bench`](mod@bench) | the load generator and its mergeable results | no |
//! | [`scale`] | the scaling experiment: plan, runner, report | plan yes |
//! | [`nic`] | NIC queue interrupts on their node: plan and apply | plan yes |
//! | [`doctor`] | the OS settings serving needs | checks yes; reading inputs no |
//! | [`cli`] | subcommands: arguments and output | no |

pub(crate) mod async_io;
pub mod bench;
pub mod cli;
pub mod config;
pub mod cpuset;
pub mod doctor;
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
