//! A request's head as espalier sends it on to an app or a server: one structured message —
//! method, target, fields in order — held with its HTTP/1.1 text, written once as the head is
//! made. An HTTP/1.1 app or server is sent the text as it is; an HTTP/2 server's request is
//! made from the parts ([`ForwardHead::method`], [`ForwardHead::target`],
//! [`ForwardHead::fields`]), and no text is parsed back (#56: `httparse` is the HTTP/1.1
//! codecs' alone).
//!
//! Why both at once rather than `http::request::Parts` serialized at the send: nearly every
//! forwarded request goes to an HTTP/1.1 app, and its head is then written once into one
//! buffer, as before — the parts are a few offsets into it (no allocation per field, no
//! `HeaderName` interning, no second copy); an HTTP/2 server's request reads them (HAProxy's
//! HTX keeps its blocks in one buffer for the same reason).
//!
//! Owns: the head's text, where each part lies in it, and its edits (a field added, taken out
//! or replaced, the offsets kept true). Must not touch: which fields go (see
//! [`super::request`]), or how a head is sent (see [`super::upstream::Conn::send_head`]).

/// Where a field lies in the text: its name's and its value's start and end.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

impl Span {
    /// Its whole line, `Name: value\r\n`.
    fn line(&self) -> std::ops::Range<usize> {
        self.name.0 as usize..self.value.1 as usize + 2
    }

    fn shifted(self, by: i64) -> Span {
        let at = |n: u32| (n as i64 + by) as u32;
        Span {
            name: (at(self.name.0), at(self.name.1)),
            value: (at(self.value.0), at(self.value.1)),
        }
    }
}

/// A forwarded request's head: its parts, and its HTTP/1.1 text (ending with the blank line).
#[derive(Debug, Clone)]
pub struct ForwardHead {
    text: Vec<u8>,
    method_end: u32,
    target: (u32, u32),
    fields: Vec<Span>,
}

impl ForwardHead {
    /// A head with its request line: `method`, then the target — `path`, and `?query` when
    /// there is one.
    pub fn new(method: &str, path: &str, query: &str) -> ForwardHead {
        let mut text = Vec::with_capacity(512);
        text.extend_from_slice(method.as_bytes());
        text.push(b' ');
        let start = text.len() as u32;
        text.extend_from_slice(path.as_bytes());
        if !query.is_empty() {
            text.push(b'?');
            text.extend_from_slice(query.as_bytes());
        }
        let end = text.len() as u32;
        text.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        ForwardHead {
            text,
            method_end: method.len() as u32,
            target: (start, end),
            fields: Vec::with_capacity(16),
        }
    }

    /// No head: the view of a request that goes by other means (a FastCGI child's records),
    /// never sent.
    pub fn none() -> ForwardHead {
        ForwardHead {
            text: Vec::new(),
            method_end: 0,
            target: (0, 0),
            fields: Vec::new(),
        }
    }

    /// Adds the field `name: value` last.
    pub fn field(&mut self, name: &str, value: &[u8]) {
        self.field_with(name, |text| text.extend_from_slice(value));
    }

    /// Adds the field `name` last, its value written by `value` (in pieces: a list joined).
    pub fn field_with(&mut self, name: &str, value: impl FnOnce(&mut Vec<u8>)) {
        // The blank line goes, and comes back after the field: the text is always a head.
        self.text.truncate(self.text.len().saturating_sub(2));
        let name_start = self.text.len() as u32;
        self.text.extend_from_slice(name.as_bytes());
        let name_end = self.text.len() as u32;
        self.text.extend_from_slice(b": ");
        let value_start = self.text.len() as u32;
        value(&mut self.text);
        let value_end = self.text.len() as u32;
        self.text.extend_from_slice(b"\r\n\r\n");
        self.fields.push(Span {
            name: (name_start, name_end),
            value: (value_start, value_end),
        });
    }

    /// Takes out every field whose name `removes` (it sees each field's name).
    pub fn remove_fields(&mut self, mut removes: impl FnMut(&str) -> bool) {
        let mut k = 0;
        while k < self.fields.len() {
            if removes(self.name_of(self.fields[k])) {
                self.cut(k, &[]);
            } else {
                k += 1;
            }
        }
    }

    /// Replaces the first field named `name` (any case) by `new_name: value` in its place;
    /// false when there is none.
    pub fn replace_field(&mut self, name: &str, new_name: &str, value: &[u8]) -> bool {
        let Some(k) =
            (self.fields.iter()).position(|s| self.name_of(*s).eq_ignore_ascii_case(name))
        else {
            return false;
        };
        let start = self.fields[k].name.0 as usize;
        let mut line = Vec::with_capacity(new_name.len() + value.len() + 4);
        line.extend_from_slice(new_name.as_bytes());
        line.extend_from_slice(b": ");
        line.extend_from_slice(value);
        line.extend_from_slice(b"\r\n");
        self.cut(k, &line);
        let (name_end, value_start) = (start + new_name.len(), start + new_name.len() + 2);
        let at = |n: usize| n as u32;
        self.fields.insert(
            k,
            Span {
                name: (at(start), at(name_end)),
                value: (at(value_start), at(value_start + value.len())),
            },
        );
        true
    }

    /// Takes field `k`'s line out, `line` in its place, and the fields after it moved.
    fn cut(&mut self, k: usize, line: &[u8]) {
        let old = self.fields.remove(k).line();
        let by = line.len() as i64 - old.len() as i64;
        let after = old.end;
        self.text.splice(old, line.iter().copied());
        for s in &mut self.fields[k..] {
            if s.name.0 as usize >= after {
                *s = s.shifted(by);
            }
        }
    }

    fn name_of(&self, s: Span) -> &str {
        std::str::from_utf8(&self.text[s.name.0 as usize..s.name.1 as usize]).unwrap_or("")
    }

    /// The head as HTTP/1.1 sends it, through its blank line.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    pub fn method(&self) -> &str {
        std::str::from_utf8(&self.text[..self.method_end as usize]).unwrap_or("")
    }

    /// The path and query.
    pub fn target(&self) -> &str {
        let (start, end) = (self.target.0 as usize, self.target.1 as usize);
        std::str::from_utf8(&self.text[start..end]).unwrap_or("")
    }

    /// Each field's name and value, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.fields.iter().map(|s| {
            let value = &self.text[s.value.0 as usize..s.value.1 as usize];
            (self.name_of(*s), value)
        })
    }

    /// The first value of the field `name` (any case).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        (self.fields()).find_map(|(n, v)| n.eq_ignore_ascii_case(name).then_some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(h: &ForwardHead) -> Vec<(String, String)> {
        (h.fields())
            .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    #[test]
    fn the_parts_and_the_text_say_the_same_through_every_edit() {
        let mut h = ForwardHead::new("POST", "/api/v1", "x=1");
        assert_eq!(h.text(), b"POST /api/v1?x=1 HTTP/1.1\r\n\r\n");
        h.field("Host", b"example.test");
        h.field_with("X-Forwarded-For", |t| {
            t.extend_from_slice(b"10.0.0.1, 10.0.0.2")
        });
        h.field("Transfer-Encoding", b"chunked");
        h.field("If-None-Match", b"\"a\"");
        h.field("Connection", b"keep-alive");
        assert_eq!((h.method(), h.target()), ("POST", "/api/v1?x=1"));
        assert!(h.replace_field("transfer-encoding", "Content-Length", b"12345"));
        assert!(!h.replace_field("expect", "X", b""));
        h.remove_fields(|n| n.eq_ignore_ascii_case("if-none-match"));
        h.field("If-Modified-Since", b"Mon, 30 Nov 2026 00:00:00 GMT");
        let text = "POST /api/v1?x=1 HTTP/1.1\r\nHost: example.test\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\nContent-Length: 12345\r\nConnection: keep-alive\r\nIf-Modified-Since: Mon, 30 Nov 2026 00:00:00 GMT\r\n\r\n";
        assert_eq!(String::from_utf8_lossy(h.text()), text);
        // The parts, read back from the text by the HTTP/1.1 codec, are the head's own.
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut parsed = httparse::Request::new(&mut fields);
        assert!(parsed.parse(h.text()).unwrap().is_complete());
        let read: Vec<(String, String)> = (parsed.headers.iter())
            .map(|f| (f.name.into(), String::from_utf8_lossy(f.value).into_owned()))
            .collect();
        assert_eq!(parts(&h), read);
        assert_eq!(h.get("content-length"), Some(&b"12345"[..]));
        assert_eq!(h.get("expect"), None);
        let get = ForwardHead::new("GET", "/", "");
        assert_eq!((get.target(), get.fields().count()), ("/", 0));
    }
}
