//! Validation of a site's `[[site.rule]]`s: one action each (redirect, rewrite or a fixed
//! answer), its statuses and query handling, its host and method conditions, and the regex
//! and targets compiled once here as every worker thread will.
//!
//! Owns: those keys' rules. Must not touch: what a rule does to a request
//! ([`crate::routing::rules`]).

use super::super::locate::Seg;
use super::super::raw::RawRule;
use super::super::site::*;
use super::Validator;

impl Validator {
    /// The rules of site `i`, in order.
    pub(super) fn site_rules(&mut self, i: usize, raw: Vec<RawRule>) -> Vec<RuleSpec> {
        let mut rules = Vec::new();
        let count = raw.len();
        for (k, r) in raw.into_iter().enumerate() {
            let rule_at = [
                Seg::Key("site"),
                Seg::Index(i),
                Seg::Key("rule"),
                Seg::Index(k),
            ];
            let at = |key: &'static str| {
                let mut p = rule_at.to_vec();
                p.push(Seg::Key(key));
                p
            };
            let unconditional = r.path.is_none() && r.host.is_none() && r.method.is_none();
            if let Some(spec) = self.rule(&rule_at, &at, r) {
                // Checked whole, as the threads will compile it.
                if let Err((_, why)) =
                    crate::routing::rules::Rules::new(std::slice::from_ref(&spec))
                {
                    let key = if why.starts_with("`match`") {
                        "match"
                    } else {
                        action_key(&spec.action)
                    };
                    self.err(&at(key), why);
                } else {
                    rules.push(spec);
                }
            }
            if unconditional && k + 1 < count {
                self.err(&rule_at, "matches every request, so the rules after it never apply; give it a `match`, `host` or `method`, or move it last");
            }
        }
        rules
    }

    fn rule(
        &mut self,
        rule_at: &[Seg],
        at: &dyn Fn(&'static str) -> Vec<Seg>,
        r: RawRule,
    ) -> Option<RuleSpec> {
        let actions = [
            ("redirect", r.redirect.is_some()),
            ("rewrite", r.rewrite.is_some()),
            ("answer", r.answer.is_some()),
        ];
        let named: Vec<&str> = actions.iter().filter(|a| a.1).map(|a| a.0).collect();
        if named.len() != 1 {
            let m = if named.is_empty() {
                "has no action; add redirect = \"https://…\", rewrite = \"/path\" or answer = 404"
                    .to_string()
            } else {
                format!(
                    "has {} actions ({}); a rule does one thing: split it in two",
                    named.len(),
                    named.join(", ")
                )
            };
            self.err(rule_at, m);
            return None;
        }
        let only_with = |this: &mut Validator, key: &'static str, set: bool, action: &str| {
            if set && named[0] != action {
                this.err(
                    &at(key),
                    format!(
                        "applies to `{action}`, and this rule has `{}`; remove it",
                        named[0]
                    ),
                );
            }
        };
        only_with(self, "status", r.status.is_some(), "redirect");
        only_with(self, "body", r.body.is_some(), "answer");
        if r.query.is_some() && named[0] == "answer" {
            self.err(
                &at("query"),
                "applies to a redirect or a rewrite's target; remove it",
            );
        }
        let keep_query = match r.query.as_deref() {
            None | Some("keep") => true,
            Some("drop") => false,
            Some(other) => {
                self.err(&at("query"), format!("`{other}` is not a choice; use \"keep\" (the request's query goes to the target, the default) or \"drop\""));
                true
            }
        };
        let action = if let Some(to) = r.redirect {
            let status = match r.status.unwrap_or(301) {
                s @ (301 | 302 | 303 | 307 | 308) => s as u16,
                other => {
                    self.err(&at("status"), format!("{other} is not a redirect; use 301 or 308 (permanent), 302, 303 or 307"));
                    301
                }
            };
            let starts = ["/", "$", "{", "http://", "https://"];
            if !starts.iter().any(|s| to.starts_with(s)) {
                self.err(
                    &at("redirect"),
                    format!("`{to}` is not a URL or a path; write \"https://host/…\" or \"/path\""),
                );
            }
            RuleAction::Redirect { to, status }
        } else if let Some(to) = r.rewrite {
            if !to.starts_with('/') && !to.starts_with('$') {
                self.err(&at("rewrite"), format!("`{to}` is not a path inside the site; write it like \"/articles/$1\" (redirect for another site)"));
            }
            RuleAction::Rewrite { to }
        } else {
            let status = r.answer.unwrap_or(404);
            let body = r.body.unwrap_or_default();
            if !(200..=599).contains(&status) || (300..400).contains(&status) {
                self.err(&at("answer"), format!("{status} is not a status espalier answers with here; use one of 200–299 or 400–599 (redirect for 3xx)"));
            } else if matches!(status, 204 | 205) && !body.is_empty() {
                self.err(
                    &at("body"),
                    format!("a {status} answer has no body; remove body"),
                );
            }
            RuleAction::Answer {
                status: status.clamp(200, 599) as u16,
                body,
            }
        };
        if let Some(h) = &r.host {
            if let Some(problem) = crate::routing::hosts::host_name_problem(h) {
                self.err(&at("host"), problem);
            }
        }
        let methods = match r.method {
            None => Vec::new(),
            Some(toml::Value::String(m)) => vec![m],
            Some(toml::Value::Array(list)) => list
                .into_iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            Some(_) => {
                self.err(
                    &at("method"),
                    "is a method (\"POST\") or a list of them ([\"GET\", \"HEAD\"])",
                );
                Vec::new()
            }
        };
        let methods: Vec<String> = methods
            .into_iter()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        if let Some(m) = methods
            .iter()
            .find(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-'))
        {
            self.err(
                &at("method"),
                format!("`{m}` is not a method; write it like \"POST\""),
            );
        }
        Some(RuleSpec {
            path: r.path,
            host: r.host,
            methods,
            action,
            keep_query,
        })
    }
}

/// The key a rule's action is written under.
fn action_key(action: &RuleAction) -> &'static str {
    match action {
        RuleAction::Redirect { .. } => "redirect",
        RuleAction::Rewrite { .. } => "rewrite",
        RuleAction::Answer { .. } => "answer",
    }
}
