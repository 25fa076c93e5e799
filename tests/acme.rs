//! Certificates ordered by espalier itself (`[server.acme]`) from a real ACME server: Debian's
//! `pebble`, its names resolved by `pebble-challtestsrv` (every name is 127.0.0.1), validating
//! HTTP-01 on the sites' own http port. Pebble rejects 5 % of nonces by default, which the
//! client must retry. Every process a test starts, the test stops.

use crate::common::*;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Pebble and its DNS, stopped when dropped.
pub(crate) struct Pebble {
    _dns: Option<Stopped>,
    _pebble: Stopped,
    /// The directory's URL, and its management port (the issuing root is there).
    pub(crate) directory: String,
    management: u16,
    /// The authority pebble's own API certificate chains to.
    pub(crate) api_cert: PathBuf,
}

impl Pebble {
    /// A pebble validating HTTP-01 on `http_port` (TLS-ALPN-01 on a port of its own), its
    /// certificates valid for `validity` seconds (`None`: pebble's default).
    pub(crate) fn start(dir: &Path, http_port: u16, validity: Option<u64>) -> Pebble {
        Pebble::start_with(dir, (http_port, free_port()), validity, None)
    }

    /// As [`Pebble::start`], validating TLS-ALPN-01 on the second port, asking every account
    /// for External Account Binding with the key `eab` (its id, its base64url MAC key) when
    /// given.
    pub(crate) fn start_with(
        dir: &Path,
        ports: (u16, u16),
        validity: Option<u64>,
        eab: Option<(&str, &str)>,
    ) -> Pebble {
        Pebble::launch(dir, ports, (validity, eab), None)
    }

    /// A pebble whose validation asks the DNS server `dns` (a real resolver: DNS-01's
    /// records, and their CNAMEs, as a CA would see them) instead of its own test server.
    pub(crate) fn start_resolving(dir: &Path, dns: SocketAddr) -> Pebble {
        Pebble::launch(dir, (free_port(), free_port()), (None, None), Some(dns))
    }

    fn launch(
        dir: &Path,
        (http_port, tls_port): (u16, u16),
        (validity, eab): (Option<u64>, Option<(&str, &str)>),
        resolver: Option<SocketAddr>,
    ) -> Pebble {
        // Signed by an authority: the ACME client's verifier (webpki) takes no self-signed
        // leaf, and `[server.acme] ca` names the authority, as for a private directory.
        crate::common::tls::signed_cert(dir, "pebble-api", "localhost");
        let (dns, api, management, dns_management) =
            (free_port(), free_port(), free_port(), free_port());
        // Its management port opens with its DNS, in the same start.
        let dns_server = resolver.is_none().then(|| {
            Stopped::listening(
                Command::new("pebble-challtestsrv")
                    .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                    .args(["-dns01", &format!("127.0.0.1:{dns}")])
                    .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                    .args(["-management", &format!("127.0.0.1:{dns_management}")])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
                SocketAddr::from(([127, 0, 0, 1], dns_management)),
            )
        });
        let dns = resolver.unwrap_or(SocketAddr::from(([127, 0, 0, 1], dns)));
        let mut config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{api}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": dir.join("pebble-api.pem"),
            "privateKey": dir.join("pebble-api.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        if let Some(seconds) = validity {
            config["pebble"]["certificateValidityPeriod"] = seconds.into();
        }
        if let Some((kid, key)) = eab {
            config["pebble"]["externalAccountBindingRequired"] = true.into();
            config["pebble"]["externalAccountMACKeys"] = serde_json::json!({ kid: key });
        }
        let file = dir.join("pebble.json");
        std::fs::write(&file, config.to_string()).unwrap();
        // Its log beside the test's files, for a failure's reader.
        let log = std::fs::File::create(dir.join("pebble.log")).unwrap();
        let pebble = Stopped::listening(
            Command::new("pebble")
                .arg("-config")
                .arg(&file)
                .args(["-dnsserver", &dns.to_string(), "-strict=false"])
                .env("PEBBLE_VA_NOSLEEP", "1")
                .stdout(log.try_clone().unwrap())
                .stderr(log),
            SocketAddr::from(([127, 0, 0, 1], api)),
        );
        Pebble {
            _dns: dns_server,
            _pebble: pebble,
            directory: format!("https://localhost:{api}/dir"),
            management,
            api_cert: dir.join("ca.pem"),
        }
    }

    /// The root pebble issues under (made at its start), written to `to`.
    pub(crate) fn root(&self, to: &Path) {
        let out = run_ok(
            Command::new("curl")
                .args(["-sf", "--cacert"])
                .arg(&self.api_cert)
                .arg(format!("https://localhost:{}/roots/0", self.management)),
        );
        std::fs::write(to, out.stdout).unwrap();
    }
}

/// The admin page's feed (`/live`), as JSON.
fn live(admin: &str) -> serde_json::Value {
    let (_, body) =
        espalier::server::admin::request(admin.parse().unwrap(), "GET", "/live").unwrap();
    serde_json::from_slice(&body).unwrap()
}

pub(crate) fn need_pebble() {
    need_tools(
        "pebble:pebble curl:curl openssl:openssl",
        "Debian's pebble, curl and openssl",
    );
}

/// The config of sites `names`, each on the http port `http` and the https port `https`
/// with its certificate from the store `store/`, ordered from `pebble`.
fn config(pebble: &Pebble, names: &[&str], http: u16, https: u16) -> String {
    let mut c = format!(
        "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nemail = \"ops@example.test\"\nca = \"{}\"\n[[pool]]\nname = \"p\"\n",
        pebble.directory,
        pebble.api_cert.display()
    );
    for name in names {
        c.push_str(&format!(
            "[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{http}:{name}\", \"https://127.0.0.1:{https}:{name}\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n"
        ));
    }
    c
}

/// `curl` of `https://NAME:PORT/` trusting `root` only: its exit code and body.
pub(crate) fn fetch(root: &Path, name: &str, port: u16, http2: bool) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(if http2 { "--http2" } else { "--http1.1" })
        .args(["-w", " %{http_version}"])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("run curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

pub(crate) fn site_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("store")).unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    std::fs::write(dir.path().join("www/index.html"), "ordered by espalier\n").unwrap();
    dir
}

#[test]
fn sites_get_certificates_by_http_01_and_a_restart_orders_none_again() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    let names = ["a.test", "b.test", "c.test"];
    // Cleartext requests are sent to https — but the directory's, which the chain answers
    // before its redirect.
    let config = config(&pebble, &names, http, https).replace(
        "root = \"www\"\n",
        "root = \"www\"\nredirect_to_https = true\n",
    );
    let server = Server::with_config(d, &config);
    for name in names {
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(60),
        );
    }
    let plain = get_host(SocketAddr::from(([127, 0, 0, 1], http)), "a.test", "/");
    assert_eq!(plain.status, 308);
    pebble.root(&d.join("root.pem"));
    // Served from the store without a reload, the chain checked against pebble's root.
    for name in names {
        for http2 in [false, true] {
            wait_for(
                "the issued certificate served",
                Duration::from_secs(20),
                || fetch(&d.join("root.pem"), name, https, http2).0 == 0,
            );
            let (_, body) = fetch(&d.join("root.pem"), name, https, http2);
            let version = if http2 { "2" } else { "1.1" };
            assert_eq!(body, format!("ordered by espalier\n {version}"));
        }
        // The key and the chain are the master's alone.
        for ext in ["key", "pem"] {
            let mode = std::fs::metadata(d.join(format!("store/{name}.{ext}")))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}.{ext}");
        }
    }
    // Each name's certificate in /status, /metrics and `espalier status`.
    server.wait_until("every certificate valid", Duration::from_secs(20), |s| {
        let shown = s.status().certificates;
        shown.len() == 3
            && shown
                .iter()
                .all(|c| c.state == "valid" && c.not_after.is_some() && c.renew_at < c.not_after)
    });
    let admin = server.admin.clone().unwrap();
    let (_, metrics) =
        espalier::server::admin::request(admin.parse().unwrap(), "GET", "/metrics").unwrap();
    let metrics = String::from_utf8_lossy(&metrics).to_string();
    assert!(
        metrics.contains("espalier_certificate_expiry_seconds{name=\"b.test\"} ")
            && metrics.contains("espalier_certificate_order_failing{name=\"b.test\"} 0"),
        "{metrics}"
    );
    let table = espalier_ok(&["status", "--admin", &admin]);
    assert!(
        table.contains("CERTIFICATES") && table.contains("c.test"),
        "{table}"
    );
    // The admin page's feed, asked every second, carries only those that need a look: none.
    assert!(live(&admin)["status"].get("certificates").is_none());
    let account = std::fs::read_dir(d.join("store/.acme")).unwrap().count();
    assert_eq!(account, 1, "one account for the directory");
    let before = std::fs::metadata(d.join("store/a.test.pem")).unwrap();
    drop(server);
    // A restart finds the pairs and orders nothing.
    let server = Server::with_config(d, &config);
    server.wait_for_log(
        "acme: 3 name(s): 3 with a certificate in the store",
        Duration::from_secs(30),
    );
    assert_eq!(fetch(&d.join("root.pem"), "a.test", https, false).0, 0);
    let log = server.log_text();
    assert!(!log.contains("certificate issued"), "{log}");
    let after = std::fs::metadata(d.join("store/a.test.pem")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(before.ino(), after.ino());
}

#[test]
fn names_of_pools_sharing_one_address_are_proven_there() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    // Two pools on one http and one https address: whichever worker the directory's request
    // reaches, the name's own pool answers it (by hand-off, or from the shared folder).
    let mut config = config(&pebble, &["one.test", "two.test"], http, https);
    config = config.replacen(
        "[[site.app]]\npool = \"p\"\n",
        "[[site.app]]\npool = \"q\"\n",
        2,
    );
    config = config.replacen(
        "[[site.app]]\npool = \"q\"\n",
        "[[site.app]]\npool = \"p\"\n",
        1,
    );
    config = config.replace(
        "[[pool]]\nname = \"p\"\n",
        "[[pool]]\nname = \"p\"\n[[pool]]\nname = \"q\"\n",
    );
    assert_eq!(config.matches("pool = \"q\"").count(), 1, "{config}");
    let server = Server::with_config(d, &config);
    for name in ["one.test", "two.test"] {
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(60),
        );
    }
    pebble.root(&d.join("root.pem"));
    for name in ["one.test", "two.test"] {
        wait_for(
            "the issued certificate served",
            Duration::from_secs(20),
            || fetch(&d.join("root.pem"), name, https, false).0 == 0,
        );
    }
}

#[test]
fn a_site_without_http_is_proven_by_tls_alpn_01() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    // Pebble validates TLS-ALPN-01 on the site's https port; the site has no http:// binding.
    let pebble = Pebble::start_with(d, (http, https), None, None);
    let config = config(&pebble, &["t.test"], http, https)
        .replace(&format!("\"http://127.0.0.1:{http}:t.test\", "), "");
    assert!(!config.contains("http://"), "{config}");
    let server = Server::with_config(d, &config);
    wait_for("an order's end", Duration::from_secs(60), || {
        server.log_text().contains("acme: t.test: ")
    });
    let pebble_log = std::fs::read_to_string(d.join("pebble.log")).unwrap_or_default();
    let log = server.log_text();
    assert!(
        !log.contains("order failed"),
        "{log}\npebble:\n{pebble_log}"
    );
    server.wait_for_log("acme: t.test: certificate issued", Duration::from_secs(5));
    pebble.root(&d.join("root.pem"));
    wait_for(
        "the issued certificate served",
        Duration::from_secs(20),
        || fetch(&d.join("root.pem"), "t.test", https, true).0 == 0,
    );
    // The challenge's certificate went with its order, and the folder with the server.
    let folder = espalier_runtime_acme(&server);
    let left = std::fs::read_dir(&folder).map_or(0, |d| d.count());
    assert_eq!(left, 0, "files left in the challenge folder");
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit(Duration::from_secs(30)), Some(0));
    assert!(!folder.parent().unwrap().exists(), "{}", folder.display());
}

/// The folder the server's master wrote its TLS-ALPN-01 certificates into.
pub(crate) fn espalier_runtime_acme(server: &Server) -> PathBuf {
    server.runtime_dir().join("acme/tls-alpn-01")
}

#[test]
fn a_short_lived_certificate_is_renewed_before_it_ends() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    // Thirty seconds of life: renewed at half, within its last fifteen.
    let pebble = Pebble::start(d, http, Some(30));
    let server = Server::with_config(d, &config(&pebble, &["r.test"], http, https));
    server.wait_for_log("acme: r.test: certificate issued", Duration::from_secs(60));
    let first = std::fs::read(d.join("store/r.test.pem")).unwrap();
    wait_for("the renewal", Duration::from_secs(60), || {
        std::fs::read(d.join("store/r.test.pem")).is_ok_and(|now| now != first)
    });
    // The pair is written before the master hears of the order's end: its line follows.
    wait_for("the renewal's log line", Duration::from_secs(20), || {
        (server.log_text())
            .matches("acme: r.test: certificate issued")
            .count()
            >= 2
    });
}

#[test]
fn a_directory_that_asks_for_external_account_binding_gets_it() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    let key = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let pebble = Pebble::start_with(d, (http, free_port()), None, Some(("kid-1", key)));
    // Without the binding the account is refused, and the log says why.
    let unbound = config(&pebble, &["e.test"], http, https);
    let server = Server::with_config(d, &unbound);
    let log = server.wait_for_log("acme: e.test: the order failed", Duration::from_secs(60));
    assert!(log.contains("cannot register an account"), "{log}");
    let shown = server.status().certificates;
    assert_eq!(shown[0].state, "failing", "{shown:?}");
    let feed = live(server.admin.as_deref().unwrap());
    assert_eq!(
        feed["status"]["certificates"][0]["state"], "failing",
        "{feed}"
    );
    assert!(shown[0]
        .last_error
        .as_deref()
        .unwrap_or_default()
        .contains("account"));
    drop(server);
    let bound = unbound.replace(
        "[[pool]]",
        &format!("eab_kid = \"kid-1\"\neab_hmac_key = \"{key}\"\n[[pool]]"),
    );
    let server = Server::with_config(d, &bound);
    server.wait_for_log("acme: e.test: certificate issued", Duration::from_secs(60));
    // The account's key is the master's alone: another user (a pool's) cannot read it.
    for entry in std::fs::read_dir(d.join("store/.acme")).unwrap() {
        let path = entry.unwrap().path();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        if unsafe { libc::geteuid() } != 0 {
            skip("reading the account key as another user needs root (runuser)");
            continue;
        }
        let read = Command::new("runuser")
            .args(["-u", "nobody", "--", "cat"])
            .arg(&path)
            .output()
            .expect("run runuser");
        assert!(!read.status.success(), "nobody read {}", path.display());
        assert!(String::from_utf8_lossy(&read.stderr).contains("Permission denied"));
    }
}

#[test]
fn check_refuses_acme_without_a_store_or_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let check = |config: &str| check_refuses(dir.path(), config);
    let site = "[[site]]\nbindings = [\"http://127.0.0.1:1\"]\nroot = \".\"\n";
    let err = check(&format!(
        "[server.acme]\ndirectory = \"https://acme.test/dir\"\n{site}"
    ));
    assert!(err.contains("add [server] certificates"), "{err}");
    let err = check(&format!("[server]\ncertificates = \".\"\n[server.acme]\ndirectory = \"http://acme.test/dir\"\n{site}"));
    assert!(err.contains("is not an https:// URL"), "{err}");
    let err = check(&format!(
        "[server]\ncertificates = \".\"\n[server.acme]\nemail = \"ops@example.test\"\n{site}"
    ));
    assert!(err.contains("has no `directory`"), "{err}");
    let err = check(&format!(
        "[server]\ncertificates = \".\"\n[server.acme]\ndirectory = \"https://acme.test/dir\"\neab_kid = \"kid-1\"\n{site}"
    ));
    assert!(err.contains("needs its key: add eab_hmac_key"), "{err}");
    // Nothing to order: no https name of a store site (here, a cleartext site alone).
    let err = check(&format!(
        "[server]\ncertificates = \".\"\n[server.acme]\ndirectory = \"https://acme.test/dir\"\n{site}"
    ));
    assert!(
        err.contains("no site has one (a wildcard is ordered with [server.acme.dns]; without it, with on_demand"),
        "{err}"
    );
    // Accepted, with what `serve` will do said: which names it orders and how, and a pair
    // in its last days with who renews it.
    std::fs::create_dir(dir.path().join("store")).unwrap();
    let path = dir.path().join("espalier.toml");
    let config = "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"https://acme.test/dir\"\n[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:1:a.test\", \"http://127.0.0.1:2:b.test\", \"https://127.0.0.1:1:b.test\"]\nroot = \".\"\n[[site.app]]\npool = \"p\"\n";
    std::fs::write(&path, config).unwrap();
    let checked = || {
        let out = espalier(&["check", "-c", path.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{said}");
        said
    };
    let said = checked();
    assert!(
        said.contains("a.test has no http:// binding: its certificate is proven by TLS-ALPN-01"),
        "{said}"
    );
    assert!(
        said.contains("no pair for b.test yet; `serve` orders it from https://acme.test/dir"),
        "{said}"
    );
    need_tools(
        "python3:python3 -:python3-cryptography",
        "python3-cryptography",
    );
    crate::common::tls::dated_cert(&dir.path().join("store"), "b.test", "b.test", -1, 5);
    let said = checked();
    assert!(
        said.contains(
            "warning: the certificate of b.test ends in 4 day(s); `serve` renews it from [server.acme]"
        ),
        "{said}"
    );
    // `doctor` warns of it too, with who renews it.
    let out = espalier(&["doctor", "--json", "-c", path.to_str().unwrap()]);
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = (findings["findings"].as_array().unwrap().iter())
        .find(|f| {
            f["found"]
                .as_str()
                .unwrap_or("")
                .contains("b.test.pem expires in 4 days")
        })
        .unwrap_or_else(|| panic!("{findings}"));
    assert_eq!(found["status"], "warn", "{found}");
    assert!(
        found["advice"]
            .as_str()
            .unwrap()
            .contains("espalier serve renews it from [server.acme]"),
        "{found}"
    );
}

/// A directory that forgot the account (a CA reset; here a made-up account URL in the kept
/// file, which pebble answers `accountDoesNotExist`): the file goes aside, a new account is
/// registered, the order goes through.
#[test]
fn an_account_the_directory_forgot_is_replaced_and_the_order_goes_through() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    let server = Server::with_config(d, &config(&pebble, &["a.test"], http, https));
    server.wait_for_log("acme: a.test: certificate issued", Duration::from_secs(60));
    drop(server);
    let file = std::fs::read_dir(d.join("store/.acme"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut kept: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let id = kept["id"].as_str().expect("an account URL").to_string();
    let forgotten = format!("{}0000ffff", id.trim_end_matches(|c: char| c != '/'));
    kept["id"] = forgotten.into();
    std::fs::write(&file, kept.to_string()).unwrap();
    let server = Server::with_config(d, &config(&pebble, &["a.test", "b.test"], http, https));
    server.wait_for_log("no longer knows our account", Duration::from_secs(60));
    server.wait_for_log("acme: b.test: certificate issued", Duration::from_secs(60));
    let files: Vec<String> = std::fs::read_dir(d.join("store/.acme"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().any(|f| f.contains(".json.gone-")), "{files:?}");
}

/// A directory that takes connections and never answers: every request to it has a time
/// limit (`timeout`, 2 s here), so the order fails (and says why) instead of waiting for
/// ever.
#[test]
fn a_directory_that_never_answers_fails_the_order_in_bounded_time() {
    let dir = site_dir();
    let d = dir.path();
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hung.local_addr().unwrap().port();
    // Connections complete in the kernel's backlog; nothing reads or answers them.
    crate::common::tls::signed_cert(d, "hung", "localhost");
    let (http, https) = (free_port(), free_port());
    let config = format!(
        "[server]\ncertificates = \"new-store\"\n[server.acme]\ndirectory = \"https://localhost:{port}/dir\"\ntimeout = \"2s\"\nca = \"{}\"\n[[pool]]\nname = \"p\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:{http}:a.test\", \"https://127.0.0.1:{https}:a.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        d.join("ca.pem").display()
    );
    let server = Server::with_config(d, &config);
    let line = server.wait_for_log(
        "the directory did not answer within",
        Duration::from_secs(90),
    );
    assert!(line.contains("a.test"), "{line}");
    drop(hung);
}

/// A reload that leaves `[server.acme]` and the names to order as they were keeps the
/// ordering task: an order under way is not dropped and made again (a hosting panel changing
/// one site's root every second would otherwise never finish one). Seen at a directory that
/// never answers: one connection to it, then the order's failure at its time limit — with no
/// second connection from an order made again after the reload.
#[test]
fn a_reload_that_changes_no_name_keeps_the_order_under_way() {
    let dir = site_dir();
    let d = dir.path();
    std::fs::create_dir(d.join("www2")).unwrap();
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hung.local_addr().unwrap().port();
    crate::common::tls::signed_cert(d, "hung", "localhost");
    let (http, https) = (free_port(), free_port());
    let config = format!(
        "[server]\ncertificates = \"new-store\"\n[server.acme]\ndirectory = \"https://localhost:{port}/dir\"\ntimeout = \"8s\"\nca = \"{}\"\n[[pool]]\nname = \"p\"\n[[site]]\nname = \"a\"\nbindings = [\"http://127.0.0.1:{http}:a.test\", \"https://127.0.0.1:{https}:a.test\"]\nroot = \"www\"\n[[site.app]]\npool = \"p\"\n",
        d.join("ca.pem").display()
    );
    let server = Server::with_config(d, &config);
    // The order's first connection, held open unanswered.
    let (_first, _) = hung.accept().unwrap();
    let file = d.join("espalier.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("root = \"www\"", "root = \"www2\"")).unwrap();
    let (code, body) = server.post("/reload");
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    server.wait_for_log(
        "the directory did not answer within",
        Duration::from_secs(60),
    );
    // The next try is a minute later (its back-off): any connection now is a second order.
    hung.set_nonblocking(true).unwrap();
    let again = hung.accept();
    assert!(
        again.is_err(),
        "the reload made the order again:\n{}",
        server.log_tail(20)
    );
}

/// `profile`: the order asks for the directory's certificate profile — or, where the
/// directory lists no such profile (Debian's pebble 2.4 speaks no profiles extension),
/// nothing is ordered and the reason is one line naming the key and what the directory
/// offers, rather than a certificate of another lifetime than the one asked for.
#[test]
fn a_profile_is_asked_for_and_one_the_directory_lacks_is_refused_in_one_line() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https) = (free_port(), free_port());
    let pebble = Pebble::start(d, http, None);
    let offered = Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(&pebble.api_cert)
        .arg(&pebble.directory)
        .output()
        .unwrap();
    let directory: serde_json::Value = serde_json::from_slice(&offered.stdout).unwrap();
    let lists_it = directory["meta"]["profiles"].get("shortlived").is_some();
    let config = config(&pebble, &["p.test"], http, https).replace(
        "email = \"ops@example.test\"\n",
        "email = \"ops@example.test\"\nprofile = \"shortlived\"\n",
    );
    let server = Server::with_config(d, &config);
    if lists_it {
        server.wait_for_log("acme: p.test: certificate issued", Duration::from_secs(60));
    } else {
        server.wait_for_log(
            "offers no certificate profile `shortlived` (it offers none: it does not speak the ACME profiles extension); set [server.acme] profile",
            Duration::from_secs(60),
        );
        assert!(!d.join("store/p.test.pem").exists());
        skip("the order of a listed profile (this pebble lists none; the refusal was checked)");
    }
}

#[test]
fn ip_addresses_get_their_certificates_by_http_01_and_tls_alpn_01() {
    need_pebble();
    let dir = site_dir();
    let d = dir.path();
    let (http, https, tls) = (free_port(), free_port(), free_port());
    let pebble = Pebble::start_with(d, (http, tls), None, None);
    // 127.0.0.1 has an http:// binding (HTTP-01); 127.0.0.2 is https alone, on the port
    // pebble validates TLS-ALPN-01 on (its handshake names the address by its reverse name).
    let config = format!(
        "[server]\ncertificates = \"store\"\n[server.acme]\ndirectory = \"{}\"\nca = \"{}\"\n[[site]]\nname = \"v4\"\nbindings = [\"http://127.0.0.1:{http}:127.0.0.1\", \"https://127.0.0.1:{https}:127.0.0.1\"]\nroot = \"www\"\n[[site]]\nname = \"alpn\"\nbindings = [\"https://127.0.0.2:{tls}:127.0.0.2\"]\nroot = \"www\"\n",
        pebble.directory,
        pebble.api_cert.display()
    );
    let server = Server::with_config(d, &config);
    for name in ["127.0.0.1", "127.0.0.2"] {
        server.wait_for_log(
            &format!("acme: {name}: certificate issued"),
            Duration::from_secs(60),
        );
    }
    pebble.root(&d.join("root.pem"));
    // A client of https://ADDRESS/ sends no SNI: the address's certificate answers, and the
    // client checks the address against it.
    for (address, port) in [("127.0.0.1", https), ("127.0.0.2", tls)] {
        let fetch = || {
            Command::new("curl")
                .args(["-s", "--max-time", "10", "--cacert"])
                .arg(d.join("root.pem"))
                .arg(format!("https://{address}:{port}/"))
                .output()
                .expect("run curl")
        };
        wait_for(
            "the address's certificate served",
            Duration::from_secs(20),
            || fetch().status.success(),
        );
        assert_eq!(fetch().stdout, b"ordered by espalier\n", "{address}");
    }
}
