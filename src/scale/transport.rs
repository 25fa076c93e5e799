//! How a scaling run reaches its servers: cleartext or TLS, HTTP/1.1 or HTTP/2 — the lines a
//! generated site binds with, and the certificate made for a run over TLS.
//!
//! Owns: the transport's choice and that certificate. Must not touch: running servers or
//! load (see the parent module).

use crate::bench;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How the load reaches the server: over TLS or not, in HTTP/1.1 or HTTP/2.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transport {
    pub tls: bool,
    pub h2: bool,
}

impl Transport {
    pub fn scheme(self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match (self.tls, self.h2) {
            (false, false) => "HTTP/1.1",
            (true, false) => "HTTP/1.1 over TLS",
            (false, true) => "HTTP/2 with prior knowledge (h2c)",
            (true, true) => "HTTP/2 over TLS",
        }
    }

    /// The `bindings` (and `tls`) lines of a generated site on `port`.
    pub fn site_lines(self, port: u16) -> String {
        let mut lines = format!("bindings = [\"{}://127.0.0.1:{port}\"]\n", self.scheme());
        if self.tls {
            lines.push_str(&format!(
                "tls = {{ cert = \"{CERT_FILE}\", key = \"{KEY_FILE}\" }}\n"
            ));
        }
        lines
    }
}

/// The certificate and key made for a run over TLS, in its work folder.
const CERT_FILE: &str = "scale.pem";
const KEY_FILE: &str = "scale.key";

/// Makes a self-signed certificate (ECDSA P-256) for 127.0.0.1 in `work`: the servers of a
/// run over TLS present it, and the load generator believes exactly it.
pub(super) fn make_certificate(work: &Path) -> Result<bench::Trust, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .map_err(|e| format!("cannot make a certificate for the run over TLS: {e}"))?;
    let cert = work.join(CERT_FILE);
    std::fs::write(&cert, made.cert.pem()).map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = work.join(KEY_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key)
        .and_then(|mut f| f.write_all(made.key_pair.serialize_pem().as_bytes()))
        .map_err(|e| format!("{}: {e}", key.display()))?;
    Ok(bench::Trust::CaFiles(vec![cert]))
}
