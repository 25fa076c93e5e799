//! `include = ["sites.d/*.toml"]`: a hoster's one file per site. The main file names glob
//! patterns (relative to its folder); each file they match adds its `[[pool]]`s and
//! `[[site]]`s, in the order of the patterns, then of the file names.
//!
//! Owns: finding and reading the included files (through `file_memo`, which keeps the ones
//! unchanged since), and remembering where each pool and site was written, so that an error
//! names the included file, its line and its key there.
//! Must not touch: what the pools and sites mean (that is `validate`).
//!
//! With `[server.cluster]`, the copy of the fleet's shared parts (`pools/`, `upstreams/`,
//! `sites/` in its folder) is included after the file's own patterns.
//!
//! An included file holds pools and sites only: `[server]` and `include` belong to the main
//! file (one place for server-wide settings, no include chains to follow). A pattern that
//! matches nothing is fine (an empty `sites.d/` is a hoster's first day); a name without a
//! wildcard must exist, as in nginx.

use super::error::{syntax_error, ConfigError, ConfigErrors};
use super::locate::{Locator, Seg};
use super::raw::RawConfig;
use std::path::{Path, PathBuf};

/// Texts that stand in for files (an edit through the configuration API, validated before it
/// is written): a path's new text, or `None` for a file the edit removes.
pub type Overlay = std::collections::HashMap<PathBuf, Option<String>>;

/// A file the config was read from: its name in errors, and its key → line map.
pub(super) struct Source {
    pub file: String,
    pub locator: Locator,
}

/// The main file and its included files merged into one raw config, with each pool's and
/// site's file (an index into `sources`) and index within that file.
pub(super) struct Gathered {
    pub raw: RawConfig,
    pub sources: Vec<Source>,
    pub pool_origin: Vec<(usize, usize)>,
    pub site_origin: Vec<(usize, usize)>,
    pub upstream_origin: Vec<(usize, usize)>,
    /// The included files merged, in the order of `sources` after the main file's.
    pub files: Vec<Included>,
}

/// An included file as read: its path, its text (shared with `file_memo`'s), and whether it
/// is a fleet's shared part (which may hold `[[upstream]]`s).
pub(super) struct Included {
    pub path: PathBuf,
    pub text: std::sync::Arc<str>,
    pub shared: bool,
}

/// The files `main`'s `include` patterns (and a fleet's copy) name, relative to `base`, in
/// the order they are merged, each once — by path, and by inode (a second path to a file
/// read, or the main file itself) — with their texts; and the errors of patterns and reads.
pub(super) fn included(
    main: &RawConfig,
    main_source: &Source,
    main_path: &Path,
    base: &Path,
    overlay: &Overlay,
) -> (Vec<Included>, Vec<ConfigError>) {
    let mut patterns = main.include.clone().unwrap_or_default();
    // A fleet's shared parts, as the cluster's copy holds them (`[server.cluster]`): their
    // files may hold `[[upstream]]`s too.
    let fleet = (main.server.as_ref().and_then(|s| s.cluster.as_ref()))
        .map(|c| fleet_folder(base, c.folder.as_deref()));
    patterns.extend(fleet.iter().flat_map(|f| fleet_patterns(f)));
    let (mut files, mut errors) = (Vec::new(), Vec::new());
    let main_node = std::fs::metadata(main_path).map(|m| super::file_memo::Stamp::of(&m).node);
    let mut seen: rustc_hash::FxHashSet<_> = main_node.into_iter().collect();
    let mut read = rustc_hash::FxHashSet::default();
    // Each path in a set: for a file two patterns match (read once), and for the kept texts'
    // pruning (`keep_only`, a reload's). One pattern within an API change needs neither, and
    // 10,000 paths copied and hashed cost every change.
    let track = patterns.len() > 1 || !super::file_memo::trusting();
    for (k, pattern) in patterns.iter().enumerate() {
        let paths = match matching_files(pattern, base, overlay) {
            Ok(f) => f,
            Err(message) => {
                errors.push(ConfigError {
                    file: main_source.file.clone(),
                    line: (main_source.locator).line(&[Seg::Key("include"), Seg::Index(k)]),
                    key: format!("include[{k}]"),
                    message,
                });
                continue;
            }
        };
        for path in paths {
            // A file two patterns match is read once; the main file never again.
            if track && !read.insert(path.clone()) {
                continue;
            }
            match text_of(&path, overlay) {
                Ok((_, Some(node))) if !seen.insert(node) => {}
                Ok((text, _)) => {
                    let shared = fleet.as_deref().is_some_and(|f| path.starts_with(f));
                    files.push(Included { path, text, shared });
                }
                Err(e) => errors.push(e),
            }
        }
    }
    if track {
        super::file_memo::keep_only(base, &read);
    }
    (files, errors)
}

/// Reads the files `main`'s `include` patterns name (relative to `base`) and merges them.
pub(super) fn gather(
    mut main: RawConfig,
    main_source: Source,
    main_path: &Path,
    base: &Path,
    overlay: &Overlay,
) -> Result<Gathered, ConfigErrors> {
    let origins = |file: usize, n: usize| (0..n).map(move |i| (file, i));
    let (files, mut errors) = included(&main, &main_source, main_path, base, overlay);
    main.include = None;
    let mut g = Gathered {
        pool_origin: origins(0, main.pool.len()).collect(),
        site_origin: origins(0, main.site.len()).collect(),
        upstream_origin: origins(0, main.upstream.len()).collect(),
        sources: vec![main_source],
        raw: RawConfig::default(),
        files: Vec::new(),
    };
    for f in files {
        match parse_one(&f.path, &f.text, f.shared) {
            Ok((raw, source)) => {
                let file = g.sources.len();
                g.pool_origin.extend(origins(file, raw.pool.len()));
                g.site_origin.extend(origins(file, raw.site.len()));
                g.upstream_origin.extend(origins(file, raw.upstream.len()));
                main.pool.extend(raw.pool);
                main.site.extend(raw.site);
                main.upstream.extend(raw.upstream);
                g.sources.push(source);
                g.files.push(f);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    g.raw = main;
    Ok(g)
}

/// The folder of a fleet's copy (`[server.cluster] folder`, relative to `base`).
pub(super) fn fleet_folder(base: &Path, folder: Option<&str>) -> PathBuf {
    base.join(folder.unwrap_or(super::cluster::DEFAULT_FOLDER))
}

/// The patterns of a fleet's copy's files, in the order they are read: pools, upstream
/// groups, sites.
pub(super) fn fleet_patterns(folder: &Path) -> Vec<String> {
    (super::cluster::KINDS.iter())
        .map(|(kind, _)| format!("{}/{kind}/*.toml", folder.display()))
        .collect()
}

/// The files `pattern` names, sorted (as `overlay` would leave them). A pattern without a
/// wildcard must name a file.
pub(super) fn matching_files(
    pattern: &str,
    base: &Path,
    overlay: &Overlay,
) -> Result<Vec<PathBuf>, String> {
    let full = base.join(pattern);
    let text = full
        .to_str()
        .ok_or_else(|| format!("`{pattern}` is not valid UTF-8; rename the folder"))?;
    if let Some(text) = overlay.get(&full) {
        return match text {
            Some(_) => Ok(vec![full]),
            None => Err(format!(
                "{} would be removed; keep it, or take it out of `include`",
                full.display()
            )),
        };
    }
    if !pattern.contains(['*', '?', '[']) {
        return match std::fs::metadata(&full) {
            Ok(m) if m.is_file() => Ok(vec![full]),
            Ok(_) => Err(format!("{} is not a file; name a file, or a pattern like \"sites.d/*.toml\"", full.display())),
            Err(e) => Err(format!("cannot read {} ({e}); create it, fix the name, or use a pattern like \"sites.d/*.toml\" (which may match nothing)", full.display())),
        };
    }
    // Hidden files (an editor's `.shop.toml`) are not sites: `*` does not match a leading dot.
    let options = super::file_memo::name_options();
    let bad = |e: glob::PatternError| {
        format!("`{pattern}` is not a file pattern ({e}); write it like \"sites.d/*.toml\"")
    };
    // Editors' and package managers' leftovers (`a.toml~`, `.a.toml.swp`) are not matched
    // by `*.toml`; folders never are files to read.
    let mut files = match in_one_folder(&full) {
        Some((folder, name)) => {
            let matcher = glob::Pattern::new(name).map_err(bad)?;
            let sorted = super::file_memo::listed(folder, name, || {
                let mut files = files_in(folder, &matcher, options)?;
                // One folder: its names' order is the paths' — compared as the paths'
                // bytes (the folder a prefix of each), not component by component, nor by
                // each name found again: 10,000 of them.
                files.sort_unstable_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
                Ok(files)
            })?;
            sorted.to_vec()
        }
        None => {
            let mut files = Vec::new();
            for p in glob::glob_with(text, options).map_err(bad)? {
                let p =
                    p.map_err(|e| format!("cannot read {} ({})", e.path().display(), e.error()))?;
                if p.is_file() {
                    files.push(p);
                }
            }
            files.sort();
            files
        }
    };
    if overlay.is_empty() {
        return Ok(files);
    }
    // The overlay's few files looked for in the sorted listing, not the listing's 10,000
    // in the overlay (each a hash of its path's components): a site added at 10,000 sites
    // spent more on those than on the site.
    for (path, text) in overlay {
        if let (Ok(at), None) = (files.binary_search(path), text) {
            files.remove(at);
        }
    }
    if let Ok(matcher) = glob::Pattern::new(text) {
        let made = (overlay.iter())
            .filter(|(p, t)| t.is_some() && files.binary_search(p).is_err())
            .filter(|(p, _)| matcher.matches_path_with(p, options));
        let mut made: Vec<PathBuf> = made.map(|(p, _)| p.clone()).collect();
        // One put in its place, as a panel's change makes; a whole document loaded makes
        // thousands, merged by one sort.
        match made.len() {
            0 => {}
            1 => {
                let path = made.remove(0);
                let at = files.binary_search(&path).unwrap_or_else(|at| at);
                files.insert(at, path);
            }
            _ => {
                files.extend(made);
                files.sort();
            }
        }
    }
    Ok(files)
}

/// The folder and file-name pattern of `full` when only its last part has wildcards
/// (`sites.d/*.toml`, a hoster's usual pattern).
fn in_one_folder(full: &Path) -> Option<(&Path, &str)> {
    let folder = full.parent()?;
    let name = full.file_name()?.to_str()?;
    let wild = |t: &str| t.contains(['*', '?', '[']);
    // `**` (any depth) is glob's to follow.
    (!wild(&folder.to_string_lossy()) && !name.contains("**")).then_some((folder, name))
}

/// The files of `folder` whose names `name` matches: the folder's listing says which are
/// files (its entries' types), so that 10,000 sites' files are not each looked up again as
/// `glob` does (a symbolic link is followed, to what it names). A folder that is not there
/// matches nothing, as `glob` says.
fn files_in(
    folder: &Path,
    name: &glob::Pattern,
    options: glob::MatchOptions,
) -> Result<Vec<PathBuf>, String> {
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {} ({e})", folder.display())),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {} ({e})", folder.display()))?;
        let file_name = entry.file_name();
        let Some(text) = file_name.to_str() else {
            continue;
        };
        if !name.matches_with(text, options) {
            continue;
        }
        let path = entry.path();
        let is_file = match entry.file_type() {
            Ok(t) if t.is_symlink() => path.is_file(),
            Ok(t) => t.is_file(),
            Err(_) => path.is_file(),
        };
        if is_file {
            files.push(path);
        }
    }
    Ok(files)
}

/// An included file's text (an overlay's, or the file's through `file_memo`), and the file
/// itself (device and inode) when it is on disk: two paths to one file are read once.
fn text_of(
    path: &Path,
    overlay: &Overlay,
) -> Result<(std::sync::Arc<str>, Option<super::file_memo::Node>), ConfigError> {
    match overlay.get(path) {
        Some(Some(text)) => Ok((text.as_str().into(), None)),
        _ => super::file_memo::read(path)
            .map(|(text, stamp)| (text, Some(stamp.node)))
            .map_err(|e| ConfigError {
                file: path.display().to_string(),
                line: None,
                key: String::new(),
                message: format!("cannot read the included file: {e}"),
            }),
    }
}

/// One included file's text, parsed; `[server]` or `include` there is an error naming it,
/// and `[[upstream]]` but in a fleet's `shared` part.
pub(super) fn parse_one(
    path: &Path,
    text: &str,
    shared: bool,
) -> Result<(RawConfig, Source), ConfigError> {
    let file = path.display().to_string();
    let locator = Locator::new(text);
    // The tables of a text read before (and found valid) are the same tables: cloned, not
    // parsed again.
    if let Some(raw) = super::file_memo::parsed(path, text) {
        return Ok((raw, Source { file, locator }));
    }
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| syntax_error(&file, text, &locator, &e))?;
    for (key, present) in [
        ("server", raw.server.is_some()),
        ("include", raw.include.is_some()),
        ("upstream", !raw.upstream.is_empty() && !shared),
    ] {
        if present {
            return Err(ConfigError {
                line: locator.line(&[Seg::Key(key)]),
                file,
                key: key.into(),
                message: format!("an included file holds [[pool]]s and [[site]]s only; move `{key}` to the main config file"),
            });
        }
    }
    super::file_memo::keep_parsed(path, text, &raw);
    Ok((raw, Source { file, locator }))
}
