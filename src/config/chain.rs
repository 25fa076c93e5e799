//! The processing order: every site feature as a step of one request chain or one response
//! chain, in the order they run, with the keys that turn each on.
//!
//! Owns: that order ([`RequestStep::ORDER`], [`ResponseStep::ORDER`]), each step's keys, and
//! the reference's table of them ([`reference_table`], which a test holds equal to
//! docs/reference.md's). The order is written here once: each worker thread compiles a site's
//! request chain by walking [`RequestStep::ORDER`] (see `crate::handlers::chain`), and
//! `check` refuses, on a path whose application accepts its connections itself, every key of
//! a step ([`acts_on_requests`]) — derived from the steps, not from a list kept beside them.
//! Every step acts on a request espalier reads, so none can run where the app accepts the
//! connections; what acts on the listening socket or the connection alone (bindings, TLS,
//! the PROXY header) is no step ([`CONNECTION_KEYS`]). Must not touch: what a step does to a request (its code
//! lives beside its data: `crate::routing::{rules, access, limits, auth}`, the handlers'
//! answers, `crate::http`'s response edits).
//!
//! Why this order — that of nginx's phases (server rewrite, find location, access, content):
//! - an ACME challenge before all: the directory's validation must not meet a redirect to
//!   https, a rule, a deny list or a password (nginx's ACME module answers it in the same
//!   place), and it answers only a token of an order under way;
//! - rules next: a rewrite changes the path, so everything that looks at the path (which
//!   app, which path lists, which sign-in) looks at the path the request ends up at;
//! - the route next, once: the app, the path in normal form, a FastCGI path's script, file
//!   or status, and — on a shared address — whether another pool serves it. A request for
//!   another pool leaves here, before any limit or sign-in: that pool runs the whole chain
//!   (its counters and passwords are its own);
//! - access, limit and sign-in last, in that order (a refused address costs no limit slot
//!   and no password hash), all before the body: a lent request's body streams to the app as
//!   it arrives, so whether the client may send it must be decided first — and a request
//!   answered here is decided the same way, so both kinds of request see one chain.
//!
//! The response chain runs: each worker thread compiles a site's (and a path's) chain for
//! each scheme by walking [`ResponseStep::ORDER`] (`crate::http::response_chain`), and the
//! one response writer runs it on every answer's head — espalier's own, files, FastCGI, pool
//! apps and upstreams, whichever protocol carries it.
//!
//! Adding a response step, counted on `status_headers` (`crate::features::status_headers`),
//! touches four files:
//! 1. its module under `src/features/`: its typed value, its check (`of`), and its compiled
//!    step (a `HeadStep`, run on the answer's head with its status);
//! 2. its lines here — its `ResponseStep` (name, keys, sentence: docs/reference.md's table
//!    and `check`'s activation refusals follow from them), and its field and a line in each
//!    of [`ResponseKeys`]' methods (checked, listed, a path's over its site's, compiled);
//! 3. its key in `config/raw.rs` (on a site and a path, and in `RawResponseKeys`);
//! 4. its section in docs/reference.md.
//!
//! The steps that came before the list (error pages, `headers`) are compiled by the runner
//! from their own data, which the handlers read at a thread's start (error pages are files).
//! Compression is decided before the head is written, since what it changes is the body (a
//! static file's coding is chosen among its cached variants, an app's by `proxy::encode`'s
//! plan), and a static file's cache time (the answer step's `cache`) is in the head cached
//! with the file, so a request pays a copy for both. A request step is a variant of
//! [`RequestStep`] with an arm in `handlers/route.rs` (its verdict goes into the context).
//! The reference's table follows from this file (`cargo test` says when it differs).

use super::locate::Seg;
use super::raw::RawResponseKeys;
use crate::features::status_headers::StatusHeaders;
use crate::features::HeadStep;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::rc::Rc;

/// A step of the request chain, in the order they run ([`Self::ORDER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestStep {
    /// `[server.acme]`: an ACME directory's HTTP-01 request answered with its key
    /// authorization, before anything of the site's can refuse or redirect it.
    AcmeChallenge,
    /// `[[site.rule]]`: a redirect, a fixed answer or a rewrite.
    Rules,
    /// `redirect_to_https`: a cleartext request is sent to the https address.
    ToHttps,
    /// The app, chosen once (always run).
    Route,
    /// `allow`/`deny` of the site and of the path.
    Access,
    /// The site's `limit`.
    Limit,
    /// The path's `auth`.
    Auth,
    /// The answer: here (static files, the built-in pages) or the app's (always run).
    Answer,
}

impl RequestStep {
    /// The request chain, in the order its steps run.
    pub const ORDER: [RequestStep; 8] = [
        RequestStep::AcmeChallenge,
        RequestStep::Rules,
        RequestStep::ToHttps,
        RequestStep::Route,
        RequestStep::Access,
        RequestStep::Limit,
        RequestStep::Auth,
        RequestStep::Answer,
    ];

    /// Its name in the reference.
    pub fn name(self) -> &'static str {
        match self {
            RequestStep::AcmeChallenge => "ACME challenge",
            RequestStep::Rules => "rules",
            RequestStep::ToHttps => "to https",
            RequestStep::Route => "route",
            RequestStep::Access => "access",
            RequestStep::Limit => "limit",
            RequestStep::Auth => "auth",
            RequestStep::Answer => "answer",
        }
    }

    /// The keys that configure it (a site's and its paths').
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            RequestStep::AcmeChallenge => &["server.acme"],
            RequestStep::Rules => &["rule"],
            RequestStep::ToHttps => &["redirect_to_https"],
            RequestStep::Route => &[],
            RequestStep::Access => &["allow", "deny", "deny_action", "trusted_proxies"],
            RequestStep::Limit => &["limit", "trusted_proxies", "max_body_size"],
            RequestStep::Auth => &["auth"],
            RequestStep::Answer => &[
                "upstream",
                "root",
                "index",
                "follow_symlinks",
                "autoindex",
                "alias",
                "cache",
                "try_files",
                "fallback",
                "no_scripts",
                "cache_responses",
                "buffer",
            ],
        }
    }

    /// What it does, one sentence for the reference.
    pub fn what(self) -> &'static str {
        match self {
            RequestStep::AcmeChallenge => "on a site whose certificates espalier orders, `/.well-known/acme-challenge/TOKEN` of an order under way is answered with its key authorization (any other request goes on)",
            RequestStep::Rules => "the first rule that matches redirects, answers, or rewrites the target every later step sees",
            RequestStep::ToHttps => "a cleartext request is answered 308 to the site's https address",
            RequestStep::Route => "the path in normal form chooses the app (longest prefix): a request of another pool's path is handed to it here, a FastCGI path's script, file or status is decided",
            RequestStep::Access => "a client the site's or the path's lists refuse gets `deny_action`",
            RequestStep::Limit => "a client over the site's rate or in-flight bound gets 429 (or the limit's `action`); a body over the path's or site's `max_body_size` gets 413 before the app sees a byte of it",
            RequestStep::Auth => "a path with a password answers 401 until the client signs in; one with a verifier (`auth = { request }`) asks it before the request is answered or lent",
            RequestStep::Answer => "static files and the built-in pages are answered here; an app's path is lent to its process, an upstream's to one of its servers",
        }
    }
}

/// A step of the response chain, in the order they run ([`Self::ORDER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseStep {
    /// `errors`: the site's page for an error status.
    ErrorPages,
    /// `headers` (and `hsts` over TLS): field edits.
    Headers,
    /// `status_headers`: field edits by the answer's status (`crate::features::status_headers`).
    StatusHeaders,
    /// `compress`: the answer compressed in a coding the client accepts.
    Compress,
    /// `access_log` and `metrics`: the answer counted and written down.
    Log,
}

impl ResponseStep {
    /// The response chain, in the order its steps run.
    pub const ORDER: [ResponseStep; 5] = [
        ResponseStep::ErrorPages,
        ResponseStep::Headers,
        ResponseStep::StatusHeaders,
        ResponseStep::Compress,
        ResponseStep::Log,
    ];

    /// Its name in the reference.
    pub fn name(self) -> &'static str {
        match self {
            ResponseStep::ErrorPages => "error page",
            ResponseStep::Headers => "headers",
            ResponseStep::StatusHeaders => "status headers",
            ResponseStep::Compress => "compress",
            ResponseStep::Log => "log",
        }
    }

    /// The keys that configure it.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            ResponseStep::ErrorPages => &["errors", "replace_app_errors"],
            ResponseStep::Headers => &["headers", "hsts", "server.http3"],
            ResponseStep::StatusHeaders => &["status_headers"],
            ResponseStep::Compress => &["compress"],
            ResponseStep::Log => &["access_log", "metrics"],
        }
    }

    /// What it does, one sentence for the reference.
    pub fn what(self) -> &'static str {
        match self {
            ResponseStep::ErrorPages => "espalier's own error text (and the app's, with `replace_app_errors`) gives way to the site's page for the status",
            ResponseStep::Headers => "the site's and the path's fields are set or removed, HSTS (and with `http3`, `Alt-Svc`) added over TLS",
            ResponseStep::StatusHeaders => "fields are set or removed by the answer's status or class (`\"5xx\"`), over those of `headers`: the path's table, else the site's",
            ResponseStep::Compress => "a compressible answer is compressed in the client's preferred coding, with `Vary: Accept-Encoding`",
            ResponseStep::Log => "the answer is metered and logged in the site's log",
        }
    }
}

/// The typed values of a site's or path's response features that are modules of
/// [`crate::features`] — one field each: checked here by its module's `of` ([`Self::check`]),
/// carried to the workers in their spec, and compiled there into its step ([`Self::step`]).
/// A feature added is a field and a line in each of these, and nothing outside this file,
/// its module, its raw key and the reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseKeys {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_headers: Option<StatusHeaders>,
}

/// What a feature's check asks of the config's validator: the rules shared by several keys,
/// and where to say what is wrong (it names the file, line and key).
pub(super) trait KeyCheck {
    /// `headers`' rules for a table of fields at `at` (names, values): those that pass.
    fn header_fields(&mut self, at: &[Seg], raw: BTreeMap<String, String>)
        -> Vec<(String, String)>;
    /// Refuses the key at `at`, saying why and the fix.
    fn refuse(&mut self, at: &[Seg], why: String);
}

impl ResponseKeys {
    /// The keys as a site or path at `at` wrote them, checked: a refused one is said by `v`
    /// and left unset.
    pub(super) fn check(v: &mut impl KeyCheck, at: &[Seg], raw: RawResponseKeys) -> ResponseKeys {
        let key = |k: &'static str| at.iter().cloned().chain([Seg::Key(k)]).collect::<Vec<_>>();
        let status_headers = raw.status_headers.and_then(|tables| {
            let at = key("status_headers");
            let tables = (tables.into_iter())
                .map(|(status, fields)| (status, v.header_fields(&at, fields)))
                .collect();
            (StatusHeaders::of(tables))
                .map_err(|(status, why)| v.refuse(&at, format!("`{status}` {why}")))
                .ok()
        });
        ResponseKeys { status_headers }
    }

    /// Each key by its name, with whether it is set (see `SiteSpec::keys`).
    pub fn keys(&self) -> [(&'static str, bool); 1] {
        let ResponseKeys { status_headers } = self;
        [("status_headers", status_headers.is_some())]
    }

    /// A path's keys (`self`) over its site's: a key the path sets replaces the site's.
    pub fn over(&self, site: &ResponseKeys) -> ResponseKeys {
        ResponseKeys {
            status_headers: (self.status_headers.as_ref())
                .or(site.status_headers.as_ref())
                .cloned(),
        }
    }

    /// `step` compiled from these keys, when they set it (`None` for the steps that are not
    /// modules of [`crate::features`]).
    pub fn step(&self, step: ResponseStep) -> Option<Rc<dyn HeadStep>> {
        match step {
            ResponseStep::StatusHeaders => self.status_headers.clone().map(|s| Rc::new(s) as _),
            ResponseStep::ErrorPages
            | ResponseStep::Headers
            | ResponseStep::Compress
            | ResponseStep::Log => None,
        }
    }
}

/// Whether `key` (a site's or a path's) configures a step that acts on requests: such a key
/// cannot act on a path whose application accepts its connections itself.
pub fn acts_on_requests(key: &str) -> bool {
    steps().any(|s| s.keys.contains(&key))
}

/// One step of either chain, as the reference and `check` read it.
struct StepRow {
    /// Its place: `1`… in the request chain, `r1`… in the response chain.
    place: String,
    name: &'static str,
    keys: &'static [&'static str],
    what: &'static str,
}

/// Every step, the request chain's then the response chain's, in order.
fn steps() -> impl Iterator<Item = StepRow> {
    let request = RequestStep::ORDER.iter().enumerate().map(|(k, s)| StepRow {
        place: (k + 1).to_string(),
        name: s.name(),
        keys: s.keys(),
        what: s.what(),
    });
    let response = ResponseStep::ORDER
        .iter()
        .enumerate()
        .map(|(k, s)| StepRow {
            place: format!("r{}", k + 1),
            name: s.name(),
            keys: s.keys(),
            what: s.what(),
        });
    request.chain(response)
}

/// The keys of a site or path that configure no step: the listening socket's and the
/// connection's (refused on activation by their own rules where they cannot act), and
/// which pool serves which path.
pub const CONNECTION_KEYS: &[&str] = &[
    "name",
    "bindings",
    "tls",
    "client_certs",
    "proxy_protocol",
    "proxy_protocol_from",
    "path",
    "pool",
    "handler",
];

/// The reference's table of the processing order (Markdown), made from the steps.
pub fn reference_table() -> String {
    let keys = |keys: &[&str]| {
        if keys.is_empty() {
            "(always)".to_string()
        } else {
            keys.iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut table = String::from("| # | step | keys | what it does |\n|---|---|---|---|\n");
    for s in steps() {
        let row = format!(
            "| {} | {} | {} | {} |\n",
            s.place,
            s.name,
            keys(s.keys),
            s.what
        );
        table.push_str(&row);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_shows_the_chains_order() {
        let readme = include_str!("../../docs/reference.md");
        let table = reference_table();
        assert!(
            readme.contains(&table),
            "the processing order of docs/reference.md differs from src/config/chain.rs; put this table in it:\n{table}"
        );
    }

    /// Every key a site or path has (their `keys` destructure every field) belongs to a step
    /// or to the connection: none is left out of the chain unclassified.
    #[test]
    fn every_key_is_a_steps_or_the_connections() {
        let config = crate::config::Config::builtin(([127, 0, 0, 1], 8080).into(), None);
        let site = &config.sites[0];
        let app = &site.apps[0];
        for (key, _) in site.keys().into_iter().chain(app.keys()) {
            assert!(
                acts_on_requests(key) != CONNECTION_KEYS.contains(&key),
                "`{key}` must be a step's key or a connection's, not both or neither"
            );
        }
    }

    #[test]
    fn route_and_answer_are_in_every_chain_and_route_comes_first_of_the_paths_steps() {
        let at = |s| RequestStep::ORDER.iter().position(|x| *x == s).unwrap();
        assert!(at(RequestStep::Rules) < at(RequestStep::Route));
        for s in [RequestStep::Access, RequestStep::Limit, RequestStep::Auth] {
            assert!(at(RequestStep::Route) < at(s), "{s:?} needs the path");
        }
        assert_eq!(RequestStep::ORDER.last(), Some(&RequestStep::Answer));
    }
}
