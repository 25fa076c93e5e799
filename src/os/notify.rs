//! Telling systemd how the service is doing: `sd_notify`'s protocol — `KEY=VALUE` lines in
//! one datagram to the socket named by `NOTIFY_SOCKET` (a path, or `@name` in the abstract
//! namespace) — and `CLOCK_MONOTONIC` for `RELOADING=1`'s `MONOTONIC_USEC`.
//!
//! Owns: those syscalls. Must not touch: when to notify (the supervisor decides).

use std::io;
use std::os::unix::net::UnixDatagram;

/// The variable naming the socket.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Sends `state` to the service manager, when one listens (`NOTIFY_SOCKET` set); without one
/// it does nothing, as `sd_notify` does.
pub fn notify(state: &str) -> io::Result<()> {
    let Some(target) = std::env::var_os(NOTIFY_SOCKET) else {
        return Ok(());
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = target.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), &target)?;
    }
    Ok(())
}

/// Microseconds of `CLOCK_MONOTONIC`, as systemd compares them.
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}
