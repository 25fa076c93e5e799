//! The typed configuration of a `[[site]]`: its bindings, apps (path, pool, handler and how
//! it serves), what shapes its answers (headers, cache times, error pages, compression,
//! rules), its log and its certificate; and what another pool's worker is told of it (its
//! [`outline`](SiteSpec::outline)).
//!
//! Owns: the site's types and their defaults. Must not touch: how TOML becomes them (see
//! `validate`) or the pools' settings (`model`).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use crate::certs::TlsFiles;
pub use crate::routing::access::{AccessList, Cidr, DenyAction};
pub use crate::routing::auth::AuthSpec;
pub use crate::routing::limits::{LimitSpec, Rate};
pub use crate::routing::rules::{RuleAction, RuleSpec};

/// The index file a directory is served by when the site names none.
pub const DEFAULT_INDEX: &str = "index.html";

/// The request handlers a site's application can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandlerKind {
    /// Files under the site's `root` (or the built-in welcome page when it has none).
    Static,
    /// The case study's "simple dynamic page", built per request.
    Dynamic,
    /// CPU-heavy work (audio synthesis and encoding), like the web-gardening seed's service.
    Cpu,
    /// Forwarded to the pool's application processes (a pool with `command` and
    /// `transport = "proxy"`); set by validation, never written in a config.
    Proxy,
}

impl HandlerKind {
    pub const NAMES: &'static str = "\"static\", \"dynamic\" or \"cpu\"";

    pub fn name(self) -> &'static str {
        match self {
            HandlerKind::Static => "static",
            HandlerKind::Dynamic => "dynamic",
            HandlerKind::Cpu => "cpu",
            HandlerKind::Proxy => "proxy",
        }
    }
}

/// An application: a URL path prefix served by one pool with one handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    pub path: String,
    /// Empty for a static path that names no pool on a site whose other paths do: it is
    /// served by whichever of the site's pools holds the connection (see [`Self::any_pool`]).
    pub pool: String,
    pub handler: HandlerKind,
    /// The `[[upstream]]` group the path is forwarded to (its servers answer, not the pool's
    /// application; the pool's workers forward). Its handler is `Proxy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Files under the site's `root` are served as files before the app is asked (nginx's
    /// `try_files $uri $uri/ …`, Caddy's `php_fastcgi`): the default of a FastCGI app,
    /// `try_files = true` for a proxied one. See [`crate::handlers`]' front controller.
    #[serde(default, skip_serializing_if = "is_false")]
    pub try_files: bool,
    /// A FastCGI app's front controller (`/index.php`): the script run for a path that is
    /// neither a script nor a file, with the original URI in `REQUEST_URI`. On a static path,
    /// the file answered for a path that names none (a single-page app's `/index.html`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// URL path prefixes (without a trailing `/`) under which no script runs: upload folders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub no_scripts: Vec<String>,
    /// Its own header fields, over the site's (see [`SiteSpec::headers`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Its static files' `Cache-Control`, before the site's (see [`SiteSpec::cache`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<(String, String)>,
    /// A static path's own folder, its prefix not part of the file path (nginx's `alias`:
    /// `/static/x.css` is `ALIAS/x.css`); `None`: under the site's root, prefix included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<PathBuf>,
    /// Who may reach this path, beside the site's lists (both must let a client in).
    #[serde(default, skip_serializing_if = "AccessList::is_empty")]
    pub access: AccessList,
    /// Who must sign in to it (`auth`: basic authentication from an htpasswd file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,
    /// Who lets its requests in: another service asked first (`auth = { request }`), its
    /// own or its site's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_request: Option<crate::routing::auth_request::AuthRequestSpec>,
    /// The largest request body it takes (`max_body_size`), over its site's and the
    /// server's; `None`: its site's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_size: Option<u64>,
    /// Its response features' keys (see [`super::chain::ResponseKeys`]), over its site's.
    #[serde(default, skip_serializing_if = "is_default")]
    pub response: super::chain::ResponseKeys,
    /// What of its pool's or group's `cache_responses` and `buffer` it uses (both, unless
    /// the path turns one off).
    #[serde(default, skip_serializing_if = "is_default")]
    pub uses: PathUses,
}

/// What a proxied path takes of its pool's or upstream group's handling of answers: its
/// response cache (`cache_responses`) and its buffering (`buffer`) — each on unless the path
/// says `false` (an account page beside a cached shop; a path whose answers stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathUses {
    pub cache_responses: bool,
    pub buffer: bool,
}

impl Default for PathUses {
    fn default() -> Self {
        PathUses {
            cache_responses: true,
            buffer: true,
        }
    }
}

impl AppSpec {
    /// `path` served by `pool` with `handler`, no files tried before it.
    pub fn new(path: String, pool: String, handler: HandlerKind) -> Self {
        AppSpec {
            path,
            pool,
            handler,
            upstream: None,
            try_files: false,
            fallback: None,
            no_scripts: Vec::new(),
            headers: Vec::new(),
            cache: Vec::new(),
            alias: None,
            access: AccessList::default(),
            auth: None,
            auth_request: None,
            max_body_size: None,
            response: Default::default(),
            uses: PathUses::default(),
        }
    }

    /// The upstream groups it asks: the one it is forwarded to, and its sign-in's verifier.
    pub fn groups(&self) -> impl Iterator<Item = &str> {
        let verifier = self.auth_request.as_ref().map(|a| a.group.as_str());
        self.upstream.as_deref().into_iter().chain(verifier)
    }

    /// The path's keys, by their names in the config, each with whether it is set. The
    /// destructuring names every field: a field added to the path does not compile until it
    /// has a key here, and `config::chain`'s tests fail until that key is a step's or a
    /// connection's.
    pub fn keys(&self) -> Vec<(&'static str, bool)> {
        let AppSpec {
            path: _,
            pool: _,
            handler: _,
            upstream,
            try_files,
            fallback,
            no_scripts,
            headers,
            cache,
            alias,
            access,
            auth,
            auth_request,
            max_body_size,
            response,
            uses,
        } = self;
        let mut keys = vec![
            ("path", true),
            ("pool", true),
            ("handler", true),
            ("upstream", upstream.is_some()),
            ("try_files", *try_files),
            ("fallback", fallback.is_some()),
            ("no_scripts", !no_scripts.is_empty()),
            ("headers", !headers.is_empty()),
            ("cache", !cache.is_empty()),
            ("alias", alias.is_some()),
            ("allow", !access.allow.is_empty()),
            ("deny", !access.deny.is_empty()),
            ("auth", auth.is_some() || auth_request.is_some()),
            ("max_body_size", max_body_size.is_some()),
            ("cache_responses", !uses.cache_responses),
            ("buffer", !uses.buffer),
        ];
        keys.extend(response.keys());
        keys
    }

    /// The path's keys that are set and configure a step acting on requests (see
    /// [`super::chain::acts_on_requests`]): a handler is refused on activation by its own
    /// rule (it is espalier's to run), so it is not among them.
    pub fn request_keys(&self) -> Vec<&'static str> {
        set_request_keys(self.keys())
    }

    /// A static path served by whichever pool holds the connection (`/static/` beside a
    /// proxied or FastCGI app, on https as on http: a TLS connection belongs to one pool).
    pub fn any_pool(&self) -> bool {
        self.pool.is_empty()
    }

    /// Whether `pool` answers this path when it holds the connection.
    pub fn answered_by(&self, pool: &str) -> bool {
        self.any_pool() || self.pool == pool
    }
}

/// Where a site listens: `http://IP:PORT[:HOST]`, IIS's `protocol://ip:port:host`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    pub addr: SocketAddr,
    /// Host header this binding answers (and, over TLS, the SNI name); `None` answers any.
    pub host: Option<String>,
    /// `https://`: TLS, with the site's certificate.
    #[serde(default)]
    pub tls: bool,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.addr)?;
        if let Some(h) = &self.host {
            write!(f, ":{h}")?;
        }
        Ok(())
    }
}

/// A site. In a worker's spec, most sites are another pool's [`outline`](SiteSpec::outline),
/// so what is empty is not written (a hoster's thousands of outlines stay a few bytes each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<Binding>,
    /// Document root, resolved against the config file's folder; `None` = built-in page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// Index files tried for a directory, in order. Default `["index.html"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub index: Vec<String>,
    /// Serve symlinks that lead outside `root`. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub follow_symlinks: bool,
    /// A folder without an index file answers with a listing of it (`autoindex`); `None`:
    /// 403.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoindex: Option<Autoindex>,
    pub apps: Vec<AppSpec>,
    /// Where and how the site's requests are logged; `None` = not logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<AccessLogSpec>,
    /// Whether its bindings' connections start with a PROXY protocol header (v1 or v2) from a
    /// load balancer, naming the real client. Default false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub proxy_protocol: bool,
    /// With `proxy_protocol`, the peers whose connections start with the header (a load
    /// balancer's addresses); any other peer's connection is read as plain HTTP, so a header
    /// it sends is refused as a bad request. Empty: every peer sends it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proxy_protocol_from: Vec<Cidr>,
    /// Its certificate chain and key for `https://` bindings (`tls = { cert, key }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsFiles>,
    /// Client certificates asked in the TLS handshake (`client_certs`), and whether required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certs: Option<ClientCerts>,
    /// `Strict-Transport-Security` sent with its answers over TLS (`max-age=…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hsts: Option<String>,
    /// `Alt-Svc` sent with its answers over TLS where `[server] http3` is on (`h3=":443";
    /// ma=86400`, a port per https port of the site): made by check, not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt_svc: Option<String>,
    /// Its `http://` bindings answer 308 to the same URL on its first https port.
    #[serde(default, skip_serializing_if = "is_false")]
    pub redirect_to_https: bool,
    /// Header fields set on its answers, its apps' included: `(name, value)`; a field the
    /// app sent by that name is replaced, and an empty value only removes it (`Server`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// `Cache-Control` of its static files: `(content type, value)`, the type exact
    /// (`text/css`), a family (`image/*`) or `*`; the first that matches wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<(String, String)>,
    /// Its redirect and rewrite rules, in order (see [`crate::routing::rules`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSpec>,
    /// Its own error pages: `(status, file)`, the file resolved against the config's folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<(u16, PathBuf)>,
    /// Its apps' own error answers are replaced by its page for their status.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replace_app_errors: bool,
    /// The content codings its answers may go out in, its preference first; empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compress: Vec<crate::compress::Coding>,
    /// Who may reach it (`allow`, `deny`).
    #[serde(default, skip_serializing_if = "AccessList::is_empty")]
    pub access: AccessList,
    /// Proxies whose `X-Forwarded-For` is believed for `access`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_proxies: Vec<Cidr>,
    /// What a refused client gets.
    #[serde(default, skip_serializing_if = "is_default")]
    pub deny_action: DenyAction,
    /// Whether its requests are counted for Prometheus (`metrics`; see `http::meters`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub metrics: bool,
    /// How fast and how much one client may ask of it (`limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitSpec>,
    /// The largest request body it takes (`max_body_size`), over the server's
    /// (`[server.limits]`); `None`: the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_size: Option<u64>,
    /// Its response features' keys (see [`super::chain::ResponseKeys`]).
    #[serde(default, skip_serializing_if = "is_default")]
    pub response: super::chain::ResponseKeys,
}

/// How a folder is listed (`autoindex = true`, or `{ dotfiles = true }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Autoindex {
    /// Names that start with `.` are listed too; by default they are left out (`.git`,
    /// `.env`, `.htpasswd`: what a folder holds and a site rarely means to show).
    pub dotfiles: bool,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl SiteSpec {
    /// The pools its apps name, each once, in the order of its apps (a static path without a
    /// pool names none).
    pub fn pools(&self) -> Vec<&str> {
        let mut pools: Vec<&str> = Vec::new();
        for a in self.apps.iter().filter(|a| !a.any_pool()) {
            if !pools.contains(&a.pool.as_str()) {
                pools.push(&a.pool);
            }
        }
        pools
    }

    /// Whether `pool` serves any of the site's apps (a site's apps may be spread over pools by
    /// path, as IIS applications are).
    pub fn served_by(&self, pool: &str) -> bool {
        self.apps.iter().any(|a| a.pool == pool)
    }

    /// What another pool's worker is told of the site: its name and which pool serves which
    /// path — what routing and hand-off need (the address's host table says which names lead
    /// to it) — without its bindings, root, log, certificate and policies, which only the
    /// pools that serve it act on. Hosting thousands of sites, those were most of every
    /// worker's spec; and a change to them (a reload of one site's file) leaves the other
    /// pools' workers as they are.
    pub fn outline(&self) -> SiteSpec {
        SiteSpec {
            name: self.name.clone(),
            bindings: Vec::new(),
            root: None,
            index: Vec::new(),
            follow_symlinks: false,
            autoindex: None,
            // Which pool serves which path; how the path is served is its pool's business.
            apps: self
                .apps
                .iter()
                .map(|a| AppSpec {
                    // Read before the hand-off, as the site's.
                    max_body_size: a.max_body_size,
                    ..AppSpec::new(a.path.clone(), a.pool.clone(), a.handler)
                })
                .collect(),
            access_log: None,
            proxy_protocol: false,
            proxy_protocol_from: Vec::new(),
            tls: None,
            client_certs: None,
            hsts: None,
            alt_svc: None,
            redirect_to_https: false,
            headers: Vec::new(),
            cache: Vec::new(),
            rules: Vec::new(),
            errors: Vec::new(),
            replace_app_errors: false,
            compress: Vec::new(),
            response: Default::default(),
            access: AccessList::default(),
            trusted_proxies: Vec::new(),
            deny_action: DenyAction::default(),
            limit: None,
            metrics: false,
            // Read before the hand-off: another pool's site may take a larger body than this
            // worker's, and its worker bounds the head it parses by the largest of them.
            max_body_size: self.max_body_size,
        }
    }

    /// Whether `self` and `other` have equal outlines ([`Self::outline`]), without making
    /// them: a reload compares every host of a shared address before and after, 10,000
    /// outlines a side at hosting scale. Compares what `outline` keeps, and nothing else.
    pub fn same_outline(&self, other: &SiteSpec) -> bool {
        let app = |a: &AppSpec, b: &AppSpec| {
            (&a.path, &a.pool, a.handler, a.max_body_size)
                == (&b.path, &b.pool, b.handler, b.max_body_size)
        };
        self.name == other.name
            && self.max_body_size == other.max_body_size
            && self.apps.len() == other.apps.len()
            && self.apps.iter().zip(&other.apps).all(|(a, b)| app(a, b))
    }

    /// The site's keys, by their names in the config, each with whether it is set (its
    /// paths' are [`AppSpec::keys`]). The destructuring names every field: a field added to
    /// the site does not compile until it has a key here, and `config::chain`'s tests fail
    /// until that key is a step's or a connection's.
    pub fn keys(&self) -> Vec<(&'static str, bool)> {
        let SiteSpec {
            name: _,
            bindings,
            proxy_protocol,
            proxy_protocol_from,
            tls,
            client_certs,
            apps: _,
            root,
            index,
            follow_symlinks,
            autoindex,
            access_log,
            hsts,
            // Made by check from `[server] http3`, not a key of the site.
            alt_svc: _,
            redirect_to_https,
            headers,
            cache,
            rules,
            errors,
            replace_app_errors,
            compress,
            access,
            trusted_proxies,
            deny_action,
            metrics,
            limit,
            max_body_size,
            response,
        } = self;
        let mut keys = vec![
            ("name", true),
            ("bindings", !bindings.is_empty()),
            ("proxy_protocol", *proxy_protocol),
            ("proxy_protocol_from", !proxy_protocol_from.is_empty()),
            ("tls", tls.is_some()),
            ("client_certs", client_certs.is_some()),
            ("root", root.is_some()),
            ("index", index.as_slice() != [DEFAULT_INDEX]),
            ("follow_symlinks", *follow_symlinks),
            ("autoindex", autoindex.is_some()),
            ("access_log", access_log.is_some()),
            ("hsts", hsts.is_some()),
            ("redirect_to_https", *redirect_to_https),
            ("headers", !headers.is_empty()),
            ("cache", !cache.is_empty()),
            ("rule", !rules.is_empty()),
            ("errors", !errors.is_empty()),
            ("replace_app_errors", *replace_app_errors),
            ("compress", !compress.is_empty()),
            ("trusted_proxies", !trusted_proxies.is_empty()),
            ("deny_action", *deny_action != DenyAction::default()),
            ("metrics", *metrics),
            ("limit", limit.is_some()),
            ("max_body_size", max_body_size.is_some()),
            ("allow", !access.allow.is_empty()),
            ("deny", !access.deny.is_empty()),
        ];
        keys.extend(response.keys());
        keys
    }

    /// The site's keys that are set and configure a step acting on requests (every site
    /// feature, static files' keys included; see [`super::chain`]). A path whose application
    /// accepts its connections itself (`transport = "activation"`) never shows espalier a
    /// request, so `check` refuses each of them there.
    pub fn request_keys(&self) -> Vec<&'static str> {
        set_request_keys(self.keys())
    }

    /// The site as `pool`'s workers are told it: whole if it serves the site, else its
    /// [`outline`](Self::outline).
    pub fn as_seen_by(
        &self,
        whole: &std::sync::Arc<SiteSpec>,
        pool: &str,
    ) -> std::sync::Arc<SiteSpec> {
        if self.served_by(pool) {
            std::sync::Arc::clone(whole)
        } else {
            std::sync::Arc::new(self.outline())
        }
    }
}

/// The line format of an access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFormat {
    /// The Common Log Format (NCSA), as every log tool reads it.
    Common,
    /// Common plus referer and user agent (Apache/nginx `combined`), then espalier's request
    /// time in microseconds, the worker and the upstream time of a proxied app.
    Combined,
    /// One JSON object per line, every field named.
    Json,
}

/// A site's access log (`access_log = { path = "…", format = "…" }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccessLogSpec {
    /// Resolved against the config file's folder.
    pub path: PathBuf,
    pub format: LogFormat,
}

/// A site's `client_certs`: the authority its clients' certificates chain to, and whether a
/// connection without one is refused (`required`) or let in unnamed (`optional`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCerts {
    pub ca: PathBuf,
    pub required: bool,
}

/// Of `keys` (name, set), the names set whose step acts on requests.
fn set_request_keys(keys: Vec<(&'static str, bool)>) -> Vec<&'static str> {
    keys.into_iter()
        .filter(|&(key, set)| set && super::chain::acts_on_requests(key))
        .map(|(key, _)| key)
        .collect()
}
