//! The head of an app's answer as its client gets it: one writer for both forwarders — an
//! HTTP app's response head and a FastCGI app's CGI header block go out through the same
//! steps, so an answer carries the same lines whichever way its app speaks.
//!
//! Owns: the response steps on an app's answer head, in the order of
//! [`crate::config::chain::ResponseStep::ORDER`] (the site's error page for an app's error
//! comes first and is the forwarders' [`super::wire::OwnAnswers`]): the app's fields with
//! what a hop drops taken out and the site's removals applied; espalier's `Server` and
//! `Date` where the app sent none, and the worker line; what compression changes (`Vary`,
//! `Content-Encoding`, a weak `ETag`); the site's added fields; then the framing and
//! `Connection` the client gets. Always `HTTP/1.1` on the status line, as RFC 9110 §2.5 asks
//! of a server (an HTTP/1.0 client reads it as 1.0). Must not touch: the app's wire (the
//! forwarders read it) or the body (relayed after).

use super::encode::{self, Plan};
use super::request::{connection_tokens, named_hop, HOP_BY_HOP};
use crate::http::edits::FieldEdits;
use std::borrow::Cow;

/// How the body reaches the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ToClient {
    /// No body (HEAD, 204, 304): the app's `Content-Length`, which describes the body a GET
    /// would have had, is kept.
    NoBody,
    /// This many bytes, said by `Content-Length`.
    Length(u64),
    /// Chunked by espalier.
    Chunked,
    /// Passed as the app framed it, with its transfer codings (`gzip, chunked`).
    AsApp(String),
    /// Until the connection closes (an HTTP/1.0 client without a length).
    UntilClose,
}

/// What the connection does after the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Then {
    KeepAlive,
    Close,
    /// A `101 Switching Protocols`: the connection becomes the app's tunnel.
    Upgrade,
}

/// An app's answer head, as the client is to get it.
pub(super) struct Head<'a> {
    pub status: u16,
    /// The app's reason phrase ("" for CGI's, which has none: the status's own is used).
    pub reason: &'a str,
    pub client_minor: u8,
    /// What the site's compression does to this answer.
    pub plan: Plan,
    /// Whether it is compressed (its plan's coding, with an encoder made for it).
    pub compressing: bool,
    pub to_client: ToClient,
    pub then: Then,
    /// The app's `Connection` tokens when the forwarder has read them already.
    pub listed: Option<&'a [&'a str]>,
}

impl Head<'_> {
    /// The client's head, with the app's `fields`, for a lent connection's request: its
    /// thread's common lines and its site's field edits from `own`.
    pub fn for_client(
        &self,
        fields: &[httparse::Header<'_>],
        own: &super::wire::OwnAnswers<'_>,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(512);
        // The clock's lines borrowed for this statement only: its task refreshes them.
        self.write(fields, &own.clock.common(), own.fields, &mut out);
        out
    }

    /// Writes the head, with the app's `fields`, to `out`: `common` are the thread's common
    /// lines (`Server`, `Date`, and the worker line with `worker_header`), `edits` the site's
    /// and path's field edits.
    pub fn write(
        &self,
        fields: &[httparse::Header<'_>],
        common: &[u8],
        edits: Option<&FieldEdits>,
        out: &mut Vec<u8>,
    ) {
        let seen = Seen::of(fields);
        let removed = |name: &[u8]| edits.is_some_and(|e| e.removes(name));
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.push(b' ');
        let reason = match self.reason {
            "" => crate::http::reason(self.status),
            r => r,
        };
        out.extend_from_slice(reason.as_bytes());
        out.extend_from_slice(b"\r\n");
        // espalier's lines, but for a `Server` or `Date` the app sent or the site removes (as
        // they are when neither: the usual case costs one copy).
        if !seen.server && !seen.date && edits.is_none() {
            out.extend_from_slice(common);
        } else {
            let (server, date, rest) = crate::http::clock::split_common(common);
            if !seen.server && !removed(b"server") {
                out.extend_from_slice(server);
            }
            if !seen.date && !removed(b"date") {
                out.extend_from_slice(date);
            }
            // The worker line, if any: a site may remove it.
            if !rest.is_empty() && !removed(b"x-espalier-worker") {
                out.extend_from_slice(rest);
            }
        }
        // The app's `Connection` tokens, read only when it sent one (and the forwarder has not).
        let read;
        let listed = match self.listed {
            Some(listed) => listed,
            None if seen.connection => {
                read = connection_tokens(fields.iter().map(|f| (f.name, f.value)));
                &read
            }
            None => &[],
        };
        for f in fields {
            let Some(value) = self.value(f, listed) else {
                continue;
            };
            if removed(f.name.as_bytes()) {
                continue;
            }
            out.extend_from_slice(f.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
        if self.plan != Plan::AsIs && !seen.vary {
            out.extend_from_slice(b"Vary: Accept-Encoding\r\n");
        }
        if let (true, Plan::Compress(c)) = (self.compressing, self.plan) {
            push(out, "Content-Encoding", c.token().as_bytes());
        }
        if let Some(e) = edits {
            e.add_missing(out, |name| {
                !e.removes(name)
                    && fields
                        .iter()
                        .any(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
            });
        }
        match &self.to_client {
            ToClient::Length(n) => push(
                out,
                "Content-Length",
                itoa::Buffer::new().format(*n).as_bytes(),
            ),
            ToClient::Chunked => push(out, "Transfer-Encoding", b"chunked"),
            ToClient::AsApp(codings) => push(out, "Transfer-Encoding", codings.as_bytes()),
            ToClient::NoBody | ToClient::UntilClose => {}
        }
        match (self.then, self.client_minor) {
            (Then::Upgrade, _) => out.extend_from_slice(b"Connection: upgrade\r\n"),
            (Then::Close, _) => out.extend_from_slice(b"Connection: close\r\n"),
            (Then::KeepAlive, 0) => out.extend_from_slice(b"Connection: keep-alive\r\n"),
            (Then::KeepAlive, _) => {}
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The value field `f` of the app's answer goes out with, `None` when it stays behind:
    /// hop-by-hop (or named in the app's `Connection`, `listed`), CGI's `Status`, framing
    /// (espalier frames the body), and what compression drops or changes.
    fn value<'v>(&self, f: &httparse::Header<'v>, listed: &[&str]) -> Option<Cow<'v, [u8]>> {
        let name = f.name;
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("content-length") {
            // A HEAD or 304 answer keeps the length it describes; a body's length is ours.
            return (self.to_client == ToClient::NoBody).then_some(Cow::Borrowed(f.value));
        }
        if is("upgrade") && self.then == Then::Upgrade {
            return Some(Cow::Borrowed(f.value));
        }
        if is("status") || HOP_BY_HOP.iter().any(|h| is(h)) || named_hop(name, listed) {
            return None;
        }
        match self.plan {
            Plan::Compress(_) if self.compressing => {
                encode::rewritten(name, f.value).map(Cow::Owned)
            }
            Plan::Vary | Plan::Compress(_) if is("vary") => {
                Some(Cow::Owned(encode::with_accept_encoding(f.value)))
            }
            _ => Some(Cow::Borrowed(f.value)),
        }
    }
}

/// Which fields an app's answer has that the head writer looks for, found in one pass.
#[derive(Default)]
struct Seen {
    server: bool,
    date: bool,
    vary: bool,
    connection: bool,
}

impl Seen {
    fn of(fields: &[httparse::Header<'_>]) -> Seen {
        let mut seen = Seen::default();
        for f in fields {
            // By length first: most names are none of these.
            let flag = match f.name.len() {
                4 if f.name.eq_ignore_ascii_case("date") => &mut seen.date,
                4 if f.name.eq_ignore_ascii_case("vary") => &mut seen.vary,
                6 if f.name.eq_ignore_ascii_case("server") => &mut seen.server,
                10 if f.name.eq_ignore_ascii_case("connection") => &mut seen.connection,
                _ => continue,
            };
            *flag = true;
        }
        seen
    }
}

/// `name: value\r\n`.
fn push(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMON: &[u8] = b"Server: espalier\r\nDate: Fri, 27 Nov 2026 10:00:00 GMT\r\n";

    fn head(to_client: ToClient, then: Then, minor: u8) -> Head<'static> {
        Head {
            status: 200,
            reason: "",
            client_minor: minor,
            plan: Plan::AsIs,
            compressing: false,
            to_client,
            then,
            listed: None,
        }
    }

    fn written(h: &Head<'_>, fields: &[(&'static str, &'static [u8])]) -> String {
        written_with(h, fields, COMMON, None)
    }

    fn written_with(
        h: &Head<'_>,
        fields: &[(&'static str, &'static [u8])],
        common: &[u8],
        edits: Option<&FieldEdits>,
    ) -> String {
        let fields: Vec<httparse::Header<'static>> = fields
            .iter()
            .map(|(name, value)| httparse::Header { name, value })
            .collect();
        let mut out = Vec::new();
        h.write(&fields, common, edits, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn an_apps_head_loses_what_a_hop_drops_and_gets_espaliers_framing() {
        let text = written(
            &head(ToClient::Length(5), Then::KeepAlive, 1),
            &[
                ("Content-Type", b"text/plain"),
                ("Connection", b"x-hop, keep-alive"),
                ("X-Hop", b"1"),
                ("Keep-Alive", b"timeout=5"),
                ("Content-Length", b"999"),
                ("Status", b"200 OK"),
                ("Server", b"gunicorn"),
            ],
        );
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nDate: Fri, 27 Nov 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nServer: gunicorn\r\nContent-Length: 5\r\n\r\n"
        );
    }

    #[test]
    fn an_http_1_0_client_is_told_the_connection_stays_and_a_closing_one_that_it_closes() {
        let kept = written(&head(ToClient::Length(0), Then::KeepAlive, 0), &[]);
        assert!(
            kept.starts_with("HTTP/1.1 200 OK\r\nServer: espalier\r\n"),
            "{kept}"
        );
        assert!(kept.ends_with("Content-Length: 0\r\nConnection: keep-alive\r\n\r\n"));
        let closing = written(&head(ToClient::UntilClose, Then::Close, 0), &[]);
        assert!(
            closing.ends_with("Date: Fri, 27 Nov 2026 10:00:00 GMT\r\nConnection: close\r\n\r\n"),
            "{closing}"
        );
    }

    #[test]
    fn the_sites_removals_reach_espaliers_own_lines_and_the_worker_line_stays() {
        let edits = FieldEdits::new(
            b"X-Frame-Options: DENY\r\n".to_vec(),
            ["server".into(), "x-frame-options".into()].into(),
        );
        let common = b"Server: espalier\r\nDate: Fri, 27 Nov 2026 10:00:00 GMT\r\nX-Espalier-Worker: p/0/cpu0\r\n";
        let h = head(ToClient::Length(0), Then::KeepAlive, 1);
        let text = written_with(
            &h,
            &[("Date", b"Fri, 27 Nov 2026 09:59:59 GMT")],
            common,
            Some(&edits),
        );
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nX-Espalier-Worker: p/0/cpu0\r\nDate: Fri, 27 Nov 2026 09:59:59 GMT\r\nX-Frame-Options: DENY\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn a_bodiless_answer_keeps_the_length_it_describes() {
        let text = written(
            &head(ToClient::NoBody, Then::KeepAlive, 1),
            &[("Content-Length", b"42")],
        );
        assert!(text.contains("Content-Length: 42\r\n"), "{text}");
    }
}
