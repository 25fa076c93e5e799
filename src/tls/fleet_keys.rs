//! The fleet's session ticket secrets as its etcd holds them (`[server.cluster]` with
//! `secret_file`): the newest secrets of the master's [`KeyRing`](super::tickets::KeyRing),
//! sealed with the fleet's own key — AES-256-GCM, a key every member reads from a local
//! file, never written into etcd — so that one member makes them and every member's workers
//! open every member's tickets.
//!
//! Owns: the fleet's keys as read ([`FleetKeys::read`]: 64 hex digits a line, the first
//! sealing, every line opening — a new key is rolled in by putting it first everywhere, then
//! the old one out; the form is `config::cluster::key_lines`', which `check` applies), and
//! the sealed value's layout ([`seal`], [`open`]). Must not touch:
//! when the secrets rotate or who is told (the master's `supervisor`), or etcd.

use super::tickets::{Secret, KEPT};
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use base64::Engine as _;

/// What the sealed value's associated data names: the same bytes sealed for another use
/// never open as this.
const AAD: &[u8] = b"espalier fleet ticket secrets v1";

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

/// `secrets` (newest first, at most [`KEPT`]) made at `rotated_unix`, sealed with the fleet's
/// first key, as text for etcd: base64 of `nonce ‖ ciphertext ‖ tag`, the plaintext being
/// `rotated_unix (8, big-endian) ‖ secrets`.
pub fn seal(keys: &FleetKeys, secrets: &[Secret], rotated_unix: u64) -> String {
    let mut data = rotated_unix.to_be_bytes().to_vec();
    for s in secrets.iter().take(KEPT) {
        data.extend_from_slice(s);
    }
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).expect("the system's random source");
    key(&keys.0[0])
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(AAD),
            &mut data,
        )
        .expect("sealing");
    let mut out = nonce.to_vec();
    out.extend_from_slice(&data);
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// The secrets and their rotation time in a value [`seal`] made, opened with whichever of
/// the fleet's keys sealed it; `Err` when none does (another fleet's key, or a key not rolled
/// in everywhere yet).
pub fn open(keys: &FleetKeys, text: &str) -> Result<(Vec<Secret>, u64), String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| "the fleet's ticket secrets are not base64".to_string())?;
    if raw.len() < NONCE_LEN + 16 + 8 + 32 {
        return Err("the fleet's ticket secrets are too short".into());
    }
    let (nonce, sealed) = raw.split_at(NONCE_LEN);
    for k in &keys.0 {
        let mut data = sealed.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| "a bad nonce")?;
        let Ok(plain) = key(k).open_in_place(nonce, Aad::from(AAD), &mut data) else {
            continue;
        };
        let (when, rest) = plain.split_at(8);
        if rest.is_empty() || rest.len() % 32 != 0 || rest.len() / 32 > KEPT {
            return Err("the fleet's ticket secrets have the wrong length".into());
        }
        let rotated = u64::from_be_bytes(when.try_into().unwrap_or_default());
        let secrets = rest
            .chunks(32)
            .map(|c| c.try_into().unwrap_or_default())
            .collect();
        return Ok((secrets, rotated));
    }
    Err("none of this member's fleet keys (secret_file) opens the fleet's ticket secrets: every member needs the key that sealed them".into())
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
