//! The QUIC endpoints of a worker's threads (`[server] http3`): on each https address a
//! thread listens on, the UDP socket the master gave it (one of the thread's own: see
//! [`super::quic_steering`]), a quinn endpoint on it, and its connections served by
//! `http::h3`.
//!
//! Owns: the endpoints' QUIC settings (a connection's by the link it arrives on: see
//! [`super::quic_path`]), the connection IDs they issue (naming their socket,
//! so the master's program brings every datagram of a connection back to it — across a
//! recycle too), and accepting their connections within the thread's connection limit.
//! Must not touch: the sockets' life (the master's), HTTP/3 itself (see
//! [`crate::http::h3`]) or the TLS configuration beyond its ALPN, 0-RTT and the on-demand
//! resolver QUIC needs (see [`crate::tls::server_config`], [`crate::tls::Held::asking`]).
//!
//! Address validation: a client whose address is not validated yet is sent a Retry (RFC 9000
//! §8.1.2) once the thread has [`RETRY_PAST`] handshakes under way, so a flood of Initials
//! from forged addresses costs a stateless packet each, not a connection's state. The Retry's
//! ID names this socket too, so the client's answer comes back to the endpoint whose key
//! can check its token.
//!
//! Connection migration is off: quinn answered packets from a new address before that path
//! was validated beyond RFC 9000's three times what it received (PINGs from 20 spoofed ports
//! of another address made it send that address 42× the bytes), so a client's datagrams from
//! an address its connection did not start on are dropped; a client whose NAT rebinds opens a
//! new connection (with 0-RTT where it may). What a connection may hold is bounded: 1 MiB per
//! stream and 8 MiB in all of what its client sent and the server has not read (quinn's
//! connection window is unbounded by default; h3 skips frames it does not use as they come).

use super::conn_task::Slot;
use crate::handlers::ThreadService;
use crate::http::service::ConnEnv;
use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// Handshakes under way on a thread past which a new client must prove its address first.
const RETRY_PAST: usize = 64;
/// What a client may send on one stream, and on all of a connection's, before the server
/// reads it.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 8 << 20;
/// Unidirectional streams a client may open: HTTP/3's control stream and QPACK's two, and
/// room for a few it may add (RFC 9114 §6.2: unknown types are ignored).
const UNI_STREAMS: u32 = 8;

/// The machine's addresses with their links' MTUs (see [`links`]).
pub type Links = Arc<[(IpAddr, u32)]>;

/// One thread's QUIC sockets: (socket, group, its index in the address's reuseport group).
pub type ThreadSockets = Vec<(UdpSocket, usize, u16)>;

/// Takes the UDP sockets the master handed each thread, for the groups the worker has a TLS
/// configuration for; `quic[t]` is thread `t`'s. Each descriptor is taken once, here.
pub fn sockets(
    spec: &super::spec::WorkerSpec,
    has_tls: impl Fn(usize) -> bool,
) -> Vec<ThreadSockets> {
    (spec.threads.iter())
        .map(|thread| {
            (thread.quic.iter())
                .filter(|q| q.fd >= 0 && spec.http3 && spec.groups[q.group].tls)
                .filter(|q| has_tls(q.group))
                .map(|q| {
                    // The master passed this descriptor to this process for this thread
                    // alone, and nothing else in the worker takes it.
                    let socket = crate::os::net::adopt_udp(q.fd);
                    (socket, q.group, q.index)
                })
                .collect()
        })
        .collect()
}

/// Connection IDs that name the socket an endpoint reads (see
/// [`super::quic_steering::cid`]), with the master's tag and 8 random bytes each.
struct SteeredIds {
    tag: u16,
    index: u16,
    /// The TLS configuration's generator (ring's, from the operating system).
    random: &'static dyn rustls::crypto::SecureRandom,
}

impl quinn::ConnectionIdGenerator for SteeredIds {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut random = [0u8; 8];
        if self.random.fill(&mut random).is_err() {
            random = fastrand::u64(..).to_ne_bytes();
        }
        quinn::ConnectionId::new(&super::quic_steering::cid(self.tag, self.index, random))
    }

    fn cid_len(&self) -> usize {
        super::quic_steering::CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// A quinn endpoint on `socket`, answering with `tls` (its certificates, by SNI) for ALPN
/// `h3` only; 0-RTT off unless `early_data` (`http3_early_data`: see `http::h3::early`) gives
/// the sessions' store; with
/// its connections' configurations by the link they arrive on (`links`: see [`links`]).
/// With certificates ordered on demand (`held`), a name without one is asked for by the
/// resolver, since a QUIC handshake cannot be held for it ([`crate::tls::Held::asking`]).
pub fn endpoint(
    (socket, index): (UdpSocket, u16),
    tag: u16,
    tls: &Arc<rustls::ServerConfig>,
    (idle, early_data): (
        Duration,
        Option<Arc<dyn rustls::server::StoresServerSessions>>,
    ),
    (links, held): (&Links, Option<&crate::tls::Held>),
) -> Result<(quinn::Endpoint, PathConfigs), String> {
    let mut tls = (**tls).clone();
    if let Some(held) = held {
        tls.cert_resolver = held.asking();
    }
    // The connection IDs' random bytes from the configuration's own generator.
    let random = tls.crypto_provider().secure_random;
    tls.alpn_protocols = vec![b"h3".to_vec()];
    // quinn takes 0-RTT with no bound but the connection's flow control, or none.
    tls.max_early_data_size = if early_data.is_some() { u32::MAX } else { 0 };
    if let Some(sessions) = early_data {
        // rustls takes early data only on a session resumed from its own store (stateful,
        // single-use: a replayed first flight finds its ticket taken), never from a
        // self-contained ticket; the store is the pool's (`tls::session_table`), so a
        // client's next connection may land on any of its workers.
        tls.ticketer = Arc::new(StatefulTicketsOnly);
        tls.session_storage = sessions;
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
        .map_err(|e| format!("cannot make the QUIC TLS configuration: {e}"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(transport(idle, None)));
    server.migration(false);
    let mut config = quinn::EndpointConfig::default();
    config.cid_generator(move || Box::new(SteeredIds { tag, index, random }));
    let paths = PathConfigs {
        base: server.clone(),
        idle,
        gso: gso(),
        links: Arc::clone(links),
        made: RefCell::new(Vec::new()),
    };
    let endpoint =
        quinn::Endpoint::new(config, Some(server), socket, Arc::new(quinn::TokioRuntime))
            .map_err(|e| format!("cannot start a QUIC endpoint: {e}"))?;
    Ok((endpoint, paths))
}

/// A connection's transport settings: streams as for HTTP/2, the idle timeout, GSO, and the
/// largest datagram its path-MTU discovery may search up to (`None`: quinn's, Ethernet-sized).
fn transport(idle: Duration, datagram_bound: Option<u16>) -> quinn::TransportConfig {
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(crate::http::h2::MAX_STREAMS.into())
        .max_concurrent_uni_streams(UNI_STREAMS.into())
        .max_idle_timeout(idle.try_into().ok())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into())
        .enable_segmentation_offload(gso());
    if let Some(bound) = datagram_bound {
        let mut discovery = quinn::MtuDiscoveryConfig::default();
        discovery.upper_bound(bound);
        transport.mtu_discovery_config(Some(discovery));
    }
    transport
}

/// An endpoint's server configurations, one per datagram bound its connections' links allow
/// (see [`super::quic_path`]), made when a connection first needs one: an endpoint on a
/// wildcard address takes connections over every interface.
pub struct PathConfigs {
    base: quinn::ServerConfig,
    idle: Duration,
    /// Whether quinn bursts datagrams (GSO): their bound depends on it.
    gso: bool,
    /// The machine's addresses and their links' MTUs, read when the worker started.
    links: Links,
    made: RefCell<Vec<(u16, Arc<quinn::ServerConfig>)>>,
}

impl PathConfigs {
    /// The configuration for a connection from `remote` to `local` (the address its Initial
    /// was sent to); `None` where the link is unknown (the endpoint's own: quinn's bound).
    fn for_path(
        &self,
        local: Option<IpAddr>,
        remote: SocketAddr,
    ) -> Option<Arc<quinn::ServerConfig>> {
        let mtu = super::quic_path::link_mtu(local?, &self.links)?;
        let ipv6 = remote.ip().to_canonical().is_ipv6();
        let bound = super::quic_path::datagram_bound(mtu, ipv6, self.gso);
        let mut made = self.made.borrow_mut();
        if let Some((_, config)) = made.iter().find(|(b, _)| *b == bound) {
            return Some(Arc::clone(config));
        }
        let mut config = self.base.clone();
        config.transport_config(Arc::new(transport(self.idle, Some(bound))));
        let config = Arc::new(config);
        made.push((bound, Arc::clone(&config)));
        Some(config)
    }
}

/// The machine's addresses with their links' MTUs, for [`endpoint`]'s connections' datagram
/// bounds, read once per worker process (its threads share them); none (quinn's
/// Ethernet-sized bound everywhere) where the environment's `ESPALIER_QUIC_PATH_MTU=off` says
/// so — bench/h3.sh's way of measuring what larger datagrams save.
pub fn links() -> Links {
    static LINKS: std::sync::OnceLock<Links> = std::sync::OnceLock::new();
    let read = || match std::env::var("ESPALIER_QUIC_PATH_MTU").is_ok_and(|v| v == "off") {
        true => Arc::from([]),
        false => crate::os::net::link_mtus().into(),
    };
    Arc::clone(LINKS.get_or_init(read))
}

/// The ticketer of an endpoint that takes 0-RTT: none, so that resumption goes through the
/// session store (see [`endpoint`]).
#[derive(Debug)]
struct StatefulTicketsOnly;

impl rustls::server::ProducesTickets for StatefulTicketsOnly {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Whether quinn may send a burst of datagrams in one `sendmsg` (GSO, where the kernel has
/// it): yes, unless the environment's `ESPALIER_QUIC_GSO=off` says not — bench/h3.sh's way
/// of measuring what it saves.
fn gso() -> bool {
    std::env::var("ESPALIER_QUIC_GSO").map_or(true, |v| v != "off")
}

/// What a thread's endpoints need of it: its requests' environment and its connection count
/// and limit (shared with its TCP connections), and where a contained panic is told.
pub struct Thread {
    pub env: Rc<ConnEnv<ThreadService>>,
    pub open: Rc<Cell<usize>>,
    pub max_conns: usize,
    pub panics: Arc<AtomicU64>,
    pub who: Rc<str>,
}

/// Takes `endpoint`'s connections until the worker drains; then new ones are refused (the
/// successor's endpoints take them) and those open get GOAWAY from `http::h3`.
pub async fn accept_loop(
    (endpoint, paths): (quinn::Endpoint, PathConfigs),
    (group, early_data): (usize, bool),
    thread: Rc<Thread>,
) {
    let env = &thread.env;
    let handshakes = Rc::new(Cell::new(0usize));
    loop {
        if env.shutdown.started.get() {
            break;
        }
        let incoming = tokio::select! {
            biased;
            _ = env.shutdown.notify.notified() => break,
            incoming = endpoint.accept() => incoming,
        };
        let Some(incoming) = incoming else { break };
        if thread.open.get() >= thread.max_conns {
            incoming.refuse();
            continue;
        }
        if !incoming.remote_address_validated() && handshakes.get() >= RETRY_PAST {
            // An Initial already answered by a Retry and still unvalidated is dropped.
            let _ = incoming.retry();
            continue;
        }
        let peer = Some(incoming.remote_address());
        let local = (incoming.local_ip()).or_else(|| Some(endpoint.local_addr().ok()?.ip()));
        let config = paths.for_path(local, incoming.remote_address());
        let (env, handshaking) = (Rc::clone(env), Slot::take(&handshakes));
        let fut = Box::pin(async move {
            let timeout = env.timeouts.header;
            let accepted = match config {
                Some(config) => incoming.accept_with(config),
                None => incoming.accept(),
            };
            let Ok(connecting) = accepted else {
                return;
            };
            // With 0-RTT, a resumed client's first requests are read before the handshake
            // completes (0.5-RTT): the handshake still counts as under way until then.
            let connecting = match early_data {
                true => connecting.into_0rtt(),
                false => Err(connecting),
            };
            let (conn, handshake_end) = match connecting {
                Ok((conn, accepted)) => {
                    let watched = conn.clone();
                    let end: crate::http::h3::HandshakeEnd = Box::pin(async move {
                        // A server's `accepted` says nothing but that the handshake ended:
                        // it completed if the connection lives on.
                        let ended = tokio::time::timeout(timeout, accepted).await.is_ok();
                        drop(handshaking);
                        if !ended {
                            watched.close(0u32.into(), b"handshake timeout");
                        }
                        ended && watched.close_reason().is_none()
                    });
                    (conn, Some(end))
                }
                Err(connecting) => {
                    let connected = tokio::time::timeout(timeout, connecting).await;
                    drop(handshaking);
                    match connected {
                        Ok(Ok(conn)) => (conn, None),
                        _ => return,
                    }
                }
            };
            crate::http::h3::serve(conn, group, env, handshake_end).await;
        });
        tokio::task::spawn_local(super::conn_task::contain(
            fut,
            peer,
            Slot::take(&thread.open),
            Arc::clone(&thread.panics),
            Rc::clone(&thread.who),
        ));
    }
    endpoint.set_server_config(None);
}
