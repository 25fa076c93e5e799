//! A site's redirect and rewrite rules — IIS's HTTP Redirect and URL Rewrite, nginx's
//! `return` and `rewrite`: ordered, each a match (a regex on the path, a host, methods) and an
//! action (redirect, rewrite inside the site, or a fixed answer). The first rule whose match
//! holds decides, and no other is tried (IIS's `stopProcessing`, nginx's `rewrite … last`
//! without the second pass): an ordered list a reader can follow.
//!
//! The path matched is the request's path in normal form — percent-decoded, `.` and `..`
//! resolved — as routing chooses apps, so `/%61dmin` cannot slip past a rule on `/admin`.
//! Captured text is percent-encoded again where it goes into a target.
//!
//! Owns: [`RuleSpec`] (what the config states), compiling it ([`Rules::new`], once per thread)
//! and applying it ([`Rules::apply`]), pure. Must not touch: requests' framing or answers
//! (the handlers write what [`RuleOutcome`] says).

use regex::bytes::Regex;
use serde::{Deserialize, Serialize};

/// One rule as the config states it (checked by `config::validate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSpec {
    /// A regex on the path in normal form; `None`: every path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The host it applies to: a name, or `*.name` for its subdomains; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The methods it applies to, upper case; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    pub action: RuleAction,
    /// Whether the request's query is appended to a target that does not place it itself
    /// (with `{uri}` or `{query}`).
    pub keep_query: bool,
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleAction {
    /// `status` (301, 302, 303, 307, 308) to `to`: a URL or a path, with `$1`… and variables.
    Redirect { to: String, status: u16 },
    /// The request continues inside the site as `to` (`/path?query`).
    Rewrite { to: String },
    /// A fixed answer, text/plain.
    Answer { status: u16, body: String },
}

/// What the matching rule made of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleOutcome {
    Redirect {
        status: u16,
        location: String,
    },
    /// The new target, `path` or `path?query`, percent-encoded as a request target is.
    Rewrite(String),
    Answer {
        status: u16,
        body: String,
    },
    /// No answer: the connection is closed (an access list's `deny_action = "close"`).
    Refuse,
    /// A client over its site's limit: this status, `Retry-After` these seconds (429, 503).
    Limited {
        status: u16,
        retry_after: u32,
    },
    /// A path's sign-in not given, or wrong: 401 asking for it in this realm.
    Unauthorized {
        realm: String,
    },
    /// Another service's refusal of a path's request (`auth = { request }`): its status,
    /// the fields passed back (lowercase names) and its body, as it gave them.
    Passed {
        status: u16,
        fields: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
    },
}

/// The request as rules see it.
pub struct Seen<'a> {
    /// The Host without its port.
    pub host: Option<&'a str>,
    pub method: &'a str,
    /// The path in normal form (decoded).
    pub path: &'a [u8],
    /// The path and query as received (still encoded; the query without `?`).
    pub raw_path: &'a str,
    pub raw_query: &'a str,
}

/// One piece of a target.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Capture(usize),
    /// `{uri}`: the path and query as received.
    Uri,
    /// `{path}`: the path as received.
    Path,
    /// `{query}`: the query as received, without `?`.
    Query,
    /// `{host}`: the Host without its port.
    Host,
}

#[derive(Debug, Clone)]
struct Template {
    parts: Vec<Part>,
    /// It places the query itself (`{uri}` or `{query}`).
    places_query: bool,
    /// Its own text has a `?`: an appended query joins with `&`.
    has_query: bool,
}

fn parse_template(text: &str, captures: usize) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '$' => match chars.peek() {
                Some(&(_, d)) if d.is_ascii_digit() => {
                    chars.next();
                    let n = d as usize - '0' as usize;
                    if n >= captures {
                        return Err(format!("`${n}` names a group the match does not have (it has {}); number the groups ( … ) of `match` from $1", captures.saturating_sub(1)));
                    }
                    parts.push(Part::Text(std::mem::take(&mut literal)));
                    parts.push(Part::Capture(n));
                }
                Some(&(_, '$')) => {
                    chars.next();
                    literal.push('$');
                }
                _ => return Err("a `$` is followed by a group's number ($1) or another `$` ($$ for a dollar sign)".into()),
            },
            '{' => {
                let rest = &text[i..];
                let end = rest.find('}').ok_or("a `{` is not closed; write {uri}, {path}, {query} or {host}")?;
                let part = match &rest[1..end] {
                    "uri" => Part::Uri,
                    "path" => Part::Path,
                    "query" => Part::Query,
                    "host" => Part::Host,
                    other => return Err(format!("`{{{other}}}` is not a variable; use {{uri}}, {{path}}, {{query}} or {{host}}")),
                };
                for _ in 0..end {
                    chars.next();
                }
                parts.push(Part::Text(std::mem::take(&mut literal)));
                parts.push(part);
            }
            c if c.is_ascii_control() || c == ' ' => {
                return Err("holds a space or a control character; percent-encode it (%20)".into())
            }
            c => literal.push(c),
        }
    }
    parts.push(Part::Text(literal));
    parts.retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
    Ok(Template {
        places_query: parts.iter().any(|p| matches!(p, Part::Uri | Part::Query)),
        has_query: parts
            .iter()
            .any(|p| matches!(p, Part::Text(t) if t.contains('?'))),
        parts,
    })
}

/// Bytes a captured piece of a path keeps as they are in a target; any other is
/// percent-encoded (RFC 3986 `pchar` and `/`).
fn keeps(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b)
}

fn push_encoded(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if keeps(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
        }
    }
}

/// A host condition.
#[derive(Debug, Clone)]
enum HostIs {
    Exact(String),
    /// `.example.com` for `*.example.com`.
    Under(String),
}

impl HostIs {
    fn matches(&self, host: Option<&str>) -> bool {
        let Some(h) = host.map(|h| h.strip_suffix('.').unwrap_or(h)) else {
            return false;
        };
        match self {
            HostIs::Exact(name) => h.eq_ignore_ascii_case(name),
            HostIs::Under(suffix) => {
                h.len() > suffix.len()
                    && h.is_char_boundary(h.len() - suffix.len())
                    && h[h.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    path: Option<Regex>,
    host: Option<HostIs>,
    methods: Vec<String>,
    action: Compiled,
    keep_query: bool,
}

#[derive(Debug, Clone)]
enum Compiled {
    Redirect(Template, u16),
    Rewrite(Template),
    Answer(u16, String),
}

/// A site's rules, compiled.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    /// A rule has a host condition: only then is the request's Host looked up.
    need_host: bool,
}

impl Rules {
    /// Compiles `specs`; the error names the rule (by index) and says what is wrong.
    pub fn new(specs: &[RuleSpec]) -> Result<Rules, (usize, String)> {
        let rules: Vec<Rule> = specs
            .iter()
            .enumerate()
            .map(|(k, s)| Rule::new(s).map_err(|e| (k, e)))
            .collect::<Result<_, _>>()?;
        Ok(Rules {
            need_host: rules.iter().any(|r| r.host.is_some()),
            rules,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a rule has a host condition (only then is the request's Host looked up).
    pub fn need_host(&self) -> bool {
        self.need_host
    }

    /// What the first rule whose match holds makes of `req`; `None` when none does.
    pub fn apply(&self, req: &Seen<'_>) -> Option<RuleOutcome> {
        for rule in &self.rules {
            if !rule.methods.is_empty() && !rule.methods.iter().any(|m| m == req.method) {
                continue;
            }
            if rule.host.as_ref().is_some_and(|h| !h.matches(req.host)) {
                continue;
            }
            // A match first (no captures to fill: the common case, no rule matching, costs
            // each regex's prefilter or one scan); its groups only for the rule that applies.
            let captures = match &rule.path {
                None => None,
                Some(re) if re.is_match(req.path) => re.captures(req.path),
                Some(_) => continue,
            };
            let fill = |t: &Template| rule.fill(t, captures.as_ref(), req);
            return Some(match &rule.action {
                Compiled::Redirect(t, status) => RuleOutcome::Redirect {
                    status: *status,
                    location: fill(t),
                },
                Compiled::Rewrite(t) => RuleOutcome::Rewrite(fill(t)),
                Compiled::Answer(status, body) => RuleOutcome::Answer {
                    status: *status,
                    body: body.clone(),
                },
            });
        }
        None
    }
}

impl Rule {
    fn new(s: &RuleSpec) -> Result<Rule, String> {
        let path = s
            .path
            .as_deref()
            .map(|p| {
                Regex::new(p)
                    .map_err(|e| format!("`match` is not a regex: {}", one_line(&e.to_string())))
            })
            .transpose()?;
        let captures = path.as_ref().map_or(1, |re| re.captures_len());
        let action = match &s.action {
            RuleAction::Redirect { to, status } => {
                Compiled::Redirect(parse_template(to, captures)?, *status)
            }
            RuleAction::Rewrite { to } => Compiled::Rewrite(parse_template(to, captures)?),
            RuleAction::Answer { status, body } => Compiled::Answer(*status, body.clone()),
        };
        let host = s.host.as_deref().map(|h| {
            let h = h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase();
            match h.strip_prefix('*') {
                Some(suffix) => HostIs::Under(suffix.to_string()),
                None => HostIs::Exact(h),
            }
        });
        Ok(Rule {
            path,
            host,
            methods: s.methods.clone(),
            action,
            keep_query: s.keep_query,
        })
    }

    fn fill(
        &self,
        t: &Template,
        captures: Option<&regex::bytes::Captures<'_>>,
        req: &Seen<'_>,
    ) -> String {
        let mut out = String::with_capacity(64);
        for part in &t.parts {
            match part {
                Part::Text(s) => out.push_str(s),
                Part::Capture(n) => {
                    if let Some(m) = captures.and_then(|c| c.get(*n)) {
                        push_encoded(&mut out, m.as_bytes());
                    }
                }
                Part::Uri => {
                    out.push_str(req.raw_path);
                    if !req.raw_query.is_empty() {
                        out.push('?');
                        out.push_str(req.raw_query);
                    }
                }
                Part::Path => out.push_str(req.raw_path),
                Part::Query => out.push_str(req.raw_query),
                Part::Host => out.push_str(req.host.unwrap_or_default()),
            }
        }
        if self.keep_query && !t.places_query && !req.raw_query.is_empty() {
            out.push(if t.has_query { '&' } else { '?' });
            out.push_str(req.raw_query);
        }
        out
    }
}

/// The regex crate's multi-line error as one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: Option<&str>, action: RuleAction) -> RuleSpec {
        RuleSpec {
            path: path.map(String::from),
            host: None,
            methods: Vec::new(),
            action,
            keep_query: true,
        }
    }

    fn seen<'a>(host: &'a str, path: &'a str, query: &'a str) -> Seen<'a> {
        Seen {
            host: Some(host),
            method: "GET",
            path: path.as_bytes(),
            raw_path: path,
            raw_query: query,
        }
    }

    #[test]
    fn the_first_rule_that_matches_decides_with_captures_and_the_query() {
        let rules = Rules::new(&[
            RuleSpec {
                host: Some("www.shop.example".into()),
                ..spec(
                    None,
                    RuleAction::Redirect {
                        to: "https://shop.example{uri}".into(),
                        status: 301,
                    },
                )
            },
            spec(
                Some("^/blog/(\\d+)/(.*)$"),
                RuleAction::Rewrite {
                    to: "/articles/$2?id=$1".into(),
                },
            ),
            spec(
                Some("^/old/(.*)$"),
                RuleAction::Redirect {
                    to: "/new/$1".into(),
                    status: 308,
                },
            ),
            spec(
                Some("^/\\.git"),
                RuleAction::Answer {
                    status: 404,
                    body: "no\n".into(),
                },
            ),
            spec(
                Some("^([^.]*[^/])$"),
                RuleAction::Redirect {
                    to: "$1/".into(),
                    status: 301,
                },
            ),
        ])
        .unwrap();
        let redirect = |status, location: &str| {
            Some(RuleOutcome::Redirect {
                status,
                location: location.into(),
            })
        };
        assert_eq!(
            rules.apply(&seen("WWW.shop.example", "/a/b", "x=1")),
            redirect(301, "https://shop.example/a/b?x=1")
        );
        assert_eq!(
            rules.apply(&seen("shop.example", "/blog/7/hi", "utm=z")),
            Some(RuleOutcome::Rewrite("/articles/hi?id=7&utm=z".into()))
        );
        assert_eq!(
            rules.apply(&seen("shop.example", "/old/a b/ü", "")),
            redirect(308, "/new/a%20b/%C3%BC")
        );
        assert_eq!(
            rules.apply(&seen("shop.example", "/.git/config", "")),
            Some(RuleOutcome::Answer {
                status: 404,
                body: "no\n".into()
            })
        );
        assert_eq!(
            rules.apply(&seen("shop.example", "/docs", "")),
            redirect(301, "/docs/")
        );
        assert_eq!(rules.apply(&seen("shop.example", "/docs/", "")), None);
        assert_eq!(rules.apply(&seen("shop.example", "/site.css", "")), None);
    }

    #[test]
    fn conditions_and_query_dropping() {
        let rules = Rules::new(&[
            RuleSpec {
                methods: vec!["POST".into()],
                ..spec(
                    Some("^/form$"),
                    RuleAction::Answer {
                        status: 405,
                        body: String::new(),
                    },
                )
            },
            RuleSpec {
                host: Some("*.example".into()),
                keep_query: false,
                ..spec(
                    Some("^/go$"),
                    RuleAction::Redirect {
                        to: "https://{host}/".into(),
                        status: 302,
                    },
                )
            },
        ])
        .unwrap();
        let mut post = seen("a.example", "/form", "");
        assert_eq!(rules.apply(&post), None, "GET is not POST");
        post.method = "POST";
        assert!(matches!(
            rules.apply(&post),
            Some(RuleOutcome::Answer { status: 405, .. })
        ));
        assert_eq!(
            rules.apply(&seen("a.b.example", "/go", "q=1")),
            Some(RuleOutcome::Redirect {
                status: 302,
                location: "https://a.b.example/".into()
            })
        );
        assert_eq!(
            rules.apply(&seen("example", "/go", "")),
            None,
            "not a subdomain"
        );
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let bad = |path: &str, to: &str| {
            Rules::new(&[spec(Some(path), RuleAction::Rewrite { to: to.into() })])
                .unwrap_err()
                .1
        };
        assert!(bad("^/(a", "/").contains("not a regex"));
        assert!(bad("^/(a)$", "/$2").contains("names a group the match does not have"));
        assert!(bad("^/a$", "/{nope}").contains("is not a variable"));
        assert!(bad("^/a$", "/a b").contains("space"));
        assert!(bad("^/a$", "/{uri").contains("not closed"));
    }
}
