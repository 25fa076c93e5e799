//! HTTP/2 held to what HTTP/1.1 is held to, on the real binary with the h2 crate's client
//! (h2c): a stream's `:authority` and `host` are checked as HTTP/1.1's Host is — once each,
//! a real host[:port], and the same name when both come.

mod common;

use common::*;

fn dynamic_site(port: u16) -> String {
    format!(
        "[[pool]]\nname = \"p\"\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:{port}\"]\n[[site.app]]\npool = \"p\"\nhandler = \"dynamic\"\n"
    )
}

#[test]
fn http2_hosts_are_checked_as_http1_hosts_are() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Server::with_config(dir.path(), &dynamic_site(port));
    let status = |uri: &str, hosts: &[&str]| {
        let (uri, hosts) = (uri.to_string(), hosts.to_vec());
        block_on(async move {
            let mut send = h2c(port).await;
            let mut req = http::Request::get(uri);
            for h in hosts {
                req = req.header("host", h);
            }
            send = send.ready().await.unwrap();
            let (response, _) = send.send_request(req.body(()).unwrap(), true).unwrap();
            response.await.unwrap().status().as_u16()
        })
    };
    let at = |authority: &str| format!("http://{authority}/");
    assert_eq!(status(&at(&format!("a.test:{port}")), &[]), 200);
    assert_eq!(status(&at("a.test"), &["A.test"]), 200);
    for bad in ["evil<script>", "evil.test/@app.test", "a..test"] {
        assert_eq!(status(&at("a.test"), &[bad]), 400, "host {bad}");
    }
    // Userinfo in :authority (RFC 9113 §8.3.1 forbids it).
    assert_eq!(status(&at("user@a.test"), &[]), 400);
    // Two host fields, or a host that names another site than :authority.
    assert_eq!(status(&at("a.test"), &["a.test", "a.test"]), 400);
    assert_eq!(status(&at("a.test"), &["b.test"]), 400);
    drop(server);
}
