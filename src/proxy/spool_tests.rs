use super::{streams, Spool};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncReadExt;

/// A spool counted apart from the process's (tests run side by side).
fn own(memory: u64, disk: u64) -> Spool {
    Spool::counted_in(memory, disk, Box::leak(Box::new(AtomicU64::new(0))))
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn held_bytes_come_back_in_order_from_memory_then_the_file() {
    run(async {
        let spool = own(8, 1 << 20);
        // 6 in memory; the next 6 do not fit, so the file takes them and what follows.
        spool.push(b"abcdef");
        assert_eq!(Spool::room(&spool.0.borrow()), 2);
        spool.push(b"ghijkl");
        assert!(spool.0.borrow().file.is_some());
        spool.push(b"mn");
        spool.end(true);
        let mut all = String::new();
        spool.reader().read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "abcdefghijklmn");
        // Read whole, the file starts over, and is counted as nothing.
        assert_eq!(spool.0.borrow().written, 0);
        assert_eq!(spool.0.borrow().on_disk.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn past_both_bounds_there_is_no_room_until_the_client_takes_some() {
    run(async {
        let spool = own(4, 4);
        spool.push(b"1234");
        spool.push(b"5678");
        assert_eq!(Spool::room(&spool.0.borrow()), 0);
        let mut two = [0u8; 4];
        let n = spool.reader().read(&mut two).await.unwrap();
        assert_eq!(&two[..n], b"1234");
        // Memory is empty, but the file holds bytes unread: new ones go after them.
        assert_eq!(Spool::room(&spool.0.borrow()), 0);
        let n = spool.reader().read(&mut two[..2]).await.unwrap();
        assert_eq!(&two[..n], b"56");
        // Part read, the file still takes its whole size of the disk.
        assert_eq!(Spool::room(&spool.0.borrow()), 0);
        let n = spool.reader().read(&mut two).await.unwrap();
        assert_eq!(&two[..n], b"78");
        assert_eq!(Spool::room(&spool.0.borrow()), 4);
    });
}

#[test]
fn spools_share_one_bound_on_disk() {
    run(async {
        let on_disk: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let (a, b) = (
            Spool::counted_in(4, 8, on_disk),
            Spool::counted_in(4, 8, on_disk),
        );
        a.push(b"mem.");
        a.push(b"file");
        b.push(b"mem.");
        assert_eq!(
            Spool::room(&b.0.borrow()),
            4,
            "a's file takes half the bound"
        );
        b.push(b"file");
        assert!(!a.has_room() && !b.has_room());
        drop(a);
        assert_eq!(on_disk.load(Ordering::Relaxed), 4);
        assert!(b.has_room());
    });
}

#[test]
fn a_failed_answer_fails_its_reader_after_what_was_held() {
    run(async {
        let spool = own(64, 0);
        spool.push(b"part");
        spool.end(false);
        let mut r = spool.reader();
        let mut got = [0u8; 8];
        assert_eq!(r.read(&mut got).await.unwrap(), 4);
        assert!(r.read(&mut got).await.is_err());
    });
}

#[test]
fn a_file_that_fails_behind_held_bytes_cuts_the_answer_rather_than_reorder_it() {
    run(async {
        let spool = own(4, 1 << 20);
        spool.push(b"abcd");
        spool.push(b"efgh");
        // The file now fails its writes (read-only), with "efgh" in it unread.
        spool.0.borrow_mut().file = Some(std::fs::File::open("/dev/null").unwrap());
        spool.push(b"ijkl");
        spool.end(true);
        let mut r = spool.reader();
        let mut got = [0u8; 16];
        assert!(r.read(&mut got).await.is_err(), "no byte out of order");
    });
}

#[test]
fn streaming_answers_are_known_by_their_fields() {
    let f = |name: &'static str, value: &'static str| [(name, value.as_bytes())].into_iter();
    assert!(streams(f(
        "Content-Type",
        "text/event-stream; charset=utf-8"
    )));
    assert!(streams(f("content-type", "application/grpc+proto")));
    assert!(streams(f("X-Accel-Buffering", "no")));
    assert!(!streams(f("X-Accel-Buffering", "yes")));
    assert!(!streams(f("Content-Type", "text/html")));
    // A value that is not UTF-8, or whose character straddles the compared length.
    assert!(!streams(
        [("content-type", &b"text/event-strea\xc3\xa9m"[..])].into_iter()
    ));
    assert!(!streams([("content-type", &b"\xff\xfe"[..])].into_iter()));
}
