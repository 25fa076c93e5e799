//! Running the load: one client thread per `--threads`, each with its own event loop,
//! connections, histogram and counters, merged once at the end; a progress line meanwhile.
//!
//! Owns: the threads and the measured window (warm-up, measured, cool-down). Must not touch:
//! a connection's protocol (see [`super::connection`]).

use super::connection::connection;
use super::h2::{h2_connection, H2Request};
use super::h3::{h3_connection, H3Client};
use super::options::BenchOptions;
use super::result::BenchResult;
use super::state::ThreadState;
use super::transport::Connector;
use crate::cpuset::CpuSet;
use crate::http::clock::Clock;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Runs the load and returns the measured result.
pub fn run(opts: &BenchOptions) -> Result<BenchResult, String> {
    if opts.targets.is_empty() {
        return Err("no URL to load".into());
    }
    // The trusted certificates are read once, before any load.
    let tls = super::transport::client_config(opts)?;
    let threads = opts.threads.max(1).min(opts.connections.max(1));
    let connections = opts.connections.max(1);
    let progress: Vec<Arc<AtomicU64>> = (0..threads).map(|_| Arc::new(AtomicU64::new(0))).collect();
    // Every client thread begins at `start`: at `--start-at`, so that several machines
    // begin together, or in a moment.
    let lead = match opts.start_at {
        Some(at) => at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
        None => Duration::from_millis(20),
    };
    let start = std::time::Instant::now() + lead;
    let started_wall = std::time::SystemTime::now() + lead;
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
        let tls = tls.clone();
        let counter = Arc::clone(counter);
        handles.push(
            std::thread::Builder::new()
                .name(format!("bench-{t}"))
                .spawn(move || {
                    let placement = ThreadPlacement {
                        conns,
                        first_conn,
                        quota,
                        cpu,
                    };
                    client_thread(opts, tls, placement, start, counter)
                })
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
    total.started_unix_s = started_wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Ok(total)
}

/// A client thread's share of the load.
struct ThreadPlacement {
    conns: usize,
    first_conn: usize,
    quota: Option<u64>,
    cpu: Option<u32>,
}

fn client_thread(
    opts: BenchOptions,
    tls: Option<rustls::ClientConfig>,
    ThreadPlacement {
        conns,
        first_conn,
        quota,
        cpu,
    }: ThreadPlacement,
    start: std::time::Instant,
    progress: Arc<AtomicU64>,
) -> Result<BenchResult, String> {
    let opts = Rc::new(opts);
    let connector = Connector::new(&opts, tls.as_ref())?;
    let h2_requests = if opts.h2 || opts.h3 {
        (0..opts.targets.len())
            .map(|t| H2Request::new(&opts, t).map(Rc::new))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
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
        let ring = match opts.uring {
            true => Some(
                crate::os::uring::Ring::start(opts.timeout)
                    .map_err(|e| format!("cannot start io_uring ({e}); use --io epoll"))?,
            ),
            false => None,
        };
        let connector = Rc::new(connector.with_ring(ring));
        // HTTP/3: one UDP socket (a client endpoint) for the thread's connections, made on
        // its runtime.
        let h3 = match (opts.h3, &tls) {
            (true, Some(tls)) => {
                let ipv6 = opts.targets.iter().any(|t| t.addr.is_ipv6());
                Some(Rc::new(H3Client::new(tls, ipv6)?))
            }
            _ => None,
        };
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
            told_refusal: Cell::new(false),
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
            let opts = Rc::clone(&opts);
            let connector = Rc::clone(&connector);
            let h2_request = h2_requests.get(target).map(Rc::clone);
            let h3 = h3.clone();
            // Stagger open-loop schedules so connections do not fire in lockstep.
            let offset = per_conn_rate.map_or(Duration::ZERO, |r| {
                Duration::from_secs_f64((c as f64 / conns as f64) / r)
            });
            let first_send = start + offset;
            tasks.push(tokio::task::spawn_local(async move {
                match (h2_request, h3) {
                    (Some(request), Some(h3)) => {
                        let schedule = (per_conn_rate, first_send);
                        h3_connection(opts, target, state, request, schedule, h3).await
                    }
                    (Some(request), None) => {
                        let rate = per_conn_rate;
                        h2_connection(opts, target, state, request, rate, first_send, connector)
                            .await
                    }
                    (None, _) => {
                        connection(&opts, target, &state, per_conn_rate, first_send, &connector)
                            .await
                    }
                }
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
