//! One client connection's loop: send requests (closed loop, pipelined, or on an open-loop
//! schedule), read responses, record latency and errors by kind, reconnect when the server
//! closes.
//!
//! Owns: a connection's life. Must not touch: response parsing (see [`super::response`]).

use super::options::BenchOptions;
use super::response::{close_delimited, parse_response, ReadOutcome};
use super::state::ThreadState;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// One client connection's loop.
pub(super) async fn connection(
    opts: &BenchOptions,
    target: usize,
    state: &ThreadState,
    rate: Option<f64>,
    first_send: Instant,
) {
    let addr = opts.targets[target].addr;
    let request = &state.requests[target];
    let pipeline = opts.pipeline.max(1);
    let mut stream: Option<TcpStream> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut sent: u64 = 0;
    let mut batch = Vec::with_capacity(request.len() * pipeline);
    // One timer per connection, moved only when the (coarse) deadline moves.
    let timer = tokio::time::sleep_until(state.clock.now() + opts.timeout);
    tokio::pin!(timer);
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
        // In -n mode a batch is claimed from the thread's quota: warm-up batches are sent but
        // not measured, and once the quota is spent the connection only keeps the cooldown load.
        let (k, measured, claimed) = match state.quota.get() {
            None => (want, true, 0),
            Some(_) => match state.claim(want, Instant::now()) {
                Some(0) => (want, false, 0),
                Some(c) => (c, true, c),
                None => {
                    if state.quota_done_at.get().is_none() {
                        state.quota_done_at.set(Some(Instant::now()));
                        state.stop_at.set(Some(Instant::now() + state.cooldown));
                    }
                    if state.cooldown.is_zero() {
                        return;
                    }
                    (want, false, 0)
                }
            },
        };
        if stream.is_none() {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    stream = Some(s);
                    buf.clear();
                }
                Err(_) => {
                    if state.in_window(Instant::now()) {
                        state.result.borrow_mut().errors.connect += 1;
                    }
                    // A connect failure does not use up measured requests.
                    if let Some(left) = state.quota.get() {
                        state.quota.set(Some(left + claimed));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let s = stream.as_mut().expect("connected");
        let t0 = scheduled.unwrap_or_else(Instant::now);
        batch.clear();
        for _ in 0..k {
            batch.extend_from_slice(request);
        }
        sent += 1;
        if s.write_all(&batch).await.is_err() {
            record_failure(state, measured, k, false);
            stream = None;
            continue;
        }
        let mut close = false;
        for _ in 0..k {
            match read_response(s, &mut buf, state, opts.timeout, timer.as_mut()).await {
                ReadOutcome::Response(status, bytes, server_closes) => {
                    let t1 = Instant::now();
                    let n = state.responses.get() + 1;
                    state.responses.set(n);
                    state.progress.store(n, Ordering::Relaxed);
                    if measured && state.in_window(t1) {
                        let mut r = state.result.borrow_mut();
                        r.requests += 1;
                        r.bytes += bytes as u64;
                        match status {
                            400..=499 => r.errors.status_4xx += 1,
                            500..=599 => r.errors.status_5xx += 1,
                            _ => {}
                        }
                        let us = (t1 - t0).as_micros().max(1) as u64;
                        let _ = r.latency_us.record(us.min(3_600_000_000));
                    }
                    if server_closes {
                        close = true;
                    }
                }
                ReadOutcome::Failed => {
                    record_failure(state, measured, 1, false);
                    close = true;
                    break;
                }
                ReadOutcome::TimedOut => {
                    record_failure(state, measured, 1, true);
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

fn record_failure(state: &ThreadState, measured: bool, k: u64, timeout: bool) {
    if measured && state.in_window(Instant::now()) {
        let mut r = state.result.borrow_mut();
        if timeout {
            r.errors.timeout += k;
        } else {
            r.errors.read += k;
        }
    }
}

/// Reads one whole response (Content-Length, chunked, or until close).
async fn read_response(
    s: &mut TcpStream,
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
            Err(_) => return ReadOutcome::Failed,
        }
    }
}
