//! The sign-in step's exchange with its verifier (`auth = { request }`, see
//! [`crate::routing::auth_request`]): a `GET` of the verifier's path on a connection of its
//! upstream group's — balanced, health-counted and kept alive as the group's traffic is —
//! with the request's facts in `X-Forwarded-*` and its sent fields; the answer read whole
//! (bounded) and judged: 2xx lets the request in, 401, 403 and 3xx go back to the client,
//! anything else — or no answer within the step's `timeout` — fails closed (503).
//!
//! Owns: [`Verifier`] (a path's verifier on one thread: its way to the group, its
//! remembered let-ins, the cause it last logged) and the exchange. Must not touch: the
//! request's way on (the handlers turn a [`Verdict`] into its route).
//!
//! Written here, not with an HTTP client crate: the group's connections, balancer and
//! health are the forwarder's ([`super::route`]), which a client crate would bypass; the
//! exchange is one head out and one small answer in.

use super::answer_read::{read_whole_head, HeadError};
use super::forward_head::ForwardHead;
use super::route::ProxyRoute;
use super::Endpoint;
use crate::http::ask::Question;
use crate::routing::auth_request::{AuthRequestSpec, Granted, Remembered};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;
use tokio::io::AsyncReadExt;

/// The largest answer body taken from a verifier (a sign-in page, a redirect's text): a
/// larger one fails the step rather than hold a thread's memory.
const MAX_ANSWER_BODY: usize = 64 << 10;

/// The fields of a refusal passed to the client.
const PASSED_BACK: [&str; 4] = ["www-authenticate", "location", "set-cookie", "content-type"];

/// What a verifier said of a request.
#[derive(Debug)]
pub enum Verdict {
    /// Let in, with the fields it passes to the app (`None`: none to pass).
    Let(Option<Rc<Granted>>),
    /// Refused: this answer goes back to the client.
    Refused {
        status: u16,
        fields: Vec<(String, Vec<u8>)>,
        body: Vec<u8>,
    },
    /// It could not say (down, slow, garbled or another status): the request gets 503.
    Failed,
}

/// A path's verifier on one thread.
pub struct Verifier {
    route: Rc<ProxyRoute>,
    spec: Rc<AuthRequestSpec>,
    copied: Rc<[String]>,
    remembered: Remembered,
    /// Why the last exchange failed, when it did: a cause is logged when it changes, not per
    /// request (a verifier down for a minute is one line, and one when it answers again).
    failing: RefCell<Option<String>>,
}

/// A small answer read whole: a verifier's, or the tracing collector's.
pub(super) struct Answer {
    pub status: u16,
    pub fields: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Verifier {
    pub fn new(route: Rc<ProxyRoute>, spec: AuthRequestSpec) -> Self {
        Verifier {
            route,
            copied: spec.copy.clone().into(),
            spec: Rc::new(spec),
            remembered: Remembered::default(),
            failing: RefCell::new(None),
        }
    }

    /// The step's settings, which a request's context carries until it is asked.
    pub fn spec(&self) -> &Rc<AuthRequestSpec> {
        &self.spec
    }

    /// Asks about `q`: remembered, or within the step's `timeout`.
    pub async fn ask(&self, q: &Question) -> Verdict {
        let remember = !self.spec.remember.is_zero();
        let key = remember.then(|| self.key(q));
        let now = Instant::now();
        if let Some(granted) = key.and_then(|k| self.remembered.get(k, now)) {
            return Verdict::Let(Some(granted));
        }
        let answer = match tokio::time::timeout(self.spec.timeout, self.exchange(q)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(cause)) => return self.failed(cause),
            Err(_) => return self.failed(format!("did not answer within {:?}", self.spec.timeout)),
        };
        match answer.status {
            200..=299 => {
                self.answers_again();
                let granted = Rc::new(self.granted(answer.fields));
                if let Some(k) = key {
                    let now = Instant::now();
                    let until = now + self.spec.remember;
                    self.remembered.put(k, until, Rc::clone(&granted), now);
                }
                Verdict::Let(Some(granted))
            }
            401 | 403 | 300..=399 => {
                self.answers_again();
                let fields = (answer.fields.into_iter())
                    .filter(|(n, _)| PASSED_BACK.contains(&n.as_str()))
                    .collect();
                Verdict::Refused {
                    status: answer.status,
                    fields,
                    body: answer.body,
                }
            }
            other => self.failed(format!(
                "answered {other} (2xx lets a request in; 401, 403 and 3xx refuse it)"
            )),
        }
    }

    /// What a let-in passes: the copied fields the verifier gave, under the names the
    /// client's own copies are dropped by.
    fn granted(&self, fields: Vec<(String, Vec<u8>)>) -> Granted {
        let fields = fields
            .into_iter()
            .filter(|(n, _)| self.copied.iter().any(|c| c == n))
            .collect();
        Granted {
            names: Rc::clone(&self.copied),
            fields,
        }
    }

    /// The remembered let-ins' key: every part the verifier was told that may change its mind.
    fn key(&self, q: &Question) -> u64 {
        let fixed = [
            q.method.as_bytes(),
            q.host.as_bytes(),
            q.target.as_bytes(),
            if q.https { b"s" } else { b"" },
        ];
        let sent = q
            .fields
            .iter()
            .flat_map(|(n, v)| [n.as_bytes(), v.as_slice()]);
        self.remembered.key(fixed.into_iter().chain(sent))
    }

    fn failed(&self, cause: String) -> Verdict {
        let mut failing = self.failing.borrow_mut();
        if failing.as_deref() != Some(cause.as_str()) {
            crate::os::log(
                "auth",
                format_args!(
                    "the verifier of group `{}` {cause}: its requests are answered 503 until it answers",
                    self.spec.group
                ),
            );
            *failing = Some(cause);
        }
        Verdict::Failed
    }

    fn answers_again(&self) {
        if self.failing.borrow_mut().take().is_some() {
            crate::os::log(
                "auth",
                format_args!("the verifier of group `{}` answers again", self.spec.group),
            );
        }
    }

    /// One exchange; a kept connection the server closed meanwhile is tried once more on a
    /// new one (the question is a `GET`: asking twice changes nothing).
    async fn exchange(&self, q: &Question) -> Result<Answer, String> {
        let mut avoid = None;
        for attempt in 0..2 {
            let (endpoint, mut conn, _held) = self
                .route
                .connection(avoid.take(), &Default::default())
                .await
                .map_err(|(status, why)| {
                    why.unwrap_or_else(|| format!("has no server to ask ({status})"))
                })?;
            let head = self.head(q, &endpoint);
            let asked = Instant::now();
            let timeout = self.route.settings().response_timeout;
            let sent = conn.send_head(&head, timeout).await;
            let mut buf = Vec::with_capacity(4096);
            let read = match sent {
                Ok(()) => read_whole_head(&mut conn, &mut buf).await,
                Err(_) => Err(HeadError::ClosedEarly),
            };
            let len = match read {
                Ok(len) => len,
                Err(HeadError::ClosedEarly) if attempt == 0 => {
                    avoid = Some(endpoint);
                    continue;
                }
                Err(e) => {
                    let cause = match e {
                        HeadError::ClosedEarly => "closed the connection without answering",
                        HeadError::Timeout => "did not answer in time",
                        HeadError::Garbage => "answered a malformed or over-64-KiB head",
                    };
                    self.route.failed(&endpoint, 502, cause);
                    return Err(format!("at {endpoint} {cause}"));
                }
            };
            let report = crate::http::access_log::Report::default();
            self.route.answered(&endpoint, &report, asked, &buf[..len]);
            let (answer, reusable) = read_answer(&mut conn, buf, len)
                .await
                .map_err(|cause| format!("at {endpoint} {cause}"))?;
            if reusable {
                self.route.pool.put(&endpoint, conn);
            }
            return Ok(answer);
        }
        Err("closed the connection without answering, twice".into())
    }

    /// The question's head: `GET` of the verifier's path, the request told in fields.
    fn head(&self, q: &Question, endpoint: &Endpoint) -> ForwardHead {
        let proto = if q.https { "https" } else { "http" };
        let (path, query) = (self.spec.uri.split_once('?')).unwrap_or((&self.spec.uri, ""));
        let mut head = ForwardHead::new("GET", path, query);
        let host = self.route.server_name(endpoint).unwrap_or_default();
        let host = host.strip_prefix("http://").unwrap_or(host);
        let host = host.strip_prefix("https://").unwrap_or(host);
        let url = format!("{proto}://{}{}", q.host, q.target);
        let told: [(&str, &[u8]); 8] = [
            ("Host", host.as_bytes()),
            ("X-Forwarded-Method", q.method.as_bytes()),
            ("X-Forwarded-Proto", proto.as_bytes()),
            ("X-Forwarded-Host", q.host.as_bytes()),
            ("X-Forwarded-Uri", q.target.as_bytes()),
            ("X-Forwarded-For", q.client.as_bytes()),
            ("X-Original-Method", q.method.as_bytes()),
            ("X-Original-URL", url.as_bytes()),
        ];
        let sent = q.fields.iter().map(|(n, v)| (n.as_str(), v.as_slice()));
        for (name, value) in told.into_iter().chain(sent) {
            if value.is_empty() && name == "X-Forwarded-For" {
                continue;
            }
            head.field(name, value);
        }
        head.field("Connection", b"keep-alive");
        head
    }
}

/// The rest of an answer whose head is `buf[..len]` (read by the forwarder's
/// `read_whole_head`): its fields and body (at most 64 KiB), and whether its connection may
/// carry the next request. espalier's own small exchanges share it: the verifier's and the
/// tracing collector's.
pub(super) async fn read_answer(
    conn: &mut super::upstream::Conn,
    mut buf: Vec<u8>,
    len: usize,
) -> Result<(Answer, bool), String> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut fields);
    if !matches!(resp.parse(&buf[..len]), Ok(httparse::Status::Complete(_))) {
        return Err("answered a head that does not parse".into());
    }
    let status = resp.code.unwrap_or(0);
    let field = |name: &str| {
        resp.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let chunked = field("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case(b"chunked"));
    let length = field("content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    let closes = field("connection").is_some_and(|v| v.eq_ignore_ascii_case(b"close"));
    let kept: Vec<(String, Vec<u8>)> = resp
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    let no_body = (100..200).contains(&status) || status == 204 || status == 304;
    let body_start = len;
    let (body, reusable) = if no_body {
        (Vec::new(), !closes && buf.len() == len)
    } else if chunked {
        loop {
            match crate::http::chunked::decode_chunked(
                &buf[body_start..],
                MAX_ANSWER_BODY as u64,
                4096,
            ) {
                Ok(Some((used, body))) => break (body, !closes && body_start + used == buf.len()),
                Ok(None) => read_more(conn, &mut buf, body_start).await?,
                Err(_) => return Err("answered a chunked body over 64 KiB or malformed".into()),
            }
        }
    } else if let Some(n) = length {
        if n > MAX_ANSWER_BODY {
            return Err(format!("answered a body of {n} bytes, over 64 KiB"));
        }
        while buf.len() < body_start + n {
            read_more(conn, &mut buf, body_start).await?;
        }
        (
            buf[body_start..body_start + n].to_vec(),
            !closes && buf.len() == body_start + n,
        )
    } else {
        // Framed by the close.
        loop {
            match read_more(conn, &mut buf, body_start).await {
                Ok(()) => {}
                Err(_) if buf.len() - body_start <= MAX_ANSWER_BODY => break,
                Err(e) => return Err(e),
            }
        }
        (buf[body_start..].to_vec(), false)
    };
    let answer = Answer {
        status,
        fields: kept,
        body,
    };
    Ok((answer, reusable))
}

/// Reads more of an answer's body into `buf` (its body from `start`): an error at the end of
/// the connection or past the body's bound.
async fn read_more(
    conn: &mut super::upstream::Conn,
    buf: &mut Vec<u8>,
    start: usize,
) -> Result<(), String> {
    if buf.len() - start > MAX_ANSWER_BODY + 4096 {
        return Err("answered a body over 64 KiB".into());
    }
    buf.reserve(8 << 10);
    match conn.read_buf(buf).await {
        Ok(0) => Err("closed the connection within its answer".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cut its answer short ({e})")),
    }
}
