use super::*;
use crate::config::upstream::ResponseCache;
use crate::proxy::cache_purge::Purge;
use crate::proxy::cache_store::{Lookup, Store};
use std::sync::Arc;

fn asked(key: &str, fields: &[(&str, &str)]) -> CacheRequest {
    CacheRequest {
        key: key.to_string(),
        use_: Use::Read,
        fields: (fields.iter())
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect(),
    }
}

fn kept(fields: &[(&'static str, &'static str)]) -> Option<Keep> {
    let now = httpdate::parse_http_date("Sun, 29 Nov 2026 10:00:00 GMT").unwrap();
    keep(200, fields.iter().map(|(n, v)| (*n, v.as_bytes())), now)
}

fn answer(body: &str, keep: Keep) -> Stored {
    let raw = Bytes::from(format!("HTTP/1.1 200 OK\r\n\r\n{body}"));
    let endpoint = crate::proxy::Endpoint::Tcp("127.0.0.1:1".parse().unwrap());
    Stored::new(raw, 19, endpoint, keep, (Some(b"\"v1\"".to_vec()), None))
}

#[test]
fn an_answer_is_kept_as_long_as_it_says_and_never_when_it_forbids_it() {
    let secs = |s| Some(Duration::from_secs(s));
    let life = |k: Option<Keep>| k.map(|k| k.lifetime);
    assert_eq!(
        life(kept(&[("Cache-Control", "public, max-age=60")])),
        secs(60)
    );
    assert_eq!(
        life(kept(&[("Cache-Control", "max-age=60, s-maxage=5")])),
        secs(5)
    );
    assert_eq!(life(kept(&[("Cache-Control", "max-age=\"30\"")])), secs(30));
    let expires = [
        ("Date", "Sun, 29 Nov 2026 10:00:00 GMT"),
        ("Expires", "Sun, 29 Nov 2026 10:02:00 GMT"),
    ];
    assert_eq!(life(kept(&expires)), secs(120));
    // Not kept: no lifetime, a zero one, one spent by its age, and what forbids it.
    for fields in [
        &[][..],
        &[("Cache-Control", "max-age=0")],
        &[("Cache-Control", "max-age=10"), ("Age", "10")],
        &[("Cache-Control", "max-age=60, private")],
        &[("Cache-Control", "no-store, max-age=60")],
        &[("Cache-Control", "no-cache, max-age=60")],
        &[("Cache-Control", "max-age=60"), ("Set-Cookie", "a=1")],
        &[("Cache-Control", "max-age=60"), ("Vary", "*")],
        &[("Expires", "0")],
    ] {
        assert_eq!(kept(fields), None, "{fields:?}");
    }
    // A status that may not be kept.
    let fields = [("Cache-Control", "max-age=60")];
    let now = SystemTime::now();
    assert!(keep(500, fields.iter().map(|(n, v)| (*n, v.as_bytes())), now).is_none());
    assert!(keep(404, fields.iter().map(|(n, v)| (*n, v.as_bytes())), now).is_some());
    let vary = kept(&[
        ("Cache-Control", "max-age=1"),
        ("Vary", "Accept-Encoding, accept-encoding"),
    ]);
    assert_eq!(vary.unwrap().vary, ["accept-encoding"]);
}

#[test]
fn a_variant_answers_the_values_it_was_stored_for() {
    let store = Store::new(ResponseCache {
        size: 1 << 20,
        entry: 1 << 16,
        key: vec![],
        disk: 0,
        folder: None,
    });
    let keep = kept(&[("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")]).unwrap();
    let gzip = asked("http://a/x", &[("accept-encoding", "gzip")]);
    let plain = asked("http://a/x", &[]);
    assert!(store.get(&gzip).is_none());
    store.put(&gzip, answer("zipped", keep.clone()));
    store.put(&plain, answer("plain", keep));
    let body = |s: Option<Arc<Stored>>| s.map(|s| s.raw.slice(s.head_len..));
    assert_eq!(body(store.get(&gzip)).as_deref(), Some(&b"zipped"[..]));
    assert_eq!(body(store.get(&plain)).as_deref(), Some(&b"plain"[..]));
    let other = asked("http://a/x", &[("accept-encoding", "br")]);
    assert!(store.get(&other).is_none());
    let c = store.counts();
    assert_eq!((c.hits, c.misses, c.stored, c.entries), (2, 2, 2, 2));
    // An unsafe method's answer takes the URL's every variant out.
    store.invalidate(&asked("http://a/x", &[]));
    assert!(store.get(&gzip).is_none());
    assert_eq!((store.counts().entries, store.counts().bytes), (0, 0));
}

#[test]
fn the_least_recently_used_go_first_and_the_bound_holds_at_a_hundred_thousand_keys() {
    let keep = kept(&[("Cache-Control", "max-age=60")]).unwrap();
    let size = 1 << 20;
    let store = Store::new(ResponseCache {
        size,
        entry: 4096,
        key: vec![],
        disk: 0,
        folder: None,
    });
    let key = |k: u32| asked(&format!("http://a/{k}"), &[]);
    store.put(&key(0), answer("zero", keep.clone()));
    for k in 1..100_000 {
        // Key 0 used between every insert: never the least recently used.
        assert!(store.get(&key(0)).is_some(), "at {k}");
        store.put(&key(k), answer(&"x".repeat(100), keep.clone()));
        assert!(store.counts().bytes <= size);
    }
    let c = store.counts();
    assert!(c.evicted > 90_000, "{c:?}");
    assert!(store.get(&key(99_999)).is_some());
    assert!(store.get(&key(1)).is_none());
    // Over the entry bound: not kept.
    store.put(&key(1), answer(&"y".repeat(5000), keep));
    assert!(store.get(&key(1)).is_none());
}

#[test]
fn a_stale_answer_is_not_given_and_a_conditional_request_is_answered_by_its_validators() {
    let store = Store::new(ResponseCache {
        size: 1 << 20,
        entry: 1 << 16,
        key: vec![],
        disk: 0,
        folder: None,
    });
    let spent = Keep {
        lifetime: Duration::from_secs(5),
        age: Duration::from_secs(4),
        vary: vec![],
        stale_if_error: Duration::ZERO,
        stale_while_revalidate: Duration::ZERO,
        tags: vec![],
    };
    let plain = asked("http://a/s", &[]);
    // Stale with a validator: kept, for the app to confirm.
    let mut old = answer("old", spent.clone());
    old.stored -= Duration::from_secs(2);
    store.put(&plain, old);
    assert!(store.get(&plain).is_none());
    assert!(matches!(store.look(&plain), Lookup::Stale(_)));
    assert_eq!(store.counts().entries, 1);
    // Stale without one: kept while stale-if-error allows, else taken out.
    let endpoint = crate::proxy::Endpoint::Tcp("127.0.0.1:1".parse().unwrap());
    let raw = Bytes::from_static(b"HTTP/1.1 200 OK\r\n\r\n");
    let errors = Keep {
        stale_if_error: Duration::from_secs(60),
        ..spent.clone()
    };
    let mut bare = Stored::new(raw.clone(), 19, endpoint.clone(), errors, (None, None));
    bare.stored -= Duration::from_secs(2);
    assert!(bare.stands_in_for_errors(Instant::now()));
    // Or while stale-while-revalidate allows: given as the app is asked behind it.
    let said = kept(&[("Cache-Control", "max-age=5, stale-while-revalidate=30")]).unwrap();
    assert_eq!(said.stale_while_revalidate, Duration::from_secs(30));
    let window = Keep {
        stale_while_revalidate: Duration::from_secs(1),
        ..spent.clone()
    };
    let mut revalidating = Stored::new(raw.clone(), 19, endpoint.clone(), window, (None, None));
    revalidating.stored -= Duration::from_secs(1);
    assert!(revalidating.serves_while_revalidating(Instant::now()));
    assert!(revalidating.worth_keeping_stale(Instant::now()));
    revalidating.stored -= Duration::from_secs(2);
    assert!(!revalidating.serves_while_revalidating(Instant::now()));
    assert!(!revalidating.worth_keeping_stale(Instant::now()));
    let mut spent_bare = Stored::new(raw, 19, endpoint, spent, (None, None));
    spent_bare.stored -= Duration::from_secs(2);
    assert!(!spent_bare.stands_in_for_errors(Instant::now()));
    store.put(&plain, spent_bare);
    assert!(matches!(store.look(&plain), Lookup::Missing));
    assert_eq!(store.counts().entries, 0);
    let fresh = answer("new", kept(&[("Cache-Control", "max-age=60")]).unwrap());
    assert!(fresh.not_modified_for(&asked("http://a/s", &[("if-none-match", "W/\"v1\"")])));
    assert!(fresh.not_modified_for(&asked("http://a/s", &[("if-none-match", "\"v0\", *")])));
    assert!(!fresh.not_modified_for(&asked("http://a/s", &[("if-none-match", "\"v0\"")])));
    assert!(!fresh.not_modified_for(&plain));
}

#[test]
fn a_purge_takes_out_a_url_a_prefix_or_a_tag() {
    let purge = Purge::of_query("url=https%3A%2F%2Fshop.example%2Fa%3Fx%3D1").unwrap();
    assert_eq!(purge, Purge::Url("https://shop.example/a?x=1".into()));
    assert_eq!(Purge::of_line(&purge.line()), Some(purge));
    assert_eq!(
        Purge::of_query("tag=news+front").unwrap(),
        Purge::Tag("news front".into())
    );
    for bad in [
        "",
        "url=",
        "what=1",
        "url=a&tag=b",
        "url=a%0Ab",
        "url=a%zz",
        "url=%4",
    ] {
        assert!(Purge::of_query(bad).is_err(), "{bad}");
    }
    let store = Store::new(ResponseCache {
        size: 1 << 20,
        entry: 1 << 16,
        key: vec![],
        disk: 0,
        folder: None,
    });
    let tagged = kept(&[
        ("Cache-Control", "max-age=60"),
        ("Cache-Tag", "news, front"),
        ("Surrogate-Key", "a1 a2"),
    ])
    .unwrap();
    assert_eq!(tagged.tags, ["news", "front", "a1", "a2"]);
    let plain = kept(&[("Cache-Control", "max-age=60")]).unwrap();
    for (url, keep) in [
        ("https://s/p/1", &tagged),
        ("https://s/p/2", &plain),
        ("https://s/q", &plain),
    ] {
        store.put(&asked(url, &[]), answer(url, keep.clone()));
    }
    assert_eq!(store.purge(&Purge::Tag("a2".into())), 1);
    assert!(store.get(&asked("https://s/p/1", &[])).is_none());
    assert_eq!(store.purge(&Purge::Prefix("https://s/p/".into())), 1);
    assert_eq!(store.purge(&Purge::Url("https://s/q".into())), 1);
    assert_eq!(store.counts().entries, 0);
}

#[test]
fn answers_put_out_of_memory_go_to_the_disk_tier_and_come_back_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(ResponseCache {
        size: 20_000,
        entry: 8192,
        key: vec![],
        disk: 80_000,
        folder: Some(dir.path().to_path_buf()),
    });
    let keep = kept(&[("Cache-Control", "max-age=600")]).unwrap();
    let body = |i: usize| format!("{i:04}").repeat(1000);
    for i in 0..12 {
        store.put(
            &asked(&format!("http://a/{i}"), &[]),
            answer(&body(i), keep.clone()),
        );
        let c = store.counts();
        assert!(c.bytes <= 20_000 && c.disk_bytes <= 80_000, "{c:?}");
    }
    // Memory holds the last four (4,019 bytes and a key each); the disk the eight before.
    let c = store.counts();
    assert_eq!((c.entries, c.evicted), (4, 8), "{c:?}");
    assert_eq!(c.disk_entries, 8, "{c:?}");
    // The file has no name in the folder.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // Each comes back whole, from memory or disk: what is read from disk goes to memory
    // again, pushing others out to disk (its ring has room for all of them twice; the
    // ring writing over its oldest is the next test's).
    for i in (0..12).rev() {
        let got = store
            .get(&asked(&format!("http://a/{i}"), &[]))
            .expect("kept");
        assert_eq!(&got.raw[19..], body(i).as_bytes(), "answer {i}");
    }
    let c = store.counts();
    assert_eq!(c.hits, 12, "{c:?}");
    // Brought back from disk is not kept anew.
    assert_eq!(c.stored, 12, "{c:?}");
    assert!(c.bytes <= 20_000 && c.disk_bytes <= 80_000, "{c:?}");
    // A purge and an unsafe method reach the disk tier too.
    store.invalidate(&asked("http://a/11", &[]));
    assert!(store.get(&asked("http://a/11", &[])).is_none());
    let before = store.counts();
    let gone = store.purge(&crate::proxy::cache_purge::Purge::Prefix(
        "http://a/".into(),
    ));
    assert_eq!(gone as u64, before.entries + before.disk_entries);
    let after = store.counts();
    assert_eq!(
        (after.entries, after.disk_entries, after.disk_bytes),
        (0, 0, 0)
    );
}

#[test]
fn the_disk_ring_writes_over_its_oldest_answers() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = crate::proxy::cache_disk::Disk::open(dir.path(), 10_000, 1 << 20).unwrap();
    let keep = kept(&[("Cache-Control", "max-age=600")]).unwrap();
    for i in 0..5 {
        disk.spill(
            &format!("k{i}"),
            vec![],
            &answer(&"x".repeat(3000), keep.clone()),
        );
    }
    // Three fit in 10,000 bytes; the fourth and fifth went over the first two.
    assert_eq!(disk.held(), (3 * 3019, 3));
    assert!(disk.take("k0", |_| true).is_none());
    assert!(disk.take("k1", |_| true).is_none());
    for k in ["k2", "k3", "k4"] {
        let (_, got) = disk.take(k, |_| true).expect("on disk");
        assert_eq!(got.raw.len(), 3019);
    }
    assert_eq!(disk.held(), (0, 0));
    // An answer larger than the ring is let go.
    disk.spill("big", vec![], &answer(&"y".repeat(20_000), keep));
    assert_eq!(disk.held(), (0, 0));
}

#[test]
fn a_url_keeps_a_bounded_number_of_variants_whatever_its_clients_send() {
    let store = Store::new(ResponseCache {
        size: 64 << 20,
        entry: 1 << 16,
        key: vec![],
        disk: 0,
        folder: None,
    });
    let keep = kept(&[("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")]).unwrap();
    // A client making up a language each time: 10,000 variants asked to be kept.
    for i in 0..10_000 {
        let language = format!("x-{i}");
        let asked = asked("http://a/v", &[("accept-language", &language)]);
        store.put(&asked, answer(&format!("{i}"), keep.clone()));
    }
    let c = store.counts();
    assert_eq!(c.entries, MAX_VARIANTS as u64, "{c:?}");
    assert_eq!(c.evicted, 10_000 - MAX_VARIANTS as u64, "{c:?}");
    // The newest are the ones kept; the first long gone.
    let newest = asked("http://a/v", &[("accept-language", "x-9999")]);
    assert_eq!(&store.get(&newest).unwrap().raw[19..], b"9999");
    assert!(store
        .get(&asked("http://a/v", &[("accept-language", "x-0")]))
        .is_none());
}

#[test]
fn the_disk_tiers_index_in_memory_is_bounded_however_small_its_answers() {
    let dir = tempfile::tempdir().unwrap();
    let bound = 64 << 10;
    let mut disk = crate::proxy::cache_disk::Disk::open(dir.path(), 1 << 30, bound).unwrap();
    let keep = kept(&[("Cache-Control", "max-age=600")]).unwrap();
    // 100,000 answers of a few bytes, each under a long key: a gigabyte of disk would index
    // them all.
    for i in 0..100_000 {
        let key = format!("http://a/{}{i}", "k".repeat(200));
        disk.spill(&key, vec![], &answer("x", keep.clone()));
        assert!(disk.index_bytes() <= bound, "{}", disk.index_bytes());
    }
    let (bytes, entries) = disk.held();
    assert!(entries > 0 && entries < 200, "{entries}");
    // The newest stay, the oldest went.
    let newest = format!("http://a/{}{}", "k".repeat(200), 99_999);
    assert!(disk.take(&newest, |_| true).is_some());
    assert!(disk
        .take(&format!("http://a/{}0", "k".repeat(200)), |_| true)
        .is_none());
    assert!(bytes > 0);
}
