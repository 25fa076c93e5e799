//! One HTTP/3 client connection (`--h3`): QUIC with ALPN `h3` to an https target (quinn and
//! h3, as on the server side), carrying `--pipeline K` concurrent request streams ("lanes"),
//! each a closed loop of requests — or one lane on the open-loop schedule of `--rate`.
//!
//! Owns: a connection's lanes over QUIC, and telling a broken connection (reconnect) from a
//! stream the server did not take (sent again, as a client may: RFC 9114 §5.2) or one it
//! failed. Must not touch: the request every stream sends (see [`super::h2::H2Request`]) or
//! the counters' rules (see [`super::state`]).

use super::h2::H2Request;
use super::options::BenchOptions;
use super::state::ThreadState;
use super::transport::ConnectError;
use bytes::{Buf, Bytes};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// The receive buffer a client thread's UDP socket asks for.
const RECEIVE_BUFFER: usize = 8 << 20;

/// A client thread's QUIC endpoint (one UDP socket for all its connections) and the TLS its
/// connections speak.
pub(super) struct H3Client {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
}

impl H3Client {
    /// A thread's endpoint; `tls` already says ALPN `h3`.
    pub(super) fn new(tls: &rustls::ClientConfig, ipv6: bool) -> Result<H3Client, String> {
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls.clone()))
            .map_err(|e| format!("cannot make the QUIC TLS configuration: {e}"))?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        let mut transport = quinn::TransportConfig::default();
        // Windows large enough that they never pace the load.
        transport
            .stream_receive_window((8u32 << 20).into())
            .receive_window((64u32 << 20).into());
        config.transport_config(Arc::new(transport));
        let bind = if ipv6 { "[::]:0" } else { "0.0.0.0:0" };
        // Datagrams as large as this machine's largest link carries, as a server's path-MTU
        // discovery may send them (quinn's default takes 1 472 bytes at most), bounded as a
        // GSO burst's (server::quic_path): quinn's receive buffer is that × 64 × 32 bytes.
        let largest = (crate::os::net::link_mtus().into_iter())
            .map(|(_, mtu)| mtu)
            .max()
            .unwrap_or(1_500);
        let mut endpoint_config = quinn::EndpointConfig::default();
        let accepted = crate::server::quic_path::datagram_bound(largest, ipv6, true);
        (endpoint_config.max_udp_payload_size(accepted))
            .map_err(|e| format!("cannot take {accepted}-byte datagrams: {e}"))?;
        let open = |e: std::io::Error| format!("cannot open a UDP socket for HTTP/3: {e}");
        let socket = std::net::UdpSocket::bind(bind).map_err(open)?;
        // Room for a burst of answers to all its connections (the kernel's default, 208 KiB,
        // dropped ~3 % of 20 KB answers' datagrams at 10 × 10 streams here, and the server's
        // retransmissions were then measured as its cost); capped by net.core.rmem_max.
        let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(RECEIVE_BUFFER);
        let runtime = Arc::new(quinn::TokioRuntime);
        let endpoint =
            quinn::Endpoint::new(endpoint_config, None, socket, runtime).map_err(open)?;
        Ok(H3Client { endpoint, config })
    }
}

/// How a lane ended.
#[derive(PartialEq, Eq)]
enum LaneEnd {
    Stop,
    Broken,
}

/// One HTTP/3 connection's life: connect, run its lanes, reconnect when it breaks.
pub(super) async fn h3_connection(
    opts: Rc<BenchOptions>,
    target: usize,
    state: Rc<ThreadState>,
    request: Rc<H2Request>,
    (rate, first_send): (Option<f64>, Instant),
    client: Rc<H3Client>,
) {
    let lanes = if rate.is_some() {
        1
    } else {
        opts.pipeline.max(1)
    };
    let sent: Vec<Rc<Cell<u64>>> = (0..lanes).map(|_| Rc::new(Cell::new(0))).collect();
    let t = &opts.targets[target];
    loop {
        if state.stopping(Instant::now()) {
            return;
        }
        let connecting =
            (client.endpoint).connect_with(client.config.clone(), t.addr, opts.server_name(t));
        let conn = match connecting {
            Ok(c) => tokio::time::timeout(opts.timeout, c).await,
            Err(e) => {
                state.record_connect_failure(&ConnectError::Refused(format!(
                    "QUIC with {}: {e}",
                    t.url
                )));
                return;
            }
        };
        let conn = match conn {
            Ok(Ok(conn)) => conn,
            // The handshake refused (a certificate, no `h3` in ALPN): it would be again.
            Ok(Err(quinn::ConnectionError::TransportError(e))) => {
                state.record_connect_failure(&ConnectError::Refused(format!(
                    "QUIC with {}: {e}; give --cacert FILE to trust its CA, or --insecure, or drop --h3 where the server has no HTTP/3",
                    t.url
                )));
                return;
            }
            _ => {
                state.record_connect_failure(&ConnectError::Transient);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let quic = conn.clone();
        let Ok((mut driver, send)) = h3::client::new(h3_quinn::Connection::new(conn)).await else {
            state.record_connect_failure(&ConnectError::Transient);
            continue;
        };
        tokio::task::spawn_local(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        let mut running = tokio::task::JoinSet::new();
        for schedule in &sent {
            running.spawn_local(lane(
                send.clone(),
                Rc::clone(&opts),
                Rc::clone(&state),
                Rc::clone(&request),
                (rate, first_send),
                Rc::clone(schedule),
            ));
        }
        drop(send);
        let mut stopped = true;
        while let Some(end) = running.join_next().await {
            stopped &= end.is_ok_and(|e| e == LaneEnd::Stop);
        }
        let received = quic.stats().udp_rx;
        let mut result = state.result.borrow_mut();
        result.datagrams += received.datagrams;
        result.datagram_bytes += received.bytes;
        drop(result);
        if stopped {
            return;
        }
    }
}

/// One stream after another on a connection, until the run ends or the connection breaks.
async fn lane(
    mut send: SendRequest,
    opts: Rc<BenchOptions>,
    state: Rc<ThreadState>,
    request: Rc<H2Request>,
    (rate, first_send): (Option<f64>, Instant),
    sent: Rc<Cell<u64>>,
) -> LaneEnd {
    loop {
        let now = Instant::now();
        if state.stopping(now) {
            return LaneEnd::Stop;
        }
        let scheduled = match rate {
            Some(r) => {
                let at = first_send + Duration::from_secs_f64(sent.get() as f64 / r);
                if at > now {
                    tokio::time::sleep_until(at).await;
                }
                Some(at)
            }
            None => None,
        };
        let Some(batch) = state.next_batch(1) else {
            return LaneEnd::Stop;
        };
        let t0 = scheduled.unwrap_or_else(Instant::now);
        sent.set(sent.get() + 1);
        match tokio::time::timeout(opts.timeout, exchange(&mut send, &request)).await {
            Ok(Ok((status, bytes))) => state.record_response(batch.measured, t0, status, bytes),
            Ok(Err(e)) => {
                if opts.retry_unanswered && unprocessed(&e) {
                    // The server took no part of it (a draining server's GOAWAY, or
                    // H3_REQUEST_REJECTED): sent again, keeping its place in the schedule.
                    state.unclaim(batch);
                    sent.set(sent.get() - 1);
                } else {
                    state.record_failure(batch.measured, 1, false);
                }
                if !matches!(e, h3::error::StreamError::RemoteTerminate { .. }) {
                    return LaneEnd::Broken;
                }
            }
            Err(_) => state.record_failure(batch.measured, 1, true),
        }
    }
}

/// Whether the server left the request unprocessed, so that it may be sent again (RFC 9114
/// §4.1.1: H3_REQUEST_REJECTED; a GOAWAY's stream limit, §5.2).
fn unprocessed(e: &h3::error::StreamError) -> bool {
    use h3::error::{Code, StreamError};
    match e {
        StreamError::RemoteTerminate { code, .. } => *code == Code::H3_REQUEST_REJECTED,
        StreamError::RemoteClosing { .. } => true,
        _ => false,
    }
}

/// One request and its whole response: the status, and the bytes of its header fields and
/// body.
async fn exchange(
    send: &mut SendRequest,
    request: &H2Request,
) -> Result<(u16, u64), h3::error::StreamError> {
    let mut stream = send.send_request(request.request()).await?;
    if !request.body.is_empty() {
        stream.send_data(request.body.clone()).await?;
    }
    stream.finish().await?;
    let response = stream.recv_response().await?;
    let status = response.status().as_u16();
    let mut bytes: u64 = (response.headers().iter())
        .map(|(n, v)| (n.as_str().len() + v.len() + 4) as u64)
        .sum();
    while let Some(piece) = stream.recv_data().await? {
        bytes += piece.remaining() as u64;
    }
    Ok((status, bytes))
}
