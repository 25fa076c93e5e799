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
    /// The fleet's own key file (`secret_file`): what seals the secrets the members share
    /// through etcd (session ticket keys), which are never written there in the clear.
    /// `None`: each member keeps its own.
    pub secret_file: Option<PathBuf>,
}

impl ClusterSpec {
    /// The key of the fleet's session ticket secrets (sealed with `secret_file`'s key).
    pub fn tickets_key(&self) -> String {
        format!("{}/tls/ticket-secrets", self.prefix)
    }

    /// The key of the fleet's certificate pair of store stem `stem` (a name's files,
    /// `certs::store::stem`): its chain and its sealed key.
    pub fn cert_key(&self, stem: &str) -> String {
        format!("{}/certs/{stem}", self.prefix)
    }

    /// The key of ACME's `what` (`locks`, `proofs`, `seen`, `accounts`, `failed`, `started`)
    /// at `rest`: a name's order lock, a challenge's proof file (and who has it), an
    /// account's credentials, a name's failed order, an on-demand order of the hour.
    pub fn acme_key(&self, what: &str, rest: &str) -> String {
        format!("{}/acme/{what}/{rest}", self.prefix)
    }

    /// The key of part `name` of `kind` (`sites`).
    pub fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{name}", self.prefix)
    }
}

/// Where part `name` of kind `kind` (an index into [`KINDS`]) is copied, in the copy's
/// `folder`: `folder/sites/NAME.toml`.
pub fn file_of(folder: &std::path::Path, kind: usize, name: &str) -> PathBuf {
    folder.join(KINDS[kind].0).join(format!("{name}.toml"))
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

/// The keys of a fleet key file's `text`: one per line, 64 hex digits each (`openssl rand
/// -hex 32`), the first sealing; `#` starts a comment. `Err` says what is wrong and the fix.
pub fn key_lines(text: &str) -> Result<Vec<[u8; 32]>, String> {
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bytes = crate::os::private_dir::unhex(line);
        let key: [u8; 32] = bytes.and_then(|b| b.try_into().ok()).ok_or_else(|| {
            format!(
                "line {}: not a key of 64 hex digits; make one with `openssl rand -hex 32`",
                n + 1
            )
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("holds no key; make one with `openssl rand -hex 32`".into());
    }
    Ok(keys)
}
