//! The espalier configuration: typed settings with their defaults, loading from TOML, and
//! validation against the machine's topology.
//!
//! Owns: what every key means and defaults to (documented on each field and in docs/reference.md),
//! and the one-line error messages (`FILE:LINE: key: what is wrong; how to fix it`).
//! Must not touch: placement decisions (that is [`crate::placement`]) or any syscall; the
//! topology it validates against is passed in. Not pure: it looks at the file system beyond
//! reading the file itself — each site's `root` and each app pool's `directory` must be
//! directories, its `command` an executable program, its certificate and key files a chain
//! and key that belong together (loaded by [`crate::certs`]), a user named by `user` must
//! exist — checked here so that `check` refuses what `serve` could not use, with the key's
//! line.
//!
//! The files: `model` (the typed settings and their defaults; `[server.acme]`'s in
//! `acme_settings`), `site` (a site's and a path's
//! typed settings), [`upstream`] (an upstream group's), `raw` (the TOML as written, untyped), `validate` (raw → typed,
//! collecting every error), `error` (the one-line errors), `parse` (small grammars: bindings,
//! names, times of day), `locate` (key → line), `include` (the files `include` names, merged,
//! each pool and site remembering its file), `file_memo` (the files read before, kept while
//! unchanged), `revise` (a change validated against the last validation), [`chain`] (the
//! site features' processing order, and which keys each step reads), [`isolation`] (a
//! pool's view of the filesystem),
//! [`document`] (the files as the configuration API reads and edits them), [`tracing`]
//! (`[server.tracing]`), [`cluster`] (`[server.cluster]`: the fleet's etcd and its copy).
//! The configuration reference (docs/reference.md) documents every key.

mod acme_settings;
pub mod chain;
pub mod cluster;
pub mod document;
mod error;
mod file_memo;
mod include;
pub mod isolation;
mod locate;
mod model;
mod parse;
mod raw;
mod revise;
mod site;
pub mod tracing;
pub mod upstream;
mod validate;

pub use acme_settings::*;
pub use error::{ConfigError, ConfigErrors};
pub use file_memo::{files_read_once, files_written, files_written_here};
pub use include::Overlay;
pub use model::*;
pub use parse::parse_binding;
pub use site::*;

use crate::topology::Topology;
use locate::Locator;
use raw::RawConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

impl Config {
    /// The configuration used when no file is given: one pool with a worker per NUMA node,
    /// one site on `listen` serving `root` (or the built-in welcome page).
    pub fn builtin(listen: SocketAddr, root: Option<PathBuf>) -> Self {
        let mut pool = PoolSpec::with_defaults("default");
        pool.processes = Processes::Auto;
        Config {
            source: None,
            server: ServerSettings::default(),
            pools: vec![std::sync::Arc::new(pool)],
            sites: vec![std::sync::Arc::new(SiteSpec {
                name: "default".into(),
                bindings: vec![Binding {
                    addr: listen,
                    host: None,
                    tls: false,
                }],
                root,
                index: vec![site::DEFAULT_INDEX.into()],
                follow_symlinks: false,
                autoindex: None,
                access_log: None,
                proxy_protocol: false,
                proxy_protocol_from: Vec::new(),
                tls: None,
                client_certs: None,
                hsts: None,
                alt_svc: None,
                redirect_to_https: false,
                headers: Vec::new(),
                cache: Vec::new(),
                rules: Vec::new(),
                errors: Vec::new(),
                replace_app_errors: false,
                compress: Vec::new(),
                access: AccessList::default(),
                trusted_proxies: Vec::new(),
                deny_action: DenyAction::default(),
                limit: None,
                metrics: false,
                max_body_size: None,
                response: Default::default(),
                apps: vec![AppSpec::new(
                    "/".into(),
                    "default".into(),
                    HandlerKind::Static,
                )],
            })],
            upstreams: Vec::new(),
        }
    }

    /// Reads and validates `path` against `topology`.
    pub fn load(path: &Path, topology: &Topology) -> Result<Config, ConfigErrors> {
        Config::parse(&read_main(path)?, path, topology)
    }

    /// [`Config::load`], kept as the last validation of `path`'s files (the server's start,
    /// its reloads): the next change through the configuration API is validated against it
    /// ([`Config::revise_with`]), the first one too.
    pub fn load_kept(path: &Path, topology: &Topology) -> Result<Config, ConfigErrors> {
        let text = read_main(path)?;
        let (raw, base) = main_file(&text, path)?;
        validate_and_keep((&text, raw), path, &base, topology, &Overlay::default())
    }

    /// Validates config text; `path` names it in errors and anchors relative roots.
    pub fn parse(text: &str, path: &Path, topology: &Topology) -> Result<Config, ConfigErrors> {
        Config::parse_with(text, path, topology, &Overlay::default())
    }

    /// [`Config::parse`], the included files' texts taken from `overlay` where it has them
    /// (an edit validated before it is written: see [`document`]).
    pub fn parse_with(
        text: &str,
        path: &Path,
        topology: &Topology,
        overlay: &Overlay,
    ) -> Result<Config, ConfigErrors> {
        let (raw, base) = main_file(text, path)?;
        validate_whole((text, raw), path, &base, topology, overlay, false).map(|(c, _)| c)
    }

    /// [`Config::parse_with`] for a change of a few included files (the configuration API's):
    /// validated against the last validation this made of `path`'s files where it can be,
    /// in the time of the files changed rather than of all ([`revise`]'s doc says when it
    /// cannot, and what it does not look at again); whole otherwise. The same result, or
    /// the same errors, as [`Config::parse_with`].
    pub fn revise_with(
        text: &str,
        path: &Path,
        topology: &Topology,
        overlay: &Overlay,
    ) -> Result<Config, ConfigErrors> {
        let (raw, base) = main_file(text, path)?;
        if let Some((config, validated)) =
            revise::revise(path, (text, &raw), &base, topology, overlay)
        {
            if cfg!(debug_assertions) {
                if let Ok(whole) = Config::parse_with(text, path, topology, overlay) {
                    assert_eq!(
                        config, whole,
                        "a revised configuration differs from its whole validation"
                    );
                }
            }
            revise::keep(path, validated);
            return Ok(config);
        }
        validate_and_keep((text, raw), path, &base, topology, overlay)
    }

    pub fn pool(&self, name: &str) -> Option<&PoolSpec> {
        self.pools.iter().find(|p| p.name == name).map(|p| &**p)
    }
}

/// The main file's text, or the one line saying why it cannot be read.
fn read_main(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: path.display().to_string(),
            line: None,
            key: String::new(),
            message: format!("cannot read the config file: {e}"),
        }])
    })
}

/// The main file's tables, and the folder its relative paths start from.
fn main_file(text: &str, path: &Path) -> Result<(RawConfig, PathBuf), ConfigErrors> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let file = path.display().to_string();
        ConfigErrors(vec![error::syntax_error(
            &file,
            text,
            &Locator::new(text),
            &e,
        )])
    })?;
    // Paths in the file are relative to its folder, and made absolute here: an app runs
    // in its own working directory (a FastCGI script's path, an access log, a root must
    // mean the same there), and a bare file name's folder is the current one.
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let base = std::path::absolute(&folder).unwrap_or(folder);
    Ok((raw, base))
}

/// [`validate_whole`], kept as the last validation of `path` for [`Config::revise_with`].
fn validate_and_keep(
    main: (&str, RawConfig),
    path: &Path,
    base: &Path,
    topology: &Topology,
    overlay: &Overlay,
) -> Result<Config, ConfigErrors> {
    let (config, validated) = validate_whole(main, path, base, topology, overlay, true)?;
    if let Some(validated) = validated {
        revise::keep(path, validated);
    }
    Ok(config)
}

/// Every pool and site of `path` (its text and tables given) and of the files it includes,
/// validated; with it, when `keep`, what [`revise`] keeps of it.
fn validate_whole(
    (text, raw): (&str, RawConfig),
    path: &Path,
    base: &Path,
    topology: &Topology,
    overlay: &Overlay,
    keep: bool,
) -> Result<(Config, Option<revise::Validated>), ConfigErrors> {
    let file = path.display().to_string();
    let main = include::Source {
        file,
        locator: Locator::new(text),
    };
    let mut gathered = include::gather(raw, main, path, base, overlay)?;
    let counts = (gathered.raw.upstream.len(), gathered.raw.pool.len());
    let origins = (
        std::mem::take(&mut gathered.pool_origin),
        std::mem::take(&mut gathered.site_origin),
        gathered.upstream_origin,
    );
    let mut v = validate::Validator::new(gathered.sources, origins);
    let mut config = v.config(gathered.raw, base, topology);
    if !v.errors.is_empty() {
        return Err(ConfigErrors(v.errors));
    }
    config.source = Some(path.to_path_buf());
    let validated = keep.then(|| {
        revise::Validated::new(
            (text, base),
            gathered.files,
            (&v.pool_origin, &v.site_origin),
            &config,
            counts,
        )
    });
    Ok((config, validated))
}

#[cfg(test)]
mod tests;
