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
//! only live ones, and each thread's one HTTP/2 connection per server spoken to in HTTP/2
//! (its requests multiplexed on it, as Envoy does per worker). Must not touch: what is sent on them (see [`super::forward`](mod@super::forward)), but for
//! a head's way onto each kind ([`Conn::send_head`]).

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

/// The flow-control window of a stream to an HTTP/2 server (the connection's is four
/// times it): what a server may send ahead of the client's reading.
const WINDOW: u32 = 256 << 10;

/// The largest answer head (its fields, trailers too) taken from an HTTP/2 server, as the
/// HTTP/1.1 forwarder's bound.
const MAX_ANSWER_HEAD: u32 = 64 << 10;

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
    /// One request on a thread's HTTP/2 connection to a server (`protocol = "http2"`),
    /// spoken to as an HTTP/1.1 connection is.
    H2(Box<super::h2_exchange::H2Exchange>),
}

impl Conn {
    /// Sends a request's head within `timeout`: its text on an HTTP/1.1 connection, its
    /// parts as a new stream's request on an HTTP/2 one (its body, if any, follows by
    /// writes either way). `InvalidInput`: a request HTTP/2 cannot carry.
    pub async fn send_head(
        &mut self,
        head: &super::forward_head::ForwardHead,
        timeout: Duration,
    ) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let send = async {
            if let Conn::H2(exchange) = self {
                return exchange.send_head(head).await;
            }
            // Flushed: over TLS, bytes may wait in the record layer.
            self.write_all(head.text()).await?;
            self.flush().await
        };
        match tokio::time::timeout(timeout, send).await {
            Ok(r) => r,
            Err(_) => Err(io::ErrorKind::TimedOut.into()),
        }
    }

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

    /// This new connection as an HTTP/2 client's, its connection driven by a task of the
    /// thread's own: the handle new requests are sent with. Over TLS the server must have
    /// agreed to HTTP/2 by ALPN.
    pub async fn into_h2(
        self,
        timeout: Duration,
    ) -> Result<h2::client::SendRequest<bytes::Bytes>, String> {
        if let Conn::Tls(s) = &self {
            if s.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err("did not agree to HTTP/2 in its TLS handshake (ALPN); if it speaks only HTTP/1.1, set protocol = \"http1\"".into());
            }
        }
        // A server's answer heads are bounded as an HTTP/1.1 one's are, and it may not push.
        let handshake = h2::client::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(WINDOW * 4)
            .max_header_list_size(MAX_ANSWER_HEAD)
            .enable_push(false)
            .handshake::<_, bytes::Bytes>(self);
        let (sender, connection) = match tokio::time::timeout(timeout, handshake).await {
            Ok(Ok(pair)) => pair,
            Ok(Err(e)) => return Err(format!("HTTP/2 handshake failed: {e}")),
            Err(_) => return Err("HTTP/2 handshake timed out".into()),
        };
        tokio::task::spawn_local(async move {
            let _ = connection.await;
        });
        Ok(sender)
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
            Conn::H2(_) => return false,
        };
        if ready.is_pending() {
            return true;
        }
        let mut probe = [0u8; 1];
        let r = match self {
            Conn::Tcp(s) => s.try_read(&mut probe),
            Conn::Unix(s) => s.try_read(&mut probe),
            Conn::Tls(_) | Conn::H2(_) => return false,
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

crate::async_io::delegate_async_io!(Conn { Tcp, Unix, Tls, H2 });

/// A thread's idle connections, per endpoint (single-threaded: no lock). A list, not a hash
/// map: a thread talks to a handful of processes, and comparing a few addresses costs less
/// than hashing one.
#[derive(Default)]
pub struct Pool {
    idle: RefCell<Vec<(Endpoint, IdleList)>>,
    /// The thread's HTTP/2 connection to each server spoken to in HTTP/2, shared by its
    /// requests (multiplexed; a full one makes a request wait for a stream).
    multiplexed: RefCell<Vec<(Endpoint, h2::client::SendRequest<bytes::Bytes>)>>,
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

    /// The thread's live HTTP/2 connection to `endpoint`, if it has one.
    pub fn shared_h2(&self, endpoint: &Endpoint) -> Option<h2::client::SendRequest<bytes::Bytes>> {
        let mut links = self.multiplexed.borrow_mut();
        let k = links.iter().position(|(e, _)| e == endpoint)?;
        let mut sender = links[k].1.clone();
        // Closed (the server went away, or sent GOAWAY): dropped, a new one is made.
        let mut cx = Context::from_waker(&NOOP_WAKER);
        if let std::task::Poll::Ready(Err(_)) = sender.poll_ready(&mut cx) {
            links.swap_remove(k);
            return None;
        }
        Some(sender)
    }

    /// Keeps `sender` as the thread's HTTP/2 connection to `endpoint`.
    pub fn share_h2(&self, endpoint: &Endpoint, sender: h2::client::SendRequest<bytes::Bytes>) {
        let mut links = self.multiplexed.borrow_mut();
        match links.iter_mut().find(|(e, _)| e == endpoint) {
            Some(link) => link.1 = sender,
            None => links.push((endpoint.clone(), sender)),
        }
    }

    /// Keeps a connection whose last response was read whole, for the next request (an
    /// exchange on an HTTP/2 connection ends with its request: nothing to keep).
    pub fn put(&self, endpoint: &Endpoint, conn: Conn) {
        if let Conn::H2(_) = conn {
            return;
        }
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
        self.multiplexed.borrow_mut().retain(|(e, _)| live(e));
    }
}
