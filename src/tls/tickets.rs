//! Session ticket keys every worker of a pool shares, so that a client resumes its TLS
//! session whichever worker — thread or process — takes its next connection (the reuseport
//! hash and CPU steering rarely send it back to the one that made its ticket; with a random
//! key per worker, about one resumption in `workers` succeeded). The master holds the
//! secrets, rotates them, and hands them to the workers over the control channel (and in
//! their start's spec): they are never written to a file. Each pool's keys are derived from
//! the machine's secrets and its name, so one tenant's worker holds no key to another's
//! tickets.
//!
//! A ticket is `key name (16) ‖ nonce (12) ‖ AES-256-GCM(session state) ‖ tag (16)`, the name
//! its associated data, as nginx's and HAProxy's shared keys make them. The newest key seals;
//! it and the two before it open — so with a rotation every [`ROTATE_EVERY`] a ticket lives
//! at least [`TICKET_LIFETIME`], and none outlives three rotations.
//!
//! Owns: the master's secrets ([`KeyRing`]), the derivation ([`pool_keys`]), their text on the
//! control channel ([`encode`], [`decode`]) and the worker's ticketer ([`SharedTicketer`]).
//! Must not touch: which workers hear of a rotation, and when it is asked for (the master's
//! `supervisor::ticket_keys`).
//!
//! Written here rather than taken from rustls: rustls's `Ticketer` makes its own random keys
//! inside each process and cannot be given any.

use crate::os::private_dir::hex;
use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::Duration;

/// How often the master makes a new key.
pub const ROTATE_EVERY: Duration = Duration::from_secs(6 * 3600);
/// Keys that open tickets: the newest (which seals) and the two before it.
pub const KEPT: usize = 3;
/// The lifetime a ticket announces: two rotations, which the third key's span covers.
pub const TICKET_LIFETIME: u32 = 2 * ROTATE_EVERY.as_secs() as u32;

const NAME_LEN: usize = 16;
const KEY_LEN: usize = 32;
const TAG_LEN: usize = 16;

/// A machine-wide secret the master holds (one per rotation).
pub type Secret = [u8; 32];

/// A fresh secret, from the system's random source.
pub fn new_secret() -> Secret {
    let mut secret = [0u8; 32];
    aws_lc_rs::rand::fill(&mut secret).expect("the system's random source");
    secret
}

/// The master's secrets, newest first, at most [`KEPT`]: one made at start, one more at each
/// rotation.
pub struct KeyRing {
    secrets: std::collections::VecDeque<Secret>,
    rotated: std::time::Instant,
}

impl Default for KeyRing {
    fn default() -> Self {
        KeyRing {
            secrets: std::iter::once(new_secret()).collect(),
            rotated: std::time::Instant::now(),
        }
    }
}

impl KeyRing {
    /// Whether [`ROTATE_EVERY`] has passed since the last rotation.
    pub fn due(&self, now: std::time::Instant) -> bool {
        now.duration_since(self.rotated) >= ROTATE_EVERY
    }

    /// A new secret seals from now on; the oldest past [`KEPT`] is forgotten.
    pub fn rotate(&mut self, now: std::time::Instant) {
        self.secrets.push_front(new_secret());
        self.secrets.truncate(KEPT);
        self.rotated = now;
    }

    /// Counts the next rotation from `now` without making one (a fleet's is on its way).
    pub fn postpone(&mut self, now: std::time::Instant) {
        self.rotated = now;
    }

    /// The secrets, newest first.
    pub fn secrets(&self) -> Vec<Secret> {
        self.secrets.iter().copied().collect()
    }

    /// The secrets a rotation would make (a new one, then those kept), without making it
    /// here: a fleet's rotation goes through its etcd first (see `fleet_keys`).
    pub fn rotated_secrets(&self) -> Vec<Secret> {
        let kept = self.secrets.iter().take(KEPT - 1).copied();
        std::iter::once(new_secret()).chain(kept).collect()
    }

    /// Takes `secrets` (newest first) made `age` ago — a fleet's, from its etcd — in place of
    /// its own; whether they differ from those it had.
    pub fn take(&mut self, secrets: Vec<Secret>, age: Duration) -> bool {
        let now = std::time::Instant::now();
        self.rotated = now.checked_sub(age).unwrap_or(now);
        let new: std::collections::VecDeque<Secret> = secrets.into_iter().take(KEPT).collect();
        if new.is_empty() || new == self.secrets {
            return false;
        }
        self.secrets = new;
        true
    }

    /// Pool `pool`'s keys now, as a control line's word ([`encode`]).
    pub fn for_pool(&self, pool: &str) -> String {
        let secrets: Vec<Secret> = self.secrets.iter().copied().collect();
        encode(&pool_keys(&secrets, pool))
    }
}

/// One ticket key: its name (what a ticket carries to find it) and the AES-256 key.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketKey {
    name: [u8; NAME_LEN],
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself is never printed.
        write!(f, "TicketKey({})", hex(&self.name))
    }
}

/// The ticket keys of pool `pool` from the machine's `secrets` (newest first): HMAC-SHA256 of
/// the pool's name under each secret, for the key and, apart, for its name.
pub fn pool_keys(secrets: &[Secret], pool: &str) -> Vec<TicketKey> {
    use aws_lc_rs::hmac;
    secrets
        .iter()
        .map(|secret| {
            let mac = hmac::Key::new(hmac::HMAC_SHA256, secret);
            let key = hmac::sign(&mac, format!("espalier ticket key\0{pool}").as_bytes());
            let name = hmac::sign(&mac, format!("espalier ticket name\0{pool}").as_bytes());
            let mut k = TicketKey {
                name: [0; NAME_LEN],
                key: [0; KEY_LEN],
            };
            k.key.copy_from_slice(&key.as_ref()[..KEY_LEN]);
            k.name.copy_from_slice(&name.as_ref()[..NAME_LEN]);
            k
        })
        .collect()
}

/// `keys` as one word of a control line: each key's name and key in hex, newest first,
/// comma-separated.
pub fn encode(keys: &[TicketKey]) -> String {
    (keys.iter())
        .map(|k| format!("{}{}", hex(&k.name), hex(&k.key)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The keys [`encode`] wrote; `Err` says what is wrong (a line from elsewhere).
pub fn decode(text: &str) -> Result<Vec<TicketKey>, String> {
    let keys = text.trim().split(',').map(|word| {
        let bytes = crate::os::private_dir::unhex(word).ok_or("ticket keys: not hex")?;
        if bytes.len() != NAME_LEN + KEY_LEN {
            return Err("ticket keys: a key of the wrong length".to_string());
        }
        let mut k = TicketKey {
            name: [0; NAME_LEN],
            key: [0; KEY_LEN],
        };
        k.name.copy_from_slice(&bytes[..NAME_LEN]);
        k.key.copy_from_slice(&bytes[NAME_LEN..]);
        Ok(k)
    });
    let keys: Vec<TicketKey> = keys.collect::<Result<_, _>>()?;
    if keys.is_empty() || keys.len() > KEPT {
        return Err(format!("ticket keys: {} keys, not 1 to {KEPT}", keys.len()));
    }
    Ok(keys)
}

/// A worker's ticketer: every TLS configuration of the worker (TCP and QUIC) shares it, and
/// the control loop gives it the master's keys as they rotate.
pub struct SharedTicketer {
    keys: RwLock<Vec<([u8; NAME_LEN], LessSafeKey)>>,
    /// How many sets of keys it was given (what the worker's pongs report).
    generation: AtomicU64,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedTicketer(generation {})", self.generation())
    }
}

impl SharedTicketer {
    /// A ticketer with `keys` (newest first).
    pub fn new(keys: &[TicketKey]) -> SharedTicketer {
        let ticketer = SharedTicketer {
            keys: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
        };
        ticketer.set(keys);
        ticketer
    }

    /// Takes a new set of keys (newest first): new tickets are sealed with the first.
    pub fn set(&self, keys: &[TicketKey]) {
        let opened = (keys.iter().take(KEPT))
            .filter_map(|k| {
                let key = UnboundKey::new(&AES_256_GCM, &k.key).ok()?;
                Some((k.name, LessSafeKey::new(key)))
            })
            .collect();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = opened;
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// How many sets of keys it was given.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

impl rustls::server::ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        TICKET_LIFETIME
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let (name, key) = keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(name);
        out.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        let nonce = Nonce::assume_unique_for_key(nonce);
        key.seal_in_place_append_tag(nonce, Aad::from(name), &mut sealed)
            .ok()?;
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < NAME_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (name, rest) = cipher.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let (_, key) = keys.iter().find(|(n, _)| n == name)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut opened = sealed.to_vec();
        let plain = key
            .open_in_place(nonce, Aad::from(name), &mut opened)
            .ok()?;
        let len = plain.len();
        opened.truncate(len);
        Some(opened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;

    #[test]
    fn pools_get_their_own_keys_and_the_same_ones_everywhere() {
        let secrets = [new_secret(), new_secret()];
        let shop = pool_keys(&secrets, "shop");
        assert_eq!(shop, pool_keys(&secrets, "shop"));
        assert_ne!(shop, pool_keys(&secrets, "blog"));
        assert_ne!(shop[0], shop[1]);
        assert_eq!(decode(&encode(&shop)).unwrap(), shop);
        assert!(decode("zz").is_err());
        assert!(decode("00ff").is_err());
        let four = encode(&pool_keys(&[new_secret(); 4], "shop"));
        assert!(decode(&four).is_err());
    }

    #[test]
    fn a_ticket_opens_in_another_worker_with_the_keys_and_through_two_rotations() {
        let mut secrets = vec![new_secret()];
        let keys = |s: &[Secret]| pool_keys(s, "shop");
        let a = SharedTicketer::new(&keys(&secrets));
        let b = SharedTicketer::new(&keys(&secrets));
        let ticket = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&ticket).unwrap(), b"session state");
        // Another pool's worker, or a worker with keys of its own, cannot open it.
        assert!(SharedTicketer::new(&pool_keys(&secrets, "blog"))
            .decrypt(&ticket)
            .is_none());
        // Rotations: the newest seals, three open.
        for rotation in 1..=3 {
            secrets.insert(0, new_secret());
            secrets.truncate(KEPT);
            b.set(&keys(&secrets));
            assert_eq!(b.generation(), 1 + rotation);
            let opened = b.decrypt(&ticket);
            assert_eq!(
                opened.is_some(),
                rotation < KEPT as u64,
                "rotation {rotation}"
            );
        }
        // A ticket changed by one bit, or cut short, opens nowhere.
        let fresh = b.encrypt(b"x").unwrap();
        let mut bent = fresh.clone();
        *bent.last_mut().unwrap() ^= 1;
        assert!(b.decrypt(&bent).is_none());
        assert!(b.decrypt(&fresh[..20]).is_none());
        assert_eq!(b.decrypt(&fresh).unwrap(), b"x");
    }
}
