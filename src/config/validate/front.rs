//! Validation of an app path's front-controller keys: `try_files`, `fallback` and
//! `no_scripts` (how a path forwarded to an application treats the files under the site's
//! root, see [`crate::handlers`]' front controller), and a static path's `fallback` (the
//! file a single-page app answers every missing path with).
//!
//! Owns: those keys' rules, and the one look at the file system they need — that the
//! fallback script or file exists. Must not touch: which pool serves the path (see
//! [`super::site`]).

use super::super::locate::Seg;
use super::super::model::*;
use super::Validator;
use std::path::Path;

/// The keys as written.
pub(super) struct FrontKeys {
    pub try_files: Option<bool>,
    pub fallback: Option<String>,
    pub no_scripts: Option<Vec<String>>,
}

/// The keys as the app path keeps them.
pub(super) struct Front {
    pub try_files: bool,
    pub fallback: Option<String>,
    pub no_scripts: Vec<String>,
}

/// Whether `p` is a plain URL path: `/` first, no control bytes, spaces, `?`, `#`, `%`, `\`,
/// empty, `.` or `..` segments (it is compared with requests' normal form).
fn plain_url_path(p: &str) -> bool {
    p.starts_with('/')
        && !p
            .bytes()
            .any(|b| b <= b' ' || b == 0x7f || matches!(b, b'?' | b'#' | b'%' | b'\\'))
        && !p
            .trim_end_matches('/')
            .split('/')
            .skip(1)
            .any(|s| s.is_empty() || s == "." || s == "..")
}

impl Validator {
    /// The front-controller keys of app `app_at` (`site[i].app[k]`), forwarded by
    /// `transport` when it is forwarded (a pool's application, or an upstream's servers by
    /// `Proxy`; `None`: a path espalier answers itself).
    pub(super) fn front_controller(
        &mut self,
        app_at: &[Seg],
        keys: FrontKeys,
        (transport, extensions): (Option<Transport>, &[String]),
        root: Option<&Path>,
        serves_files: bool,
    ) -> Front {
        let at = |k: &'static str| {
            let mut p = app_at.to_vec();
            p.push(Seg::Key(k));
            p
        };
        let fastcgi = transport == Some(Transport::FastCgi);
        let try_files = match (keys.try_files, transport) {
            (None, _) => fastcgi,
            (Some(v), Some(Transport::Proxy | Transport::FastCgi)) => v,
            (Some(_), Some(Transport::Activation)) => {
                self.err(&at("try_files"), "the pool uses transport = \"activation\": its application accepts the connections itself, so espalier cannot serve files first; use transport = \"proxy\", or remove try_files");
                false
            }
            (Some(_), None) => {
                self.err(&at("try_files"), "applies to a path forwarded to an application (a pool with `command`, or an `upstream`); a static path serves its files already; remove it");
                false
            }
        };
        if try_files && root.is_none() && transport == Some(Transport::Proxy) {
            self.err(&at("try_files"), "serves the files under the site's `root` before the app; add root = \"…\" to the site (a folder of public files only), or remove try_files");
        }
        let mut no_scripts = Vec::new();
        if let Some(list) = keys.no_scripts {
            if !fastcgi {
                self.err(&at("no_scripts"), "applies to a FastCGI app's path (transport = \"fastcgi\"): the folders where its scripts never run; remove it");
            }
            for p in list {
                let prefix = p.trim_end_matches('/');
                if !plain_url_path(&p) {
                    self.err(&at("no_scripts"), format!("`{p}` is not a URL path prefix; write them like [\"/wp-content/uploads/\"]"));
                } else if prefix.is_empty() {
                    self.err(&at("no_scripts"), "`/` would keep every script from running; name the upload folders, like [\"/wp-content/uploads/\"]");
                } else {
                    no_scripts.push(prefix.to_string());
                }
            }
        }
        let fallback = keys.fallback.filter(|f| {
            if serves_files {
                // A static path's (a single-page app's `/index.html`): the file is looked
                // for once the path's folder is known (`static_fallback`).
                if !plain_url_path(f) || f.ends_with('/') {
                    self.err(&at("fallback"), format!("`{f}` is not the URL path of a file; write it like \"/index.html\""));
                    return false;
                }
                return true;
            }
            if !fastcgi {
                self.err(&at("fallback"), "applies to a static path (the file a single-page app answers every missing path with, like \"/index.html\") or a FastCGI app's path (transport = \"fastcgi\", its front controller script); a proxied app is its own fallback: use try_files = true");
                return false;
            }
            if !plain_url_path(f) || f.ends_with('/') {
                self.err(&at("fallback"), format!("`{f}` is not the URL path of a script; write it like \"/index.php\""));
                return false;
            }
            if !extensions.iter().any(|e| f.len() > e.len() && f.ends_with(e.as_str())) {
                let ext = extensions.join("\", \"");
                self.err(&at("fallback"), format!("`{f}` is not a script the app may run (its extensions are \"{ext}\"); name one, like \"/index{}\"", extensions.first().map_or(".php", |e| e.as_str())));
                return false;
            }
            if no_scripts.iter().any(|p| crate::routing::under_prefix(f.as_bytes(), p)) {
                self.err(&at("fallback"), format!("`{f}` lies under `no_scripts`, where no script runs; move it, or the folder out of no_scripts"));
                return false;
            }
            if let Some(root) = root {
                let file = root.join(f.trim_start_matches('/'));
                if !std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
                    self.err(&at("fallback"), format!("{} is not a file (the fallback is a path under the site's root); create it, or fix the path", file.display()));
                    return false;
                }
            }
            true
        });
        Front {
            try_files,
            fallback,
            no_scripts,
        }
    }

    /// A static path's `fallback` (`at`), checked to be a file: under `alias` (the folder of
    /// the path `prefix`) or the site's `root`.
    pub(super) fn static_fallback(
        &mut self,
        at: &[Seg],
        fallback: String,
        (prefix, alias): (&str, Option<&Path>),
        root: Option<&Path>,
    ) -> Option<String> {
        let file = match (alias, root) {
            (Some(dir), _) => {
                let prefix = prefix.trim_end_matches('/');
                if !crate::routing::under_prefix(fallback.as_bytes(), prefix) {
                    self.err(at, format!("`{fallback}` is not under the path `{prefix}/` whose folder is `alias`; name a file of that folder, like \"{prefix}/index.html\""));
                    return None;
                }
                dir.join(fallback[prefix.len()..].trim_start_matches('/'))
            }
            (None, Some(root)) => root.join(fallback.trim_start_matches('/')),
            (None, None) => {
                self.err(
                    at,
                    "names a file under the site's `root`, and the site has none; add root = \"…\"",
                );
                return None;
            }
        };
        if !std::fs::metadata(&file).is_ok_and(|m| m.is_file()) {
            self.err(at, format!("{} is not a file (the fallback is a URL path of the site's files); create it, or fix the path", file.display()));
            return None;
        }
        Some(fallback)
    }
}
