//! `[server.cluster]`'s settings: the etcd cluster several espalier servers share their
//! sites, pools and upstream groups through, and where each keeps its copy of them.
//!
//! Owns: [`ClusterSpec`], pure data, and [`KINDS`], the parts a fleet shares (the local file
//! keeps `[server]`: addresses, admin, CPUs are each machine's). Must not touch: talking to
//! etcd or mirroring it (`crate::server::cluster`).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The copy's folder when `folder` is not written: beside the config file.
pub const DEFAULT_FOLDER: &str = "cluster";

/// The parts the fleet shares, by their key's folder under the prefix (and the copy's
/// folder): `pools/NAME`, `upstreams/NAME`, `sites/NAME`, in the order they are read.
pub const KINDS: [(&str, &str); 3] = [
    ("pools", "pool"),
    ("upstreams", "upstream"),
    ("sites", "site"),
];

/// `[server.cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// etcd's client URLs (`http://10.0.0.1:2379`, or `https://`).
    pub endpoints: Vec<String>,
    /// Every key of this fleet starts with it (`/espalier/prod`), without a trailing `/`.
    pub prefix: String,
    /// This member's name among the fleet's (default: the host's name).
    pub node: String,
    /// The copy of the shared parts (`pools/`, `upstreams/`, `sites/`: one file each), read
    /// as included files are, and served from when etcd cannot be reached.
    pub folder: PathBuf,
    /// etcd's user and the file holding its password, when etcd asks for one.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// The CA that signed etcd's certificate (`https://` endpoints), when not the system's.
    pub ca: Option<PathBuf>,
}

impl ClusterSpec {
    /// The key of part `name` of `kind` (`sites`).
    pub fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{name}", self.prefix)
    }
}

/// Whether `name` can be a part's key and file name: letters, digits, `.`, `-`, `_`, not
/// starting with a dot.
pub fn is_part_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 200
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}
