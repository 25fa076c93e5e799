//! Human units in config files: durations (`29h`, `5m`, `250ms`), sizes (`2GiB`, `16KiB`,
//! `512MB`) and percentages (`50%`).
//!
//! Owns: the accepted spellings and their error messages. Must not touch: anything else.

use std::time::Duration;

/// Parses a duration: a number followed by `ms`, `s`, `m`, `h` or `d`; parts may be chained
/// (`1h30m`). A bare number is seconds, the unit IIS's own settings mostly use.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || {
        format!("`{text}` is not a duration; write it like \"30s\", \"5m\", \"29h\" or \"250ms\"")
    };
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match rest[..unit_len].trim() {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(value * factor).map_err(|_| bad())?;
    }
    Ok(total)
}

/// Parses a size in bytes: a number with an optional unit `B`, `K`/`KB`/`KiB`, `M…`, `G…`,
/// `T…`. Binary (1024-based) for every spelling: memory limits are what these describe, and
/// a `2GB` memory limit that meant 2·10⁹ would surprise nobody more than an operator.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let bad = || format!("`{text}` is not a size; write it like \"16KiB\", \"512MiB\" or \"2GiB\"");
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    if split == 0 {
        return Err(bad());
    }
    let value: f64 = t[..split].parse().map_err(|_| bad())?;
    let shift = match t[split..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Parses a percentage such as `50%` or `250%` (more than one CPU) into a fraction (0.5, 2.5).
pub fn parse_percent(text: &str) -> Result<f64, String> {
    let bad = || format!("`{text}` is not a percentage; write it like \"50%\"");
    let number = text.trim().strip_suffix('%').ok_or_else(bad)?;
    let v: f64 = number.trim().parse().map_err(|_| bad())?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{text}` must be more than 0%"));
    }
    Ok(v / 100.0)
}

/// Prints bytes with a binary unit, one decimal: `1.5 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Prints a duration compactly (`29h`, `1m30s`, `250ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let mut s = d.as_secs();
    let mut out = String::new();
    for (unit, len) in [("d", 86400), ("h", 3600), ("m", 60)] {
        if s >= len {
            out.push_str(&format!("{}{unit}", s / len));
            s %= len;
        }
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("29h").unwrap(),
            Duration::from_secs(29 * 3600)
        );
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        for bad in ["", "h", "5 fortnights", "-3s", "5x"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("16k").unwrap(), 16384);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("1.5 MiB").unwrap(), 1572864);
        for bad in ["", "GiB", "2 gallons", "-1"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(format_bytes(1536 << 20), "1.5 GiB");
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("50%").unwrap(), 0.5);
        assert_eq!(parse_percent("250 %").unwrap(), 2.5);
        assert!(parse_percent("50").is_err());
        assert!(parse_percent("0%").is_err());
    }
}
