//! The configuration reference (docs/reference.md) held to the config's own types: every key
//! the raw tables accept has a row, and every row names a key they accept.

/// The keys a raw table accepts, as serde lists them when one is unknown: the config's own
/// types say what the reference must hold.
fn accepted<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> Vec<String> {
    let e = toml::from_str::<T>("zz_no_such_key = 1")
        .unwrap_err()
        .to_string();
    let listed = e
        .split("expected one of")
        .nth(1)
        .unwrap_or_else(|| panic!("{e}"));
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// Every key the config accepts has a row in the reference (docs/reference.md) — the four
/// tables headed `| key | default | meaning`, in the file's order (the server, pools,
/// upstreams, sites and their paths) — and every
/// row there names a key it accepts: a key added, renamed or removed fails here until the
/// reference says so.
#[test]
fn the_reference_has_a_row_for_every_key_and_no_other() {
    use super::raw::*;
    let prefixed = |prefix: &str, keys: Vec<String>, tables: &[&str]| -> Vec<String> {
        keys.into_iter()
            .filter(|k| !tables.contains(&k.as_str()))
            .map(|k| format!("{prefix}{k}"))
            .collect::<Vec<_>>()
    };
    let mut wanted: Vec<Vec<String>> = vec![
        [
            prefixed(
                "",
                accepted::<RawServer>(),
                &["limits", "acme", "tracing", "cluster"],
            ),
            prefixed("tracing.", accepted::<RawTracing>(), &[]),
            prefixed("cluster.", accepted::<RawCluster>(), &[]),
            prefixed("limits.", accepted::<RawLimits>(), &[]),
            prefixed("acme.", accepted::<RawAcme>(), &["dns"]),
            prefixed("acme.dns.", accepted::<RawAcmeDns>(), &[]),
        ]
        .concat(),
        [
            prefixed(
                "",
                accepted::<RawPool>(),
                &["recycle", "rapid_fail", "isolation"],
            ),
            prefixed("recycle.", accepted::<RawRecycle>(), &[]),
            prefixed("isolation.", accepted::<RawIsolation>(), &[]),
            prefixed("rapid_fail.", accepted::<RawRapidFail>(), &[]),
        ]
        .concat(),
        [
            prefixed("", accepted::<RawUpstream>(), &["health", "passive", "tls"]),
            prefixed("health.", accepted::<RawHealthCheck>(), &[]),
            prefixed("passive.", accepted::<RawPassiveCheck>(), &[]),
            prefixed("tls.", accepted::<RawUpstreamTls>(), &[]),
        ]
        .concat(),
        [
            prefixed("site.", accepted::<RawSite>(), &["app"]),
            prefixed("app.", accepted::<RawApp>(), &[]),
        ]
        .concat(),
    ];
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference.md")).unwrap();
    // Each reference table's rows: the keys named in their first cell.
    let mut tables: Vec<Vec<String>> = Vec::new();
    let mut rows: Option<Vec<String>> = None;
    for line in readme.lines() {
        if line.starts_with("| key | default | meaning") {
            rows = Some(Vec::new());
        } else if let Some(r) = rows.as_mut() {
            if !line.starts_with('|') {
                tables.extend(rows.take());
            } else if !line.starts_with("|--") && !line.starts_with("| --") {
                let first = line.split('|').nth(1).unwrap_or_default();
                r.extend(first.split('`').skip(1).step_by(2).map(String::from));
            }
        }
    }
    tables.extend(rows);
    assert_eq!(
        tables.len(),
        4,
        "the reference's four tables, in the file's order (server, pool, upstream, site)"
    );
    for (table, wanted) in tables.iter_mut().zip(&mut wanted) {
        table.sort();
        wanted.sort();
        let missing: Vec<&String> = wanted.iter().filter(|k| !table.contains(k)).collect();
        let stale: Vec<&String> = table.iter().filter(|k| !wanted.contains(k)).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "docs/reference.md: keys with no row {missing:?}, rows of no key {stale:?}"
        );
    }
}
