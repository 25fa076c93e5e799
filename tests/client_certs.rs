//! Client certificates (issue #29, item 5): a site that requires one refuses a client
//! without it (or with one of another authority) in the handshake, and tells its app the
//! verified subject in `X-Client-Subject` (which a client cannot set itself); an optional
//! site lets a client without one in, unnamed. curl with `--cert`, over HTTP/1.1 and HTTP/2.

use crate::common;

use common::tls::*;
use common::*;
use std::path::Path;
use std::process::Command;

/// A certificate authority `NAME-ca` and a client certificate `NAME-client` it issued for
/// `subject`, in `dir`.
fn authority_and_client(dir: &Path, name: &str, subject: &str) {
    let ossl = |args: &[&str]| {
        run_ok(Command::new("openssl").args(args).current_dir(dir));
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_key, ca_pem) = (format!("{name}-ca.key"), format!("{name}-ca.pem"));
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend(["-days", "30", "-keyout", &ca_key, "-out", &ca_pem, "-subj"]);
    let ca_subject = format!("/CN={name} clients CA");
    args.push(&ca_subject);
    ossl(&args);
    let (key, csr, pem) = (
        format!("{name}-client.key"),
        format!("{name}-client.csr"),
        format!("{name}-client.pem"),
    );
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
    ossl(&args);
    // An X.509 v3 certificate for client authentication (webpki takes no v1 certificate).
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    ossl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca_pem,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "client.ext",
        "-out",
        &pem,
    ]);
}

#[test]
fn a_verified_client_certificate_names_the_client_to_the_app() {
    need_tools("curl:curl openssl:openssl", "curl and openssl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl_cert(d, "localhost", "localhost");
    authority_and_client(d, "shop", "/CN=alice/O=Shop");
    authority_and_client(d, "other", "/CN=mallory/O=Elsewhere");
    let (required, optional) = (free_port(), free_port());
    let site = |name: &str, port: u16, mode: &str| {
        format!("[[site]]\nname = \"{name}\"\nbindings = [\"https://127.0.0.1:{port}:localhost\"]\ntls = {{ cert = \"localhost.pem\", key = \"localhost.key\" }}\nclient_certs = {{ ca = \"shop-ca.pem\", mode = \"{mode}\" }}\n[[site.app]]\npool = \"app\"\n")
    };
    let config = format!(
        "[[pool]]\nname = \"app\"\ncommand = [\"python3\", \"{}\"]\n{}{}",
        test_app().display(),
        site("required", required, "required"),
        site("optional", optional, "optional"),
    );
    let server = Server::with_config(d, &config);
    let alice = ["--cert", "shop-client.pem", "--key", "shop-client.key"];
    let mallory = ["--cert", "other-client.pem", "--key", "other-client.key"];
    let forged = ["-H", "X-Client-Subject: CN=root"];
    for proto in ["--http1.1", "--http2"] {
        let ask = |port: u16, extra: &[&str]| {
            let mut args = vec![proto];
            args.extend_from_slice(extra);
            curl(d, "localhost.pem", "localhost", port, "/subject", &args)
        };
        // Required: the verified subject, never what the client wrote.
        let (code, body, verbose) = ask(required, &[&alice[..], &forged[..]].concat());
        assert_eq!(code, 0, "{verbose}\n{}", server.log_text());
        assert_eq!(body, "subject=CN=alice, O=Shop\n", "{verbose}");
        // Without a certificate, or with another authority's: no connection.
        for extra in [&forged[..], &mallory[..]] {
            let (code, body, verbose) = ask(required, extra);
            assert_ne!(code, 0, "{extra:?}: {verbose}");
            assert!(!body.contains("subject="), "{body}");
        }
        // Optional: named when given, let in unnamed when not.
        let (_, body, _) = ask(optional, &alice);
        assert_eq!(body, "subject=CN=alice, O=Shop\n");
        let (code, body, verbose) = ask(optional, &forged);
        assert_eq!((code, body.as_str()), (0, "subject=\n"), "{verbose}");
    }
    drop(server);
}
