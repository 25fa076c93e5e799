//! Connection hand-off between pools on a shared address — HTTP.sys's routing of one port to
//! several application pools.
//!
//! Owns: the worker's side — handing an accepted connection, with the bytes already read
//! from it, to a thread of another pool ([`Handoff::send`]), and taking such connections in
//! ([`Receiver`]); the message format; the choice of a thread (nearest first, [`PoolTargets`]).
//! Must not touch: which pool a request belongs to (the router in [`crate::handlers`]
//! decides) or the sockets' life (the master creates every hand-off socket and keeps it, see
//! `server::handoffs`).
//!
//! # The mechanism, and why
//! An address several pools share is the dispatcher's (`server::dispatcher`): its thread on
//! the CPU that received a connection reads the request head (or peeks the TLS ClientHello's
//! name) and routes it by host and path, as every worker's request chain does. It then passes
//! the connection's descriptor and the unparsed bytes over a unix datagram socket
//! (`SCM_RIGHTS`) to a thread of the right pool: on the same CPU when that pool has one
//! there, else on the same node, else on the nearest node by the kernel's distance table. The
//! receiver serves it as if it had accepted it; a later request on the connection that names
//! another pool is handed on again (pool to pool), so no request is ever served by the wrong
//! pool. A connection handed on [`MAX_HOPS`] times in a row without an answer (two workers of
//! an overlapped reload that disagree about a host) gets a 503 rather than bouncing forever.
//!
//! A hand-off is paid once per connection (one `sendmsg` and one `recvmsg`); keep-alive
//! requests after it take the pool's own path. A front forwarding every request over a unix
//! socket, as a proxy does, would pay a round trip on each. An address served by one pool has
//! no hand-off at all: its workers accept.
//!
//! A pool asleep has no socket (an idle pool costs nothing): a sender that finds none of a
//! pool's sockets sends the connection to the master's socket ([`Peers::wake`]) with the
//! pool's name, and the master opens the pool's sockets, passes it on and wakes the pool.
//!
//! Each receiving socket belongs to a thread slot (pool, worker index, CPU), not to a process:
//! the master binds it while the slot's pool may run and every worker in that slot inherits
//! it, so connections handed
//! over while a worker restarts or recycles wait in the socket for its successor, as HTTP.sys
//! keeps a request queue across worker restarts. When a pool is stopped, the master answers
//! what arrives on its sockets (503, or a reset with `load_balancer = "tcp"`).
//!
//! # Who may hand a connection over
//! The sockets must be reachable by the workers of every pool's user, and a pool's app
//! processes run as that same user, so neither the socket's mode nor the sender's uid can
//! tell a worker from app code (PHP running as the pool's user once injected connections with
//! forged client addresses). So every message carries the master's [`Key`]: 128 random bits
//! made at the master's start and given only to its workers in their spec, never to an app
//! process. Workers are not dumpable (see `server::worker`), so an app of the same user can
//! read neither their memory nor their environment. A message without the key is dropped with
//! its descriptor; the uid check stays as a second fence against other users of the machine.

use crate::os::fdpass;
use crate::topology::nearest::Tiers;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixDatagram};

/// The first bytes of every hand-off message; the key follows, the address the connection
/// was accepted on, its hops, its client (`-` when its PROXY protocol header, if the address
/// expects one, is still to be read), the pool it is for when it goes to the master (`-`
/// otherwise: a pool's own socket needs no name), a newline, then the bytes read from the
/// connection and not yet answered.
const MAGIC: &[u8] = b"espalier-handoff/4 ";

/// The secret that proves a hand-off message comes from one of this master's processes (see
/// the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Key(pub [u8; 16]);

impl Key {
    /// A fresh key from the kernel's random numbers.
    pub fn random() -> std::io::Result<Key> {
        crate::os::private_dir::random_bytes::<16>().map(Key)
    }

    fn hex(&self) -> String {
        crate::os::private_dir::hex(&self.0)
    }

    /// Whether `text` is this key in hex, in time that does not depend on where they differ;
    /// decoded in place (no allocation per hand-off).
    fn matches(&self, text: &str) -> bool {
        let text = text.as_bytes();
        if text.len() != 32 {
            return false;
        }
        let nibble = |c: u8| (c as char).to_digit(16);
        let mut differ = 0u8;
        for (k, &want) in self.0.iter().enumerate() {
            match (nibble(text[2 * k]), nibble(text[2 * k + 1])) {
                (Some(hi), Some(lo)) => differ |= want ^ ((hi << 4 | lo) as u8),
                _ => return false,
            }
        }
        differ == 0
    }
}

/// The longest message: a request head at its largest, with what arrived behind it in the
/// same reads. A connection with more unparsed bytes than this is answered 503 rather than
/// handed over (`max_header_size` is far below it).
pub const MAX_MESSAGE: usize = 192 << 10;

/// How long a sender waits for room in a receiver's queue once every target was full.
const FULL_WAIT: Duration = Duration::from_secs(2);

/// How many times in a row a connection may be handed on without a request being answered.
/// Workers of one configuration never pass a request back, but during an overlapped reload
/// an old worker and a new one may disagree about a host and each hand it to the other: the
/// bound turns that loop into a 503.
pub const MAX_HOPS: u8 = 4;

/// The header of a message for a connection accepted on `addr`, handed on `hops` times in a
/// row, for `client` (`None`: not yet known, see [`MAGIC`]), signed with `key`; `pool` names
/// the pool it is for on a message to the master's socket (see [`Peers::wake`]).
pub fn header(
    key: &Key,
    addr: SocketAddr,
    hops: u8,
    client: Option<SocketAddr>,
    pool: Option<&str>,
) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(key.hex().as_bytes());
    let client = client.map_or_else(|| "-".to_string(), |c| c.to_string());
    h.extend_from_slice(format!(" {addr} {hops} {client} {}\n", pool.unwrap_or("-")).as_bytes());
    h
}

/// A hand-off message's parts.
#[derive(Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub addr: SocketAddr,
    pub hops: u8,
    pub client: Option<SocketAddr>,
    pub pool: Option<&'a str>,
    pub unread: &'a [u8],
}

/// Splits a message into its parts (see [`MAGIC`]); `None` for anything malformed or not
/// signed with `key`.
pub fn parse<'m>(key: &Key, message: &'m [u8]) -> Option<Message<'m>> {
    let rest = message.strip_prefix(MAGIC)?;
    let end = memchr::memchr(b'\n', &rest[..rest.len().min(192)])?;
    let mut fields = std::str::from_utf8(&rest[..end]).ok()?.split(' ');
    if !key.matches(fields.next()?) {
        return None;
    }
    let addr = fields.next()?.parse().ok()?;
    let hops = fields.next()?.parse().ok()?;
    let client = match fields.next()? {
        "-" => None,
        c => Some(c.parse().ok()?),
    };
    let pool = match fields.next()? {
        "-" => None,
        p => Some(p),
    };
    fields.next().is_none().then_some(Message {
        addr,
        hops,
        client,
        pool,
        unread: &rest[end + 1..],
    })
}

/// What a connection brings to the loop that serves it: the bytes already read from it, how
/// many times in a row it was handed on, and its client.
#[derive(Debug, Default)]
pub struct Carried {
    pub unread: Vec<u8>,
    pub hops: u8,
    /// The client: the peer that connected (as `accept` returned it), or the one a PROXY
    /// protocol header named. `None` = ask the socket.
    pub client: Option<SocketAddr>,
    /// Whether the PROXY protocol header, on an address that expects one, was read already
    /// (by the pool that handed the connection on): `client` is then final.
    pub header_read: bool,
    /// The subject of the client certificate its TLS handshake verified, if any (set after
    /// the handshake; a connection is handed on before it).
    pub client_cert: Option<String>,
}

/// Every hand-off socket of the configuration, as the master tells the workers once (one
/// table shared by every worker's spec, not a list of targets per thread: with thousands of
/// pools on one port, per-thread lists made the master's start quadratic in pools).
///
/// Compact, because the dispatcher's table lists every pool of a hoster's port (20,000
/// slots for 10,000 pools of one worker on two CPUs), and the master writes it and the
/// dispatcher reads it at every change of that port's hosts: a socket's path is not
/// written out but made from its slot ([`slot_path`]), 2.1 MB of JSON fewer at 10,000
/// pools. A thread ranks a pool's slots only when it first hands it a connection
/// ([`PoolTargets`]): most of those pools it never meets.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Peers {
    /// The folder every socket is in (the master's runtime folder).
    pub dir: PathBuf,
    /// Each pool's thread slots, pool by pool.
    pub pools: Vec<PoolSlots>,
    /// The kernel's node distances, `(from, to, distance)`.
    pub distances: Vec<(u32, u32, u32)>,
    /// The master's socket, for a pool none of whose sockets exists: an on-demand pool asleep
    /// has none (an idle pool costs no descriptor and no file), and the master, told which
    /// pool a connection is for, makes them and wakes it (`server::supervisor::demand`).
    #[serde(default)]
    pub wake: Option<PathBuf>,
}

/// One pool's thread slots: its name, then each slot's `(worker index, CPU, node)` (a
/// tuple: written as a JSON array, without field names).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PoolSlots(pub String, pub Vec<(u32, u32, Option<u32>)>);

/// Where thread slot `(pool, index, cpu)`'s socket is, in `dir`: named after the slot, so
/// that a worker's table names it before it exists (pool names are letters, digits, `-`,
/// `_`, and the dispatcher's dot). The master binds it there (`server::handoffs`).
pub fn slot_path(dir: &Path, pool: &str, index: u32, cpu: u32) -> PathBuf {
    dir.join(format!("handoff-{pool}-{index}-{cpu}"))
}

impl Peers {
    /// The table with `pool`'s sockets alone (and the master's, and the distances): what a
    /// pool behind the dispatcher is given, the dispatcher being its one target.
    pub fn of_pool(&self, pool: &str) -> Peers {
        Peers {
            dir: self.dir.clone(),
            pools: self.pools.iter().filter(|p| p.0 == pool).cloned().collect(),
            distances: self.distances.clone(),
            wake: self.wake.clone(),
        }
    }

    /// Where a thread of `pool` on `cpu` (of node `node`) hands each other pool's
    /// connections, in the table's order: one target per pool, which ranks that pool's
    /// threads (same CPU first, then its node's, then by distance) at its first hand-off.
    pub fn targets(
        table: &std::sync::Arc<Peers>,
        pool: &str,
        (cpu, node): (u32, Option<u32>),
        key: Key,
    ) -> Vec<Rc<PoolTargets>> {
        (0..table.pools.len())
            .filter(|&k| table.pools[k].0 != pool)
            .map(|k| {
                Rc::new(PoolTargets {
                    table: std::sync::Arc::clone(table),
                    index: k,
                    from: (cpu, node),
                    key,
                    tiers: std::cell::OnceCell::new(),
                    next: Cell::new(0),
                    connected: RefCell::new(Vec::new()),
                })
            })
            .collect()
    }

    /// Pool `k`'s threads ranked for a thread on `cpu` of `node`.
    fn ranked(&self, k: usize, (cpu, node): (u32, Option<u32>)) -> Tiers<PathBuf> {
        let PoolSlots(pool, slots) = &self.pools[k];
        let threads: Vec<(Option<u32>, (u32, PathBuf))> = slots
            .iter()
            .map(|&(index, c, n)| (n, (c, slot_path(&self.dir, pool, index, c))))
            .collect();
        let far = |a: u32, b: u32| {
            (self.distances.iter())
                .find(|&&(x, y, _)| (x, y) == (a, b))
                .map_or(if a == b { 10 } else { 20 }, |&(_, _, d)| d)
        };
        let tiers = crate::topology::nearest::tiers_for(node, &threads, far);
        crate::topology::nearest::same_cpu_first(tiers, cpu)
    }
}

/// One thread's way to the threads of one other pool: their hand-off sockets, nearest first
/// (ranked at first use), and its connections to them (made on first use, kept while they
/// work); the master's socket when none of them is there (the pool is asleep).
pub struct PoolTargets {
    table: std::sync::Arc<Peers>,
    /// The pool's place in the table.
    index: usize,
    /// The CPU and node of the thread that sends.
    from: (u32, Option<u32>),
    key: Key,
    tiers: std::cell::OnceCell<Tiers<PathBuf>>,
    /// Turns within a tier, so one thread's connections spread over the tier's threads.
    next: Cell<usize>,
    connected: RefCell<Vec<(PathBuf, Rc<UnixDatagram>)>>,
}

impl PoolTargets {
    /// The pool's name.
    pub fn pool(&self) -> &str {
        &self.table.pools[self.index].0
    }

    /// The master's socket (see [`Peers::wake`]).
    fn wake(&self) -> Option<&Path> {
        self.table.wake.as_deref()
    }

    /// The sockets to try, in order: the nearest tier first, starting at this thread's turn.
    fn order(&self) -> Vec<&Path> {
        let turn = self.next.get();
        self.next.set(turn.wrapping_add(1));
        let tiers = (self.tiers).get_or_init(|| self.table.ranked(self.index, self.from));
        tiers
            .tiers
            .iter()
            .flat_map(|tier| {
                let n = tier.len().max(1);
                (0..tier.len()).map(move |k| tier[(turn + k) % n].as_path())
            })
            .collect()
    }

    fn connection(&self, path: &Path) -> Option<Rc<UnixDatagram>> {
        if let Some((_, c)) = self.connected.borrow().iter().find(|(p, _)| p == path) {
            return Some(Rc::clone(c));
        }
        let socket = UnixDatagram::unbound().ok()?;
        // Room for the largest message whatever the host's default (`net.core.wmem_default`).
        let _ = socket2::SockRef::from(&socket).set_send_buffer_size(MAX_MESSAGE + 4096);
        socket.connect(path).ok()?;
        let socket = Rc::new(socket);
        self.connected
            .borrow_mut()
            .push((path.to_path_buf(), Rc::clone(&socket)));
        Some(socket)
    }

    fn forget(&self, path: &Path) {
        self.connected.borrow_mut().retain(|(p, _)| p != path);
    }
}

/// A request's connection to be handed to another pool.
pub struct Handoff {
    pub targets: Rc<PoolTargets>,
    /// The address the connection was accepted on (the receiver routes by it again).
    pub addr: SocketAddr,
    /// Hand-offs in a row so far, this one included (set by the connection loop).
    pub hops: u8,
    /// The connection's client (set by the connection loop).
    pub client: Option<SocketAddr>,
}

impl Handoff {
    /// Passes `stream` with `unread` (the bytes read and not answered, from the request that
    /// goes elsewhere on) to the nearest thread of the target pool that takes it. Returns
    /// whether one did; the caller then closes its own descriptor without a shutdown.
    pub async fn send(&self, stream: &TcpStream, unread: &[u8]) -> bool {
        let t = &self.targets;
        let header = header(&t.key, self.addr, self.hops, self.client, None);
        // The longer of the two headers (to the master, the pool's name is added) must fit.
        if header.len() + t.pool().len() + unread.len() > MAX_MESSAGE {
            return false;
        }
        let parts = [header.as_slice(), unread];
        let send = |conn: &UnixDatagram| {
            fdpass::send_with_fd(conn.as_raw_fd(), stream.as_raw_fd(), &parts)
        };
        let mut full = Vec::new();
        for path in self.targets.order() {
            let Some(conn) = self.targets.connection(path) else {
                continue;
            };
            // Tried at once, whatever tokio last heard of the socket's readiness.
            match send(&conn) {
                Ok(_) => return true,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => full.push(conn),
                // The socket is gone (a reload removed that thread): forget it.
                Err(_) => self.targets.forget(path),
            }
        }
        // None of its sockets is there: the pool sleeps, and the master wakes it.
        let to_master;
        let mut parts = parts;
        if full.is_empty() {
            let Some(wake) = t.wake() else {
                return false;
            };
            let Some(conn) = t.connection(wake) else {
                return false;
            };
            to_master = self::header(&t.key, self.addr, self.hops, self.client, Some(t.pool()));
            parts = [to_master.as_slice(), unread];
            match fdpass::send_with_fd(conn.as_raw_fd(), stream.as_raw_fd(), &parts) {
                Ok(_) => return true,
                // A burst for a sleeping pool: the master's queue (`max_dgram_qlen`, 10 by
                // default) is full for the moment.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => full.push(conn),
                Err(_) => {
                    t.forget(wake);
                    return false;
                }
            }
        }
        // Every target's queue was full: wait for room in the nearest, bounded.
        match full.first() {
            Some(conn) => send_when_room(conn, stream.as_raw_fd(), &parts, FULL_WAIT)
                .await
                .is_ok(),
            None => false,
        }
    }
}

/// Sends `parts` with descriptor `fd` on `conn`, waiting at most `within` for room in the
/// receiver's queue (a unix datagram queue holds `net.unix.max_dgram_qlen` messages, 10 by
/// default). Through tokio, so a full queue clears the readiness it waits on.
async fn send_when_room(
    conn: &UnixDatagram,
    fd: std::os::fd::RawFd,
    parts: &[&[u8]],
    within: Duration,
) -> std::io::Result<()> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match conn.try_io(Interest::WRITABLE, || {
            fdpass::send_with_fd(conn.as_raw_fd(), fd, parts)
        }) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                tokio::time::timeout_at(deadline, conn.writable())
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A connection handed to this thread: the stream (non-blocking, in no event loop yet), the
/// address it was accepted on, and the bytes already read from it.
pub struct Received {
    pub stream: std::net::TcpStream,
    pub addr: SocketAddr,
    pub carried: Carried,
    /// On the master's socket: the pool the connection is for.
    pub pool: Option<String>,
}

/// Takes connections in on a hand-off socket. Waits for the next message; a malformed one
/// (no descriptor, not a TCP socket, a bad header) is dropped and the next awaited. `Err`
/// only when the socket itself fails.
pub struct Receiver {
    socket: UnixDatagram,
    buf: Vec<u8>,
    /// The users whose connections are taken (this server's: its master's and its pools');
    /// empty = anyone that can open the socket.
    senders: Vec<u32>,
    key: Key,
}

impl Receiver {
    /// On an inherited (or the master's) bound datagram socket, taking connections from the
    /// users `senders` only (the kernel names each sender: the master turned `SO_PASSCRED`
    /// on, see `server::handoffs`); needs a tokio runtime.
    pub fn new(fd: OwnedFd, senders: Vec<u32>, key: Key) -> std::io::Result<Self> {
        let std_socket = std::os::unix::net::UnixDatagram::from(fd);
        std_socket.set_nonblocking(true)?;
        Ok(Receiver {
            socket: UnixDatagram::from_std(std_socket)?,
            buf: vec![0u8; MAX_MESSAGE],
            senders,
            key,
        })
    }

    pub async fn next(&mut self) -> std::io::Result<Received> {
        loop {
            self.socket.readable().await?;
            let fd = self.socket.as_raw_fd();
            let buf = &mut self.buf;
            let got = match self
                .socket
                .try_io(Interest::READABLE, || fdpass::recv_with_fd(fd, buf))
            {
                Ok(got) => got,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::InvalidData
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            if let Some(received) = taken(got, &self.buf, &self.senders, &self.key) {
                return Ok(received);
            }
        }
    }
}

/// A datagram as a connection to serve, if it is one: from a known sender (`senders`; empty
/// = anyone), with a descriptor, signed with `key`. Anything else is dropped, its descriptor
/// closed.
fn taken(got: fdpass::Datagram, buf: &[u8], senders: &[u32], key: &Key) -> Option<Received> {
    // A datagram from another user of the machine is dropped, its descriptor closed: the
    // sockets must be writable by every pool's user, so the kernel's word on the sender is
    // what keeps others out.
    let known = |uid: Option<u32>| uid.is_some_and(|u| senders.contains(&u));
    if !senders.is_empty() && !known(got.sender_uid) {
        return None;
    }
    let passed = got.fd?;
    // Unsigned (app code of a pool's user): dropped, its descriptor closed.
    let message = parse(key, &buf[..got.len])?;
    let stream = std::net::TcpStream::from(passed);
    stream.set_nonblocking(true).ok()?;
    Some(Received {
        stream,
        addr: message.addr,
        carried: Carried {
            unread: message.unread.to_vec(),
            hops: message.hops,
            header_read: message.client.is_some(),
            client: message.client,
            client_cert: None,
        },
        pool: message.pool.map(str::to_string),
    })
}

/// Every connection queued now on the non-blocking datagram socket `socket`, taken as
/// [`Receiver::next`] takes them: what the master finds on a sleeping pool's socket as it
/// closes it.
pub fn drain(socket: std::os::fd::RawFd, senders: &[u32], key: &Key) -> Vec<Received> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut queued = Vec::new();
    loop {
        match fdpass::recv_with_fd(socket, &mut buf) {
            Ok(got) => queued.extend(taken(got, &buf, senders, key)),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
            Err(_) => return queued,
        }
    }
}

/// Passes `received` on to the datagram socket bound at `path`, as it came (its pool's name
/// left out): how the master gives a woken pool what was handed to the master for it. Waits
/// for room in the socket's queue (a burst for a pool still starting fills it) at most
/// `within`; `Err` when there was none, and the connection is closed with `received`.
pub async fn forward(
    received: Received,
    path: PathBuf,
    key: Key,
    within: Duration,
) -> std::io::Result<()> {
    let c = &received.carried;
    let client = c.client.filter(|_| c.header_read);
    let head = header(&key, received.addr, c.hops, client, None);
    let socket = UnixDatagram::unbound()?;
    let _ = socket2::SockRef::from(&socket).set_send_buffer_size(MAX_MESSAGE + 4096);
    socket.connect(&path)?;
    let parts = [head.as_slice(), c.unread.as_slice()];
    send_when_room(&socket, received.stream.as_raw_fd(), &parts, within).await
}

#[cfg(test)]
mod tests;
