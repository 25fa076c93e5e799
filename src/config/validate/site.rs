//! Validation of a `[[site]]`: bindings, root, its apps together (each alone in
//! [`super::site_app`]), its answers' keys, TLS (its rules in [`super::site_tls`]),
//! and addresses shared between sites.
//!
//! Owns: the site keys' rules. Must not touch: pools beyond looking their names up.

use super::super::chain::ResponseKeys;
use super::super::locate::Seg;
use super::super::model::*;
use super::super::parse::parse_binding;
use super::super::raw;
use super::super::site::*;
use super::site_app::SiteSoFar;
use super::Validator;
// A fast hasher: its keys are the configuration's own names and addresses, 10,000 sites' worth.
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;
use std::path::PathBuf;

impl Validator {
    pub(in crate::config) fn site(
        &mut self,
        i: usize,
        mut raw: raw::RawSite,
        base: &Path,
        pools: &[std::sync::Arc<PoolSpec>],
    ) -> SiteSpec {
        let at = |k: &'static str| [Seg::Key("site"), Seg::Index(i), Seg::Key(k)];
        let response = ResponseKeys::check(
            self,
            &[Seg::Key("site"), Seg::Index(i)],
            raw.response_keys(),
        );
        let name = raw.name.unwrap_or_else(|| format!("site{i}"));
        let mut bindings = Vec::new();
        if raw.bindings.is_empty() {
            self.err(
                &at("bindings"),
                "the site has no bindings; add bindings = [\"http://127.0.0.1:8080\"]",
            );
        }
        for (k, b) in raw.bindings.iter().enumerate() {
            let host_problem = parse_binding(b).ok().and_then(|binding| {
                binding
                    .host
                    .as_deref()
                    .and_then(crate::routing::hosts::host_name_problem)
            });
            match parse_binding(b).and_then(|binding| match host_problem {
                Some(problem) => Err(problem),
                None => Ok(binding),
            }) {
                Ok(binding) => bindings.push(binding),
                Err(m) => self.err(
                    &[
                        Seg::Key("site"),
                        Seg::Index(i),
                        Seg::Key("bindings"),
                        Seg::Index(k),
                    ],
                    m,
                ),
            }
        }
        let root = raw.root.map(|r| {
            let p = PathBuf::from(&r);
            if p.is_absolute() {
                p
            } else {
                base.join(p)
            }
        });
        if let Some(dir) = &root {
            let at = [Seg::Key("site"), Seg::Index(i), Seg::Key("root")];
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => self.err(&at, format!("{} is a file, not a directory; name the directory that holds the site's files", dir.display())),
                Err(e) => self.err(&at, format!("{} cannot be used ({e}); create it, or fix the path (relative paths are from the config file's directory)", dir.display())),
            }
        }
        let mut apps = Vec::new();
        // A site with a root and no path says what it serves: its files, from `/` — as
        // `serve --root` does — by the pool that holds its connections.
        let mut raw_apps = raw.app;
        if raw_apps.is_empty() && root.is_some() {
            raw_apps.push(raw::RawApp {
                path: Some("/".into()),
                ..raw::RawApp::default()
            });
        }
        if raw_apps.is_empty() {
            let what = match pools.first() {
                Some(p) => format!("pool = \"{}\" (an app of yours)", p.name),
                None => "upstream = \"127.0.0.1:8000\" (a server you run)".to_string(),
            };
            self.err(&[Seg::Key("site"), Seg::Index(i)], format!("site `{name}` serves nothing: it has no root and no [[site.app]]; add root = \"www\" (a folder of files), or a [[site.app]] with path = \"/\" and {what}"));
        }
        // The site's `auth`, checked once, is its paths' unless they say their own; where
        // every path says its own, it would act on nothing.
        let site_auth_at = [Seg::Key("site"), Seg::Index(i), Seg::Key("auth")];
        if raw.auth.is_some() && raw_apps.iter().all(|a| a.auth.is_some()) {
            self.err(&site_auth_at, "is every path's that says no `auth` of its own, and each of this site's paths says its own; remove it, or the paths' own");
        }
        let site_auth = match raw.auth {
            Some(a) => self.auth(&site_auth_at, a, base),
            None => Default::default(),
        };
        for (k, ra) in raw_apps.into_iter().enumerate() {
            let site = SiteSoFar {
                i,
                name: &name,
                root: root.as_deref(),
                apps: &apps,
                base,
                auth: &site_auth,
            };
            let app = self.site_app(site, k, ra, pools);
            apps.push(app);
        }
        // A static path without a pool is served by the pool holding the connection: some
        // other path of the site must name one.
        if !apps.is_empty() && apps.iter().all(AppSpec::any_pool) {
            self.err(
                &[Seg::Key("site"), Seg::Index(i), Seg::Key("app")],
                format!("site `{name}`'s apps name no `pool`; add pool = \"...\" to one (a static path without one is served by the pool of the site's other paths)"),
            );
        }
        // An activated application accepts the site's connections itself: no other pool
        // can be given a path of the same site.
        let activated: Option<AppSpec> = apps
            .iter()
            .find(|a| (self.pool_index.get(&a.pool)).is_some_and(|&k| pools[k].activated()))
            .cloned();
        if let Some(a) = &activated {
            if let Some(other) = apps.iter().find(|o| o.pool != a.pool) {
                let other_pool = if other.any_pool() {
                    "espalier's files".to_string()
                } else {
                    format!("pool `{}`", other.pool)
                };
                let msg = format!(
                    "site `{name}` sends `{}` to pool `{}` and `{}` to {other_pool}, but pool `{}` uses transport = \"activation\": its application accepts every connection of the site itself; use transport = \"proxy\", or give the other path its own site",
                    a.path, a.pool, other.path, a.pool
                );
                self.err(&[Seg::Key("site"), Seg::Index(i), Seg::Key("app")], msg);
            }
        }
        // Over TLS a connection's pool is chosen by its handshake's name, before any path:
        // one pool serves the whole site, and it cannot be an application that accepts the
        // connections itself (it would get the TLS bytes).
        if let Some(k) = bindings.iter().position(|b| b.tls) {
            let at_binding = [
                Seg::Key("site"),
                Seg::Index(i),
                Seg::Key("bindings"),
                Seg::Index(k),
            ];
            // Static paths without a pool go with the connection's pool: only named pools count.
            let mut named = apps.iter().filter(|a| !a.any_pool());
            let first = named.next();
            if let Some((first, other)) =
                first.and_then(|f| named.find(|a| a.pool != f.pool).map(|o| (f, o)))
            {
                let msg = format!(
                    "is https, and site `{name}` sends `{}` to pool `{}` but `{}` to pool `{}`; over TLS the pool is chosen by the name in the handshake, before the path is known: serve the site's app paths from one pool (its static paths may name no pool: the connection's pool serves them), or give the other pool's apps a site (a host name) of their own",
                    first.path, first.pool, other.path, other.pool
                );
                self.err(&at_binding, msg);
            } else if let Some(a) = &activated {
                let msg = format!("is https, but pool `{}` uses transport = \"activation\": its application would accept the TLS connections itself; use transport = \"proxy\" (espalier terminates TLS and forwards)", a.pool);
                self.err(&at_binding, msg);
            }
        }
        let proxy_protocol = raw.proxy_protocol.unwrap_or(false);
        if let Some(a) = activated.as_ref().filter(|_| proxy_protocol) {
            let msg = format!(
                "site `{name}` expects a PROXY protocol header, but pool `{}` uses transport = \"activation\": its application accepts the connections itself and would read the header as HTTP; use transport = \"proxy\", or remove proxy_protocol",
                a.pool
            );
            self.err(
                &[Seg::Key("site"), Seg::Index(i), Seg::Key("proxy_protocol")],
                msg,
            );
        }
        let proxy_protocol_from = self.cidrs(&at("proxy_protocol_from"), raw.proxy_protocol_from);
        if !proxy_protocol && !proxy_protocol_from.is_empty() {
            self.err(&at("proxy_protocol_from"), "says which peers may start their connections with a PROXY protocol header, and the site reads none; add proxy_protocol = true, or remove it");
        }
        let tls = self.site_tls(i, raw.tls, base, &bindings);
        let client_certs = self.client_certs(i, raw.client_certs, base, &bindings);
        let at = |k: &'static str| [Seg::Key("site"), Seg::Index(i), Seg::Key(k)];
        let https = bindings.iter().any(|b| b.tls);
        let hsts = raw.hsts.filter(|h| {
            let max_age = h
                .split(';')
                .next()
                .and_then(|d| d.trim().strip_prefix("max-age="))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            let printable = h.bytes().all(|b| (0x20..0x7f).contains(&b));
            if !(max_age && printable) {
                self.err(&at("hsts"), format!("`{h}` is not a Strict-Transport-Security value; write it like \"max-age=31536000\" or \"max-age=31536000; includeSubDomains\""));
                return false;
            }
            if !https {
                self.err(&at("hsts"), "is sent over TLS only, and the site has no https:// binding; add one or remove hsts");
                return false;
            }
            true
        });
        let redirect_to_https = raw.redirect_to_https.unwrap_or(false);
        if redirect_to_https && !(https && bindings.iter().any(|b| !b.tls)) {
            self.err(&at("redirect_to_https"), "needs both an https:// binding (where to) and an http:// one (what to redirect); add the missing one or remove redirect_to_https");
        }
        let headers = self.header_fields(&at("headers"), raw.headers);
        let cache = self.cache_policy(&at("cache"), raw.cache);
        let rules = self.site_rules(i, raw.rule);
        let errors = self.error_pages(&at("errors"), raw.errors, base);
        let replace_app_errors = raw.replace_app_errors.unwrap_or(false);
        if replace_app_errors && errors.is_empty() {
            self.err(&at("replace_app_errors"), "replaces an app's error answers by the site's pages, and the site has none; add errors = { 500 = \"errors/500.html\" } or remove it");
        }
        let compress = self.codings(&at("compress"), raw.compress);
        let access = self.access_list(&[Seg::Key("site"), Seg::Index(i)], raw.allow, raw.deny);
        let trusted_proxies = self.cidrs(&at("trusted_proxies"), raw.trusted_proxies);
        let deny_action = self.refusal(&at("deny_action"), raw.deny_action, &[403, 404]);
        let limit = self.limit(&at("limit"), raw.limit);
        let max_body_size = raw
            .max_body_size
            .map(|v| self.size(&at("max_body_size"), Some(v), 0));
        // Passwords are not sent in the clear unless the path says it may be.
        if !bindings.iter().any(|b| b.tls) {
            for (k, app) in apps.iter().enumerate() {
                if app.auth.as_ref().is_some_and(|a| !a.cleartext) {
                    let key = [
                        Seg::Key("site"),
                        Seg::Index(i),
                        Seg::Key("app"),
                        Seg::Index(k),
                        Seg::Key("auth"),
                    ];
                    self.err(&key, "asks for a password, and the site has no https:// binding, so it would travel in the clear; add an https:// binding, or say cleartext = true (behind a proxy that speaks TLS)");
                }
            }
        }
        let no_lists = access.is_empty() && apps.iter().all(|a: &AppSpec| a.access.is_empty());
        if no_lists && limit.is_none() && !trusted_proxies.is_empty() {
            self.err(&at("trusted_proxies"), "says whose X-Forwarded-For is believed for allow, deny and limit, and the site has none of them; add one, or remove it");
        }
        if no_lists && deny_action != DenyAction::default() {
            self.err(&at("deny_action"), "says what a client refused by allow or deny gets, and the site and its paths have none; add allow or deny, or remove it");
        }
        let spec = SiteSpec {
            response,
            metrics: raw.metrics.unwrap_or(false),
            limit,
            max_body_size,
            access,
            trusted_proxies,
            deny_action,
            compress,
            rules,
            errors,
            replace_app_errors,
            headers,
            cache,
            name,
            bindings,
            root,
            index: raw.index.unwrap_or_else(|| vec![DEFAULT_INDEX.into()]),
            follow_symlinks: raw.follow_symlinks.unwrap_or(false),
            autoindex: raw.autoindex.and_then(|v| self.autoindex(i, v)),
            access_log: raw.access_log.and_then(|l| self.access_log(i, l, base)),
            proxy_protocol,
            proxy_protocol_from,
            tls,
            client_certs,
            hsts,
            alt_svc: None,
            redirect_to_https,
            apps,
        };
        if let Some(a) = &activated {
            self.activation_keys(i, &spec, &a.pool);
        } else if spec.autoindex.is_some() && !serves_folders(&spec) {
            self.err(&at("autoindex"), "lists the folders a static path serves, and this site has none (no handler = \"static\" path with a root or alias, no try_files); add root = \"…\" and a static path, or remove it");
        }
        spec
    }

    /// Refuses every key of an activated site that acts on requests: its application accepts
    /// the connections itself, so espalier never reads a request there to act on.
    fn activation_keys(&mut self, i: usize, site: &SiteSpec, pool: &str) {
        let fix = |key: &str| {
            format!("acts on the requests espalier reads, and pool `{pool}` uses transport = \"activation\": its application accepts the site's connections itself, so espalier never sees them and `{key}` would do nothing; serve the app with transport = \"proxy\", or put `{key}` on a site espalier serves")
        };
        for key in site.request_keys() {
            self.err(&[Seg::Key("site"), Seg::Index(i), Seg::Key(key)], fix(key));
        }
        for (k, app) in site.apps.iter().enumerate() {
            for key in app.request_keys() {
                let at = [
                    Seg::Key("site"),
                    Seg::Index(i),
                    Seg::Key("app"),
                    Seg::Index(k),
                    Seg::Key(key),
                ];
                self.err(&at, fix(key));
            }
        }
    }

    /// A site's `access_log`: its folder must exist (the file is created at start).
    fn access_log(
        &mut self,
        i: usize,
        raw: raw::RawAccessLog,
        base: &Path,
    ) -> Option<AccessLogSpec> {
        let at = |k: &'static str| {
            [
                Seg::Key("site"),
                Seg::Index(i),
                Seg::Key("access_log"),
                Seg::Key(k),
            ]
        };
        let format = self.choice(
            &at("format"),
            raw.format,
            LogFormat::Combined,
            &[
                ("common", LogFormat::Common),
                ("combined", LogFormat::Combined),
                ("json", LogFormat::Json),
            ],
        );
        let Some(path) = raw.path else {
            self.err(
                &[Seg::Key("site"), Seg::Index(i), Seg::Key("access_log")],
                "has no `path`; write access_log = { path = \"logs/site.log\" }",
            );
            return None;
        };
        let path = if Path::new(&path).is_absolute() {
            PathBuf::from(&path)
        } else {
            base.join(&path)
        };
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(folder) = folder {
            if !folder.is_dir() {
                self.err(&at("path"), format!("the folder {} does not exist; create it, or fix the path (relative paths are from the config file's directory)", folder.display()));
                return None;
            }
        }
        if path.is_dir() {
            self.err(
                &at("path"),
                format!("{} is a directory; name a file in it", path.display()),
            );
            return None;
        }
        Some(AccessLogSpec { path, format })
    }

    /// An access log is written by the workers of the pools serving its site(s), each opening
    /// the file itself: they must run as one user, whom the master gives the file.
    pub(super) fn check_log_owners(
        &mut self,
        sites: &[std::sync::Arc<SiteSpec>],
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        // Indexed, not searched per site: a hoster's 10,000 sites each with its own log
        // against 10,000 pools made this quadratic.
        let users: std::collections::HashMap<&str, Option<&str>> = pools
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.identity.as_ref().map(|id| id.user.as_str()),
                )
            })
            .collect();
        // By log path, its first writer: its user, pool and site.
        type Writer<'a> = (Option<&'a str>, &'a str, &'a str);
        let mut writers: std::collections::HashMap<&std::path::Path, Writer> =
            std::collections::HashMap::new();
        for (i, s) in sites.iter().enumerate() {
            let Some(log) = &s.access_log else { continue };
            for a in &s.apps {
                let Some(&user) = users.get(a.pool.as_str()) else {
                    continue;
                };
                let (first, pool, site) = *writers
                    .entry(log.path.as_path())
                    .or_insert((user, &a.pool, &s.name));
                if first != user {
                    let who = |u: Option<&str>| {
                        u.map_or("espalier's own user".to_string(), |u| format!("user `{u}`"))
                    };
                    let msg = format!(
                        "{} is written by pool `{pool}` (site `{site}`, {}) and pool `{}` ({}); the workers of both open it, so they must run as one user: give each pool its own log",
                        log.path.display(),
                        who(first),
                        a.pool,
                        who(user)
                    );
                    self.err(
                        &[Seg::Key("site"), Seg::Index(i), Seg::Key("access_log")],
                        msg,
                    );
                    break;
                }
            }
        }
    }

    /// One address may be bound by several sites only with different host names; they may be
    /// served by different pools (the workers hand a connection to the right pool, see
    /// [`crate::handoff`]) unless one of them is an activated application, which accepts every
    /// connection of its address itself.
    pub(super) fn check_bindings(
        &mut self,
        sites: &[std::sync::Arc<SiteSpec>],
        pools: &[std::sync::Arc<PoolSpec>],
    ) {
        // Linear in bindings: each is compared with the bindings of its own address and host
        // (by hash), and with the first of its address — a hoster's port has thousands of
        // sites, and a comparison of every pair (each looking its pools up) made `check` cubic.
        let by_name: HashMap<&str, &PoolSpec> =
            pools.iter().map(|p| (p.name.as_str(), &**p)).collect();
        let activated: Vec<Option<&str>> = sites
            .iter()
            .map(|site| {
                site.apps.iter().find_map(|a| {
                    by_name
                        .get(a.pool.as_str())
                        .filter(|p| p.activated())
                        .map(|p| p.name.as_str())
                })
            })
            .collect();
        // Per port: the bindings by host, and per IP the first binding and the first of an
        // activated site (the unspecified IP stands for every IP of the port).
        // Sized before: a hoster's port has 10,000 hosts, each bound once (inline), and the
        // maps grown binding by binding were rehashed a dozen times at every change.
        type Earlier = smallvec::SmallVec<[(usize, std::net::IpAddr); 1]>;
        #[derive(Default)]
        struct Port<'a> {
            by_host: HashMap<Option<std::borrow::Cow<'a, str>>, Earlier>,
            first: HashMap<std::net::IpAddr, usize>,
            first_activated: HashMap<std::net::IpAddr, usize>,
        }
        let mut counts: HashMap<u16, usize> = HashMap::default();
        for b in sites.iter().flat_map(|s| &s.bindings) {
            *counts.entry(b.addr.port()).or_default() += 1;
        }
        let mut bindings: Vec<(usize, &Binding)> = Vec::with_capacity(counts.values().sum());
        let mut ports: HashMap<u16, Port> = (counts.into_iter())
            .map(|(port, n)| {
                let mut p = Port::default();
                p.by_host.reserve(n);
                (port, p)
            })
            .collect();
        for (i, s) in sites.iter().enumerate() {
            for (k, b) in s.bindings.iter().enumerate() {
                let path = [
                    Seg::Key("site"),
                    Seg::Index(i),
                    Seg::Key("bindings"),
                    Seg::Index(k),
                ];
                let here = bindings.len();
                bindings.push((i, b));
                let port = ports.entry(b.addr.port()).or_default();
                let ip = b.addr.ip();
                let overlapping = |other: &std::net::IpAddr| {
                    *other == ip || other.is_unspecified() || ip.is_unspecified()
                };
                let host = (b.host.as_deref()).map(crate::routing::hosts::normal_host_borrowed);
                // The same host on an overlapping address: a duplicate.
                let same_host = port.by_host.get(&host).and_then(|earlier| {
                    earlier
                        .iter()
                        .find(|(_, other)| overlapping(other))
                        .map(|&(j, _)| j)
                });
                // The first binding of each overlapping address, and of an activated site:
                // six at most for an IP (on the stack: 10,000 bindings at a hoster's every
                // change); an unspecified one meets every IP's of its port.
                let mut firsts: smallvec::SmallVec<[usize; 6]> = smallvec::SmallVec::new();
                for map in [&port.first, &port.first_activated] {
                    if ip.is_unspecified() {
                        firsts.extend(map.values().copied());
                    } else {
                        firsts.extend(map.get(&ip).copied());
                        firsts.extend(map.get(&std::net::IpAddr::from([0u8; 4])).copied());
                        firsts.extend(map.get(&std::net::IpAddr::from([0u16; 8])).copied());
                    }
                }
                port.by_host.entry(host).or_default().push((here, ip));
                port.first.entry(ip).or_insert(here);
                if activated[i].is_some() {
                    port.first_activated.entry(ip).or_insert(here);
                }
                firsts.sort_unstable();
                firsts.dedup();
                let problem = firsts.into_iter().chain(same_host).find_map(|j| {
                    let (t, c) = bindings[j];
                    self.binding_conflict(sites, &activated, (i, b), (t, c))
                });
                if let Some(message) = problem {
                    self.err(&path, message);
                }
            }
        }
    }

    /// Why binding `b` of site `i` cannot be on the same address as binding `c` of site `t`
    /// (bound earlier), if it cannot.
    fn binding_conflict(
        &self,
        sites: &[std::sync::Arc<SiteSpec>],
        activated: &[Option<&str>],
        (i, b): (usize, &Binding),
        (t, c): (usize, &Binding),
    ) -> Option<String> {
        let (s, other_site) = (&sites[i], &sites[t]);
        if b.tls != c.tls {
            return Some(format!("`{b}` and site `{}`'s `{c}` are the same address, one with TLS and one without; a port speaks one or the other: give each its own port", other_site.name));
        }
        if s.proxy_protocol != other_site.proxy_protocol {
            let (with, without) = if s.proxy_protocol {
                (s, other_site)
            } else {
                (other_site, s)
            };
            return Some(format!("`{b}` is shared by site `{}` (proxy_protocol = true) and site `{}` (without it); a connection's PROXY header is read before its host is known, so the sites of one address must agree: set proxy_protocol the same in both, or give one its own port", with.name, without.name));
        }
        if s.proxy_protocol_from != other_site.proxy_protocol_from {
            return Some(format!("`{b}` is shared by site `{}` and site `{}`, whose proxy_protocol_from differ; who may send a PROXY header is decided before the host is known, so the sites of one address must agree: give them the same list, or one its own port", s.name, other_site.name));
        }
        if b.tls && s.client_certs != other_site.client_certs {
            return Some(format!("`{b}` is shared by site `{}` and site `{}`, which ask for client certificates differently (client_certs); the certificate is asked in the handshake, before the host is known, so the sites of one https address must agree: give them the same client_certs, or one its own port", s.name, other_site.name));
        }
        let host_key = |b: &Binding| b.host.as_deref().map(crate::routing::hosts::normal_host);
        if host_key(c) == host_key(b) {
            let what = match &b.host {
                Some(h) => format!("host `{h}`"),
                None => "no host name (the default site)".to_string(),
            };
            return Some(format!("duplicate binding: `{b}` is already bound with {what} by site `{}`; remove one or give each its own host name", other_site.name));
        }
        let (a, other, pool) = match (activated[i], activated[t]) {
            (Some(p), _) => (s, other_site, p),
            (None, Some(p)) => (other_site, s, p),
            (None, None) => return None,
        };
        other.apps.iter().any(|x| x.pool != pool).then(|| format!(
            "`{b}` is shared by site `{}` of pool `{pool}` (transport = \"activation\") and site `{}`; an activated application accepts every connection on its address itself, so its pool must serve that address alone: give one of them its own port, or use transport = \"proxy\"",
            a.name, other.name
        ))
    }
}

/// Whether some path of `site` answers folders from the disk (so `autoindex` can list them):
/// a static path with a root or its own folder, or a path that tries files first.
fn serves_folders(site: &SiteSpec) -> bool {
    site.apps.iter().any(|a| {
        (a.handler == HandlerKind::Static && (site.root.is_some() || a.alias.is_some()))
            || a.try_files
    })
}
