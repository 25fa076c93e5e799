//! `espalier bench`: an HTTP/1.1 load generator — the case study's WCAT and the static
//! benchmark's weighttp, cheap enough never to be the bottleneck.
//!
//! Owns: generating load and measuring it. Each client thread has its own single-threaded
//! event loop, connections, histogram and counters; results are merged once at the end, so
//! nothing is shared while measuring (the only cross-thread value is a progress counter that
//! its own thread stores and the progress printer reads).
//!
//! - Closed loop (default): each connection sends a request when the previous response has
//!   arrived (`--pipeline K`: K at a time). `-n N` runs exactly N measured requests,
//!   `-d` runs for a time.
//! - Open loop (`--rate R`): requests are scheduled at R per second over all connections and
//!   latency is measured from each request's *scheduled* start, which corrects for
//!   coordinated omission (wrk2's method): a stalled server is charged for the requests it
//!   kept from being sent.
//! - `--warmup` and `--cooldown` run load before and after the measured window without
//!   counting it.
//!
//! Must not touch: servers (it only talks to URLs) or the system's CPUs beyond pinning its own
//! threads (`--cpus`).

pub mod result;

use crate::cpuset::CpuSet;
use crate::http::clock::Clock;
use memchr::memmem;
use result::BenchResult;
use std::cell::{Cell, RefCell};
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// What to load and how.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub targets: Vec<Target>,
    /// Connections in all, spread over targets by weight and over threads evenly.
    pub connections: usize,
    pub threads: usize,
    /// CPUs to pin client threads to (thread i on the i-th CPU, cycling).
    pub cpus: Option<CpuSet>,
    pub requests: Option<u64>,
    pub duration: Duration,
    pub warmup: Duration,
    pub cooldown: Duration,
    pub keepalive: bool,
    pub pipeline: usize,
    /// Open-loop requests per second over all connections.
    pub rate: Option<f64>,
    pub timeout: Duration,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Print a live progress line to stderr.
    pub progress: bool,
}

/// One URL to load, resolved.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub addr: SocketAddr,
    pub host_header: String,
    pub path: String,
    pub weight: u32,
}

impl Target {
    /// Parses `http://host[:port]/path` and resolves the host once.
    pub fn parse(url: &str, weight: u32) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("`{url}`: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("`{url}` has no host"));
        }
        // Add the default port unless one is given (`[v6]:port` or `host:port`).
        let has_port = match authority.strip_prefix('[') {
            Some(v6) => v6.contains("]:"),
            None => authority.contains(':'),
        };
        let with_port = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("`{url}`: cannot resolve `{authority}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{url}`: `{authority}` has no address"))?;
        Ok(Target {
            url: url.to_string(),
            addr,
            host_header: authority.to_string(),
            path: path.to_string(),
            weight: weight.max(1),
        })
    }
}

impl BenchOptions {
    /// Options with the defaults of the command line.
    pub fn new(targets: Vec<Target>) -> Self {
        BenchOptions {
            targets,
            connections: 50,
            threads: 1,
            cpus: None,
            requests: None,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            cooldown: Duration::ZERO,
            keepalive: true,
            pipeline: 1,
            rate: None,
            timeout: Duration::from_secs(10),
            method: "GET".into(),
            headers: Vec::new(),
            body: Vec::new(),
            progress: false,
        }
    }

    /// The request bytes for a target, built once.
    fn request_bytes(&self, t: &Target) -> Vec<u8> {
        let mut r = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\n",
            self.method, t.path, t.host_header
        );
        if !self.keepalive {
            r.push_str("Connection: close\r\n");
        }
        for (n, v) in &self.headers {
            r.push_str(&format!("{n}: {v}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" || self.method == "PUT" {
            r.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        r.push_str("\r\n");
        let mut bytes = r.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Runs the load and returns the measured result.
pub fn run(opts: &BenchOptions) -> Result<BenchResult, String> {
    if opts.targets.is_empty() {
        return Err("no URL to load".into());
    }
    let threads = opts.threads.max(1).min(opts.connections.max(1));
    let connections = opts.connections.max(1);
    let progress: Vec<Arc<AtomicU64>> = (0..threads).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let start = std::time::Instant::now() + Duration::from_millis(20);
    let mut handles = Vec::new();
    for (t, counter) in progress.iter().enumerate() {
        // Connections and -n quota split evenly; the first threads take the remainders.
        let conns = connections / threads + usize::from(t < connections % threads);
        let first_conn = (0..t)
            .map(|k| connections / threads + usize::from(k < connections % threads))
            .sum::<usize>();
        let quota = opts
            .requests
            .map(|n| n / threads as u64 + u64::from((t as u64) < n % threads as u64));
        let cpu = opts
            .cpus
            .as_ref()
            .filter(|c| !c.is_empty())
            .map(|c| c.as_slice()[t % c.len()]);
        let opts = opts.clone();
        let counter = Arc::clone(counter);
        handles.push(
            std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn(move || client_thread(&opts, conns, first_conn, quota, cpu, start, counter))
                .map_err(|e| format!("cannot start a client thread: {e}"))?,
        );
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let printer = opts.progress.then(|| {
        let progress = progress.clone();
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let began = std::time::Instant::now();
            let mut last = 0;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                let total: u64 = progress.iter().map(|p| p.load(Ordering::Relaxed)).sum();
                if began.elapsed().as_millis() / 1000 != last {
                    last = began.elapsed().as_millis() / 1000;
                    eprint!(
                        "\r  {:>5.1}s  {total:>10} responses  ",
                        began.elapsed().as_secs_f64()
                    );
                }
            }
            eprint!("\r{:60}\r", "");
        })
    });
    let mut total = BenchResult::empty();
    for h in handles {
        let r = h
            .join()
            .map_err(|_| "a client thread panicked".to_string())??;
        total.merge(&r);
    }
    done.store(true, Ordering::Relaxed);
    if let Some(p) = printer {
        let _ = p.join();
    }
    Ok(total)
}

/// Per-thread state shared by its connections (single-threaded: `Rc`/`Cell`).
struct ThreadState {
    requests: Vec<Vec<u8>>,
    /// Requests left to claim in `-n` mode.
    quota: Cell<Option<u64>>,
    measure_from: Instant,
    measure_until: Option<Instant>,
    stop_at: Cell<Option<Instant>>,
    cooldown: Duration,
    result: RefCell<BenchResult>,
    clock: Rc<Clock>,
    progress: Arc<AtomicU64>,
    responses: Cell<u64>,
    quota_done_at: Cell<Option<Instant>>,
}

impl ThreadState {
    fn stopping(&self, now: Instant) -> bool {
        self.stop_at.get().is_some_and(|s| now >= s)
    }

    fn in_window(&self, t: Instant) -> bool {
        t >= self.measure_from && self.measure_until.is_none_or(|u| t <= u)
    }

    /// Claims `k` measured requests in `-n` mode; `None` means the quota is spent.
    fn claim(&self, k: u64, now: Instant) -> Option<u64> {
        match self.quota.get() {
            None => Some(k),
            Some(_) if now < self.measure_from => Some(0),
            Some(0) => None,
            Some(left) => {
                let take = k.min(left);
                self.quota.set(Some(left - take));
                Some(take)
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn client_thread(
    opts: &BenchOptions,
    conns: usize,
    first_conn: usize,
    quota: Option<u64>,
    cpu: Option<u32>,
    start: std::time::Instant,
    progress: Arc<AtomicU64>,
) -> Result<BenchResult, String> {
    if let Some(cpu) = cpu {
        crate::os::numa::set_thread_affinity(0, &CpuSet::from_ids([cpu]))
            .map_err(|e| format!("cannot pin a client thread to CPU {cpu}: {e}"))?;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let start = Instant::from_std(start);
        tokio::time::sleep_until(start).await;
        let measure_from = start + opts.warmup;
        let (measure_until, stop_at) = match opts.requests {
            Some(_) => (None, None),
            None => (
                Some(measure_from + opts.duration),
                Some(measure_from + opts.duration + opts.cooldown),
            ),
        };
        let state = Rc::new(ThreadState {
            requests: opts.targets.iter().map(|t| opts.request_bytes(t)).collect(),
            quota: Cell::new(quota),
            measure_from,
            measure_until,
            stop_at: Cell::new(stop_at),
            cooldown: opts.cooldown,
            result: RefCell::new(BenchResult::empty()),
            clock: Rc::new(Clock::new(String::new())),
            progress,
            responses: Cell::new(0),
            quota_done_at: Cell::new(None),
        });
        tokio::task::spawn_local(Rc::clone(&state.clock).run());
        // Connections go to targets in proportion to their weights.
        let table: Vec<usize> = opts
            .targets
            .iter()
            .enumerate()
            .flat_map(|(i, t)| std::iter::repeat_n(i, t.weight as usize))
            .collect();
        let per_conn_rate = opts.rate.map(|r| r / opts.connections.max(1) as f64);
        let mut tasks = Vec::new();
        for c in 0..conns {
            let target = table[(first_conn + c) % table.len()];
            let state = Rc::clone(&state);
            let opts = opts.clone();
            // Stagger open-loop schedules so connections do not fire in lockstep.
            let offset = per_conn_rate.map_or(Duration::ZERO, |r| {
                Duration::from_secs_f64((c as f64 / conns as f64) / r)
            });
            tasks.push(tokio::task::spawn_local(async move {
                connection(&opts, target, &state, per_conn_rate, start + offset).await;
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        let mut r = state.result.borrow().clone();
        r.duration = match (measure_until, state.quota_done_at.get()) {
            (Some(u), _) => u - measure_from,
            (None, Some(done)) => done.saturating_duration_since(measure_from),
            (None, None) => Instant::now().saturating_duration_since(measure_from),
        };
        Ok(r)
    })
}

/// The outcome of reading one response.
enum ReadOutcome {
    /// (status, bytes, server asked to close)
    Response(u16, usize, bool),
    Failed,
    TimedOut,
}

/// One client connection's loop.
async fn connection(
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

/// What the client needs of a response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ResponseHead {
    status: u16,
    /// Bytes up to and including the blank line.
    len: usize,
    content_length: Option<usize>,
    chunked: bool,
    close: bool,
}

/// The largest response head accepted.
const MAX_HEAD: usize = 64 << 10;

/// Searchers built once: building a `memmem` searcher per response cost more than the search.
struct Finders {
    end: memmem::Finder<'static>,
    content_length: memmem::Finder<'static>,
    connection: memmem::Finder<'static>,
    connection_lower: memmem::Finder<'static>,
    transfer_encoding_any: [memmem::Finder<'static>; 2],
}

static FINDERS: std::sync::LazyLock<Finders> = std::sync::LazyLock::new(|| Finders {
    end: memmem::Finder::new(b"\r\n\r\n"),
    content_length: memmem::Finder::new(b"\r\nContent-Length:"),
    connection: memmem::Finder::new(b"\r\nConnection:"),
    connection_lower: memmem::Finder::new(b"\r\nconnection:"),
    transfer_encoding_any: [
        memmem::Finder::new(b"ransfer-"),
        memmem::Finder::new(b"RANSFER-"),
    ],
});

/// The value of the header line starting at `at` (after its colon), trimmed.
fn value_at(lines: &[u8], at: usize) -> &[u8] {
    let rest = &lines[at..];
    let end = memchr::memchr(b'\r', rest).unwrap_or(rest.len());
    rest[..end].trim_ascii()
}

fn parse_length(v: &[u8]) -> Result<usize, ()> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(());
    }
    Ok(v.iter().fold(0usize, |n, d| n * 10 + (d - b'0') as usize))
}

fn apply_connection(head: &mut ResponseHead, v: &[u8]) {
    if v.eq_ignore_ascii_case(b"close") {
        head.close = true;
    } else if v.eq_ignore_ascii_case(b"keep-alive") {
        head.close = false;
    }
}

/// Scans a response head without validating every header: the status line, then only
/// `Content-Length`, `Transfer-Encoding` and `Connection`, picked out by their first letter.
/// A full parser (httparse) spent two thirds of the client's instructions on headers a load
/// generator never reads. `Ok(None)`: more bytes needed; `Err`: not HTTP.
fn scan_head(buf: &[u8]) -> Result<Option<ResponseHead>, ()> {
    let f = &*FINDERS;
    let Some(end) = f.end.find(buf) else {
        return if buf.len() > MAX_HEAD || (buf.len() >= 7 && &buf[..7] != b"HTTP/1.") {
            Err(())
        } else {
            Ok(None)
        };
    };
    // "HTTP/1.x NNN"
    if end < 12
        || &buf[..7] != b"HTTP/1."
        || buf[8] != b' '
        || !buf[9..12].iter().all(u8::is_ascii_digit)
    {
        return Err(());
    }
    let status = buf[9..12]
        .iter()
        .fold(0u16, |n, d| n * 10 + (d - b'0') as u16);
    let mut head = ResponseHead {
        status,
        len: end + 4,
        content_length: None,
        chunked: false,
        close: buf[7] == b'0',
    };
    let lines = &buf[..end + 2];
    // Fast path: the canonical capitalization nearly every server writes, and no
    // Transfer-Encoding anywhere. Anything else takes the line-by-line scan below.
    if let Some(i) = f.content_length.find(lines) {
        if f.transfer_encoding_any
            .iter()
            .all(|t| t.find(lines).is_none())
        {
            head.content_length = Some(parse_length(value_at(lines, i + 17))?);
            if let Some(i) = f
                .connection
                .find(lines)
                .or_else(|| f.connection_lower.find(lines))
            {
                apply_connection(&mut head, value_at(lines, i + 13));
            }
            return Ok(Some(head));
        }
    }
    let mut pos = memchr::memchr(b'\n', lines).map_or(lines.len(), |i| i + 1);
    while pos < lines.len() {
        let stop = memchr::memchr(b'\n', &lines[pos..]).map_or(lines.len(), |i| pos + i);
        let line = lines[pos..stop]
            .strip_suffix(b"\r")
            .unwrap_or(&lines[pos..stop]);
        pos = stop + 1;
        let value = |name: &[u8]| -> Option<&[u8]> {
            (line.len() > name.len() && line[..name.len()].eq_ignore_ascii_case(name))
                .then(|| line[name.len()..].trim_ascii())
        };
        match line.first().map(|b| b | 0x20) {
            Some(b'c') => {
                if let Some(v) = value(b"content-length:") {
                    head.content_length = Some(parse_length(v)?);
                } else if let Some(v) = value(b"connection:") {
                    apply_connection(&mut head, v);
                }
            }
            Some(b't') => {
                if let Some(v) = value(b"transfer-encoding:") {
                    head.chunked = v.eq_ignore_ascii_case(b"chunked");
                }
            }
            _ => {}
        }
    }
    Ok(Some(head))
}

/// A complete response at the start of `buf`, consumed; `None` when more bytes are needed.
fn parse_response(buf: &mut Vec<u8>) -> Option<ReadOutcome> {
    let head = match scan_head(buf) {
        Ok(Some(h)) => h,
        Ok(None) => return None,
        Err(()) => return Some(ReadOutcome::Failed),
    };
    let status = head.status;
    // 1xx, 204 and 304 have no body.
    let total = if (100..200).contains(&status) || status == 204 || status == 304 {
        head.len
    } else if head.chunked {
        match crate::http::decode_chunked(&buf[head.len..], u64::MAX, usize::MAX) {
            Ok(Some((used, _))) => head.len + used,
            Ok(None) => return None,
            Err(_) => return Some(ReadOutcome::Failed),
        }
    } else if let Some(len) = head.content_length {
        if buf.len() < head.len + len {
            return None;
        }
        head.len + len
    } else {
        // Delimited by close: wait for it.
        return None;
    };
    buf.drain(..total);
    if (100..200).contains(&status) {
        return parse_response(buf);
    }
    Some(ReadOutcome::Response(status, total, head.close))
}

/// A response whose body ran until the connection closed: (status, bytes).
fn close_delimited(buf: &[u8]) -> Option<(u16, usize)> {
    match scan_head(buf) {
        Ok(Some(h)) => Some((h.status, buf.len())),
        _ => None,
    }
}

/// Parses a sweep `FROM:TO:STEP` into the concurrency levels.
pub fn parse_sweep(text: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("--sweep `{text}`: write it as FROM:TO:STEP, like 10:1000:10");
    let parts: Vec<usize> = text
        .split(':')
        .map(|p| p.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    match parts.as_slice() {
        [from, to, step] if *from >= 1 && to >= from && *step >= 1 => {
            Ok((*from..=*to).step_by(*step).collect())
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t = Target::parse("http://127.0.0.1:8080/a?b", 1).unwrap();
        assert_eq!(
            (t.addr.port(), t.path.as_str(), t.host_header.as_str()),
            (8080, "/a?b", "127.0.0.1:8080")
        );
        let t = Target::parse("http://127.0.0.1", 2).unwrap();
        assert_eq!((t.addr.port(), t.path.as_str(), t.weight), (80, "/", 2));
        let t = Target::parse("http://[::1]:81/x", 1).unwrap();
        assert_eq!(t.addr, "[::1]:81".parse().unwrap());
        assert!(Target::parse("https://x/", 1).is_err());
        assert!(Target::parse("http:///", 1).is_err());
    }

    #[test]
    fn responses_parse_by_framing() {
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, 40, false))
        ));
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(500, 37, false))
        ));
        assert!(b.is_empty());
        let mut b = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhi".to_vec();
        assert!(parse_response(&mut b).is_none());
        let mut b = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(204, _, _))
        ));
        let mut b = b"garbage\r\n\r\n".to_vec();
        assert!(matches!(parse_response(&mut b), Some(ReadOutcome::Failed)));
        let mut b = b"HTTP/1.1 200 OK\r\ncontent-LENGTH: x\r\n\r\n".to_vec();
        assert!(
            matches!(parse_response(&mut b), Some(ReadOutcome::Failed)),
            "a bad length is not HTTP"
        );
        let mut b = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec();
        assert!(
            matches!(
                parse_response(&mut b),
                Some(ReadOutcome::Response(200, _, true))
            ),
            "HTTP/1.0 closes"
        );
        let mut b = b"HTTP/1.1 200 OK\r\nCache-Control: x\r\nConnection: close\r\nContent-Length: 1\r\n\r\n!".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        assert!(matches!(scan_head(b"HTTP/1.1 20"), Ok(None)));
        assert_eq!(
            close_delimited(b"HTTP/1.1 200 OK\r\n\r\nbody until close"),
            Some((200, 35))
        );
        // Lowercase names and chunked framing take the line-by-line path.
        let mut b =
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc".to_vec();
        assert!(matches!(
            parse_response(&mut b),
            Some(ReadOutcome::Response(200, _, true))
        ));
        assert!(b.is_empty());
        let mut b = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\ntransfer-encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n".to_vec();
        assert!(
            matches!(
                parse_response(&mut b),
                Some(ReadOutcome::Response(200, _, false))
            ),
            "Transfer-Encoding wins over Content-Length"
        );
        assert!(b.is_empty());
    }

    #[test]
    fn sweeps() {
        assert_eq!(parse_sweep("10:50:10").unwrap(), vec![10, 20, 30, 40, 50]);
        assert_eq!(parse_sweep("10:1000:10").unwrap().len(), 100);
        assert!(parse_sweep("0:10:1").is_err());
        assert!(parse_sweep("10:5:1").is_err());
        assert!(parse_sweep("a:b").is_err());
    }
}
