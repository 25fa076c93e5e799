//! The front controller of a path forwarded to an application — nginx's
//! `try_files $uri $uri/ /index.php`, Caddy's `php_fastcgi`, IIS's handler mappings: which of
//! its requests the app is sent, and which the thread answers as files.
//!
//! A FastCGI app path (files tried by default):
//! 1. a path naming a script by a segment with the app's extension runs it, or is answered
//!    404/403 ([`Scripts::resolve`]) — never served as a file, never sent to the fallback;
//! 2. a folder's path (`/x/`) runs the folder's index script if it has one;
//! 3. a file or folder that exists under the root is served by the static handler (which
//!    refuses the app's extensions in any case, so a script is never sent as its source);
//! 4. anything else runs the front controller (`fallback`), or is a 404 without one.
//!
//! A proxied app path with `try_files = true`: a regular file under the root is served as a
//! file, everything else (folders included: the app routes `/`) goes to the app.
//!
//! Owns: that decision. Not pure: it asks the static handler's cache or one `stat`, and the
//! scripts' `realpath`. Must not touch: the answer (the static handler writes it; the proxy
//! forwards).

use super::static_files::{Found, StaticFiles};
use crate::proxy::{Script, Scripts};

/// Where a FastCGI app path's request goes.
pub enum Front {
    /// To the app, running this script.
    Run(Box<Script>),
    /// To the static handler (a file or folder under the root).
    Files,
    /// Answered with this status.
    Answer(u16),
}

/// Where a request for `raw_path` (in normal form `path`) of a FastCGI app path goes;
/// `files` are the root's files when they are tried first.
pub fn fastcgi(
    scripts: &Scripts,
    files: Option<&StaticFiles>,
    raw_path: &str,
    path: &[u8],
) -> Front {
    let run = |r: Result<Script, u16>| match r {
        Ok(s) => Front::Run(Box::new(s)),
        Err(status) => Front::Answer(status),
    };
    if scripts.names_script(path) {
        return run(scripts.resolve(path));
    }
    if path.ends_with(b"/") {
        match scripts.resolve(path) {
            // No index script: the folder's static index, or the front controller.
            Err(404) => {}
            other => return run(other),
        }
    }
    if let Some(files) = files {
        if files.lookup(raw_path, path) != Found::Missing {
            return Front::Files;
        }
    }
    scripts.fallback().map_or(Front::Answer(404), run)
}

/// Whether a proxied app path's request is served as a file under the root.
pub fn is_file(files: &StaticFiles, raw_path: &str, path: &[u8]) -> bool {
    files.lookup(raw_path, path) == Found::File
}
