//! Kernel TLS (kTLS) socket options: attaching the `tls` upper-layer protocol to a TCP
//! socket, giving it a direction's key, IV and sequence number, probing which suites this
//! kernel takes, and sending `close_notify` as a kTLS alert record.
//!
//! Owns: those syscalls and the kernel's `tls12_crypto_info_*` layouts (libc's), filled from
//! rustls's extracted secrets. Must not touch: which connections are offloaded or when
//! (`tls::kernel` decides, `http::ktls` does it). Also here, as the probe's answer: the
//! (version, cipher) pairs the kernel can take over ([`Offload`], [`KernelSupport`]) — plain data,
//! so that the engine and the service can carry them without naming the TLS layer.

use rustls::ConnectionTrafficSecrets;
use std::io;
use std::os::fd::RawFd;

/// A direction of the record layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Transmit,
    Receive,
}

/// An AEAD the kernel implements for TLS records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelCipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// A connection's agreed protocol, when the kernel can take over its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offload {
    pub tls13: bool,
    pub cipher: KernelCipher,
}

impl Offload {
    /// Every offloadable pair, in [`KernelSupport`]'s bit order.
    pub const ALL: [Offload; 4] = [
        Offload {
            tls13: true,
            cipher: KernelCipher::Aes128Gcm,
        },
        Offload {
            tls13: true,
            cipher: KernelCipher::Aes256Gcm,
        },
        Offload {
            tls13: true,
            cipher: KernelCipher::Chacha20Poly1305,
        },
        Offload {
            tls13: false,
            cipher: KernelCipher::Chacha20Poly1305,
        },
    ];

    /// Its bit in [`KernelSupport`]; none for a pair not in [`Offload::ALL`] (the fields are
    /// public, so one can be built), which is then never supported.
    fn bit(self) -> u8 {
        Offload::ALL
            .iter()
            .position(|o| *o == self)
            .map_or(0, |i| 1 << i)
    }
}

/// The offloads a kernel accepted when probed (empty: no kTLS, or turned off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelSupport(u8);

impl KernelSupport {
    pub const NONE: KernelSupport = KernelSupport(0);

    pub fn with(self, o: Offload) -> KernelSupport {
        KernelSupport(self.0 | o.bit())
    }

    pub fn has(self, o: Offload) -> bool {
        self.0 & o.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// For the log: `TLS1.3/AES-128-GCM, …`, or `none`.
    pub fn describe(self) -> String {
        let names: Vec<String> = Offload::ALL
            .iter()
            .filter(|o| self.has(**o))
            .map(|o| {
                let v = if o.tls13 { "TLS1.3" } else { "TLS1.2" };
                let c = match o.cipher {
                    KernelCipher::Aes128Gcm => "AES-128-GCM",
                    KernelCipher::Aes256Gcm => "AES-256-GCM",
                    KernelCipher::Chacha20Poly1305 => "CHACHA20-POLY1305",
                };
                format!("{v}/{c}")
            })
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// Attaches the kernel's `tls` protocol to a connected TCP socket. Until a key is installed
/// the socket carries bytes as before, so a failure later can still fall back. `ENOENT`: the
/// kernel has no `tls` module.
pub fn attach(fd: RawFd) -> io::Result<()> {
    let name = b"tls";
    // SAFETY: `name` outlives the call, and its length is passed with it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Installs one direction's secrets as rustls extracted them: from then on the kernel
/// encrypts what is written (or decrypts what is read) as TLS records, from sequence number
/// `seq`.
pub fn install_secrets(
    fd: RawFd,
    dir: Direction,
    offload: Offload,
    secrets: &ConnectionTrafficSecrets,
    seq: u64,
) -> io::Result<()> {
    let (key, iv) = match (offload.cipher, secrets) {
        (KernelCipher::Aes128Gcm, ConnectionTrafficSecrets::Aes128Gcm { key, iv })
        | (KernelCipher::Aes256Gcm, ConnectionTrafficSecrets::Aes256Gcm { key, iv })
        | (
            KernelCipher::Chacha20Poly1305,
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv },
        ) => (key.as_ref(), iv.as_ref()),
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the secrets are not of the agreed cipher",
            ))
        }
    };
    install(fd, dir, offload, key, iv, seq)
}

/// Installs one direction's `key` and 12-byte `iv`, from sequence number `seq`.
fn install(
    fd: RawFd,
    dir: Direction,
    offload: Offload,
    key: &[u8],
    iv: &[u8],
    seq: u64,
) -> io::Result<()> {
    let version = if offload.tls13 {
        libc::TLS_1_3_VERSION
    } else {
        libc::TLS_1_2_VERSION
    };
    let rec_seq = seq.to_be_bytes();
    if iv.len() != 12 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an IV of an unexpected length",
        ));
    }
    // For AES-GCM the kernel takes the 12-byte IV as a 4-byte salt and 8 bytes it XORs with
    // the sequence number (TLS 1.3); ChaCha20's IV is taken whole.
    macro_rules! aes_gcm {
        ($info:ident, $cipher:ident, $key_len:literal) => {{
            let mut info = libc::$info {
                info: libc::tls_crypto_info {
                    version,
                    cipher_type: libc::$cipher,
                },
                iv: [0; 8],
                key: [0; $key_len],
                salt: [0; 4],
                rec_seq,
            };
            fill(&mut info.key, key)?;
            info.salt.copy_from_slice(&iv[..4]);
            info.iv.copy_from_slice(&iv[4..]);
            set(fd, dir, &mut info)
        }};
    }
    match offload.cipher {
        KernelCipher::Aes128Gcm => {
            aes_gcm!(tls12_crypto_info_aes_gcm_128, TLS_CIPHER_AES_GCM_128, 16)
        }
        KernelCipher::Aes256Gcm => {
            aes_gcm!(tls12_crypto_info_aes_gcm_256, TLS_CIPHER_AES_GCM_256, 32)
        }
        KernelCipher::Chacha20Poly1305 => {
            let mut info = libc::tls12_crypto_info_chacha20_poly1305 {
                info: libc::tls_crypto_info {
                    version,
                    cipher_type: libc::TLS_CIPHER_CHACHA20_POLY1305,
                },
                iv: [0; 12],
                key: [0; 32],
                salt: [],
                rec_seq,
            };
            fill(&mut info.key, key)?;
            info.iv.copy_from_slice(iv);
            set(fd, dir, &mut info)
        }
    }
}

fn fill(to: &mut [u8], from: &[u8]) -> io::Result<()> {
    if to.len() != from.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a key or IV of an unexpected length",
        ));
    }
    to.copy_from_slice(from);
    Ok(())
}

/// `setsockopt(SOL_TLS, TLS_TX|TLS_RX, info)`, then the key material is wiped from the stack.
fn set<T>(fd: RawFd, dir: Direction, info: &mut T) -> io::Result<()> {
    let opt = match dir {
        Direction::Transmit => libc::TLS_TX,
        Direction::Receive => libc::TLS_RX,
    };
    let p: *mut T = info;
    // SAFETY: `info` is one of the kernel's `tls12_crypto_info_*` structures (libc's
    // definitions), valid for its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_TLS,
            opt,
            p.cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    let result = if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: `p` points to `size_of::<T>()` writable bytes; volatile so the wipe stays.
    unsafe {
        let bytes = p.cast::<u8>();
        for i in 0..std::mem::size_of::<T>() {
            std::ptr::write_volatile(bytes.add(i), 0);
        }
    }
    result
}

/// Sends TLS's `close_notify` alert on an offloaded socket: a record of type alert (21),
/// which a plain `write` cannot make. Best effort: a full socket buffer skips it.
pub fn send_close_notify(fd: RawFd) -> io::Result<()> {
    const ALERT: u8 = 21;
    let body = [1u8, 0]; // warning, close_notify
    let mut iov = libc::iovec {
        iov_base: body.as_ptr() as *mut libc::c_void,
        iov_len: body.len(),
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(1) } as usize;
    let mut control = [0u64; 4]; // 32 bytes, aligned: room for one cmsg of one byte
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header of CMSG_SPACE(1) bytes.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(cmsg) = ALERT;
    }
    // SAFETY: `msg` is fully initialised above.
    let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Which offloads this kernel accepts, tried on loopback connections with a zero key (one
/// connection per offload: a socket takes one key per direction). `NONE` when the kernel has
/// no `tls` module, or loopback cannot be used.
pub fn probe() -> KernelSupport {
    use std::net::{Ipv4Addr, TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)) else {
        return KernelSupport::NONE;
    };
    let Ok(addr) = listener.local_addr() else {
        return KernelSupport::NONE;
    };
    let mut support = KernelSupport::NONE;
    for offload in Offload::ALL {
        let Ok(client) = TcpStream::connect(addr) else {
            return support;
        };
        let Ok((_server, _)) = listener.accept() else {
            return support;
        };
        let fd = client.as_raw_fd();
        if attach(fd).is_err() {
            // No `tls` module: nothing else can work.
            return support;
        }
        let key = [0u8; 32];
        let key = match offload.cipher {
            KernelCipher::Aes128Gcm => &key[..16],
            KernelCipher::Aes256Gcm | KernelCipher::Chacha20Poly1305 => &key[..],
        };
        let iv = [0u8; 12];
        if install(fd, Direction::Transmit, offload, key, &iv, 0).is_ok()
            && install(fd, Direction::Receive, offload, key, &iv, 0).is_ok()
        {
            support = support.with(offload);
        }
    }
    support
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_is_a_set_of_offloads() {
        let [a, b, c, d] = Offload::ALL;
        let s = KernelSupport::NONE.with(a).with(d);
        assert!(s.has(a) && s.has(d) && !s.has(b) && !s.has(c));
        assert!(KernelSupport::NONE.is_empty() && !s.is_empty());
        // A pair the kernel can never continue (TLS 1.2 AES-GCM) is never supported, even by
        // a kernel that takes every offloadable pair.
        let all = Offload::ALL
            .iter()
            .fold(KernelSupport::NONE, |s, o| s.with(*o));
        let tls12_gcm = Offload {
            tls13: false,
            cipher: KernelCipher::Aes128Gcm,
        };
        assert!(!all.has(tls12_gcm));
        assert_eq!(KernelSupport::NONE.with(tls12_gcm), KernelSupport::NONE);
        assert_eq!(s.describe(), "TLS1.3/AES-128-GCM, TLS1.2/CHACHA20-POLY1305");
        assert_eq!(KernelSupport::NONE.describe(), "none");
    }

    /// On a kernel without `tls` (this project's CI host) the probe says so rather than
    /// failing; on one with it, TLS 1.3 AES-128-GCM (in every kTLS kernel) is found.
    #[test]
    fn the_probe_agrees_with_whether_the_kernel_has_tls() {
        // Probed first: it loads the module where the kernel has one.
        let support = probe();
        let has_tls = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
            .is_ok_and(|s| s.split_whitespace().any(|u| u == "tls"));
        if has_tls {
            assert!(support.has(Offload::ALL[0]), "{}", support.describe());
        } else {
            assert!(support.is_empty(), "{}", support.describe());
        }
    }
}
