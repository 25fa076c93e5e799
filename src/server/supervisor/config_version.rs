//! The configuration API's state in the master: the files' version (its `ETag`, in
//! `/status`), the last change and by whom, and the writes whose answers wait for their
//! change to serve (see `super::config_api`).
//!
//! Owns: [`ConfigApi`]. Must not touch: the files (read through `config::document`).

use crate::config::document::version_on_disk;
use crate::config::Config;
use crate::server::admin::AdminReply;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a write's answer waits for the workers it started to be ready.
pub(super) const SERVING_WITHIN: Duration = Duration::from_secs(30);

/// The configuration's version as last read, its last change, and the writes applied whose
/// answers wait for the change to serve.
#[derive(Default)]
pub(super) struct ConfigApi {
    pub(super) version: Option<String>,
    pub(super) changed: Option<(u64, String)>,
    pub(super) waiting: Vec<(AdminReply, oneshot::Sender<AdminReply>, Instant)>,
}

impl ConfigApi {
    /// The version of the files `config` was read from (at the start).
    pub(super) fn read_version(&mut self, config: &Config) {
        let version = config.source.as_deref().map(version_on_disk);
        self.version = version.and_then(Result::ok);
    }

    /// A configuration applied, of `version`, changed by `who` (`reload`, or the API's
    /// caller).
    pub(super) fn applied(&mut self, version: Option<String>, who: &str) {
        self.version = version;
        self.changed = Some((super::samples::unix_now() as u64, who.to_string()));
    }

    /// What `/status` says of it.
    pub(super) fn state(&self) -> Option<crate::server::status::ConfigState> {
        Some(crate::server::status::ConfigState {
            version: self.version.clone()?,
            changed_unix: self.changed.as_ref().map(|c| c.0),
            changed_by: self.changed.as_ref().map(|c| c.1.clone()),
        })
    }
}
