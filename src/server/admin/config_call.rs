//! A `/config…` request as the supervisor takes it: the configuration API's method, the part
//! it names, its body, `If-Match` and who sent it (see `supervisor::config_api` for what it
//! does, and docs/reference.md for the API).
//!
//! Owns: [`ConfigCall`] and turning an admin request into one — including the browser rule:
//! a request that says it comes from a web page (`Origin`) is taken only from the admin
//! page's own origin, so no other page a browser on this machine opens can change the
//! configuration. Must not touch: the files or the running configuration.

use crate::http::{Method, Request};

/// What a `/config…` request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigMethod {
    Get,
    /// Create or replace.
    Put,
    /// A JSON merge patch (RFC 7396).
    Patch,
    Delete,
    /// `POST /config/load`: a whole document.
    Load,
    /// `POST /config/batch`: a list of changes, applied as one.
    Batch,
}

impl ConfigMethod {
    pub fn word(self) -> &'static str {
        match self {
            ConfigMethod::Get => "GET",
            ConfigMethod::Put => "PUT",
            ConfigMethod::Patch => "PATCH",
            ConfigMethod::Delete => "DELETE",
            ConfigMethod::Load | ConfigMethod::Batch => "POST",
        }
    }
}

/// A configuration API request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigCall {
    pub method: ConfigMethod,
    /// The path after `/config` (`/sites/shop`; `/load` and `/batch` for theirs).
    pub rest: String,
    pub body: Vec<u8>,
    /// `If-Match`: the version the writer read; a write over a newer one is refused (412).
    pub if_match: Option<String>,
    /// `If-None-Match: *`: create only (412 when it exists).
    pub create_only: bool,
    /// Who asked, for the audit line: the client's address.
    pub who: String,
}

/// The largest body a write may carry: a whole document of 10,000 sites is a few MiB.
pub const MAX_BODY: usize = 32 << 20;

/// The call `request` (with `body`) makes when its path is `/config…` (`None`: it is not);
/// a refusal as its status and one line.
pub(super) fn config_call(
    request: &Request<'_>,
    body: &[u8],
    peer: &str,
) -> Option<Result<ConfigCall, (u16, String)>> {
    let rest = request.path.strip_prefix("/config")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    Some(call(request, rest, body, peer))
}

fn call(
    request: &Request<'_>,
    rest: &str,
    body: &[u8],
    peer: &str,
) -> Result<ConfigCall, (u16, String)> {
    if let Some(origin) = request.header("origin") {
        let own = request.host().map(|h| format!("http://{h}"));
        if own.as_deref() != Some(origin) {
            return Err((403, format!("a web page at {origin} may not use the configuration API; only the admin page's own origin may")));
        }
    }
    let method = match (request.method, request.method_text) {
        (Method::Get | Method::Head, _) => ConfigMethod::Get,
        (Method::Put, _) => ConfigMethod::Put,
        (Method::Delete, _) => ConfigMethod::Delete,
        (Method::Post, _) if rest == "/load" => ConfigMethod::Load,
        (Method::Post, _) if rest == "/batch" => ConfigMethod::Batch,
        (_, "PATCH") => ConfigMethod::Patch,
        _ => return Err((405, format!("{} /config{rest} does nothing: GET, PUT, PATCH and DELETE a part, POST /config/load a whole document or /config/batch a list of changes", request.method_text))),
    };
    Ok(ConfigCall {
        method,
        rest: rest.to_string(),
        body: body.to_vec(),
        if_match: request.header("if-match").map(String::from),
        create_only: request.header("if-none-match") == Some("*"),
        who: peer.to_string(),
    })
}
