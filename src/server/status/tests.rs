use super::*;

#[test]
fn status_reads_back_what_it_writes_and_renders_metrics() {
    let s = Status {
        addresses: Vec::new(),
        dispatcher: None,
        upstreams: Vec::new(),
        certificates: vec![CertificateStatus {
            name: "a.test".into(),
            not_after: Some(4_000_000_000),
            renew_at: Some(3_000_000_000),
            state: "valid".into(),
            last_error: None,
        }],
        pools_total: 1,
        pools_matched: 1,
        counts: StateCounts {
            running: 1,
            ..StateCounts::default()
        },
        page: 0,
        per_page: 0,
        config: None,
        cluster: None,
        pools: vec![PoolStatus {
            name: "web".into(),
            state: PoolState::Running,
            cpu_limit: None,
            workers: vec![WorkerStatus {
                role: Role::App,
                remote_forwards: 0,
                endpoint: Some("http://127.0.0.1:3000".into()),
                index: 0,
                pid: Some(42),
                node: Some(0),
                cpus: vec![0, 1],
                state: WorkerState::Running,
                started_unix: Some(1),
                uptime_s: Some(2.0),
                requests: 7,
                connection_panics: 0,
                resident_bytes: Some(4096),
                recycles: 1,
                restarts: 2,
                last_exit: None,
                draining: vec![],
                widened_to: vec![],
                affinity: "hard".into(),
                memory_policy: "bind:0".into(),
                connections: 0,
                accepted: 0,
                steered: 0,
                queue: Default::default(),
                ticket_keys: 2,
                cache: Default::default(),
                meters: Vec::new(),
                caches: Vec::new(),
            }],
            ..Default::default()
        }],
    };
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"state\":\"running\""));
    assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), s);
    let m = s.metrics();
    assert!(m.contains("espalier_pool_running{pool=\"web\"} 1"));
    assert!(m.contains("espalier_worker_requests_total{pool=\"web\",index=\"0\",role=\"app\"} 7"));
    assert!(m.contains("espalier_worker_restarts_total{pool=\"web\",index=\"0\",role=\"app\"} 2"));
    assert!(m.contains("espalier_certificate_expiry_seconds{name=\"a.test\"} "));
    assert!(m.contains("espalier_certificate_order_failing{name=\"a.test\"} 0"));
    assert_eq!(m.matches("# TYPE").count(), 3 + WORKER_METRICS.len());
}
