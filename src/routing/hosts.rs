//! Choosing a site by the request's host name, as HTTP.sys chooses among the bindings of one
//! address: an exact name first, then the longest matching wildcard, then the address's
//! default site (a binding without a host).
//!
//! Owns: the matching rules, pure — host names compare case-insensitively, without the port
//! (the caller strips it) and without a trailing dot (`shop.example.` is `shop.example`); a
//! wildcard is written `*.shop.example` and matches any name ending in `.shop.example`, at any
//! depth, but not `shop.example` itself (as nginx's `*.` names). Must not touch: requests or
//! sites (it answers with an index).

use std::collections::HashMap;

/// The host routes of one address, ready to match. Built once per worker thread.
///
/// A lookup costs the same with ten thousand names as with ten: exact names in a hash map,
/// wildcards in a hash map by suffix, tried from the longest suffix the name has (one probe
/// per dot in it), never a scan of the names.
#[derive(Debug, Clone, Default)]
pub struct HostTable {
    /// Exact names, lower case, without a trailing dot.
    exact: HashMap<Box<str>, usize>,
    /// Wildcard suffixes with their leading dot (`.shop.example` for `*.shop.example`).
    wildcards: HashMap<Box<str>, usize>,
    /// The longest of them: only a name's suffixes up to this long are looked up.
    longest_wildcard: usize,
    default: Option<usize>,
}

/// A host name as bindings are compared: lower case, without a trailing dot.
pub fn normal_host(host: &str) -> String {
    normal_host_borrowed(host).into_owned()
}

/// [`normal_host`], borrowed when `host` is so already (a configuration's 10,000 names are
/// compared at every change, and each copied was an allocation).
pub fn normal_host_borrowed(host: &str) -> std::borrow::Cow<'_, str> {
    let bare = host.strip_suffix('.').unwrap_or(host);
    if bare.bytes().any(|b| b.is_ascii_uppercase()) {
        bare.to_ascii_lowercase().into()
    } else {
        bare.into()
    }
}

/// The longest host name (RFC 1035), for the lookup's stack buffer.
const MAX_HOST: usize = 253;

impl HostTable {
    /// From `(host, site)` pairs; a `None` host is the default site. The first binding of a
    /// name wins, as the first of several did before.
    pub fn new(routes: &[(Option<String>, usize)]) -> Self {
        let mut table = HostTable::default();
        // Sized once: a hoster's port has 10,000 names, and each thread of the dispatcher
        // makes its table again at every site added.
        table.exact.reserve(routes.len());
        for (host, site) in routes {
            match host.as_deref().map(normal_host) {
                None => table.default = table.default.or(Some(*site)),
                Some(h) => {
                    let (map, key) = match h.strip_prefix('*') {
                        Some(suffix) => (&mut table.wildcards, suffix.to_string()),
                        None => (&mut table.exact, h),
                    };
                    map.entry(key.into_boxed_str()).or_insert(*site);
                }
            }
        }
        table.longest_wildcard = table.wildcards.keys().map(|k| k.len()).max().unwrap_or(0);
        table
    }

    /// The site for a request naming `host` (without its port), or `None`: no site of this
    /// address answers it and there is no default.
    pub fn site(&self, host: Option<&str>) -> Option<usize> {
        let Some(host) = host.map(|h| h.strip_suffix('.').unwrap_or(h)) else {
            return self.default;
        };
        // No binding names a longer host (checked with the config): the client's name is
        // bounded before anything is hashed or scanned.
        if (self.exact.is_empty() && self.wildcards.is_empty()) || host.len() > MAX_HOST {
            return self.default;
        }
        // Lower case without allocating: most clients send it so already.
        let mut buf = [0u8; MAX_HOST];
        let host = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            let lower = &mut buf[..host.len()];
            lower.copy_from_slice(host.as_bytes());
            lower.make_ascii_lowercase();
            // ASCII lower-casing keeps UTF-8 valid.
            std::str::from_utf8(lower).unwrap_or(host)
        } else {
            host
        };
        if let Some(site) = self.exact.get(host) {
            return Some(*site);
        }
        if !self.wildcards.is_empty() {
            // `a.b.shop.example`: `.b.shop.example`, then `.shop.example`, then `.example` —
            // the longest wildcard first; never the whole name (`*.x` does not match `x`).
            // Only suffixes as long as a wildcard can be are looked up.
            let from = host.len().saturating_sub(self.longest_wildcard).max(1);
            for (i, _) in host.match_indices('.').filter(|&(i, _)| i >= from) {
                if let Some(site) = self.wildcards.get(&host[i..]) {
                    return Some(*site);
                }
            }
        }
        self.default
    }

    /// The one site of an address with a single default binding and no names: routing by
    /// host is skipped entirely there.
    pub fn only_default(&self) -> Option<usize> {
        (self.exact.is_empty() && self.wildcards.is_empty())
            .then_some(self.default)
            .flatten()
    }
}

/// Why a binding's host name is refused, or `None` when it is a host name: letters, digits,
/// `-` and `.` in labels of 1 to 63 characters, at most 253 in all, with an optional `*.`
/// at the very start (a wildcard anywhere else matches nothing any client sends).
pub fn host_name_problem(host: &str) -> Option<String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    let name = name.strip_prefix("*.").unwrap_or(name);
    if name.contains('*') {
        return Some(format!("`{host}`: `*` may only start a host name, as in `*.shop.example` (a wildcard in the middle matches no name)"));
    }
    if name.is_empty() || name.len() > 253 {
        return Some(format!("`{host}` is not a host name (1 to 253 characters)"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Some(format!(
                "`{host}` is not a host name: each part between dots has 1 to 63 characters"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Some(format!("`{host}` is not a host name: `{c}` cannot appear in one (letters, digits, `-` and `.`; write internationalized names in their xn-- form)"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> HostTable {
        HostTable::new(&[
            (Some("shop.example".into()), 0),
            (Some("*.shop.example".into()), 1),
            (Some("*.eu.shop.example".into()), 2),
            (Some("Blog.Example.".into()), 3),
        ])
    }

    #[test]
    fn exact_names_ignore_case_and_a_trailing_dot() {
        let t = table();
        assert_eq!(t.site(Some("shop.example")), Some(0));
        assert_eq!(t.site(Some("SHOP.Example.")), Some(0));
        assert_eq!(t.site(Some("blog.example")), Some(3));
    }

    #[test]
    fn the_longest_wildcard_wins_and_never_the_bare_name() {
        let t = table();
        assert_eq!(t.site(Some("www.shop.example")), Some(1));
        assert_eq!(t.site(Some("a.b.shop.example")), Some(1));
        assert_eq!(t.site(Some("x.eu.shop.example")), Some(2));
        assert_eq!(t.site(Some("eu.shop.example")), Some(1));
        assert_eq!(t.site(Some("xshop.example")), None);
        assert_eq!(t.site(Some("other.example")), None);
        assert_eq!(t.site(None), None);
    }

    #[test]
    fn the_default_site_takes_the_rest() {
        let t = HostTable::new(&[(Some("a.example".into()), 0), (None, 1)]);
        assert_eq!(t.site(Some("b.example")), Some(1));
        assert_eq!(t.site(None), Some(1));
        assert_eq!(t.site(Some("A.EXAMPLE")), Some(0));
        assert_eq!(t.only_default(), None);
        assert_eq!(HostTable::new(&[(None, 4)]).only_default(), Some(4));
    }

    #[test]
    fn ten_thousand_names_are_each_found_in_any_case() {
        let routes: Vec<(Option<String>, usize)> = (0..10_000)
            .map(|i| (Some(format!("site{i}.example")), i))
            .chain([(Some("*.wild.example".into()), 10_000)])
            .collect();
        let t = HostTable::new(&routes);
        for i in (0..10_000).step_by(7) {
            assert_eq!(t.site(Some(&format!("site{i}.example"))), Some(i));
            assert_eq!(t.site(Some(&format!("SITE{i}.Example."))), Some(i));
        }
        assert_eq!(t.site(Some("a.b.wild.example")), Some(10_000));
        assert_eq!(t.site(Some("site10000.example")), None);
        // Longer than any host name: no binding names it.
        assert_eq!(t.site(Some(&"A".repeat(300))), None);
    }

    /// A client's `Host` is bounded before it is hashed: a 10 000-character name of dots
    /// (each dot once a wildcard lookup of the rest) goes to the default site at once, and
    /// only suffixes as long as the longest wildcard are ever looked up.
    #[test]
    fn a_hostile_host_of_many_labels_is_bounded() {
        let t = HostTable::new(&[
            (Some("*.shop.example".into()), 1),
            (Some("a.example".into()), 2),
            (None, 9),
        ]);
        assert_eq!(t.site(Some(&"a.".repeat(5_000))), Some(9));
        assert_eq!(t.site(Some(&"A.".repeat(5_000))), Some(9));
        // At the longest legal length, with 120 labels, the wildcard still matches.
        let deep = format!("{}shop.example", "x.".repeat(120));
        assert!(deep.len() <= 253);
        assert_eq!(t.site(Some(&deep)), Some(1));
        assert_eq!(t.site(Some(&deep.replace("shop", "shoq"))), Some(9));
    }

    #[test]
    fn non_ascii_hosts_do_not_panic() {
        let t = table();
        assert_eq!(t.site(Some("é.shop.example")), Some(1));
        assert_eq!(t.site(Some("ééééééééééééé")), None);
    }

    #[test]
    fn host_names_are_checked() {
        assert_eq!(host_name_problem("shop.example"), None);
        assert_eq!(host_name_problem("*.shop.example"), None);
        assert_eq!(host_name_problem("localhost"), None);
        assert!(host_name_problem("shop.*.example")
            .unwrap()
            .contains("may only start"));
        assert!(host_name_problem("sh op.example").unwrap().contains("` `"));
        assert!(host_name_problem("shop..example").is_some());
        assert!(host_name_problem("*").is_some());
        assert!(host_name_problem(&"a".repeat(64)).is_some());
    }
}
