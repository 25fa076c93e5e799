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
    let p = |s: &str| PathBuf::from(s);
    let t = PoolTargets::new(
        Tiers {
            tiers: vec![vec![p("a"), p("b")], vec![p("c")]],
            local: true,
        },
        Key([0; 16]),
        "p".into(),
        None,
    );
    let o: Vec<PathBuf> = t.order().into_iter().map(Path::to_path_buf).collect();
    assert_eq!(o, vec![p("a"), p("b"), p("c")]);
    let o: Vec<PathBuf> = t.order().into_iter().map(Path::to_path_buf).collect();
    assert_eq!(o, vec![p("b"), p("a"), p("c")]);
}
