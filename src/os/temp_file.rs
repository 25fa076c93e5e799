//! Unnamed temporary files: a file in a folder that no name reaches (`O_TMPFILE`), gone when
//! its last descriptor closes — nothing to clean after a crash, nothing another process can
//! open by its path.
//!
//! Owns: that one open. Must not touch: what the file holds (see `proxy::spool`).

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// A new unnamed file in `dir`, readable and writable by this process alone. Fails where the
/// folder's file system has no `O_TMPFILE` (most have: ext4, xfs, btrfs, tmpfs).
pub fn unnamed_in(dir: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    #[test]
    fn an_unnamed_file_holds_what_is_written_and_has_no_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = super::unnamed_in(dir.path()).unwrap();
        f.write_all_at(b"held", 0).unwrap();
        let mut back = [0u8; 4];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back, b"held");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
