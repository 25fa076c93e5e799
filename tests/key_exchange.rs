//! Post-quantum key exchange (#58, item 1): rustls on AWS-LC offers X25519MLKEM768 first, then
//! X25519, P-256 and P-384, over TCP and QUIC alike. A client (rustls on AWS-LC, narrowed to
//! one group, since Debian's OpenSSL 3.0 has no ML-KEM) that offers only
//! that one group gets a connection, an answer, and that group: the post-quantum hybrid, and
//! the classical ones a client without it offers.

use crate::common::tls::openssl_cert;
use crate::common::*;
use std::sync::Arc;

/// A TLS 1.3 client configuration offering the key exchange group `group` alone, and `alpn`.
fn offering_only(group: rustls::NamedGroup, alpn: &[u8]) -> rustls::ClientConfig {
    // The client's own provider (not the server's): what it offers is the test's choice.
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.kx_groups.retain(|g| g.name() == group);
    assert_eq!(provider.kx_groups.len(), 1, "{group:?} is not offered");
    // Any certificate (the test's own self-signed one), as `espalier bench -k` believes one.
    let insecure = espalier::tls::client::Trust::Insecure;
    espalier::tls::client::client_config_with(
        Arc::new(provider),
        &insecure,
        None,
        vec![alpn.to_vec()],
    )
    .unwrap()
}

/// An HTTPS/1.1 GET of `/` over TCP offering `group` alone: the status and the group the
/// handshake settled on.
async fn over_tcp(port: u16, group: rustls::NamedGroup) -> (u16, Option<rustls::NamedGroup>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = offering_only(group, b"http/1.1");
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap_or_else(|e| panic!("the handshake offering {group:?} alone failed: {e}"));
    let negotiated = tls
        .get_ref()
        .1
        .negotiated_key_exchange_group()
        .map(|g| g.name());
    tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    let status = String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, negotiated)
}

/// An HTTP/3 GET of `/` offering `group` alone (a QUIC handshake cannot fall back: a server
/// without the group fails it): the status.
async fn over_quic(port: u16, group: rustls::NamedGroup) -> u16 {
    let tls = offering_only(group, b"h3");
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls)).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let conn = endpoint
        .connect(addr, "localhost")
        .unwrap()
        .await
        .unwrap_or_else(|e| panic!("the QUIC handshake offering {group:?} alone failed: {e}"));
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .unwrap();
    let driving = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let request = http::Request::get(format!("https://localhost:{port}/"))
        .body(())
        .unwrap();
    let mut stream = send.send_request(request).await.unwrap();
    stream.finish().await.unwrap();
    let status = stream.recv_response().await.unwrap().status().as_u16();
    drop(stream);
    drop(send);
    driving.abort();
    endpoint.close(0u32.into(), b"done");
    status
}

/// A server of one static https site, HTTP/3 too, in `dir`; its port, and a runtime for the
/// clients.
fn https_server(dir: &std::path::Path) -> (Server, u16, tokio::runtime::Runtime) {
    need_tools("openssl:openssl", "openssl");
    openssl_cert(dir, "site", "localhost");
    let port = free_port();
    let server = Server::with_config(
        dir,
        &format!(
            "[server]\nhttp3 = true\n[[site]]\nname = \"s\"\nbindings = [\"https://127.0.0.1:{port}\"]\ntls = {{ cert = \"site.pem\", key = \"site.key\" }}\n[[site.app]]\nhandler = \"static\"\n"
        ),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (server, port, runtime)
}

#[test]
fn a_client_offering_one_group_alone_gets_it_post_quantum_or_classical_over_tcp_and_quic() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, runtime) = https_server(dir.path());
    use rustls::NamedGroup::{secp256r1, X25519, X25519MLKEM768};
    for group in [X25519MLKEM768, X25519, secp256r1] {
        let (status, negotiated) = runtime.block_on(over_tcp(port, group));
        assert_eq!((status, negotiated), (200, Some(group)), "over TCP");
        assert_eq!(
            runtime.block_on(over_quic(port, group)),
            200,
            "{group:?} over QUIC"
        );
    }
}

/// A client that offers every group, as a browser does (the hybrid's key share first), gets
/// the post-quantum hybrid.
#[test]
fn the_post_quantum_group_is_chosen_first() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port, runtime) = https_server(dir.path());
    let ours: Vec<_> = (espalier::certs::provider().kx_groups.iter())
        .map(|g| g.name())
        .collect();
    assert_eq!(ours[0], rustls::NamedGroup::X25519MLKEM768, "{ours:?}");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let negotiated = runtime.block_on(async {
        let insecure = espalier::tls::client::Trust::Insecure;
        let config =
            espalier::tls::client::client_config_with(provider, &insecure, None, Vec::new())
                .unwrap();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap();
        tls.get_ref()
            .1
            .negotiated_key_exchange_group()
            .map(|g| g.name())
    });
    assert_eq!(negotiated, Some(rustls::NamedGroup::X25519MLKEM768));
}
