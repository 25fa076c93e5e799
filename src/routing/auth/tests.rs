use super::*;

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

fn argon2_of(password: &str) -> String {
    use argon2::PasswordHasher;
    let salt = argon2::password_hash::SaltString::from_b64("c29tZXNhbHRzb21lc2FsdA").unwrap();
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

fn auth() -> ThreadAuth {
    let text = format!(
        "# admins\nalice:{}\n\nbob:{}\n",
        bcrypt::hash("wonderland", 4).unwrap(),
        argon2_of("builder")
    );
    ThreadAuth::new(AuthSpec {
        realm: "Admin".into(),
        users: parse_htpasswd(&text).unwrap(),
        cleartext: false,
    })
}

#[test]
fn bcrypt_and_argon2_users_are_let_in_with_their_passwords_only() {
    let a = auth();
    // Each check a second apart: argon2 unoptimized takes a large share of the hashing
    // budget (this test is about verdicts, not the budget).
    let start = Instant::now();
    let mut seconds = 0;
    let mut now = || {
        seconds += 1;
        start + Duration::from_secs(seconds)
    };
    assert_eq!(
        a.check(Some(&basic("alice", "wonderland")), None, now()),
        Verdict::User("alice".into())
    );
    assert_eq!(
        a.check(Some(&basic("bob", "builder")), None, now()),
        Verdict::User("bob".into())
    );
    for wrong in [
        basic("alice", "builder"),
        basic("bob", ""),
        basic("carol", "wonderland"),
        "Bearer abc".into(),
        "Basic !!!".into(),
        "Basic YWxpY2U=".into(), // "alice", no colon
    ] {
        assert_eq!(
            a.check(Some(&wrong), None, now()),
            Verdict::Challenge,
            "{wrong}"
        );
    }
    assert_eq!(a.check(None, None, now()), Verdict::Challenge);
    // The scheme's name is case-insensitive.
    let lower = basic("alice", "wonderland").replacen("Basic", "basic", 1);
    assert_eq!(
        a.check(Some(&lower), None, now()),
        Verdict::User("alice".into())
    );
}

#[test]
fn a_success_is_remembered_and_a_failure_only_briefly() {
    let a = auth();
    let now = Instant::now();
    let good = basic("alice", "wonderland");
    assert!(matches!(a.check(Some(&good), None, now), Verdict::User(_)));
    assert_eq!(a.remembered(), (1, 0));
    // Remembered: the same answer without the hash (the entry is the same one).
    assert!(matches!(
        a.check(Some(&good), None, now + Duration::from_secs(60)),
        Verdict::User(_)
    ));
    let bad = basic("alice", "guess");
    assert_eq!(a.check(Some(&bad), None, now), Verdict::Challenge);
    let until = *a.refused.borrow().values().next().unwrap();
    assert!(until <= now + Duration::from_secs(1));
    // No password is kept: the keys are numbers.
    assert_eq!(a.remembered(), (1, 1));
}

#[test]
fn nobody_elses_wrong_guesses_lock_a_signed_in_user_out() {
    let a = auth();
    let now = Instant::now();
    let alice: std::net::IpAddr = "192.0.2.1".parse().unwrap();
    let good = basic("alice", "wonderland");
    assert!(matches!(
        a.check(Some(&good), Some(alice), now),
        Verdict::User(_)
    ));
    // Distinct guesses from rotating addresses, past the table's size and the budget.
    let mut spent = false;
    for k in 0..(CACHE_SIZE as u32 * 3) {
        let client = std::net::IpAddr::from([10, 0, (k >> 8) as u8, k as u8]);
        let guess = basic("alice", &format!("g{k}"));
        spent |= matches!(
            a.check(Some(&guess), Some(client), now),
            Verdict::Refused { status: 503, .. }
        );
    }
    assert!(spent, "the guesses spent the budget");
    // Alice's header is still known, and a new password of hers is hashed all the same.
    assert!(matches!(
        a.check(Some(&good), Some(alice), now),
        Verdict::User(_)
    ));
    let b = auth();
    assert!(matches!(
        b.check(Some(&good), Some(alice), now),
        Verdict::User(_)
    ));
    b.spent.set((now, HASH_BUDGET));
    b.seen.borrow_mut().clear();
    assert!(matches!(
        b.check(Some(&good), Some(alice), now),
        Verdict::User(_)
    ));
    // A stranger with the right password, never signed in here, waits out the budget; and
    // a trusted client that guesses wrong is trusted no more.
    let stranger: std::net::IpAddr = "192.0.2.9".parse().unwrap();
    b.seen.borrow_mut().clear();
    assert!(matches!(
        b.check(Some(&good), Some(stranger), now),
        Verdict::Refused { status: 503, .. }
    ));
    b.spent.set((now, Duration::ZERO));
    assert_eq!(
        b.check(Some(&basic("alice", "x")), Some(alice), now),
        Verdict::Challenge
    );
    b.spent.set((now, HASH_BUDGET));
    assert!(matches!(
        b.check(Some(&good), Some(alice), now),
        Verdict::Refused { status: 503, .. }
    ));
}

#[test]
fn weak_or_malformed_entries_are_refused_with_their_line() {
    for (text, line, why) in [
        ("alice:wonderland\n", 1, "a plain-text password"),
        ("# x\nalice:$apr1$abc$def\n", 2, "an MD5 hash"),
        (
            "alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n",
            1,
            "a SHA-1 hash",
        ),
        ("alice:abJnggxhB/yWI\n", 1, "a crypt (DES) hash"),
        ("alice:$6$salt$hash\n", 1, "a SHA-crypt hash"),
        ("alice:$2y$05$short\n", 1, "bcrypt hash is malformed"),
        ("just-a-name\n", 1, "is not `user:hash`"),
        ("# nobody\n", 0, "has no users"),
    ] {
        let (n, message) = parse_htpasswd(text).expect_err(text);
        assert_eq!(n, line, "{text}");
        assert!(message.contains(why), "{text}: {message}");
    }
}

#[test]
fn wrong_answers_are_bounded_per_client_and_hashing_per_thread() {
    let a = auth();
    let now = Instant::now();
    let client: std::net::IpAddr = "192.0.2.7".parse().unwrap();
    // Each guess a different password (none remembered): ten are checked, then 429.
    for k in 0..MAX_FAILURES {
        let guess = basic("alice", &format!("guess{k}"));
        assert_eq!(
            a.check(Some(&guess), Some(client), now),
            Verdict::Challenge,
            "{k}"
        );
    }
    let next = basic("alice", "guess-next");
    match a.check(Some(&next), Some(client), now) {
        Verdict::Refused {
            status: 429,
            retry_after,
        } => assert!((1..=60).contains(&retry_after)),
        other => panic!("{other:?}"),
    }
    // Another client is still checked, and the window ends after a minute.
    let other: std::net::IpAddr = "192.0.2.8".parse().unwrap();
    assert_eq!(
        a.check(Some(&basic("alice", "wonderland")), Some(other), now),
        Verdict::User("alice".into())
    );
    let later = now + Duration::from_secs(61);
    assert_eq!(
        a.check(Some(&next), Some(client), later),
        Verdict::Challenge
    );
}

#[test]
fn a_thread_spends_at_most_its_hashing_budget_each_second() {
    let a = auth();
    let now = Instant::now();
    // Distinct clients, distinct guesses: only the budget stops them. Cost-4 bcrypt hashes
    // are ~1 ms, so the budget allows hundreds; then 503 until the next second.
    let mut refused = None;
    for k in 0..100_000u32 {
        let client = std::net::IpAddr::from([10, (k >> 16) as u8, (k >> 8) as u8, k as u8]);
        let guess = basic("alice", &format!("g{k}"));
        if let Verdict::Refused {
            status,
            retry_after,
        } = a.check(Some(&guess), Some(client), now)
        {
            refused = Some((k, status, retry_after));
            break;
        }
    }
    let (k, status, retry_after) = refused.expect("the budget never ran out");
    assert_eq!((status, retry_after), (503, 1));
    assert!(k > 0);
    let next_second = now + Duration::from_secs(1);
    assert_eq!(
        a.check(Some(&basic("alice", "wonderland")), None, next_second),
        Verdict::User("alice".into())
    );
}
