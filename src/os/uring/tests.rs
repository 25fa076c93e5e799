//! The ring with real sockets on the loopback: bytes both ways in order, the end of a
//! stream, a slow reader's upload held back, buffers run out and recovered, and a socket
//! taken back from the ring with what it had received, a dropped connection's unsent bytes
//! given up at the orphan limit.

use super::{Ring, RingListener, RingSocket};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs `f` on a one-thread runtime with a ring of `buffers` provided buffers.
fn with_ring<F, Fut>(buffers: u16, f: F)
where
    F: FnOnce(Rc<Ring>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    with_small_ring(buffers, super::ENTRIES, f)
}

/// As [`with_ring`], with a submission queue of `entries`.
fn with_small_ring<F, Fut>(buffers: u16, entries: u32, f: F)
where
    F: FnOnce(Rc<Ring>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    with_ring_of(buffers, entries, std::time::Duration::from_secs(30), f)
}

/// As [`with_ring`], with a submission queue of `entries` and a dropped connection's queued
/// bytes given `orphan_limit`.
fn with_ring_of<F, Fut>(buffers: u16, entries: u32, orphan_limit: std::time::Duration, f: F)
where
    F: FnOnce(Rc<Ring>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    if let Err(why) = super::probe() {
        eprintln!("io_uring unusable here ({why}); the ring's tests are skipped");
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let ring = Ring::start_with(buffers, entries, orphan_limit).expect("ring");
        tokio::time::timeout(std::time::Duration::from_secs(60), f(ring))
            .await
            .expect("the test finished");
    });
}

/// A connected pair: ours on the ring, the peer a blocking std socket.
fn pair(ring: &Rc<Ring>) -> (RingSocket, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (ours, _) = listener.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    (RingSocket::new(ring, ours), peer)
}

/// A peer thread: writes `out`, then reads until the end, returning what it read.
fn peer_thread(mut peer: TcpStream, out: Vec<u8>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut writer = peer.try_clone().unwrap();
        let w = std::thread::spawn(move || {
            writer.write_all(&out).unwrap();
            writer.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        w.join().unwrap();
        got
    })
}

/// A loopback listener on the ring, and its address.
fn listening(ring: &Rc<Ring>) -> (RingListener, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    (RingListener::new(ring, listener), addr)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn megabytes_both_ways_arrive_whole_and_in_order() {
    with_ring(64, |ring| async move {
        let (mut ours, peer) = pair(&ring);
        let upload = pattern(3 << 20, 7);
        let download = pattern(5 << 20, 11);
        let peer = peer_thread(peer, upload.clone());
        // Written in pieces of odd sizes while reading: the queue and partial sends.
        let mut got = Vec::new();
        let mut pieces = download.chunks(70_001);
        let mut buf = vec![0u8; 10_000];
        loop {
            if let Some(piece) = pieces.next() {
                ours.write_all(piece).await.unwrap();
            }
            let n = ours.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        for piece in pieces {
            ours.write_all(piece).await.unwrap();
        }
        ours.shutdown().await.unwrap();
        assert!(got == upload, "the upload arrived whole and in order");
        // 5 MiB went out in 70 KB writes, faster than the peer read: the queue never grew
        // past its bound.
        {
            let state = ring.state.borrow();
            let sock = &state.socks[ours.key];
            assert!(sock.queued.capacity() <= 2 * super::MAX_QUEUED);
            assert!(sock.flying.capacity() <= 2 * super::MAX_QUEUED);
        }
        let peer_got = tokio::task::spawn_blocking(move || peer.join().unwrap())
            .await
            .unwrap();
        assert!(
            peer_got == download,
            "the download arrived whole and in order"
        );
    });
}

#[test]
fn a_reader_that_does_not_read_cannot_stall_the_others() {
    // Four connections, sixteen buffers: one upload left unread must not take them all.
    with_ring(16, |ring| async move {
        let (mut slow, slow_peer) = pair(&ring);
        let slow_upload = pattern(4 << 20, 1);
        let slow_thread = peer_thread(slow_peer, slow_upload.clone());
        // Its receive starts, then it stops reading.
        let mut first = [0u8; 1];
        slow.read_exact(&mut first).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let held = ring.state.borrow().socks[slow.key].received.len();
        eprintln!("the slow reader holds {held} of 16 buffers");
        for seed in 0..3 {
            let (mut ours, peer) = pair(&ring);
            let upload = pattern(1 << 20, seed);
            let t = peer_thread(peer, b"bye".to_vec());
            let mut got = Vec::new();
            ours.write_all(&upload).await.unwrap();
            ours.shutdown().await.unwrap();
            ours.read_to_end(&mut got).await.unwrap();
            assert_eq!(got, b"bye");
            let back = tokio::task::spawn_blocking(move || t.join().unwrap())
                .await
                .unwrap();
            assert!(back == upload);
        }
        // The slow reader reads at last: everything, in order.
        let mut rest = Vec::new();
        slow.shutdown().await.unwrap();
        slow.read_to_end(&mut rest).await.unwrap();
        assert_eq!(first[0], slow_upload[0]);
        assert!(rest == slow_upload[1..]);
        tokio::task::spawn_blocking(move || slow_thread.join().unwrap())
            .await
            .unwrap();
    });
}

#[test]
fn connections_that_outnumber_the_buffers_are_all_served() {
    // Two buffers for eight connections that all send at once: some run out and are
    // armed again as buffers come back.
    with_ring(2, |ring| async move {
        let mut tasks = Vec::new();
        for seed in 0..8u8 {
            let (mut ours, peer) = pair(&ring);
            let upload = pattern(256 << 10, seed);
            let t = peer_thread(peer, upload.clone());
            tasks.push(tokio::task::spawn_local(async move {
                let mut got = Vec::new();
                ours.read_to_end(&mut got).await.unwrap();
                assert!(got == upload, "connection {seed}'s bytes");
                ours.write_all(b"ok").await.unwrap();
                ours.shutdown().await.unwrap();
                drop(ours);
                let back = tokio::task::spawn_blocking(move || t.join().unwrap())
                    .await
                    .unwrap();
                assert_eq!(back, b"ok");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Every connection's entry went with it, and every buffer came back.
        let state = ring.state.borrow();
        assert_eq!(state.socks.len(), 0);
        assert_eq!(state.buffers.available, 2);
    });
}

#[test]
fn a_socket_taken_back_brings_what_it_received_unread() {
    with_ring(64, |ring| async move {
        let (mut ours, mut peer) = pair(&ring);
        peer.write_all(b"GET / HTTP/1.1\r\n\r\nrest of it").unwrap();
        let mut head = [0u8; 18];
        ours.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET / HTTP/1.1\r\n\r\n");
        ours.write_all(b"queued before").await.unwrap();
        // The receive's buffer holds "rest of it" (a moment for it to arrive).
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let (std, unread) = ours.into_std().await.unwrap();
        assert_eq!(unread, b"rest of it");
        assert_eq!(ring.state.borrow().socks.len(), 0);
        // The socket works without the ring; what was queued went first.
        let mut std = std;
        std.set_nonblocking(false).unwrap();
        std.write_all(b", then after").unwrap();
        peer.write_all(b"more").unwrap();
        let mut more = [0u8; 4];
        std.read_exact(&mut more).unwrap();
        assert_eq!(&more, b"more");
        drop(std);
        let mut all = Vec::new();
        peer.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"queued before, then after");
    });
}

#[test]
fn more_operations_in_one_turn_than_the_queue_holds_all_go() {
    // Eight entries (a completion queue of 32), forty connections answering at once: the
    // queue fills and is submitted on the way, and completions overflow the completion
    // queue and must be fetched from the kernel.
    with_small_ring(64, 8, |ring| async move {
        let mut pairs: Vec<(RingSocket, TcpStream)> = (0..40).map(|_| pair(&ring)).collect();
        for (k, (ours, _)) in pairs.iter_mut().enumerate() {
            ours.write_all(format!("answer {k}\n").as_bytes())
                .await
                .unwrap();
        }
        let peers: Vec<TcpStream> = pairs
            .into_iter()
            .map(|(mut ours, peer)| {
                // Each one's shutdown waits for its send.
                tokio::task::spawn_local(async move { ours.shutdown().await.unwrap() });
                peer
            })
            .collect();
        let got = tokio::task::spawn_blocking(move || {
            peers
                .into_iter()
                .map(|mut p| {
                    let mut s = String::new();
                    p.read_to_string(&mut s).unwrap();
                    s
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        for (k, text) in got.iter().enumerate() {
            assert_eq!(text, &format!("answer {k}\n"));
        }
    });
}

/// Connections taken by the multishot accept, served on the ring and dropped: every client
/// gets its answer and then the end of the stream (the descriptor's close goes through the
/// ring: were it never submitted, a client would wait for the end forever).
#[test]
fn connections_accepted_on_the_ring_are_served_and_closed() {
    with_ring(64, |ring| async move {
        let (mut listener, addr) = listening(&ring);
        const CLIENTS: usize = 24;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|k| {
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    // Bounded: a close that never comes fails the test instead of hanging it.
                    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                        .unwrap();
                    c.write_all(format!("client {k}\n").as_bytes()).unwrap();
                    let mut got = String::new();
                    c.read_to_string(&mut got).unwrap();
                    got
                })
            })
            .collect();
        let mut served = Vec::new();
        for _ in 0..CLIENTS {
            let stream = listener
                .accept()
                .await
                .expect("accepting")
                .expect("a connection");
            let peer = stream.peer_addr().expect("a connected socket");
            assert!(peer.ip().is_loopback());
            let mut socket = RingSocket::new(&ring, stream);
            served.push(tokio::task::spawn_local(async move {
                let mut line = Vec::new();
                while !line.ends_with(b"\n") {
                    let mut byte = [0u8; 64];
                    let n = socket.read(&mut byte).await.unwrap();
                    assert!(n > 0, "the line came whole");
                    line.extend_from_slice(&byte[..n]);
                }
                socket.write_all(b"heard ").await.unwrap();
                socket.write_all(&line).await.unwrap();
                // Dropped without a shutdown: the close alone ends the stream.
            }));
        }
        for task in served {
            task.await.unwrap();
        }
        // Waited for off the runtime's thread: the closes go with the driver's next turns.
        for (k, client) in clients.into_iter().enumerate() {
            let answer = tokio::task::spawn_blocking(move || client.join().unwrap())
                .await
                .unwrap();
            assert_eq!(answer, format!("heard client {k}\n"));
        }
    });
}

/// A listener told to stop gives out what the kernel had handed it, then says it is done.
#[test]
fn a_stopped_listener_gives_out_what_it_took_then_ends() {
    with_ring(8, |ring| async move {
        let (mut listener, addr) = listening(&ring);
        // Queued in the kernel before the accept is armed: the first accept takes them all.
        let clients: Vec<TcpStream> = (0..5).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut taken = vec![listener.accept().await.unwrap().unwrap()];
        listener.stop();
        while let Some(next) = listener.accept().await {
            taken.push(next.unwrap());
        }
        assert_eq!(taken.len(), clients.len());
        assert!(listener.accept().await.is_none(), "stopped stays stopped");
    });
}

/// A connection dropped with bytes its peer never reads keeps its entry and descriptor only
/// for the ring's orphan limit (the server's `body_timeout`), not for as long as the peer
/// stays: here 200 ms, waited for with a bound a hundred times longer.
#[test]
fn a_dropped_connection_whose_peer_never_reads_is_closed_at_the_orphan_limit() {
    let limit = std::time::Duration::from_millis(200);
    with_ring_of(8, super::ENTRIES, limit, |ring| async move {
        let (mut ours, peer) = pair(&ring);
        // Written until the peer's window, both kernel buffers and the ring's queue are full.
        let big = vec![b'x'; 64 << 20];
        let wrote =
            tokio::time::timeout(std::time::Duration::from_millis(500), ours.write_all(&big));
        assert!(wrote.await.is_err(), "the peer, not reading, took 64 MiB");
        assert!(!ring.state.borrow().socks[ours.key].queued.is_empty());
        drop(ours);
        assert_eq!(
            ring.state.borrow().socks.len(),
            1,
            "kept while its bytes may go out"
        );
        let bound = std::time::Instant::now() + 100 * limit;
        while !ring.state.borrow().socks.is_empty() {
            assert!(
                std::time::Instant::now() < bound,
                "the entry outlived the orphan limit a hundredfold"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        drop(peer);
    });
}

#[test]
fn kernel_versions_are_read_from_the_release() {
    assert_eq!(super::kernel_version("6.18.44-fc-v657"), (6, 18));
    assert_eq!(super::kernel_version("5.15.0-91-generic"), (5, 15));
    assert_eq!(super::kernel_version("garbage"), (0, 0));
}
