//! The UDP sockets of an https address that answers HTTP/3 (`[server] http3`): the master's
//! for its whole life, like the TCP ones, with each socket's thread and the process reading
//! it.
//!
//! Owns: which socket a starting worker's thread reads — one no live process reads, so a
//! recycle's successor (or a successor's successor, while two older workers still drain)
//! never takes datagrams of another process's connections — and which one new connections
//! go to. Must not touch: the program's encoding ([`super::quic_steering`]) or the workers.
//!
//! Each thread starts with two sockets, so the common recycle finds a free one ready; one
//! more is opened when both are still read (a third overlapping generation) — never closed,
//! as the group's indices must not move under the connections that name them.

use crate::os;
use socket2::Socket;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// A group's UDP sockets. Empty where HTTP/3 does not answer.
#[derive(Default)]
pub(super) struct QuicSockets {
    sockets: Vec<Socket>,
    /// Per socket: its thread (the owner's place in the group), and the pid reading it.
    thread: Vec<usize>,
    reader: Vec<Option<u32>>,
    /// Per thread: the socket new connections go to.
    current: Vec<u32>,
}

/// Sockets each thread starts with.
const PER_THREAD: usize = 2;

impl QuicSockets {
    pub(super) fn len(&self) -> usize {
        self.sockets.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// The socket the steering program is attached to (any of the group).
    pub(super) fn first(&self) -> Option<&Socket> {
        self.sockets.first()
    }

    /// Every socket's descriptor, in group order (what an upgrade passes on).
    pub(super) fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.sockets.iter().map(|s| s.as_raw_fd()).collect()
    }

    /// Per thread, the socket new connections go to.
    pub(super) fn current(&self) -> &[u32] {
        &self.current
    }

    /// Opens the sockets `threads` threads need beyond those that have theirs. The group is
    /// not changed ([`Self::add`] takes them), so a failure leaves it as it was.
    pub(super) fn open_missing(
        &self,
        addr: SocketAddr,
        threads: usize,
    ) -> std::io::Result<Vec<Socket>> {
        (self.current.len() * PER_THREAD..threads * PER_THREAD)
            .map(|_| os::net::reuseport_udp(addr).map(Socket::from))
            .collect()
    }

    /// Takes what [`Self::open_missing`] opened ([`PER_THREAD`] per new thread): the first
    /// of each thread's takes new connections until a worker reads one.
    pub(super) fn add(&mut self, opened: Vec<Socket>) {
        let mut opened = opened.into_iter().peekable();
        while opened.peek().is_some() {
            let thread = self.current.len();
            self.current.push(self.sockets.len() as u32);
            for socket in opened.by_ref().take(PER_THREAD) {
                self.sockets.push(socket);
                self.thread.push(thread);
                self.reader.push(None);
            }
        }
    }

    /// Marks the sockets of `read` (by index) as read by `pid` — an upgraded master's, whose
    /// workers still read them while they drain — so new workers take others.
    pub(super) fn read_by(&mut self, read: &[bool], pid: u32) {
        for (reader, &r) in self.reader.iter_mut().zip(read) {
            if r {
                *reader = Some(pid);
            }
        }
    }

    /// Per socket, whether a process reads it (what an upgrade tells the new master).
    pub(super) fn read_flags(&self) -> String {
        self.reader
            .iter()
            .map(|r| if r.is_some() { '1' } else { '0' })
            .collect()
    }

    /// HTTP/3 turned off: the master's copies close (a draining worker keeps its own).
    pub(super) fn clear(&mut self) {
        *self = QuicSockets::default();
    }

    /// The socket `thread`'s new reader takes: its current one when no process reads it —
    /// new connections went there meanwhile (a pool asleep, a worker that died), so what
    /// waits in it is read — else one no live process reads, opened on `addr` when there is
    /// none. `None` when the thread has no sockets or none can be opened.
    pub(super) fn choose(&mut self, thread: usize, addr: SocketAddr) -> Option<(i32, u16)> {
        if thread >= self.current.len() {
            return None;
        }
        let current = self.current[thread] as usize;
        let free = (self.reader.get(current) == Some(&None))
            .then_some(current)
            .or_else(|| {
                (0..self.sockets.len())
                    .find(|&s| self.thread[s] == thread && self.reader[s].is_none())
            });
        let s = match free {
            Some(s) => s,
            None => {
                let opened = os::net::reuseport_udp(addr).ok()?;
                self.sockets.push(Socket::from(opened));
                self.thread.push(thread);
                self.reader.push(None);
                self.sockets.len() - 1
            }
        };
        Some((self.sockets[s].as_raw_fd(), u16::try_from(s).ok()?))
    }

    /// The socket new connections of `thread` go to, when no process reads it or only
    /// `frozen` does (a suspended worker, which reads nothing until thawed): what the master
    /// watches while the thread's pool sleeps.
    pub(super) fn unread_current(&self, thread: usize, frozen: Option<u32>) -> Option<i32> {
        let s = *self.current.get(thread)? as usize;
        let reader = *self.reader.get(s)?;
        (reader.is_none() || reader == frozen).then(|| self.sockets[s].as_raw_fd())
    }

    /// A started worker's thread reads `socket`: new connections go there.
    pub(super) fn take(&mut self, socket: u16, pid: u32) {
        let s = usize::from(socket);
        if let Some(reader) = self.reader.get_mut(s) {
            *reader = Some(pid);
            self.current[self.thread[s]] = u32::from(socket);
        }
    }

    /// `pid` exited: its sockets are free for a later worker.
    pub(super) fn release(&mut self, pid: u32) {
        for reader in &mut self.reader {
            if *reader == Some(pid) {
                *reader = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        // Port 0: each socket its own port; the bookkeeping is what is tested here.
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn successors_read_sockets_no_live_process_reads() {
        let mut q = QuicSockets::default();
        let opened = q.open_missing(loopback(), 2).unwrap();
        assert_eq!(opened.len(), 4);
        q.add(opened);
        assert_eq!((q.len(), q.current()), (4, &[0u32, 2][..]));
        // First worker: thread 0 reads socket 0, thread 1 socket 2.
        let (_, a) = q.choose(0, loopback()).unwrap();
        q.take(a, 100);
        let (_, b) = q.choose(1, loopback()).unwrap();
        q.take(b, 100);
        assert_eq!((a, b), (0, 2));
        // Its successor, while it drains: the other socket of each.
        let (_, a) = q.choose(0, loopback()).unwrap();
        q.take(a, 101);
        assert_eq!(a, 1);
        assert_eq!(q.current(), &[1, 2]);
        // A third while both still read: a new socket, at the end of the group.
        let (_, a) = q.choose(0, loopback()).unwrap();
        q.take(a, 102);
        assert_eq!((a, q.len()), (4, 5));
        // The first exits: its socket is the next one taken, and nothing new is opened.
        q.release(100);
        assert_eq!(q.unread_current(0, None), None); // 102 reads the current one
        assert!(q.unread_current(0, Some(102)).is_some()); // …unless it is frozen
        let (_, a) = q.choose(0, loopback()).unwrap();
        assert_eq!((a, q.len()), (0, 5));
        q.take(a, 103);
        // All exit (the pool sleeps): the current socket, where new connections still go, is
        // the one watched, and the one the next worker reads.
        for pid in [101, 102, 103] {
            q.release(pid);
        }
        assert_eq!(q.current(), &[0, 2]);
        assert!(q.unread_current(0, None).is_some());
        assert_eq!(q.choose(0, loopback()).unwrap().1, 0);
        // A thread the group does not have.
        assert!(q.choose(7, loopback()).is_none());
    }

    #[test]
    fn after_an_upgrade_new_workers_leave_the_old_masters_sockets_to_it() {
        // The old master: thread 0's worker reads socket 0 (its other, socket 1, is free).
        let mut old = QuicSockets::default();
        old.add(old.open_missing(loopback(), 1).unwrap());
        let (_, a) = old.choose(0, loopback()).unwrap();
        old.take(a, 100);
        assert_eq!(old.read_flags(), "10");
        // The new master takes the same sockets in order, and which are read.
        let mut new = QuicSockets::default();
        new.add(old.sockets.iter().map(|s| s.try_clone().unwrap()).collect());
        new.read_by(&[true, false], 50);
        let (_, a) = new.choose(0, loopback()).unwrap();
        new.take(a, 200);
        assert_eq!((a, new.current()), (1, &[1u32][..]));
        // Once the old master is gone, its socket is free again.
        new.release(50);
        assert_eq!(new.read_flags(), "01");
    }

    #[test]
    fn a_grown_group_gives_only_its_new_threads_sockets() {
        let mut q = QuicSockets::default();
        q.add(q.open_missing(loopback(), 1).unwrap());
        let (_, a) = q.choose(0, loopback()).unwrap();
        q.take(a, 5);
        let more = q.open_missing(loopback(), 3).unwrap();
        assert_eq!(more.len(), 4);
        q.add(more);
        assert_eq!(q.current(), &[0, 2, 4]);
        assert!(q.open_missing(loopback(), 3).unwrap().is_empty());
    }
}
