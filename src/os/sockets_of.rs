//! Who holds a listening socket: the kernel's socket tables (`/proc/net/tcp`, `tcp6`) and the
//! descriptors of a process and its descendants (`/proc/PID/fd`; the tree from
//! [`super::process::process_tree`]).
//!
//! Why: an app espalier starts is given a free loopback port and binds it a moment later;
//! another local user who binds it first would be "ready" to a probe that only connects, and
//! would receive the pool's visitors. A port counts as the app's only when every socket that
//! listens where 127.0.0.1:PORT connections land belongs to the app or its children.
//!
//! Owns: reading those tables. Must not touch: what is done about a stranger (the
//! supervisor's probes decide).

use std::collections::HashSet;

/// A socket listening on TCP `port` where a connection to 127.0.0.1 lands (127.0.0.1, any
/// IPv4 address, or `::`/`::ffff:127.0.0.1`): its inode and its owner's uid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub inode: u64,
    pub uid: u32,
}

/// The sockets listening for 127.0.0.1:`port`.
pub fn loopback_listeners(port: u16) -> Vec<Listener> {
    listeners_at(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
}

/// The sockets listening where connections to the loopback address `addr` land: on `addr`
/// itself or on every address (IPv4 or IPv6).
pub fn listeners_at(addr: std::net::SocketAddr) -> Vec<Listener> {
    let std::net::IpAddr::V4(ip) = addr.ip() else {
        return Vec::new();
    };
    // The kernel writes an IPv4 address as its 32 bits in the machine's order, in hex.
    let own = format!("{:08X}", u32::from_ne_bytes(ip.octets()));
    let mapped = format!("0000000000000000FFFF0000{own}");
    let mut found = Vec::new();
    for (file, addrs) in [
        ("/proc/net/tcp", vec![own.clone(), "00000000".to_string()]),
        (
            "/proc/net/tcp6",
            vec!["00000000000000000000000000000000".to_string(), mapped],
        ),
    ] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        found.extend(listeners_in(&text, addr.port(), &addrs));
    }
    found
}

/// The processes holding socket `inode` (a walk of every process's descriptors: for a
/// reload's few upstream servers, not per request).
pub fn holders_of(inode: u64) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| socket_inodes(pid).contains(&inode))
        .collect()
}

/// One row of `/proc/net/tcp*`: the local address and port as the kernel spells them (hex),
/// the state (`0A` listening, `01` established, `08` close-wait), owner uid and inode.
struct Row<'a> {
    addr: &'a str,
    port: u16,
    state: &'a str,
    uid: u32,
    inode: u64,
}

/// The rows of a `/proc/net/tcp*` table's text (its heading line left out). The table has a
/// row for every TCP socket, TIME_WAIT's included — tens of thousands on a busy machine — so
/// a row's fields are taken in one pass of ASCII splitting, nothing collected.
fn rows(text: &str) -> impl Iterator<Item = Row<'_>> {
    text.lines().skip(1).filter_map(|line| {
        // sl, local address, remote address, st, queues, tr:when, retrnsmt, uid, timeout, inode
        let mut f = line.split_ascii_whitespace();
        let (addr, port) = f.nth(1)?.split_once(':')?;
        let state = f.nth(1)?;
        let uid = f.nth(3)?;
        let inode = f.nth(1)?;
        Some(Row {
            addr,
            port: u16::from_str_radix(port, 16).ok()?,
            state,
            uid: uid.parse().ok()?,
            inode: inode.parse().ok()?,
        })
    })
}

/// The table rows of `text` (`/proc/net/tcp*`) listening on `port` at one of `addrs` (the
/// kernel's hex spelling).
fn listeners_in(text: &str, port: u16, addrs: &[&str]) -> Vec<Listener> {
    rows(text)
        .filter(|r| r.state == "0A" && r.port == port && addrs.contains(&r.addr))
        .map(|r| Listener {
            inode: r.inode,
            uid: r.uid,
        })
        .collect()
}

/// The socket inodes `pid` and every descendant of it hold.
pub fn sockets_of_tree(pid: u32) -> HashSet<u64> {
    let tree = super::process::process_tree(pid);
    tree.into_iter().flat_map(socket_inodes).collect()
}

/// The socket inodes process `pid`'s descriptors name (`socket:[N]` links in /proc/PID/fd).
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let target = std::fs::read_link(fd.path()).ok()?;
            let t = target.to_string_lossy();
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The TCP ports `pid` and its descendants listen on, sorted, each once.
pub fn listening_ports_of_tree(pid: u32) -> Vec<u16> {
    let inodes = sockets_of_tree(pid);
    if inodes.is_empty() {
        return Vec::new();
    }
    let mut ports = Vec::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        ports.extend(
            rows(&text)
                .filter(|r| r.state == "0A" && inodes.contains(&r.inode))
                .map(|r| r.port),
        );
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// How many connections `pid` holds whose local port is one of `ports` — clients of its
/// listeners (its own outgoing connections, an upstream pool's, have other local ports) —
/// established, or closed by the client with its request maybe still unread.
pub fn client_connections(pid: u32, ports: &[u16]) -> usize {
    let mut inodes: HashSet<u64> = HashSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        inodes.extend(
            rows(&text)
                .filter(|r| matches!(r.state, "01" | "08") && ports.contains(&r.port))
                .map(|r| r.inode),
        );
    }
    if inodes.is_empty() {
        return 0;
    }
    sockets_of_tree(pid).intersection(&inodes).count()
}

/// The listeners for 127.0.0.1:`port` that neither `pid` nor its descendants hold: empty
/// when the port is the app's alone (or nobody's).
pub fn strangers_on_port(port: u16, pid: u32) -> Vec<Listener> {
    let listeners = loopback_listeners(port);
    if listeners.is_empty() {
        return Vec::new();
    }
    let ours = sockets_of_tree(pid);
    listeners
        .into_iter()
        .filter(|l| !ours.contains(&l.inode))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_process_is_ours_and_the_table_is_read() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let found = loopback_listeners(port);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(strangers_on_port(port, std::process::id()).is_empty());
        // Seen from a process that is not its parent: a child of ours holds none of it.
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert_eq!(strangers_on_port(port, other.id()), found);
        let _ = other.kill();
        let _ = other.wait();
        drop(l);
        assert!(loopback_listeners(port).is_empty());
    }

    #[test]
    fn the_ports_a_process_listens_on_are_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening_ports_of_tree(std::process::id()).contains(&port));
        drop(l);
        // Another test of this binary may take the freed port number for a moment (CI saw
        // it): gone once no listener of ours has it, within a generous bound.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while listening_ports_of_tree(std::process::id()).contains(&port) {
            assert!(
                std::time::Instant::now() < until,
                "port {port} still listed"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn a_client_of_this_processs_listener_is_counted_and_an_outgoing_one_is_not() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id();
        assert_eq!(client_connections(me, &[port]), 0);
        // Our own connection to it: its server end (local port = the listener's) counts; its
        // client end (an ephemeral local port) does not.
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, _) = l.accept().unwrap();
        assert_eq!(client_connections(me, &[port]), 1);
        drop(accepted);
        assert_eq!(client_connections(me, &[port]), 0);
    }

    #[test]
    fn rows_are_matched_by_state_port_and_address() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
           1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n\
           2: 0200007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1\n\
           3: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 444 1\n";
        let found = listeners_in(text, 8080, &["0100007F", "00000000"]);
        assert_eq!(
            found,
            [
                Listener { inode: 111, uid: 0 },
                Listener {
                    inode: 444,
                    uid: 65534
                }
            ]
        );
    }
}
