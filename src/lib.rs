//! espalier: a NUMA-aware web server and application-pool host for Linux.
//!
//! The crate is a library with a thin binary (`src/main.rs`) over it, like ripgrep:
//!
//! | module | owns | pure? |
//! | --- | --- | --- |
//! | [`cpuset`] | CPU sets and the cpu-list syntax | yes |
//! | [`units`] | durations, sizes, percentages | yes |
//! | [`topology`] | nodes, CPUs, caches, NICs as read from sysfs | parsing yes; reading in `topology::sysfs` |
//! | [`config`] | the TOML config, defaults, validation | yes |
//! | [`placement`] | which worker goes where | yes |
//! | [`os`] | every syscall: affinity, memory policy, sockets, processes | no — the only `unsafe` |
//! | [`http`] | the HTTP/1.1 engine: parsing, responses, limits | yes (I/O through tokio) |
//! | [`handlers`] | static files, the dynamic page, the CPU-heavy page | mostly |
//! | [`server`] | the master and the worker processes | no |
//! | [`cli`] | subcommands: argument handling and output | no |

pub mod bench;
pub mod cli;
pub mod config;
pub mod cpuset;
pub mod doctor;
pub mod handlers;
pub mod http;
pub mod nic;
pub mod os;
pub mod placement;
pub mod scale;
pub mod server;
pub mod topology;
pub mod units;

#[cfg(test)]
mod testutil;
