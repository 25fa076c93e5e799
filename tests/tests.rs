//! The integration suite: one test binary, a module per file (as ripgrep's `tests/tests.rs`).
//!
//! One binary instead of one per file: the library and its dependencies are linked once, not
//! forty times; the test threads take the next test of any file, so a file's slow last test
//! no longer holds the run while the other core idles; and `io_paths` runs this one binary
//! again on the other I/O path. `Cargo.toml` sets `autotests = false`, so a new file here is
//! a module: add its `mod` line below. One file is a binary of its own: `numa_qemu.rs`, whose
//! emulated guest reads its CPUs' load and needs the host's cores to itself.
//!
//! Every test starts the real `espalier` binary (`CARGO_BIN_EXE_espalier`) and real
//! programs beside it; `common` holds the harness they share.

mod common;

mod access;
mod access_log;
mod acme;
mod acme_dns;
mod acme_on_demand;
mod admin_page;
mod app_liveness;
mod apps;
mod apps_proxy;
mod auth_request;
mod backpressure;
mod basic_auth;
mod bench;
mod buffering;
mod cert_store;
mod cli;
mod client_certs;
mod compression;
mod config_api;
mod deb;
mod differential;
mod dispatcher;
mod fleet;
mod front_controller;
mod fuzz_request_path;
mod h2_bodies;
mod h2_limits;
mod handoff_loop;
mod hardening;
mod hosting;
mod http3;
mod identity;
mod isolation;
mod key_exchange;
mod limits;
mod metrics;
mod nic_doctor;
mod on_demand;
mod operations;
mod pool_limits;
mod pools;
mod proxy_protocol;
mod response_cache;
mod robustness;
mod scale;
mod serve;
mod site_answers;
mod source;
mod static_beside_app;
mod systemd;
mod tenants;
mod ticket_keys;
mod tls;
mod tracing;
mod upgrade;
mod upstream_faults;
mod upstreams;
mod upstreams_h2;
mod upstreams_more;
mod websocket_streams;
mod wordpress;
