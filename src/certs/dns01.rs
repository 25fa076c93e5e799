//! DNS-01's names (RFC 8555 §8.4), as espalier's `[server.acme.dns]` lays them out: where a
//! name's challenge TXT record is looked for, the name in espalier's own zone that it is
//! delegated to with a CNAME (as acme-dns and Let's Encrypt's documentation describe), and
//! the TSIG key file `tsig-keygen` writes.
//!
//! Owns: those names and that file's reading — pure, no lookup. Must not touch: publishing
//! a record (`crate::server::acme_dns`) or ordering.

/// The label every challenge sits under.
const CHALLENGE_LABEL: &str = "_acme-challenge";

/// The name whose TXT record proves `identifier` (`shop.example` or `*.shop.example`:
/// a wildcard is proven at its parent's name, RFC 8555 §8.4).
pub fn challenge_name(identifier: &str) -> String {
    format!("{CHALLENGE_LABEL}.{}", base(identifier))
}

/// The name of `identifier`'s challenge in the delegated `zone`: a label made from the
/// name (the first 16 bytes of its SHA-256, hex), so that it needs no state to find again,
/// and a name and its wildcard share it (as they share their challenge name).
pub fn delegated_name(identifier: &str, zone: &str) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, base(identifier).as_bytes());
    let mut label = String::with_capacity(32);
    for b in &digest.as_ref()[..16] {
        label.push_str(&format!("{b:02x}"));
    }
    format!("{label}.{zone}")
}

/// The zone-file line the owner of `identifier` adds once to its zone: its challenge name,
/// a CNAME to its name in `zone`.
pub fn cname_line(identifier: &str, zone: &str) -> String {
    format!(
        "{}. CNAME {}.",
        challenge_name(identifier),
        delegated_name(identifier, zone)
    )
}

/// `identifier` without a wildcard's `*.`, lowercase.
fn base(identifier: &str) -> String {
    identifier
        .strip_prefix("*.")
        .unwrap_or(identifier)
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// The IP address a reverse-lookup name stands for (`1.0.0.127.in-addr.arpa`, or an
/// `ip6.arpa` name of 32 nibbles): the SNI an ACME directory sends in TLS-ALPN-01's handshake
/// for an IP address (RFC 8738 §6), since SNI cannot carry an address.
pub fn reverse_name_address(name: &str) -> Option<std::net::IpAddr> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if let Some(v4) = name.strip_suffix(".in-addr.arpa") {
        let mut octets: Vec<u8> = (v4.split('.').map(|o| o.parse().ok())).collect::<Option<_>>()?;
        if octets.len() != 4 {
            return None;
        }
        octets.reverse();
        let octets: [u8; 4] = octets.try_into().ok()?;
        return Some(std::net::IpAddr::from(octets));
    }
    let v6 = name.strip_suffix(".ip6.arpa")?;
    let nibbles: Vec<u8> = (v6.split('.').rev())
        .map(|n| {
            (n.len() == 1)
                .then(|| u8::from_str_radix(n, 16).ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = nibbles
        .chunks(2)
        .map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0))
        .collect();
    let bytes: [u8; 16] = (nibbles.len() == 32).then_some(bytes)?.try_into().ok()?;
    Some(std::net::IpAddr::from(bytes))
}

/// Whether `name` (without the final dot) is a DNS name a zone can have: labels of 1 to 63
/// letters, digits, `-` and `_`, at least two of them, 253 bytes at most.
pub fn is_zone_name(name: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.contains('.') && name.split('.').all(label)
}

/// A TSIG key as `tsig-keygen NAME` (BIND) or `keymgr -t NAME` (Knot, in BIND's form) writes
/// it: `key "NAME" { algorithm hmac-sha256; secret "BASE64"; };` — its name, algorithm and
/// secret (still base64), or what is wrong with it.
pub fn parse_tsig_key(text: &str) -> Result<(String, String, String), String> {
    // The statements alone: comments (`#`, `//`) dropped, then split at `{ } ;`.
    let text: String = (text.lines())
        .map(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split("//")
                .next()
                .unwrap_or("")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut words = text
        .split(|c: char| c == '{' || c == '}' || c == ';' || c.is_whitespace())
        .filter(|w| !w.is_empty());
    let unquote = |w: &str| w.trim_matches('"').to_string();
    if words.next() != Some("key") {
        return Err(
            "does not start with `key \"NAME\" {` (write what `tsig-keygen NAME` prints)".into(),
        );
    }
    let name = words.next().map(unquote).filter(|n| !n.is_empty());
    let name = name.ok_or("has no key name after `key`")?;
    let (mut algorithm, mut secret) = (None, None);
    while let Some(word) = words.next() {
        match word {
            "algorithm" => algorithm = words.next().map(|w| unquote(w).to_ascii_lowercase()),
            "secret" => secret = words.next().map(unquote),
            other => return Err(format!("has `{other}`, which a key statement does not")),
        }
    }
    let algorithm = algorithm.ok_or("has no `algorithm`")?;
    let secret = secret.ok_or("has no `secret`")?;
    Ok((name.trim_end_matches('.').to_string(), algorithm, secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_and_its_wildcard_share_their_challenge_and_delegation() {
        assert_eq!(
            challenge_name("*.Shop.example"),
            "_acme-challenge.shop.example"
        );
        assert_eq!(
            challenge_name("shop.example"),
            "_acme-challenge.shop.example"
        );
        let (a, b) = (
            delegated_name("*.shop.example", "acme.example.net"),
            delegated_name("shop.example", "acme.example.net"),
        );
        assert_eq!(a, b);
        assert!(a.ends_with(".acme.example.net"));
        assert_eq!(a.split('.').next().unwrap().len(), 32);
        assert_ne!(a, delegated_name("other.example", "acme.example.net"));
        assert_eq!(
            cname_line("shop.example", "acme.example.net"),
            format!("_acme-challenge.shop.example. CNAME {a}.")
        );
    }

    #[test]
    fn reverse_names_give_their_addresses() {
        assert_eq!(
            reverse_name_address("1.0.0.127.in-addr.arpa")
                .unwrap()
                .to_string(),
            "127.0.0.1"
        );
        let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.";
        assert_eq!(reverse_name_address(v6).unwrap().to_string(), "2001:db8::1");
        assert!(reverse_name_address("0.0.127.in-addr.arpa").is_none());
        assert!(reverse_name_address("300.0.0.127.in-addr.arpa").is_none());
        assert!(reverse_name_address("1.0.ip6.arpa").is_none());
        assert!(reverse_name_address("shop.example").is_none());
    }

    #[test]
    fn zone_names_are_checked() {
        assert!(is_zone_name("acme.example.net"));
        assert!(!is_zone_name("net"));
        assert!(!is_zone_name("acme..net"));
        assert!(!is_zone_name("-a.net"));
        assert!(!is_zone_name(&format!("{}.net", "a".repeat(64))));
        assert!(!is_zone_name("a b.net"));
    }

    #[test]
    fn a_tsig_keygen_file_is_read() {
        let file = "key \"espalier-acme\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0c2VjcmV0\";\n};\n";
        assert_eq!(
            parse_tsig_key(file).unwrap(),
            (
                "espalier-acme".into(),
                "hmac-sha256".into(),
                "c2VjcmV0c2VjcmV0".into()
            )
        );
        let commented =
            "# made by tsig-keygen\nkey k. { algorithm HMAC-SHA512; // note\n secret \"YQ==\"; };";
        assert_eq!(parse_tsig_key(commented).unwrap().1, "hmac-sha512");
        assert!(parse_tsig_key("zone x {}").is_err());
        assert!(parse_tsig_key("key \"k\" { secret \"YQ==\"; };")
            .unwrap_err()
            .contains("algorithm"));
        assert!(parse_tsig_key("key \"k\" { algorithm hmac-sha256; };")
            .unwrap_err()
            .contains("secret"));
        assert!(parse_tsig_key("key \"k\" { algorithm hmac-sha256; masters x; };").is_err());
    }
}
