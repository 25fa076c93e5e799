//! TLS helpers of the tests: certificates made by openssl (or python3-cryptography for
//! dates openssl cannot set), and curl and `openssl s_client` as clients.

use std::path::Path;
use std::process::{Command, Stdio};

/// A self-signed certificate for `host`, 30 days, as `NAME.pem` and `NAME.key` in `dir`.
pub fn openssl_cert(dir: &Path, name: &str, host: &str) {
    super::run_ok(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "30",
                "-keyout",
            ])
            .arg(dir.join(format!("{name}.key")))
            .arg("-out")
            .arg(dir.join(format!("{name}.pem")))
            .args([
                "-subj",
                &format!("/CN={host}"),
                "-addext",
                &format!("subjectAltName=DNS:{host}"),
            ]),
    );
}

/// A self-signed certificate for `host` valid from `from_days` to `to_days` around now.
pub fn dated_cert(dir: &Path, name: &str, host: &str, from_days: i64, to_days: i64) {
    let script = format!(
        r#"
import datetime
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "{host}")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days={from_days}))
        .not_valid_after(now + datetime.timedelta(days={to_days}))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("{host}")]), critical=False)
        .sign(key, hashes.SHA256()))
open("{name}.pem", "wb").write(cert.public_bytes(serialization.Encoding.PEM))
open("{name}.key", "wb").write(key.private_bytes(serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
"#
    );
    super::run_ok(
        Command::new("python3")
            .args(["-c", &script])
            .current_dir(dir),
    );
}

/// An authority `ca.pem` (+ `.key`) and a server certificate `name.pem` (+ `.key`) for
/// `host` signed by it, in `dir`: what a verifier that takes no self-signed leaf (webpki's)
/// accepts.
pub fn signed_cert(dir: &Path, name: &str, host: &str) {
    signed_cert_for(dir, name, host, &format!("DNS:{host}"));
}

/// As [`signed_cert`], the certificate's names `alt_names` (`DNS:localhost,IP:10.0.0.1`).
pub fn signed_cert_for(dir: &Path, name: &str, host: &str, alt_names: &str) {
    let script = format!(
        "set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout ca.key -out ca.pem -subj '/CN=test authority' 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout {name}.key -out {name}.csr -subj '/CN={host}' 2>/dev/null
printf 'subjectAltName={alt_names}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > {name}.ext
openssl x509 -req -in {name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
  -extfile {name}.ext -out {name}.pem 2>/dev/null"
    );
    super::run_ok(Command::new("bash").args(["-c", &script]).current_dir(dir));
}

/// curl over TLS to `host` on `port`, trusting `ca`; (exit code, body, verbose output).
pub fn curl(
    dir: &Path,
    ca: &str,
    host: &str,
    port: u16,
    path: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "--cacert", ca, "--resolve"])
        .arg(format!("{host}:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://{host}:{port}{path}"))
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openssl s_client` to 127.0.0.1:`port` with `args`, sending an HTTP/1.0 request (so it
/// reads until the answer's close, session tickets included); its whole output.
pub fn s_client(port: u16, args: &[&str]) -> String {
    s_client_via(&[], &format!("127.0.0.1:{port}"), args)
}

/// [`s_client`] to `addr`, run through `prefix` (`nsenter --net=…`: from another network
/// namespace).
pub fn s_client_via(prefix: &[&str], addr: &str, args: &[&str]) -> String {
    use std::io::Write;
    let mut command = match prefix.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg("openssl");
            c
        }
        None => Command::new("openssl"),
    };
    let mut child = command
        .args(["s_client", "-ign_eof", "-connect", addr])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"GET / HTTP/1.0\r\n\r\n");
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}
