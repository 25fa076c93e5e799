//! A site's app paths as one worker thread answers them: which handler each path has in this
//! thread's pool, built once at the thread's start.
//!
//! Owns: [`App`], [`AppHandler`] and the choice of a path's handler from its spec (static,
//! the built-in pages, forwarded to the pool's application — FastCGI with its scripts, files
//! tried first where asked — or another pool's). Must not touch: requests (the parent routes
//! them, [`super::front`] decides a front controller's).

use super::static_files::StaticFiles;
use crate::config::PathUses;
use crate::config::{AppSpec, HandlerKind, SiteSpec};
use crate::http::edits::FieldEdits;
use crate::http::error_pages::{ErrorPage, ErrorPages};
use crate::http::response_chain::ResponseChain;
use crate::proxy::{ProxyRoute, Scripts};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

pub(super) enum AppHandler {
    Static(StaticFiles),
    Dynamic,
    Cpu,
    /// Forwarded to the pool's application (handed back to the connection as a whole, see
    /// [`crate::http::service::Service::route`]); with `try_files`, the files under the root
    /// are served here first.
    Proxy(Rc<ProxyRoute>, PathUses, Option<StaticFiles>),
    /// Forwarded in FastCGI: the scripts under the site's document root that may run, and the
    /// files served as files (see [`super::front`]).
    FastCgi(Rc<ProxyRoute>, PathUses, Scripts, Option<StaticFiles>),
    /// An application pool's app in a worker that was given no route to it: 502.
    Unreachable,
    /// An app of another pool on a shared address: the connection is handed there (the
    /// index is into the thread's hand-off targets; `None` when it has none: 503).
    Elsewhere(Option<usize>),
}

/// A thread's ways to the servers its paths are forwarded to: its pool's application's
/// processes, and each upstream group its sites' paths name (only those: a group no path of
/// the thread's uses costs it nothing).
#[derive(Default)]
pub struct ProxyRoutes {
    pub app: Option<Rc<ProxyRoute>>,
    pub upstreams: HashMap<String, Rc<ProxyRoute>>,
    /// The thread's sign-in verifiers, one per setting (a site's `auth` serves all its
    /// paths, and sites that ask alike share one): made as the paths need them.
    pub verifiers: std::cell::RefCell<super::verified::Verifiers>,
}

impl From<Option<Rc<ProxyRoute>>> for ProxyRoutes {
    fn from(app: Option<Rc<ProxyRoute>>) -> Self {
        ProxyRoutes {
            app,
            upstreams: HashMap::new(),
            verifiers: Default::default(),
        }
    }
}

pub(super) struct App {
    /// Its prefix, without a trailing `/`.
    pub path: String,
    pub handler: AppHandler,
    /// Its own response chains (its `headers` and response keys over the site's), when it
    /// has any.
    pub response: Option<Chains>,
    /// Its own `allow`/`deny`, when it has them (the site's apply too).
    pub access: Option<crate::routing::access::AccessList>,
    /// Who must sign in to it, when it has `auth`.
    pub auth: Option<crate::routing::auth::ThreadAuth>,
    /// Its sign-in by another service, when it has `auth = { request }`.
    pub asks: Option<super::verified::Asks>,
    /// Its own `max_body_size`, when it has one (else its site's).
    pub max_body: Option<u64>,
}

/// A site's or path's response chains: over cleartext, over TLS (which adds HSTS and
/// `Alt-Svc`; see [`FieldEdits::of`]).
pub(super) type Chains = [Option<Rc<ResponseChain>>; 2];

/// The response chains of site `s`, or of its path `a` (whose `headers` and response keys
/// go over the site's), with the site's `pages`.
pub(super) fn response_chains(
    s: &SiteSpec,
    a: Option<&AppSpec>,
    pages: &Option<Rc<ErrorPages>>,
) -> Chains {
    let edits = FieldEdits::of(s, a);
    let keys = a.map_or_else(|| s.response.clone(), |a| a.response.over(&s.response));
    [0, 1].map(|tls| ResponseChain::of(pages.clone(), edits[tls].clone(), &keys))
}

impl AppHandler {
    /// How `pool`'s thread answers app `a` of site `s`: `routes` are its ways to the pool's
    /// application and to upstream groups, `target_of` the hand-off target of each other
    /// pool by name.
    pub fn new(
        pool: &str,
        s: &SiteSpec,
        a: &AppSpec,
        routes: &ProxyRoutes,
        target_of: &dyn Fn(&str) -> Option<usize>,
    ) -> Self {
        let proxy = routes.app.as_ref();
        // A static path without a pool is answered by whoever holds the connection; another
        // pool's path is handed to it.
        if !a.answered_by(pool) {
            return AppHandler::Elsewhere(target_of(a.pool.as_str()));
        }
        // The path's cache policy before the site's: the first type that matches wins.
        let cache: Vec<(String, String)> = a.cache.iter().chain(&s.cache).cloned().collect();
        let files_in = |root: Option<PathBuf>| {
            StaticFiles::new(root, s.index.clone(), s.follow_symlinks)
                .with_autoindex(s.autoindex)
                .with_cache(cache.clone())
                .compressing(&s.compress)
        };
        let files = || files_in(s.root.clone());
        match a.handler {
            // Beside a FastCGI app, its scripts are never sent as files.
            HandlerKind::Static => {
                let files = match &a.alias {
                    // Its own folder, the prefix not part of the file path.
                    Some(dir) => files_in(Some(dir.clone())).aliased(&a.path),
                    None => files(),
                };
                AppHandler::Static(
                    files
                        .refusing(script_extensions(pool, s, proxy))
                        .with_fallback(a.fallback.as_deref()),
                )
            }
            HandlerKind::Dynamic => AppHandler::Dynamic,
            HandlerKind::Cpu => AppHandler::Cpu,
            HandlerKind::Proxy if a.upstream.is_some() => {
                match a.upstream.as_ref().and_then(|u| routes.upstreams.get(u)) {
                    Some(route) => {
                        AppHandler::Proxy(Rc::clone(route), a.uses, a.try_files.then(files))
                    }
                    None => AppHandler::Unreachable,
                }
            }
            HandlerKind::Proxy => match (proxy, &s.root) {
                // The root is absolute (see `Config::parse`): the app finds scripts by it from
                // its own working directory.
                (Some(route), Some(root)) if route.fastcgi() => {
                    let extensions = &route.settings().script_extensions;
                    let scripts = Scripts::new(root, extensions.clone(), s.follow_symlinks)
                        .with_front(a.fallback.as_deref(), &a.no_scripts);
                    let files = a.try_files.then(|| files().refusing(extensions));
                    AppHandler::FastCgi(Rc::clone(route), a.uses, scripts, files)
                }
                (Some(route), _) => {
                    AppHandler::Proxy(Rc::clone(route), a.uses, a.try_files.then(files))
                }
                // The master gives every front worker its route; without one the app has no
                // process to reach.
                (None, _) => AppHandler::Unreachable,
            },
        }
    }
}

/// The script extensions of the FastCGI app `pool` runs for site `s`, if it runs one there.
fn script_extensions<'r>(
    pool: &str,
    s: &SiteSpec,
    proxy: Option<&'r Rc<ProxyRoute>>,
) -> &'r [String] {
    match proxy {
        Some(route)
            if route.fastcgi()
                && s.apps.iter().any(|a| {
                    a.pool == pool && a.handler == HandlerKind::Proxy && a.upstream.is_none()
                }) =>
        {
            &route.settings().script_extensions
        }
        _ => &[],
    }
}

/// Site `s`'s error pages, read once for this thread (`identity` names it in the log): a page
/// that cannot be read now is said once and the status keeps espalier's own text.
pub(super) fn error_pages(s: &SiteSpec, identity: &str) -> Option<Rc<ErrorPages>> {
    if s.errors.is_empty() {
        return None;
    }
    let mut pages = Vec::new();
    for (status, file) in &s.errors {
        match std::fs::read(file) {
            Ok(body) => {
                let name = file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
                pages.push((
                    *status,
                    ErrorPage {
                        content_type: super::mime::content_type(&name),
                        body: body.into(),
                    },
                ));
            }
            Err(e) => crate::os::log(
                identity,
                format!("site {}: error page {} for {status} cannot be read ({e}); espalier's own text answers", s.name, file.display()),
            ),
        }
    }
    Some(Rc::new(ErrorPages::new(pages, s.replace_app_errors)))
}
