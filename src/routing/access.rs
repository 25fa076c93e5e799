//! Who may come in: a site's (or a path's) `allow` and `deny` lists of addresses and
//! networks (IIS IP and Domain Restrictions, nginx `allow`/`deny`), and the client address
//! they are checked against — the peer's (or the PROXY protocol's), or the one a trusted
//! proxy put in `X-Forwarded-For`, never one anyone else wrote there.
//!
//! Owns: CIDR parsing and matching, the lists' verdict and the `X-Forwarded-For` walk, pure.
//! Must not touch: requests or answers (the handlers ask and answer).

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};

/// An address or a network: `203.0.113.7`, `203.0.113.0/24`, `2001:db8::/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cidr {
    /// The network's first address (the host bits cleared).
    net: IpAddr,
    prefix: u8,
}

/// An IPv4 address written in IPv6 (`::ffff:1.2.3.4`, as a dual-stack socket reports an IPv4
/// peer) is the IPv4 address: lists compare it as written for IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn bits(ip: IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
        IpAddr::V6(v6) => (u128::from(v6), 128),
    }
}

fn masked(value: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        let keep = width - prefix;
        (value >> keep) << keep
    }
}

impl Cidr {
    /// Parses `ADDR` or `ADDR/PREFIX`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let ip: IpAddr = addr.trim().parse().map_err(|_| {
            format!("`{text}` is not an address or network; write it like \"203.0.113.0/24\" or \"2001:db8::/32\"")
        })?;
        let ip = canonical(ip);
        let (value, width) = bits(ip);
        let prefix = match prefix {
            None => width,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= width)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0–{width}"))?,
        };
        let net = masked(value, width, prefix);
        let net = match ip {
            IpAddr::V4(_) => IpAddr::V4((net as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(net)),
        };
        Ok(Cidr { net, prefix })
    }

    /// Whether `ip` lies in it.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let ((value, width), (net, net_width)) = (bits(ip), bits(self.net));
        width == net_width && masked(value, width, self.prefix) == net
    }
}

/// What a refused client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DenyAction {
    /// This status (403 by default, 404 to say nothing of what is there).
    Status(u16),
    /// The connection closed without an answer (a reset where the transport allows).
    Close,
}

impl Default for DenyAction {
    fn default() -> Self {
        DenyAction::Status(403)
    }
}

/// A site's or a path's lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessList {
    /// When not empty, only these may come in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<Cidr>,
    /// Never these, even when allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Cidr>,
}

impl AccessList {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether `ip` may come in: not denied, and allowed when there is an allow list.
    pub fn permits(&self, ip: IpAddr) -> bool {
        !self.deny.iter().any(|c| c.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|c| c.contains(ip)))
    }
}

/// The client a site believes: `peer` (the connection's, or its PROXY protocol header's),
/// unless `peer` is a trusted proxy — then the last address of `X-Forwarded-For` that is
/// not a trusted proxy itself, walking from the right (each proxy appends the address it
/// got the request from; only the entries our proxies added can be believed). A malformed
/// entry ends the walk at the proxy that appended it.
///
/// `forwarded_for` is every `X-Forwarded-For` line of the request, in the order received:
/// they are one comma-joined list (RFC 9110 §5.3), so a proxy that adds a line of its own
/// (HAProxy's `option forwardfor`) puts its entry last, after the client's. Reading only the
/// first line would believe whatever the client wrote there.
pub fn client<'a>(
    peer: IpAddr,
    forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    trusted: &[Cidr],
) -> IpAddr {
    let trusts = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !trusts(peer) {
        return peer;
    }
    let mut client = peer;
    for entry in forwarded_for.rev().flat_map(|line| line.rsplit(',')) {
        match entry.trim().parse::<IpAddr>() {
            Ok(ip) => {
                client = ip;
                if !trusts(ip) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_addresses_in_both_families() {
        let c = Cidr::parse("203.0.113.0/24").unwrap();
        assert!(c.contains(ip("203.0.113.200")));
        assert!(!c.contains(ip("203.0.114.1")));
        assert!(
            c.contains(ip("::ffff:203.0.113.9")),
            "a mapped IPv4 is IPv4"
        );
        assert!(
            Cidr::parse("203.0.113.77/24")
                .unwrap()
                .contains(ip("203.0.113.1")),
            "host bits ignored"
        );
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")) && !v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("203.0.113.1")));
        assert!(Cidr::parse("::1").unwrap().contains(ip("::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("example.com").is_err());
    }

    #[test]
    fn deny_wins_and_an_allow_list_keeps_everyone_else_out() {
        let list = AccessList {
            allow: vec![Cidr::parse("10.0.0.0/8").unwrap()],
            deny: vec![Cidr::parse("10.6.6.6").unwrap()],
        };
        assert!(list.permits(ip("10.1.2.3")));
        assert!(!list.permits(ip("10.6.6.6")));
        assert!(!list.permits(ip("192.0.2.1")));
        let deny_only = AccessList {
            allow: Vec::new(),
            deny: vec![Cidr::parse("192.0.2.0/24").unwrap()],
        };
        assert!(deny_only.permits(ip("198.51.100.1")) && !deny_only.permits(ip("192.0.2.1")));
    }

    #[test]
    fn forwarded_for_is_believed_from_trusted_proxies_only() {
        let trusted = [Cidr::parse("10.1.0.0/16").unwrap()];
        // From a trusted proxy: the entry it appended.
        assert_eq!(
            client(ip("10.1.0.5"), ["192.0.2.7"].into_iter(), &trusted),
            ip("192.0.2.7")
        );
        // A client's forged entries before the real one are not believed.
        assert_eq!(
            client(ip("10.1.0.5"), ["6.6.6.6, 192.0.2.7"].into_iter(), &trusted),
            ip("192.0.2.7")
        );
        // Two proxies of ours in a row.
        assert_eq!(
            client(
                ip("10.1.0.5"),
                ["192.0.2.7, 10.1.0.9"].into_iter(),
                &trusted
            ),
            ip("192.0.2.7")
        );
        // From anyone else, the header is ignored.
        assert_eq!(
            client(ip("198.51.100.1"), ["10.1.0.5"].into_iter(), &trusted),
            ip("198.51.100.1")
        );
        // Garbage stops the walk at the proxy.
        assert_eq!(
            client(ip("10.1.0.5"), ["1.2.3.4, bogus"].into_iter(), &trusted),
            ip("10.1.0.5")
        );
        assert_eq!(
            client(ip("10.1.0.5"), [].into_iter(), &trusted),
            ip("10.1.0.5")
        );
    }

    #[test]
    fn every_forwarded_for_line_counts_as_one_list() {
        let trusted = [Cidr::parse("10.1.0.0/16").unwrap()];
        // HAProxy's `option forwardfor` adds its own line after the client's forged one:
        // the last line's entry is the one our proxy wrote.
        let lines = ["10.1.0.77", "192.0.2.7"];
        assert_eq!(
            client(ip("10.1.0.5"), lines.into_iter(), &trusted),
            ip("192.0.2.7")
        );
        // A trusted entry on the last line walks on into the line before it.
        let lines = ["6.6.6.6, 192.0.2.9", "10.1.0.9"];
        assert_eq!(
            client(ip("10.1.0.5"), lines.into_iter(), &trusted),
            ip("192.0.2.9")
        );
        // Garbage on a later line stops the walk there, not at the first line.
        let lines = ["192.0.2.9", "bogus"];
        assert_eq!(
            client(ip("10.1.0.5"), lines.into_iter(), &trusted),
            ip("10.1.0.5")
        );
    }
}
