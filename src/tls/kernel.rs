//! Which TLS connections may hand their record layer to the kernel (kTLS), and the bookkeeping
//! that makes the hand-over safe — pure decisions; the socket options are `os::ktls`'s.
//!
//! Owns: the rule of which (version, suite) the kernel can continue from where rustls stopped
//! ([`offload_of`]), the cursor that
//! tells whether rustls holds part of a record ([`RecordCursor`]), and the record budget of an
//! offloaded connection ([`RecordBudget`]). Must not touch: sockets, rustls's connection, or
//! when a connection is offloaded (`http::ktls`).
//!
//! Why TLS 1.2 with AES-GCM is never offloaded: its 8-byte explicit nonce has no fixed
//! construction. rustls sends the key block's value XOR the record's sequence number; Linux
//! sends the value it is given and adds one per record. Handed over mid-connection, the
//! kernel's nonces would run into ones rustls already used under the same key — and a
//! repeated AES-GCM nonce gives the key's authentication away. TLS 1.3 (every suite) and
//! ChaCha20-Poly1305 build the nonce as IV XOR sequence number on both sides, so the kernel
//! continues exactly.

use crate::os::ktls::{KernelCipher, Offload};
use rustls::{CipherSuite, ProtocolVersion};

/// The offload for what the handshake agreed, if the kernel can continue it exactly (see
/// the module's doc for why TLS 1.2 AES-GCM cannot).
pub fn offload_of(version: ProtocolVersion, suite: CipherSuite) -> Option<Offload> {
    let (tls13, cipher) = match (version, suite) {
        (ProtocolVersion::TLSv1_3, CipherSuite::TLS13_AES_128_GCM_SHA256) => {
            (true, KernelCipher::Aes128Gcm)
        }
        (ProtocolVersion::TLSv1_3, CipherSuite::TLS13_AES_256_GCM_SHA384) => {
            (true, KernelCipher::Aes256Gcm)
        }
        (ProtocolVersion::TLSv1_3, CipherSuite::TLS13_CHACHA20_POLY1305_SHA256) => {
            (true, KernelCipher::Chacha20Poly1305)
        }
        (
            ProtocolVersion::TLSv1_2,
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ) => (false, KernelCipher::Chacha20Poly1305),
        _ => return None,
    };
    Some(Offload { tls13, cipher })
}

/// Follows TLS record boundaries in the bytes a stream gives rustls, so that a connection is
/// handed to the kernel only when rustls holds no part of a record: what rustls has not
/// decrypted would be lost to the kernel, which reads on from the socket.
#[derive(Debug, Default, Clone)]
pub struct RecordCursor {
    header: [u8; 5],
    /// Header bytes of the next record seen so far.
    have: usize,
    /// Body bytes of the current record still to come.
    left: usize,
}

impl RecordCursor {
    pub fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left > 0 {
                let n = self.left.min(bytes.len());
                self.left -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (5 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 5 {
                self.left = u16::from_be_bytes([self.header[3], self.header[4]]) as usize;
                self.have = 0;
            }
        }
    }

    /// Whether every record begun has been read whole.
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && self.left == 0
    }
}

/// Records an offloaded connection may still send. rustls refreshes its keys before an
/// AEAD's confidentiality limit (RFC 8446 §5.5: 2^24.5 records for AES-GCM); an offloaded
/// connection's keys are the kernel's and are never refreshed here, so it stops keeping alive
/// at about a third of the limit (2^23) and refuses to send past 2^24. Counted from above: a write or `sendfile` of `n` bytes
/// makes at most `n / 16384 + 1` records.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordBudget {
    sent: u64,
}

impl RecordBudget {
    /// Past this, the connection answers its current request and closes.
    pub const KEEP_ALIVE: u64 = 1 << 23;
    /// Past this, nothing more is sent (2^24 < 2^24.5).
    pub const LIMIT: u64 = 1 << 24;

    pub fn spend(&mut self, bytes: usize) {
        self.sent += (bytes / 16384) as u64 + 1;
    }

    pub fn may_keep_alive(&self) -> bool {
        self.sent < Self::KEEP_ALIVE
    }

    pub fn may_send(&self) -> bool {
        self.sent < Self::LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls13_suites_and_tls12_chacha_are_offloadable_but_tls12_aes_gcm_is_not() {
        use CipherSuite::*;
        use ProtocolVersion::*;
        let o = offload_of;
        assert_eq!(
            o(TLSv1_3, TLS13_AES_128_GCM_SHA256).map(|o| (o.tls13, o.cipher)),
            Some((true, KernelCipher::Aes128Gcm))
        );
        assert_eq!(
            o(TLSv1_3, TLS13_AES_256_GCM_SHA384).map(|o| o.cipher),
            Some(KernelCipher::Aes256Gcm)
        );
        assert_eq!(
            o(TLSv1_3, TLS13_CHACHA20_POLY1305_SHA256).map(|o| o.cipher),
            Some(KernelCipher::Chacha20Poly1305)
        );
        assert_eq!(
            o(TLSv1_2, TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256).map(|o| o.tls13),
            Some(false)
        );
        assert_eq!(o(TLSv1_2, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256), None);
        assert_eq!(o(TLSv1_2, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384), None);
    }

    /// Two records (lengths 3 and 300) fed in every split: at a boundary exactly after each
    /// whole record.
    #[test]
    fn the_cursor_finds_record_boundaries_however_the_bytes_arrive() {
        let mut stream = vec![23, 3, 3, 0, 3, 1, 2, 3];
        stream.extend_from_slice(&[23, 3, 3, 1, 44]);
        stream.extend(std::iter::repeat_n(7u8, 300));
        let ends = [8, stream.len()];
        for split in 0..=stream.len() {
            let mut c = RecordCursor::default();
            c.advance(&stream[..split]);
            assert_eq!(
                c.at_boundary(),
                split == 0 || ends.contains(&split),
                "{split}"
            );
            c.advance(&stream[split..]);
            assert!(c.at_boundary());
        }
        // Byte by byte.
        let mut c = RecordCursor::default();
        for (i, b) in stream.iter().enumerate() {
            c.advance(std::slice::from_ref(b));
            assert_eq!(c.at_boundary(), ends.contains(&(i + 1)), "{i}");
        }
    }

    #[test]
    fn the_budget_stops_keep_alive_before_it_stops_sending() {
        let mut b = RecordBudget::default();
        b.spend(16384 * 10);
        assert_eq!(b.sent, 11);
        let mut b = RecordBudget {
            sent: RecordBudget::KEEP_ALIVE - 1,
        };
        assert!(b.may_keep_alive());
        b.spend(0);
        assert!(!b.may_keep_alive() && b.may_send());
        b.spend(16384 * (RecordBudget::LIMIT - RecordBudget::KEEP_ALIVE) as usize);
        assert!(!b.may_send());
    }
}
