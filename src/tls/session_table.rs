//! The TLS sessions a pool's workers share for HTTP/3's 0-RTT (`[server] http3_early_data`):
//! rustls takes early data only on a session resumed from its own store, single-use (a
//! replayed first flight finds its entry taken), never from a self-contained ticket — so with
//! a store per worker, a client whose next connection lands on another worker or process of
//! the pool gets no 0-RTT. This store is one table in memory the master makes per pool and
//! every worker of the pool maps (`crate::os::shared_memory`), as nginx's
//! `ssl_session_cache shared:` is one zone its workers share.
//!
//! Written here because no kept crate offers a map shared across processes that rustls can
//! use; it is small: a fixed array of slots, found by the key's hash, four ways to a set,
//! the oldest of the four replaced. Each slot has its own lock word (0 free, else the time
//! it was taken, in ms): a worker killed while holding one leaves it stale, and a lock held
//! longer than [`STALE`] is taken over. A lock not had after a bounded wait is a miss (a
//! full handshake, not a stall).
//!
//! A slot is [`SLOT_WORDS`] words: the lock, the time written (0: empty), the key's and the
//! value's lengths, the key (up to [`KEY_BYTES`]) and the value (up to [`VALUE_BYTES`]; a
//! larger session is not kept — a client-certificate chain, which 0-RTT never meets).
//!
//! Owns: the table's layout and its operations. Must not touch: the mapping (`os`) or which
//! configurations use it (`crate::server::quic`).

use crate::os::shared_memory::Mapping;
use rustls::server::StoresServerSessions;
use std::sync::atomic::{AtomicU64, Ordering};

/// Words in one slot (1 KiB).
pub const SLOT_WORDS: usize = 128;
/// Slots in a pool's table: 16 Ki sessions, 16 MiB of address space (pages are taken only
/// as slots are written).
pub const SLOTS: usize = 16 * 1024;
/// Slots a key may be in.
const WAYS: usize = 4;
/// The longest key kept (rustls's session ids are 32 bytes).
const KEY_BYTES: usize = 64;
/// Where the key starts, and the value, in words.
const KEY_AT: usize = 3;
const VALUE_AT: usize = KEY_AT + KEY_BYTES / 8;
/// The longest value kept.
const VALUE_BYTES: usize = (SLOT_WORDS - VALUE_AT) * 8;
/// A lock held this long is a dead holder's, taken over.
const STALE: u64 = 1000;
/// Tries at a busy lock before a miss: spins, then yields.
const TRIES: u32 = 256;

/// A pool's shared session table, mapped.
pub struct SessionTable {
    map: Mapping,
}

impl std::fmt::Debug for SessionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionTable({} slots)", self.slots())
    }
}

/// Milliseconds since the epoch, never 0 (0 marks a free lock and an empty slot).
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    (since.map_or(0, |d| d.as_millis() as u64)).max(1)
}

impl SessionTable {
    /// The table in `map` (made with [`SLOTS`] × [`SLOT_WORDS`] words).
    pub fn new(map: Mapping) -> Result<SessionTable, String> {
        let words = map.words().len();
        if words < SLOT_WORDS * WAYS || words % SLOT_WORDS != 0 {
            return Err(format!(
                "a session table of {words} words is no table of slots"
            ));
        }
        Ok(SessionTable { map })
    }

    fn slots(&self) -> usize {
        self.map.words().len() / SLOT_WORDS
    }

    /// Slot `i`'s words.
    fn slot(&self, i: usize) -> &[AtomicU64] {
        &self.map.words()[i * SLOT_WORDS..(i + 1) * SLOT_WORDS]
    }

    /// The slots `key` may be in.
    fn set_of(&self, key: &[u8]) -> impl Iterator<Item = usize> + '_ {
        let sets = self.slots() / WAYS;
        let first = (xxhash_rust::xxh3::xxh3_64(key) as usize % sets) * WAYS;
        first..first + WAYS
    }

    /// `f` on slot `i` with its lock held; `None` when the lock could not be had.
    fn locked<R>(&self, i: usize, f: impl FnOnce(&[AtomicU64]) -> R) -> Option<R> {
        let slot = self.slot(i);
        let lock = &slot[0];
        for attempt in 0..TRIES {
            let now = now_ms();
            let held = match lock.compare_exchange(0, now, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => true,
                Err(since) if now.saturating_sub(since) > STALE => lock
                    .compare_exchange(since, now, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok(),
                Err(_) => false,
            };
            if held {
                let r = f(slot);
                lock.store(0, Ordering::Release);
                return Some(r);
            }
            if attempt < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        None
    }

    /// The value under `key` in its set, taken out of the table when `take`.
    fn find(&self, key: &[u8], take: bool) -> Option<Vec<u8>> {
        if key.len() > KEY_BYTES {
            return None;
        }
        self.set_of(key).find_map(|i| {
            self.locked(i, |slot| {
                let (stamp, lens) = (
                    slot[1].load(Ordering::Relaxed),
                    slot[2].load(Ordering::Relaxed),
                );
                let (key_len, value_len) = ((lens >> 16) as usize, (lens & 0xffff) as usize);
                if stamp == 0
                    || key_len != key.len()
                    || read(&slot[KEY_AT..VALUE_AT], key_len) != key
                {
                    return None;
                }
                let value = read(&slot[VALUE_AT..], value_len.min(VALUE_BYTES));
                if take {
                    slot[1].store(0, Ordering::Relaxed);
                }
                Some(value)
            })
            .flatten()
        })
    }
}

/// The first `len` bytes of `words`.
fn read(words: &[AtomicU64], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len.div_ceil(8) * 8);
    for w in &words[..len.div_ceil(8)] {
        out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `bytes` into `words`, the last word's rest zero.
fn write(words: &[AtomicU64], bytes: &[u8]) {
    for (w, chunk) in words.iter().zip(bytes.chunks(8)) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(word), Ordering::Relaxed);
    }
}

impl StoresServerSessions for SessionTable {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        if key.len() > KEY_BYTES || value.len() > VALUE_BYTES || key.is_empty() {
            return false;
        }
        // The slot of the set written longest ago (an empty one first), read without its
        // lock: a race only picks a less old victim.
        let oldest = self
            .set_of(&key)
            .min_by_key(|&i| self.slot(i)[1].load(Ordering::Relaxed));
        let Some(i) = oldest else { return false };
        self.locked(i, |slot| {
            write(&slot[KEY_AT..VALUE_AT], &key);
            write(&slot[VALUE_AT..], &value);
            slot[2].store(
                (key.len() as u64) << 16 | value.len() as u64,
                Ordering::Relaxed,
            );
            slot[1].store(now_ms(), Ordering::Relaxed);
        })
        .is_some()
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.find(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.find(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::shared_memory::{create, Mapping};
    use std::os::fd::AsFd;

    fn two_views(slots: usize) -> (SessionTable, SessionTable) {
        let fd = create("espalier-test-sessions", slots * SLOT_WORDS).unwrap();
        let view = || SessionTable::new(Mapping::map(fd.as_fd()).unwrap()).unwrap();
        (view(), view())
    }

    #[test]
    fn a_session_put_by_one_process_is_taken_once_by_another() {
        let (a, b) = two_views(64);
        let value: Vec<u8> = (0..300).map(|i| i as u8).collect();
        assert!(a.put(b"session-1".to_vec(), value.clone()));
        assert_eq!(b.get(b"session-1"), Some(value.clone()));
        assert_eq!(b.take(b"session-1"), Some(value));
        // Single use: a replayed first flight finds nothing.
        assert_eq!(a.take(b"session-1"), None);
        assert_eq!(a.get(b"session-2"), None);
    }

    #[test]
    fn oversized_sessions_are_not_kept_and_a_full_set_drops_its_oldest() {
        let (a, _) = two_views(WAYS);
        assert!(!a.put(vec![1; KEY_BYTES + 1], vec![1]));
        assert!(!a.put(b"k".to_vec(), vec![1; VALUE_BYTES + 1]));
        assert!(a.put(b"k".to_vec(), vec![7; VALUE_BYTES]));
        assert_eq!(a.get(b"k").unwrap().len(), VALUE_BYTES);
        // One set of four slots, filled in order (an empty slot first), their times then
        // made distinct: a fifth key pushes the oldest out.
        let (a, _) = two_views(WAYS);
        for k in 0..4u8 {
            assert!(a.put(vec![b'x', k], vec![k]));
        }
        for i in 0..WAYS {
            a.slot(i)[1].store(1000 + i as u64, Ordering::Relaxed);
        }
        assert!(a.put(b"x\x04".to_vec(), vec![4]));
        let kept: Vec<u8> = (0..5u8).filter(|k| a.get(&[b'x', *k]).is_some()).collect();
        assert_eq!(kept, [1, 2, 3, 4]);
    }

    #[test]
    fn a_lock_left_by_a_dead_holder_is_taken_over() {
        let (a, _) = two_views(WAYS);
        // A holder that died 5 s ago, on every slot of the set.
        for i in 0..WAYS {
            a.slot(i)[0].store(now_ms() - 5000, Ordering::Relaxed);
        }
        assert!(a.put(b"k".to_vec(), b"v".to_vec()));
        assert_eq!(a.get(b"k"), Some(b"v".to_vec()));
        // A lock held now is waited for boundedly, then a miss.
        a.slot(a.set_of(b"k").next().unwrap())[0].store(now_ms() + 60_000, Ordering::Relaxed);
        let mut tries = a.set_of(b"k");
        let first = tries.next().unwrap();
        assert!(a.locked(first, |_| ()).is_none());
    }
}
