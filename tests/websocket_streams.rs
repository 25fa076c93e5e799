//! WebSocket over HTTP/2 and HTTP/3 (RFC 8441, RFC 9220): a client's extended CONNECT —
//! tests/apps/ws_client.py, on Python's `h2` package and aioquic, both from PyPI — reaches a
//! pool's Node app and an upstream Node server, both speaking HTTP/1.1 Upgrade (RFC 6455):
//! the server offers extended CONNECT in its SETTINGS, messages go both ways, and the close
//! ends the stream in order (END_STREAM, not a reset). The site's steps run on it as on any
//! request (an access list's 403, a limit's 429 on the second), a path that speaks no
//! WebSocket (espalier's own files) answers 501, a server that answers with a page instead of
//! switching gets the client 502, and an idle tunnel is closed after
//! `body_timeout` — over HTTP/2, HTTP/3 and HTTP/1.1 alike.

use crate::common::apps::prepare;
use crate::common::tls::openssl_cert;
use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What one WebSocket got (see tests/apps/ws_client.py).
#[derive(Debug)]
struct Opened {
    settings: u64,
    status: u16,
    echoes: Vec<String>,
    ended: String,
}

/// One WebSocket by tests/apps/ws_client.py over `kind` (h2, h2c, h3) to `port`, sending
/// `messages`; `name` is its `:authority`.
fn websocket(libs: &str, kind: &str, port: u16, (name, path): (&str, &str)) -> Opened {
    run_client(libs, kind, port, (name, path), false)
}

/// One WebSocket to `/ws` that sends nothing once open, waiting for the server to end it.
fn idle_websocket(libs: &str, kind: &str, port: u16) -> Opened {
    run_client(libs, kind, port, ("localhost", "/ws"), true)
}

fn run_client(libs: &str, kind: &str, port: u16, (name, path): (&str, &str), idle: bool) -> Opened {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/ws_client.py");
    let mut command = Command::new("timeout");
    command
        .args(["90", "python3"])
        .arg(script)
        .args([kind, &port.to_string(), path, "hello", "second frame"])
        .env("PYTHONPATH", libs)
        .env("WS_NAME", name);
    if idle {
        command.env("WS_IDLE", "1");
    }
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_else(|_| {
        panic!(
            "ws_client.py {kind} {path}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Opened {
        settings: line["settings"].as_u64().unwrap_or(0),
        status: line["status"].as_u64().unwrap_or(0) as u16,
        echoes: (line["echoes"].as_array().into_iter().flatten())
            .filter_map(|e| e.as_str().map(str::to_string))
            .collect(),
        ended: line["ended"].as_str().unwrap_or_default().to_string(),
    }
}

/// The clients' libraries on one `PYTHONPATH`, installed from PyPI; `None` (the test skips)
/// when pip cannot.
fn client_libraries() -> Option<String> {
    let h2 = python_package("h2", "h2-py")?;
    let h3: PathBuf = crate::http3::aioquic()?;
    Some(format!("{}:{}", h2.display(), h3.display()))
}

/// A folder with the example apps and a certificate for `localhost`, and a config of one
/// pool running the Node app and its site `node` on an http:// and an https:// port (HTTP/3
/// on), with `server` added to `[server]` and `site` to the site: the folder, the http and
/// https ports, and the config.
fn node_site(server: &str, site: &str) -> (tempfile::TempDir, u16, u16, String) {
    let https = free_port();
    let config = format!(
        r#"
[server]
http3 = true
{server}
[[pool]]
name = "node"
processes = 1
command = ["node", "server.js"]
directory = "node"
health = "/healthz"

[[site]]
name = "node"
bindings = ["http://{{listen}}", "https://127.0.0.1:{https}"]
tls = {{ cert = "site.pem", key = "site.key" }}
{site}"#
    );
    let (dir, port, config) = prepare(&config);
    openssl_cert(dir.path(), "site", "localhost");
    (dir, port, https, config)
}

#[test]
fn a_websocket_over_http2_and_http3_reaches_a_pool_app_and_an_upstream() {
    need_tools("node:nodejs openssl:openssl", "node and openssl");
    let Some(libs) = client_libraries() else {
        return skip(
            "h2 and aioquic cannot be installed from PyPI (python3 -m pip install failed)",
        );
    };
    // An upstream server: the same Node app, started here, on its own port.
    let (_upstream, upstream) = crate::common::backends::node_server();
    // And one that knows no WebSocket: it answers the upgrade with a page (200).
    let records = tempfile::tempdir().unwrap();
    let plain_server =
        crate::common::backends::Backend::start(records.path(), "127.0.0.1", "plain");
    let plain = plain_server.addr;
    let extra = format!(
        r#"root = "."
[[site.app]]
pool = "node"
[[site.app]]
path = "/up/"
upstream = "{upstream}"
[[site.app]]
path = "/private/"
pool = "node"
allow = ["127.0.0.2"]
[[site.app]]
path = "/files/"
handler = "static"
[[site.app]]
path = "/plain/"
upstream = "{plain}"

[[site]]
name = "limited"
bindings = ["http://{{listen}}:limited.localhost"]
limit = {{ rate = "1/m" }}
[[site.app]]
pool = "node"
"#
    );
    let (dir, port, https, config) = node_site("", &extra);
    let server = Server::with_config(dir.path(), &config);
    for (kind, port) in [("h2c", port), ("h2", https), ("h3", https)] {
        for path in ["/ws", "/up/ws"] {
            let ws = websocket(&libs, kind, port, ("localhost", path));
            assert_eq!(ws.settings, 1, "{kind} {path}: {ws:?}");
            assert_eq!(
                ws.status,
                200,
                "{kind} {path}: {ws:?}\n{}",
                server.log_text()
            );
            assert_eq!(ws.echoes, ["hello", "second frame"], "{kind} {path}");
            assert_eq!(ws.ended, "end", "{kind} {path}: {ws:?}");
        }
        // The site's steps run on it: the path's allow list keeps 127.0.0.1 out.
        let denied = websocket(&libs, kind, port, ("localhost", "/private/ws"));
        assert_eq!((denied.status, denied.echoes.len()), (403, 0), "{kind}");
        // Files speak no WebSocket.
        let files = websocket(&libs, kind, port, ("localhost", "/files/ws"));
        assert_eq!((files.status, files.echoes.len()), (501, 0), "{kind}");
        // A server that answers with a page instead of switching: 502, not a 200 the client
        // would take for an open tunnel.
        let page = websocket(&libs, kind, port, ("localhost", "/plain/ws"));
        assert_eq!(
            (page.status, page.echoes.len()),
            (502, 0),
            "{kind}: {page:?}"
        );
    }
    // One rate-limit token a WebSocket: the first is opened, the second limited.
    let first = websocket(&libs, "h2c", port, ("limited.localhost", "/ws"));
    assert_eq!(first.status, 200, "{first:?}");
    let second = websocket(&libs, "h2c", port, ("limited.localhost", "/ws"));
    assert_eq!(second.status, 429, "{second:?}");
}

/// A tunnel that carries nothing is closed once neither side has sent for `body_timeout`
/// (the app's silence bounds it, as nginx's `proxy_read_timeout` does): an idle client
/// holds no stream and no app connection for ever.
#[test]
fn an_idle_websocket_is_closed_after_body_timeout() {
    need_tools("node:nodejs openssl:openssl", "node and openssl");
    let Some(libs) = client_libraries() else {
        return skip(
            "h2 and aioquic cannot be installed from PyPI (python3 -m pip install failed)",
        );
    };
    let site = "[[site.app]]\npool = \"node\"\n";
    let (dir, port, https, config) = node_site("[server.limits]\nbody_timeout = \"2s\"\n", site);
    let _server = Server::with_config(dir.path(), &config);
    for (kind, port) in [("h2c", port), ("h3", https)] {
        let ws = idle_websocket(&libs, kind, port);
        assert_eq!(ws.status, 200, "{kind}: {ws:?}");
        assert_ne!(ws.ended, "open", "{kind}: the idle tunnel was never closed");
    }
    // Over HTTP/1.1 too: after the 101, the connection is closed (60 s at most).
    let mut c = crate::common::Conn::open(SocketAddr::from(([127, 0, 0, 1], port)));
    c.send(b"GET /ws HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    let switched = c.read_response(true).expect("an answer");
    assert_eq!(switched.status, 101);
    c.stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut rest = [0u8; 64];
    let read = std::io::Read::read(&mut c.stream, &mut rest);
    assert!(
        matches!(read, Ok(0)),
        "the idle HTTP/1.1 tunnel was not closed: {read:?}"
    );
}
