//! A path's sign-in by another service (`auth = { request = "http://127.0.0.1:9091/verify" }`):
//! nginx's `auth_request`, Caddy's `forward_auth`, Traefik's `forwardAuth`, Envoy's
//! `ext_authz` — the front door asks a verifier (oauth2-proxy, Authelia, Authentik, a
//! platform's own) whether a request may in, before it is answered or lent to its app.
//!
//! Owns: the step's settings ([`AuthRequestSpec`]), what a let-in carries to the app
//! ([`Granted`]), and a thread's remembered let-ins ([`Remembered`]), pure. Must not touch:
//! the asking itself (an exchange with an upstream group's server, `crate::proxy::verify`) or
//! the request (the handlers run the step, the engine awaits it).
//!
//! Why these defaults: the verifier is asked `GET` on its own path with the request's method,
//! URL, host, scheme and client in `X-Forwarded-*` (and `X-Original-URL`, `X-Original-Method`
//! as nginx setups pass them) — what oauth2-proxy, Authelia and Traefik's verifiers read — and
//! the client's `Cookie` and `Authorization`, where sessions and tokens travel. Never its body:
//! a verifier decides on the head, and an upload must not wait for a second reader.

use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The request fields a verifier gets unless `send` says otherwise.
pub const DEFAULT_SEND: [&str; 2] = ["cookie", "authorization"];

/// How long a verifier may take to answer unless `timeout` says otherwise; past it the
/// request is answered 503 (the step fails closed).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The let-ins a thread remembers per path at most: a flood of distinct sessions costs this
/// much memory and no more (when full, the ones run out go; if none has, all).
pub const MAX_REMEMBERED: usize = 4096;

/// A path's `auth = { request = … }`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AuthRequestSpec {
    /// The upstream group whose servers verify (a written address makes one of its own).
    pub group: String,
    /// The path (and query) the verifier is asked for.
    pub uri: String,
    /// The request's fields it is sent, lowercase.
    pub send: Vec<String>,
    /// The fields of a let-in answer copied into the request to the app (a client's own
    /// fields of these names never pass).
    pub copy: Vec<String>,
    /// The whole exchange's bound.
    pub timeout: Duration,
    /// How long a let-in is remembered per thread for the same request fields, host and
    /// target (zero: every request is asked).
    pub remember: Duration,
}

/// What a verifier's let-in carries on to the app: the copied fields' names (which the
/// client's own copies of are dropped) and the values the verifier gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Granted {
    pub names: Rc<[String]>,
    pub fields: Vec<(String, Vec<u8>)>,
}

impl Granted {
    /// Whether `name` is one of the copied fields (the client's own is then dropped).
    pub fn replaces(&self, name: &str) -> bool {
        self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// A thread's let-ins for one path, by a hash of what the verifier was asked (the sent
/// fields' values, the host, the target and the method), until their time runs out.
pub struct Remembered {
    hasher: std::collections::hash_map::RandomState,
    entries: RefCell<HashMap<u64, (Instant, Rc<Granted>)>>,
}

impl Default for Remembered {
    fn default() -> Self {
        Remembered {
            hasher: std::collections::hash_map::RandomState::new(),
            entries: RefCell::new(HashMap::new()),
        }
    }
}

impl Remembered {
    /// The key of a question: its parts, hashed with this thread's own seed (a client cannot
    /// aim two sessions at one entry without knowing it).
    pub fn key<'a>(&self, parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
        let mut h = self.hasher.build_hasher();
        for part in parts {
            part.hash(&mut h);
        }
        h.finish()
    }

    /// The let-in remembered under `key`, while its time lasts.
    pub fn get(&self, key: u64, now: Instant) -> Option<Rc<Granted>> {
        let entries = self.entries.borrow();
        let (until, granted) = entries.get(&key)?;
        (now < *until).then(|| Rc::clone(granted))
    }

    /// Remembers a let-in until `until`, bounded by [`MAX_REMEMBERED`].
    pub fn put(&self, key: u64, until: Instant, granted: Rc<Granted>, now: Instant) {
        let mut entries = self.entries.borrow_mut();
        if entries.len() >= MAX_REMEMBERED && !entries.contains_key(&key) {
            entries.retain(|_, (u, _)| *u > now);
            if entries.len() >= MAX_REMEMBERED {
                entries.clear();
            }
        }
        entries.insert(key, (until, granted));
    }

    /// How many are held (for the tests of the bound).
    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_let_in_is_remembered_until_its_time_and_the_table_stays_bounded() {
        let r = Remembered::default();
        let now = Instant::now();
        let k = r.key([b"session=a".as_slice(), b"example.com", b"/x"]);
        assert_ne!(k, r.key([b"session=b".as_slice(), b"example.com", b"/x"]));
        // Parts are hashed apart: moving a byte from one to the next is another key.
        assert_ne!(
            r.key([b"ab".as_slice(), b"c"]),
            r.key([b"a".as_slice(), b"bc"])
        );
        r.put(k, now + Duration::from_secs(5), Rc::default(), now);
        assert!(r.get(k, now + Duration::from_secs(4)).is_some());
        assert!(r.get(k, now + Duration::from_secs(5)).is_none());
        // A flood of distinct sessions, all live: the table never holds more than its bound.
        for n in 0..(3 * MAX_REMEMBERED as u64) {
            r.put(n, now + Duration::from_secs(60), Rc::default(), now);
            assert!(r.len() <= MAX_REMEMBERED);
        }
        // Run-out entries go first when the table is full.
        let r = Remembered::default();
        for n in 0..MAX_REMEMBERED as u64 {
            let until = now + Duration::from_secs(if n == 7 { 60 } else { 1 });
            r.put(n, until, Rc::default(), now);
        }
        let later = now + Duration::from_secs(2);
        r.put(
            u64::MAX,
            later + Duration::from_secs(60),
            Rc::default(),
            later,
        );
        assert_eq!(r.len(), 2);
        assert!(r.get(7, later).is_some());
    }

    #[test]
    fn granted_fields_replace_the_clients_own_by_name() {
        let g = Granted {
            names: vec!["x-user".to_string()].into(),
            fields: vec![("X-User".into(), b"alice".to_vec())],
        };
        assert!(g.replaces("X-USER"));
        assert!(!g.replaces("x-email"));
    }
}
