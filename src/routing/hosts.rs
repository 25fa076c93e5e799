//! Choosing a site by the request's host name, as HTTP.sys chooses among the bindings of one
//! address: an exact name first, then the longest matching wildcard, then the address's
//! default site (a binding without a host).
//!
//! Owns: the matching rules, pure — host names compare case-insensitively, without the port
//! (the caller strips it) and without a trailing dot (`shop.example.` is `shop.example`); a
//! wildcard is written `*.shop.example` and matches any name ending in `.shop.example`, at any
//! depth, but not `shop.example` itself (as nginx's `*.` names). Must not touch: requests or
//! sites (it answers with an index).

/// The host routes of one address, ready to match. Built once per worker thread.
#[derive(Debug, Clone, Default)]
pub struct HostTable {
    /// Exact names, lower case, without a trailing dot.
    exact: Vec<(String, usize)>,
    /// Wildcard suffixes (`.shop.example`), longest first.
    wildcards: Vec<(String, usize)>,
    default: Option<usize>,
}

/// A host name as bindings are compared: lower case, without a trailing dot.
pub fn normal_host(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

impl HostTable {
    /// From `(host, site)` pairs; a `None` host is the default site.
    pub fn new(routes: &[(Option<String>, usize)]) -> Self {
        let mut table = HostTable::default();
        for (host, site) in routes {
            match host.as_deref().map(normal_host) {
                None => table.default = table.default.or(Some(*site)),
                Some(h) => match h.strip_prefix('*') {
                    Some(suffix) => table.wildcards.push((suffix.to_string(), *site)),
                    None => table.exact.push((h, *site)),
                },
            }
        }
        table
            .wildcards
            .sort_by_key(|(suffix, _)| std::cmp::Reverse(suffix.len()));
        table
    }

    /// The site for a request naming `host` (without its port), or `None`: no site of this
    /// address answers it and there is no default.
    pub fn site(&self, host: Option<&str>) -> Option<usize> {
        let Some(host) = host.map(|h| h.strip_suffix('.').unwrap_or(h)) else {
            return self.default;
        };
        if let Some((_, site)) = self
            .exact
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(host))
        {
            return Some(*site);
        }
        let wildcard = self.wildcards.iter().find(|(suffix, _)| {
            host.len() > suffix.len()
                && host.is_char_boundary(host.len() - suffix.len())
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        });
        wildcard.map(|(_, site)| *site).or(self.default)
    }

    /// The one site of an address with a single default binding and no names: routing by
    /// host is skipped entirely there.
    pub fn only_default(&self) -> Option<usize> {
        match (&self.exact[..], &self.wildcards[..], self.default) {
            ([], [], Some(site)) => Some(site),
            _ => None,
        }
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
