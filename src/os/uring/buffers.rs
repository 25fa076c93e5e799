//! The ring's provided buffers: one block of equal buffers the kernel picks from for every
//! multishot receive (a receive takes a buffer only when bytes arrive, so an idle connection
//! holds none), and the ring of their descriptions through which they are handed back.
//!
//! Owns: that memory and the ring's tail. Must not touch: which connection holds which
//! buffer (the driver, `super`).

use io_uring::types::BufRingEntry;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

/// `count` buffers of `size` bytes, registered as buffer group `group`.
pub(super) struct Buffers {
    /// The descriptions' ring (page-aligned, as the kernel requires).
    entries: *mut BufRingEntry,
    entries_len: usize,
    /// The buffers, one after another.
    memory: *mut u8,
    memory_len: usize,
    count: u16,
    size: usize,
    /// Our copy of the ring's tail (what the kernel may take up to).
    tail: u16,
    pub(super) group: u16,
    /// Buffers the kernel may fill now (those handed back and not yet taken).
    pub(super) available: usize,
    /// Kept mapped when dropped: operations may still be in flight (see `super::State`).
    pub(super) leak: bool,
}

/// An anonymous private mapping: page-aligned and zeroed.
fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh anonymous mapping, no address hint; checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

impl Buffers {
    /// Maps and registers the buffers with `submitter`'s ring; all handed to the kernel.
    /// `count` is a power of two.
    pub(super) fn new(
        submitter: &io_uring::Submitter<'_>,
        group: u16,
        count: u16,
        size: usize,
    ) -> io::Result<Self> {
        debug_assert!(count.is_power_of_two());
        let entries_len = usize::from(count) * std::mem::size_of::<BufRingEntry>();
        let entries = map(entries_len)?.cast::<BufRingEntry>();
        let memory_len = usize::from(count) * size;
        let memory = match map(memory_len) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: mapped just above, with this length, and not shared.
                unsafe { libc::munmap(entries.cast(), entries_len) };
                return Err(e);
            }
        };
        let mut buffers = Buffers {
            entries,
            entries_len,
            memory,
            memory_len,
            count,
            size,
            tail: 0,
            group,
            available: 0,
            leak: false,
        };
        // SAFETY: the ring's memory lives until `drop`, after the ring (the driver drops the
        // ring first: see `super::State`'s field order).
        unsafe { submitter.register_buf_ring_with_flags(entries as u64, count, group, 0)? };
        for id in 0..count {
            buffers.put(id);
        }
        buffers.publish();
        Ok(buffers)
    }

    /// The bytes of buffer `id`, the first `len` of them.
    pub(super) fn bytes(&self, id: u16, len: usize) -> &[u8] {
        let id = usize::from(id % self.count);
        // SAFETY: within the mapping; the kernel wrote it before posting the completion that
        // named it, and takes it back only after `give_back`.
        unsafe { std::slice::from_raw_parts(self.memory.add(id * self.size), len.min(self.size)) }
    }

    /// The kernel filled buffer `id`: it is ours until given back.
    pub(super) fn taken(&mut self) {
        self.available = self.available.saturating_sub(1);
    }

    /// Hands buffer `id` back to the kernel.
    pub(super) fn give_back(&mut self, id: u16) {
        self.put(id);
        self.publish();
    }

    fn put(&mut self, id: u16) {
        let id = id % self.count;
        let slot = usize::from(self.tail & (self.count - 1));
        // SAFETY: `slot` < count; the kernel reads entries only up to the published tail.
        let entry = unsafe { &mut *self.entries.add(slot) };
        entry.set_addr(self.memory as u64 + (usize::from(id) * self.size) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
        self.available += 1;
    }

    /// Makes the entries written so far visible to the kernel.
    fn publish(&self) {
        // SAFETY: the tail shares the first entry's reserved field (the kernel's layout); it is
        // written with release ordering so the entries before it are seen first.
        unsafe {
            let tail = BufRingEntry::tail(self.entries).cast_mut();
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        if self.leak {
            return;
        }
        // SAFETY: our own mappings; the ring that used them is gone (see `new`).
        unsafe {
            libc::munmap(self.memory.cast(), self.memory_len);
            libc::munmap(self.entries.cast(), self.entries_len);
        }
    }
}
