//! Validation of `[[upstream]]` groups, and of a path's `upstream` naming one or writing one
//! server's address in place of a group.
//!
//! Owns: the groups' rules and their host names' resolution (at `check`, `serve` and each
//! reload: a name that does not resolve is an error with its key, as a missing file is).
//! Must not touch: the sites beyond the name a path gives.

use super::super::locate::Seg;
use super::super::raw::{RawHealthCheck, RawPassiveCheck, RawUpstream, RawUpstreamTls, Scalar};
use super::super::upstream::*;
use super::Validator;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

impl Validator {
    /// The config's groups, each server's host name resolved.
    pub(super) fn read_upstreams(
        &mut self,
        raw: Vec<RawUpstream>,
        base: &Path,
    ) -> Vec<UpstreamSpec> {
        let mut groups: Vec<UpstreamSpec> = Vec::new();
        for (i, ru) in raw.into_iter().enumerate() {
            let at = |key: &'static str| [Seg::Key("upstream"), Seg::Index(i), Seg::Key(key)];
            let Some(name) = ru.name.clone() else {
                self.err(
                    &[Seg::Key("upstream"), Seg::Index(i)],
                    "this upstream has no `name`; add name = \"...\" (a site's path names it: upstream = \"...\")",
                );
                continue;
            };
            if !super::super::parse::valid_name(&name) || name.contains(':') {
                self.err(&at("name"), format!("`{name}` is not a group name; use letters, digits, `-` and `_` (an address is written in `servers`)"));
            }
            if groups.iter().any(|g| g.name == name) {
                self.err(&at("name"), format!("an upstream named `{name}` is already defined; give each group its own name"));
            }
            let group = self.upstream(i, name, ru, base);
            groups.push(group);
        }
        groups
    }

    fn upstream(&mut self, i: usize, name: String, ru: RawUpstream, base: &Path) -> UpstreamSpec {
        let at = |key: &'static str| [Seg::Key("upstream"), Seg::Index(i), Seg::Key(key)];
        let mut servers = Vec::new();
        let lines = ru.servers.unwrap_or_default();
        if lines.is_empty() {
            self.err(
                &at("servers"),
                format!("upstream `{name}` has no servers; add servers = [\"127.0.0.1:9001\", …]"),
            );
        }
        for line in &lines {
            match server_specs(line, base) {
                Ok(mut found) => servers.append(&mut found),
                Err(e) => self.err(&at("servers"), format!("`{line}` {e}")),
            }
        }
        if servers.len() > MAX_SERVERS {
            self.err(&at("servers"), format!("names {} servers (after resolving); a group takes at most {MAX_SERVERS}: split it", servers.len()));
        }
        if !servers.is_empty() && servers.iter().all(|s| s.backup) {
            self.err(&at("servers"), "every server is a backup; a backup serves only while no other server is up: remove `backup` from one");
        }
        let balance = match ru.balance.as_deref().map(parse_balance) {
            None => Balance::LeastTime,
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                self.err(&at("balance"), e);
                Balance::LeastTime
            }
        };
        let connect_timeout = self.nonzero_duration(
            &at("connect_timeout"),
            ru.connect_timeout,
            Duration::from_secs(5),
        );
        let response_timeout = self.nonzero_duration(
            &at("response_timeout"),
            ru.response_timeout,
            Duration::from_secs(60),
        );
        let tries = self.count_up_to(&at("tries"), ru.tries, 3, 16);
        let try_for = self.nonzero_duration(&at("try_for"), ru.try_for, Duration::from_secs(10));
        let passive = self.passive_check(i, ru.passive.unwrap_or_default());
        let tls = self.upstream_tls(i, &name, &servers, ru.tls, base);
        let protocol = self.choice(
            &at("protocol"),
            ru.protocol,
            Protocol::Http1,
            &Protocol::CHOICES,
        );
        let health = ru.health.map(|h| self.active_check(i, h, protocol));
        if ru.buffer.is_some() && protocol == Protocol::Http2 {
            self.err(&at("buffer"), "a group spoken to in HTTP/2 (protocol = \"http2\") streams its answers, gRPC's among them; remove it");
        }
        let buffer = match protocol {
            Protocol::Http2 => None,
            Protocol::Http1 => self.buffering(&at("buffer"), ru.buffer, None),
        };
        let cache_responses =
            self.response_cache(&at("cache_responses"), ru.cache_responses, protocol);
        let resolve = ru.resolve.map(|r| {
            let every = self.nonzero_duration(&at("resolve"), Some(r), Duration::from_secs(30));
            if !servers.is_empty() && !servers.iter().any(ServerSpec::is_host_name) {
                self.err(&at("resolve"), format!("resolves host names again, and every server of upstream `{name}` is an address or a socket; remove it"));
            }
            if every < Duration::from_secs(1) {
                self.err(&at("resolve"), format!("{every:?} would ask the resolver many times a second; write 1s or more"));
            }
            every
        });
        let sticky = ru.sticky.filter(|c| {
            let token = !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                self.err(
                    &at("sticky"),
                    format!("`{c}` is not a cookie name; use letters, digits, `-` and `_`"),
                );
            }
            token
        });
        UpstreamSpec {
            name,
            servers,
            balance,
            connect_timeout,
            response_timeout,
            tries,
            try_for,
            health,
            passive,
            resolve,
            sticky,
            tls,
            protocol,
            pass_underscored_fields: ru.pass_underscored_fields.unwrap_or(false),
            buffer,
            cache_responses,
        }
    }

    /// `[upstream.tls]`, for a group with `https://` servers: its files read and checked now
    /// (`check` says what `serve` could not use).
    fn upstream_tls(
        &mut self,
        i: usize,
        name: &str,
        servers: &[ServerSpec],
        raw: Option<RawUpstreamTls>,
        base: &Path,
    ) -> Option<UpstreamTls> {
        let at = |key: &'static str| {
            [
                Seg::Key("upstream"),
                Seg::Index(i),
                Seg::Key("tls"),
                Seg::Key(key),
            ]
        };
        let any_tls = servers.iter().any(|s| s.tls_name.is_some());
        if !any_tls {
            if raw.is_some() {
                self.err(&[Seg::Key("upstream"), Seg::Index(i), Seg::Key("tls")], format!("upstream `{name}` has no https:// server, so its TLS settings would do nothing; write its servers as https://HOST:PORT, or remove [upstream.tls]"));
            }
            return None;
        }
        let raw = raw.unwrap_or_default();
        let verify = raw.verify.unwrap_or(true);
        let ca = raw.ca.map(|c| base.join(c));
        if verify {
            let file = ca.clone().unwrap_or_else(|| SYSTEM_CA.into());
            let checked = std::fs::read(&file)
                .map_err(|e| format!("{} cannot be read ({e})", file.display()))
                .and_then(|pem| {
                    crate::certs::client_roots(&pem, &file.display().to_string()).map(|_| ())
                });
            if let Err(e) = checked {
                let hint = if ca.is_some() {
                    "give the PEM certificate(s) of the authority that signs the servers' certificates"
                } else {
                    "install Debian's ca-certificates, or name your authority: ca = \"ca.pem\""
                };
                self.err(&at("ca"), format!("{e}; {hint}"));
            }
        } else if ca.is_some() {
            self.err(
                &at("ca"),
                "names authorities, and verify = false takes any certificate: remove one of them",
            );
        }
        let client_cert = match (raw.cert, raw.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => {
                let (cert, key) = (base.join(cert), base.join(key));
                let pair = std::fs::read(&cert)
                    .and_then(|c| Ok((c, std::fs::read(&key)?)))
                    .map_err(|e| format!("cannot read the client certificate or its key ({e})"))
                    .and_then(|(c, k)| {
                        crate::certs::from_pem(
                            &c,
                            &k,
                            &cert.display().to_string(),
                            &key.display().to_string(),
                            std::time::SystemTime::now(),
                        )
                        .map(|_| ())
                    });
                if let Err(e) = pair {
                    self.err(&at("cert"), e);
                }
                Some((cert, key))
            }
            _ => {
                self.err(
                    &at("cert"),
                    "a client certificate needs both `cert` and `key`",
                );
                None
            }
        };
        if let Some(n) = &raw.server_name {
            if rustls::pki_types::ServerName::try_from(n.as_str()).is_err() {
                self.err(
                    &at("server_name"),
                    format!("`{n}` is not a host name or an address"),
                );
            }
        }
        Some(UpstreamTls {
            ca,
            verify,
            server_name: raw.server_name,
            client_cert,
        })
    }

    /// A whole number from 1 to `max` (`default` when unset); past `max`, an error rather
    /// than a silent cut.
    pub(super) fn count_up_to(
        &mut self,
        at: &[Seg],
        v: Option<i64>,
        default: u64,
        max: u64,
    ) -> u32 {
        let n = self.positive(at, v, default);
        if n > max {
            self.err(
                at,
                format!("{n} is more than this takes; write a number from 1 to {max}"),
            );
            return default as u32;
        }
        n as u32
    }

    /// An `[[upstream]]` no site's path names would do nothing (its checks would probe for
    /// no one): refused, as every key that cannot act is — and so are `cache_responses` and
    /// `buffer` on a group only sign-in verifiers ask.
    pub(super) fn check_upstreams_used(
        &mut self,
        named: usize,
        sites: &[std::sync::Arc<super::super::site::SiteSpec>],
    ) {
        let used = |name: &str| {
            (sites.iter().flat_map(|s| &s.apps)).any(|a| a.groups().any(|g| g == name))
        };
        let unused: Vec<(usize, String)> = (self.upstreams.iter().take(named).enumerate())
            .filter(|(_, g)| !used(&g.name))
            .map(|(i, g)| (i, g.name.clone()))
            .collect();
        for (i, name) in unused {
            {
                self.err(&[Seg::Key("upstream"), Seg::Index(i), Seg::Key("name")], format!("upstream `{name}` is named by no site's path, so it would do nothing; name it on a path (upstream = \"{name}\"), or remove it"));
            }
        }
        // A group asked only by sign-in verifiers (`auth = { upstream }`): the verifier reads
        // its answers itself, so nothing would keep or buffer them.
        let forwarded_to = |name: &str| {
            (sites.iter().flat_map(|s| &s.apps)).any(|a| a.upstream.as_deref() == Some(name))
        };
        let verifiers_only: Vec<(usize, &'static str, String)> =
            (self.upstreams.iter().take(named).enumerate())
                .filter(|(_, g)| used(&g.name) && !forwarded_to(&g.name))
                .flat_map(|(i, g)| {
                    let keys = [
                        ("cache_responses", g.cache_responses.is_some()),
                        ("buffer", g.buffer.is_some()),
                    ];
                    let name = g.name.clone();
                    keys.into_iter()
                        .filter(|(_, set)| *set)
                        .map(move |(key, _)| (i, key, name.clone()))
                })
                .collect();
        for (i, key, name) in verifiers_only {
            self.err(&[Seg::Key("upstream"), Seg::Index(i), Seg::Key(key)], format!("upstream `{name}` is asked only by sign-in verifiers (auth = {{ upstream = \"{name}\" }}), which read its answers themselves, so `{key}` would do nothing; remove it (or forward a path to the group)"));
        }
    }

    fn active_check(&mut self, i: usize, h: RawHealthCheck, protocol: Protocol) -> ActiveCheck {
        let at = |key: &'static str| {
            [
                Seg::Key("upstream"),
                Seg::Index(i),
                Seg::Key("health"),
                Seg::Key(key),
            ]
        };
        if let Some(service) = &h.grpc_service {
            if protocol != Protocol::Http2 {
                self.err(&at("grpc_service"), "a gRPC health check speaks HTTP/2, and this group is spoken to in HTTP/1.1; add protocol = \"http2\" to the upstream, or remove grpc_service");
            }
            for (key, set) in [
                ("path", h.path.is_some()),
                ("status", h.status.is_some()),
                ("body", h.body.is_some()),
            ] {
                if set {
                    self.err(&at(key), format!("a gRPC health check asks grpc.health.v1 about service `{service}` and is up when it answers SERVING; remove {key}, or grpc_service for an HTTP check"));
                }
            }
        }
        let path = h.path.unwrap_or_else(|| "/".into());
        if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            self.err(
                &at("path"),
                format!("`{path}` is not a request path; write one like \"/healthz\""),
            );
        }
        if let Some(host) = &h.host {
            if host.is_empty() || host.bytes().any(|b| b <= b' ' || b == 0x7f) {
                self.err(&at("host"), format!("`{host}` is not a host name"));
            }
        }
        let interval = self.nonzero_duration(&at("interval"), h.interval, Duration::from_secs(5));
        let timeout = self.nonzero_duration(&at("timeout"), h.timeout, Duration::from_secs(2));
        let status = match h.status.map(|s| parse_status_range(&s)) {
            None => (200, 399),
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                self.err(&at("status"), e);
                (200, 399)
            }
        };
        let rise = self.count_up_to(&at("rise"), h.rise, 2, 100);
        let fall = self.count_up_to(&at("fall"), h.fall, 3, 100);
        ActiveCheck {
            path,
            host: h.host,
            interval,
            timeout,
            status,
            body: h.body.filter(|b| !b.is_empty()),
            rise,
            fall,
            grpc_service: h.grpc_service,
        }
    }

    fn passive_check(&mut self, i: usize, p: RawPassiveCheck) -> PassiveCheck {
        let at = |key: &'static str| {
            [
                Seg::Key("upstream"),
                Seg::Index(i),
                Seg::Key("passive"),
                Seg::Key(key),
            ]
        };
        let d = PassiveCheck::default();
        if p.failures == Some(0) {
            for (key, set) in [
                ("eject_for", p.eject_for.is_some()),
                ("on_5xx", p.on_5xx.is_some()),
            ] {
                if set {
                    self.err(&at(key), "says how failures eject a server, and failures = 0 ejects none; remove it, or count failures");
                }
            }
        }
        let failures = match p.failures {
            None => d.failures,
            Some(n) if (0..=1000).contains(&n) => n as u32,
            Some(n) => {
                self.err(
                    &at("failures"),
                    format!("{n}: write a count from 0 (never eject) to 1000"),
                );
                d.failures
            }
        };
        PassiveCheck {
            failures,
            eject_for: self.nonzero_duration(&at("eject_for"), p.eject_for, d.eject_for),
            on_5xx: p.on_5xx.unwrap_or(d.on_5xx),
        }
    }
}

impl Validator {
    /// The group a path's `upstream = "…"` names: a group's name, or one server's address
    /// (a group of its own with every default, shared by every path that writes it).
    pub(super) fn path_upstream(
        &mut self,
        at: &[Seg],
        written: &str,
        base: &Path,
    ) -> Option<String> {
        if self.upstreams.iter().any(|g| g.name == written) {
            return Some(written.to_string());
        }
        let looks_like_address = written.contains(':') || written.contains('/');
        if !looks_like_address {
            let names: Vec<&str> = self
                .upstreams
                .iter()
                .map(|g| g.name.as_str())
                .filter(|n| !n.contains(':'))
                .collect();
            let hint = if names.is_empty() {
                "define an [[upstream]] with that name, or write a server's address (\"127.0.0.1:9001\")".to_string()
            } else {
                format!("use one of: {}, or a server's address", names.join(", "))
            };
            self.err(at, format!("no upstream is named `{written}`; {hint}"));
            return None;
        }
        if written.split_whitespace().nth(1).is_some() {
            self.err(at, format!("`{written}`: options (weight, backup, node) belong to an [[upstream]] group's servers; name a group, or write the address alone"));
            return None;
        }
        match server_specs(written, base) {
            Ok(servers) => {
                self.upstreams
                    .push(UpstreamSpec::of_servers(written.to_string(), servers));
                Some(written.to_string())
            }
            Err(e) => {
                self.err(at, format!("`{written}` {e}"));
                None
            }
        }
    }
}

/// The servers a line stands for: one, or one per address its host name resolves to.
pub(super) fn server_specs(line: &str, base: &Path) -> Result<Vec<ServerSpec>, String> {
    let (address, opts) = parse_server_line(line)?;
    let (written, tls) = match address.strip_prefix("https://") {
        Some(rest) => (rest, true),
        None => (address.strip_prefix("http://").unwrap_or(address), false),
    };
    let written = written.trim_end_matches('/');
    // The name a TLS server is verified by: its host as written (an address verifies as an
    // IP address, as curl does).
    let host = written.rsplit_once(':').map_or(written, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let spec = |name: &str, address| ServerSpec {
        name: name.to_string(),
        address,
        weight: opts.weight.unwrap_or(1),
        backup: opts.backup,
        node: opts.node,
        tls_name: tls.then(|| host.to_string()),
    };
    if let Some(path) = written.strip_prefix("unix:") {
        if tls {
            return Err("is TLS over a unix socket, which the socket's file permissions make needless; write unix:/path".into());
        }
        if path.is_empty() {
            return Err("names no socket; write unix:/run/api.sock".into());
        }
        let path = base.join(path);
        return Ok(vec![spec(written, ServerAddress::Unix(path))]);
    }
    if let Ok(addr) = written.parse::<SocketAddr>() {
        return Ok(vec![spec(written, ServerAddress::Tcp(addr))]);
    }
    let Some((host, port)) = written.rsplit_once(':') else {
        return Err("has no port; write host:port (\"127.0.0.1:9001\", \"api.internal:8080\") or unix:/path".into());
    };
    if port.parse::<u16>().is_err() || host.is_empty() || host.contains('/') {
        return Err("is not an address; write host:port (\"127.0.0.1:9001\", \"api.internal:8080\") or unix:/path".into());
    }
    let addrs = resolve(written).map_err(|e| format!("{e}; fix the name, or write an address"))?;
    Ok(addrs
        .into_iter()
        .map(|a| spec(written, ServerAddress::Tcp(a)))
        .collect())
}

/// `200`, `"2xx"` or `"200-399"`.
fn parse_status_range(s: &Scalar) -> Result<(u16, u16), String> {
    const HELP: &str = "write a status (200), a class (\"2xx\") or a range (\"200-399\")";
    let in_range = |n: u16| (100..=599).contains(&n);
    let range = match s {
        Scalar::Int(n) if (100..=599).contains(n) => (*n as u16, *n as u16),
        Scalar::Text(t) => {
            let t = t.trim();
            if let Some(class) = t.strip_suffix("xx").and_then(|c| c.parse::<u16>().ok()) {
                (class * 100, class * 100 + 99)
            } else if let Some((a, b)) = t.split_once('-') {
                match (a.trim().parse::<u16>(), b.trim().parse::<u16>()) {
                    (Ok(a), Ok(b)) => (a, b),
                    _ => return Err(format!("`{t}` is no status range; {HELP}")),
                }
            } else {
                match t.parse::<u16>() {
                    Ok(n) => (n, n),
                    Err(_) => return Err(format!("`{t}` is no status; {HELP}")),
                }
            }
        }
        other => return Err(format!("{other:?} is no status; {HELP}")),
    };
    if !in_range(range.0) || !in_range(range.1) || range.0 > range.1 {
        return Err(format!(
            "{}-{} is no range of statuses; {HELP}",
            range.0, range.1
        ));
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_an_address_a_socket_or_a_name_resolved() {
        let base = Path::new("/etc/espalier");
        let s = server_specs("127.0.0.2:9001 weight=2", base).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            s[0].address,
            ServerAddress::Tcp("127.0.0.2:9001".parse().unwrap())
        );
        assert_eq!(s[0].weight, 2);
        let s = server_specs("http://127.0.0.2:9001/", base).unwrap();
        assert_eq!(s[0].name, "127.0.0.2:9001");
        let s = server_specs("unix:run/api.sock backup", base).unwrap();
        assert_eq!(
            s[0].address,
            ServerAddress::Unix("/etc/espalier/run/api.sock".into())
        );
        assert!(s[0].backup);
        let s = server_specs("localhost:9001", base).unwrap();
        assert!(s.iter().all(|s| s.name == "localhost:9001"), "{s:?}");
        assert!(server_specs("127.0.0.1", base).is_err());
        let s = server_specs("https://api.internal.invalid:443", base);
        assert!(s.is_err(), "resolved: {s:?}");
        let s = server_specs("https://127.0.0.1:8443", base).unwrap();
        assert_eq!(s[0].tls_name.as_deref(), Some("127.0.0.1"));
        assert!(server_specs("https://unix:/run/x.sock", base).is_err());
        assert!(server_specs("no-such-host.invalid:80", base).is_err());
    }

    #[test]
    fn a_check_status_is_a_status_a_class_or_a_range() {
        assert_eq!(parse_status_range(&Scalar::Int(204)), Ok((204, 204)));
        assert_eq!(
            parse_status_range(&Scalar::Text("2xx".into())),
            Ok((200, 299))
        );
        assert_eq!(
            parse_status_range(&Scalar::Text("200-399".into())),
            Ok((200, 399))
        );
        assert!(parse_status_range(&Scalar::Text("399-200".into())).is_err());
        assert!(parse_status_range(&Scalar::Text("9xx".into())).is_err());
    }
}
