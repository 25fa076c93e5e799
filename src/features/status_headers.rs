//! `status_headers`: fields set or removed on the answers with a given status or class of
//! status — `{ "5xx" = { Cache-Control = "no-store" }, 404 = { Cache-Control = "max-age=60" } }`
//! — on a site or a path, whoever answered (espalier itself, a file, FastCGI, a pool's app
//! or an upstream). What nginx's `add_header` leaves to `always` and a `map` on
//! `$status`, in one key: errors kept out of shared caches, a `Retry-After` on every 503.
//!
//! Owns: the key's typed value ([`StatusHeaders`]), its check ([`StatusHeaders::of`]), and
//! its compiled step (its [`HeadStep`]). Its field names and values are checked as
//! `headers`' are (by the config's validator, before this). Must not touch: the answer's
//! body, or which site or path carries it (a path's table replaces its site's whole).

use super::head::HeadEdit;
use super::HeadStep;
use serde::{Deserialize, Serialize};

/// Which answers a table applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Statuses {
    /// One status (`"404"`).
    One(u16),
    /// A class (`"5xx"`: 500–599).
    Class(u16),
}

/// One status's (or class's) edits, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Edits {
    statuses: Statuses,
    /// Lowercase names of every field it names: taken out of the answer first.
    removed: Vec<String>,
    /// Whole `Name: value\r\n` lines of those with a value, put in after.
    lines: String,
}

/// A site's or path's `status_headers`: a table per status or class; a status's own table
/// is used over its class's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusHeaders {
    tables: Vec<Edits>,
}

impl StatusHeaders {
    /// The typed value of `status_headers`, from its tables as written — a status (`"404"`,
    /// 100–599) or a class (`"1xx"`…`"5xx"`) each, with its fields (checked names and
    /// printable values; an empty value removes the field). `Err` names the key at fault and
    /// says why.
    pub fn of(
        tables: Vec<(String, Vec<(String, String)>)>,
    ) -> Result<StatusHeaders, (String, String)> {
        let mut out = Vec::with_capacity(tables.len());
        for (key, fields) in tables {
            let statuses = statuses(&key).ok_or_else(|| {
                (key.clone(), "is not a status or a class of them; write a status from 100 to 599 (\"404\") or a class (\"5xx\")".to_string())
            })?;
            let mut lines = String::new();
            for (name, value) in fields.iter().filter(|(_, v)| !v.is_empty()) {
                lines.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push(Edits {
                statuses,
                removed: fields.iter().map(|(n, _)| n.to_ascii_lowercase()).collect(),
                lines,
            });
        }
        Ok(StatusHeaders { tables: out })
    }

    /// The table for an answer with `status`: its own, else its class's.
    fn table(&self, status: u16) -> Option<&Edits> {
        let one = self
            .tables
            .iter()
            .find(|t| t.statuses == Statuses::One(status));
        one.or_else(|| {
            self.tables
                .iter()
                .find(|t| t.statuses == Statuses::Class(status / 100))
        })
    }
}

/// `"404"` or `"5xx"` as what it covers.
fn statuses(key: &str) -> Option<Statuses> {
    let b = key.as_bytes();
    if b.len() != 3 || !(b'1'..=b'5').contains(&b[0]) {
        return None;
    }
    if b[1..].eq_ignore_ascii_case(b"xx") {
        return Some(Statuses::Class(u16::from(b[0] - b'0')));
    }
    key.parse().ok().map(Statuses::One)
}

impl HeadStep for StatusHeaders {
    fn run(&self, head: &mut HeadEdit<'_>) {
        let Some(t) = self.table(head.status()) else {
            return;
        };
        let removes = |name: &[u8]| {
            t.removed
                .iter()
                .any(|r| r.as_bytes().eq_ignore_ascii_case(name))
        };
        head.replace(removes, t.lines.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s`'s step on the head `text`.
    fn run(s: &StatusHeaders, text: &[u8]) -> String {
        let mut out = text.to_vec();
        let mut index = super::super::head::AnswerIndex::of_written(&out, 0);
        s.run(&mut HeadEdit {
            out: &mut out,
            index: &mut index,
        });
        String::from_utf8(out).unwrap()
    }

    fn table(key: &str, fields: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
        let fields = fields.iter().map(|(n, v)| (n.to_string(), v.to_string()));
        (key.to_string(), fields.collect())
    }

    #[test]
    fn a_status_own_table_wins_over_its_class() {
        let s = StatusHeaders::of(vec![
            table("5xx", &[("Cache-Control", "no-store")]),
            table("503", &[("Retry-After", "30"), ("Server", "")]),
        ])
        .unwrap();
        let head = "HTTP/1.1 503 Service Unavailable\r\nServer: espalier\r\nRetry-After: 1\r\n\r\n";
        assert_eq!(
            run(&s, head.as_bytes()),
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\n\r\n"
        );
        assert_eq!(
            run(
                &s,
                b"HTTP/1.1 502 Bad Gateway\r\nCache-Control: max-age=60\r\n\r\n"
            ),
            "HTTP/1.1 502 Bad Gateway\r\nCache-Control: no-store\r\n\r\n"
        );
        // No table for it: untouched.
        let kept = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n";
        assert_eq!(run(&s, kept.as_bytes()), kept);
    }

    #[test]
    fn only_statuses_and_classes_are_keys() {
        for good in ["100", "404", "599", "2xx", "5XX"] {
            assert!(StatusHeaders::of(vec![table(good, &[])]).is_ok(), "{good}");
        }
        for bad in ["600", "099", "6xx", "4x", "40", "4040", "abc", "x04", ""] {
            let e = StatusHeaders::of(vec![table(bad, &[])]).unwrap_err();
            assert_eq!(e.0, bad);
            assert!(e.1.contains("\"5xx\""), "{}", e.1);
        }
    }
}
