//! Compression (issue #28, item 3): gzip, brotli and zstd negotiated from `Accept-Encoding`,
//! on static files (made once, or a precompressed file beside) and on a proxied app's answers
//! as they stream — each coding decoded by Python's own decoders (Debian's python3-brotli
//! and python3-zstandard) byte for byte and by `curl --compressed`; `Vary`, distinct ETags,
//! 304, `Range` and `HEAD` right; what must not be compressed is not.

use crate::common;

use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

/// `data` decoded from `coding` by Debian's Python (gzip from its standard library).
fn python_decode(coding: &str, data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let module = match coding {
        "gzip" => "import gzip as m; d = m.decompress",
        "br" => "import brotli as m; d = m.decompress",
        "zstd" => "import zstandard as m; d = lambda b: m.ZstdDecompressor().decompressobj().decompress(b)",
        other => panic!("no decoder for {other}"),
    };
    let mut child = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!("import sys; {module}; sys.stdout.buffer.write(d(sys.stdin.buffer.read()))"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{coding}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `curl --compressed` of `url`: the decoded body and the response's fields.
fn curl_compressed(url: &str) -> (Vec<u8>, String) {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--compressed",
            "-D",
            "-",
            "--max-time",
            "10",
            "-o",
            "/dev/stderr",
            url,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    (
        out.stderr,
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase(),
    )
}

struct Sites {
    _dir: tempfile::TempDir,
    server: Server,
    files: SocketAddr,
    app: SocketAddr,
    page: Vec<u8>,
}

fn sites() -> Sites {
    need_tools(
        "python3:python3 curl:curl -:python3-brotli -:python3-zstandard",
        "python3 with python3-brotli and python3-zstandard, and curl",
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("www")).unwrap();
    let page: Vec<u8> = (0..600)
        .flat_map(|i| format!("<p>paragraph {i} of a page that compresses well</p>\n").into_bytes())
        .collect();
    std::fs::write(d.join("www/page.html"), &page).unwrap();
    std::fs::write(d.join("www/small.html"), "<p>tiny\n").unwrap();
    std::fs::write(d.join("www/photo.png"), &page).unwrap();
    // A precompressed file whose content says it was chosen.
    std::fs::write(d.join("www/notes.txt"), "the original notes\n".repeat(40)).unwrap();
    run_ok(Command::new("/usr/bin/python3").args([
        "-c",
        &format!(
            "import gzip; open('{}', 'wb').write(gzip.compress(b'from the precompressed file\\n' * 40))",
            d.join("www/notes.txt.gz").display()
        ),
    ]));
    let (files, app) = (free_port(), free_port());
    let raw_app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/raw_app.py");
    let config = format!(
        r#"
[[pool]]
name = "files"
[[pool]]
name = "app"
command = ["python3", "{raw_app}"]
[[site]]
name = "files"
bindings = ["http://127.0.0.1:{files}"]
root = "www"
compress = ["zstd", "br", "gzip"]
[[site.app]]
pool = "files"
[[site]]
name = "app"
bindings = ["http://127.0.0.1:{app}"]
compress = ["br", "gzip", "zstd"]
[[site.app]]
pool = "app"
"#,
        raw_app = raw_app.display()
    );
    let server = Server::with_config(d, &config);
    let at = |port| SocketAddr::from(([127, 0, 0, 1], port));
    Sites {
        _dir: dir,
        server,
        files: at(files),
        app: at(app),
        page,
    }
}

fn get_encoded(addr: SocketAddr, path: &str, accept: &str) -> Response {
    get(addr, path, &format!("Accept-Encoding: {accept}\r\n"))
}

#[test]
fn static_files_go_out_in_the_coding_the_client_weighs_highest() {
    let s = sites();
    let identity = get(s.files, "/page.html", "");
    assert_eq!(identity.status, 200, "{}", s.server.log_text());
    assert_eq!(identity.body, s.page);
    assert_eq!(identity.header("content-encoding"), None);
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"));
    let plain_etag = identity.header("etag").unwrap().to_string();
    let mut etags = vec![plain_etag.clone()];
    for (accept, coding) in [
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip, br", "br"),
        ("gzip;q=1.0, br;q=0.5", "gzip"),
        ("br;q=0, gzip", "gzip"),
    ] {
        let r = get_encoded(s.files, "/page.html", accept);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(coding), "{accept}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert!(r.body.len() < s.page.len() / 4, "{coding} is smaller");
        assert_eq!(
            python_decode(coding, &r.body),
            s.page,
            "{coding} decodes byte for byte"
        );
        let etag = r.header("etag").unwrap().to_string();
        if !etags.contains(&etag) {
            etags.push(etag.clone());
        }
        // Revalidation of the variant by its own ETag.
        let again = get(
            s.files,
            "/page.html",
            &format!("Accept-Encoding: {accept}\r\nIf-None-Match: {etag}\r\n"),
        );
        assert_eq!(again.status, 304, "{accept}");
    }
    assert_eq!(etags.len(), 4, "each coding has its own ETag: {etags:?}");
    // A byte range is of the file as it is; HEAD says what GET would send.
    let r = get(
        s.files,
        "/page.html",
        "Accept-Encoding: br\r\nRange: bytes=0-9\r\n",
    );
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    assert_eq!(r.body, &s.page[..10]);
    let br = get_encoded(s.files, "/page.html", "br");
    let mut c = Conn::open(s.files);
    c.send(b"HEAD /page.html HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br\r\n\r\n");
    let head = c.read_response(true).expect("an answer to HEAD");
    assert_eq!(head.header("content-encoding"), Some("br"));
    assert_eq!(head.header("content-length"), br.header("content-length"));
    // Not worth it: small files and images go as they are, without Vary.
    for path in ["/small.html", "/photo.png"] {
        let r = get_encoded(s.files, path, "br, gzip, zstd");
        assert_eq!(
            (r.header("content-encoding"), r.header("vary")),
            (None, None),
            "{path}"
        );
    }
    // A precompressed file beside the original is the one sent.
    let r = get_encoded(s.files, "/notes.txt", "gzip");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        python_decode("gzip", &r.body),
        b"from the precompressed file\n".repeat(40)
    );
    // curl's own decoders, whatever it asks for.
    let (body, fields) = curl_compressed(&format!("http://{}/page.html", s.files));
    assert_eq!(body, s.page);
    assert!(fields.contains("content-encoding:"), "{fields}");
    drop(s.server);
}

#[test]
fn app_answers_are_compressed_as_they_stream() {
    let s = sites();
    let page = {
        let r = get(s.app, "/big-text", "");
        assert_eq!(r.status, 200, "{}", s.server.log_text());
        assert_eq!(
            r.header("vary"),
            Some("Accept-Encoding"),
            "it could have been compressed"
        );
        assert_eq!(r.header("etag"), Some("\"v1\""));
        r.body
    };
    for (path, accept, coding) in [
        ("/big-text", "gzip, br", "br"),
        ("/big-text", "gzip", "gzip"),
        ("/big-text", "zstd", "zstd"),
        ("/big-chunked", "br", "br"),
        ("/big-chunked", "zstd, gzip;q=0.5", "zstd"),
    ] {
        let r = get_encoded(s.app, path, accept);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("content-encoding"),
            Some(coding),
            "{path} {accept}"
        );
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        assert_eq!(r.header("content-length"), None);
        assert_eq!(python_decode(coding, &r.body), page, "{path} in {coding}");
        if path == "/big-text" {
            assert_eq!(
                r.header("etag"),
                Some("W/\"v1\""),
                "a changed body's ETag is weak"
            );
        }
    }
    // The keep-alive connection carries on after a compressed answer.
    let mut c = Conn::open(s.app);
    for _ in 0..3 {
        c.send(b"GET /big-chunked HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\n\r\n");
        let r = c
            .read_response(false)
            .expect("an answer on the same connection");
        assert_eq!(python_decode("gzip", &r.body), page);
    }
    // What must not be compressed is not.
    for path in ["/no-transform", "/big-image", "/branded"] {
        let r = get_encoded(s.app, path, "br, gzip");
        assert_eq!(r.header("content-encoding"), None, "{path}");
    }
    // An HTTP/1.0 client gets it close-delimited.
    let mut c = Conn::open(s.app);
    c.send(b"GET /big-text HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    let r = c.read_response(false).expect("an answer");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(python_decode("gzip", &r.body), page);
    let (body, _) = curl_compressed(&format!("http://{}/big-chunked", s.app));
    assert_eq!(body, page);
    drop(s.server);
}
