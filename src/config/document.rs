//! The configuration as its files hold it, for the configuration API (`/config` on the admin
//! endpoint, `espalier config`): read as JSON in the TOML file's own schema and names, and
//! changed one part at a time — `[server]`, one pool, one site, one upstream group, or the
//! whole document — with the comments and layout of every part not changed kept
//! (`toml_edit`). A new site or pool goes to a file of its own where the main file has
//! `include` (`sites.d/NAME.toml`, `sites.d/NAME.pool.toml`: a hoster's one file per site),
//! else to the main file.
//!
//! Owns: [`ConfigFiles`] (the texts, their [`ConfigFiles::version`], the edits, what changed);
//! the JSON ⇄ TOML translation and RFC 7396's merge patch are its child `json`'s, the
//! version's hash its child `version`'s. Must not touch: validity (the edited texts are validated
//! as `check` validates, by [`super::Config::parse_with`]) or writing the files (the
//! supervisor's, which applies them).

use serde_json::{Map, Value};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use toml_edit::{ArrayOfTables, DocumentMut, Item};

/// What a pool, site or upstream group is called in the file (`[[site]]`) and in the API's
/// paths (`/config/sites/NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pool,
    Site,
    Upstream,
}

impl Kind {
    pub fn key(self) -> &'static str {
        match self {
            Kind::Pool => "pool",
            Kind::Site => "site",
            Kind::Upstream => "upstream",
        }
    }

    /// Its place in `config::cluster::KINDS` (a fleet's key folder and copy's folder).
    fn fleet_index(self) -> usize {
        match self {
            Kind::Pool => 0,
            Kind::Upstream => 1,
            Kind::Site => 2,
        }
    }

    fn of_path(word: &str) -> Option<Kind> {
        match word {
            "pools" => Some(Kind::Pool),
            "sites" => Some(Kind::Site),
            "upstreams" => Some(Kind::Upstream),
            _ => None,
        }
    }
}

/// The part of the configuration a `/config…` path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Whole,
    Server,
    /// Every pool, site or upstream group (read only).
    All(Kind),
    One(Kind, String),
}

impl Part {
    /// The part `/config` + `rest` names; why not, in one line.
    pub fn parse(rest: &str) -> Result<Part, String> {
        let words: Vec<&str> = rest.split('/').filter(|w| !w.is_empty()).collect();
        let part = match words.as_slice() {
            [] => Part::Whole,
            ["server"] => Part::Server,
            [kind] => Part::All(Kind::of_path(kind).ok_or_else(|| unknown(rest))?),
            [kind, name] => {
                let kind = Kind::of_path(kind).ok_or_else(|| unknown(rest))?;
                if !super::parse::valid_name(name) {
                    return Err(format!(
                        "`{name}` is not a {} name: letters, digits, `-` and `_`, at most 64",
                        kind.key()
                    ));
                }
                Part::One(kind, name.to_string())
            }
            _ => return Err(unknown(rest)),
        };
        Ok(part)
    }
}

fn unknown(rest: &str) -> String {
    format!("no part of the configuration is at /config{rest}: /config, /config/server, /config/pools|sites|upstreams[/NAME]")
}

/// One file: its text as read (`None`: made by this edit), its document now, and whether the
/// edit removes it (an included file left with nothing).
struct File {
    path: PathBuf,
    /// Its text as read (shared with `file_memo`'s: 10,000 files are not copied).
    read: Option<std::sync::Arc<str>>,
    /// Its document, parsed when first needed: at 10,000 files, an edit of one site parses
    /// the few whose text names it, not all.
    parsed: std::cell::OnceCell<DocumentMut>,
    removed: bool,
    /// An edit changed its document: only such files are written out again (at 10,000
    /// files, rendering each for every edit would cost every edit all of them).
    touched: bool,
}

/// The main config file and the files its `include` patterns match.
pub struct ConfigFiles {
    files: Vec<File>,
    /// Where a new site or pool goes when `include` is used: the first pattern's folder and
    /// its file-name pattern (`*.toml`), and the whole pattern to match against.
    include: Option<(PathBuf, String, glob::Pattern)>,
    /// With `[server.cluster]`, the fleet's copy: every new pool, group and site goes there
    /// (`pools/NAME.toml`, `upstreams/NAME.toml`, `sites/NAME.toml`).
    fleet: Option<PathBuf>,
}

/// The folder of the fleet's copy the main file's `[server.cluster]` names, if it has one.
fn fleet_of(doc: &DocumentMut, base: &Path) -> Option<PathBuf> {
    let cluster = doc.get("server")?.get("cluster")?;
    let folder = cluster.get("folder").and_then(Item::as_str);
    Some(super::include::fleet_folder(base, folder))
}

impl ConfigFiles {
    /// Reads `main` and the files its `include` patterns match now.
    pub fn read(main: &Path) -> Result<ConfigFiles, String> {
        // Absolute, as the validator names the files an overlay stands in for.
        let main = &std::path::absolute(main).unwrap_or_else(|_| main.to_path_buf());
        let first = read_file(main.clone(), true)?;
        let base = main.parent().filter(|p| !p.as_os_str().is_empty());
        let base = base.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let patterns: Vec<String> = (first.doc().get("include"))
            .and_then(Item::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let fleet = fleet_of(first.doc(), &base);
        let shared = fleet.iter().flat_map(|f| super::include::fleet_patterns(f));
        let paths = included(
            main,
            &base,
            &patterns.iter().cloned().chain(shared).collect::<Vec<_>>(),
        )?;
        // Sized once: a file's entry holds room for its document, and 10,000 of them grown
        // push by push were copied a dozen times.
        let mut files = Vec::with_capacity(1 + paths.len());
        files.push(first);
        for path in paths {
            files.push(read_file(path, false)?);
        }
        let include = patterns.iter().find_map(|pattern| {
            let full = base.join(pattern);
            let (folder, name) = (full.parent()?, full.file_name()?);
            let whole = glob::Pattern::new(&full.to_string_lossy()).ok()?;
            Some((
                folder.to_path_buf(),
                name.to_string_lossy().into_owned(),
                whole,
            ))
        });
        Ok(ConfigFiles {
            files,
            include,
            fleet,
        })
    }

    /// The fleet's copy's folder (`[server.cluster]`), if the main file has one.
    pub fn fleet(&self) -> Option<&Path> {
        self.fleet.as_deref()
    }

    /// The version of what the files hold (see [`version_of`]), as this edit would leave them.
    pub fn version(&self) -> String {
        // The texts as read are borrowed (10,000 files' texts are not copied to be hashed);
        // an edited file's is written out.
        self.version_of_texts(|f| match &f.read {
            _ if f.removed => None,
            Some(read) if !f.touched => Some(Cow::Borrowed(&**read)),
            _ => Some(Cow::Owned(f.doc().to_string())),
        })
    }

    /// The version of the files as they were read, whatever this edit did since: what a
    /// refusal names. Asked only then — at 10,000 files, hashing them is a cost a write that
    /// is applied does not need twice.
    pub fn version_as_read(&self) -> String {
        self.version_of_texts(|f| f.read.as_deref().map(Cow::Borrowed))
    }

    /// The version of each file's `text` (`None`: not among them).
    fn version_of_texts<'a>(&'a self, text: impl Fn(&'a File) -> Option<Cow<'a, str>>) -> String {
        let texts: Vec<(&Path, Cow<str>)> = (self.files.iter())
            .filter_map(|f| Some((f.path.as_path(), text(f)?)))
            .collect();
        version_of(texts.iter().map(|(p, t)| (*p, &**t)).collect())
    }

    /// `part` as JSON (`None`: no such pool, site or group).
    pub fn get(&self, part: &Part) -> Option<Value> {
        match part {
            Part::Whole => {
                let mut whole = table_json(self.files[0].doc().as_table());
                // Upstream groups too: a fleet's are files of their own.
                for kind in [Kind::Pool, Kind::Site, Kind::Upstream] {
                    let all = self.all(kind);
                    if let (Value::Object(o), false) = (&mut whole, all.is_empty()) {
                        o.insert(kind.key().into(), Value::Array(all));
                    }
                }
                Some(whole)
            }
            Part::Server => Some(
                (self.files[0].doc().get("server"))
                    .and_then(Item::as_table)
                    .map_or(Value::Object(Map::new()), table_json),
            ),
            Part::All(kind) => Some(Value::Array(self.all(*kind))),
            Part::One(kind, name) => {
                let (f, i) = self.find(*kind, name)?;
                let list = self.files[f].doc().get(kind.key())?.as_array_of_tables()?;
                Some(table_json(list.get(i)?))
            }
        }
    }

    fn all(&self, kind: Kind) -> Vec<Value> {
        let lists = self.files.iter().filter(|f| !f.removed);
        let lists = lists.filter_map(|f| f.doc().get(kind.key())?.as_array_of_tables());
        lists.flat_map(|l| l.iter().map(table_json)).collect()
    }

    /// Where pool, site or group `name` is: its file and its index in that file's list.
    fn find(&self, kind: Kind, name: &str) -> Option<(usize, usize)> {
        let may = self
            .files
            .iter()
            .enumerate()
            .filter(|(_, f)| f.may_name(name));
        may.into_iter().find_map(|(f, file)| {
            let list = file.doc().get(kind.key())?.as_array_of_tables()?;
            let i = list
                .iter()
                .position(|t| t.get("name").and_then(Item::as_str) == Some(name))?;
            Some((f, i))
        })
    }

    /// Creates or replaces `part` with `value`; whether it was created.
    pub fn put(&mut self, part: &Part, value: &Value) -> Result<bool, Refusal> {
        match part {
            Part::Whole => self.load(value).map(|()| false),
            Part::Server => {
                let table = json_table(value, "server")?;
                let created = self.files[0].doc().get("server").is_none();
                self.files[0].doc_mut().insert("server", Item::Table(table));
                self.files[0].touched = true;
                Ok(created)
            }
            Part::All(kind) => Err(Refusal(
                405,
                format!(
                    "the {}s are written one at a time: PUT /config/{}s/NAME",
                    kind.key(),
                    kind.key()
                ),
            )),
            Part::One(kind, name) => self.put_one(*kind, name, value),
        }
    }

    fn put_one(&mut self, kind: Kind, name: &str, value: &Value) -> Result<bool, Refusal> {
        let Value::Object(fields) = value else {
            return Err(bad(format!(
                "a {} is a JSON object, like {{\"name\": \"{name}\", …}}",
                kind.key()
            )));
        };
        match fields.get("name") {
            None => {}
            Some(Value::String(n)) if n == name => {}
            Some(other) => return Err(bad(format!("its `name` is {other}, and the path names `{name}`: rename by DELETE and PUT, or leave `name` out"))),
        }
        let mut named = fields.clone();
        named.insert("name".into(), Value::String(name.into()));
        let table = json_table(&Value::Object(named), kind.key())?;
        if let Some((f, i)) = self.find(kind, name) {
            let list = self.files[f]
                .doc_mut()
                .get_mut(kind.key())
                .and_then(Item::as_array_of_tables_mut);
            if let Some(slot) = list.and_then(|l| l.get_mut(i)) {
                *slot = table;
            }
            self.files[f].touched = true;
            return Ok(false);
        }
        let f = self.file_for(kind, name);
        self.files[f].touched = true;
        let doc = self.files[f].doc_mut();
        if doc
            .get(kind.key())
            .and_then(Item::as_array_of_tables)
            .is_none()
        {
            doc.insert(kind.key(), Item::ArrayOfTables(ArrayOfTables::new()));
        }
        if let Some(list) = doc
            .get_mut(kind.key())
            .and_then(Item::as_array_of_tables_mut)
        {
            list.push(table);
        }
        Ok(true)
    }

    /// The file a new pool, site or group goes to: its own in the include folder (a site's
    /// `NAME.toml`, a pool's `NAME.pool.toml`, where the pattern takes such a name), else
    /// the main file. Upstream groups live in the main file (an included file holds pools
    /// and sites only).
    fn file_for(&mut self, kind: Kind, name: &str) -> usize {
        let own = match (kind, &self.include) {
            // A fleet's parts are shared, each a file (a key in etcd) of its own.
            _ if self.fleet.is_some() => {
                let folder = self.fleet.as_deref().unwrap_or(Path::new("."));
                let (kinds, _) = super::cluster::KINDS[kind.fleet_index()];
                Some(folder.join(kinds).join(format!("{name}.toml")))
            }
            (Kind::Upstream, _) | (_, None) => None,
            (_, Some((folder, pattern, full))) => {
                let stem = if kind == Kind::Pool {
                    format!("{name}.pool")
                } else {
                    name.to_string()
                };
                let path = folder.join(pattern.replacen('*', &stem, 1));
                (pattern.matches('*').count() == 1 && full.matches_path(&path)).then_some(path)
            }
        };
        let Some(path) = own else { return 0 };
        if let Some(f) = self.files.iter().position(|f| f.path == path) {
            self.files[f].removed = false;
            return f;
        }
        self.files.push(File {
            path,
            read: None,
            parsed: std::cell::OnceCell::from(DocumentMut::new()),
            removed: false,
            touched: true,
        });
        self.files.len() - 1
    }

    /// Changes `part` by the JSON merge patch `patch` (RFC 7396: a key set to `null` is
    /// removed, an object merged, anything else replaced).
    pub fn patch(&mut self, part: &Part, patch: &Value) -> Result<(), Refusal> {
        if matches!(part, Part::Whole | Part::All(_)) {
            return Err(Refusal(
                405,
                "a merge patch changes /config/server or one pool, site or upstream group".into(),
            ));
        }
        let mut value = self.get(part).ok_or_else(|| missing(part))?;
        merge_patch(&mut value, patch);
        self.put(part, &value).map(|_| ())
    }

    /// Removes one pool, site or group; an included file left with nothing goes with it.
    pub fn delete(&mut self, part: &Part) -> Result<(), Refusal> {
        let Part::One(kind, name) = part else {
            return Err(Refusal(
                405,
                "DELETE removes one pool, site or upstream group: /config/sites/NAME".into(),
            ));
        };
        let (f, i) = self.find(*kind, name).ok_or_else(|| missing(part))?;
        let file = &mut self.files[f];
        file.touched = true;
        if let Some(list) = file
            .doc_mut()
            .get_mut(kind.key())
            .and_then(Item::as_array_of_tables_mut)
        {
            list.remove(i);
            if list.is_empty() {
                file.doc_mut().remove(kind.key());
            }
        }
        file.removed = f > 0 && file.doc().as_table().is_empty();
        Ok(())
    }

    /// Replaces everything with the document `value`: `[server]`, `include` and upstream
    /// groups to the main file; each pool and site as a new one would go.
    fn load(&mut self, value: &Value) -> Result<(), Refusal> {
        let Value::Object(whole) = value else {
            return Err(bad(
                "the whole configuration is a JSON object, like {\"server\": {…}, \"site\": […]}",
            ));
        };
        let mut main: Map<String, Value> = whole.clone();
        let pools = main.remove("pool");
        let sites = main.remove("site");
        let root = json_table(&Value::Object(main), "the document")?;
        for f in self.files.iter_mut() {
            f.removed = true;
            f.touched = true;
            f.parsed = std::cell::OnceCell::from(DocumentMut::new());
        }
        self.files[0].removed = false;
        let doc = self.files[0].doc_mut();
        *doc = DocumentMut::new();
        for (k, v) in root.iter() {
            doc.insert(k, v.clone());
        }
        for (kind, list) in [(Kind::Pool, pools), (Kind::Site, sites)] {
            let Some(list) = list else { continue };
            let Value::Array(list) = list else {
                return Err(bad(format!("`{}` is a list of objects", kind.key())));
            };
            for (k, entry) in list.iter().enumerate() {
                let name = entry.get("name").and_then(Value::as_str);
                let name = name
                    .filter(|n| super::parse::valid_name(n))
                    .ok_or_else(|| {
                        bad(format!(
                            "{}[{k}]: give it a `name` (letters, digits, `-` and `_`)",
                            kind.key()
                        ))
                    })?;
                if !self.put_one(kind, name, entry)? {
                    return Err(bad(format!("{}[{k}]: `{name}` is named twice", kind.key())));
                }
            }
        }
        Ok(())
    }

    /// The files this edit changes: each path with its new text, or `None` to remove it.
    pub fn changes(&self) -> Vec<(PathBuf, Option<String>)> {
        let changed = self.files.iter().filter(|f| f.touched).filter_map(|f| {
            let now = (!f.removed).then(|| f.doc().to_string());
            (now.as_deref() != f.read.as_deref()).then(|| (f.path.clone(), now))
        });
        changed.collect()
    }

    /// The main file's text now.
    pub fn main_text(&self) -> String {
        self.files[0].doc().to_string()
    }
}

/// The version of the files `main` and its `include` name now, read but not parsed beyond
/// the main file's `include` (cheap at 10,000 files: it is taken at start and at each
/// reload).
pub fn version_on_disk(main: &Path) -> Result<String, String> {
    let main = std::path::absolute(main).unwrap_or_else(|_| main.to_path_buf());
    let text = std::fs::read_to_string(&main)
        .map_err(|e| format!("cannot read {}: {e}", main.display()))?;
    #[derive(serde::Deserialize)]
    struct Includes {
        include: Option<Vec<String>>,
    }
    let includes: Includes =
        toml::from_str(&text).map_err(|e| format!("{}: {e}", main.display()))?;
    let base = main
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let doc: DocumentMut = text
        .parse()
        .map_err(|e| format!("{}: {e}", main.display()))?;
    let mut patterns = includes.include.unwrap_or_default();
    patterns.extend(
        fleet_of(&doc, &base)
            .iter()
            .flat_map(|f| super::include::fleet_patterns(f)),
    );
    let mut texts = vec![(main.clone(), std::sync::Arc::<str>::from(text))];
    for path in included(&main, &base, &patterns)? {
        let (text, _) = super::file_memo::read(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        texts.push((path, text));
    }
    Ok(version_of(
        texts.iter().map(|(p, t)| (p.as_path(), &**t)).collect(),
    ))
}

/// The files `patterns` (the main file's `include`, relative to `base`, its folder) match
/// now, each once, in the patterns' order, and never `main` itself.
fn included(main: &Path, base: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, String> {
    // One pattern lists a file once: only across patterns is a path looked up (10,000
    // paths copied and hashed were a twentieth of a hoster's every change).
    let across = patterns.len() > 1;
    let mut seen = rustc_hash::FxHashSet::default();
    let mut found = Vec::new();
    for pattern in patterns {
        for path in super::include::matching_files(pattern, base, &Default::default())? {
            if path != *main && (!across || seen.insert(path.clone())) {
                found.push(path);
            }
        }
    }
    Ok(found)
}

fn missing(part: &Part) -> Refusal {
    match part {
        Part::One(kind, name) => Refusal(404, format!("there is no {} `{name}`", kind.key())),
        _ => Refusal(404, "not there".into()),
    }
}

/// A file read, not yet parsed (the main file: parsed, its errors said). An included file
/// that is not TOML reads as empty: it is not this edit's to mend, and `check` names it.
fn read_file(path: PathBuf, parse_now: bool) -> Result<File, String> {
    let text = super::file_memo::read(&path)
        .map(|(text, _)| text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let parsed = std::cell::OnceCell::new();
    if parse_now {
        let doc: DocumentMut = text
            .parse()
            .map_err(|e| format!("{} is not TOML: {e}", path.display()))?;
        let _ = parsed.set(doc);
    }
    Ok(File {
        path,
        read: Some(text),
        parsed,
        removed: false,
        touched: false,
    })
}

impl File {
    fn doc(&self) -> &DocumentMut {
        self.parsed
            .get_or_init(|| (self.read.as_deref().unwrap_or_default().parse()).unwrap_or_default())
    }

    fn doc_mut(&mut self) -> &mut DocumentMut {
        self.doc();
        self.parsed.get_mut().expect("parsed just now")
    }

    /// Whether it may hold `name` (its text names it): the others are not parsed to look.
    fn may_name(&self, name: &str) -> bool {
        self.parsed.get().is_some() || self.read.as_deref().is_some_and(|t| t.contains(name))
    }
}

mod json;
mod version;

use json::{bad, json_table, table_json};
pub use json::{merge_patch, Refusal};
use version::version_of;

#[cfg(test)]
mod tests;
