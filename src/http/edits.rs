//! Header-field edits a site asks of its answers (`headers`, `hsts`): fields removed from the
//! answer, then whole lines added where the answer has no field of that name — on
//! espalier's own answers ([`super::Responder::edit_fields`]) and, by the proxy, on the
//! answers of applications.
//!
//! Owns: [`FieldEdits`] and applying them to a formatted HTTP/1.1 head. Must not touch:
//! which edits a request gets (the handlers choose by site and path).

/// The edits of one site or path, for one scheme (HSTS goes over TLS only).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FieldEdits {
    /// Whole `Name: value\r\n` lines added unless the answer (after `removed`) has the name.
    pub added: Box<[u8]>,
    /// Lowercase names of the fields taken out of the answer first.
    pub removed: Box<[Box<str>]>,
}

impl FieldEdits {
    /// Whether a field of the answer named `name` is taken out.
    pub fn removes(&self, name: &[u8]) -> bool {
        self.removed
            .iter()
            .any(|r| r.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The added lines whose names `present` says the answer lacks, appended to `out`.
    pub fn add_missing(&self, out: &mut Vec<u8>, mut present: impl FnMut(&[u8]) -> bool) {
        for line in self.added.split_inclusive(|&b| b == b'\n') {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            if !present(name) {
                out.extend_from_slice(line);
            }
        }
    }

    /// Applies the edits to the head of the answer written at `out[mark..]` (status line,
    /// fields, blank line, perhaps a body after it).
    pub fn apply(&self, out: &mut Vec<u8>, mark: usize) {
        let Some(end) = memchr::memmem::find(&out[mark..], b"\r\n\r\n") else {
            return;
        };
        let Some(first) = memchr::memmem::find(&out[mark..], b"\r\n") else {
            return;
        };
        // Fields start after the status line; the head's last CRLF stays in place.
        let (fields_start, fields_end) = (mark + first + 2, mark + end + 2);
        let mut head = Vec::with_capacity(fields_end - fields_start + self.added.len());
        let mut kept: Vec<&[u8]> = Vec::new();
        for line in out[fields_start..fields_end].split_inclusive(|&b| b == b'\n') {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            if !self.removes(name) {
                head.extend_from_slice(line);
                kept.push(name);
            }
        }
        self.add_missing(&mut head, |name| {
            kept.iter().any(|k| k.eq_ignore_ascii_case(name))
        });
        out.splice(fields_start..fields_end, head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_fields_go_and_added_ones_come_unless_the_answer_has_them() {
        let edits = FieldEdits {
            added: b"X-Frame-Options: DENY\r\nStrict-Transport-Security: max-age=1\r\n"[..].into(),
            removed: vec!["server".into(), "x-frame-options".into()].into(),
        };
        let mut out = b"before".to_vec();
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\nServer: espalier\r\nX-Frame-Options: SAMEORIGIN\r\nStrict-Transport-Security: max-age=9\r\nContent-Length: 2\r\n\r\nok");
        edits.apply(&mut out, 6);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "beforeHTTP/1.1 200 OK\r\nStrict-Transport-Security: max-age=9\r\nContent-Length: 2\r\nX-Frame-Options: DENY\r\n\r\nok"
        );
        assert!(edits.removes(b"SERVER") && !edits.removes(b"date"));
    }
}
