//! Tracing (`[server.tracing]`): a real OTLP/HTTP receiver the test runs —
//! tests/apps/otlp_receiver.py, decoding the protobuf with `opentelemetry-proto` from PyPI —
//! gets a server span per request and a client span per hop to an app, with HTTP's semantic
//! attributes and the right parents; an incoming `traceparent` is continued (or not, when
//! untrusted), the app gets the hop's `traceparent`, sampling follows the setting, the JSON
//! access log carries the trace id, and with the receiver down requests are answered and the
//! dropped spans counted.

use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/otlp_receiver.py")
}

/// opentelemetry-proto (and protobuf) from PyPI, or `None` (the test skips).
fn proto_library() -> Option<PathBuf> {
    python_package_at("opentelemetry-proto", "opentelemetry/proto", "otlp-py")
}

/// The receiver on `addr`, its spans in `dir`/spans.
fn receiver(lib: &Path, dir: &Path, addr: SocketAddr) -> Stopped {
    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .args(["collector", &addr.port().to_string()])
        .arg(dir.join("spans"))
        .env("PYTHONPATH", lib);
    Stopped::listening(&mut cmd, addr)
}

fn received(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("spans"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The spans of trace `id`, once `n` of them came.
fn trace_of(dir: &Path, id: &str, n: usize) -> Vec<serde_json::Value> {
    let mut got = Vec::new();
    wait_for(
        &format!("{n} spans of trace {id}"),
        Duration::from_secs(30),
        || {
            got = received(dir)
                .into_iter()
                .filter(|s| s["trace_id"] == id)
                .collect();
            got.len() >= n
        },
    );
    got
}

/// A server with a pool app at `/` and files at `/files/`, `tracing` its
/// `[server.tracing]`, and a JSON access log.
fn server(dir: &Path, tracing: &str) -> (Server, SocketAddr) {
    std::fs::create_dir_all(dir.join("www/files")).unwrap();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(dir.join("www/files/a.txt"), "a file\n").unwrap();
    let port = free_port();
    let config = format!(
        r#"
[server.tracing]
{tracing}

[[pool]]
name = "app"
processes = 1
command = ["python3", "{app}", "app"]

[[site]]
name = "shop"
bindings = ["http://127.0.0.1:{port}"]
root = "www"
access_log = {{ path = "logs/shop.log", format = "json" }}

[[site.app]]
path = "/"
pool = "app"

[[site.app]]
path = "/files/"
handler = "static"
"#,
        app = script().display()
    );
    let server = Server::with_config(dir, &config);
    (server, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn get(addr: SocketAddr, path: &str, fields: &str) -> Response {
    let mut c = Conn::open(addr);
    c.send(
        format!("GET {path} HTTP/1.1\r\nHost: shop.test\r\n{fields}Connection: close\r\n\r\n")
            .as_bytes(),
    );
    c.read_response(false).expect("an answer")
}

fn text(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The `traceparent` the app was sent, as (trace id, parent span id, flags).
fn sent(r: &Response) -> (String, String, String) {
    let body = text(r);
    let tp = body
        .split_whitespace()
        .next()
        .unwrap()
        .trim_start_matches("traceparent=");
    let parts: Vec<&str> = tp.split('-').collect();
    assert_eq!(parts.len(), 4, "{body}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

#[test]
fn a_request_and_its_hop_are_spans_of_one_trace() {
    need_tools("python3:python3 curl:curl", "python3 and curl");
    let Some(lib) = proto_library() else {
        return skip(
            "opentelemetry-proto cannot be installed from PyPI (python3 -m pip install failed)",
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let collector = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _receiver = receiver(&lib, d, collector);
    let (server, addr) = server(d, &format!("otlp = \"http://{collector}\"\nsample = 1.0"));

    // A new trace: the app is sent the hop's span as its parent, sampled.
    let r = get(addr, "/orders?id=7", "");
    assert_eq!(r.status, 200);
    let (trace, hop, flags) = sent(&r);
    assert_eq!(flags, "01");
    let spans = trace_of(d, &trace, 2);
    let server_span = spans
        .iter()
        .find(|s| s["kind"] == 2)
        .expect("a server span");
    let client_span = spans
        .iter()
        .find(|s| s["kind"] == 3)
        .expect("a client span");
    assert_eq!(server_span["parent"], "", "a root span");
    assert_eq!(server_span["name"], "GET /");
    let a = &server_span["attributes"];
    assert_eq!(a["http.request.method"], "GET");
    assert_eq!(a["url.path"], "/orders");
    assert_eq!(a["url.query"], "id=7");
    assert_eq!(a["http.route"], "/");
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["server.address"], "shop.test");
    assert_eq!(a["network.protocol.name"], "http");
    assert_eq!(a["network.protocol.version"], "1.1");
    assert_eq!(a["client.address"], "127.0.0.1");
    assert_eq!(a["espalier.site"], "shop");
    assert_eq!(a["espalier.pool"], "app");
    assert_eq!(server_span["resource"]["service.name"], "espalier");
    assert_eq!(server_span["path"], "/v1/traces");
    assert_eq!(server_span["content_type"], "application/x-protobuf");
    // The hop: a child of the server span, the span the app's traceparent names.
    assert_eq!(client_span["parent"], server_span["span_id"]);
    assert_eq!(client_span["span_id"], hop);
    let c = &client_span["attributes"];
    assert_eq!(c["server.address"], "127.0.0.1");
    assert!(c["server.port"].as_i64().unwrap() > 0, "{c}");
    assert!(
        client_span["start"].as_u64() >= server_span["start"].as_u64(),
        "{spans:?}"
    );
    assert!(
        client_span["end"].as_u64() <= server_span["end"].as_u64(),
        "{spans:?}"
    );

    // A client's trace is continued: its trace id, its span the parent, its state passed on.
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = get(
        addr,
        "/pay",
        &format!("traceparent: {parent}\r\ntracestate: shop=1\r\n"),
    );
    let (trace, hop, _) = sent(&r);
    assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(text(&r).ends_with("tracestate=shop=1\n"), "{}", text(&r));
    let spans = trace_of(d, &trace, 2);
    let server_span = spans.iter().find(|s| s["kind"] == 2).unwrap();
    assert_eq!(server_span["parent"], "00f067aa0ba902b7");
    assert_eq!(server_span["trace_state"], "shop=1");
    assert!(spans.iter().any(|s| s["span_id"] == hop));

    // Answered here: one span, no hop; over HTTP/2 its protocol says so.
    let out = Command::new("curl")
        .args([
            "-s",
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("http://{addr}/files/a.txt"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    let mut h2 = Vec::new();
    wait_for("the HTTP/2 request's span", Duration::from_secs(30), || {
        h2 = received(d)
            .into_iter()
            .filter(|s| s["attributes"]["url.path"] == "/files/a.txt")
            .collect();
        !h2.is_empty()
    });
    assert_eq!(h2[0]["attributes"]["network.protocol.version"], "2");
    assert_eq!(h2[0]["attributes"]["http.route"], "/files");
    let t = h2[0]["trace_id"].as_str().unwrap().to_string();
    assert_eq!(
        received(d)
            .iter()
            .filter(|s| s["trace_id"] == t.as_str())
            .count(),
        1
    );

    // The JSON access log carries each request's trace id.
    let log = d.join("logs/shop.log");
    wait_for("the access log's lines", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("4bf92f3577b34da6a3ce929d0e0e4736"))
    });
    drop(server);
}

#[test]
fn sampling_and_trust_follow_the_settings() {
    need_tools("python3:python3", "python3");
    let Some(lib) = proto_library() else {
        return skip(
            "opentelemetry-proto cannot be installed from PyPI (python3 -m pip install failed)",
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let collector = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _receiver = receiver(&lib, d, collector);
    let (_server, addr) = server(
        d,
        &format!("otlp = \"http://{collector}\"\nsample = 0\ntrust_incoming = false"),
    );
    // Not sampled: the app still gets a traceparent of a trace of its own, flags 00.
    for _ in 0..20 {
        let (_, _, flags) = sent(&get(addr, "/a", ""));
        assert_eq!(flags, "00");
    }
    // An untrusted parent is replaced, not continued, nor its state passed on.
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = get(
        addr,
        "/b",
        &format!("traceparent: {parent}\r\ntracestate: shop=1\r\n"),
    );
    let (trace, hop, flags) = sent(&r);
    assert_ne!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(hop, "00f067aa0ba902b7");
    assert_eq!(flags, "00");
    assert!(text(&r).ends_with("tracestate=\n"), "{}", text(&r));
    // A sampled request after them all is the only one the receiver gets: none of the
    // unsampled ones came before it. (Sampled by a trusted parent on a server that trusts.)
    let (_other, addr2) = server(
        &d.join("trusting"),
        &format!("otlp = \"http://{collector}\"\nsample = 0"),
    );
    let r = get(addr2, "/c", &format!("traceparent: {parent}\r\n"));
    assert_eq!(sent(&r).0, "4bf92f3577b34da6a3ce929d0e0e4736");
    trace_of(d, "4bf92f3577b34da6a3ce929d0e0e4736", 2);
    let all = received(d);
    assert!(
        all.iter()
            .all(|s| s["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"),
        "{all:?}"
    );
}

#[test]
fn with_the_receiver_down_requests_are_answered_and_drops_counted() {
    need_tools("python3:python3", "python3");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Nothing listens there.
    let collector = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (server, addr) = server(d, &format!("otlp = \"http://{collector}\"\nsample = 1.0"));
    for _ in 0..50 {
        assert_eq!(get(addr, "/a", "").status, 200);
    }
    server.wait_for_log("tracing: the collector at", Duration::from_secs(30));
    server.wait_for_log("spans dropped so far", Duration::from_secs(30));
}

#[test]
fn check_refuses_tracing_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let site = "[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:1\"]\nroot = \".\"\n";
    for (tracing, says) in [
        ("sample = 0.5", "tracing.otlp`: is missing"),
        ("otlp = \"https://127.0.0.1:4318\"", "in the clear"),
        ("otlp = \"http://127.0.0.1\"", "not an address with a port"),
        (
            "otlp = \"http://127.0.0.1:4318\"\nsample = 2",
            "not a share of requests",
        ),
        (
            "otlp = \"http://127.0.0.1:4318\"\nexporter = \"x\"",
            "exporter",
        ),
    ] {
        let err = check_refuses(dir.path(), &format!("[server.tracing]\n{tracing}\n{site}"));
        assert!(err.contains(says), "{tracing}: {err}");
    }
}
