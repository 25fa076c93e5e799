//! Tests of the doctor: inputs read from the fixture trees, every warning on the untuned DL980,
//! nothing to change on the tuned laptop.

use super::*;
use crate::testutil::{fixture, fixture_dir};

fn inputs(name: &str) -> Inputs {
    let sys = fixture_dir(name);
    read_inputs(&sys, &sys.parent().unwrap().join("proc"))
}

fn status_of<'a>(f: &'a [Finding], check: &str) -> Vec<&'a Finding> {
    f.iter().filter(|x| x.check == check).collect()
}

#[test]
fn reads_every_input_from_the_fixture() {
    let i = inputs("dl980");
    assert_eq!(i.somaxconn, Some(128));
    assert_eq!(i.tcp_max_syn_backlog, Some(512));
    assert_eq!(i.ip_local_port_range, Some((32768, 60999)));
    assert_eq!(i.tcp_tw_reuse, Some(2));
    assert_eq!(i.nofile, Some((1024, 4096)));
    assert_eq!(i.numa_balancing, Some(1));
    assert!(i.irqbalance_running);
    assert_eq!(i.governors.len(), 160);
    assert_eq!(i.thp.as_deref(), Some("always"));
    let l = inputs("laptop");
    assert!(!l.irqbalance_running);
    assert_eq!(
        l.deepest_idle,
        Some(("C1".to_string(), 2)),
        "C6 is disabled"
    );
    assert_eq!(l.thp.as_deref(), Some("madvise"));
}

#[test]
fn a_badly_tuned_case_study_machine_gets_every_warning() {
    let t = fixture("dl980");
    let text = "[[pool]]\nname = \"shop\"\naffinity = \"hard\"\ncpus = \"0-39\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"shop\"\n";
    let config = Config::parse(text, Path::new("shop.toml"), &t).unwrap();
    let f = check(&inputs("dl980"), &t, Some(&config));
    for name in [
        "somaxconn",
        "tcp_max_syn_backlog",
        "open files",
        "numa_balancing",
        "irqbalance",
        "cpu governor",
        "transparent huge pages",
        "pool cpus",
    ] {
        let found = status_of(&f, name);
        assert!(
            found.iter().any(|x| x.status == Status::Warn),
            "{name} should warn: {found:?}"
        );
        assert!(
            found.iter().all(|x| !x.advice.is_empty()),
            "{name} says how to fix it"
        );
    }
    assert_eq!(
        status_of(&f, "somaxconn")[0].advice,
        "sysctl -w net.core.somaxconn=1024"
    );
    // ens2f0 sits on node 2 with its IRQs on CPU 0; ens1f0 is on node 0 but has all 16 of
    // its IRQs piled on CPU 0.
    let nic = status_of(&f, "nic irqs");
    assert!(
        nic.iter().any(|x| x.status == Status::Warn
            && x.found.starts_with("ens2f0 (node 2)")
            && x.found.contains("off its node")
            && x.advice == "espalier nic apply ens2f0"),
        "{nic:?}"
    );
    assert!(
        nic.iter().any(|x| x.status == Status::Warn
            && x.found
                .starts_with("ens1f0 (node 0): all 16 IRQs are piled on CPU 0")),
        "{nic:?}"
    );
    assert_eq!(status_of(&f, "ip_local_port_range")[0].status, Status::Info);
    assert!(render(&f).ends_with("thing(s) should change\n"));
}

#[test]
fn a_well_tuned_laptop_is_all_well() {
    let f = check(&inputs("laptop"), &fixture("laptop"), None);
    let warns: Vec<&Finding> = f.iter().filter(|x| x.status == Status::Warn).collect();
    assert!(warns.is_empty(), "{warns:?}");
    assert!(render(&f).ends_with("all well\n"));
    assert_eq!(status_of(&f, "idle states")[0].status, Status::Ok);
}

#[test]
fn nofile_lines_parse() {
    assert_eq!(
        parse_nofile("Max open files            1024                 524288               files"),
        Some((1024, 524288))
    );
    assert_eq!(
        parse_nofile("Max open files            unlimited            unlimited            files"),
        Some((u64::MAX, u64::MAX))
    );
    assert_eq!(parse_nofile("nothing here"), None);
}

#[test]
fn certificates_near_their_expiry_are_warned_about() {
    let mut i = inputs("laptop");
    i.certificates = vec![
        ("shop".into(), "shop.pem".into(), 90, None),
        ("blog".into(), "blog.pem".into(), 3, None),
        (
            "news".into(),
            "store/news.test.pem".into(),
            2,
            Some("espalier renews it".into()),
        ),
    ];
    let t = crate::testutil::fixture("laptop");
    let f = check(&i, &t, None);
    let certs = status_of(&f, "certificate");
    assert_eq!(certs.len(), 3);
    assert_eq!(certs[0].status, Status::Ok);
    assert_eq!(certs[1].status, Status::Warn);
    assert!(certs[1].found.contains("blog.pem expires in 3 days"));
    assert_eq!(certs[1].advice, "renew it, then espalier reload");
    assert_eq!(certs[2].advice, "espalier renews it");
}

#[test]
fn kernel_tls_is_reported_as_the_kernel_and_the_config_have_it() {
    use crate::os::ktls::{KernelSupport, Offload};
    let t = crate::testutil::fixture("laptop");
    let mut i = inputs("laptop");
    let said = |i: &Inputs, c: Option<&Config>| {
        status_of(&check(i, &t, c), "kernel tls")
            .iter()
            .map(|f| (f.status, f.found.clone(), f.advice.clone()))
            .collect::<Vec<_>>()
    };
    // A fixture: the running kernel is not asked.
    assert!(said(&i, None).is_empty());
    i.ktls = Some(KernelSupport::NONE);
    let none = said(&i, None);
    assert_eq!(none.len(), 1);
    assert_eq!(none[0].0, Status::Info);
    assert!(none[0].2.contains("modprobe tls"), "{none:?}");
    i.ktls = Some(KernelSupport::NONE.with(Offload::ALL[0]));
    // No config, or `ktls` not asked for: the kernel could, the server does not.
    let available = said(&i, None);
    assert_eq!(available[0].0, Status::Info);
    assert!(
        available[0].1.contains("TLS1.3/AES-128-GCM") && available[0].2.contains("bench/ktls.sh")
    );
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        Config::load(&p, &t).unwrap()
    };
    let site = "[[pool]]\nname = \"p\"\n[[site]]\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n";
    let mut auto = write("auto.toml", &format!("[server]\nktls = \"auto\"\n{site}"));
    assert!(
        said(&i, Some(&auto)).is_empty(),
        "nothing said without an https site"
    );
    std::sync::Arc::make_mut(&mut auto.sites[0]).tls = Some(crate::config::TlsFiles {
        cert: "shop.pem".into(),
        key: "shop.key".into(),
        ocsp: None,
        not_after: 0,
        fingerprint: 0,
    });
    let on = said(&i, Some(&auto));
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].0, Status::Ok);
    assert!(on[0].1.contains("256 KiB"), "{on:?}");
    auto.server.ktls = false;
    assert_eq!(said(&i, Some(&auto))[0].0, Status::Info);
}

#[test]
fn the_io_path_is_said_with_why() {
    let t = crate::testutil::fixture("laptop");
    let mut i = inputs("laptop");
    let said = |i: &Inputs, c: Option<&Config>| {
        status_of(&check(i, &t, c), "io path")
            .iter()
            .map(|f| (f.status, f.found.clone(), f.advice.clone()))
            .collect::<Vec<_>>()
    };
    // A fixture: the running kernel is not asked.
    assert!(said(&i, None).is_empty());
    i.io_uring = Some((Ok("kernel 6.18: multishot receive".into()), None));
    let on = said(&i, None);
    assert_eq!(on.len(), 1);
    assert_eq!(on[0].0, Status::Ok);
    assert_eq!(
        on[0].1,
        "connections' I/O: io_uring (kernel 6.18: multishot receive)"
    );
    // The environment chose epoll where io_uring would do: said, with how to change it.
    i.io_uring = Some((Ok("kernel 6.18".into()), Some("epoll".into())));
    let chosen = said(&i, None);
    assert_eq!(chosen[0].0, Status::Info);
    assert!(chosen[0]
        .1
        .contains("epoll (ESPALIER_IO=epoll), though io_uring is usable"));
    // Refused by the kernel: epoll, and what io_uring would need.
    i.io_uring = Some((Err("io_uring is disabled".into()), None));
    let refused = said(&i, None);
    assert_eq!(refused[0].0, Status::Info);
    assert_eq!(
        refused[0].1,
        "connections' I/O: epoll (io_uring is disabled)"
    );
    assert!(refused[0].2.contains("seccomp"));
    // Asked for by the config and refused: a warning (serve would not start).
    let mut c = Config::builtin("127.0.0.1:8080".parse().unwrap(), None);
    c.server.io = crate::config::IoChoice::Uring;
    let warned = said(&i, Some(&c));
    assert_eq!(warned[0].0, Status::Warn);
    assert!(warned[0]
        .1
        .contains("[server] io = \"uring\", but io_uring is disabled"));
}
