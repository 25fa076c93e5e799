//! Upstreams and pools spoken to in HTTP/2 (`protocol = "http2"`): real gRPC servers
//! (Debian's python3-grpcio, tests/apps/grpc_backend.py) called through espalier by a real
//! gRPC client (tests/apps/grpc_client.py) over h2c and TLS — unary, an error's status and
//! message, a bidirectional stream in lockstep, trailers — to cleartext and TLS servers and to
//! a gRPC app in a pool; and a Node HTTP/2 server reached by HTTP/1.1 clients, checked in
//! HTTP/2.

use crate::common::backends::*;
use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn app(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/apps")
        .join(name)
}

/// A gRPC server on `addr` answering as `name` (over TLS with `tls`: its cert and key).
fn grpc_server(addr: SocketAddr, name: &str, tls: Option<(&Path, &Path)>) -> Stopped {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(app("grpc_backend.py"))
        .args([addr.to_string().as_str(), name]);
    if let Some((cert, key)) = tls {
        cmd.arg(cert).arg(key);
    }
    Stopped::listening(cmd.stdout(Stdio::null()).stderr(Stdio::null()), addr)
}

/// What tests/apps/grpc_client.py got from `addr` (through TLS trusting `tls`'s root for its
/// name), bounded by the client's own deadlines and a `timeout` around it.
fn grpc_call(addr: SocketAddr, tls: Option<(&Path, &str)>) -> serde_json::Value {
    grpc_client(addr, tls, &[])
}

fn grpc_client(addr: SocketAddr, tls: Option<(&Path, &str)>, more: &[&str]) -> serde_json::Value {
    let mut cmd = Command::new("timeout");
    cmd.args(["120", "/usr/bin/python3"])
        .arg(app("grpc_client.py"))
        .arg(addr.to_string())
        .args(more);
    if let Some((root, name)) = tls {
        cmd.arg("--tls").arg(root).arg(name);
    }
    let out = cmd.output().expect("run the gRPC client");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        serde_json::json!({
            "failed": String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("").to_string()
        })
    })
}

fn need_grpc() {
    need_tools(
        "python3:python3 -:python3-grpcio openssl:openssl",
        "python3, Debian's python3-grpcio and openssl",
    );
}

/// Asserts the whole conversation went through, served by one of `names`.
fn assert_conversation(got: &serde_json::Value, names: &[&str], log: impl Fn() -> String) {
    assert_eq!(got["unary"], "echo:hello", "{got}\n{}", log());
    let by = got["trailers"]["x-served-by"].as_str().unwrap_or_default();
    assert!(names.contains(&by), "{got}");
    assert_eq!(
        got["error"],
        serde_json::json!(["FAILED_PRECONDITION", "asked to fail: fail-now"]),
        "{got}"
    );
    assert_eq!(
        got["bidi"],
        serde_json::json!(["re:m0", "re:m1", "re:m2"]),
        "{got}"
    );
}

#[test]
fn grpc_calls_pass_through_a_group_in_http2_over_h2c_and_tls() {
    need_grpc();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::common::tls::openssl_cert(d, "front", "rpc.test");
    let a = SocketAddr::from(([127, 0, 0, 2], free_port()));
    let b = SocketAddr::from(([127, 0, 0, 3], free_port()));
    let (_a, _b) = (grpc_server(a, "a", None), grpc_server(b, "b", None));
    let (h2c, https, small) = (free_port(), free_port(), free_port());
    let config = format!(
        "[[upstream]]\nname = \"grpc\"\nservers = [\"{a}\", \"{b}\"]\nprotocol = \"http2\"\nbalance = \"round_robin\"\n\
         [[site]]\nname = \"rpc\"\nbindings = [\"http://127.0.0.1:{h2c}\", \"https://127.0.0.1:{https}\"]\n\
         tls = {{ cert = \"front.pem\", key = \"front.key\" }}\n[[site.app]]\npath = \"/\"\nupstream = \"grpc\"\n\
         [[site]]\nname = \"small\"\nbindings = [\"http://127.0.0.1:{small}\"]\nmax_body_size = \"16k\"\n\
         [[site.app]]\npath = \"/\"\nupstream = \"grpc\"\n"
    );
    let server = Server::with_config(d, &config);
    let cleartext = SocketAddr::from(([127, 0, 0, 1], h2c));
    let got = grpc_call(cleartext, None);
    assert_conversation(&got, &["a", "b"], || server.log_text());
    let over_tls = SocketAddr::from(([127, 0, 0, 1], https));
    let got = grpc_call(over_tls, Some((&d.join("front.pem"), "rpc.test")));
    assert_conversation(&got, &["a", "b"], || server.log_text());
    // Both servers took calls: the group balances streams as it does requests.
    let by: Vec<String> = (0..4)
        .map(|_| grpc_call(cleartext, None)["trailers"]["x-served-by"].to_string())
        .collect();
    assert!(
        by.iter().any(|s| s.contains('a')) && by.iter().any(|s| s.contains('b')),
        "{by:?}"
    );
    // A stream is a body: past its site's max_body_size (16 KiB) it is cut, a call of 64 KiB
    // refused before the server answers, a stream of 1 KiB messages once it passes the bound.
    let small = SocketAddr::from(([127, 0, 0, 1], small));
    let got = grpc_client(small, None, &["--big", "65536"]);
    assert!(got["unary"][1].to_string().contains("status: 413"), "{got}");
    assert_eq!(got["stream"][0], "INTERNAL", "{got}");
    let got = grpc_client(small, None, &["--big", "8192"]);
    assert_eq!(
        got,
        serde_json::json!({"unary": "answered", "stream": "answered"})
    );
}

#[test]
fn a_grpc_group_is_checked_by_the_grpc_health_protocol() {
    need_grpc();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = SocketAddr::from(([127, 0, 0, 2], free_port()));
    let b = SocketAddr::from(([127, 0, 0, 3], free_port()));
    let (_a, _b) = (grpc_server(a, "a", None), grpc_server(b, "b", None));
    let h2c = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = |service: &str| {
        format!(
            "[[upstream]]\nname = \"grpc\"\nservers = [\"{a}\", \"{b}\"]\nprotocol = \"http2\"\n\
             [upstream.health]\ngrpc_service = \"{service}\"\ninterval = \"200ms\"\nfall = 2\n\
             [[site]]\nname = \"rpc\"\nbindings = [\"http://{h2c}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"grpc\"\n"
        )
    };
    let server = Server::with_config(d, &config("test.Echo"));
    let states = |s: &Server| -> Vec<String> {
        (s.status().upstreams[0].servers.iter())
            .map(|x| x.state.clone())
            .collect()
    };
    server.wait_until("both checked up", Duration::from_secs(20), |s| {
        states(s) == ["up", "up"]
    });
    assert_conversation(&grpc_call(h2c, None), &["a", "b"], || server.log_text());
    // A service the servers say is NOT_SERVING takes them down, with the cause; every
    // server out, calls still go to them rather than to none.
    reload(&server, d, &config("sick"));
    server.wait_until("both checked down", Duration::from_secs(20), |s| {
        states(s) == ["down", "down"]
    });
    server.wait_for_log(
        "the gRPC health check of service \"sick\" failed (answered NOT_SERVING)",
        Duration::from_secs(10),
    );
    assert_conversation(&grpc_call(h2c, None), &["a", "b"], || server.log_text());
    server.wait_for_log(
        "every server of upstream `grpc` is out",
        Duration::from_secs(10),
    );
    // A service they do not know is a failed call: its grpc-status is said.
    reload(&server, d, &config("nobody"));
    server.wait_until("the call's status shown", Duration::from_secs(20), |s| {
        let last = &s.status().upstreams[0].servers[0].last_failure;
        last.as_deref() == Some("answered grpc-status 5")
    });
    // Back to the service they serve: up again.
    reload(&server, d, &config("test.Echo"));
    server.wait_until("both up again", Duration::from_secs(20), |s| {
        states(s) == ["up", "up"]
    });
}

#[test]
fn grpc_reaches_tls_servers_by_alpn_and_a_grpc_app_in_a_pool() {
    need_grpc();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    crate::common::tls::openssl_cert(d, "backend", "backend.test");
    crate::common::tls::openssl_cert(d, "stranger", "backend.test");
    let secure = SocketAddr::from(([127, 0, 0, 2], free_port()));
    let (cert, key) = (d.join("backend.pem"), d.join("backend.key"));
    let _secure = grpc_server(secure, "secure", Some((&cert, &key)));
    let (trusted, strange) = (free_port(), free_port());
    let config = format!(
        "[[upstream]]\nname = \"trusted\"\nservers = [\"https://{secure}\"]\nprotocol = \"http2\"\n\
         [upstream.tls]\nca = \"backend.pem\"\nserver_name = \"backend.test\"\n\
         [[upstream]]\nname = \"strange\"\nservers = [\"https://{secure}\"]\nprotocol = \"http2\"\n\
         [upstream.tls]\nca = \"stranger.pem\"\nserver_name = \"backend.test\"\n\
         [[pool]]\nname = \"rpc\"\nprocesses = 1\ncommand = [\"/usr/bin/python3\", \"{script}\", \"127.0.0.1:{{port}}\", \"pool\"]\nprotocol = \"http2\"\n\
         [[site]]\nname = \"trusted\"\nbindings = [\"http://127.0.0.1:{trusted}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"trusted\"\n\
         [[site]]\nname = \"strange\"\nbindings = [\"http://127.0.0.1:{strange}\"]\n[[site.app]]\npath = \"/\"\nupstream = \"strange\"\n",
        script = app("grpc_backend.py").display(),
    );
    let pooled = free_port();
    let config = format!(
        "{config}[[site]]\nname = \"pooled\"\nbindings = [\"http://127.0.0.1:{pooled}\"]\n[[site.app]]\npath = \"/\"\npool = \"rpc\"\n"
    );
    let server = Server::with_config(d, &config);
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    assert_conversation(&grpc_call(at(trusted), None), &["secure"], || {
        server.log_text()
    });
    assert_conversation(&grpc_call(at(pooled), None), &["pool"], || {
        server.log_text()
    });
    // Another authority's certificate: the call fails as unavailable (a 502), and the log
    // says why.
    let got = grpc_call(at(strange), None);
    assert_eq!(got["failed"][0], "UNAVAILABLE", "{got}");
    assert!(got["failed"][1].to_string().contains("502"), "{got}");
    let log = server.wait_for_log(
        "TLS handshake failed: invalid peer certificate",
        Duration::from_secs(10),
    );
    assert!(log.contains("upstream `strange`"), "{log}");
}

/// Everything a connection sends until it closes, after `request`.
fn exchange(addr: SocketAddr, request: &str) -> String {
    use std::io::Read;
    let mut c = Conn::open(addr);
    c.send(request.as_bytes());
    let mut all = Vec::new();
    let _ = c.stream.read_to_end(&mut all);
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn an_http2_server_answers_http_1_1_clients_and_is_checked_in_http2() {
    need_tools(
        "node:nodejs python3:python3 openssl:openssl",
        "node, python3 and openssl",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let port = free_port();
    let backend = SocketAddr::from(([127, 0, 0, 1], port));
    let _node = Stopped::listening(
        Command::new("node")
            .arg(app("h2_backend.js"))
            .args(["127.0.0.1", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        backend,
    );
    // A TLS server that speaks HTTP/1.1 only: it does not agree to h2 by ALPN.
    crate::common::tls::openssl_cert(d, "backend", "backend.test");
    let (cert, key) = (d.join("backend.pem"), d.join("backend.key"));
    let http1_only = Backend::start_with(d, "127.0.0.3", "old", &[&cert, &key]);
    let front = free_port();
    let config = format!(
        "[server.limits]\nmax_headers = 256\n\
         [[upstream]]\nname = \"h2\"\nservers = [\"{backend}\"]\nprotocol = \"http2\"\n\
         [upstream.health]\npath = \"/healthz\"\ninterval = \"300ms\"\nfall = 1\n\
         [[upstream]]\nname = \"old\"\nservers = [\"https://{}\"]\nprotocol = \"http2\"\n\
         [upstream.tls]\nca = \"backend.pem\"\nserver_name = \"backend.test\"\n\
         [[site]]\nname = \"front\"\nbindings = [\"http://127.0.0.1:{front}\"]\n\
         headers = {{ X-Front = \"espalier\" }}\n\
         [[site.app]]\npath = \"/old/\"\nupstream = \"old\"\n\
         [[site.app]]\npath = \"/guarded/\"\nupstream = \"h2\"\n\
         auth = {{ request = \"/verify\", upstream = \"h2\" }}\n\
         [[site.app]]\npath = \"/\"\nupstream = \"h2\"\n",
        http1_only.addr
    );
    let server = Server::with_config(d, &config);
    let addr = SocketAddr::from(([127, 0, 0, 1], front));
    server.wait_until("the HTTP/2 check passing", Duration::from_secs(20), |s| {
        s.status()
            .upstreams
            .iter()
            .any(|u| u.name == "h2" && u.servers[0].state == "up")
    });
    // An HTTP/1.1 GET: the answer chunked, its trailer passed on, the site's header added.
    let got = exchange(
        addr,
        "GET /x HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("x-protocol: h2\r\n"), "{got}");
    assert!(got.contains("X-Front: espalier\r\n"), "{got}");
    assert!(got.contains("h2 GET site.test /x body= te=-\n"), "{got}");
    assert!(got.contains("\r\n0\r\nx-trailer: yes\r\n\r\n"), "{got}");
    // A request at the field limit (256, the most `max_headers` takes) still goes: the head
    // read again for HTTP/2 has room for the fields espalier adds to it.
    let many: String = (1..255).map(|k| format!("X-F{k}: {k}\r\n")).collect();
    let got = exchange(
        addr,
        &format!("GET /many HTTP/1.1\r\nHost: a\r\n{many}Connection: close\r\n\r\n"),
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    // A body, by length and in chunks; an answer with a length keeps it.
    let got = exchange(
        addr,
        "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    assert!(got.contains("h2 POST a /p body=hello"), "{got}");
    let got = exchange(
        addr,
        "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    assert!(got.contains("h2 POST a /c body=abcde"), "{got}");
    let got = exchange(
        addr,
        "GET /len HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    );
    assert!(got.contains("Content-Length: 5\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nfixed"), "{got}");
    // A verifier spoken to in HTTP/2 (the same server, which lets everyone in): its
    // question goes by its head's parts as the forwarder's does; a failed one is a 503.
    let got = exchange(
        addr,
        "GET /guarded/x HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n",
    );
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("h2 GET site.test /guarded/x body="), "{got}");
    // A WebSocket cannot go to a server spoken to in HTTP/2: 502, and the log says why.
    let got = exchange(
        addr,
        "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    );
    assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    server.wait_for_log(
        "give that path a group with protocol = \"http1\"",
        Duration::from_secs(10),
    );
    // A TLS server that does not speak HTTP/2: 502, and the log says so.
    assert_eq!(get(addr, "/old/x", "").status, 502);
    server.wait_for_log("did not agree to HTTP/2", Duration::from_secs(10));
    // The check is in HTTP/2 too: the server turning sick takes it out.
    assert_eq!(get(addr, "/sick", "").status, 200);
    server.wait_until("the HTTP/2 check failing", Duration::from_secs(20), |s| {
        s.status()
            .upstreams
            .iter()
            .any(|u| u.name == "h2" && u.servers[0].state == "down")
    });
}

#[test]
fn check_refuses_http2_where_it_cannot_act() {
    let dir = tempfile::tempdir().unwrap();
    let check = |config: &str| check_refuses(dir.path(), config);
    let site = "[[site]]\nbindings = [\"http://127.0.0.1:1\"]\nroot = \".\"\n[[site.app]]\npath = \"/\"\npool = \"p\"\n";
    let err = check(&format!("[[pool]]\nname = \"p\"\ncommand = [\"/bin/true\"]\nprotocol = \"http2\"\nhealth = \"/healthz\"\n{site}"));
    assert!(
        err.contains("health") && err.contains("protocol = \"http2\""),
        "{err}"
    );
    let err = check(&format!("[[pool]]\nname = \"p\"\ncommand = [\"/bin/true\"]\ntransport = \"fastcgi\"\nprotocol = \"http2\"\n{site}"));
    assert!(
        err.contains("applies only to transport = \"proxy\""),
        "{err}"
    );
    // A gRPC check needs HTTP/2, and none of an HTTP check's keys.
    let grpc = |protocol: &str, more: &str| {
        format!("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9\"]\n{protocol}[upstream.health]\ngrpc_service = \"\"\n{more}[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\n")
    };
    let err = check(&grpc("", ""));
    assert!(
        err.contains("grpc_service") && err.contains("add protocol = \"http2\""),
        "{err}"
    );
    let err = check(&grpc("protocol = \"http2\"\n", "path = \"/\"\n"));
    assert!(
        err.contains("health.path") && err.contains("remove path"),
        "{err}"
    );
    let err = check("[[upstream]]\nname = \"api\"\nservers = [\"127.0.0.1:9\"]\nprotocol = \"h3\"\n[[site]]\nbindings = [\"http://127.0.0.1:1\"]\n[[site.app]]\nupstream = \"api\"\n");
    assert!(
        err.contains("`h3` is not one of \"http1\", \"http2\""),
        "{err}"
    );
}
