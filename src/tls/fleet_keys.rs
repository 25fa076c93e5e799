//! The fleet's session ticket secrets as its etcd holds them (`[server.cluster]` with
//! `secret_file`): the newest secrets of the master's [`KeyRing`](super::tickets::KeyRing),
//! sealed with the fleet's own key — AES-256-GCM, a key every member reads from a local
//! file, never written into etcd — so that one member makes them and every member's workers
//! open every member's tickets.
//!
//! The same sealing keeps the fleet's certificate private keys and ACME account credentials
//! out of etcd's clear text ([`seal_private_key`], [`seal_account`]), each bound to its use
//! and name by the associated data.
//!
//! Owns: the fleet's keys as read ([`FleetKeys::read`]: 64 hex digits a line, the first
//! sealing, every line opening — a new key is rolled in by putting it first everywhere, then
//! the old one out; the form is `config::cluster::key_lines`', which `check` applies), and
//! the sealed values' layout. Must not touch:
//! when the secrets rotate or who is told (the master's `supervisor`), or etcd.

use super::tickets::{Secret, KEPT};
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use base64::Engine as _;

/// What a sealed value's associated data names, by use: the same bytes sealed for another
/// use (or, for a private key, another name) never open as this.
const TICKETS: &[u8] = b"espalier fleet ticket secrets v1";
const PRIVATE_KEY: &[u8] = b"espalier fleet private key v1:";
const ACCOUNT: &[u8] = b"espalier fleet acme account v1:";

/// The fleet's keys, the sealing one first.
pub struct FleetKeys(Vec<[u8; 32]>);

impl std::fmt::Debug for FleetKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys themselves are never printed.
        write!(f, "FleetKeys({} key(s))", self.0.len())
    }
}

impl FleetKeys {
    /// The keys of `text` (a key file's; see `config::cluster::key_lines`).
    pub fn parse(text: &str) -> Result<FleetKeys, String> {
        crate::config::cluster::key_lines(text).map(FleetKeys)
    }

    /// The keys in file `path`.
    pub fn read(path: &std::path::Path) -> Result<FleetKeys, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        FleetKeys::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn key(k: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k).expect("a 32-byte key"))
}

/// `data` sealed for `purpose` with the fleet's first key, as text for etcd: base64 of
/// `nonce ‖ ciphertext ‖ tag`.
fn seal_bytes(keys: &FleetKeys, purpose: &[u8], mut data: Vec<u8>) -> String {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).expect("the system's random source");
    key(&keys.0[0])
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(purpose),
            &mut data,
        )
        .expect("sealing");
    let mut out = nonce.to_vec();
    out.extend_from_slice(&data);
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// What [`seal_bytes`] sealed for `purpose` (`what` names it in an error), opened with
/// whichever of the fleet's keys sealed it; `Err` when none does (another fleet's key, or a
/// key not rolled in everywhere yet).
fn open_bytes(keys: &FleetKeys, purpose: &[u8], what: &str, text: &str) -> Result<Vec<u8>, String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| format!("the fleet's {what} is not base64"))?;
    if raw.len() < NONCE_LEN + 16 {
        return Err(format!("the fleet's {what} is too short"));
    }
    let (nonce, sealed) = raw.split_at(NONCE_LEN);
    for k in &keys.0 {
        let mut data = sealed.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "a bad nonce")?;
        if let Ok(plain) = key(k).open_in_place(nonce, Aad::from(purpose), &mut data) {
            let len = plain.len();
            data.truncate(len);
            return Ok(data);
        }
    }
    Err(format!("none of this member's fleet keys (secret_file) opens the fleet's {what}: every member needs the key that sealed it"))
}

/// `secrets` (newest first, at most [`KEPT`]) made at `rotated_unix`, sealed with the fleet's
/// first key: the plaintext is `rotated_unix (8, big-endian) ‖ secrets`.
pub fn seal(keys: &FleetKeys, secrets: &[Secret], rotated_unix: u64) -> String {
    let mut data = rotated_unix.to_be_bytes().to_vec();
    for s in secrets.iter().take(KEPT) {
        data.extend_from_slice(s);
    }
    seal_bytes(keys, TICKETS, data)
}

/// The secrets and their rotation time in a value [`seal`] made.
pub fn open(keys: &FleetKeys, text: &str) -> Result<(Vec<Secret>, u64), String> {
    let plain = open_bytes(keys, TICKETS, "ticket secrets", text)?;
    if plain.len() < 8 + 32 {
        return Err("the fleet's ticket secrets are too short".into());
    }
    let (when, rest) = plain.split_at(8);
    if rest.len() % 32 != 0 || rest.len() / 32 > KEPT {
        return Err("the fleet's ticket secrets have the wrong length".into());
    }
    let rotated = u64::from_be_bytes(when.try_into().unwrap_or_default());
    let secrets = rest
        .chunks(32)
        .map(|c| c.try_into().unwrap_or_default())
        .collect();
    Ok((secrets, rotated))
}

/// A certificate's private key (PEM) for `name`'s pair, sealed: bound to the name, so that a
/// key cannot be passed off as another name's in etcd.
pub fn seal_private_key(keys: &FleetKeys, name: &str, pem: &[u8]) -> String {
    seal_bytes(keys, &[PRIVATE_KEY, name.as_bytes()].concat(), pem.to_vec())
}

/// The private key [`seal_private_key`] sealed for `name`.
pub fn open_private_key(keys: &FleetKeys, name: &str, text: &str) -> Result<Vec<u8>, String> {
    open_bytes(
        keys,
        &[PRIVATE_KEY, name.as_bytes()].concat(),
        "private key",
        text,
    )
}

/// An ACME account's credentials (its file `file`'s text), sealed: they hold its key.
pub fn seal_account(keys: &FleetKeys, file: &str, json: &[u8]) -> String {
    seal_bytes(keys, &[ACCOUNT, file.as_bytes()].concat(), json.to_vec())
}

/// The credentials [`seal_account`] sealed as `file`.
pub fn open_account(keys: &FleetKeys, file: &str, text: &str) -> Result<Vec<u8>, String> {
    open_bytes(
        keys,
        &[ACCOUNT, file.as_bytes()].concat(),
        "ACME account",
        text,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    const B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

    #[test]
    fn sealed_secrets_open_with_any_key_of_the_file_and_no_other() {
        let secrets = [[1u8; 32], [2u8; 32]];
        let sealed = seal(&FleetKeys::parse(A).unwrap(), &secrets, 1_800_000_000);
        assert!(!sealed.contains(&crate::os::private_dir::hex(&[1u8; 32])));
        // A new key rolled in first: the old one still opens what it sealed.
        let both = FleetKeys::parse(&format!("{B}\n# the old one\n{A}\n")).unwrap();
        assert_eq!(
            open(&both, &sealed).unwrap(),
            (secrets.to_vec(), 1_800_000_000)
        );
        let other = FleetKeys::parse(B).unwrap();
        assert!(open(&other, &sealed)
            .unwrap_err()
            .contains("none of this member's fleet keys"));
        // A private key opens only as the name's it was sealed for.
        let pem = b"-----BEGIN PRIVATE KEY-----\nsecret\n";
        let sealed = seal_private_key(&other, "a.example", pem);
        assert!(!sealed.contains("secret"));
        assert_eq!(open_private_key(&both, "a.example", &sealed).unwrap(), pem);
        assert!(open_private_key(&both, "b.example", &sealed).is_err());
        assert!(open(&both, &sealed).is_err());
        // Tampered: refused, not misread.
        let mut raw = base64::engine::general_purpose::STANDARD
            .decode(&sealed)
            .unwrap();
        raw[20] ^= 1;
        let tampered = base64::engine::general_purpose::STANDARD.encode(raw);
        assert!(open(&both, &tampered).is_err());
    }

    #[test]
    fn a_key_file_is_hex_keys_one_a_line() {
        assert!(FleetKeys::parse("")
            .unwrap_err()
            .contains("openssl rand -hex 32"));
        assert!(FleetKeys::parse("abc").unwrap_err().starts_with("line 1:"));
        assert!(FleetKeys::parse(&format!("{A}0")).is_err());
        assert_eq!(
            FleetKeys::parse(&format!("\n{A} # mine\n{B}"))
                .unwrap()
                .0
                .len(),
            2
        );
    }
}
