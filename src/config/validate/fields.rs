//! Validation of the keys that shape a site's answers: `headers` (fields set or removed) and
//! `cache` (`Cache-Control` of its static files), on a site and on an app path, `errors`
//! (its own error pages), `compress` (the codings it offers) and `autoindex` (folder
//! listings).
//!
//! Owns: those keys' rules, the `Cache-Control` each `cache` spelling stands for, and the
//! one look at the file system they need (that each error page can be read). Must not touch:
//! anything outside one key's value.

use super::super::locate::Seg;
use super::Validator;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest error page: each worker thread keeps its site's pages in memory.
pub(crate) const MAX_ERROR_PAGE: u64 = 64 << 10;

/// Fields espalier frames and routes by itself: set by a config, they would make the answer
/// ambiguous (RFC 9112 §6) or lie about the connection.
pub(super) const NOT_SETTABLE: [&str; 9] = [
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
    "host",
];

/// A field name is an RFC 9110 token.
pub(super) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// What a `cache` spelling means as a `Cache-Control` value: `"7d"` (a duration: `max-age`),
/// `"365d, immutable"`, `"no-cache"` (always revalidate) or `"no-store"`.
pub(crate) fn cache_control(text: &str) -> Result<String, String> {
    let t = text.trim();
    if matches!(t, "no-store" | "no-cache") {
        return Ok(t.to_string());
    }
    let (age, immutable) = match t.strip_suffix("immutable") {
        Some(rest) => (rest.trim_end().trim_end_matches(',').trim_end(), true),
        None => (t, false),
    };
    let secs = crate::units::parse_duration(age)
        .map_err(|_| format!("`{text}` is not a cache time; write a duration like \"7d\" (max-age), \"365d, immutable\", \"no-cache\" or \"no-store\""))?
        .as_secs();
    Ok(if immutable {
        format!("max-age={secs}, immutable")
    } else {
        format!("max-age={secs}")
    })
}

/// Whether `pattern` is a content type (`text/css`), a family (`image/*`) or `*`.
fn is_type_pattern(pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let Some((kind, sub)) = pattern.split_once('/') else {
        return false;
    };
    is_token(kind) && (sub == "*" || is_token(sub)) && !kind.contains('*')
}

impl Validator {
    /// `headers = { Name = "value", Server = "" }` at `at`: names are tokens espalier does
    /// not frame itself, values printable.
    pub(super) fn header_fields(
        &mut self,
        at: &[Seg],
        raw: Option<BTreeMap<String, String>>,
    ) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        for (name, value) in raw.unwrap_or_default() {
            if !is_token(&name) {
                self.err(at, format!("`{name}` is not a header field name (letters, digits and !#$%&'*+-.^_`|~ only); fix the name"));
            } else if NOT_SETTABLE.contains(&name.to_ascii_lowercase().as_str()) {
                self.err(at, format!("`{name}` is framing or connection information espalier writes itself; remove it"));
            } else if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
                self.err(at, format!("the value of `{name}` holds a control character (a line break would start another field); write it on one line"));
            } else {
                fields.push((name, value.trim().to_string()));
            }
        }
        fields
    }

    /// `cache = "7d"` (every static file) or `cache = { "text/html" = "no-cache",
    /// "image/*" = "30d", "*" = "1h" }`: `(type, Cache-Control)`, most specific first.
    pub(super) fn cache_policy(
        &mut self,
        at: &[Seg],
        raw: Option<toml::Value>,
    ) -> Vec<(String, String)> {
        let entries: Vec<(String, toml::Value)> = match raw {
            None => return Vec::new(),
            Some(toml::Value::Table(t)) => t.into_iter().collect(),
            Some(v @ toml::Value::String(_)) => vec![("*".to_string(), v)],
            Some(_) => {
                self.err(at, "is a cache time (\"7d\") or a table of them by content type, like { \"text/html\" = \"no-cache\", \"image/*\" = \"30d\" }");
                return Vec::new();
            }
        };
        let mut policy = Vec::new();
        for (pattern, value) in entries {
            let pattern = pattern.to_ascii_lowercase();
            if !is_type_pattern(&pattern) {
                self.err(at, format!("`{pattern}` is not a content type; write \"text/css\", \"image/*\" or \"*\""));
                continue;
            }
            let Some(text) = value.as_str() else {
                self.err(
                    at,
                    format!("the cache time for `{pattern}` must be text, like \"7d\""),
                );
                continue;
            };
            match cache_control(text) {
                Ok(v) => policy.push((pattern, v)),
                Err(m) => self.err(at, m),
            }
        }
        // An exact type before its family, a family before `*`.
        policy.sort_by_key(|(p, _)| {
            if p == "*" {
                2
            } else if p.ends_with("/*") {
                1
            } else {
                0
            }
        });
        policy
    }
}

impl Validator {
    /// `compress = ["zstd", "br", "gzip"]`: known codings, each once, in preference order.
    pub(super) fn codings(
        &mut self,
        at: &[Seg],
        raw: Option<Vec<String>>,
    ) -> Vec<crate::compress::Coding> {
        let mut codings = Vec::new();
        for name in raw.unwrap_or_default() {
            match crate::compress::Coding::from_name(&name) {
                Some(c) if codings.contains(&c) => {
                    self.err(at, format!("`{name}` is listed twice; name each coding once, in the order you prefer them"))
                }
                Some(c) => codings.push(c),
                None => self.err(at, format!("`{name}` is not a coding espalier sends; use \"zstd\", \"br\" and \"gzip\", in the order you prefer them")),
            }
        }
        codings
    }

    /// `errors = { 404 = "errors/404.html", 503 = "errors/busy.html" }`: statuses 400–599,
    /// each a readable file of at most 64 KiB, relative to the config file's folder.
    pub(super) fn error_pages(
        &mut self,
        at: &[Seg],
        raw: Option<BTreeMap<String, String>>,
        base: &Path,
    ) -> Vec<(u16, PathBuf)> {
        let mut pages = Vec::new();
        for (status, file) in raw.unwrap_or_default() {
            let Some(code) = status
                .parse::<u16>()
                .ok()
                .filter(|c| (400..=599).contains(c))
            else {
                self.err(at, format!("`{status}` is not an error status; use 400–599, like {{ 404 = \"errors/404.html\" }}"));
                continue;
            };
            let path = base.join(&file);
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() <= MAX_ERROR_PAGE => pages.push((code, path)),
                Ok(m) if m.is_file() => self.err(at, format!("{} is {} bytes; an error page is kept in memory by every worker thread: keep it under 64 KiB (link its images and styles)", path.display(), m.len())),
                Ok(_) => self.err(at, format!("{} is not a file; name the page for {code}", path.display())),
                Err(e) => self.err(at, format!("{} cannot be read ({e}); create it, or fix the path (relative paths are from the config file's folder)", path.display())),
            }
        }
        pages
    }
}

impl Validator {
    /// Site `i`'s `autoindex`: `true`/`false`, or `{ dotfiles = true }`.
    pub(super) fn autoindex(
        &mut self,
        i: usize,
        value: toml::Value,
    ) -> Option<crate::config::Autoindex> {
        let at = [Seg::Key("site"), Seg::Index(i), Seg::Key("autoindex")];
        let dotfiles = match &value {
            toml::Value::Boolean(false) => return None,
            toml::Value::Boolean(true) => false,
            toml::Value::Table(t) if t.keys().all(|k| k == "dotfiles") => match t.get("dotfiles") {
                None => false,
                Some(toml::Value::Boolean(b)) => *b,
                Some(_) => {
                    self.err(&at, "`dotfiles` is true or false");
                    return None;
                }
            },
            _ => {
                self.err(&at, "is true (a folder without an index file is listed, its dotfiles left out), false, or { dotfiles = true } (listed too)");
                return None;
            }
        };
        Some(crate::config::Autoindex { dotfiles })
    }
}

impl super::super::chain::KeyCheck for Validator {
    fn header_fields(
        &mut self,
        at: &[Seg],
        raw: BTreeMap<String, String>,
    ) -> Vec<(String, String)> {
        Validator::header_fields(self, at, Some(raw))
    }

    fn refuse(&mut self, at: &[Seg], why: String) {
        self.err(at, why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_spellings_become_cache_control() {
        assert_eq!(cache_control("7d").unwrap(), "max-age=604800");
        assert_eq!(
            cache_control("365d, immutable").unwrap(),
            "max-age=31536000, immutable"
        );
        assert_eq!(
            cache_control("1h immutable").unwrap(),
            "max-age=3600, immutable"
        );
        assert_eq!(cache_control("0s").unwrap(), "max-age=0");
        assert_eq!(cache_control("no-store").unwrap(), "no-store");
        assert!(cache_control("forever").is_err());
        assert!(cache_control("immutable").is_err());
        assert!(is_type_pattern("image/*") && is_type_pattern("text/css") && is_type_pattern("*"));
        assert!(!is_type_pattern("*/css") && !is_type_pattern("css") && !is_type_pattern("a b/c"));
    }
}
