//! Validation of who may come in: `allow` and `deny` (on a site and an app path),
//! `trusted_proxies`, `deny_action`, and how fast and how much a client may ask (`limit`).
//!
//! Owns: those keys' rules. Must not touch: what a list lets in
//! ([`crate::routing::access`]) or how limits are counted ([`crate::routing::limits`]).

use super::super::locate::Seg;
use super::super::raw::RawLimit;
use super::super::site::{AccessList, Cidr, DenyAction, LimitSpec, Rate};
use super::Validator;

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
}
