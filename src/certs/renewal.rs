//! When a certificate is renewed: at two thirds of its lifetime, or half of it for one that
//! lives under ten days (as Caddy and certbot's defaults do, which short-lived certificates
//! need: a 6-day one renewed at two thirds has two days left for failures), and a
//! certificate's lifetime read from its PEM chain.
//!
//! Owns: that rule ([`renew_at`]) and [`lifetime`], pure. Must not touch: ordering (the
//! master's) or files.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Lifetimes below this are renewed at half, not two thirds.
const SHORT: Duration = Duration::from_secs(10 * 24 * 3600);

/// When a certificate valid from `not_before` to `not_after` is to be renewed.
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let life = not_after.duration_since(not_before).unwrap_or_default();
    let used = if life < SHORT { life / 2 } else { life * 2 / 3 };
    not_before + used
}

/// The leaf's `notBefore` and `notAfter` in a PEM chain (leaf first).
pub fn lifetime(chain_pem: &[u8]) -> Result<(SystemTime, SystemTime), String> {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem)
        .next()
        .ok_or("holds no certificate")?
        .map_err(|e| format!("is not PEM: {e}"))?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(&leaf).map_err(|e| format!("does not parse: {e}"))?;
    let at = |t: i64| UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
    let validity = parsed.validity();
    Ok((
        at(validity.not_before.timestamp()),
        at(validity.not_after.timestamp()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;

    #[test]
    fn a_long_life_renews_at_two_thirds_a_short_one_at_half() {
        let from = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ninety = from + Duration::from_secs(90 * DAY);
        assert_eq!(renew_at(from, ninety), from + Duration::from_secs(60 * DAY));
        let six = from + Duration::from_secs(6 * DAY);
        assert_eq!(renew_at(from, six), from + Duration::from_secs(3 * DAY));
        // A certificate that ends before it starts is due at once.
        assert_eq!(renew_at(ninety, from), ninety);
    }

    #[test]
    fn a_chains_lifetime_is_its_leafs() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2026, 4, 1);
        let pem = params.self_signed(&key).unwrap().pem();
        let (from, to) = lifetime(pem.as_bytes()).unwrap();
        assert_eq!(
            to.duration_since(from).unwrap(),
            Duration::from_secs(90 * DAY)
        );
        assert!(lifetime(b"not a certificate").is_err());
    }
}
