//! Connections to app processes: a TCP or unix stream behind one type, and each thread's
//! pool of idle keep-alive connections per endpoint.
//!
//! They stay on tokio's epoll on the io_uring path too: measured (bench/app.sh, 2026-11-26),
//! a proxied request whose app connection went through the ring cost the proxy tier 1.12×
//! and the app 1.17× the CPU time of the epoll path, at 0.73× the requests/s — each hop of
//! the client → app → client chain waited for the ring's turn — while with only the client
//! connection on the ring it cost 0.97×.
//!
//! Owns: connecting (bounded by `connect_timeout`), keeping idle connections and handing out
//! only live ones. Must not touch: what is sent on them (see [`super::forward`](mod@super::forward)).

use super::Endpoint;
use std::cell::RefCell;
use std::io;
use std::task::Context;
use std::time::Duration;
use tokio::net::{TcpStream, UnixStream};
use tokio::time::Instant;

/// An idle connection is closed after this. Below the 5 s keep-alive that uvicorn, Node and
/// gunicorn's threaded workers default to, so espalier lets go first and rarely sends on a
/// connection the app is closing (a request that meets one anyway is retried, see
/// [`super::forward`](mod@super::forward)).
const IDLE_FOR: Duration = Duration::from_secs(4);

/// Idle connections kept per endpoint and thread.
const MAX_IDLE: usize = 64;

/// A waker that does nothing, for asking the event loop about readiness without waiting
/// (`Waker::noop` needs Rust 1.85; the crate's MSRV is 1.82).
static NOOP_WAKER: std::sync::LazyLock<std::task::Waker> = std::sync::LazyLock::new(|| {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    std::task::Waker::from(std::sync::Arc::new(Noop))
});

/// One connection to an app process or an upstream server.
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// To an upstream group's `https://` server.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Conn {
    pub async fn connect(endpoint: &Endpoint, timeout: Duration) -> io::Result<Conn> {
        let connect = async {
            match endpoint {
                Endpoint::Tcp(a) => {
                    let s = TcpStream::connect(a).await?;
                    // Heads and small bodies go out at once, as on the client side.
                    s.set_nodelay(true)?;
                    Ok(Conn::Tcp(s))
                }
                Endpoint::Unix(p) => Ok(Conn::Unix(UnixStream::connect(p).await?)),
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    /// The TLS session over this new TCP connection, to `name`, within `timeout`.
    pub async fn into_tls(
        self,
        config: &std::sync::Arc<rustls::ClientConfig>,
        name: &rustls::pki_types::ServerName<'static>,
        timeout: Duration,
    ) -> Result<Conn, String> {
        let Conn::Tcp(tcp) = self else {
            return Ok(self);
        };
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(config));
        match tokio::time::timeout(timeout, connector.connect(name.clone(), tcp)).await {
            Ok(Ok(session)) => Ok(Conn::Tls(Box::new(session))),
            Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
            Err(_) => Err("TLS handshake timed out".into()),
        }
    }

    /// Whether an idle connection is still open and quiet: the app has neither closed it nor
    /// sent anything unasked (either makes it unusable). The event loop knows without a
    /// syscall when nothing arrived (a response read short clears the readiness); only when
    /// something did is the socket asked what it was.
    fn quiet(&self) -> bool {
        let mut cx = Context::from_waker(&NOOP_WAKER);
        let ready = match self {
            Conn::Tcp(s) => s.poll_read_ready(&mut cx),
            Conn::Unix(s) => s.poll_read_ready(&mut cx),
            // The session's socket: a record arriving unasked (an alert, a close) makes the
            // connection as unusable as a cleartext byte would.
            Conn::Tls(s) => s.get_ref().0.poll_read_ready(&mut cx),
        };
        if ready.is_pending() {
            return true;
        }
        let mut probe = [0u8; 1];
        let r = match self {
            Conn::Tcp(s) => s.try_read(&mut probe),
            Conn::Unix(s) => s.try_read(&mut probe),
            Conn::Tls(_) => return false,
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

crate::async_io::delegate_async_io!(Conn { Tcp, Unix, Tls });

/// A thread's idle connections, per endpoint (single-threaded: no lock). A list, not a hash
/// map: a thread talks to a handful of processes, and comparing a few addresses costs less
/// than hashing one.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<Vec<(Endpoint, IdleList)>>,
}

/// One endpoint's idle connections with when each was last used, most recent last.
type IdleList = Vec<(Conn, Instant)>;

impl Pool {
    /// A live idle connection to `endpoint`, most recently used first; `None` when there is
    /// none. Stale and closed ones are dropped on the way.
    pub fn take(&self, endpoint: &Endpoint) -> Option<Conn> {
        let mut idle = self.idle.borrow_mut();
        let list = &mut idle.iter_mut().find(|(e, _)| e == endpoint)?.1;
        let now = Instant::now();
        while let Some((conn, since)) = list.pop() {
            if now.duration_since(since) < IDLE_FOR && conn.quiet() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps a connection whose last response was read whole, for the next request.
    pub fn put(&self, endpoint: &Endpoint, conn: Conn) {
        let mut idle = self.idle.borrow_mut();
        let k = match idle.iter().position(|(e, _)| e == endpoint) {
            Some(k) => k,
            None => {
                idle.push((endpoint.clone(), Vec::new()));
                idle.len() - 1
            }
        };
        let list = &mut idle[k].1;
        if list.len() >= MAX_IDLE {
            list.remove(0);
        }
        list.push((conn, Instant::now()));
    }

    /// Drops the idle connections to endpoints no longer in use.
    pub fn retain(&self, live: impl Fn(&Endpoint) -> bool) {
        self.idle.borrow_mut().retain(|(e, _)| live(e));
    }
}
