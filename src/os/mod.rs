//! The platform layer: every syscall espalier makes, each wrapped in a small function named
//! for the one kernel facility it wraps (like nginx's `src/os/unix`).
//!
//! Owns: all `unsafe` in the crate. Must not touch: policy — callers decide what to apply;
//! these functions only apply it and report the kernel's answer as an `io::Error`.

pub mod alloc;
pub mod cgroup;
pub mod fdpass;
pub mod folder_watch;
pub mod freezer;
pub mod identity;
pub mod isolation;
pub mod ktls;
pub mod net;
pub mod notify;
pub mod numa;
pub mod private_dir;
pub mod process;
pub mod read_as;
pub mod shared_memory;
pub mod sockets_of;
pub mod temp_file;
pub mod uring;

/// Whether the `n`th (from 1) of a run of like events is worth a log line: the first ten, then
/// each power of two, so a flood of one cause (a bug, a dead app) cannot flood the log.
pub fn nth_worth_logging(n: u64) -> bool {
    n <= 10 || n.is_power_of_two()
}

/// A lifecycle log line on stderr: `espalier[<who>]: <message>`. Requests are never logged
/// here; this is for starts, exits and decisions an operator must see.
///
/// A write error is ignored rather than raised: `eprintln!` panics when stderr is gone (a
/// closed pipe), and a server must not die because whoever read its log went away.
pub fn log(who: &str, message: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "espalier[{who}]: {message}");
}
