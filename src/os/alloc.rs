//! The binary's memory allocator, chosen by the process's role at its first allocation: a
//! worker keeps glibc's malloc; the master and every command (`check`, `bench`, …) take
//! mimalloc.
//!
//! Why two: the master builds and drops a whole configuration at each change — at 10,000
//! sites, hundreds of thousands of small blocks — and glibc spent a third of a change's time
//! in its own bookkeeping (`malloc_consolidate`, `unlink_chunk`; perf, #57); under mimalloc
//! one site's change at 10,000 sites takes half the time (docs/performance.md). A worker's
//! memory is the other way round: it holds a bounded buffer per stream and gives it back
//! when its connections close (`release_free_memory`, tested by `h2_limits`), which glibc
//! does and mimalloc did not within minutes (640 held streams: +71 MiB against glibc's +51).
//!
//! Why at the first allocation: a block must be freed by the allocator that made it, so the
//! choice is made before there is any block — from the environment (`getenv` allocates
//! nothing), where the master puts a worker's spec descriptor ([`WORKER_VAR`]) — and never
//! changes. A forked child keeps its parent's choice, and its blocks.
//!
//! Owns: that choice, and giving free memory back under it. Must not touch: anything else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// The variable a worker is started with (its spec's descriptor): its presence makes the
/// process a worker.
pub const WORKER_VAR: &str = "ESPALIER_WORKER_SPEC_FD";
const WORKER_VAR_C: &std::ffi::CStr = c"ESPALIER_WORKER_SPEC_FD";

const UNDECIDED: u8 = 0;
const GLIBC: u8 = 1;
const MIMALLOC: u8 = 2;

static CHOSEN: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The allocator of this process: decided once (two threads deciding at once decide the
/// same, from the same environment).
fn chosen() -> u8 {
    let chosen = CHOSEN.load(Ordering::Relaxed);
    if chosen != UNDECIDED {
        return chosen;
    }
    // SAFETY: getenv reads the environment block and allocates nothing; the name is a
    // NUL-terminated constant.
    let worker = !unsafe { libc::getenv(WORKER_VAR_C.as_ptr()) }.is_null();
    let chosen = if worker { GLIBC } else { MIMALLOC };
    CHOSEN.store(chosen, Ordering::Relaxed);
    chosen
}

/// The binary's global allocator (see the module's doc).
pub struct ByRole;

// SAFETY: each call goes to the one allocator chosen before any block was made, which made
// every block handed back to it; both uphold GlobalAlloc's contract themselves.
unsafe impl GlobalAlloc for ByRole {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match chosen() {
            MIMALLOC => unsafe { mimalloc::MiMalloc.alloc(layout) },
            _ => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match chosen() {
            MIMALLOC => unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) },
            _ => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match chosen() {
            MIMALLOC => unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) },
            _ => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match chosen() {
            MIMALLOC => unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) },
            _ => unsafe { System.realloc(ptr, layout, new_size) },
        }
    }
}

/// Gives the allocator's free memory back to the kernel: after many connections close,
/// their freed buffers otherwise stay in the heap, and a worker that once served a burst
/// keeps its peak for good. glibc's always (the C libraries, AWS-LC among them, allocate
/// from it), and mimalloc's where it is the process's.
pub fn release_free_memory() {
    // SAFETY: mi_collect takes a flag and touches only mimalloc's state; malloc_trim takes
    // an integer and touches only glibc's.
    unsafe {
        if CHOSEN.load(Ordering::Relaxed) == MIMALLOC {
            libmimalloc_sys::mi_collect(true);
        }
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_workers_variable_is_named_once() {
        assert_eq!(super::WORKER_VAR_C.to_str().unwrap(), super::WORKER_VAR);
    }
}
