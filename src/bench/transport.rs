//! How the load generator reaches a server: a TCP connection, and over `https://` a TLS
//! session on it (rustls, the same crate and provider as the server), offering `h2` or
//! `http/1.1` by ALPN.
//!
//! Owns: connecting, the client's TLS configuration and which certificates it trusts. Must
//! not touch: HTTP (see [`super::connection`] and [`super::h2`]).

use super::options::{BenchOptions, Target};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

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
        // A thread's own session store (the run's configuration says whether to resume).
        let tls = tls.map(|base| {
            let mut config = base.clone();
            if opts.resume {
                config.resumption = rustls::client::Resumption::default();
            }
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
    let alpn = if opts.h3 {
        b"h3".to_vec()
    } else if opts.h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    };
    let provider = match &opts.tls_groups {
        None => crate::certs::provider(),
        Some(groups) => Arc::new(offering(groups)),
    };
    let mut config =
        crate::tls::client::client_config_with(provider, &opts.trust, None, vec![alpn])?;
    if !opts.resume {
        config.resumption = rustls::client::Resumption::disabled();
    }
    Ok(Some(config))
}

/// espalier's crypto provider offering the key exchange groups `groups` alone, in that order
/// (each one it offers: see `options::parse_tls_groups`).
fn offering(groups: &[rustls::NamedGroup]) -> rustls::crypto::CryptoProvider {
    let mut provider = (*crate::certs::provider()).clone();
    let ours = std::mem::take(&mut provider.kx_groups);
    provider.kx_groups = (groups.iter())
        .filter_map(|&name| ours.iter().find(|g| g.name() == name).copied())
        .collect();
    provider
}

crate::async_io::delegate_async_io!(Stream { Plain, Ring, Tls });
