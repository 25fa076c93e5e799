//! Memory several processes share: an anonymous file (memfd) one process makes and the
//! others inherit and map, seen by each as words it reads and writes atomically.
//!
//! Why words, not bytes behind a pointer: other processes write the same memory at any
//! time, and an atomic access is the one Rust defines for that; what the words mean, and the
//! lock that orders them, are the caller's (`crate::tls::session_table`).
//!
//! Owns: the file's making, its mapping and unmapping. Must not touch: what is kept in it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// Makes a shared file `name` of `words` zeroed 8-byte words, its size sealed (a process
/// that maps it can trust the length it mapped).
pub fn create(name: &str, words: usize) -> io::Result<OwnedFd> {
    let name = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    let len = words.checked_mul(8).ok_or(io::ErrorKind::InvalidInput)?;
    // SAFETY: `name` is a valid C string for the call's duration.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(len as u64)?;
    let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}

/// A shared file mapped into this process, read and written as atomic words; unmapped when
/// dropped.
pub struct Mapping {
    start: std::ptr::NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is memory every thread may reach; it is read and written only through
// `AtomicU64`, which is Sync.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the whole of the shared file `fd` (made by [`create`], its size sealed), read
    /// and write.
    pub fn map(fd: BorrowedFd<'_>) -> io::Result<Mapping> {
        // SAFETY: a zeroed stat is a valid out-parameter for fstat.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat fills `stat`, valid for the call.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = usize::try_from(stat.st_size).map_err(|_| io::ErrorKind::InvalidData)?;
        if len == 0 || len % 8 != 0 {
            return Err(io::ErrorKind::InvalidData.into());
        }
        // SAFETY: a new shared mapping of the file's whole length; the kernel picks the place.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = std::ptr::NonNull::new(at.cast::<AtomicU64>()).ok_or(io::ErrorKind::Other)?;
        Ok(Mapping {
            start,
            words: len / 8,
        })
    }

    /// Maps the shared file this process inherited as descriptor `fd`, and closes the
    /// descriptor (the mapping stays).
    ///
    /// The caller's protocol vouches that `fd` is such a file, handed to this process for
    /// this use alone (the worker's spec names it; see `crate::server::spec`).
    pub fn map_inherited(fd: std::os::fd::RawFd) -> io::Result<Mapping> {
        if fd < 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: per the protocol above, `fd` is open and owned by nothing else here; the
        // OwnedFd closes it once mapped.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Mapping::map(std::os::fd::AsFd::as_fd(&owned))
    }

    /// The mapping's words.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is `words` page-aligned (so 8-aligned) words, valid until
        // `self` is dropped; AtomicU64 has u64's layout, and every access is atomic.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no reference outlives `self`.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.words * 8) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_file_see_each_others_words() {
        let fd = create("espalier-test", 512).unwrap();
        let (a, b) = (
            Mapping::map(fd.as_fd()).unwrap(),
            Mapping::map(fd.as_fd()).unwrap(),
        );
        assert_eq!(a.words().len(), 512);
        a.words()[511].store(0xfeed, Ordering::Release);
        assert_eq!(b.words()[511].load(Ordering::Acquire), 0xfeed);
        // Its size is sealed.
        let file = std::fs::File::from(fd);
        assert!(file.set_len(8).is_err());
    }
}
