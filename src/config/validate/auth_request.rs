//! Validation of a sign-in by another service: `auth = { request = "http://ADDR/PATH" }` (or
//! `request = "/PATH"` with `upstream = "GROUP"`), `send`, `copy`, `timeout`, `remember`.
//!
//! Owns: those keys' rules, and the verifier's address made into an upstream group of its
//! own as a path's `upstream` address is (so it is balanced, checked and kept alive as one).
//! Must not touch: what the step does (see [`crate::routing::auth_request`]).

use super::super::locate::Seg;
use super::super::raw::RawAuth;
use super::Validator;
use crate::routing::auth_request::{AuthRequestSpec, DEFAULT_SEND, DEFAULT_TIMEOUT};
use std::path::Path;
use std::time::Duration;

/// Fields a verifier's answer may not put into a request: espalier's own (framing, the
/// forwarded client, who signed in by password) and the hop-by-hop ones.
const NOT_COPIED: [&str; 6] = [
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "forwarded",
    "x-remote-user",
    "x-client-subject",
];

impl Validator {
    /// `auth = { request = … }` at `at`.
    pub(super) fn auth_request(
        &mut self,
        at: &[Seg],
        raw: RawAuth,
        base: &Path,
    ) -> Option<AuthRequestSpec> {
        let key = |k: &'static str| {
            let mut key = at.to_vec();
            key.push(Seg::Key(k));
            key
        };
        for (k, set) in [
            ("htpasswd", raw.htpasswd.is_some()),
            ("realm", raw.realm.is_some()),
            ("cleartext", raw.cleartext.is_some()),
        ] {
            if set {
                self.err(&key(k), "belongs to a password sign-in (auth = { htpasswd = \"FILE\" }), and this one asks another service (`request`); remove one of them");
            }
        }
        let Some(request) = raw.request else {
            self.err(&key("request"), "is missing: the verifier's path on the `upstream` group, like request = \"/oauth2/auth\"");
            return None;
        };
        let (group, uri) = match raw.upstream {
            Some(group) => {
                if !request.starts_with('/') {
                    self.err(&key("request"), format!("`{request}`: with `upstream`, write the verifier's path alone, like \"/oauth2/auth\""));
                    return None;
                }
                let group = self.path_upstream(&key("upstream"), &group, base)?;
                (group, request)
            }
            None => {
                let Some((scheme, rest)) = request.split_once("://") else {
                    self.err(&key("request"), format!("`{request}` names no verifier: write its URL, like \"http://127.0.0.1:9091/verify\", or a path with upstream = \"GROUP\""));
                    return None;
                };
                let (server, path) = rest.find('/').map_or((rest, "/"), |k| rest.split_at(k));
                let written = format!("{scheme}://{server}");
                let group = self.path_upstream(&key("request"), &written, base)?;
                (group, path.to_string())
            }
        };
        if uri.bytes().any(|b| b <= b' ' || b == 0x7f) || uri.contains('#') {
            self.err(&key("request"), format!("`{uri}`: a request target has no spaces, control characters or `#`; percent-encode them"));
        }
        let send = self.field_list(&key("send"), raw.send, &[]);
        let copy = self.field_list(&key("copy"), raw.copy, &NOT_COPIED);
        let timeout = self.nonzero_duration(&key("timeout"), raw.timeout, DEFAULT_TIMEOUT);
        let remember = self.duration(&key("remember"), raw.remember, Duration::ZERO);
        Some(AuthRequestSpec {
            group,
            uri,
            send: send.unwrap_or_else(|| DEFAULT_SEND.iter().map(|s| s.to_string()).collect()),
            copy: copy.unwrap_or_default(),
            timeout,
            remember,
        })
    }

    /// A list of field names (lowercase), each a token and none of `refused` or espalier's
    /// framing fields.
    fn field_list(
        &mut self,
        at: &[Seg],
        raw: Option<Vec<String>>,
        refused: &[&str],
    ) -> Option<Vec<String>> {
        let list = raw?;
        let mut names = Vec::with_capacity(list.len());
        for (k, name) in list.into_iter().enumerate() {
            let mut here = at.to_vec();
            here.push(Seg::Index(k));
            let lower = name.to_ascii_lowercase();
            if !super::fields::is_token(&name) {
                self.err(
                    &here,
                    format!("`{name}` is not a field name; write it like \"X-User\""),
                );
            } else if super::fields::NOT_SETTABLE.contains(&lower.as_str())
                || refused.contains(&lower.as_str())
            {
                self.err(&here, format!("`{name}` is espalier's own to set on the way to the app; name another field"));
            } else if !names.contains(&lower) {
                names.push(lower);
            }
        }
        Some(names)
    }
}
