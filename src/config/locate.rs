//! Maps a key path in a TOML file (`pool[1].cpus`) to the line it sits on, so every config
//! error can name file, line and key.
//!
//! Owns: span lookups over `toml_edit`'s parse tree. Must not touch: config semantics.

use toml_edit::{ImDocument, Item, Table};

/// One step of a key path: a key in a table or an index in an array (of tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(&'static str),
    Index(usize),
}

/// Prints a path the way users write it in the docs: `site[0].app[1].pool`.
pub fn path_to_string(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The text, and its parsed document with spans — parsed on the first error only: a span
/// tree costs many times the text, and a hoster's thousands of site files rarely hold an
/// error (kept for all of them at once, it was most of the master's peak memory at start).
pub struct Locator {
    doc: std::cell::OnceCell<Option<ImDocument<String>>>,
    text: String,
}

impl Locator {
    pub fn new(text: &str) -> Self {
        Locator {
            doc: std::cell::OnceCell::new(),
            text: text.to_string(),
        }
    }

    fn doc(&self) -> Option<&ImDocument<String>> {
        self.doc
            .get_or_init(|| ImDocument::parse(self.text.clone()).ok())
            .as_ref()
    }

    /// 1-based line of a byte offset.
    pub fn line_of_offset(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// The line holding the deepest part of `path` that exists in the file (so a missing key
    /// still points at its table).
    pub fn line(&self, path: &[Seg]) -> Option<usize> {
        let doc = self.doc()?;
        let mut best = None;
        let mut table: &Table = doc.as_table();
        let mut item: Option<&Item> = None;
        for seg in path {
            match seg {
                Seg::Key(k) => {
                    let t = match item {
                        None => table,
                        Some(it) => match it.as_table() {
                            Some(t) => t,
                            None => break,
                        },
                    };
                    if let Some(span) = t.key(k).and_then(|key| key.span()) {
                        best = Some(span.start);
                    }
                    table = t;
                    item = t.get(k);
                    if item.is_none() {
                        break;
                    }
                }
                Seg::Index(i) => {
                    let Some(it) = item else { break };
                    if let Some(aot) = it.as_array_of_tables() {
                        let Some(t) = aot.get(*i) else { break };
                        if let Some(span) = t.span() {
                            best = Some(span.start);
                        }
                        table = t;
                        item = None;
                        // The next key is looked up in this table.
                        continue;
                    }
                    if let Some(arr) = it.as_array() {
                        if let Some(span) = arr.get(*i).and_then(|v| v.span()) {
                            best = Some(span.start);
                        }
                    }
                    break;
                }
            }
        }
        best.map(|off| self.line_of_offset(off))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_keys() {
        let text = "[server]\nadmin = \"x\"\n\n[[pool]]\nname = \"a\"\n\n[[pool]]\nname = \"b\"\ncpus = \"1\"\n\n[[site]]\nbindings = [\"a\", \"b\"]\n[[site.app]]\npool = \"b\"\n";
        let l = Locator::new(text);
        assert_eq!(l.line(&[Seg::Key("server"), Seg::Key("admin")]), Some(2));
        assert_eq!(
            l.line(&[Seg::Key("pool"), Seg::Index(1), Seg::Key("cpus")]),
            Some(9)
        );
        assert_eq!(
            l.line(&[Seg::Key("pool"), Seg::Index(1), Seg::Key("nope")]),
            Some(7)
        );
        assert_eq!(
            l.line(&[
                Seg::Key("site"),
                Seg::Index(0),
                Seg::Key("bindings"),
                Seg::Index(1)
            ]),
            Some(12)
        );
        assert_eq!(
            l.line(&[
                Seg::Key("site"),
                Seg::Index(0),
                Seg::Key("app"),
                Seg::Index(0),
                Seg::Key("pool")
            ]),
            Some(14)
        );
        assert_eq!(
            path_to_string(&[Seg::Key("site"), Seg::Index(0), Seg::Key("app")]),
            "site[0].app"
        );
    }
}
