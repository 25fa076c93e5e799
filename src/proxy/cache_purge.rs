//! A purge of the response caches (`POST /cache/purge` on the admin endpoint): what it
//! names — one URL, a prefix, or the app's tag — read from the endpoint's query, carried to
//! every worker as a line of the control channel, and matched against a kept answer.
//!
//! Owns: [`Purge`]. Must not touch: the stores (`super::cache_store` takes what it names).

use super::cache::Stored;

/// What a purge takes out of every store of a process (`POST /cache/purge` on the admin
/// endpoint, told to every worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Purge {
    /// One URL's answers, every variant: `scheme://host/path?query`.
    Url(String),
    /// Every URL that starts so (`https://shop.example/products/`).
    Prefix(String),
    /// Every answer the app tagged so.
    Tag(String),
}

impl Purge {
    /// The purge a query asks for: `url=…`, `prefix=…` or `tag=…` (percent-encoded).
    pub fn of_query(query: &str) -> Result<Purge, String> {
        let fix = "ask POST /cache/purge?url=https%3A%2F%2Fshop.example%2Fa (one URL), ?prefix=… (every URL starting so) or ?tag=… (what the app tagged with Cache-Tag or Surrogate-Key)";
        let mut pairs = url_form(query);
        let (Some(first), None) = (pairs.next(), pairs.next()) else {
            return Err(format!("a purge names one of url, prefix or tag; {fix}"));
        };
        let Some((key, value)) = first else {
            return Err(format!("its query has an escape that is not %XX; {fix}"));
        };
        if value.is_empty() || value.len() > 8192 || value.contains(['\n', '\r']) {
            return Err(format!("`{key}` is empty, too long or not one line; {fix}"));
        }
        match key.as_str() {
            "url" => Ok(Purge::Url(value)),
            "prefix" => Ok(Purge::Prefix(value)),
            "tag" => Ok(Purge::Tag(value)),
            _ => Err(format!("`{key}` is not url, prefix or tag; {fix}")),
        }
    }

    /// As one line of the workers' control channel (`url VALUE`, …), and back.
    pub fn line(&self) -> String {
        match self {
            Purge::Url(v) => format!("url {v}"),
            Purge::Prefix(v) => format!("prefix {v}"),
            Purge::Tag(v) => format!("tag {v}"),
        }
    }

    pub fn of_line(line: &str) -> Option<Purge> {
        let (kind, value) = line.split_once(' ')?;
        let value = value.to_string();
        match kind {
            "url" => Some(Purge::Url(value)),
            "prefix" => Some(Purge::Prefix(value)),
            "tag" => Some(Purge::Tag(value)),
            _ => None,
        }
    }

    pub(super) fn takes(&self, key: &str, answer: &Stored) -> bool {
        match self {
            Purge::Url(url) => key == url,
            Purge::Prefix(prefix) => key.starts_with(prefix.as_str()),
            Purge::Tag(tag) => answer.tags().iter().any(|t| t == tag),
        }
    }
}

/// The name–value pairs of a query, percent-decoded (`+` a space); `None` for a pair with
/// an escape that is not one.
fn url_form(query: &str) -> impl Iterator<Item = Option<(String, String)>> + '_ {
    let decode = |s: &str| {
        let bytes = crate::http::percent_decode(s.replace('+', " ").as_bytes())?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    (query.split('&').filter(|p| !p.is_empty())).map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        Some((decode(k)?, decode(v)?))
    })
}
