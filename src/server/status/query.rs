//! Which pools a status asks for, read from a query string and written back, and matched
//! against each pool once its pattern is compiled.
//!
//! Owns: [`StatusQuery`]. Must not touch: the report it filters (the supervisor's).

use super::PoolState;

/// Which pools a status asks for: `GET /status?pool=shop*&state=running&page=2&per_page=50`
/// (and `espalier status --pool … --state … --page …`). With ten thousand pools, what an
/// operator looks at is a few: a name, the ones running, a page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusQuery {
    /// A pool name, or a pattern with `*` (`shop-*`); without `*`, any name containing it.
    pub pool: Option<String>,
    pub state: Option<PoolState>,
    /// 1-based; 0 is the first.
    pub page: usize,
    /// `None`: every matched pool on one page.
    pub per_page: Option<usize>,
}

/// The most pools one page holds.
pub const MAX_PER_PAGE: usize = 1000;

impl StatusQuery {
    /// Reads a query string (`pool=…&state=…&page=…&per_page=…`); `Err` names what is wrong.
    pub fn parse(query: &str) -> Result<StatusQuery, String> {
        let mut q = StatusQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "pool" if !value.is_empty() => {
                    if !value
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_*".contains(&b))
                    {
                        return Err(format!("pool={value}: a pool name or pattern holds letters, digits, `-`, `_` and `*`"));
                    }
                    q.pool = Some(value.to_string());
                }
                "pool" => {}
                "state" if value.is_empty() => {}
                "state" => {
                    q.state = Some(match value {
                        "running" => PoolState::Running,
                        "idle" => PoolState::Idle,
                        "suspended" => PoolState::Suspended,
                        "stopped" => PoolState::Stopped,
                        _ => {
                            return Err(format!(
                                "state={value}: one of running, idle, suspended, stopped"
                            ))
                        }
                    })
                }
                "page" => {
                    q.page = value
                        .parse()
                        .map_err(|_| format!("page={value}: a page number"))?
                }
                "per_page" => {
                    let n: usize = value
                        .parse()
                        .map_err(|_| format!("per_page={value}: a number of pools"))?;
                    if n == 0 || n > MAX_PER_PAGE {
                        return Err(format!("per_page={value}: from 1 to {MAX_PER_PAGE}"));
                    }
                    q.per_page = Some(n);
                }
                _ => {
                    return Err(format!(
                        "`{key}`: the status takes pool, state, page and per_page"
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The query string that [`parse`](Self::parse) reads back (empty for every pool).
    pub fn to_query(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.pool {
            parts.push(format!("pool={p}"));
        }
        if let Some(s) = self.state {
            parts.push(format!("state={}", s.as_str()));
        }
        if self.page > 1 {
            parts.push(format!("page={}", self.page));
        }
        if let Some(n) = self.per_page {
            parts.push(format!("per_page={n}"));
        }
        parts.join("&")
    }

    /// Whether pool `name` in `state` is asked for.
    pub fn matches(&self, name: &str, state: PoolState) -> bool {
        self.matcher()(name, state)
    }

    /// [`matches`](Self::matches) with the pattern compiled once, for a pass over every pool.
    /// A `*` pattern is the `glob` crate's (which `include` uses too); its matching stays
    /// linear-ish whatever the pattern (tested with a pathological one).
    pub fn matcher(&self) -> impl Fn(&str, PoolState) -> bool + '_ {
        let pattern = self
            .pool
            .as_deref()
            .filter(|p| p.contains('*'))
            .and_then(|p| glob::Pattern::new(p).ok());
        move |name, state| {
            self.state.is_none_or(|s| s == state)
                && match (&pattern, self.pool.as_deref()) {
                    (Some(glob), _) => glob.matches(name),
                    (None, Some(part)) => name.contains(part),
                    (None, None) => true,
                }
        }
    }

    /// The range of the matched pools (`matched` of them) on the page asked for.
    pub fn window(&self, matched: usize) -> std::ops::Range<usize> {
        match self.per_page {
            None => 0..matched,
            Some(n) => {
                let start = (self.page.max(1) - 1).saturating_mul(n).min(matched);
                start..(start + n).min(matched)
            }
        }
    }
}
