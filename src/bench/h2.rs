//! One HTTP/2 client connection (`--h2`): over TLS by ALPN, or h2c with prior knowledge,
//! carrying `--pipeline K` concurrent streams ("lanes"), each a closed loop of requests — or
//! one lane on the open-loop schedule of `--rate`. Framing, HPACK and flow control are the
//! `h2` crate's, as on the server side.
//!
//! Owns: a connection's lanes, the request every stream sends, and telling a broken
//! connection (reconnect) from a refused stream (count it, go on). Must not touch: TLS (see
//! [`super::transport`]) or the counters' rules (see [`super::state`]).

use super::options::BenchOptions;
use super::state::ThreadState;
use super::transport::Connector;
use bytes::Bytes;
use h2::client::SendRequest;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

/// Flow-control windows large enough that they never pace the load (h2load's defaults are
/// larger still).
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;

/// What every stream of a target sends, built once per thread (HTTP/3's too).
pub(super) struct H2Request {
    method: http::Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    pub(super) body: Bytes,
}

/// Headers HTTP/2 forbids (RFC 9113 §8.2.2), dropped from `-H`; `Host` becomes `:authority`.
const NOT_IN_H2: [&str; 6] = [
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

impl H2Request {
    /// A target's request, or one line naming the option HTTP/2 cannot carry.
    pub(super) fn new(opts: &BenchOptions, target: usize) -> Result<H2Request, String> {
        let t = &opts.targets[target];
        let authority = opts.authority(t);
        let scheme = if t.tls { "https" } else { "http" };
        let uri: http::Uri = format!("{scheme}://{authority}{}", t.path)
            .parse()
            .map_err(|e| format!("`{}`: not a URL HTTP/2 can send: {e}", t.url))?;
        let method = http::Method::from_bytes(opts.method.as_bytes())
            .map_err(|_| format!("--method `{}` is not an HTTP method", opts.method))?;
        let mut headers = http::HeaderMap::new();
        for (n, v) in &opts.headers {
            if NOT_IN_H2.iter().any(|h| n.eq_ignore_ascii_case(h)) {
                continue;
            }
            let name = http::HeaderName::from_bytes(n.as_bytes())
                .map_err(|_| format!("--header `{n}`: not a header name"))?;
            let value = http::HeaderValue::from_str(v)
                .map_err(|_| format!("--header `{n}: {v}`: not a header value"))?;
            headers.append(name, value);
        }
        if !opts.body.is_empty() || method == http::Method::POST || method == http::Method::PUT {
            headers.insert(http::header::CONTENT_LENGTH, opts.body.len().into());
        }
        Ok(H2Request {
            method,
            uri,
            headers,
            body: Bytes::copy_from_slice(&opts.body),
        })
    }

    pub(super) fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// How a lane ended.
#[derive(PartialEq, Eq)]
enum LaneEnd {
    /// The run is over for this connection.
    Stop,
    /// The connection failed or went away: open another.
    Broken,
}

/// One HTTP/2 connection's life: connect, run its lanes, reconnect when it breaks.
#[allow(clippy::too_many_arguments)]
pub(super) async fn h2_connection(
    opts: Rc<BenchOptions>,
    target: usize,
    state: Rc<ThreadState>,
    request: Rc<H2Request>,
    rate: Option<f64>,
    first_send: Instant,
    connector: Rc<Connector>,
) {
    let lanes = if rate.is_some() {
        1
    } else {
        opts.pipeline.max(1)
    };
    // Each lane's place in the open-loop schedule survives reconnections.
    let sent: Vec<Rc<Cell<u64>>> = (0..lanes).map(|_| Rc::new(Cell::new(0))).collect();
    loop {
        if state.stopping(Instant::now()) {
            return;
        }
        let stream = match connector.connect(target, &opts.targets[target]).await {
            Ok(s) => s,
            Err(why) => {
                state.record_connect_failure(&why);
                if why.is_permanent() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let handshake = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(stream)
            .await;
        let (send, driver) = match handshake {
            Ok(pair) => pair,
            Err(_) => {
                state.record_connect_failure(&super::transport::ConnectError::Transient);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::task::spawn_local(async move {
            let _ = driver.await;
        });
        let mut running = tokio::task::JoinSet::new();
        for schedule in &sent {
            running.spawn_local(lane(
                send.clone(),
                Rc::clone(&opts),
                Rc::clone(&state),
                Rc::clone(&request),
                rate,
                first_send,
                Rc::clone(schedule),
            ));
        }
        drop(send);
        let mut stopped = true;
        while let Some(end) = running.join_next().await {
            stopped &= end.is_ok_and(|e| e == LaneEnd::Stop);
        }
        if stopped {
            return;
        }
    }
}

/// One stream after another on a connection, until the run ends or the connection breaks.
async fn lane(
    mut send: SendRequest<Bytes>,
    opts: Rc<BenchOptions>,
    state: Rc<ThreadState>,
    request: Rc<H2Request>,
    rate: Option<f64>,
    first_send: Instant,
    sent: Rc<Cell<u64>>,
) -> LaneEnd {
    loop {
        let now = Instant::now();
        if state.stopping(now) {
            return LaneEnd::Stop;
        }
        // Open loop: wait for this request's scheduled time; latency counts from it.
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
                    // Not an error: the server did not take the request (a draining
                    // server's GOAWAY, or REFUSED_STREAM), so it is sent again, as a
                    // browser would, keeping its place in the schedule (RFC 9113 §8.7).
                    state.unclaim(batch);
                    sent.set(sent.get() - 1);
                } else {
                    state.record_failure(batch.measured, 1, false);
                }
                // A reset stream (refused, cancelled) leaves the connection usable.
                if e.is_go_away() || !e.is_reset() {
                    return LaneEnd::Broken;
                }
            }
            // Dropping the exchange resets its stream; the connection goes on.
            Err(_) => state.record_failure(batch.measured, 1, true),
        }
    }
}

/// Whether the server left a request unprocessed, so that it may be sent again: refused
/// before any processing (`REFUSED_STREAM`), or above the last stream a graceful GOAWAY
/// (`NO_ERROR`, a server draining for a reload or shutdown) says it will answer.
fn unprocessed(e: &h2::Error) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}

/// One request and its whole response: the status, and the bytes of the response's header
/// fields (decoded) and body.
async fn exchange(
    send: &mut SendRequest<Bytes>,
    request: &H2Request,
) -> Result<(u16, u64), h2::Error> {
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    let end = request.body.is_empty();
    let (response, mut body_out) = send.send_request(request.request(), end)?;
    if !end {
        body_out.send_data(request.body.clone(), true)?;
    }
    let response = response.await?;
    let status = response.status().as_u16();
    let mut bytes: u64 = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().len() + v.len() + 4) as u64)
        .sum();
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        bytes += chunk.len() as u64;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok((status, bytes))
}
