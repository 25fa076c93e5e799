//! The platform layer: every syscall espalier makes, each wrapped in a small function named
//! for the one kernel facility it wraps (like nginx's `src/os/unix`).
//!
//! Owns: all `unsafe` in the crate. Must not touch: policy — callers decide what to apply;
//! these functions only apply it and report the kernel's answer as an `io::Error`.

pub mod cgroup;
pub mod fdpass;
pub mod identity;
pub mod ktls;
pub mod net;
pub mod notify;
pub mod numa;
pub mod private_dir;
pub mod process;
