//! Small grammars of the config: bindings (`http://IP:PORT[:HOST]`), names, times of day.
//!
//! Owns: these parsers, pure. Must not touch: where their results go.

use super::Binding;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub(super) fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `HH:MM` or `HH:MM:SS` → seconds since midnight.
pub(super) fn parse_time_of_day(t: &str) -> Option<u32> {
    let parts: Vec<u32> = t
        .trim()
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [h, m] if *h < 24 && *m < 60 => Some(h * 3600 + m * 60),
        [h, m, s] if *h < 24 && *m < 60 && *s < 60 => Some(h * 3600 + m * 60 + s),
        _ => None,
    }
}

/// Parses `http://IP:PORT[:HOST]` or `https://…`; `*` stands for every IPv4 address, as in IIS.
pub fn parse_binding(text: &str) -> Result<Binding, String> {
    let fix = "write it like \"http://127.0.0.1:8080\", \"http://[::1]:8080\" or \"https://*:443:example.com\"";
    let (tls, rest) = match text.split_once("://") {
        Some(("http", rest)) => (false, rest),
        Some(("https", rest)) => (true, rest),
        Some((scheme, _)) => return Err(format!("`{text}`: unknown protocol `{scheme}`; {fix}")),
        None => return Err(format!("`{text}` has no protocol; {fix}")),
    };
    let (ip_text, after) = if let Some(r) = rest.strip_prefix('[') {
        let (ip, after) = r
            .split_once(']')
            .ok_or_else(|| format!("`{text}`: unclosed `[`; {fix}"))?;
        (
            ip,
            after
                .strip_prefix(':')
                .ok_or_else(|| format!("`{text}` has no port; {fix}"))?,
        )
    } else {
        rest.split_once(':')
            .ok_or_else(|| format!("`{text}` has no port; {fix}"))?
    };
    let ip: IpAddr = if ip_text == "*" {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        ip_text
            .parse()
            .map_err(|_| format!("`{text}`: `{ip_text}` is not an IP address; {fix}"))?
    };
    let (port_text, host) = match after.split_once(':') {
        Some((p, h)) if !h.is_empty() => (p, Some(h.to_ascii_lowercase())),
        Some((p, _)) => (p, None),
        None => (after.trim_end_matches('/'), None),
    };
    let port: u16 = port_text
        .parse()
        .map_err(|_| format!("`{text}`: `{port_text}` is not a port number; {fix}"))?;
    Ok(Binding {
        addr: SocketAddr::new(ip, port),
        host,
        tls,
    })
}
