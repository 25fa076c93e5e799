//! How large a datagram a QUIC connection may grow to: the bound its path-MTU discovery
//! (RFC 8899's, quinn's) searches up to, from the MTU of the interface the connection arrives
//! on.
//!
//! Why not quinn's default: it searches up to 1 452 bytes (an Ethernet frame) whatever the
//! link, where TCP's segments follow the interface (64 KiB on loopback, 9 000 bytes on a
//! jumbo-frame LAN). At 1 452 bytes a 20 KB answer is fifteen datagrams, each sealed,
//! header-protected, tracked and acknowledged on its own; measured on loopback, that was two
//! thirds of what HTTP/3 cost over HTTP/2 for such a page (docs/performance.md). The search is safe past
//! the real path's MTU: a probe that does not arrive only ends it (RFC 8899 §5), and a path
//! that later shrinks is found by loss (black-hole detection).
//!
//! With segmentation offload quinn sends up to [`GSO_DATAGRAMS`] datagrams in one `sendmsg`,
//! and the kernel refuses a UDP send past 64 KiB (quinn takes that for a lost probe and drops
//! the burst), so where GSO is on the bound is a tenth of that: measured, 6.5 KB datagrams
//! in bursts cost less than 64 KiB ones sent one by one.
//!
//! Owns: that arithmetic and which interface a connection's address belongs to. Must not
//! touch: sockets or reading the interfaces (see [`crate::os::net::link_mtus`]), or quinn's
//! configuration (see [`super::quic`]).

use std::net::IpAddr;

/// QUIC's smallest datagram (RFC 9000 §14): no path carries less.
pub const QUIC_MIN: u16 = 1_200;
/// The largest UDP payload (quinn's upper limit: a 65 535-byte IPv6 payload less UDP's 8).
pub const UDP_MAX: u16 = 65_527;
/// Datagrams quinn 0.11 puts in one GSO send (its private `MAX_TRANSMIT_SEGMENTS`).
pub const GSO_DATAGRAMS: u32 = 10;
/// The most UDP payload one send may carry: a 65 535-byte IPv4 packet less its 20-byte
/// header and UDP's 8 (an IPv6 send may carry a little more; the smaller serves both).
const SEND_MAX: u32 = 65_507;

/// The largest UDP payload a connection's path-MTU discovery may search up to over a link of
/// `link_mtu` bytes (IP packet): the link's MTU less the IP and UDP headers, a tenth of a
/// send where GSO bursts them, never below QUIC's minimum.
pub fn datagram_bound(link_mtu: u32, ipv6: bool, gso: bool) -> u16 {
    let headers = if ipv6 { 40 + 8 } else { 20 + 8 };
    let mut bound = link_mtu.saturating_sub(headers);
    if gso {
        bound = bound.min(SEND_MAX / GSO_DATAGRAMS);
    }
    bound.clamp(QUIC_MIN.into(), UDP_MAX.into()) as u16
}

/// The MTU of the link that carries a connection to local address `local`: the interface
/// holding that address; for a loopback address, the loopback interface's (it holds
/// 127.0.0.1 alone, yet carries all of 127.0.0.0/8). `None` for an address no interface
/// holds (the caller keeps quinn's Ethernet-sized default).
pub fn link_mtu(local: IpAddr, links: &[(IpAddr, u32)]) -> Option<u32> {
    let local = local.to_canonical();
    let exact = links.iter().find(|(ip, _)| *ip == local);
    let loopback = || (links.iter()).find(|(ip, _)| local.is_loopback() && ip.is_loopback());
    exact.or_else(loopback).map(|&(_, mtu)| mtu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_the_links_mtu_less_the_headers_and_a_tenth_of_a_send_with_gso() {
        // Ethernet: 1 472 over IPv4, 1 452 over IPv6 (quinn's default for both).
        assert_eq!(datagram_bound(1_500, false, true), 1_472);
        assert_eq!(datagram_bound(1_500, true, true), 1_452);
        // A jumbo-frame LAN: the whole frame one by one; bursts of ten fit one send.
        assert_eq!(datagram_bound(9_000, false, false), 8_972);
        assert_eq!(datagram_bound(9_000, false, true), 6_550);
        // Loopback (64 KiB): its MTU less the headers without GSO; never past UDP's largest.
        assert_eq!(datagram_bound(65_536, true, false), 65_488);
        assert_eq!(datagram_bound(65_536, false, false), 65_508);
        assert_eq!(datagram_bound(100_000, true, false), UDP_MAX);
        assert_eq!(datagram_bound(65_536, false, true), 6_550);
        assert!(u32::from(datagram_bound(65_536, true, true)) * GSO_DATAGRAMS <= SEND_MAX);
        // A link smaller than QUIC needs (or an MTU misread as 0): QUIC's minimum.
        assert_eq!(datagram_bound(1_280, true, false), 1_232);
        assert_eq!(datagram_bound(1_000, false, true), QUIC_MIN);
        assert_eq!(datagram_bound(0, true, true), QUIC_MIN);
        assert_eq!(datagram_bound(u32::MAX, false, false), UDP_MAX);
    }

    #[test]
    fn a_connection_takes_the_mtu_of_the_interface_holding_its_local_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let links = [
            (ip("127.0.0.1"), 65_536),
            (ip("10.0.0.5"), 9_000),
            (ip("192.0.2.7"), 1_500),
            (ip("::1"), 65_536),
            (ip("2001:db8::7"), 1_500),
        ];
        assert_eq!(link_mtu(ip("10.0.0.5"), &links), Some(9_000));
        assert_eq!(link_mtu(ip("192.0.2.7"), &links), Some(1_500));
        assert_eq!(link_mtu(ip("2001:db8::7"), &links), Some(1_500));
        // All of 127.0.0.0/8 is loopback's; an IPv4-mapped address is its IPv4 one.
        assert_eq!(link_mtu(ip("127.0.0.9"), &links), Some(65_536));
        assert_eq!(link_mtu(ip("::ffff:10.0.0.5"), &links), Some(9_000));
        assert_eq!(link_mtu(ip("::1"), &links), Some(65_536));
        // An address no interface holds (gone since the worker started): no bound of ours.
        assert_eq!(link_mtu(ip("203.0.113.1"), &links), None);
        assert_eq!(link_mtu(ip("127.0.0.1"), &[]), None);
    }
}
