//! How the load generator reaches a server: a TCP connection, and over `https://` a TLS
//! session on it (rustls, the same crate and provider as the server), offering `h2` or
//! `http/1.1` by ALPN.
//!
//! Owns: connecting, the client's TLS configuration and which certificates it trusts. Must
//! not touch: HTTP (see [`super::connection`] and [`super::h2`]).

use super::options::{BenchOptions, Target, Trust};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Debian's bundle of the system's trusted CAs (package `ca-certificates`).
const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A connection to the server: cleartext (on tokio's epoll, or on the thread's io_uring) or
/// TLS.
pub(super) enum Stream {
    Plain(TcpStream),
    Ring(crate::os::uring::RingSocket),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Why a connection could not be made.
#[derive(Debug)]
pub(super) enum ConnectError {
    /// TCP could not connect, or the connection broke during the handshake: worth another try.
    Transient,
    /// The TLS session was refused (certificate, protocol versions, alert) or the server
    /// would not speak HTTP/2; the text says why. Trying again would fail again.
    Refused(String),
}

impl ConnectError {
    /// Whether trying again is pointless: the server's certificate or protocols were
    /// refused, and will be refused again.
    pub(super) fn is_permanent(&self) -> bool {
        matches!(self, ConnectError::Refused(_))
    }
}

/// Makes a client thread's connections. Each thread has its own (its own session cache
/// among them), so threads share nothing while measuring.
pub(super) struct Connector {
    tls: Option<TlsConnector>,
    h2: bool,
    /// The server name of each target, in target order (`None` for cleartext targets).
    names: Vec<Option<ServerName<'static>>>,
    /// The thread's ring, when cleartext connections go through io_uring (`--io`).
    ring: Option<std::rc::Rc<crate::os::uring::Ring>>,
}

impl Connector {
    /// A thread's connector, from the run's TLS configuration (`None` when no target is
    /// https).
    pub(super) fn new(opts: &BenchOptions, tls: Option<&ClientConfig>) -> Result<Self, String> {
        let names = opts
            .targets
            .iter()
            .map(|t| {
                t.tls
                    .then(|| {
                        let name = opts.server_name(t);
                        ServerName::try_from(name.to_string())
                            .map_err(|_| format!("`{}`: `{name}` is not a server name", t.url))
                    })
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let tls = tls.map(|base| {
            let mut config = base.clone();
            config.resumption = rustls::client::Resumption::default();
            TlsConnector::from(Arc::new(config))
        });
        Ok(Connector {
            tls,
            h2: opts.h2,
            names,
            ring: None,
        })
    }

    /// Cleartext connections go through `ring` (made on the thread's runtime).
    pub(super) fn with_ring(mut self, ring: Option<std::rc::Rc<crate::os::uring::Ring>>) -> Self {
        self.ring = ring;
        self
    }

    /// Connects to a target, with TLS when it is https.
    pub(super) async fn connect(&self, target: usize, t: &Target) -> Result<Stream, ConnectError> {
        let tcp = TcpStream::connect(t.addr)
            .await
            .map_err(|_| ConnectError::Transient)?;
        let _ = tcp.set_nodelay(true);
        let (Some(tls), Some(name)) = (&self.tls, &self.names[target]) else {
            return Ok(match &self.ring {
                Some(ring) => Stream::Ring(
                    crate::os::uring::RingSocket::from_tokio(ring, tcp)
                        .map_err(|_| ConnectError::Transient)?,
                ),
                None => Stream::Plain(tcp),
            });
        };
        let session = tls
            .connect(name.clone(), tcp)
            .await
            .map_err(|e| match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                Some(rustls::Error::InvalidCertificate(why)) => ConnectError::Refused(format!(
                    "TLS with {}: the server's certificate is refused ({why:?}); give --cacert FILE to trust its CA, or --insecure",
                    t.url
                )),
                Some(why) => ConnectError::Refused(format!("TLS with {}: {why}", t.url)),
                None => ConnectError::Transient,
            })?;
        if self.h2 && session.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(ConnectError::Refused(format!(
                "{} does not offer HTTP/2 over TLS (no `h2` in ALPN); drop --h2",
                t.url
            )));
        }
        Ok(Stream::Tls(Box::new(session)))
    }
}

/// The run's TLS client configuration, or `None` when no target is https: the trusted
/// certificates are read once, and a bad `--cacert` is one line before any load.
pub(super) fn client_config(opts: &BenchOptions) -> Result<Option<ClientConfig>, String> {
    if !opts.targets.iter().any(|t| t.tls) {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS: {e}"))?;
    let mut config = match &opts.trust {
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Believer {
                webpki: None,
                pinned: Vec::new(),
                provider,
            }))
            .with_no_client_auth(),
        Trust::System => builder
            .with_root_certificates(roots(&[SYSTEM_CA_BUNDLE.into()], "the system's CAs")?.0)
            .with_no_client_auth(),
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
                .with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![if opts.h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(Some(config))
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

crate::async_io::delegate_async_io!(Stream { Plain, Ring, Tls });
