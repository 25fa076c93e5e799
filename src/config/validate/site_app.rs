//! Validation of one `[[site.app]]`: its path, its pool and handler, and the keys of how it
//! serves (front controller, headers, cache).
//!
//! Owns: an app path's rules, each alone; what concerns the site's apps together (one pool
//! over TLS, activation alone on its site) is [`super::site`]'s.

use super::super::chain::ResponseKeys;
use super::super::locate::Seg;
use super::super::model::*;
use super::super::raw;
use super::super::site::*;
use super::front::FrontKeys;
use super::Validator;
use std::path::{Path, PathBuf};

/// The site an app is checked in: its index, name and root, its apps before this one, and
/// the config file's folder (relative paths are from there).
pub(super) struct SiteSoFar<'a> {
    pub i: usize,
    pub name: &'a str,
    pub root: Option<&'a Path>,
    pub apps: &'a [AppSpec],
    pub base: &'a Path,
    /// The site's own `auth`, for its paths without one.
    pub auth: &'a super::access::PathAuth,
}

impl Validator {
    /// App `k` of `site`, whose pools are `pools`.
    pub(super) fn site_app(
        &mut self,
        site: SiteSoFar<'_>,
        k: usize,
        mut ra: raw::RawApp,
        pools: &[std::sync::Arc<PoolSpec>],
    ) -> AppSpec {
        let SiteSoFar {
            i,
            name,
            root,
            apps,
            base,
            auth: site_auth,
        } = site;
        let ap = |key: &'static str| {
            [
                Seg::Key("site"),
                Seg::Index(i),
                Seg::Key("app"),
                Seg::Index(k),
                Seg::Key(key),
            ]
        };
        let raw_response = ra.response_keys();
        let path = ra.path.unwrap_or_else(|| "/".into());
        if !path.starts_with('/') {
            self.err(&ap("path"), format!("`{path}` must start with `/`"));
        }
        let static_asked = ra.handler.as_deref() == Some("static");
        let upstream = ra
            .upstream
            .as_deref()
            .and_then(|w| self.path_upstream(&ap("upstream"), w, base));
        if ra.upstream.is_some() && ra.handler.is_some() {
            self.err(&ap("handler"), "this path is forwarded to its `upstream`, whose servers answer; remove `handler` (or `upstream`)");
        }
        let pool = match ra.pool {
            Some(p) => p,
            None if pools.len() == 1 => pools[0].name.clone(),
            // Served by whichever of the site's pools holds the connection (one of its
            // other apps must name one: checked below).
            None if static_asked || ra.upstream.is_some() => String::new(),
            None => {
                self.err(
                    &[
                        Seg::Key("site"),
                        Seg::Index(i),
                        Seg::Key("app"),
                        Seg::Index(k),
                    ],
                    "this app names no `pool`; add pool = \"...\"",
                );
                String::new()
            }
        };
        let named = self.pool_index.get(&pool).map(|&k| &pools[k]);
        if !pool.is_empty() && named.is_none() {
            let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            let hint = if names.is_empty() {
                "define a [[pool]] with that name".to_string()
            } else {
                format!("use one of: {}", names.join(", "))
            };
            self.err(&ap("pool"), format!("no pool is named `{pool}`; {hint}"));
        }
        let app_pool = named.and_then(|p| p.app.as_ref());
        if let (Some(app), Some(_)) = (app_pool, &ra.upstream) {
            if app.transport == Transport::Activation {
                self.err(&ap("pool"), format!("pool `{pool}` uses transport = \"activation\": its application accepts the connections itself, so espalier cannot forward `{path}` to the upstream; name a pool of espalier's workers (or one with transport = \"proxy\")"));
            }
        }
        // An upstream's path is forwarded by the pool's workers to the group, not to the
        // pool's own application.
        let app_pool = app_pool.filter(|_| ra.upstream.is_none());
        if let Some(app) = app_pool {
            if ra.handler.is_some() && !static_asked {
                self.err(&ap("handler"), format!("pool `{pool}` runs an application (`command`), which answers the requests; remove `handler` (or use handler = \"static\" for files under the site's root)"));
            }
            if static_asked && app.transport == Transport::Activation {
                self.err(&ap("handler"), format!("pool `{pool}` uses transport = \"activation\": its application accepts the connections itself, so espalier cannot serve `{path}` as files; use transport = \"proxy\""));
            }
            if app.transport == Transport::FastCgi && root.is_none() {
                self.err(&ap("pool"), format!("pool `{pool}` uses transport = \"fastcgi\", whose scripts are found under the site's `root`; add root = \"…\" to site `{name}`"));
            }
            if app.transport == Transport::Activation && path != "/" {
                self.err(&ap("path"), format!("pool `{pool}` uses transport = \"activation\": its application accepts every connection of the site's bindings itself, so it cannot be given only `{path}`; use path = \"/\", or transport = \"proxy\""));
            }
        }
        if static_asked && root.is_none() && (pool.is_empty() || app_pool.is_some()) {
            self.err(&ap("handler"), format!("a static path beside an application serves files from the site's `root`; add root = \"…\" to site `{name}`"));
        }
        let handler = if ra.upstream.is_some() || (app_pool.is_some() && !static_asked) {
            HandlerKind::Proxy
        } else {
            self.choice(
                &ap("handler"),
                ra.handler,
                HandlerKind::Static,
                &[
                    ("static", HandlerKind::Static),
                    ("dynamic", HandlerKind::Dynamic),
                    ("cpu", HandlerKind::Cpu),
                ],
            )
        };
        if apps.iter().any(|a: &AppSpec| a.path == path) {
            self.err(
                &ap("path"),
                format!("site `{name}` already has an app at `{path}`"),
            );
        }
        let forwarded_to: (Option<Transport>, &[String]) = match (&ra.upstream, app_pool) {
            (Some(_), _) => (Some(Transport::Proxy), &[]),
            (None, Some(app)) if handler == HandlerKind::Proxy => {
                (Some(app.transport), &app.script_extensions)
            }
            _ => (None, &[]),
        };
        let front = self.front_controller(
            &[
                Seg::Key("site"),
                Seg::Index(i),
                Seg::Key("app"),
                Seg::Index(k),
            ],
            FrontKeys {
                try_files: ra.try_files,
                fallback: ra.fallback,
                no_scripts: ra.no_scripts,
            },
            forwarded_to,
            root,
            handler == HandlerKind::Static,
        );
        let app_at = [
            Seg::Key("site"),
            Seg::Index(i),
            Seg::Key("app"),
            Seg::Index(k),
        ];
        let at_key = |key| {
            let mut p = app_at.to_vec();
            p.push(Seg::Key(key));
            p
        };
        let headers = self.header_fields(&at_key("headers"), ra.headers);
        let cache = self.cache_policy(&at_key("cache"), ra.cache);
        if !cache.is_empty() && handler != HandlerKind::Static && !front.try_files {
            self.err(&at_key("cache"), "sets Cache-Control on static files, and this path serves none; use it on a handler = \"static\" path (or one with try_files), or set the app's own");
        }
        let alias = ra.alias.map(|a| base.join(a)).filter(|dir: &PathBuf| {
            if handler != HandlerKind::Static {
                self.err(&at_key("alias"), "gives a static path its own folder; this path is not handler = \"static\": remove it (or set the site's root)");
                return false;
            }
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => true,
                Ok(_) => {
                    self.err(&at_key("alias"), format!("{} is a file, not a folder; name the folder the path's files are in", dir.display()));
                    false
                }
                Err(e) => {
                    self.err(&at_key("alias"), format!("{} cannot be used ({e}); create it, or fix the path (relative paths are from the config file's folder)", dir.display()));
                    false
                }
            }
        });
        let fallback = match front.fallback {
            Some(f) if handler == HandlerKind::Static => {
                self.static_fallback(&at_key("fallback"), f, (&path, alias.as_deref()), root)
            }
            other => other,
        };
        let access = self.access_list(&app_at, ra.allow, ra.deny);
        // A path's own `auth`, or its site's.
        let auth = match ra.auth {
            Some(a) => {
                let auth = self.auth(&at_key("auth"), a, base);
                // Fields copied for an app where espalier answers: nobody to pass them to.
                let copies = auth.request.as_ref().is_some_and(|r| !r.copy.is_empty());
                if copies && handler != HandlerKind::Proxy {
                    let mut key = at_key("auth").to_vec();
                    key.push(Seg::Key("copy"));
                    self.err(&key, "names fields for the app, and espalier answers this path itself; remove `copy` (the verifier still decides)");
                }
                auth
            }
            None => site_auth.clone(),
        };
        let max_body_size = ra
            .max_body_size
            .map(|v| self.size(&at_key("max_body_size"), Some(v), 0));
        let response = ResponseKeys::check(self, &app_at, raw_response);
        // What the path's pool or group does with answers, which the path may turn off.
        let handles = match (&upstream, app_pool) {
            (Some(group), _) => (self.upstreams.iter().find(|u| &u.name == group))
                .map(|u| (u.cache_responses.is_some(), u.buffer.is_some())),
            (None, Some(app)) if handler == HandlerKind::Proxy => {
                Some((app.cache_responses.is_some(), app.buffer.is_some()))
            }
            _ => None,
        };
        let (keeps, buffers) = handles.unwrap_or_default();
        let uses = PathUses {
            cache_responses: self.path_opt_out(
                &at_key("cache_responses"),
                ra.cache_responses,
                (keeps, "keeps no answers (cache_responses)"),
            ),
            buffer: self.path_opt_out(
                &at_key("buffer"),
                ra.buffer,
                (buffers, "buffers nothing (buffer)"),
            ),
        };
        AppSpec {
            uses,
            response,
            auth: auth.password,
            auth_request: auth.request,
            max_body_size,
            access,
            alias,
            headers,
            cache,
            try_files: front.try_files,
            fallback,
            no_scripts: front.no_scripts,
            upstream,
            ..AppSpec::new(path, pool, handler)
        }
    }

    /// A path's `cache_responses` or `buffer` at `at`: only `false`, turning off for it what
    /// its pool or group does (`on`; `what` it does not do otherwise).
    fn path_opt_out(
        &mut self,
        at: &[Seg],
        written: Option<bool>,
        (on, what): (bool, &str),
    ) -> bool {
        match written {
            None => true,
            Some(true) => {
                self.err(at, "is set on the pool or [[upstream]] group, and a path takes it from there; only false is written here (turning it off for this path)");
                true
            }
            Some(false) if !on => {
                self.err(at, format!("turns off for this path what its pool or group does, and it {what}; remove it"));
                true
            }
            Some(false) => false,
        }
    }
}
