//! TLS as a client: to upstream servers (`[upstream.tls]`) and for the load generator
//! (`espalier bench https://…`) — which certificates are believed, and the client
//! configuration made from that.
//!
//! Owns: [`Trust`], the verifier and [`client_config`]. Must not touch: connecting or HTTP
//! (the proxy's and the bench's).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// Debian's bundle of the system's trusted CAs (package `ca-certificates`).
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Which server certificates a client believes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The system's CA bundle (Debian's `ca-certificates`).
    System,
    /// These PEM files' certificates (`--cacert`, `tls.ca`), for a private CA or a
    /// self-signed server.
    CaFiles(Vec<std::path::PathBuf>),
    /// Any certificate (`--insecure` as `curl -k`, `verify = false`): the handshake's
    /// signatures are still checked, so the server does the same work as for a verifying
    /// client.
    Insecure,
}

/// A client configuration that believes `trust`, offers `alpn`, and shows `client_cert`
/// (a PEM chain and key) to a server that asks: the trusted certificates are read once.
pub fn client_config(
    trust: &Trust,
    client_cert: Option<(&Path, &Path)>,
    alpn: Vec<Vec<u8>>,
) -> Result<ClientConfig, String> {
    client_config_with(crate::certs::provider(), trust, client_cert, alpn)
}

/// [`client_config`] on `provider` (the load generator's may offer fewer key exchange
/// groups: `espalier bench --tls-groups`).
pub fn client_config_with(
    provider: Arc<rustls::crypto::CryptoProvider>,
    trust: &Trust,
    client_cert: Option<(&Path, &Path)>,
    alpn: Vec<Vec<u8>>,
) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match trust {
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Believer {
                webpki: None,
                pinned: Vec::new(),
                provider,
            })),
        Trust::System => {
            builder.with_root_certificates(roots(&[SYSTEM_CA_BUNDLE.into()], "the system's CAs")?.0)
        }
        Trust::CaFiles(files) => {
            let (store, pinned) = roots(files, "--cacert")?;
            let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(store),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| format!("--cacert: {e}"))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Believer {
                    webpki: Some(webpki),
                    pinned,
                    provider,
                }))
        }
    };
    let mut config = match client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let read = |f: &Path| {
                std::fs::read(f).map_err(|e| format!("cannot read {}: {e}", f.display()))
            };
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{} is not valid PEM: {e}", cert.display()))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| format!("cannot read a private key from {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate {}: {e}", cert.display()))?
        }
    };
    config.alpn_protocols = alpn;
    Ok(config)
}

/// The certificates of PEM files, as trust anchors, and as they are.
fn roots(
    files: &[std::path::PathBuf],
    what: &str,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
    let mut store = RootCertStore::empty();
    let mut all = Vec::new();
    for f in files {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(f)
            .and_then(|i| i.collect())
            .map_err(|e| {
                format!(
                    "{what}: cannot read certificates from {}: {e}; {}",
                    f.display(),
                    if what == "--cacert" {
                        "give a readable PEM file"
                    } else {
                        "install ca-certificates, or give --cacert FILE or --insecure"
                    }
                )
            })?;
        all.extend(certs.iter().cloned());
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!(
                "{what}: {} holds no usable certificate; give a PEM file of CA certificates",
                f.display()
            ));
        }
    }
    Ok((store, all))
}

/// The certificates `--cacert` and `--insecure` believe; the handshake's signatures are
/// checked either way, so the server does a browser's work.
/// - `--cacert`: a certificate chained to one of the files' CAs, or exactly one of the files'
///   certificates. The second is how `curl --cacert` accepts a self-signed server
///   certificate, which `openssl req -x509` marks as a CA and WebPKI therefore refuses as a
///   server's;
/// - `--insecure` (`webpki` is `None`): any certificate.
#[derive(Debug)]
struct Believer {
    webpki: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Believer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.webpki {
            Some(webpki)
                if !self
                    .pinned
                    .iter()
                    .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                webpki.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                )
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
