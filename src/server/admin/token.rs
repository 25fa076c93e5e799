//! The admin endpoint's token: where it is kept, made at first start, and read from a
//! request.
//!
//! Owns: the token file and the token a request carries. Must not touch: what the token
//! allows (the endpoint's routes).

use crate::config::Config;
use std::net::SocketAddr;

/// Where the token of the admin endpoint on `addr` is kept when the config names none: made
/// at first start (random, mode 0600) and read by `espalier pool|recycle|reload` on this
/// machine, in [`crate::server::runtime::base_dir`] (for root `/run/espalier/`, outside a service's
/// private /tmp, so the CLI in a shell finds it).
pub fn token_file(addr: SocketAddr) -> std::path::PathBuf {
    crate::server::runtime::base_dir().join(format!("admin-{}.token", addr.port()))
}

/// The token the endpoint's actions require: `[server] admin_token`, or the token file's,
/// created now if there is none. A token file someone else could have written is refused,
/// not used: whoever planted it would hold the endpoint.
pub(super) fn server_token(config: &Config) -> Result<String, String> {
    use crate::os::private_dir;
    if let Some(t) = &config.server.admin_token {
        return Ok(t.clone());
    }
    crate::server::runtime::ensure_base_dir()?;
    let path = token_file(config.server.admin);
    if let Some(t) = private_dir::read_secret(&path)? {
        if t.trim().len() >= 16 {
            return Ok(t.trim().to_string());
        }
        // Too short to be ours (an interrupted write): made again.
        let _ = std::fs::remove_file(&path);
    }
    let bytes = private_dir::random_bytes::<24>()
        .map_err(|e| format!("cannot read /dev/urandom for the admin token: {e}"))?;
    let token = private_dir::hex(&bytes);
    private_dir::write_new_secret(&path, &token)
        .map_err(|e| format!("cannot write the admin token to {}: {e}", path.display()))?;
    Ok(token)
}

/// The token a request carries (`Authorization: Bearer …` or `X-Espalier-Token: …`).
pub(super) fn token_of<'a>(req: &crate::http::Request<'a>) -> Option<&'a str> {
    req.header("x-espalier-token").or_else(|| {
        req.header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
    })
}
