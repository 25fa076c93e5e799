//! DNS-01 (`[server.acme.dns]`) against real DNS: Debian's BIND holds the names' zones and
//! resolves for Debian's pebble (its `-dnsserver`), as a CA's resolver would — following a
//! name's `_acme-challenge` CNAME into the zone delegated to espalier's own DNS server, or
//! reading the TXT record espalier put into BIND's zone by an RFC 2136 update signed with
//! TSIG. Wildcards and plain names are issued, the records are gone after the order, and a
//! name without its delegation is refused by `check` with the line to add. Every process a
//! test starts, the test stops.

use crate::acme::{fetch, need_pebble, site_dir, Pebble};
use crate::common::*;
use espalier::certs::dns01::{challenge_name, cname_line, delegated_name};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The zone espalier's own server answers in these tests.
pub(crate) const ZONE: &str = "acme.example.net";

/// BIND, authoritative for the test's zones and resolving for pebble; stopped when dropped.
pub(crate) struct Bind {
    _named: Stopped,
    pub(crate) addr: SocketAddr,
    /// The network namespace it runs in (`None`: the test's own).
    ns: Option<String>,
    /// Its log (`named -g` writes it to stderr): shown when the test fails.
    log: std::path::PathBuf,
}

impl Drop for Bind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let said = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("BIND's log ({}):\n{said}", self.log.display());
        }
    }
}

/// One zone BIND holds: its name, its extra lines, and (with a key) the names the key may
/// update TXT records of.
pub(crate) struct BindZone<'a> {
    pub(crate) name: &'a str,
    pub(crate) lines: Vec<String>,
    pub(crate) updatable: Option<(&'a str, &'a str)>,
}

impl Bind {
    /// BIND on a free port of 127.0.0.1 with `zones`, forwarding [`ZONE`] to the server on
    /// `forward`'s port of 127.0.0.1 and taking the key file `key`, if given.
    fn start(d: &Path, zones: &[BindZone], forward: Option<u16>, key: Option<&Path>) -> Bind {
        let forward = forward.map(|port| SocketAddr::from(([127, 0, 0, 1], port)));
        Bind::start_in(None, d, zones, forward, key)
    }

    /// As [`Bind::start`], in network namespace `ns` when given, forwarding [`ZONE`] to the
    /// server at `forward`.
    pub(crate) fn start_in(
        ns: Option<&str>,
        d: &Path,
        zones: &[BindZone],
        forward: Option<SocketAddr>,
        key: Option<&Path>,
    ) -> Bind {
        let port = free_port();
        let dir = d.join("bind");
        std::fs::create_dir_all(&dir).unwrap();
        let mut conf = format!(
            "options {{ directory \"{dir}\"; listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }}; pid-file none; session-keyfile \"{dir}/session.key\"; managed-keys-directory \"{dir}\"; recursion yes; allow-recursion {{ 127.0.0.1; }}; dnssec-validation no; notify no; }};\ncontrols {{ }};\n",
            dir = dir.display()
        );
        if let Some(key) = key {
            conf.push_str(&format!("include \"{}\";\n", key.display()));
        }
        for zone in zones {
            let file = dir.join(format!("{}.zone", zone.name));
            let mut text = format!(
                "$TTL 0\n@ IN SOA ns.{n}. hostmaster.{n}. 1 3600 600 86400 0\n@ IN NS ns.{n}.\nns IN A 127.0.0.1\n",
                n = zone.name
            );
            for line in &zone.lines {
                text.push_str(line);
                text.push('\n');
            }
            std::fs::write(&file, text).unwrap();
            let policy = match zone.updatable {
                Some((key, name)) => {
                    format!(" update-policy {{ grant {key} name {name}. TXT; }};")
                }
                None => String::new(),
            };
            conf.push_str(&format!(
                "zone \"{}\" {{ type primary; file \"{}\";{policy} }};\n",
                zone.name,
                file.display()
            ));
        }
        if let Some(at) = forward {
            conf.push_str(&format!("zone \"{ZONE}\" {{ type forward; forward only; forwarders {{ {} port {}; }}; }};\n", at.ip(), at.port()));
        }
        let file = dir.join("named.conf");
        std::fs::write(&file, conf).unwrap();
        let log_file = dir.join("named.log");
        let log = std::fs::File::create(&log_file).unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut named = in_namespace(ns.map(String::from).as_deref(), "named");
        named.args(["-g", "-4", "-c"]).arg(&file);
        let named = named.stdout(Stdio::null()).stderr(log).spawn();
        let bind = Bind {
            _named: Stopped(named.expect("start named")),
            addr,
            ns: ns.map(String::from),
            log: log_file,
        };
        // Its zones loaded: the first one's SOA answered.
        let first = zones.first().map_or("example", |z| z.name);
        wait_for("BIND's zones loaded", Duration::from_secs(20), || {
            bind.dig(first, "SOA").contains("status: NOERROR")
        });
        bind
    }

    /// `dig`'s answer (with its header) for `name`'s `kind` records, asked of this BIND.
    pub(crate) fn dig(&self, name: &str, kind: &str) -> String {
        dig_in(self.ns.as_deref(), self.addr, name, kind)
    }
}

/// `program`, to be run in network namespace `ns` when given.
fn in_namespace(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut cmd = Command::new("nsenter");
            cmd.arg(format!("--net=/run/netns/{ns}")).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// `dig`'s answer (with its header) for `name`'s `kind` records, asked of `server`.
fn dig(server: SocketAddr, name: &str, kind: &str) -> String {
    dig_in(None, server, name, kind)
}

/// As [`dig`], from network namespace `ns` when given.
pub(crate) fn dig_in(ns: Option<&str>, server: SocketAddr, name: &str, kind: &str) -> String {
    let out = in_namespace(ns, "dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args([
            name,
            kind,
            "+noall",
            "+comments",
            "+answer",
            "+time=5",
            "+tries=1",
        ])
        .output()
        .expect("run dig");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn need_bind() {
    need_tools(
        "named:bind9 tsig-keygen:bind9 dig:bind9-dnsutils",
        "Debian's BIND (bind9) and dig",
    );
}

/// The config of one site answering `hosts` over https on `https`, its certificates ordered
/// from `pebble` by DNS-01 as `dns` (the `[server.acme.dns]` table's lines) says.
fn config(pebble: &Pebble, dns: &str, hosts: &[&str], https: u16) -> String {
    let bindings: Vec<String> = (hosts.iter())
        .map(|h| format!("\"https://127.0.0.1:{https}:{h}\""))
        .collect();
    format!(
        "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nemail = \"ops@example.test\"\nca = \"{}\"\n[server.acme.dns]\n{dns}\n[[site]]\nname = \"shop\"\nbindings = [{}]\nroot = \"www\"\n",
        pebble.directory,
        pebble.api_cert.display(),
        bindings.join(", ")
    )
}

/// `espalier check` of `d`/espalier.toml: whether it passed, and what it said.
fn check(d: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["check", "--config"])
        .arg(d.join("espalier.toml"))
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// The https pages of `names` (given as `NAME`, `a.NAME` for a wildcard) served with the
/// issued certificates, checked against pebble's root.
fn served_with_issued_certificates(d: &Path, pebble: &Pebble, https: u16, names: &[&str]) {
    pebble.root(&d.join("root.pem"));
    for name in names {
        wait_for(
            "the issued certificate served",
            Duration::from_secs(20),
            || fetch(&d.join("root.pem"), name, https, false).0 == 0,
        );
        let (_, body) = fetch(&d.join("root.pem"), name, https, false);
        assert_eq!(body, "ordered by espalier\n 1.1", "{name}");
    }
}

#[test]
fn a_wildcard_and_a_name_are_issued_by_dns_01_through_espaliers_own_zone() {
    need_pebble();
    need_bind();
    let dir = site_dir();
    let d = dir.path();
    let own = free_port();
    // The name's owner delegated its challenge once: a CNAME into espalier's zone.
    let cname = format!(
        "_acme-challenge IN CNAME {}.",
        delegated_name("shop.example", ZONE)
    );
    let shop = BindZone {
        name: "shop.example",
        lines: vec![cname],
        updatable: None,
    };
    let bind = Bind::start(d, &[shop], Some(own), None);
    let pebble = Pebble::start_resolving(d, bind.addr);
    let https = free_port();
    let dns = format!(
        "listen = \"127.0.0.1:{own}\"\nzone = \"{ZONE}\"\nnames = \"all\"\nresolver = \"{}\"",
        bind.addr
    );
    let config = config(&pebble, &dns, &["*.shop.example", "shop.example"], https);
    std::fs::write(d.join("espalier.toml"), &config).unwrap();
    let (ok, said) = check(d);
    assert!(ok, "{said}");
    assert!(
        said.contains("_acme-challenge.shop.example is delegated (CNAME in place)"),
        "{said}"
    );
    let server = Server::with_config(d, &config);
    server.wait_for_log(
        &format!("acme: answering DNS-01 for {ZONE} on 127.0.0.1:{own}"),
        Duration::from_secs(20),
    );
    for name in ["*.shop.example", "shop.example"] {
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(90),
        );
    }
    // The wildcard's pair under the store's name for it.
    assert!(d.join("store/_.shop.example.pem").exists());
    assert!(d.join("store/shop.example.pem").exists());
    served_with_issued_certificates(d, &pebble, https, &["a.shop.example", "shop.example"]);
    // The challenge's record lived as long as its order: the zone no longer has the name.
    let delegated = delegated_name("shop.example", ZONE);
    let asked = dig(SocketAddr::from(([127, 0, 0, 1], own)), &delegated, "TXT");
    assert!(asked.contains("status: NXDOMAIN"), "{asked}");
    // And the zone itself is answered as an authoritative server answers it.
    let soa = dig(SocketAddr::from(([127, 0, 0, 1], own)), ZONE, "SOA");
    assert!(soa.contains("flags: qr aa"), "{soa}");
    // A name outside the zone is refused, not answered.
    let outside = dig(SocketAddr::from(([127, 0, 0, 1], own)), "shop.example", "A");
    assert!(outside.contains("status: REFUSED"), "{outside}");
}

#[test]
fn a_name_without_its_delegation_is_refused_by_check_with_the_line_to_add() {
    need_bind();
    let dir = site_dir();
    let d = dir.path();
    let other = BindZone {
        name: "other.example",
        lines: vec![],
        updatable: None,
    };
    let bind = Bind::start(d, &[other], None, None);
    let config = format!(
        "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"https://127.0.0.1:1/dir\"\n[server.acme.dns]\nlisten = \"127.0.0.1:{}\"\nzone = \"{ZONE}\"\nresolver = \"{}\"\n[[site]]\nname = \"other\"\nbindings = [\"https://127.0.0.1:{}:*.other.example\"]\nroot = \"www\"\n",
        free_port(),
        bind.addr,
        free_port()
    );
    std::fs::write(d.join("espalier.toml"), &config).unwrap();
    let (ok, said) = check(d);
    assert!(!ok, "{said}");
    let line = cname_line("*.other.example", ZONE);
    assert!(
        said.contains(&format!("key `server.acme.dns`: *.other.example cannot be proven by DNS-01: _acme-challenge.other.example has no CNAME; add this line to its zone: {line}")),
        "{said}"
    );
    // `doctor` says the same, as a finding to act on.
    let out = Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(["doctor", "--json", "--config"])
        .arg(d.join("espalier.toml"))
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let finding = (report["findings"].as_array().unwrap().iter())
        .find(|f| f["check"] == "acme dns-01")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(finding["status"], "warn");
    assert_eq!(finding["advice"], format!("add to its zone: {line}"));
}

#[test]
fn names_are_issued_by_rfc_2136_updates_signed_with_tsig_and_a_refused_update_is_said() {
    need_pebble();
    need_bind();
    let dir = site_dir();
    let d = dir.path();
    let key = d.join("acme.key");
    let made = run_ok(Command::new("tsig-keygen").args(["-a", "hmac-sha256", "espalier-acme"]));
    std::fs::write(&key, made.stdout).unwrap();
    // The key may write the challenge of upd.example (and so of its wildcard); in
    // locked.example it may write nothing.
    let zones = [
        BindZone {
            name: "upd.example",
            lines: vec![],
            updatable: Some(("espalier-acme", "_acme-challenge.upd.example")),
        },
        BindZone {
            name: "locked.example",
            lines: vec![],
            updatable: Some(("espalier-acme", "_acme-challenge.elsewhere.locked.example")),
        },
    ];
    let bind = Bind::start(d, &zones, None, Some(&key));
    let pebble = Pebble::start_resolving(d, bind.addr);
    let https = free_port();
    let dns = format!(
        "update = \"{}\"\ntsig_key = \"acme.key\"\nnames = \"all\"",
        bind.addr
    );
    let hosts = ["*.upd.example", "upd.example", "locked.example"];
    let server = Server::with_config(d, &config(&pebble, &dns, &hosts, https));
    for name in ["*.upd.example", "upd.example"] {
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(90),
        );
    }
    served_with_issued_certificates(d, &pebble, https, &["a.upd.example", "upd.example"]);
    // The records went with their orders.
    let left = bind.dig(&challenge_name("upd.example"), "TXT");
    assert!(left.contains("status: NXDOMAIN"), "{left}");
    // BIND's refusal, said with what to grant.
    server.wait_for_log(
        "acme: locked.example: the order failed: 127.0.0.1",
        Duration::from_secs(60),
    );
    let said = server.log_text();
    assert!(
        said.contains("refused the update of _acme-challenge.locked.example (Refused); let the key update TXT records there"),
        "{said}"
    );
}

#[test]
fn check_refuses_dns_01_settings_that_cannot_act_in_one_line_each() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let head = "[server]\ncertificates = \".\"\n[server.acme]\ndirectory = \"https://acme.test/dir\"\n[server.acme.dns]\n";
    let site = "[[site]]\nbindings = [\"https://127.0.0.1:1:*.shop.example\"]\nroot = \".\"\n";
    let refused = |dns: &str| check_refuses(d, &format!("{head}{dns}\n{site}"));
    let cases = [
        (
            "",
            "publishes the challenges nowhere; add listen = \"0.0.0.0:53\" and zone",
        ),
        (
            "listen = \"0.0.0.0:53\"\nzone = \"a.example\"\nupdate = \"127.0.0.1:53\"",
            "has both `listen`",
        ),
        ("listen = \"0.0.0.0:53\"", "has `listen` and no `zone`"),
        (
            "listen = \"0.0.0.0:53\"\nzone = \"net\"",
            "`net` is not a zone's name",
        ),
        (
            "listen = \"here\"\nzone = \"a.example\"",
            "key `server.acme.dns.listen`: `here` is not an address",
        ),
        (
            "listen = \"0.0.0.0:53\"\nzone = \"a.example\"\ntsig_key = \"k\"",
            "key `server.acme.dns.tsig_key`: signs RFC 2136 updates, and there is no `update`",
        ),
        (
            "listen = \"0.0.0.0:53\"\nzone = \"a.example\"\nnames = \"some\"",
            "`some` is not one of \"wildcards\"",
        ),
        ("update = \"127.0.0.1\"", "has `update` and no `tsig_key`"),
        (
            "update = \"127.0.0.1\"\ntsig_key = \"missing.key\"",
            "missing.key cannot be read",
        ),
        (
            "update = \"127.0.0.1\"\ntsig_key = \"md5.key\"",
            "algorithm `hmac-md5` cannot sign updates here",
        ),
        (
            "update = \"127.0.0.1\"\ntsig_key = \"bad.key\"",
            "the secret is not base64",
        ),
        (
            "update = \"127.0.0.1\"\nzone = \"a.example\"\ntsig_key = \"good.key\"",
            "key `server.acme.dns.zone`: names espalier's own zone, and there is no `listen`",
        ),
    ];
    std::fs::write(
        d.join("md5.key"),
        "key \"k\" { algorithm hmac-md5; secret \"YQ==\"; };",
    )
    .unwrap();
    std::fs::write(
        d.join("bad.key"),
        "key \"k\" { algorithm hmac-sha256; secret \"!!\"; };",
    )
    .unwrap();
    std::fs::write(
        d.join("good.key"),
        "key \"k\" { algorithm hmac-sha256; secret \"YQ==\"; };",
    )
    .unwrap();
    for (dns, said) in cases {
        let err = refused(dns);
        assert!(err.contains(said), "{dns}:\n{err}");
    }
    // Keys that would act on nothing: DNS-01 for wildcards where no binding names one, a
    // resolver where there is no zone of espalier's to look up.
    let plain = "[[site]]\nbindings = [\"https://127.0.0.1:1:shop.example\"]\nroot = \".\"\n";
    let err = check_refuses(
        d,
        &format!("{head}listen = \"0.0.0.0:53\"\nzone = \"a.example\"\n{plain}"),
    );
    assert!(
        err.contains(
            "key `server.acme.dns`: proves wildcards (names = \"wildcards\"), and no https binding"
        ),
        "{err}"
    );
    let err =
        refused("update = \"127.0.0.1\"\ntsig_key = \"good.key\"\nresolver = \"127.0.0.1:53\"");
    assert!(
        err.contains(
            "key `server.acme.dns.resolver`: is where check and doctor look up the CNAMEs"
        ),
        "{err}"
    );
    // Without [server.acme.dns] a wildcard alone is still nothing to order.
    let err = check_refuses(
        d,
        &format!("{}{site}", head.replace("[server.acme.dns]\n", "")),
    );
    assert!(err.contains("no site has one"), "{err}");
}
