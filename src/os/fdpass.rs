//! Passing a descriptor with a few bytes over a unix datagram socket (`SCM_RIGHTS`): how a
//! worker hands an accepted connection to a worker of another pool.
//!
//! Owns: the `sendmsg`/`recvmsg` calls and their control messages. Must not touch: what the
//! bytes mean (see [`crate::handoff`]).

use std::io;
use std::mem::size_of;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Room for one descriptor's control message and the sender's credentials
/// (CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred)), rounded up).
const CMSG_ROOM: usize = 128;

/// Has the kernel attach the sender's credentials to every datagram `socket` receives
/// (`SO_PASSCRED`), whether the sender sends them or not: [`Datagram::sender_uid`].
pub fn pass_credentials(socket: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a local that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            &on as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One datagram received: its length, the descriptor it carried, and (on a socket with
/// [`pass_credentials`]) the user it came from.
#[derive(Debug)]
pub struct Datagram {
    pub len: usize,
    pub fd: Option<OwnedFd>,
    pub sender_uid: Option<u32>,
}

/// Sends `parts` as one datagram with `fd` attached, without waiting: a full queue at the
/// receiver is `WouldBlock`. The descriptor stays open here too (the kernel gives the receiver
/// its own); the caller closes it.
pub fn send_with_fd(socket: RawFd, fd: RawFd, parts: &[&[u8]]) -> io::Result<usize> {
    let mut iov: Vec<libc::iovec> = parts
        .iter()
        .map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    let mut control = [0u8; CMSG_ROOM];
    // SAFETY: msghdr is plain data; every pointer in it points into locals that outlive the
    // call, and the control buffer is large enough for one descriptor (checked below).
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
        debug_assert!(space <= CMSG_ROOM);
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        let n = libc::sendmsg(socket, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Receives one datagram into `buf` without waiting, with the descriptor it carried
/// (close-on-exec). A datagram longer than `buf` is an error (`InvalidData`), and its
/// descriptor is closed, never leaked.
pub fn recv_with_fd(socket: RawFd, buf: &mut [u8]) -> io::Result<Datagram> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u8; CMSG_ROOM];
    // SAFETY: as in `send_with_fd`; every descriptor the kernel installed is taken into an
    // OwnedFd exactly once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = CMSG_ROOM;
        let n = libc::recvmsg(
            socket,
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fds = Vec::new();
        let mut sender_uid = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let data_len = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                for k in 0..data_len / size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k))));
                }
            } else if (*cmsg).cmsg_level == libc::SOL_SOCKET
                && (*cmsg).cmsg_type == libc::SCM_CREDENTIALS
                && data_len >= size_of::<libc::ucred>()
            {
                let cred: libc::ucred =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::ucred);
                sender_uid = Some(cred.uid);
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a handed-off connection's message was cut short",
            ));
        }
        // One descriptor per message; any extra is closed by the drop.
        let fd = if fds.is_empty() {
            None
        } else {
            Some(fds.swap_remove(0))
        };
        Ok(Datagram {
            len: n as usize,
            fd,
            sender_uid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    #[test]
    fn a_descriptor_and_its_bytes_arrive_together() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let (mut mine, theirs) = UnixStream::pair().unwrap();
        let n = send_with_fd(a.as_raw_fd(), theirs.as_raw_fd(), &[b"head ", b"body"]).unwrap();
        assert_eq!(n, 9);
        drop(theirs);
        let mut buf = [0u8; 64];
        let got = recv_with_fd(b.as_raw_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..got.len], b"head body");
        assert_eq!(got.sender_uid, None, "credentials only when asked for");
        let mut passed = UnixStream::from(got.fd.expect("a descriptor"));
        passed.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        mine.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        assert_eq!(
            recv_with_fd(b.as_raw_fd(), &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
    }

    #[test]
    fn the_sender_is_known_when_credentials_are_asked_for() {
        let (a, b) = UnixDatagram::pair().unwrap();
        pass_credentials(b.as_raw_fd()).unwrap();
        let (_mine, theirs) = UnixStream::pair().unwrap();
        send_with_fd(a.as_raw_fd(), theirs.as_raw_fd(), &[b"x"]).unwrap();
        let mut buf = [0u8; 8];
        let got = recv_with_fd(b.as_raw_fd(), &mut buf).unwrap();
        assert!(got.fd.is_some());
        assert_eq!(got.sender_uid, Some(crate::os::identity::effective_uid()));
    }

    #[test]
    fn a_message_too_long_is_refused_and_its_descriptor_closed() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let (mut mine, theirs) = UnixStream::pair().unwrap();
        send_with_fd(a.as_raw_fd(), theirs.as_raw_fd(), &[&[7u8; 100]]).unwrap();
        drop(theirs);
        let mut small = [0u8; 10];
        let err = recv_with_fd(b.as_raw_fd(), &mut small).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // Both ends of the passed socket are closed: our end reads end-of-file.
        let mut got = Vec::new();
        mine.read_to_end(&mut got).unwrap();
        assert!(got.is_empty());
    }
}
