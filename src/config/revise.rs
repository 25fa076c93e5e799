//! One change validated against the last validation, not the whole configuration again: a
//! hosting panel changes one site of 10,000 through the configuration API, and validating
//! every site and pool again for it made each change linear in the sites (#57 asks for
//! O(changed sites)).
//!
//! What is kept ([`Validated`], per main file): the last configuration validated through
//! [`super::Config::revise_with`], the texts it was validated from, and which pools and
//! sites each file gave. A change is then validated so:
//!
//! - the main file must be the same text (its `[server]`, `include`, `[[upstream]]`s touch
//!   everything);
//! - the included files are listed and read as `include` does (through `file_memo`: a file
//!   whose metadata is unchanged is not read again) and compared with the kept texts: those
//!   the same give their kept pools and sites, cloned;
//! - a changed, new or removed file's pools and sites are validated alone, against the kept
//!   pools and upstream groups — a site by the pools it names, as a full validation would;
//! - then what no single part tells (names and bindings against the others', logs' owners,
//!   upstream groups used, HTTP/3, …) is checked over the whole result, as a full validation
//!   does it (`Validator::check_across`: indexes, a pass each).
//!
//! It gives way to the full validation — whose result and one-line errors are the
//! reference — whenever it cannot be sure to give the same result: more than
//! [`MAX_REVISED`] files changed, a file changed holds `[[upstream]]`s, a pool changed or was
//! removed (sites elsewhere may name it), the count of pools crosses the one where pools
//! start on demand by default, a path names a server address itself (its group is made by
//! the site), or anything is wrong at all. Unchanged parts are not looked at on disk again:
//! another site's root removed since is noticed by `reload` or `check`, not by this change.
//! Debug builds validate every revised configuration the full way too, and compare.
//!
//! Owns: the kept validation and when it may stand in. Must not touch: what is valid (that
//! is `validate`'s, called here) or which files are read (`include`'s).

use super::include::{self, Included, Source};
use super::locate::Locator;
use super::model::{Config, PoolSpec};
use super::raw::RawConfig;
use super::validate::{default_start, Origins, Validator};
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The files a change may touch and still be validated alone: a site and its pool, or a
/// batch's few; more is a panel's bulk load, validated whole.
pub(super) const MAX_REVISED: usize = 16;

/// A file of a kept validation: its text, and the pools and sites it gave (contiguous, in
/// the order read).
struct FileParts {
    text: Arc<str>,
    pools: Range<usize>,
    sites: Range<usize>,
}

/// A configuration validated from files, and what it was validated from.
pub(super) struct Validated {
    main_text: String,
    base: PathBuf,
    /// Its pools and sites written in the main file.
    main: (Range<usize>, Range<usize>),
    files: Vec<(PathBuf, FileParts)>,
    by_path: rustc_hash::FxHashMap<PathBuf, usize>,
    config: Config,
    /// The `[[upstream]]` groups written (the configuration's others are made by a path
    /// naming a server address itself).
    written_groups: usize,
    /// The `[[pool]]`s written (none: the built-in pool stands in).
    raw_pools: usize,
}

impl Validated {
    /// What a full validation of `main_text` and `files` gave (`config`, with `written_groups`
    /// and `raw_pools` counted before it), the files' pools and sites counted by their
    /// origins.
    pub(super) fn new(
        (main_text, base): (&str, &Path),
        files: Vec<Included>,
        (pool_origin, site_origin): (&Origins, &Origins),
        config: &Config,
        (written_groups, raw_pools): (usize, usize),
    ) -> Self {
        // Origins are (file, index there), file 0 the main one, in the order merged.
        let ranges = |origin: &[(usize, usize)], file: usize| {
            let start = origin.partition_point(|&(f, _)| f < file);
            start..origin.partition_point(|&(f, _)| f <= file)
        };
        let files: Vec<(PathBuf, FileParts)> = (files.into_iter().enumerate())
            .map(|(k, f)| {
                let parts = FileParts {
                    text: f.text,
                    pools: ranges(pool_origin, k + 1),
                    sites: ranges(site_origin, k + 1),
                };
                (f.path, parts)
            })
            .collect();
        Validated {
            main_text: main_text.to_string(),
            base: base.to_path_buf(),
            main: (ranges(pool_origin, 0), ranges(site_origin, 0)),
            by_path: (files.iter().enumerate())
                .map(|(k, (p, _))| (p.clone(), k))
                .collect(),
            files,
            config: config.clone(),
            written_groups,
            raw_pools,
        }
    }
}

fn kept() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Validated>> {
    static KEPT: std::sync::LazyLock<Mutex<HashMap<PathBuf, Validated>>> =
        std::sync::LazyLock::new(Default::default);
    KEPT.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keeps `validated` as the last validation of main file `path`.
pub(super) fn keep(path: &Path, validated: Validated) {
    kept().insert(path.to_path_buf(), validated);
}

/// The configuration of main file `path` (text `main_text`, parsed `raw_main`) validated
/// against its last kept validation, and the validation to keep; `None` when only a full
/// validation may tell (see the module's doc).
pub(super) fn revise(
    path: &Path,
    (main_text, raw_main): (&str, &RawConfig),
    base: &Path,
    topology: &crate::topology::Topology,
    overlay: &include::Overlay,
) -> Option<(Config, Validated)> {
    let mut kept = kept();
    let last = kept.get_mut(path)?;
    if last.main_text != main_text || last.base != base || last.raw_pools == 0 {
        return None;
    }
    // A path's own server address makes a group as its site is read: kept, it would stay
    // when the site changes.
    if last.config.upstreams.len() != last.written_groups {
        return None;
    }
    let main = Source {
        file: path.display().to_string(),
        locator: Locator::new(main_text),
    };
    let (files, errors) = include::included(raw_main, &main, path, base, overlay);
    if !errors.is_empty() {
        return None;
    }
    let changes = Changes::of(last, files)?;
    let mut v = Validator::new(vec![main], Default::default());
    v.know_server(&last.config.server);
    v.upstreams = last.config.upstreams.clone();
    let (pools, read) = changes.pools(last, &mut v, topology, base)?;
    let sites = changes.sites(last, &mut v, &pools, read, base)?;
    let mut config = Config {
        source: Some(path.to_path_buf()),
        server: last.config.server.clone(),
        pools,
        sites,
        upstreams: std::mem::take(&mut v.upstreams),
    };
    if config.upstreams.len() != last.written_groups {
        return None;
    }
    let written = last.written_groups;
    v.check_across(
        &last.config.server,
        written,
        &mut config.sites,
        &config.pools,
    );
    if !v.errors.is_empty() {
        return None;
    }
    let validated = changes.kept(last, &config);
    Some((config, validated))
}

/// A changed file's sites, still to read, by its path.
type SitesToRead = HashMap<PathBuf, Vec<super::raw::RawSite>>;

/// The included files now, each the same as kept or changed (new ones included), and the
/// kept files not among them.
struct Changes {
    files: Vec<(Included, Option<usize>)>,
    /// Each file's place among the kept files, whether the same or changed (`None`: new).
    was: Vec<Option<usize>>,
    removed: Vec<usize>,
    /// The files changed, as their pools and sites' tables.
    raw: HashMap<PathBuf, RawConfig>,
    raw_pools: usize,
}

impl Changes {
    /// `files` against `last`'s; `None` when more than [`MAX_REVISED`] changed, or a changed
    /// one does not parse (the full validation says why) or holds `[[upstream]]`s.
    fn of(last: &Validated, files: Vec<Included>) -> Option<Changes> {
        let mut seen = vec![false; last.files.len()];
        let mut changed = 0;
        let mut raw = HashMap::new();
        let mut raw_pools = last.main.0.len();
        let mut was = Vec::with_capacity(files.len());
        // The files come in the kept order but for the few the change added or removed: the
        // next kept one is compared first, and only a file that is not it is looked up.
        let mut next = 0;
        let files: Vec<(Included, Option<usize>)> = (files.into_iter())
            .map(|f| {
                let k = match last.files.get(next) {
                    Some((path, _)) if *path == f.path => Some(next),
                    _ => last.by_path.get(&f.path).copied(),
                };
                if let Some(k) = k {
                    next = k + 1;
                }
                was.push(k);
                let same = k.filter(|&k| {
                    let text = &last.files[k].1.text;
                    Arc::ptr_eq(text, &f.text) || **text == *f.text
                });
                if let Some(k) = k {
                    seen[k] = true;
                }
                match same {
                    Some(k) => raw_pools += last.files[k].1.pools.len(),
                    None => changed += 1,
                }
                (f, same)
            })
            .collect();
        let removed: Vec<usize> = (0..seen.len()).filter(|&k| !seen[k]).collect();
        if changed + removed.len() > MAX_REVISED {
            return None;
        }
        for (f, _) in files.iter().filter(|(_, same)| same.is_none()) {
            let (parsed, _) = include::parse_one(&f.path, &f.text, f.shared).ok()?;
            if !parsed.upstream.is_empty() {
                return None;
            }
            raw_pools += parsed.pool.len();
            raw.insert(f.path.clone(), parsed);
        }
        Some(Changes {
            files,
            was,
            removed,
            raw,
            raw_pools,
        })
    }

    /// The names of the pools the changed and removed files gave before.
    fn pools_before(&self, last: &Validated) -> HashSet<String> {
        let changed = (self.files.iter())
            .filter(|(_, same)| same.is_none())
            .filter_map(|(f, _)| last.by_path.get(&f.path).copied());
        (changed.chain(self.removed.iter().copied()))
            .flat_map(|k| last.config.pools[last.files[k].1.pools.clone()].iter())
            .map(|p| p.name.clone())
            .collect()
    }

    /// The pools: kept, or validated (a changed file's); `None` when one changed or was
    /// removed, two share a name, or the default start changes. With them, the changed
    /// files' sites, still to read.
    fn pools(
        &self,
        last: &Validated,
        v: &mut Validator,
        topology: &crate::topology::Topology,
        base: &Path,
    ) -> Option<(Vec<Arc<PoolSpec>>, SitesToRead)> {
        let start = default_start(self.raw_pools);
        if start != default_start(last.raw_pools) {
            return None;
        }
        let mut pools: Vec<Arc<PoolSpec>> = last.config.pools[last.main.0.clone()].to_vec();
        let mut read = Vec::new();
        let mut sites = HashMap::new();
        for (f, same) in &self.files {
            match same {
                Some(k) => {
                    pools.extend_from_slice(&last.config.pools[last.files[*k].1.pools.clone()])
                }
                None => {
                    let raw = self.raw.get(&f.path)?.clone();
                    for rp in raw.pool {
                        read.push(pools.len());
                        pools.push(Arc::new(v.pool(pools.len(), rp, topology, base, start)));
                    }
                    sites.insert(f.path.clone(), raw.site);
                }
            }
        }
        v.hide_other_pools(&mut pools);
        // A pool the change gives is new, or the same as before (from a changed file):
        // a changed or removed one may be named by sites the change does not read.
        let before = self.pools_before(last);
        let kept_pool = |name: &str| last.config.pools.iter().find(|p| p.name == name);
        let mut given = HashSet::new();
        for &k in &read {
            let pool = &pools[k];
            match kept_pool(&pool.name) {
                Some(old) if **old == **pool && before.contains(&pool.name) => {}
                Some(_) => return None,
                None => {}
            }
            given.insert(pool.name.as_str());
        }
        if before.iter().any(|name| !given.contains(name.as_str())) {
            return None;
        }
        v.pool_index = rustc_hash::FxHashMap::default();
        v.pool_index.reserve(pools.len());
        for (k, p) in pools.iter().enumerate() {
            if v.pool_index.insert(p.name.clone(), k).is_some() {
                return None;
            }
        }
        Some((pools, sites))
    }

    /// The sites: kept, or validated (a changed file's); `None` when two share a name.
    fn sites(
        &self,
        last: &Validated,
        v: &mut Validator,
        pools: &[std::sync::Arc<PoolSpec>],
        mut read: SitesToRead,
        base: &Path,
    ) -> Option<Vec<Arc<super::SiteSpec>>> {
        let mut sites = last.config.sites[last.main.1.clone()].to_vec();
        for (f, same) in &self.files {
            match same {
                Some(k) => {
                    sites.extend_from_slice(&last.config.sites[last.files[*k].1.sites.clone()])
                }
                None => {
                    for rs in read.remove(&f.path)? {
                        let site = v.site(sites.len(), rs, base, pools);
                        sites.push(Arc::new(site));
                    }
                }
            }
        }
        let mut names = rustc_hash::FxHashSet::default();
        names.reserve(sites.len());
        sites
            .iter()
            .all(|s| names.insert(s.name.as_str()))
            .then_some(sites)
    }

    /// The validation to keep: `config`, from these files. `last`'s index of its files by
    /// path is taken and renumbered, not made again (10,000 paths copied and hashed at every
    /// change).
    fn kept(self, last: &mut Validated, config: &Config) -> Validated {
        let mut now_at = vec![None; last.files.len()];
        for (k, was) in self.was.iter().enumerate() {
            if let Some(j) = was {
                now_at[*j] = Some(k);
            }
        }
        let mut by_path = std::mem::take(&mut last.by_path);
        by_path.retain(|_, k| now_at[*k].map(|now| *k = now).is_some());
        let mut files = Vec::with_capacity(self.files.len());
        let (mut pools, mut sites) = (last.main.0.end, last.main.1.end);
        for (f, same) in self.files {
            let (np, ns) = match same {
                Some(k) => {
                    let parts = &last.files[k].1;
                    (parts.pools.len(), parts.sites.len())
                }
                None => {
                    let raw = &self.raw[&f.path];
                    (raw.pool.len(), raw.site.len())
                }
            };
            let parts = FileParts {
                text: f.text,
                pools: pools..pools + np,
                sites: sites..sites + ns,
            };
            (pools, sites) = (pools + np, sites + ns);
            files.push((f.path, parts));
        }
        for (k, _) in (self.was.iter().enumerate()).filter(|(_, was)| was.is_none()) {
            by_path.insert(files[k].0.clone(), k);
        }
        debug_assert!(
            by_path.len() == files.len()
                && (files.iter().enumerate()).all(|(k, (p, _))| by_path.get(p) == Some(&k)),
            "the kept files' index, renumbered"
        );
        Validated {
            main_text: last.main_text.clone(),
            base: last.base.clone(),
            main: last.main.clone(),
            by_path,
            files,
            config: config.clone(),
            written_groups: last.written_groups,
            raw_pools: self.raw_pools,
        }
    }
}
