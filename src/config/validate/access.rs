//! Validation of who may come in: `allow` and `deny` (on a site and an app path),
//! `trusted_proxies` and `deny_action`.
//!
//! Owns: those keys' rules. Must not touch: what a list lets in
//! ([`crate::routing::access`]).

use super::super::locate::Seg;
use super::super::site::{AccessList, Cidr, DenyAction};
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

    /// `deny_action = 403 | 404 | "close"`.
    pub(super) fn deny_action(&mut self, at: &[Seg], raw: Option<toml::Value>) -> DenyAction {
        match raw {
            None => DenyAction::default(),
            Some(toml::Value::Integer(s @ (403 | 404))) => DenyAction::Status(s as u16),
            Some(toml::Value::String(s)) if s == "close" => DenyAction::Close,
            Some(other) => {
                self.err(at, format!("{other} is not an answer to a refused client; use 403 (the default), 404 or \"close\" (no answer)"));
                DenyAction::default()
            }
        }
    }
}
