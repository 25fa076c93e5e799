//! Content codings (RFC 9110 §8.4, §12.5.3): which of the codings a site offers — zstd,
//! brotli, gzip — an answer goes out in, from the request's `Accept-Encoding` and its
//! q-values; and which content types are worth compressing.
//!
//! Owns: that negotiation, pure. Must not touch: compressing ([`crate::compress`]) or the
//! answer's fields.

pub use crate::compress::Coding;

/// The q-value (0–1000) the client gives `token` in `Accept-Encoding`, `*` standing for any
/// coding it does not name; `None` when it names neither.
fn weight(accept: &str, token: &str) -> Option<u16> {
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or_default().trim();
        let q = parts
            .find_map(|p| {
                let p = p.trim();
                p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="))
            })
            .map_or(Some(1000), parse_q);
        let Some(q) = q else { continue };
        if name.eq_ignore_ascii_case(token) {
            return Some(q);
        }
        if name == "*" {
            star = Some(q);
        }
    }
    star
}

/// A qvalue (`0`, `0.5`, `1.000`) in thousandths; `None` when malformed (the item is ignored).
fn parse_q(text: &str) -> Option<u16> {
    let text = text.trim();
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = match whole {
        "0" => frac
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(3)
            .fold(0u16, |n, b| n * 10 + u16::from(b - b'0')),
        "1" if frac.bytes().all(|b| b == b'0') => 1000,
        _ => return None,
    };
    Some(thousandths)
}

/// The coding an answer goes out in: of `offered` (the site's order of preference), the one
/// the client weighs highest, the site's order breaking ties; `None` (identity) when the
/// client accepts none of them or sent no `Accept-Encoding`.
pub fn choose(accept: Option<&str>, offered: &[Coding]) -> Option<Coding> {
    let accept = accept?;
    let mut best: Option<(u16, Coding)> = None;
    for &c in offered {
        let q = weight(accept, c.token()).unwrap_or(0);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Whether answers of `content_type` are worth compressing: text, and the structured and
/// script types that are text underneath; not images, audio, video, archives or fonts
/// already compressed (woff2).
pub fn compressible(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let media = media.to_ascii_lowercase();
    media.starts_with("text/")
        || media.ends_with("+json")
        || media.ends_with("+xml")
        || matches!(
            media.as_str(),
            "application/json"
                | "application/javascript"
                | "application/xml"
                | "application/wasm"
                | "application/manifest+json"
                | "application/x-javascript"
                | "image/svg+xml"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "font/ttf"
                | "font/otf"
                | "application/vnd.ms-fontobject"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    #[test]
    fn the_clients_weights_then_the_sites_order_decide() {
        let all = [Zstd, Brotli, Gzip];
        assert_eq!(choose(Some("gzip, deflate, br, zstd"), &all), Some(Zstd));
        assert_eq!(choose(Some("gzip, deflate, br"), &all), Some(Brotli));
        assert_eq!(choose(Some("gzip;q=1.0, br;q=0.5"), &all), Some(Gzip));
        assert_eq!(choose(Some("br;q=0, gzip"), &all), Some(Gzip));
        assert_eq!(choose(Some("*"), &all), Some(Zstd));
        assert_eq!(choose(Some("*;q=0.1, gzip;q=0.5"), &all), Some(Gzip));
        assert_eq!(choose(Some("identity"), &all), None);
        assert_eq!(choose(Some(""), &all), None);
        assert_eq!(choose(None, &all), None);
        assert_eq!(choose(Some("GZIP"), &[Brotli, Gzip]), Some(Gzip));
        assert_eq!(
            choose(Some("br, gzip"), &[Gzip, Brotli]),
            Some(Gzip),
            "the site's order on ties"
        );
        // A malformed weight is ignored, not taken as 1.
        assert_eq!(choose(Some("br;q=2, gzip;q=0.2"), &all), Some(Gzip));
        assert_eq!(choose(Some("br;q=0.0001"), &all), None);
    }

    #[test]
    fn text_is_compressible_and_images_are_not() {
        assert!(compressible("text/html; charset=utf-8"));
        assert!(compressible("application/json"));
        assert!(compressible("application/ld+json"));
        assert!(compressible("image/svg+xml"));
        assert!(!compressible("image/png"));
        assert!(!compressible("font/woff2"));
        assert!(!compressible("application/octet-stream"));
    }
}
