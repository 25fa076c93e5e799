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
    let mut found = Vec::new();
    for (file, addrs) in [
        ("/proc/net/tcp", &["0100007F", "00000000"][..]),
        (
            "/proc/net/tcp6",
            &[
                "00000000000000000000000000000000",
                "0000000000000000FFFF00000100007F",
            ][..],
        ),
    ] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        found.extend(listeners_in(&text, port, addrs));
    }
    found
}

/// The table rows of `text` (`/proc/net/tcp*`) listening on `port` at one of `addrs` (the
/// kernel's hex spelling).
fn listeners_in(text: &str, port: u16, addrs: &[&str]) -> Vec<Listener> {
    let want_port = format!("{port:04X}");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, state, uid, inode) = (f.get(1)?, f.get(3)?, f.get(7)?, f.get(9)?);
            let (addr, p) = local.split_once(':')?;
            // 0A: TCP_LISTEN.
            (*state == "0A" && p == want_port && addrs.contains(&addr)).then_some(())?;
            Some(Listener {
                inode: inode.parse().ok()?,
                uid: uid.parse().ok()?,
            })
        })
        .collect()
}

/// The socket inodes `pid` and every descendant of it hold.
pub fn sockets_of_tree(pid: u32) -> HashSet<u64> {
    let tree = super::process::process_tree(pid);
    let mut inodes = HashSet::new();
    for p in tree {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{p}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let t = target.to_string_lossy();
            if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                if let Ok(n) = n.parse() {
                    inodes.insert(n);
                }
            }
        }
    }
    inodes
}

/// How many connections `pid` holds whose local port is one of `ports` — clients of its
/// listeners (its own outgoing connections, an upstream pool's, have other local ports) —
/// established, or closed by the client with its request maybe still unread.
pub fn client_connections(pid: u32, ports: &[u16]) -> usize {
    let want: Vec<String> = ports.iter().map(|p| format!("{p:04X}")).collect();
    let mut inodes: HashSet<u64> = HashSet::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            // 01: ESTABLISHED; 08: CLOSE_WAIT.
            let port = local.rsplit(':').next().unwrap_or_default();
            if matches!(*state, "01" | "08") && want.iter().any(|w| w == port) {
                if let Ok(n) = inode.parse() {
                    inodes.insert(n);
                }
            }
        }
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
