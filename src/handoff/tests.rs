use super::*;

#[test]
fn messages_round_trip() {
    let addr: SocketAddr = "[::1]:8080".parse().unwrap();
    let client: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let key = Key([7; 16]);
    for who in [Some(client), None] {
        for pool in [None, Some("blog")] {
            let mut m = header(&key, addr, 2, who, pool);
            m.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            let expected = Message {
                addr,
                hops: 2,
                client: who,
                pool,
                unread: b"GET / HTTP/1.1\r\n\r\n",
            };
            assert_eq!(parse(&key, &m), Some(expected));
        }
        let mut m = header(&key, addr, 2, who, None);
        m.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        // Another master's key, or none: refused.
        assert_eq!(parse(&Key([8; 16]), &m), None);
    }
    let k = key.hex();
    let unsigned = format!("espalier-handoff/4 {addr} 2 - -\nx");
    assert_eq!(parse(&key, unsigned.as_bytes()), None);
    assert_eq!(parse(&key, b"GET / HTTP/1.1\r\n"), None);
    let bad = format!("espalier-handoff/4 {k} nonsense\nx");
    assert_eq!(parse(&key, bad.as_bytes()), None);
    let extra = format!("espalier-handoff/4 {k} [::1]:80 1 - - extra\nx");
    assert_eq!(parse(&key, extra.as_bytes()), None);
}

#[test]
fn the_nearest_tier_comes_first_in_turns() {
    // Pool `p` has threads on CPUs 0 and 1 (node 0) and 2 (node 1); a thread of another pool
    // on CPU 5 of node 0 tries node 0's in turns, then node 1's.
    let table = std::sync::Arc::new(Peers {
        dir: PathBuf::from("/d"),
        pools: vec![
            PoolSlots("q".into(), vec![(0, 5, Some(0))]),
            PoolSlots(
                "p".into(),
                vec![(0, 2, Some(1)), (0, 0, Some(0)), (1, 1, Some(0))],
            ),
        ],
        distances: vec![(0, 1, 21), (1, 0, 21)],
        wake: None,
    });
    let targets = Peers::targets(&table, "q", (5, Some(0)), Key([0; 16]));
    assert_eq!(targets.len(), 1, "its own pool is no target");
    let t = &targets[0];
    assert_eq!(t.pool(), "p");
    let p = |s: &str| PathBuf::from(s);
    let o: Vec<PathBuf> = t.order().into_iter().map(Path::to_path_buf).collect();
    assert_eq!(
        o,
        vec![
            p("/d/handoff-p-0-0"),
            p("/d/handoff-p-1-1"),
            p("/d/handoff-p-0-2")
        ]
    );
    let o: Vec<PathBuf> = t.order().into_iter().map(Path::to_path_buf).collect();
    assert_eq!(
        o,
        vec![
            p("/d/handoff-p-1-1"),
            p("/d/handoff-p-0-0"),
            p("/d/handoff-p-0-2")
        ]
    );
    // On CPU 1 itself: its own CPU's thread first.
    let on_1 = Peers::targets(&table, "q", (1, Some(0)), Key([0; 16]));
    let o: Vec<PathBuf> = on_1[0].order().into_iter().map(Path::to_path_buf).collect();
    assert_eq!(o[0], p("/d/handoff-p-1-1"));
    // A pool behind the dispatcher is given that pool's slots alone.
    assert_eq!(table.of_pool("p").pools, vec![table.pools[1].clone()]);
}
