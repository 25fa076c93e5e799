//! How a pool's app is reached: `upstream` (a port or a unix socket, by default as the command
//! says) and `protocol` (HTTP/1.1 or HTTP/2), and one line per refusal naming the key.

use super::super::upstream::Protocol;
use super::super::*;
use crate::testutil::fixture;

fn parse(pool_keys: &str) -> Result<Config, ConfigErrors> {
    let text = format!(
        "[[pool]]\nname = \"p\"\n{pool_keys}\n[[site]]\nname = \"s\"\nbindings = [\"http://127.0.0.1:8080\"]\n[[site.app]]\npool = \"p\"\n"
    );
    Config::parse(&text, Path::new("/etc/espalier/t.toml"), &fixture("dl980"))
}

fn app(pool_keys: &str) -> AppCommand {
    parse(pool_keys).unwrap().pools[0].app.clone().unwrap()
}

#[test]
fn a_command_that_names_a_socket_listens_on_one_by_default() {
    let sock = app("command = [\"/bin/sh\", \"--bind\", \"unix:{socket}\"]");
    assert_eq!(sock.upstream, UpstreamKind::Unix);
    let port = app("command = [\"/bin/sh\", \"--bind\", \"127.0.0.1:{port}\"]");
    assert_eq!(port.upstream, UpstreamKind::Tcp);
    // Neither (the port in PORT, or the socket in ESPALIER_SOCKET): a port, unless said.
    assert_eq!(app("command = [\"/bin/sh\"]").upstream, UpstreamKind::Tcp);
    let said = app("command = [\"/bin/sh\"]\nupstream = \"unix\"");
    assert_eq!(said.upstream, UpstreamKind::Unix);
}

#[test]
fn an_upstream_that_disagrees_with_the_command_is_refused() {
    let e = parse("command = [\"/bin/sh\", \"unix:{socket}\"]\nupstream = \"tcp\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("pool[0].upstream") && e.contains("names `{socket}`"),
        "{e}"
    );
    let e = parse("command = [\"/bin/sh\", \"{port}\"]\nupstream = \"unix\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("names `{port}`") && e.contains("write {socket}"),
        "{e}"
    );
}

#[test]
fn http2_is_for_proxied_apps_without_http_1_1_probes() {
    assert_eq!(app("command = [\"/bin/sh\"]").protocol, Protocol::Http1);
    let h2 = app("command = [\"/bin/sh\"]\nprotocol = \"http2\"");
    assert_eq!(h2.protocol, Protocol::Http2);
    for (keys, said) in [
        ("health = \"/healthz\"", "pool[0].health"),
        ("warmup = [\"/\"]", "pool[0].warmup"),
        (
            "transport = \"fastcgi\"",
            "applies only to transport = \"proxy\"",
        ),
    ] {
        let e = parse(&format!(
            "command = [\"/bin/sh\"]\nprotocol = \"http2\"\n{keys}"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(said), "{keys}: {e}");
    }
    let e = parse("command = [\"/bin/sh\"]\nprotocol = \"h2c\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`h2c` is not one of \"http1\", \"http2\""),
        "{e}"
    );
}

#[test]
fn pass_underscored_fields_is_refused_where_it_cannot_act() {
    let keep = "pass_underscored_fields = true";
    let proxied = app(&format!("command = [\"/bin/sh\"]\n{keep}"));
    assert!(proxied.pass_underscored_fields);
    let e = parse(&format!(
        "command = [\"/bin/sh\"]\ntransport = \"fastcgi\"\n{keep}"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("pool[0].pass_underscored_fields") && e.contains("never passed"),
        "{e}"
    );
    let e = parse(&format!(
        "command = [\"/bin/sh\"]\ntransport = \"activation\"\n{keep}"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("pool[0].pass_underscored_fields"), "{e}");
    // A pool without an application forwards nothing.
    let e = parse(keep).unwrap_err().to_string();
    assert!(
        e.contains("pool[0].pass_underscored_fields") && e.contains("runs an application"),
        "{e}"
    );
}
