//! Which file a FastCGI request may run: espalier decides, whatever the FastCGI server would
//! accept (`php-cgi -b` runs any file it is named, and with `cgi.fix_pathinfo` walks up from
//! `/uploads/x.jpg/.php` to `x.jpg`; only php-fpm's own `security.limit_extensions` stops it).
//!
//! A script is the first path segment whose name ends with one of the pool's extensions
//! (`.php` by default) and is more than the extension; what follows is `PATH_INFO`, as nginx's
//! `fastcgi_split_path_info ^(.+?\.php)(/.*)$`. A path ending in `/` names the folder's
//! `index` script. Anything else is not a script (the handlers may serve it as a file, or run
//! the site's front controller, [`Scripts::fallback`]): the app is sent only a regular file
//! that exists under the site's `root` — a symlink leading out of `root` only with
//! `follow_symlinks = true` — and never one under a `no_scripts` folder (403).
//!
//! Owns: that decision ([`Scripts::split`], pure; [`Scripts::resolve`], one `realpath` or
//! `stat`). Must not touch: the records sent to the app ([`super::cgi`]), or files served as
//! files (the handlers' front controller).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A site's scripts for one FastCGI pool.
pub struct Scripts {
    root: Rc<Path>,
    /// `root` with its symlinks resolved, for the inside-root check (`None` when it cannot be
    /// resolved: then every script is refused).
    canonical_root: Option<PathBuf>,
    extensions: Vec<String>,
    follow_symlinks: bool,
    /// The front controller (`/index.php`), if the site has one.
    fallback: Option<Vec<u8>>,
    /// URL path prefixes (no trailing `/`) where no script runs.
    no_scripts: Vec<String>,
}

/// A script that may run: what the app is told.
#[derive(Debug, PartialEq, Eq)]
pub struct Script {
    /// `DOCUMENT_ROOT`: the site's root.
    pub root: Rc<Path>,
    /// `DOCUMENT_URI`: the normalized path the script was found by.
    pub document_uri: Vec<u8>,
    /// `SCRIPT_NAME`: the URL path of the script.
    pub name: Vec<u8>,
    /// `PATH_INFO`: the rest of the path after it.
    pub path_info: Vec<u8>,
    /// `SCRIPT_FILENAME`: `root` and the name.
    pub filename: Vec<u8>,
}

impl Scripts {
    /// `root` is the site's (absolute) document root. Resolves it once, at the thread's start.
    pub fn new(root: &Path, extensions: Vec<String>, follow_symlinks: bool) -> Self {
        Scripts {
            root: Rc::from(root),
            canonical_root: std::fs::canonicalize(root).ok(),
            extensions,
            follow_symlinks,
            fallback: None,
            no_scripts: Vec::new(),
        }
    }

    /// With a front controller (`fallback`, a checked URL path of a script) and the folders
    /// where no script runs (prefixes without a trailing `/`).
    pub fn with_front(mut self, fallback: Option<&str>, no_scripts: &[String]) -> Self {
        self.fallback = fallback.map(|f| f.as_bytes().to_vec());
        self.no_scripts = no_scripts.to_vec();
        self
    }

    /// The extensions of the scripts the app runs (`.php`).
    pub fn extensions(&self) -> &[String] {
        &self.extensions
    }

    fn is_script_name(&self, segment: &[u8]) -> bool {
        self.extensions
            .iter()
            .any(|e| segment.len() > e.len() && segment.ends_with(e.as_bytes()))
    }

    /// Whether a normalized path names a script by a segment with the app's extension (a
    /// folder's index aside): such a path runs that script or gets an error, never a file.
    pub fn names_script(&self, path: &[u8]) -> bool {
        path.split(|&b| b == b'/').any(|s| self.is_script_name(s))
    }

    /// The front controller, run for `path`s that are neither scripts nor files: `None`
    /// without one, else as [`Self::resolve`] finds it (with an empty `PATH_INFO`, as nginx's
    /// `try_files … /index.php` and Caddy's `php_fastcgi` send it).
    pub fn fallback(&self) -> Option<Result<Script, u16>> {
        self.fallback.as_deref().map(|f| self.resolve(f))
    }

    /// `(SCRIPT_NAME, PATH_INFO)` of a normalized path, or 404 when it names no script.
    pub fn split(&self, path: &[u8]) -> Result<(Vec<u8>, Vec<u8>), u16> {
        let mut start = 1;
        while start <= path.len() {
            let end = memchr::memchr(b'/', &path[start..]).map_or(path.len(), |i| start + i);
            if self.is_script_name(&path[start..end]) {
                return Ok((path[..end].to_vec(), path[end..].to_vec()));
            }
            start = end + 1;
        }
        match self.extensions.first() {
            Some(ext) if path.ends_with(b"/") => {
                let mut script = path.to_vec();
                script.extend_from_slice(b"index");
                script.extend_from_slice(ext.as_bytes());
                Ok((script, Vec::new()))
            }
            _ => Err(404),
        }
    }

    /// The script a normalized path names, if it may run: a regular file under `root`. 404
    /// when there is none, 403 when it leads out of `root` (a symlink, without
    /// `follow_symlinks`) or lies under a `no_scripts` folder.
    pub fn resolve(&self, path: &[u8]) -> Result<Script, u16> {
        let (name, path_info) = self.split(path)?;
        if self
            .no_scripts
            .iter()
            .any(|p| crate::routing::under_prefix(&name, p))
        {
            return Err(403);
        }
        let mut filename = self.root.as_os_str().as_bytes().to_vec();
        while filename.ends_with(b"/") {
            filename.pop();
        }
        filename.extend_from_slice(&name);
        let file = Path::new(std::ffi::OsStr::from_bytes(&filename));
        let meta = if self.follow_symlinks {
            std::fs::metadata(file).map_err(|_| 404u16)?
        } else {
            let real = std::fs::canonicalize(file).map_err(|_| 404u16)?;
            let root = self.canonical_root.as_deref().ok_or(404u16)?;
            if !real.starts_with(root) {
                return Err(403);
            }
            std::fs::metadata(&real).map_err(|_| 404u16)?
        };
        if !meta.is_file() {
            return Err(404);
        }
        Ok(Script {
            root: Rc::clone(&self.root),
            document_uri: path.to_vec(),
            name,
            path_info,
            filename,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn php(root: &Path, follow: bool) -> Scripts {
        Scripts::new(root, vec![".php".into()], follow)
    }

    #[test]
    fn a_script_is_the_first_segment_with_the_extension() {
        let s = php(Path::new("/srv"), false);
        let split = |p: &str| {
            s.split(p.as_bytes())
                .map(|(a, b)| (String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap()))
        };
        assert_eq!(split("/index.php"), Ok(("/index.php".into(), "".into())));
        assert_eq!(
            split("/a/b.php/x/y"),
            Ok(("/a/b.php".into(), "/x/y".into()))
        );
        assert_eq!(
            split("/a.phpx/b.php"),
            Ok(("/a.phpx/b.php".into(), "".into()))
        );
        assert_eq!(
            split("/d.php/e.php"),
            Ok(("/d.php".into(), "/e.php".into()))
        );
        assert_eq!(split("/dir/"), Ok(("/dir/index.php".into(), "".into())));
        // Not scripts: never sent to the app.
        assert_eq!(split("/style.css"), Err(404));
        assert_eq!(split("/readme.txt"), Err(404));
        assert_eq!(split("/uploads/x.jpg/.php"), Err(404));
        assert_eq!(split("/.php"), Err(404));
        assert_eq!(split("/x.PHP"), Err(404));
    }

    #[test]
    fn only_regular_files_under_root_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("uploads")).unwrap();
        std::fs::create_dir(root.join("sub.php")).unwrap();
        std::fs::write(root.join("index.php"), "<?php").unwrap();
        std::fs::write(root.join("uploads/x.jpg"), "<?php evil").unwrap();
        std::fs::write(dir.path().join("outside.php"), "<?php").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.php"), root.join("out.php")).unwrap();
        std::os::unix::fs::symlink(root.join("index.php"), root.join("in.php")).unwrap();
        let s = php(&root, false);
        let ok = s.resolve(b"/index.php/a/b").unwrap();
        assert_eq!(ok.path_info, b"/a/b");
        assert!(ok.filename.ends_with(b"/root/index.php"));
        assert!(s.resolve(b"/in.php").is_ok(), "a link inside root runs");
        assert_eq!(s.resolve(b"/uploads/x.jpg"), Err(404));
        assert_eq!(s.resolve(b"/uploads/x.jpg/.php"), Err(404));
        assert_eq!(s.resolve(b"/uploads/x.jpg/a.php"), Err(404));
        assert_eq!(s.resolve(b"/missing.php"), Err(404));
        assert_eq!(s.resolve(b"/sub.php"), Err(404), "a folder is not a script");
        assert_eq!(s.resolve(b"/uploads/"), Err(404), "no index.php there");
        assert_eq!(s.resolve(b"/out.php"), Err(403));
        assert!(php(&root, true).resolve(b"/out.php").is_ok());
    }

    #[test]
    fn no_script_runs_in_an_upload_folder_and_the_fallback_has_no_path_info() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("up/deep")).unwrap();
        std::fs::write(root.join("index.php"), "<?php").unwrap();
        std::fs::write(root.join("up/deep/x.php"), "<?php evil").unwrap();
        std::fs::write(root.join("up/index.php"), "<?php evil").unwrap();
        let s = php(root, false).with_front(Some("/index.php"), &["/up".into()]);
        assert_eq!(s.resolve(b"/up/deep/x.php"), Err(403));
        assert_eq!(s.resolve(b"/up/deep/x.php/info"), Err(403));
        assert_eq!(s.resolve(b"/up/"), Err(403), "a folder's index too");
        assert!(
            s.resolve(b"/upx/").is_err_and(|e| e == 404),
            "a prefix on a boundary"
        );
        let f = s.fallback().unwrap().unwrap();
        assert_eq!(
            (f.name.as_slice(), f.path_info.as_slice()),
            (&b"/index.php"[..], &b""[..])
        );
        assert!(s.names_script(b"/a/b.php/c"));
        assert!(!s.names_script(b"/a/b.PHP"));
        assert!(!s.names_script(b"/x.jpg/.php"));
        assert!(php(root, false).fallback().is_none());
    }
}
