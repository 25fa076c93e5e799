//! The head of an app's answer as its client gets it, for both forwarders — an HTTP app's
//! response head and a FastCGI app's CGI header block go out through espalier's one response
//! writer ([`crate::http::Responder`]), so an answer carries the same lines whichever way its
//! app speaks, and the same as espalier's own answers.
//!
//! Owns: what of an app's head reaches the client: its fields with what a hop drops taken
//! out (hop-by-hop fields, those its `Connection` names, CGI's `Status`, its framing), what
//! compression changes (`Vary`, `Content-Encoding`, a weak `ETag`), and the framing the
//! relay gives the body ([`ToClient`]). The status line, espalier's `Server`/`Date`/worker
//! lines where the app sent none, `Connection`, and the site's response steps (its chain)
//! are the writer's. The site's page for an app's error is decided before this
//! ([`super::wire::OwnAnswers::replaces`]). Must not touch: the app's wire (the forwarders
//! read it) or the body (relayed after).

use super::encode::{self, Plan};
use super::request::ForwardRequest;
use super::request::{connection_tokens, named_hop};
use super::wire::BodyKind;
use crate::features::head::{AnswerIndex, ClientHead};
use crate::http::response_chain::{ResponseChain, Whose};
use crate::http::{Responder, Sent};
use std::borrow::Cow;

pub(super) use crate::http::Then;

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
    /// thread's common lines and its site's response chain from `own`.
    pub fn for_client(
        &self,
        fields: &[httparse::Header<'_>],
        own: &super::wire::OwnAnswers<'_>,
    ) -> ClientHead {
        let mut text = Vec::with_capacity(512);
        // The clock's lines borrowed for this statement only: its task refreshes them.
        let structured = own.heads.is_some();
        let steps = (own.response, structured);
        let (head_len, index) = self.write(fields, &own.clock.common(), steps, &mut text);
        ClientHead::new(text, head_len, index)
    }

    /// Writes the head, with the app's `fields`, to `out`: `common` are the thread's common
    /// lines (`Server`, `Date`, and the worker line with `worker_header`), `chain` the site's
    /// and path's response steps. Returns where the head ends, and its index when
    /// `structured` (a stream's).
    pub fn write(
        &self,
        fields: &[httparse::Header<'_>],
        common: &[u8],
        (chain, structured): (Option<&ResponseChain>, bool),
        out: &mut Vec<u8>,
    ) -> (usize, Option<Box<AnswerIndex>>) {
        let seen = Seen::of(fields);
        let mark = out.len();
        // `head_only` is the relay's to honour: this writes the head alone.
        let mut resp = Responder::new(out, common, true, self.client_minor, false);
        resp.then(self.then);
        resp.index_fields(chain.is_some() || structured);
        resp.status_line(self.status, self.reason, seen.sent);
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
            if let Some(value) = self.value(f, listed) {
                resp.field(f.name.as_bytes(), &value);
            }
        }
        if self.plan != Plan::AsIs && !seen.vary {
            resp.header("Vary", "Accept-Encoding");
        }
        if let (true, Plan::Compress(c)) = (self.compressing, self.plan) {
            resp.header("Content-Encoding", c.token());
        }
        match &self.to_client {
            ToClient::Length(n) => {
                resp.content_length(*n);
            }
            ToClient::Chunked => {
                resp.transfer_encoding(b"chunked");
            }
            ToClient::AsApp(codings) => {
                resp.transfer_encoding(codings.as_bytes());
            }
            ToClient::NoBody | ToClient::UntilClose => {}
        }
        resp.end_head();
        // The error page is the forwarders' to choose before the head (`OwnAnswers`).
        resp.response_steps(mark, chain, Whose::App);
        (resp.head_end(), structured.then(|| resp.into_index()))
    }

    /// The value field `f` of the app's answer goes out with, `None` when it stays behind:
    /// hop-by-hop (or named in the app's `Connection`, `listed`), CGI's `Status`, framing
    /// (espalier frames the body), and what compression drops or changes.
    fn value<'v>(&self, f: &httparse::Header<'v>, listed: &[&str]) -> Option<Cow<'v, [u8]>> {
        let name = f.name;
        match Kind::of(name) {
            // A HEAD or 304 answer keeps the length it describes; a body's length is ours.
            Kind::ContentLength => {
                return (self.to_client == ToClient::NoBody).then_some(Cow::Borrowed(f.value))
            }
            Kind::Upgrade if self.then == Then::Upgrade => return Some(Cow::Borrowed(f.value)),
            Kind::Upgrade | Kind::Hop => return None,
            Kind::Other if named_hop(name, listed) => return None,
            Kind::Other => {}
        }
        match self.plan {
            Plan::Compress(_) if self.compressing => {
                encode::rewritten(name, f.value).map(Cow::Owned)
            }
            Plan::Vary | Plan::Compress(_) if name.eq_ignore_ascii_case("vary") => {
                Some(Cow::Owned(encode::with_accept_encoding(f.value)))
            }
            _ => Some(Cow::Borrowed(f.value)),
        }
    }
}

/// What the head writer does with a field of an app's answer, by its name.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// The body's length (the client's framing is espalier's).
    ContentLength,
    /// Kept on a `101` alone.
    Upgrade,
    /// Stays behind: hop-by-hop (`proxy::request::HOP_BY_HOP`) or CGI's `Status`.
    Hop,
    Other,
}

impl Kind {
    /// By length first, so that most names cost one comparison (every field of every
    /// proxied answer comes through here).
    fn of(name: &str) -> Kind {
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        match name.len() {
            2 if is("te") => Kind::Hop,
            6 if is("status") => Kind::Hop,
            7 if is("upgrade") => Kind::Upgrade,
            7 if is("trailer") => Kind::Hop,
            10 if is("connection") || is("keep-alive") => Kind::Hop,
            14 if is("content-length") => Kind::ContentLength,
            16 if is("proxy-connection") => Kind::Hop,
            17 if is("transfer-encoding") => Kind::Hop,
            _ => Kind::Other,
        }
    }
}

/// Which fields an app's answer has that the head writer looks for, found in one pass.
#[derive(Default)]
struct Seen {
    /// espalier's common lines it has its own of.
    sent: Sent,
    vary: bool,
    connection: bool,
}

impl Seen {
    fn of(fields: &[httparse::Header<'_>]) -> Seen {
        let mut seen = Seen::default();
        for f in fields {
            // By length first: most names are none of these.
            let flag = match f.name.len() {
                4 if f.name.eq_ignore_ascii_case("date") => &mut seen.sent.date,
                4 if f.name.eq_ignore_ascii_case("vary") => &mut seen.vary,
                6 if f.name.eq_ignore_ascii_case("server") => &mut seen.sent.server,
                10 if f.name.eq_ignore_ascii_case("connection") => &mut seen.connection,
                _ => continue,
            };
            *flag = true;
        }
        seen
    }
}

/// How an answer of `kind` (`switching`: a `101`) reaches a client that asked `req`, and what its connection
/// does after: chunked for an HTTP/1.1 client when the length is unknown (or compressed),
/// else close-delimited for an HTTP/1.0 one.
pub(super) fn client_framing(
    (kind, switching): (BodyKind, bool),
    req: &ForwardRequest,
    fields: &[httparse::Header<'_>],
    compressing: bool,
) -> (ToClient, Then) {
    let http11 = req.client_minor == 1;
    let to_client = match kind {
        _ if compressing && http11 => ToClient::Chunked,
        _ if compressing => ToClient::UntilClose,
        BodyKind::None => ToClient::NoBody,
        BodyKind::Length(n) => ToClient::Length(n),
        // The body passes as the app framed it: its codings too (`gzip, chunked`).
        BodyKind::Chunked if http11 => {
            let codings: Vec<&str> = fields
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
                .filter_map(|h| std::str::from_utf8(h.value).ok())
                .collect();
            ToClient::AsApp(codings.join(", "))
        }
        BodyKind::UntilClose if http11 => ToClient::Chunked,
        BodyKind::Chunked | BodyKind::UntilClose => ToClient::UntilClose,
    };
    let then = if switching {
        Then::Upgrade
    } else if req.keep_alive && to_client != ToClient::UntilClose {
        Then::KeepAlive
    } else {
        Then::Close
    };
    (to_client, then)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::request::HOP_BY_HOP;

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
        chain: Option<&ResponseChain>,
    ) -> String {
        let fields: Vec<httparse::Header<'static>> = fields
            .iter()
            .map(|(name, value)| httparse::Header { name, value })
            .collect();
        let mut out = Vec::new();
        h.write(&fields, common, (chain, false), &mut out);
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
        assert!(kept.ends_with("GMT\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"));
        let closing = written(&head(ToClient::UntilClose, Then::Close, 0), &[]);
        assert!(
            closing.ends_with("Date: Fri, 27 Nov 2026 10:00:00 GMT\r\nConnection: close\r\n\r\n"),
            "{closing}"
        );
        let upgrading = written(
            &head(ToClient::NoBody, Then::Upgrade, 1),
            &[("Upgrade", b"websocket")],
        );
        assert!(
            upgrading.ends_with("GMT\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"),
            "{upgrading}"
        );
    }

    #[test]
    fn the_sites_removals_reach_espaliers_own_lines_and_the_worker_line_stays() {
        let edits = crate::http::edits::FieldEdits::new(
            b"X-Frame-Options: DENY\r\n".to_vec(),
            ["server".into(), "x-frame-options".into()].into(),
        );
        let chain =
            ResponseChain::of(None, Some(std::rc::Rc::new(edits)), &Default::default()).unwrap();
        let common = b"Server: espalier\r\nDate: Fri, 27 Nov 2026 10:00:00 GMT\r\nX-Espalier-Worker: p/0/cpu0\r\n";
        let h = head(ToClient::Length(0), Then::KeepAlive, 1);
        let text = written_with(
            &h,
            &[("Date", b"Fri, 27 Nov 2026 09:59:59 GMT")],
            common,
            Some(&chain),
        );
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nX-Espalier-Worker: p/0/cpu0\r\nDate: Fri, 27 Nov 2026 09:59:59 GMT\r\nContent-Length: 0\r\nX-Frame-Options: DENY\r\n\r\n"
        );
    }

    #[test]
    fn every_hop_by_hop_field_stays_behind() {
        for name in HOP_BY_HOP {
            let upper = name.to_ascii_uppercase();
            for n in [name, upper.as_str()] {
                assert!(matches!(Kind::of(n), Kind::Hop | Kind::Upgrade), "{n}");
            }
        }
        assert_eq!(Kind::of("Status"), Kind::Hop);
        assert_eq!(Kind::of("Content-Length"), Kind::ContentLength);
        assert_eq!(Kind::of("Content-Type"), Kind::Other);
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
