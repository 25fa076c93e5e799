//! Folders and files that nobody else can have made: the master's runtime folder, the admin
//! token's folder and the token itself.
//!
//! A folder in a place others can write (`/tmp`) is only ours if we just created it, or if it
//! is a real directory (not a symlink) that we own and nobody else may write; anything else is
//! refused with the fix, never used as it is (another user could have put sockets, symlinks or
//! a token of their own in it). A fresh folder gets a random name, so nobody can make it
//! first; `mkdir` fails when the name exists, so a race is refused, not followed.
//!
//! Owns: `mkdir`, `lstat`/`fstat` owner and mode checks, `O_NOFOLLOW` opens, random names and
//! secrets from `/dev/urandom`, comparing secrets in constant time, and a private file's
//! atomic replacement ([`write_private`]: keys, account credentials). Must not touch: where
//! these folders go or what lives in them (the caller decides: `server::app` for the runtime
//! folder, `server::admin` for the token, `server::acme` for keys).

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// `n` random bytes from the kernel.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes [`hex`] wrote (either case); `None` for an odd length or a non-hex digit.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect()
}

/// Compares two secrets without stopping at the first difference (no timing hint of a
/// secret's prefix).
pub fn same_secret(given: &str, wanted: &str) -> bool {
    given.len() == wanted.len()
        && given
            .bytes()
            .zip(wanted.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Why an existing `path` (as `lstat` sees it) is not ours to use, if it is not.
fn not_ours(path: &Path, meta: &std::fs::Metadata, want_dir: bool) -> Option<String> {
    let euid = super::identity::effective_uid();
    let what = if want_dir { "a directory" } else { "a file" };
    if meta.file_type().is_symlink() {
        return Some(format!("{} is a symlink; remove it", path.display()));
    }
    if (want_dir && !meta.is_dir()) || (!want_dir && !meta.is_file()) {
        return Some(format!("{} is not {what}; remove it", path.display()));
    }
    if meta.uid() != euid {
        return Some(format!(
            "{} belongs to uid {}, not to this server's uid {euid}; remove it",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{} may be written by other users (mode {:o}); remove it",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    None
}

/// `path` as a directory of ours with `mode`: created now, or an existing one that passes
/// [`not_ours`]'s checks (then set to `mode`). `Err` is the line for the operator.
pub fn owned_dir(path: &Path, mode: u32) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if let Some(why) = not_ours(path, &meta, true) {
                return Err(why);
            }
        }
        Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
    }
    // mkdir's mode passes the umask; the folder's mode must be exactly `mode`.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))
}

/// A new directory in `base` named `prefix` and random letters, created by this call (so no
/// one else made it), with `mode`.
pub fn fresh_dir(base: &Path, prefix: &str, mode: u32) -> Result<PathBuf, String> {
    for _ in 0..16 {
        let bytes = random_bytes::<8>().map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
        let path = base.join(format!("{prefix}{}", hex(&bytes)));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| format!("cannot set the mode of {}: {e}", path.display()))?;
                return Ok(path);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create a folder in {}: {e}", base.display())),
        }
    }
    Err(format!(
        "cannot create a folder in {}: every random name was taken",
        base.display()
    ))
}

/// A descriptor of folder `dir` (`O_PATH`: it reads nothing), not through a symlink, closed
/// on exec.
pub fn hold_dir(dir: &Path) -> Result<std::fs::File, String> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| format!("cannot open {}: {e}", dir.display()))
}

/// Reads a secret file of ours: not a symlink, owned by this process's user, readable by no
/// one else. `Ok(None)` when there is none.
pub fn read_secret(path: &Path) -> Result<Option<String>, String> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!("{} is a symlink; remove it", path.display()))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if let Some(why) = not_ours(path, &meta, false) {
        return Err(why);
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} may be read by other users (mode {:o}); remove it",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    let mut text = String::new();
    (&file)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(Some(text))
}

/// Writes a secret file (mode 0600) that must not exist yet: `O_EXCL` refuses a file or
/// symlink someone else put there first.
pub fn write_new_secret(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// Writes `bytes` to `path` as the master's own (mode 0600): into a new file beside it,
/// renamed over it, so a reader sees the old file or the new one, never half of one.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{file}.new"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_dir_is_new_and_has_its_mode() {
        let base = tempfile::tempdir().unwrap();
        let a = fresh_dir(base.path(), "m-", 0o711).unwrap();
        let b = fresh_dir(base.path(), "m-", 0o711).unwrap();
        assert_ne!(a, b);
        let meta = std::fs::symlink_metadata(&a).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o711);
    }

    #[test]
    fn an_existing_dir_is_used_only_when_it_is_ours_and_closed() {
        let base = tempfile::tempdir().unwrap();
        let ours = base.path().join("ours");
        owned_dir(&ours, 0o711).unwrap();
        owned_dir(&ours, 0o711).unwrap();
        // Writable by others: someone could have put anything in it.
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = owned_dir(&open, 0o711).unwrap_err();
        assert!(err.contains("may be written by other users"), "{err}");
        // A symlink to a folder of ours is still refused: it is never followed.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        let err = owned_dir(&link, 0o711).unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
        // A file where the folder should be.
        let file = base.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(owned_dir(&file, 0o711)
            .unwrap_err()
            .contains("not a directory"));
    }

    #[test]
    fn a_dir_of_another_user_is_refused() {
        if super::super::identity::effective_uid() != 0 {
            return; // only root can make a folder another user owns
        }
        let base = tempfile::tempdir().unwrap();
        let theirs = base.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        let err = owned_dir(&theirs, 0o711).unwrap_err();
        assert!(err.contains("belongs to uid 65534"), "{err}");
    }

    #[test]
    fn secrets_are_read_only_when_private_and_written_only_new() {
        let base = tempfile::tempdir().unwrap();
        let token = base.path().join("token");
        assert_eq!(read_secret(&token).unwrap(), None);
        write_new_secret(&token, "abc").unwrap();
        assert_eq!(read_secret(&token).unwrap().as_deref(), Some("abc"));
        // A second writer does not replace it.
        assert!(write_new_secret(&token, "def").is_err());
        // Readable by others: it may be someone else's planted token.
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_secret(&token)
            .unwrap_err()
            .contains("read by other users"));
        // A symlink is neither read nor written through.
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&token, &link).unwrap();
        assert!(read_secret(&link).unwrap_err().contains("symlink"));
        assert!(write_new_secret(&link, "x").is_err());
    }
}
