//! Validation of who may come in: `allow` and `deny` (on a site and an app path),
//! `trusted_proxies`, `deny_action`, how fast and how much a client may ask (`limit`), and who
//! must sign in (`auth`, its htpasswd file read and checked here).
//!
//! Owns: those keys' rules. Must not touch: what a list lets in
//! ([`crate::routing::access`]) or how limits are counted ([`crate::routing::limits`]).

use super::super::locate::Seg;
use super::super::raw::{RawAuth, RawLimit};
use super::super::site::{AccessList, AuthSpec, Cidr, DenyAction, LimitSpec, Rate};
use super::Validator;
use crate::routing::auth_request::AuthRequestSpec;
use std::path::Path;

/// A site's or path's `auth`, as validated: a password, or another service's sign-in.
#[derive(Clone, Default)]
pub(super) struct PathAuth {
    pub password: Option<AuthSpec>,
    pub request: Option<AuthRequestSpec>,
}

impl Validator {
    /// Addresses and networks at `at`, each checked.
    pub(super) fn cidrs(&mut self, at: &[Seg], raw: Option<Vec<String>>) -> Vec<Cidr> {
        let mut list = Vec::new();
        for (k, text) in raw.unwrap_or_default().into_iter().enumerate() {
            let mut here = at.to_vec();
            here.push(Seg::Index(k));
            match Cidr::parse(&text) {
                Ok(c) => list.push(c),
                Err(why) => self.err(&here, why),
            }
        }
        list
    }

    /// `allow` and `deny` of the table at `at` (a site or an app path).
    pub(super) fn access_list(
        &mut self,
        at: &[Seg],
        allow: Option<Vec<String>>,
        deny: Option<Vec<String>>,
    ) -> AccessList {
        let key = |k: &'static str| {
            let mut p = at.to_vec();
            p.push(Seg::Key(k));
            p
        };
        if allow.as_ref().is_some_and(|a| a.is_empty()) {
            self.err(&key("allow"), "is empty, so it would let nobody in; list who may come in, or remove it (no allow list lets everyone in who is not denied)");
        }
        AccessList {
            allow: self.cidrs(&key("allow"), allow),
            deny: self.cidrs(&key("deny"), deny),
        }
    }

    /// What a refused client gets: one of `statuses` (the first is the default) or `"close"`.
    pub(super) fn refusal(
        &mut self,
        at: &[Seg],
        raw: Option<toml::Value>,
        statuses: &[u16],
    ) -> DenyAction {
        let default = DenyAction::Status(statuses[0]);
        match raw {
            None => default,
            Some(toml::Value::Integer(s)) if statuses.iter().any(|&k| i64::from(k) == s) => {
                DenyAction::Status(s as u16)
            }
            Some(toml::Value::String(s)) if s == "close" => DenyAction::Close,
            Some(other) => {
                let others: String = statuses[1..].iter().map(|s| format!(", {s}")).collect();
                self.err(at, format!("{other} is not an answer to a refused client; use {} (the default){others} or \"close\" (no answer)", statuses[0]));
                default
            }
        }
    }

    /// A site's `limit`.
    pub(super) fn limit(&mut self, at: &[Seg], raw: Option<RawLimit>) -> Option<LimitSpec> {
        let raw = raw?;
        let key = |k: &'static str| {
            let mut p = at.to_vec();
            p.push(Seg::Key(k));
            p
        };
        let rate_given = raw.rate.is_some();
        let rate = raw.rate.and_then(|r| match Rate::parse(&r) {
            Ok(rate) => Some(rate),
            Err(why) => {
                self.err(&key("rate"), why);
                None
            }
        });
        let mut count = |k: &'static str, v: Option<i64>| {
            v.and_then(|n| match u32::try_from(n) {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    self.err(
                        &key(k),
                        format!("{n} is not a count of requests; use a whole number from 1"),
                    );
                    None
                }
            })
        };
        let concurrent_given = raw.concurrent.is_some();
        let burst = count("burst", raw.burst);
        let concurrent = count("concurrent", raw.concurrent);
        if burst.is_some() && !rate_given {
            self.err(&key("burst"), "is how many requests may come at once above the rate, and there is no rate; add rate = \"50/s\" or remove it");
        }
        let action = self.refusal(&key("action"), raw.action, &[429, 403, 404, 503]);
        if !rate_given && !concurrent_given {
            self.err(at, "limits nothing; give it rate = \"50/s\" (requests per client per period), concurrent = 20 (requests per client at once), or both");
            return None;
        }
        if rate.is_none() && concurrent.is_none() {
            return None; // said above
        }
        Some(LimitSpec {
            burst: burst.unwrap_or_else(|| rate.map_or(1, |r| r.requests)),
            rate,
            concurrent,
            action,
        })
    }

    /// A site's or path's `auth`: a password from an htpasswd file, or the sign-in of another
    /// service (`request`, see `super::auth_request`).
    pub(super) fn auth(&mut self, at: &[Seg], raw: RawAuth, base: &Path) -> PathAuth {
        if raw.request.is_some() || raw.upstream.is_some() {
            return PathAuth {
                password: None,
                request: self.auth_request(at, raw, base),
            };
        }
        PathAuth {
            password: self.htpasswd_auth(at, raw, base),
            request: None,
        }
    }

    /// `auth = { htpasswd }`: its file read (relative to the config's folder) and each entry
    /// checked.
    fn htpasswd_auth(&mut self, at: &[Seg], raw: RawAuth, base: &Path) -> Option<AuthSpec> {
        for (key, set) in [
            ("send", raw.send.is_some()),
            ("copy", raw.copy.is_some()),
            ("timeout", raw.timeout.is_some()),
            ("remember", raw.remember.is_some()),
        ] {
            if set {
                let mut k = at.to_vec();
                k.push(Seg::Key(key));
                self.err(&k, "belongs to a sign-in by another service (auth = { request = \"http://…/verify\" }); remove it, or name the verifier in `request`");
            }
        }
        let mut key = at.to_vec();
        key.push(Seg::Key("htpasswd"));
        let Some(file) = raw.htpasswd else {
            self.err(at, "needs htpasswd = \"FILE\": the users who may sign in (make it with `htpasswd -B -c FILE USER`, from apache2-utils)");
            return None;
        };
        let path = base.join(&file);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                self.err(&key, format!("{} cannot be read ({e}); make it with `htpasswd -B -c {} USER`, or fix the path (relative paths are from the config file's folder)", path.display(), path.display()));
                return None;
            }
        };
        let users = match crate::routing::auth::parse_htpasswd(&text) {
            Ok(users) => users,
            Err((0, why)) => {
                self.err(&key, format!("{} {why}", path.display()));
                return None;
            }
            Err((line, why)) => {
                self.err(&key, format!("{}:{line} {why}", path.display()));
                return None;
            }
        };
        let realm = raw.realm.unwrap_or_else(|| "Restricted".to_string());
        if realm.is_empty() || realm.contains(['"', '\\']) || realm.chars().any(char::is_control) {
            let mut key = at.to_vec();
            key.push(Seg::Key("realm"));
            self.err(&key, "is shown by the browser when it asks for a password: give it a name without quotes, backslashes or control characters");
        }
        Some(AuthSpec {
            realm,
            users,
            cleartext: raw.cleartext.unwrap_or(false),
        })
    }
}
