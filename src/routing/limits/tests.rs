use super::*;

fn spec(rate: Option<&str>, burst: u32, concurrent: Option<u32>) -> LimitSpec {
    LimitSpec {
        rate: rate.map(|r| Rate::parse(r).unwrap()),
        burst,
        concurrent,
        action: DenyAction::Status(429),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn quiet() -> Box<dyn Fn(String) + Send + Sync> {
    Box::new(|_| {})
}

fn admitted(v: &Verdict) -> bool {
    matches!(v, Verdict::Admit(_))
}

#[test]
fn rates_are_requests_per_period() {
    let r = Rate::parse("50/s").unwrap();
    assert_eq!((r.requests, r.per), (50, Duration::from_secs(1)));
    assert_eq!(Rate::parse("600/m").unwrap().per, Duration::from_secs(60));
    assert_eq!(Rate::parse("5/10s").unwrap().per, Duration::from_secs(10));
    assert_eq!(Rate::parse("1/h").unwrap().per, Duration::from_secs(3600));
    for bad in ["50", "0/s", "50/d", "x/s", "5/0s", "-1/s"] {
        assert!(Rate::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_client_gets_its_burst_then_the_rate_and_others_are_untouched() {
    let accounts = Arc::new(Accounts::new("s", spec(Some("10/s"), 10, None), 1, quiet()));
    let t = ThreadLimits::new(Arc::clone(&accounts));
    let t0 = accounts.epoch + Duration::from_secs(5);
    let a = ip("192.0.2.1");
    let let_in = (0..20).filter(|_| admitted(&t.admit(a, t0, false))).count();
    assert_eq!(let_in, 10, "the burst, exactly, on one thread");
    match t.admit(a, t0, false) {
        Verdict::Refuse {
            action,
            retry_after,
            table_full,
        } => assert_eq!(
            (action, retry_after, table_full),
            (DenyAction::Status(429), 1, false)
        ),
        Verdict::Admit(_) => panic!("over its burst"),
    }
    assert!(admitted(&t.admit(ip("192.0.2.2"), t0, false)));
    assert!(admitted(&t.admit(ip("2001:db8::2"), t0, false)));
    // A tenth of a second later, one more.
    let later = t0 + Duration::from_millis(100);
    assert!(admitted(&t.admit(a, later, false)));
    assert!(!admitted(&t.admit(a, later, false)));
    // A slow rate says how long to wait.
    let slow = Arc::new(Accounts::new("s", spec(Some("1/m"), 1, None), 1, quiet()));
    let t = ThreadLimits::new(Arc::clone(&slow));
    let t0 = slow.epoch + Duration::from_secs(1);
    assert!(admitted(&t.admit(a, t0, false)));
    match t.admit(a, t0 + Duration::from_secs(15), false) {
        Verdict::Refuse { retry_after, .. } => assert_eq!(retry_after, 45),
        Verdict::Admit(_) => panic!("one a minute"),
    }
}

#[test]
fn threads_sharing_an_account_stay_within_the_leases_bound() {
    let threads = 4;
    let burst = 64;
    let accounts = Arc::new(Accounts::new(
        "s",
        spec(Some("64/s"), burst, None),
        threads,
        quiet(),
    ));
    let lease = accounts.token_lease;
    assert_eq!(lease, 4);
    let ts: Vec<ThreadLimits> = (0..threads)
        .map(|_| ThreadLimits::new(Arc::clone(&accounts)))
        .collect();
    let t0 = accounts.epoch + Duration::from_secs(5);
    let a = ip("198.51.100.9");
    let mut let_in = 0;
    for round in 0..200 {
        if admitted(&ts[round % threads].admit(a, t0, false)) {
            let_in += 1;
        }
    }
    assert!(let_in <= burst as usize, "never past the burst: {let_in}");
    assert!(
        let_in >= (burst - (threads as u32 - 1) * lease) as usize,
        "refused early by at most the leases held: {let_in}"
    );
}

#[test]
fn requests_in_flight_are_limited_and_given_back() {
    let accounts = Arc::new(Accounts::new("s", spec(None, 1, Some(3)), 2, quiet()));
    let (t1, t2) = (
        ThreadLimits::new(Arc::clone(&accounts)),
        ThreadLimits::new(Arc::clone(&accounts)),
    );
    let now = accounts.epoch + Duration::from_secs(1);
    let a = ip("203.0.113.5");
    let take = |t: &ThreadLimits| match t.admit(a, now, true) {
        Verdict::Admit(held) => Some(held.expect("a slot held")),
        Verdict::Refuse { .. } => None,
    };
    let h1 = take(&t1).unwrap();
    let h2 = take(&t2).unwrap();
    let h3 = take(&t1).unwrap();
    assert!(take(&t2).is_none(), "a fourth at once is refused");
    assert!(
        !admitted(&t2.admit(a, now, false)),
        "a request answered at once is refused too"
    );
    assert!(admitted(&t1.admit(ip("203.0.113.6"), now, true)));
    drop(h2);
    let h4 = take(&t2).expect("a slot given back is taken again");
    drop((h1, h3, h4));
    assert_eq!(
        accounts
            .shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap()
                    .get(&a)
                    .map_or(0, |acc| acc.slots.load(Ordering::Relaxed))
            })
            .sum::<u32>(),
        0,
        "every slot given back when the client is quiet"
    );
}

#[test]
fn a_client_limited_for_concurrency_spends_no_token() {
    let accounts = Arc::new(Accounts::new(
        "s",
        spec(Some("2/m"), 2, Some(1)),
        1,
        quiet(),
    ));
    let t = ThreadLimits::new(Arc::clone(&accounts));
    let now = accounts.epoch + Duration::from_secs(1);
    let a = ip("192.0.2.44");
    let Verdict::Admit(held) = t.admit(a, now, true) else {
        panic!("the first")
    };
    for _ in 0..5 {
        assert!(!admitted(&t.admit(a, now, true)));
    }
    drop(held);
    assert!(
        admitted(&t.admit(a, now, true)),
        "its second token was kept"
    );
    assert!(!admitted(&t.admit(a, now, true)), "two a minute");
}

#[test]
fn the_log_says_when_a_client_starts_and_stops_being_limited() {
    let said = Arc::new(Mutex::new(Vec::new()));
    let to = Arc::clone(&said);
    let report = Box::new(move |line: String| to.lock().unwrap().push(line));
    let accounts = Arc::new(Accounts::new("shop", spec(Some("1/s"), 1, None), 1, report));
    let t = ThreadLimits::new(Arc::clone(&accounts));
    let t0 = accounts.epoch + Duration::from_secs(3);
    let a = ip("192.0.2.8");
    assert!(admitted(&t.admit(a, t0, false)));
    for _ in 0..3 {
        assert!(!admitted(&t.admit(a, t0, false)));
    }
    assert!(admitted(&t.admit(a, t0 + Duration::from_secs(1), false)));
    assert_eq!(
        *said.lock().unwrap(),
        [
            "site shop: client 192.0.2.8 limited (over 1/s, burst 1): answering 429",
            "site shop: client 192.0.2.8 no longer limited (3 requests refused)",
        ]
    );
}

#[test]
fn hostile_rates_and_bursts_neither_wrap_nor_panic() {
    for bad in [
        "1/18446744073709551615h",
        "1/99999999999h",
        "1/25h",
        "5/86401s",
    ] {
        let why = Rate::parse(bad).unwrap_err();
        assert!(
            why.contains("a day at most") || why.contains("is not a rate"),
            "{bad}: {why}"
        );
    }
    assert_eq!(Rate::parse("1/24h").unwrap().per, MAX_PERIOD);
    // The slowest rate with the largest burst: the burst's worth is past u64's ns.
    let accounts = Arc::new(Accounts::new(
        "s",
        spec(Some("1/24h"), u32::MAX, None),
        1,
        quiet(),
    ));
    let t = ThreadLimits::new(Arc::clone(&accounts));
    let t0 = accounts.epoch + Duration::from_secs(1);
    for _ in 0..1000 {
        assert!(admitted(&t.admit(ip("192.0.2.1"), t0, false)));
    }
}

#[test]
fn a_flood_of_distinct_clients_is_bounded_per_thread() {
    let accounts = Arc::new(Accounts::new("s", spec(Some("1/m"), 1, None), 1, quiet()));
    let t = ThreadLimits::new(Arc::clone(&accounts));
    let t0 = accounts.epoch + Duration::from_secs(1);
    // More distinct addresses than a thread keeps, all within a second: the table stops at
    // its bound and the rest are refused (fail closed), each counted, until some go quiet.
    let mut refused = 0;
    for k in 0..(MAX_CLIENTS as u128 + 1000) {
        let client = IpAddr::V6(std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | k));
        match t.admit(client, t0, false) {
            Verdict::Admit(_) => assert!(k < MAX_CLIENTS as u128, "{k} let in past the bound"),
            Verdict::Refuse {
                table_full,
                retry_after,
                ..
            } => {
                assert!(table_full && retry_after == 1);
                refused += 1;
            }
        }
    }
    assert_eq!(t.local.borrow().len(), MAX_CLIENTS);
    // The process's table is sharded: a shard fills a little before the whole does.
    assert!((1000..5000).contains(&refused), "{refused}");
    assert_eq!(accounts.refused_full.load(Ordering::Relaxed), refused);
    // Once the first clients' minute is over, they are swept and a new client gets in.
    let later = t0 + Duration::from_secs(61);
    let client = IpAddr::V6(std::net::Ipv6Addr::from(
        0x2001_0db8_u128 << 96 | 0xffff_ffff,
    ));
    assert!(admitted(&t.admit(client, later, false)));
}

#[test]
fn a_full_table_lets_its_least_recent_unused_clients_go_for_new_ones() {
    // At 2/h one request keeps a client's account charged for half an hour.
    let accounts = Accounts::new("s", spec(Some("2/h"), 1, None), 4, quiet());
    let t0 = 1_000_000_000;
    let client = |k: u128| IpAddr::V6(std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | k));
    let mut held = Vec::new();
    let mut k = 0u128;
    // Clients come until a shard is full: the one refused then is the new client.
    let refused = loop {
        // Charged as a request would, each later than the last: k is the oldest activity.
        let Some(a) = accounts.account(client(k), t0 + k as u64) else {
            break client(k);
        };
        a.tat
            .store(t0 + k as u64 + 1_800_000_000_000, Ordering::Relaxed);
        // A thread still uses every sixteenth: those are never let go.
        if k % 16 == 0 {
            held.push(a);
        }
        k += 1;
    };
    // Thirty seconds on, they are too young to let go: a flood of new addresses still finds
    // the table full. A minute on, the oldest unused of its shard go, and it gets in (it
    // stayed refused for half an hour).
    assert!(accounts
        .account(refused, t0 + k as u64 + 30_000_000_000)
        .is_none());
    let later = t0 + k as u64 + 61_000_000_000;
    assert!(accounts.account(refused, later).is_some());
    let kept = |ip: IpAddr| {
        accounts.shards[shard_of(ip)]
            .lock()
            .unwrap()
            .contains_key(&ip)
    };
    assert!(held.len() > 1 && (0..k).step_by(16).all(|j| kept(client(j))));
    let shard = shard_of(refused);
    let in_shard: Vec<u128> = (0..k)
        .filter(|&j| j % 16 != 0 && shard_of(client(j)) == shard)
        .collect();
    let gone: Vec<u128> = in_shard
        .iter()
        .copied()
        .filter(|&j| !kept(client(j)))
        .collect();
    let stayed: Vec<u128> = in_shard
        .iter()
        .copied()
        .filter(|&j| kept(client(j)))
        .collect();
    assert!(!gone.is_empty() && !stayed.is_empty());
    assert!(gone.iter().max() < stayed.iter().min(), "oldest first");
}

#[test]
fn the_processs_table_stops_at_its_bound() {
    let accounts = Accounts::new("s", spec(Some("1/m"), 1, None), 4, quiet());
    let now = 1_000_000_000;
    let mut counted = 0;
    for k in 0..(MAX_CLIENTS as u128 + 5000) {
        let client = IpAddr::V6(std::net::Ipv6Addr::from(0x2001_0db8_u128 << 96 | k));
        // Each holds its account (a thread's lease would), so none can be swept.
        if let Some(a) = accounts.account(client, now) {
            std::mem::forget(a);
            counted += 1;
        }
    }
    let kept: usize = accounts
        .shards
        .iter()
        .map(|s| s.lock().unwrap().len())
        .sum();
    assert!(kept <= MAX_CLIENTS, "{kept}");
    assert_eq!(counted, kept);
}
