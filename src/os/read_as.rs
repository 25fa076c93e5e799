//! Reading a small file a pool's user controls, from the master (which runs as root): as
//! that user, never through a symlink, never a FIFO or device, never past a size bound.
//!
//! Why a thread of its own: credentials are per thread in the kernel, so a short-lived thread
//! that takes the pool user's groups, group and user (by raw syscalls — glibc's wrappers would
//! change every thread of the process) opens the file with exactly that user's rights, and
//! dies with them; the master's own threads never change. A root-only file (`/etc/shadow`)
//! behind the pool user's back is then refused by the kernel, as it would be to that user.
//!
//! Owns: that thread, the `O_NOFOLLOW | O_NONBLOCK` open, `fstat` checks and the bounded
//! read. Must not touch: which file, or what the caller does with it (the warm-up page:
//! `server::supervisor::demand`).

use super::identity::Identity;
use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What identifies a file's content without reading it: when none of it moved, the bytes
/// read last time are still the file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    ctime_ns: i128,
}

/// Reads the regular file `path`, at most `max` bytes, as `who` when given (and this process
/// may become it); `Ok((stamp, None))` when its stamp is still `known` (nothing read).
/// Refused: a symlink as the last component (`ELOOP`), anything but a regular file, a file
/// over `max`, and whatever `who` may not open.
pub fn read_file_as(
    who: Option<&Identity>,
    path: &Path,
    max: u64,
    known: Option<Stamp>,
) -> std::io::Result<(Stamp, Option<Vec<u8>>)> {
    let who = who
        .filter(|id| id.uid != 0 && super::identity::effective_uid() == 0)
        .cloned();
    let path: PathBuf = path.to_path_buf();
    std::thread::Builder::new()
        .name("espalier-read-as".into())
        .spawn(move || {
            if let Some(id) = &who {
                become_on_this_thread(id)?;
            }
            read_bounded(&path, max, known)
        })?
        .join()
        .map_err(|_| Error::other("the reading thread panicked"))?
}

/// This thread (only) takes `id`'s groups, group and user, for good.
fn become_on_this_thread(id: &Identity) -> std::io::Result<()> {
    let groups: Vec<libc::gid_t> = id.groups.clone();
    let check = |r: libc::c_long| {
        if r == 0 {
            Ok(())
        } else {
            Err(Error::last_os_error())
        }
    };
    // SAFETY: raw syscalls with plain integers and a pointer to `groups`, alive for the call;
    // the kernel changes the calling thread's credentials only.
    unsafe {
        check(libc::syscall(
            libc::SYS_setgroups,
            groups.len(),
            groups.as_ptr(),
        ))?;
        check(libc::syscall(libc::SYS_setresgid, id.gid, id.gid, id.gid))?;
        check(libc::syscall(libc::SYS_setresuid, id.uid, id.uid, id.uid))?;
    }
    Ok(())
}

fn read_bounded(
    path: &Path,
    max: u64,
    known: Option<Stamp>,
) -> std::io::Result<(Stamp, Option<Vec<u8>>)> {
    // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > max {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{} bytes, over the {max}-byte bound", meta.len()),
        ));
    }
    let stamp = Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.len(),
        ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
    };
    if known == Some(stamp) {
        return Ok((stamp, None));
    }
    let mut body = Vec::with_capacity(meta.len() as usize);
    // Bounded even if it grows between the fstat and the read.
    file.take(max + 1).read_to_end(&mut body)?;
    if body.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("grew over the {max}-byte bound while read"),
        ));
    }
    Ok((stamp, Some(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_small_regular_file_is_read_and_a_kept_stamp_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("page.html");
        std::fs::write(&page, "<p>starting</p>").unwrap();
        let (stamp, body) = read_file_as(None, &page, 64, None).unwrap();
        assert_eq!(body.as_deref(), Some(&b"<p>starting</p>"[..]));
        assert_eq!(read_file_as(None, &page, 64, Some(stamp)).unwrap().1, None);
        // Too big, a symlink, a FIFO (which must not block), a folder: refused.
        std::fs::write(dir.path().join("big.html"), vec![b'x'; 65]).unwrap();
        assert!(read_file_as(None, &dir.path().join("big.html"), 64, None).is_err());
        let link = dir.path().join("link.html");
        std::os::unix::fs::symlink(&page, &link).unwrap();
        let e = read_file_as(None, &link, 64, None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        let fifo = dir.path().join("fifo.html");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(read_file_as(None, &fifo, 64, None).is_err());
        assert!(read_file_as(None, dir.path(), 64, None).is_err());
    }
}
