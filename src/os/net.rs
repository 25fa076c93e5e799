//! Listener sockets: SO_REUSEPORT groups and the CPU-steering BPF program.
//!
//! Owns: the socket syscalls (socket options, attaching programs, sendfile, shutdown) and
//! reading the interfaces' addresses and MTUs. Must not
//! touch: which sockets exist or what the program says (the master and `server::steering` decide).

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// One classic-BPF instruction, as the kernel's `struct sock_filter` lays it out (the
/// steering program is a list of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h); not exported by the libc crate.
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// A listening TCP socket that joins the reuseport group of `addr`. Non-blocking, close-on-exec
/// (the master clears that flag only for the worker it hands the socket to).
pub fn reuseport_listener(addr: SocketAddr, backlog: u32) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A UDP socket bound to `addr` in its reuseport group (one per worker thread answering
/// QUIC there), non-blocking.
pub fn reuseport_udp(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM.cloexec(),
        Some(Protocol::UDP),
    )?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Attaches a classic-BPF program to the reuseport group `socket` belongs to; it picks the
/// socket (by index in the group) for each new connection.
pub fn attach_reuseport_cbpf(socket: &Socket, prog: &[BpfInsn]) -> io::Result<()> {
    let filters: Vec<libc::sock_filter> = prog
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let fprog = libc::sock_fprog {
        len: filters.len() as u16,
        filter: filters.as_ptr() as *mut _,
    };
    // SAFETY: fprog points at `filters`, alive for the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `sendfile(out, in, offset, len)`: bytes sent, or `WouldBlock` when the socket is full.
pub fn sendfile(
    out: &impl AsRawFd,
    file: &impl AsRawFd,
    offset: &mut u64,
    len: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: both fds are open for the call; off is a valid pointer.
    let n = unsafe { libc::sendfile(out.as_raw_fd(), file.as_raw_fd(), &mut off, len) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

/// `shutdown(fd, SHUT_RD)`: ends a pending read on a connection with end-of-file. Errors (the
/// connection is already gone) do not matter to the caller.
pub fn shutdown_read(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown on an fd the caller's connection owns; no memory is passed.
    unsafe { libc::shutdown(fd, libc::SHUT_RD) };
}

/// `shutdown(fd, SHUT_RDWR)`: from now on reads end at end-of-file and writes fail (EPIPE), so
/// nothing more can be sent on the connection. Errors do not matter to the caller.
pub fn shutdown_both(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown on an fd the caller's connection owns; no memory is passed.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

/// A loopback port free at the moment of asking, for a process that will listen on it: one
/// below the kernel's ephemeral range (`ip_local_port_range`) where one is free, since a port
/// of that range can be taken by any outgoing connection before the process binds it; else
/// one the kernel picks.
pub fn free_loopback_port() -> io::Result<u16> {
    Ok(free_loopback_ports(1)?[0])
}

/// `n` distinct loopback ports, as [`free_loopback_port`]: all held at once while chosen, so
/// that they differ, then released for the processes that will listen on them.
pub fn free_loopback_ports(n: usize) -> io::Result<Vec<u16>> {
    let mut held = Vec::with_capacity(n);
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    if let Some((low, high)) = range.as_deref().and_then(ports_below_ephemeral) {
        // Spread over the span, so that servers starting together do not try the same ports;
        // the stride is a prime, so the steps visit distinct ports.
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        let span = u32::from(high - low);
        for k in 0..64 + 4 * n as u32 {
            if held.len() == n {
                break;
            }
            let port = low + ((seed.wrapping_add(k.wrapping_mul(7919))) % span) as u16;
            if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                held.push(listener);
            }
        }
    }
    while held.len() < n {
        held.push(std::net::TcpListener::bind("127.0.0.1:0")?);
    }
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// Whether another socket listens on loopback `port` (or holds it bound without
/// `SO_REUSEADDR`): a bind with `SO_REUSEADDR` fails only then — connections in TIME_WAIT on
/// it do not count. Asked of a port an app was given and exited on while starting: the
/// moment between choosing a free port and the app binding it cannot be closed for an app
/// that takes `$PORT`, so one that lost the port to another process is started again.
pub fn loopback_port_held(port: u16) -> bool {
    let Ok(socket) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
        return false;
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    socket.set_reuse_address(true).is_ok()
        && socket
            .bind(&addr.into())
            .is_err_and(|e| e.kind() == io::ErrorKind::AddrInUse)
}

/// The ports to pick from below the ephemeral range given as `ip_local_port_range`'s text
/// ("32768\t60999"): the 8 192 under its start (from 10 000 at least), or none when the range
/// starts too low.
fn ports_below_ephemeral(range: &str) -> Option<(u16, u16)> {
    let low: u16 = range.split_whitespace().next()?.parse().ok()?;
    let from = low.saturating_sub(8192).max(10_000);
    (from + 1024 <= low).then_some((from, low))
}

/// Takes ownership of a listening TCP socket this process inherited.
///
/// The fd must be an open listening socket handed to this thread alone (the master gives each
/// worker thread its own socket of every reuseport group).
pub fn adopt_listener(fd: std::os::fd::RawFd) -> std::net::TcpListener {
    use std::os::fd::FromRawFd;
    // SAFETY: the master handed this listening socket to this thread alone.
    unsafe { std::net::TcpListener::from_raw_fd(fd) }
}

/// Takes ownership of a UDP socket this process inherited (a worker thread's QUIC socket).
///
/// The fd must be an open UDP socket handed to this thread alone.
pub fn adopt_udp(fd: std::os::fd::RawFd) -> std::net::UdpSocket {
    use std::os::fd::FromRawFd;
    // SAFETY: the master handed this socket to this thread alone.
    unsafe { std::net::UdpSocket::from_raw_fd(fd) }
}

/// A socket this process was started with: a TCP listener (`udp` false) or a bound UDP
/// socket, its address, and whether it has `SO_REUSEPORT`.
pub struct Inherited {
    pub addr: SocketAddr,
    pub udp: bool,
    pub reuse_port: bool,
    pub socket: Socket,
    /// Who passed it: `the service manager`, or `the master it upgrades`.
    pub by: &'static str,
    /// A UDP socket an upgraded master's worker still reads (its QUIC connections' datagrams
    /// go there until it drains): a new worker must take another.
    pub read_by_old: bool,
}

/// The variable an upgrading master lists its UDP sockets' readers in, in the order it passes
/// them: `1` for one a worker of its still reads, `0` for one free.
pub const UPGRADE_UDP_READ: &str = "ESPALIER_UPGRADE_UDP_READ";

/// The variable a master upgrading itself sets for the new one: how many sockets it passes
/// from fd 3 (its listeners, its UDP sockets and its admin endpoint's).
pub const UPGRADE_FDS: &str = "ESPALIER_UPGRADE_FDS";

/// The sockets this process was started with, each with its address: a service manager's
/// (systemd socket activation: `LISTEN_FDS` TCP listeners from fd 3, for this process when
/// `LISTEN_PID` is its pid), or an upgrading master's ([`UPGRADE_FDS`] sockets from fd 3,
/// TCP listeners and UDP). The variables are removed, so no child sees them. Call it once,
/// before any thread starts.
pub fn inherited_sockets() -> Vec<Inherited> {
    let systemd = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p == std::process::id());
    let count = |var: &str| -> i32 {
        std::env::var(var)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let (listen, upgrade) = (count("LISTEN_FDS"), count(UPGRADE_FDS));
    let mut read = std::env::var(UPGRADE_UDP_READ)
        .unwrap_or_default()
        .into_bytes()
        .into_iter();
    for var in [
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
        UPGRADE_FDS,
        UPGRADE_UDP_READ,
    ] {
        std::env::remove_var(var);
    }
    let (count, udp_too, by) = match (systemd, upgrade) {
        (_, n) if n > 0 => (n, true, "the master it upgrades"),
        (true, _) => (listen, false, "the service manager"),
        _ => return Vec::new(),
    };
    let mut found = Vec::new();
    for fd in 3..3 + count.clamp(0, 65536) {
        use std::os::fd::FromRawFd;
        // Only a socket is taken: a manager that passed fewer descriptors than it said must
        // not make espalier close one it opened itself.
        // SAFETY: fstat writes only into `st`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            continue;
        }
        // SAFETY: both protocols hand fds 3..3+N to this process, once; each is taken here
        // exactly once.
        let socket = unsafe { Socket::from_raw_fd(fd) };
        let _ = crate::os::process::set_cloexec(fd);
        let udp = socket.r#type().is_ok_and(|t| t == socket2::Type::DGRAM);
        let listening = socket.is_listener().unwrap_or(false);
        let addr = socket.local_addr().ok().and_then(|a| a.as_socket());
        // Anything else is closed when `socket` goes.
        if let (true, Some(addr)) = (listening || (udp && udp_too), addr) {
            let reuse_port = socket.reuse_port().unwrap_or(false);
            let _ = socket.set_nonblocking(true);
            found.push(Inherited {
                addr,
                udp,
                reuse_port,
                socket,
                by,
                read_by_old: udp && read.next() == Some(b'1'),
            });
        }
    }
    found
}

/// A descriptor the reactor polls for readability (owned: closed after its registration).
struct Polled(std::os::fd::OwnedFd);

impl std::os::fd::AsRawFd for Polled {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// Reads and drops what waits in UDP socket `fd`, at most `limit` datagrams, without
/// blocking; how many. For the master, before it watches a sleeping pool's socket: datagrams
/// of connections whose process is gone would wake the pool at once.
pub fn discard_datagrams(fd: std::os::fd::RawFd, limit: usize) -> usize {
    // SAFETY: borrowed for this call only; the caller keeps `fd` open.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let socket = socket2::SockRef::from(&borrowed);
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
    (0..limit)
        .take_while(|_| socket.recv_with_flags(&mut buf, libc::MSG_DONTWAIT).is_ok())
        .count()
}

/// `fds` registered with the reactor for readability; `Err` when there is none.
fn polled(fds: Vec<std::os::fd::OwnedFd>) -> io::Result<Vec<tokio::io::unix::AsyncFd<Polled>>> {
    use tokio::io::unix::AsyncFd;
    if fds.is_empty() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut polled = Vec::with_capacity(fds.len());
    for fd in fds {
        // SAFETY: `Polled` owns the descriptor and keeps the same number until the `AsyncFd`
        // is dropped, which deregisters it before the descriptor closes.
        polled.push(unsafe {
            AsyncFd::register_with_interest(Polled(fd), tokio::io::Interest::READABLE)?
        });
    }
    Ok(polled)
}

/// Returns once a datagram `wanted` takes (its first bytes, its whole length) waits in one of
/// the UDP sockets `fds`, left there for its reader; those it refuses are read and dropped.
/// `Err` when none can be polled.
pub async fn datagram_arrives(
    fds: Vec<std::os::fd::OwnedFd>,
    wanted: impl Fn(&[u8], usize) -> bool,
) -> io::Result<()> {
    let polled = polled(fds)?;
    let mut head = [std::mem::MaybeUninit::<u8>::uninit(); 64];
    std::future::poll_fn(|cx| {
        // A flood of unwanted datagrams is dropped a bounded batch per turn, the task then
        // yielding to the master's others.
        let mut dropped = 0;
        for p in &polled {
            // SAFETY: borrowed while `p` holds the descriptor.
            let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(p.as_raw_fd()) };
            let socket = socket2::SockRef::from(&borrowed);
            // Until the socket is polled pending (which registers the wake-up): drained of
            // what `wanted` refuses, its readiness cleared once empty.
            while let std::task::Poll::Ready(ready) = p.poll_read_ready(cx) {
                let mut ready = match ready {
                    Ok(ready) => ready,
                    Err(e) => return std::task::Poll::Ready(Err(e)),
                };
                let flags = libc::MSG_PEEK | libc::MSG_TRUNC | libc::MSG_DONTWAIT;
                let Ok(len) = socket.recv_with_flags(&mut head, flags) else {
                    ready.clear_ready();
                    continue;
                };
                // SAFETY: recv wrote the first min(len, 64) bytes.
                let seen = &head[..len.min(head.len())];
                let seen = unsafe { &*(seen as *const [std::mem::MaybeUninit<u8>] as *const [u8]) };
                if wanted(seen, len) {
                    return std::task::Poll::Ready(Ok(()));
                }
                let _ = socket.recv_with_flags(&mut head, libc::MSG_DONTWAIT);
                dropped += 1;
                if dropped == 1024 {
                    cx.waker().wake_by_ref();
                    return std::task::Poll::Pending;
                }
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Returns once one of `fds` is readable (a connection in a listener's queue, a datagram in
/// a unix socket); reads nothing. `Err` when none can be polled.
pub async fn any_readable(fds: Vec<std::os::fd::OwnedFd>) -> io::Result<()> {
    let polled = polled(fds)?;
    std::future::poll_fn(|cx| {
        if polled.iter().any(|p| p.poll_read_ready(cx).is_ready()) {
            std::task::Poll::Ready(Ok(()))
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

/// Each address of the machine's interfaces with its interface's MTU (IP packet bytes): from
/// `getifaddrs` and `/sys/class/net/NAME/mtu`. Empty where either cannot be read; an
/// interface whose MTU cannot be read is left out.
pub fn link_mtus() -> Vec<(std::net::IpAddr, u32)> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list it allocated, freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let node = unsafe { &*at };
        at = node.ifa_next;
        if node.ifa_addr.is_null() || node.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its size.
        let ip = match i32::from(unsafe { (*node.ifa_addr).sa_family }) {
            libc::AF_INET => {
                // SAFETY: AF_INET: a sockaddr_in.
                let a = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in) };
                std::net::IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6: a sockaddr_in6.
                let a = unsafe { &*(node.ifa_addr as *const libc::sockaddr_in6) };
                std::net::IpAddr::from(a.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        // SAFETY: ifa_name is a NUL-terminated string in the list.
        let name = unsafe { std::ffi::CStr::from_ptr(node.ifa_name) };
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", name.to_string_lossy()));
        if let Some(mtu) = mtu.ok().and_then(|m| m.trim().parse().ok()) {
            found.push((ip, mtu));
        }
    }
    // SAFETY: the list getifaddrs allocated, no longer referenced.
    unsafe { libc::freeifaddrs(list) };
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram `wanted` refuses is dropped, and one it takes is left for the reader.
    #[tokio::test]
    async fn datagram_arrives_drops_the_unwanted_and_leaves_the_wanted() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = socket.local_addr().unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.send_to(&[1u8; 10], to).unwrap();
        peer.send_to(&[0xc3u8; 1250], to).unwrap();
        let copy = crate::os::process::duplicate(socket.as_raw_fd()).unwrap();
        let wanted = |first: &[u8], len: usize| first[0] == 0xc3 && len == 1250;
        let arrived = datagram_arrives(vec![copy], wanted);
        tokio::time::timeout(std::time::Duration::from_secs(20), arrived)
            .await
            .expect("the wanted datagram seen")
            .unwrap();
        let mut buf = [0u8; 2000];
        assert_eq!(
            socket.recv(&mut buf).unwrap(),
            1250,
            "the unwanted one dropped"
        );
        // Waiting already (the socket drained, polled pending) when they come: 3 000 unwanted
        // ones, then the wanted one.
        let copy = crate::os::process::duplicate(socket.as_raw_fd()).unwrap();
        let arrives = tokio::spawn(datagram_arrives(vec![copy], wanted));
        tokio::task::yield_now().await;
        for i in 0..3000 {
            peer.send_to(&[1u8; 10], to).unwrap();
            if i % 50 == 0 {
                // The watch runs between bursts (this runtime has one thread): the socket's
                // buffer never fills, so the kernel drops none.
                tokio::task::yield_now().await;
            }
        }
        peer.send_to(&[0xc3u8; 1250], to).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(20), arrives)
            .await
            .expect("the wanted datagram seen after the flood")
            .unwrap()
            .unwrap();
        socket.set_nonblocking(true).unwrap();
        assert_eq!(socket.recv(&mut buf).unwrap(), 1250);
    }

    #[test]
    fn app_ports_come_from_below_the_ephemeral_range() {
        assert_eq!(
            ports_below_ephemeral("32768\t60999\n"),
            Some((24576, 32768))
        );
        assert_eq!(ports_below_ephemeral("15000 60999"), Some((10000, 15000)));
        // Too low to leave room below it: the kernel picks.
        assert_eq!(ports_below_ephemeral("10500 60999"), None);
        assert_eq!(ports_below_ephemeral("junk"), None);
        let port = free_loopback_port().unwrap();
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port was free");
        let ports = free_loopback_ports(5).unwrap();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), 5, "{ports:?}");
        if let Some((low, high)) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .as_deref()
            .and_then(ports_below_ephemeral)
        {
            assert!((low..high).contains(&port), "{port} outside {low}..{high}");
        }
    }

    #[test]
    fn the_loopback_address_comes_with_the_loopback_interfaces_mtu() {
        let lo: u32 = (std::fs::read_to_string("/sys/class/net/lo/mtu")
            .unwrap()
            .trim())
        .parse()
        .unwrap();
        let links = link_mtus();
        let localhost = std::net::IpAddr::from([127, 0, 0, 1]);
        assert!(links.contains(&(localhost, lo)), "{links:?}");
    }

    #[test]
    fn a_port_is_held_while_another_socket_listens_on_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(loopback_port_held(port));
        drop(listener);
        assert!(!loopback_port_held(port));
    }
}
