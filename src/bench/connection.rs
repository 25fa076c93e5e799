//! One HTTP/1.1 client connection's loop, over TCP or TLS: send requests (closed loop,
//! pipelined, or on an open-loop schedule), read responses, record latency and errors by kind,
//! reconnect when the server closes.
//!
//! Owns: a connection's life. Must not touch: response parsing (see [`super::response`]).

use super::options::BenchOptions;
use super::response::{close_delimited, parse_response, ReadOutcome};
use super::state::ThreadState;
use super::transport::{Connector, Stream};
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

/// One client connection's loop.
pub(super) async fn connection(
    opts: &BenchOptions,
    target: usize,
    state: &ThreadState,
    rate: Option<f64>,
    first_send: Instant,
    connector: &Connector,
) {
    let request = &state.requests[target];
    let pipeline = opts.pipeline.max(1);
    let mut stream: Option<Stream> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut sent: u64 = 0;
    let mut out = Vec::with_capacity(request.len() * pipeline);
    // One timer per connection, moved only when the (coarse) deadline moves.
    let timer = tokio::time::sleep_until(state.clock.now() + opts.timeout);
    tokio::pin!(timer);
    // Responses on the current connection: a connection that answered before may have
    // been closed while idle.
    let mut answered_here: u64 = 0;
    let idempotent = opts.retry_unanswered
        && matches!(
            opts.method.as_str(),
            "GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE" | "TRACE"
        );
    loop {
        let now = Instant::now();
        if state.stopping(now) {
            return;
        }
        // Open loop: wait for this request's scheduled time; latency counts from it.
        let scheduled = match rate {
            Some(r) => {
                let at = first_send + Duration::from_secs_f64(sent as f64 / r);
                if at > now {
                    tokio::time::sleep_until(at).await;
                }
                Some(at)
            }
            None => None,
        };
        let want = if rate.is_some() { 1 } else { pipeline as u64 };
        let Some(batch) = state.next_batch(want) else {
            return;
        };
        let (k, measured) = (batch.k, batch.measured);
        if stream.is_none() {
            match connector.connect(target, &opts.targets[target]).await {
                Ok(s) => {
                    stream = Some(s);
                    answered_here = 0;
                    buf.clear();
                }
                Err(why) => {
                    state.record_connect_failure(&why);
                    // A refused TLS session will be refused again: this connection gives up.
                    if why.is_permanent() {
                        return;
                    }
                    // A connect failure does not use up measured requests.
                    state.unclaim(batch);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let s = stream.as_mut().expect("connected");
        let t0 = scheduled.unwrap_or_else(Instant::now);
        out.clear();
        for _ in 0..k {
            out.extend_from_slice(request);
        }
        sent += 1;
        // A reused connection the server closed while idle (keep-alive timeout, a draining
        // worker) takes no request: an idempotent one is sent again on a new connection, as
        // browsers do (RFC 9112 §9.3.1), keeping its place in the schedule.
        let retry_unanswered = |reused: bool, answered: u64, sent: &mut u64| {
            if reused && idempotent {
                state.unclaim_n(batch.claimed.min(k - answered));
                *sent -= 1;
                true
            } else {
                false
            }
        };
        // The flush sends what TLS holds back; on TCP it is free.
        if s.write_all(&out).await.is_err() || s.flush().await.is_err() {
            if !retry_unanswered(answered_here > 0, 0, &mut sent) {
                state.record_failure(measured, k, false);
            }
            stream = None;
            continue;
        }
        let mut close = false;
        for answered in 0..k {
            match read_response(s, &mut buf, state, opts.timeout, timer.as_mut()).await {
                ReadOutcome::Response(status, bytes, server_closes) => {
                    state.record_response(measured, t0, status, bytes as u64);
                    answered_here += 1;
                    if server_closes {
                        close = true;
                    }
                }
                ReadOutcome::Closed if retry_unanswered(answered_here > 0, answered, &mut sent) => {
                    close = true;
                    break;
                }
                ReadOutcome::Failed | ReadOutcome::Closed => {
                    state.record_failure(measured, 1, false);
                    close = true;
                    break;
                }
                ReadOutcome::TimedOut => {
                    state.record_failure(measured, 1, true);
                    close = true;
                    break;
                }
            }
        }
        if close || !opts.keepalive {
            stream = None;
        }
    }
}

/// Reads one whole response (Content-Length, chunked, or until close).
async fn read_response(
    s: &mut Stream,
    buf: &mut Vec<u8>,
    state: &ThreadState,
    timeout: Duration,
    mut timer: Pin<&mut Sleep>,
) -> ReadOutcome {
    let deadline = state.clock.now() + timeout;
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    loop {
        if let Some(outcome) = parse_response(buf) {
            return outcome;
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 << 10);
        }
        let read = tokio::select! {
            biased;
            r = s.read_buf(buf) => r,
            _ = &mut timer => return ReadOutcome::TimedOut,
        };
        match read {
            Ok(0) if buf.is_empty() => return ReadOutcome::Closed,
            // A body delimited by the close ends with it.
            Ok(0) => {
                return match close_delimited(buf) {
                    Some((status, bytes)) => {
                        buf.clear();
                        ReadOutcome::Response(status, bytes, true)
                    }
                    None => ReadOutcome::Failed,
                };
            }
            Ok(_) => {}
            Err(_) if buf.is_empty() => return ReadOutcome::Closed,
            Err(_) => return ReadOutcome::Failed,
        }
    }
}
