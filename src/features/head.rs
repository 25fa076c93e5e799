//! An answer's head as espalier's one response writer makes it: its HTTP/1.1 text, written
//! once into the connection's output buffer, with [`AnswerIndex`] — where the head lies, its
//! status, and where each field's name and value are. The response steps edit the head
//! through [`HeadEdit`], which keeps text and index true together; an HTTP/1.1 client is
//! sent the text as it is, and an HTTP/2 or HTTP/3 stream's response is made from the index
//! (`http::streams::response_of`) — no text parsed back (#56: `httparse` is the HTTP/1.1
//! codecs' alone).
//!
//! Why an index over the text rather than `http::Response` parts made first: nearly every
//! answer goes to an HTTP/1.1 client, whose head is then still one buffer written once (the
//! static page's whole answer is a `memcpy` of a cached head and a body); the index is a few
//! offsets per field, inline (no allocation for up to [`INLINE_FIELDS`] fields). The same
//! reason as `proxy::forward_head` on the request side, and HAProxy's HTX.
//!
//! Every line the writer puts in is `Name: value\r\n` — its own fields and those it formats
//! from configuration or a cached file's entry ([`AnswerIndex::lines`] finds each name's
//! end in lines espalier formatted; no peer's text is read here).
//!
//! Owns: the index and the edits a response step makes (fields taken out by name, lines put
//! in before the blank line), and [`replace_fields`]/[`insert`] on a kept answer's text (the
//! response cache's). Must not touch: which fields a feature edits, or anything past the
//! head's blank line.

use smallvec::SmallVec;
use std::ops::Range;

/// Fields an answer's index holds without allocating: more than espalier's own answers carry
/// and most apps' do.
pub const INLINE_FIELDS: usize = 20;

/// One field's line in the buffer: `at..at + len` is `Name: value\r\n`, its name `name`
/// bytes. The name is a `u32` as the line is: an app's head may reach 64 KiB and more in one
/// field, which a `u16` would cut (and the struct is no larger for it).
#[derive(Debug, Clone, Copy)]
struct Field {
    at: usize,
    name: u32,
    len: u32,
}

impl Field {
    fn line(&self) -> Range<usize> {
        self.at..self.at + self.len as usize
    }

    fn name(&self) -> Range<usize> {
        self.at..self.at + self.name as usize
    }

    /// Its value: after `Name: `, before the line's end.
    fn value(&self) -> Range<usize> {
        self.at + self.name as usize + 2..self.at + self.len as usize - 2
    }
}

/// Where the answer head last begun in a buffer lies, its status and its fields in order.
#[derive(Debug, Default, Clone)]
pub struct AnswerIndex {
    start: usize,
    /// One past the blank line; 0 while the head is not ended.
    end: usize,
    status: u16,
    fields: SmallVec<[Field; INLINE_FIELDS]>,
}

impl AnswerIndex {
    /// A head begins at `start` (its status line), with `status`; what was indexed before
    /// is forgotten.
    pub fn begin(&mut self, start: usize, status: u16) {
        self.start = start;
        self.end = 0;
        self.status = status;
        self.fields.clear();
    }

    /// A field's line written at `at`: `Name: value\r\n`, `len` bytes, its name `name` bytes.
    pub fn line(&mut self, at: usize, name: usize, len: usize) {
        self.fields.push(Field {
            at,
            name: name as u32,
            len: len as u32,
        });
    }

    /// Lines espalier formatted (`Name: value\r\n` each — the common lines, a cached file's
    /// fields, a site's configured ones) written at `at`.
    pub fn lines(&mut self, at: usize, text: &[u8]) {
        let mut from = 0;
        while let Some(nl) = memchr::memchr(b'\n', &text[from..]) {
            let line = &text[from..from + nl + 1];
            let name = memchr::memchr(b':', line).unwrap_or(0);
            self.line(at + from, name, line.len());
            from += nl + 1;
        }
    }

    /// The head ends at `end` (one past its blank line).
    pub fn end(&mut self, end: usize) {
        self.end = end;
    }

    /// The status of the head, 0 when none was begun.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Where the head lies, from its status line through its blank line, once ended.
    pub fn head(&self) -> Option<Range<usize>> {
        (self.end > self.start).then_some(self.start..self.end)
    }

    /// Each field's name and value, as ranges of the buffer, in order.
    pub fn fields(&self) -> impl Iterator<Item = (Range<usize>, Range<usize>)> + '_ {
        self.fields.iter().map(|f| (f.name(), f.value()))
    }

    /// The body's framing as the head says it, in one pass: its `Content-Length` value and
    /// whether it has a `Transfer-Encoding`.
    pub fn framing<'o>(&self, out: &'o [u8]) -> (Option<&'o [u8]>, bool) {
        let (mut length, mut coded) = (None, false);
        for f in &self.fields {
            // By length first: most names are neither.
            let name = &out[f.name()];
            match name.len() {
                14 if name.eq_ignore_ascii_case(b"content-length") => {
                    length = length.or(Some(&out[f.value()]))
                }
                17 if name.eq_ignore_ascii_case(b"transfer-encoding") => coded = true,
                _ => {}
            }
        }
        (length, coded)
    }

    /// Whether the head has a field named `name` (any case), in `out`.
    pub fn has(&self, out: &[u8], name: &[u8]) -> bool {
        (self.fields.iter()).any(|f| out[f.name()].eq_ignore_ascii_case(name))
    }

    /// The whole lines of the fields whose names `keeps`, in order.
    pub fn lines_of(&self, out: &[u8], mut keeps: impl FnMut(&[u8]) -> bool) -> Vec<u8> {
        let mut kept = Vec::new();
        for f in self.fields.iter().filter(|f| keeps(&out[f.name()])) {
            kept.extend_from_slice(&out[f.line()]);
        }
        kept
    }

    /// The index of a head as espalier writes it, at `out[start..]` (for tests of the steps,
    /// which are given text).
    #[cfg(test)]
    pub fn of_written(out: &[u8], start: usize) -> AnswerIndex {
        let mut index = AnswerIndex::default();
        let status = std::str::from_utf8(&out[start + 9..start + 12]);
        index.begin(start, status.unwrap().parse().unwrap());
        let first = start + memchr::memmem::find(&out[start..], b"\r\n").unwrap() + 2;
        let end = start + memchr::memmem::find(&out[start..], b"\r\n\r\n").unwrap() + 4;
        index.lines(first, &out[first..end - 2]);
        index.end(end);
        index
    }

    /// `by` bytes came in (or went, negative) at `at`: what lies after it moved.
    fn shift_after(&mut self, at: usize, by: isize) {
        for f in self.fields.iter_mut().filter(|f| f.at >= at) {
            f.at = f.at.wrapping_add_signed(by);
        }
        self.end = self.end.wrapping_add_signed(by);
    }
}

/// An answer's head as its client is to get it: the text (the head, perhaps with the start
/// of its body after it), where the head ends, and — for a stream, which makes its response
/// from it — the head's index. Boxed, and only for a stream: a forwarder holds its head across
/// awaits in nested futures, each moved whole (into its box, into its task), and an HTTP/1.1
/// client, which gets the text, has no use for it once the response steps have run.
#[derive(Debug, Default)]
pub struct ClientHead {
    pub text: Vec<u8>,
    head_len: usize,
    pub index: Option<Box<AnswerIndex>>,
}

impl ClientHead {
    /// The head written in `text`, `head_len` bytes, with its index for a stream.
    pub fn new(text: Vec<u8>, head_len: usize, index: Option<Box<AnswerIndex>>) -> ClientHead {
        ClientHead {
            text,
            head_len,
            index,
        }
    }

    /// A head of `status` alone, with no fields (`100 Continue`).
    pub fn bare(status: u16, reason: &str, structured: bool) -> ClientHead {
        let text = format!("HTTP/1.1 {status} {reason}\r\n\r\n").into_bytes();
        let mut index = AnswerIndex::default();
        index.begin(0, status);
        index.end(text.len());
        let len = text.len();
        ClientHead::new(text, len, structured.then(|| Box::new(index)))
    }

    /// Puts `lines` (whole `Name: value\r\n` lines espalier formatted) in before the blank
    /// line, into the index too when it has one.
    pub fn add_lines(&mut self, lines: &[u8]) {
        if self.head_len < 4 {
            return;
        }
        match &mut self.index {
            Some(index) => {
                let mut edit = HeadEdit {
                    out: &mut self.text,
                    index,
                };
                edit.add_lines(lines);
            }
            None => insert(&mut self.text, self.head_len - 2, lines),
        }
        self.head_len += lines.len();
    }

    /// Where its head ends in its text.
    pub fn head_len(&self) -> usize {
        self.head_len
    }
}

/// An answer's head being edited by a response step: the buffer and its index together.
pub struct HeadEdit<'a> {
    pub out: &'a mut Vec<u8>,
    pub index: &'a mut AnswerIndex,
}

impl HeadEdit<'_> {
    /// The answer's status.
    pub fn status(&self) -> u16 {
        self.index.status
    }

    /// Whether the head is whole (a step edits only a whole head).
    pub fn whole(&self) -> bool {
        self.index.head().is_some()
    }

    /// Whether the head has a field named `name`.
    pub fn has(&self, name: &[u8]) -> bool {
        self.index.has(self.out, name)
    }

    /// Takes out every field whose name `removes` (one pass, each line moved once).
    pub fn remove_where(&mut self, mut removes: impl FnMut(&[u8]) -> bool) {
        if !self.whole() {
            return;
        }
        let mut k = 0;
        while k < self.index.fields.len() {
            let f = self.index.fields[k];
            if !removes(&self.out[f.name()]) {
                k += 1;
                continue;
            }
            self.out.drain(f.line());
            self.index.fields.remove(k);
            self.index.shift_after(f.at, -(f.len as isize));
        }
    }

    /// Puts `lines` (whole `Name: value\r\n` lines espalier formatted) in before the blank
    /// line, with one move of what follows.
    pub fn add_lines(&mut self, lines: &[u8]) {
        if lines.is_empty() || !self.whole() {
            return;
        }
        let at = self.index.end - 2;
        insert(self.out, at, lines);
        self.index.end += lines.len();
        self.index.lines(at, lines);
    }

    /// [`Self::remove_where`], then [`Self::add_lines`].
    pub fn replace(&mut self, removes: impl FnMut(&[u8]) -> bool, lines: &[u8]) {
        self.remove_where(removes);
        self.add_lines(lines);
    }
}

/// Takes every field of the kept answer head at `out[mark..]` whose name `removes` out (in
/// place, one pass), then puts `lines` (whole `Name: value\r\n` lines) in before its blank
/// line. A buffer without a whole head is left as it is. For the response cache's kept
/// text, which is the app's answer as its HTTP/1.1 codec read it, not an indexed head.
pub fn replace_fields(
    out: &mut Vec<u8>,
    mark: usize,
    mut removes: impl FnMut(&[u8]) -> bool,
    lines: &[u8],
) {
    let Some(first) = memchr::memmem::find(&out[mark..], b"\r\n") else {
        return;
    };
    let mut at = mark + first + 2;
    loop {
        let Some(len) = memchr::memchr(b'\n', &out[at..]).map(|i| i + 1) else {
            return;
        };
        if len <= 2 {
            break;
        }
        let line = &out[at..at + len];
        let name = &line[..memchr::memchr(b':', line).unwrap_or(0)];
        if removes(name) {
            out.drain(at..at + len);
            continue;
        }
        at += len;
    }
    insert(out, at, lines);
}

/// Puts `bytes` into `out` at `at`, moving what follows once.
pub fn insert(out: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let (n, old) = (bytes.len(), out.len());
    out.resize(old + n, 0);
    out.copy_within(at..old, at + n);
    out[at..at + n].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head written as the writer does, with its index.
    fn written(prefix: &[u8], lines: &[u8], body: &[u8]) -> (Vec<u8>, AnswerIndex) {
        let mut out = prefix.to_vec();
        let mut index = AnswerIndex::default();
        index.begin(out.len(), 500);
        out.extend_from_slice(b"HTTP/1.1 500 Oops\r\n");
        index.lines(out.len(), lines);
        out.extend_from_slice(lines);
        out.extend_from_slice(b"\r\n");
        index.end(out.len());
        out.extend_from_slice(body);
        (out, index)
    }

    /// The index read back as text, to compare with what httparse makes of the buffer.
    fn fields_of(out: &[u8], index: &AnswerIndex) -> Vec<(String, String)> {
        let text = |r: Range<usize>| String::from_utf8(out[r].to_vec()).unwrap();
        index.fields().map(|(n, v)| (text(n), text(v))).collect()
    }

    fn parsed(out: &[u8], start: usize) -> Vec<(String, String)> {
        let mut hs = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut hs);
        assert!(r.parse(&out[start..]).unwrap().is_complete());
        let value = |v: &[u8]| String::from_utf8(v.to_vec()).unwrap();
        r.headers
            .iter()
            .map(|h| (h.name.to_string(), value(h.value)))
            .collect()
    }

    #[test]
    fn edits_keep_the_index_and_the_text_in_step() {
        let (mut out, mut index) = written(
            b"prev",
            b"Cache-Control: max-age=9\r\nX-A: 1\r\nX-B: 2\r\n",
            b"body",
        );
        assert_eq!(fields_of(&out, &index), parsed(&out, 4));
        let mut edit = HeadEdit {
            out: &mut out,
            index: &mut index,
        };
        assert!(edit.has(b"x-a") && !edit.has(b"x-c"));
        edit.replace(
            |n| n.eq_ignore_ascii_case(b"cache-control") || n == b"X-B",
            b"Cache-Control: no-store\r\nX-C: 3\r\n",
        );
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "prevHTTP/1.1 500 Oops\r\nX-A: 1\r\nCache-Control: no-store\r\nX-C: 3\r\n\r\nbody"
        );
        assert_eq!(fields_of(&out, &index), parsed(&out, 4));
        assert_eq!(index.head(), Some(4..out.len() - 4));
        assert_eq!(index.status(), 500);
        assert_eq!(index.lines_of(&out, |n| n == b"X-C"), b"X-C: 3\r\n");
    }

    #[test]
    fn a_field_name_longer_than_64_kib_keeps_its_place() {
        let name = "X".repeat(70_000);
        let line = format!("{name}: v\r\nContent-Length: 1\r\n");
        let (out, index) = written(b"", line.as_bytes(), b"");
        assert_eq!(fields_of(&out, &index)[0], (name, "v".to_string()));
        assert_eq!(index.framing(&out), (Some(&b"1"[..]), false));
    }

    #[test]
    fn the_framing_is_read_off_the_index() {
        let lines = b"Content-Type: text/plain\r\nContent-Length: 42\r\nX-Content-Length: 9\r\n";
        let (out, index) = written(b"", lines, b"");
        assert_eq!(index.framing(&out), (Some(&b"42"[..]), false));
        let (out, index) = written(b"", b"Transfer-Encoding: gzip, chunked\r\n", b"");
        assert_eq!(index.framing(&out), (None, true));
    }

    #[test]
    fn a_client_head_takes_lines_with_its_index_or_without() {
        for structured in [true, false] {
            let (mut text, index) = written(b"", b"X-A: 1\r\n", b"");
            text.extend_from_slice(b"body");
            let len = index.head().unwrap().end;
            let mut head = ClientHead::new(text, len, structured.then(|| Box::new(index)));
            head.add_lines(b"Set-Cookie: s=1\r\n");
            let want = "HTTP/1.1 500 Oops\r\nX-A: 1\r\nSet-Cookie: s=1\r\n\r\nbody";
            assert_eq!(String::from_utf8(head.text.clone()).unwrap(), want);
            assert_eq!(head.head_len(), want.len() - 4);
            if let Some(index) = &head.index {
                assert_eq!(fields_of(&head.text, index), parsed(&head.text, 0));
            }
            assert_eq!(head.index.is_some(), structured);
        }
    }

    #[test]
    fn a_head_not_ended_is_left_as_it_is() {
        let mut out = b"HTTP/1.1 200 OK\r\nX-A: 1\r\n".to_vec();
        let mut index = AnswerIndex::default();
        index.begin(0, 200);
        index.lines(17, b"X-A: 1\r\n");
        let mut edit = HeadEdit {
            out: &mut out,
            index: &mut index,
        };
        edit.replace(|_| true, b"X-B: 2\r\n");
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nX-A: 1\r\n");
    }

    #[test]
    fn a_kept_heads_named_fields_go_and_lines_come_before_the_blank_line() {
        let mut out =
            b"prevHTTP/1.1 500 Oops\r\nCache-Control: max-age=9\r\nX-A: 1\r\n\r\nbody".to_vec();
        replace_fields(
            &mut out,
            4,
            |n| n.eq_ignore_ascii_case(b"cache-control"),
            b"Cache-Control: no-store\r\n",
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "prevHTTP/1.1 500 Oops\r\nX-A: 1\r\nCache-Control: no-store\r\n\r\nbody"
        );
    }
}
