//! Basic authentication for a path (IIS Basic Authentication, nginx `auth_basic` with
//! `auth_basic_user_file`): an htpasswd file's users, with bcrypt (`htpasswd -B`) or argon2
//! hashes — plain text, crypt, MD5 (`$apr1$`) and SHA-1 (`{SHA}`) entries are refused when
//! the file is read, as they fall to a GPU in hours — and an `Authorization: Basic` header
//! checked against them.
//!
//! A hash is slow on purpose (bcrypt's default cost is tens of milliseconds), and it runs on
//! the thread that answers, as nginx's does: so a thread remembers a success for
//! [`REMEMBERED`] (keyed by a salted 128-bit hash of the header, never the password), and a
//! signed-in user pays it once, not per request; a failure is remembered for a second (its
//! 401 costs one hash, not two). A site's `limit` bounds how fast a client can guess.
//!
//! What a flood of wrong passwords may cost is bounded twice, with no hash run past either:
//! a thread spends at most [`HASH_BUDGET`] of each second hashing (beyond it, `503` with
//! `Retry-After: 1`), so it keeps turning — its other connections and the master's pings are
//! answered, and the worker is never taken for dead; and a client (its connection's address)
//! gets at most [`MAX_FAILURES`] wrong answers a minute per path and thread (beyond it, `429`
//! with `Retry-After`). Hashing stays on the thread, as nginx's does: moving it off would make
//! every request's routing wait on another thread, and the budget gives the same guarantee.
//!
//! Nobody's failures lock a signed-in user out: successes and failures are remembered apart,
//! so a flood of distinct wrong guesses cannot push a signed-in user's entry out (they once
//! shared one table, cleared when full); and a client that signed in on this thread within
//! [`REMEMBERED`] and has given no wrong answer since is hashed even when the budget is spent
//! (its new password, or its entry run out) — a trickle of guesses from rotating addresses
//! costs them the budget, not the user. What it cannot do: tell a first-time user's right
//! password from a guess without hashing it, so a client never seen sign in may get the 503
//! while a flood spends the budget.
//!
//! Owns: reading and checking htpasswd text, the header's parse and the verdict. Must not
//! touch: files or requests (the config reads the file, the handlers ask and answer).

use base64::Engine;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

/// A path's `auth`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthSpec {
    /// The realm the browser shows.
    pub realm: String,
    /// The file's users and their hashes, as read at `check` (and at each reload).
    pub users: Vec<(String, String)>,
    /// Whether the path may be asked over cleartext HTTP too (passwords in the clear).
    #[serde(default)]
    pub cleartext: bool,
}

/// Reads htpasswd text: `user:hash` lines, `#` comments and blank lines. Each refused line
/// is `(line number, why)`.
pub fn parse_htpasswd(text: &str) -> Result<Vec<(String, String)>, (usize, String)> {
    let mut users = Vec::new();
    for (k, line) in text.lines().enumerate() {
        let n = k + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let Some((user, hash)) = line.split_once(':') else {
            return Err((n, "is not `user:hash`".into()));
        };
        if user.is_empty() {
            return Err((n, "has no user name".into()));
        }
        if user.chars().any(char::is_control) {
            return Err((n, "has a control character in its user name".into()));
        }
        if let Err(why) = kind_of(hash) {
            return Err((n, format!("user `{user}`: {why}")));
        }
        users.push((user.to_string(), hash.to_string()));
    }
    if users.is_empty() {
        return Err((
            0,
            "has no users; add one with `htpasswd -B FILE USER`".into(),
        ));
    }
    Ok(users)
}

#[derive(Clone, Copy)]
enum Kind {
    Bcrypt,
    Argon2,
}

fn kind_of(hash: &str) -> Result<Kind, String> {
    const REMAKE: &str = "make it again with `htpasswd -B` (bcrypt)";
    if ["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
        return hash
            .parse::<bcrypt::HashParts>()
            .map(|_| Kind::Bcrypt)
            .map_err(|_| format!("its bcrypt hash is malformed; {REMAKE}"));
    }
    if hash.starts_with("$argon2") {
        return argon2::PasswordHash::new(hash)
            .map(|_| Kind::Argon2)
            .map_err(|e| format!("its argon2 hash is malformed ({e})"));
    }
    let what = if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
        "an MD5 hash"
    } else if hash.starts_with("{SHA}") {
        "a SHA-1 hash"
    } else if hash.starts_with("$5$") || hash.starts_with("$6$") {
        "a SHA-crypt hash"
    } else if hash.len() == 13 && !hash.starts_with('$') {
        "a crypt (DES) hash"
    } else {
        "a plain-text password or an unknown hash"
    };
    Err(format!(
        "has {what}, which is refused (too fast to guess against); {REMAKE} or argon2"
    ))
}

/// Whether `password` is the one `hash` was made from.
fn verify(password: &[u8], hash: &str) -> bool {
    match kind_of(hash) {
        Ok(Kind::Bcrypt) => bcrypt::verify(password, hash).unwrap_or(false),
        Ok(Kind::Argon2) => argon2::PasswordHash::new(hash).is_ok_and(|parsed| {
            use argon2::PasswordVerifier;
            argon2::Argon2::default()
                .verify_password(password, &parsed)
                .is_ok()
        }),
        Err(_) => false,
    }
}

/// How long a thread remembers a checked user.
pub const REMEMBERED: Duration = Duration::from_secs(300);
const FAILURE_REMEMBERED: Duration = Duration::from_secs(1);
const CACHE_SIZE: usize = 1024;
/// Hashing time a thread may spend per second, per path with `auth`.
pub const HASH_BUDGET: Duration = Duration::from_millis(250);
/// Wrong answers a client may give per minute, per path and thread.
pub const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Clients whose failures a thread counts; full of recent ones, unknown clients wait.
const FAILURE_CLIENTS: usize = 4096;

/// A checked header's user, until when.
type Remembered = (std::rc::Rc<str>, Instant);

/// A path's users as one thread checks them.
pub struct ThreadAuth {
    spec: AuthSpec,
    users: HashMap<String, String>,
    /// Headers that verified: their user, until the instant (each use extends it).
    seen: RefCell<HashMap<u128, Remembered>>,
    /// Headers that failed, until the instant: their 401 costs one hash, not two.
    refused: RefCell<HashMap<u128, Instant>>,
    /// Clients that signed in, until the instant: hashed past a spent budget.
    trusted: RefCell<HashMap<std::net::IpAddr, Instant>>,
    keys: (
        std::collections::hash_map::RandomState,
        std::collections::hash_map::RandomState,
    ),
    /// This second's start and the hashing time spent in it.
    spent: std::cell::Cell<(Instant, Duration)>,
    /// Per client: wrong answers in its window, and when the window began.
    failures: RefCell<HashMap<std::net::IpAddr, (u32, Instant)>>,
}

/// What a request's `Authorization` is worth.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A user of the file, with the right password.
    User(std::rc::Rc<str>),
    /// None, not Basic, malformed, an unknown user or a wrong password: 401.
    Challenge,
    /// Not checked: this thread's hashing budget is spent (503), or the client gave too many
    /// wrong answers (429); either with the seconds after which to try again.
    Refused { status: u16, retry_after: u32 },
}

impl ThreadAuth {
    pub fn new(spec: AuthSpec) -> ThreadAuth {
        ThreadAuth {
            users: spec.users.iter().cloned().collect(),
            spec,
            seen: RefCell::default(),
            refused: RefCell::default(),
            trusted: RefCell::default(),
            keys: Default::default(),
            spent: std::cell::Cell::new((Instant::now(), Duration::ZERO)),
            failures: RefCell::default(),
        }
    }

    pub fn realm(&self) -> &str {
        &self.spec.realm
    }

    pub fn cleartext(&self) -> bool {
        self.spec.cleartext
    }

    /// The verdict on an `Authorization` field's value at `now`, from `client`.
    pub fn check(
        &self,
        authorization: Option<&str>,
        client: Option<std::net::IpAddr>,
        now: Instant,
    ) -> Verdict {
        let Some(value) = authorization else {
            return Verdict::Challenge;
        };
        let key = self.key(value);
        if let Some((user, until)) = self.seen.borrow_mut().get_mut(&key) {
            if now < *until {
                *until = now + REMEMBERED;
                return Verdict::User(user.clone());
            }
        }
        if self.refused.borrow().get(&key).is_some_and(|u| now < *u) {
            return Verdict::Challenge;
        }
        if let Some(refused) = self.refusal(client, now) {
            return refused;
        }
        let hashing = Instant::now();
        let user: Option<std::rc::Rc<str>> = self.verified(value).map(std::rc::Rc::from);
        let (second, spent) = self.spent.get();
        self.spent.set((second, spent + hashing.elapsed()));
        match user {
            Some(user) => {
                remember(
                    &mut self.seen.borrow_mut(),
                    key,
                    (user.clone(), now + REMEMBERED),
                    now,
                    |e| e.1,
                );
                if let Some(ip) = client {
                    remember(
                        &mut self.trusted.borrow_mut(),
                        ip,
                        now + REMEMBERED,
                        now,
                        |u| *u,
                    );
                }
                Verdict::User(user)
            }
            None => {
                self.failed(client, now);
                let until = now + FAILURE_REMEMBERED;
                remember(&mut self.refused.borrow_mut(), key, until, now, |u| *u);
                Verdict::Challenge
            }
        }
    }

    /// Why a hash may not run now for `client`, if it may not (see the module doc).
    fn refusal(&self, client: Option<std::net::IpAddr>, now: Instant) -> Option<Verdict> {
        let (second, spent) = self.spent.get();
        if now.saturating_duration_since(second) >= Duration::from_secs(1) {
            self.spent.set((now, Duration::ZERO));
        } else if spent >= HASH_BUDGET && !self.trusted(client, now) {
            return Some(Verdict::Refused {
                status: 503,
                retry_after: 1,
            });
        }
        let ip = client?;
        let mut failures = self.failures.borrow_mut();
        match failures.get(&ip) {
            Some(&(n, since))
                if n >= MAX_FAILURES && now.saturating_duration_since(since) < FAILURE_WINDOW =>
            {
                let left = FAILURE_WINDOW.saturating_sub(now.saturating_duration_since(since));
                Some(Verdict::Refused {
                    status: 429,
                    retry_after: left.as_secs().max(1) as u32,
                })
            }
            Some(_) => None,
            None if failures.len() >= FAILURE_CLIENTS => {
                failures
                    .retain(|_, (_, since)| now.saturating_duration_since(*since) < FAILURE_WINDOW);
                (failures.len() >= FAILURE_CLIENTS).then_some(Verdict::Refused {
                    status: 503,
                    retry_after: 1,
                })
            }
            None => None,
        }
    }

    /// Whether `client` signed in on this thread within [`REMEMBERED`] and gave no wrong
    /// answer since.
    fn trusted(&self, client: Option<std::net::IpAddr>, now: Instant) -> bool {
        client.is_some_and(|ip| self.trusted.borrow().get(&ip).is_some_and(|u| now < *u))
    }

    /// A wrong answer from `client` at `now`, counted in its window; it is no longer
    /// trusted past a spent budget.
    fn failed(&self, client: Option<std::net::IpAddr>, now: Instant) {
        let Some(ip) = client else { return };
        self.trusted.borrow_mut().remove(&ip);
        let mut failures = self.failures.borrow_mut();
        let entry = failures.entry(ip).or_insert((0, now));
        if now.saturating_duration_since(entry.1) >= FAILURE_WINDOW {
            *entry = (0, now);
        }
        entry.0 += 1;
    }

    /// The user `value` names, when its password is right (the hash run every time).
    fn verified(&self, value: &str) -> Option<String> {
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .ok()?;
        let colon = decoded.iter().position(|&b| b == b':')?;
        let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
        let user = std::str::from_utf8(user).ok()?;
        match self.users.get(user) {
            Some(hash) => verify(password, hash).then(|| user.to_string()),
            None => {
                // As long as a known user's check: which names exist is not told by time.
                if let Some((_, hash)) = self.spec.users.first() {
                    let _ = verify(password, hash);
                }
                None
            }
        }
    }

    #[cfg(test)]
    fn remembered(&self) -> (usize, usize) {
        (self.seen.borrow().len(), self.refused.borrow().len())
    }

    fn key(&self, value: &str) -> u128 {
        let half = |k: &std::collections::hash_map::RandomState| {
            let mut h = k.build_hasher();
            h.write(value.as_bytes());
            h.finish()
        };
        (u128::from(half(&self.keys.0)) << 64) | u128::from(half(&self.keys.1))
    }
}

/// Puts `key` in `table`, bounded by [`CACHE_SIZE`]: when full, the entries whose time
/// (`until` of the value) is past go; when still full, the new entry is not kept (it is
/// checked again next time) — a table is never emptied to make room.
fn remember<K: std::hash::Hash + Eq, V>(
    table: &mut HashMap<K, V>,
    key: K,
    value: V,
    now: Instant,
    until: impl Fn(&V) -> Instant,
) {
    if table.len() >= CACHE_SIZE && !table.contains_key(&key) {
        table.retain(|_, v| now < until(v));
        if table.len() >= CACHE_SIZE {
            return;
        }
    }
    table.insert(key, value);
}

#[cfg(test)]
mod tests;
