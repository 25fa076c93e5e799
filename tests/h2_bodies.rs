//! HTTP/2 request bodies on their way to a proxied application (a real Python app, spoken
//! to over h2c by the h2 crate's client): streamed as they arrive, not read whole first —
//! the app sees an upload's start before the client has sent its end — framed by the
//! client's declared length or else chunked, bounded by `max_body_size` (413, declared or
//! not), `Expect: 100-continue` answered with an informational 100 (curl), and a stream the
//! client resets mid-upload leaves the connection serving.

use crate::common;

use bytes::Bytes;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

const APP: &str = "tests/apps/upload_app.py";
/// An upload's size: several times the pipe to the forwarder and the stream's window.
const UPLOAD: usize = 600_000;
/// Bytes sent before the client waits for the app to have seen them.
const FIRST: usize = 100_000;

fn config(port: u16, marks: &Path) -> String {
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join(APP);
    format!(
        r#"
[[pool]]
name = "uploads"
command = ["python3", "{app}"]
environment = {{ MARKS = "{marks}" }}
health = "/healthz"
[[site]]
bindings = ["http://127.0.0.1:{port}"]
[[site.app]]
pool = "uploads"
"#,
        app = app.display(),
        marks = marks.display(),
    )
}

/// The upload's bytes, and their SHA-256 as `sha256sum` gives it.
fn upload(dir: &Path) -> (Vec<u8>, String) {
    let body: Vec<u8> = (0..UPLOAD as u32).map(|i| (i * 13 % 251) as u8).collect();
    let path = dir.join("upload.bin");
    std::fs::write(&path, &body).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(&path)
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&out.stdout);
    (body, sum.split_whitespace().next().unwrap().to_string())
}

/// Whether `path` appears within `within`.
async fn appears(path: &Path, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A response's status and whole body.
async fn answer(response: h2::client::ResponseFuture) -> (u16, String) {
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let mut recv = response.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[test]
fn http2_uploads_stream_to_the_app_as_they_arrive() {
    need_tools("python3:python3 curl:curl", "python3 and curl");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let marks = d.join("marks");
    std::fs::create_dir(&marks).unwrap();
    let port = free_port();
    let server = Server::with_config(d, &config(port, &marks));
    let (body, sum) = upload(d);
    block_on(async {
        let mut send = h2c(port).await;

        // With a declared length and without one: the first part reaches the app before
        // the rest is sent (read whole first, it never would, and the wait would fail).
        for (name, declared) in [("declared", true), ("undeclared", false)] {
            let mut req = http::Request::post(format!("http://127.0.0.1:{port}/{name}"))
                .header("x-mark-after", FIRST.to_string());
            if declared {
                req = req.header("content-length", UPLOAD.to_string());
            }
            send = send.ready().await.unwrap();
            let (response, mut out) = send.send_request(req.body(()).unwrap(), false).unwrap();
            out.send_data(Bytes::copy_from_slice(&body[..FIRST]), false)
                .unwrap();
            assert!(
                appears(&marks.join(name), Duration::from_secs(15)).await,
                "{name}: the app had not seen the body's first {FIRST} bytes before the rest was sent"
            );
            out.send_data(Bytes::copy_from_slice(&body[FIRST..]), true)
                .unwrap();
            let framing = if declared { "length" } else { "chunked" };
            assert_eq!(
                answer(response).await,
                (
                    200,
                    format!("len={UPLOAD} sha256={sum} framing={framing}\n")
                ),
                "{name}"
            );
        }

        // A declared length beyond max_body_size (1 MiB by default) is refused.
        let req = http::Request::post(format!("http://127.0.0.1:{port}/big"))
            .header("content-length", (2 << 20).to_string())
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (response, mut out) = send.send_request(req, false).unwrap();
        out.send_data(Bytes::copy_from_slice(&body[..FIRST]), false)
            .unwrap();
        assert_eq!(answer(response).await.0, 413);
        // So is one undeclared that grows beyond it.
        let req = http::Request::post(format!("http://127.0.0.1:{port}/big"))
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (response, mut out) = send.send_request(req, false).unwrap();
        let big: Vec<u8> = body.iter().chain(&body).chain(&body).copied().collect();
        out.send_data(Bytes::from(big), true).unwrap();
        assert_eq!(answer(response).await.0, 413);

        // An app that answers and closes before reading the body. The forwarder sends the
        // body before reading an answer, as for HTTP/1.1: the app's answer when the whole
        // body fitted in the sockets' buffers before the close, else 502. Either arrives
        // whole, the rest of the body taken and dropped.
        let req = http::Request::post(format!("http://127.0.0.1:{port}/early"))
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (response, mut out) = send.send_request(req, false).unwrap();
        out.send_data(Bytes::copy_from_slice(&body), true).unwrap();
        let early = answer(response).await;
        assert!(
            early == (200, "early\n".into()) || early == (502, "502 Bad Gateway\n".into()),
            "{early:?}"
        );

        // A stream reset mid-upload: the connection goes on serving.
        let req = http::Request::post(format!("http://127.0.0.1:{port}/reset"))
            .header("x-mark-after", FIRST.to_string())
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (_, mut out) = send.send_request(req, false).unwrap();
        out.send_data(Bytes::copy_from_slice(&body[..FIRST]), false)
            .unwrap();
        assert!(
            appears(&marks.join("reset"), Duration::from_secs(15)).await,
            "the app never saw the reset upload's start: {}",
            server.log_text()
        );
        out.send_reset(h2::Reason::CANCEL);
        let req = http::Request::get(format!("http://127.0.0.1:{port}/after"))
            .body(())
            .unwrap();
        send = send.ready().await.unwrap();
        let (response, _) = send.send_request(req, true).unwrap();
        assert_eq!(answer(response).await, (200, "ok\n".to_string()));
    });

    // A client that waits for 100 Continue gets it, as an informational response, and
    // sends its body after it (curl waits up to a second, then sends anyway: the 100 is
    // seen in its trace or not at all).
    let out = std::process::Command::new("curl")
        .args(["-sS", "-v", "--max-time", "10", "--http2-prior-knowledge"])
        .args(["-H", "Expect: 100-continue", "--data-binary", "@upload.bin"])
        .arg(format!("http://127.0.0.1:{port}/continued"))
        .current_dir(d)
        .output()
        .unwrap();
    let trace = String::from_utf8_lossy(&out.stderr);
    assert!(trace.contains("< HTTP/2 100"), "{trace}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("len={UPLOAD} sha256={sum} framing=length\n")
    );

    // An upload over max_body_size (1 MiB by default), declared and not: curl reads the
    // 413 and exits cleanly — the rest of the body is taken and dropped, not the stream
    // reset (curl said "(92) Stream error in the HTTP/2 framing layer").
    std::fs::write(d.join("big.bin"), vec![b'x'; 3 << 20]).unwrap();
    for chunked in [false, true] {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sS", "--max-time", "20", "--http2-prior-knowledge"])
            .args(["-o", "/dev/null", "-w", "%{http_code}"])
            .args(["--data-binary", "@big.bin"]);
        if chunked {
            curl.args(["-H", "Transfer-Encoding: chunked"]);
        }
        let out = curl
            .arg(format!("http://127.0.0.1:{port}/big"))
            .current_dir(d)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout == b"413",
            "chunked {chunked}: {:?} {} {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
