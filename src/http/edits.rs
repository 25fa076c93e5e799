//! The `headers` response step (and `hsts`): fields removed from the answer, then whole
//! lines added where the answer has no field of that name — on every answer, by the one
//! response writer ([`super::Responder::response_steps`]): espalier's own and applications'.
//!
//! Owns: [`FieldEdits`]: made once per thread from a site's (or path's) keys
//! ([`FieldEdits::of`]), and applied to an answer's head through its index. The feature is this file,
//! its keys (`headers`, `hsts` in `config::raw`, checked in `config::validate::site`), and its
//! line in `config::chain::ResponseStep`. Must not touch: which edits a request gets (the
//! request chain chooses by site and path, and carries them in its context).

use crate::config::{AppSpec, SiteSpec};
use crate::features::head::HeadEdit;
use std::rc::Rc;

/// A site's or path's edits by scheme: over cleartext, and over TLS (with its HSTS line);
/// `None` for none.
pub type SchemeEdits = [Option<Rc<FieldEdits>>; 2];

/// The edits of one site or path, for one scheme (HSTS goes over TLS only).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldEdits {
    /// Whole `Name: value\r\n` lines added unless the answer (after `removed`) has the name.
    added: Box<[u8]>,
    /// Lowercase names of the fields taken out of the answer first.
    removed: Box<[Box<str>]>,
    /// The names of `added` lines that `removed` does not take out first (HSTS): only these
    /// can be in the answer already.
    kept_names: Box<[Box<str>]>,
}

impl FieldEdits {
    /// The edits of site `s`, or of its path `a` (whose `headers` override the site's by
    /// name): every named field is removed from answers, and those with a value added back
    /// with it; over TLS the site's `Strict-Transport-Security` is added unless the answer
    /// has one.
    pub fn of(s: &SiteSpec, a: Option<&AppSpec>) -> SchemeEdits {
        let mut merged: Vec<&(String, String)> =
            a.map(|a| a.headers.iter().collect()).unwrap_or_default();
        for h in &s.headers {
            if !merged.iter().any(|m| m.0.eq_ignore_ascii_case(&h.0)) {
                merged.push(h);
            }
        }
        let removed: Box<[Box<str>]> = merged
            .iter()
            .map(|(n, _)| n.to_ascii_lowercase().into())
            .collect();
        let mut added = Vec::new();
        for (name, value) in merged.iter().filter(|(_, v)| !v.is_empty()) {
            added.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        let edits = |added: Vec<u8>| {
            (!added.is_empty() || !removed.is_empty())
                .then(|| Rc::new(FieldEdits::new(added, removed.clone())))
        };
        let mut over_tls = added.clone();
        if let Some(v) = &s.hsts {
            over_tls.extend_from_slice(format!("Strict-Transport-Security: {v}\r\n").as_bytes());
        }
        if let Some(v) = &s.alt_svc {
            over_tls.extend_from_slice(format!("Alt-Svc: {v}\r\n").as_bytes());
        }
        [edits(added), edits(over_tls)]
    }

    /// `added` lines (`Name: value\r\n`…) and the lowercase names `removed`.
    pub fn new(added: Vec<u8>, removed: Box<[Box<str>]>) -> Self {
        let kept_names = added
            .split_inclusive(|&b| b == b'\n')
            .map(|l| l.split(|&b| b == b':').next().unwrap_or_default())
            .filter(|n| !removed.iter().any(|r| r.as_bytes().eq_ignore_ascii_case(n)))
            .map(|n| {
                String::from_utf8_lossy(n)
                    .to_ascii_lowercase()
                    .into_boxed_str()
            })
            .collect();
        FieldEdits {
            added: added.into(),
            removed,
            kept_names,
        }
    }

    /// Whether a field of the answer named `name` is taken out.
    fn removes(&self, name: &[u8]) -> bool {
        self.removed
            .iter()
            .any(|r| r.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The added lines whose names `present` says the answer lacks, appended to `out`.
    fn add_missing(&self, out: &mut Vec<u8>, mut present: impl FnMut(&[u8]) -> bool) {
        for line in self.added.split_inclusive(|&b| b == b'\n') {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            if !present(name) {
                out.extend_from_slice(line);
            }
        }
    }

    /// Applies the edits to the answer's head: one pass over its fields, removed ones
    /// taken out in place, then the added lines put in before the blank line with one move
    /// of what follows — no allocation when the answer had none of the kept names.
    pub fn apply(&self, head: &mut HeadEdit<'_>) {
        let mut present = false;
        head.remove_where(|name: &[u8]| {
            if self.removes(name) {
                return true;
            }
            present |= (self.kept_names.iter()).any(|k| k.as_bytes().eq_ignore_ascii_case(name));
            false
        });
        if present {
            // Rare: an app sent its own HSTS. Only the lines it lacks go in.
            let mut lines = Vec::with_capacity(self.added.len());
            self.add_missing(&mut lines, |name| head.has(name));
            head.add_lines(&lines);
        } else {
            head.add_lines(&self.added);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::head::AnswerIndex;

    /// `edits` on the head written at `out[start..]`.
    fn apply(edits: &FieldEdits, mut out: Vec<u8>, start: usize) -> String {
        let mut index = AnswerIndex::of_written(&out, start);
        edits.apply(&mut HeadEdit {
            out: &mut out,
            index: &mut index,
        });
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn removed_fields_go_and_added_ones_come_unless_the_answer_has_them() {
        let edits = FieldEdits::new(
            b"X-Frame-Options: DENY\r\nStrict-Transport-Security: max-age=1\r\n".to_vec(),
            vec!["server".into(), "x-frame-options".into()].into(),
        );
        let mut out = b"before".to_vec();
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: espalier\r\nX-Frame-Options: SAMEORIGIN\r\nStrict-Transport-Security: max-age=9\r\nContent-Length: 2\r\n\r\nok");
        assert_eq!(
            apply(&edits, out, 6),
            "beforeHTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=9\r\nContent-Length: 2\r\nX-Frame-Options: DENY\r\n\r\nok"
        );
        assert!(edits.removes(b"SERVER") && !edits.removes(b"date"));
        // Without an HSTS of the answer's own, every added line goes in.
        let out = b"HTTP/1.1 404 Not Found\r\nServer: espalier\r\n\r\nbody".to_vec();
        assert_eq!(
            apply(&edits, out, 0),
            "HTTP/1.1 404 Not Found\r\nX-Frame-Options: DENY\r\nStrict-Transport-Security: max-age=1\r\n\r\nbody"
        );
    }
}
