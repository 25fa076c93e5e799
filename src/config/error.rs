//! Config errors: one line each, naming the file, the line and the key, and saying how to fix
//! it — including TOML syntax errors, mapped to the key they concern.
//!
//! Owns: the error types and their wording. Must not touch: what is valid (see
//! [`super::validate`]).

use super::locate::Locator;
use std::fmt;

/// A config error: one line naming file, line and key, and saying how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: Option<usize>,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All the errors of one file (each is one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Turns a TOML/serde error into our one-line form: the key is the text before `=` on the
/// error's line (or the key serde names), under the nearest table header above it.
pub(super) fn syntax_error(
    file: &str,
    text: &str,
    locator: &Locator,
    e: &toml::de::Error,
) -> ConfigError {
    let (line, key) = match e.span() {
        Some(span) => {
            let line = locator.line_of_offset(span.start);
            let line_text = text.lines().nth(line - 1).unwrap_or("");
            let header = text
                .lines()
                .take(line)
                .filter_map(|l| {
                    let t = l.trim();
                    t.starts_with('[')
                        .then(|| t.trim_matches(|c| c == '[' || c == ']').trim().to_string())
                })
                .last();
            let own = line_text
                .split_once('=')
                .map(|(k, _)| k.trim().to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('['));
            let key = match (header, own) {
                (Some(h), Some(k)) => format!("{h}.{k}"),
                (Some(h), None) => h,
                (None, Some(k)) => k,
                (None, None) => String::new(),
            };
            (Some(line), key)
        }
        None => (None, String::new()),
    };
    let mut message = e.message().trim().replace('\n', " ");
    if message.starts_with("unknown field `include`") {
        // TOML puts every key after a `[table]` header into that table.
        message =
            "`include` is a top-level key: move it above the first [table] header of the file"
                .into();
    } else if message.starts_with("unknown field") {
        let field = message.split('`').nth(1).unwrap_or_default();
        if super::raw::LIMIT_KEYS.contains(&field) && key != format!("server.limits.{field}") {
            // Written under [server] (or a site): the limits have a table of their own.
            // `max_body_size` is a site's and a path's key too (their own bound).
            let also = if field == "max_body_size" {
                ", or into a [[site]] or [[site.app]] for that site or path alone"
            } else {
                ""
            };
            message = format!("unknown field `{field}` here: it is a key of [server.limits]; move it under a `[server.limits]` header{also}");
        } else {
            message.push_str(
                "; remove it or correct its spelling (see docs/reference.md, the configuration reference)",
            );
        }
    }
    ConfigError {
        file: file.to_string(),
        line,
        key,
        message,
    }
}
