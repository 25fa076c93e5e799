//! Validation of `[server.cluster]`: etcd's URLs, the fleet's prefix, this member's name, the
//! copy's folder and etcd's credentials.
//!
//! Owns: those keys' rules and defaults. Must not touch: what the cluster does (see
//! [`crate::config::cluster`]).

use super::super::cluster::{is_part_name, key_lines, ClusterSpec, DEFAULT_FOLDER};
use super::super::locate::Seg;
use super::super::raw::RawCluster;
use super::Validator;
use std::path::Path;

/// This machine's host name, the default member name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|n| n.trim().to_string())
        .ok()
        .filter(|n| is_part_name(n))
        .unwrap_or_else(|| "espalier".into())
}

impl Validator {
    pub(super) fn cluster(&mut self, raw: RawCluster, base: &Path) -> Option<ClusterSpec> {
        let key = |k: &'static str| [Seg::Key("server"), Seg::Key("cluster"), Seg::Key(k)];
        let endpoints = raw.etcd.unwrap_or_default();
        if endpoints.is_empty() {
            self.err(&key("etcd"), "is missing: etcd's client URLs, like etcd = [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\", \"http://10.0.0.3:2379\"]");
            return None;
        }
        for url in &endpoints {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            let ok = rest.is_some_and(|r| {
                r.rsplit_once(':').is_some_and(|(host, port)| {
                    !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
                })
            });
            if !ok {
                self.err(&key("etcd"), format!("`{url}` is not an etcd client URL; write it like \"http://10.0.0.1:2379\" (scheme, host, port, no path)"));
            }
        }
        let prefix = raw.prefix.unwrap_or_else(|| "/espalier".into());
        let prefix_ok = prefix.starts_with('/')
            && prefix.len() > 1
            && !prefix.ends_with('/')
            && !prefix.contains("//")
            && prefix.bytes().all(|b| b.is_ascii_graphic());
        if !prefix_ok {
            self.err(&key("prefix"), format!("`{prefix}` is not a key prefix; write one like \"/espalier/prod\" (starting with /, not ending with one, no spaces)"));
        }
        let node = raw.node.unwrap_or_else(host_name);
        if !is_part_name(&node) {
            self.err(
                &key("node"),
                format!("`{node}` cannot name a member; use letters, digits, `.`, `-` and `_`"),
            );
        }
        let folder = base.join(raw.folder.as_deref().unwrap_or(DEFAULT_FOLDER));
        if folder.exists() && !folder.is_dir() {
            self.err(&key("folder"), format!("{} is a file; name a folder for the fleet's sites, pools and upstreams (espalier makes it)", folder.display()));
        }
        if raw.user.is_some() != raw.password_file.is_some() {
            self.err(&key("user"), "and password_file go together: etcd's user and the file holding its password; write both or neither");
        }
        let password_file = raw.password_file.map(|p| base.join(p));
        if let Some(p) = &password_file {
            if let Err(e) = std::fs::read(p) {
                self.err(&key("password_file"), format!("{} cannot be read ({e}); fix the path (relative paths are from the config file's folder)", p.display()));
            }
        }
        let ca = raw.ca.map(|p| base.join(p));
        if let Some(p) = &ca {
            if !endpoints.iter().any(|u| u.starts_with("https://")) {
                self.err(&key("ca"), "checks etcd's certificate, and every etcd URL is http://; use https:// URLs or remove it");
            } else if let Err(e) = std::fs::read(p) {
                self.err(
                    &key("ca"),
                    format!("{} cannot be read ({e}); fix the path", p.display()),
                );
            }
        }
        let secret_file = raw.secret_file.map(|p| base.join(p));
        if let Some(p) = &secret_file {
            let read = std::fs::read_to_string(p).map_err(|e| format!("{} cannot be read ({e}); fix the path, or make it: openssl rand -hex 32 > {} (the same on every member, mode 600)", p.display(), p.display()));
            if let Err(why) =
                read.and_then(|t| key_lines(&t).map_err(|e| format!("{}: {e}", p.display())))
            {
                self.err(&key("secret_file"), why);
            }
        }
        Some(ClusterSpec {
            secret_file,
            endpoints,
            prefix,
            node,
            folder,
            user: raw.user,
            password_file,
            ca,
        })
    }

    /// A fleet whose members order certificates shares them, and their keys travel sealed
    /// with the fleet's key: without `secret_file` each member would order every name.
    pub(super) fn fleet_orders(&mut self, cluster: &ClusterSpec) {
        if cluster.secret_file.is_none() {
            let key = [
                Seg::Key("server"),
                Seg::Key("cluster"),
                Seg::Key("secret_file"),
            ];
            self.err(&key, "is missing, and [server.acme] orders certificates: a fleet orders each name once and shares its private key sealed with the fleet's key; make one with `openssl rand -hex 32 > fleet.key` (the same file on every member, mode 600) and set secret_file = \"fleet.key\"");
        }
    }
}
