//! The pools' shared TLS session tables, for HTTP/3's 0-RTT (`[server] http3_early_data`):
//! one per pool — a tenant's sessions are never in another's — made when the pool's first
//! worker starts and inherited by every worker of the pool started after (see
//! `crate::tls::session_table`). A table is kept for the master's life: a pool reloaded,
//! restarted or woken finds its clients' sessions.
//!
//! Owns: the tables' files. Must not touch: what is in them (the workers').

use crate::server::log;
use crate::tls::session_table::{SLOTS, SLOT_WORDS};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// By pool: its table's file.
#[derive(Default)]
pub(super) struct SessionTables(HashMap<String, OwnedFd>);

impl SessionTables {
    /// The descriptor of `pool`'s table, made now if it has none; `None` when it cannot be
    /// made (said: its workers keep sessions each to itself).
    pub(super) fn for_pool(&mut self, pool: &str) -> Option<RawFd> {
        if let Some(fd) = self.0.get(pool) {
            return Some(fd.as_raw_fd());
        }
        match crate::os::shared_memory::create(
            &format!("espalier-sessions-{pool}"),
            SLOTS * SLOT_WORDS,
        ) {
            Ok(fd) => {
                let raw = fd.as_raw_fd();
                self.0.insert(pool.to_string(), fd);
                Some(raw)
            }
            Err(e) => {
                log("master", format!("pool `{pool}`: cannot make its shared session table ({e}); 0-RTT resumes only on the worker that issued the ticket"));
                None
            }
        }
    }
}
