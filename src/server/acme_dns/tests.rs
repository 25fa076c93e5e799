use super::*;

#[test]
fn the_own_zone_serves_a_record_while_it_is_published_and_not_after() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen: SocketAddr = ([127, 0, 0, 1], port).into();
        let zone = ChallengeZone::start(listen, "acme.example.net").unwrap();
        let publisher = TxtPublisher::Own(zone);
        let record = publisher
            .publish("*.shop.example", "value-1", Duration::from_secs(5))
            .await
            .unwrap();
        // A second order's value at the same name (the name itself, beside its wildcard).
        let second = publisher
            .publish("shop.example", "value-2", Duration::from_secs(5))
            .await
            .unwrap();
        let name = crate::certs::dns01::delegated_name("shop.example", "acme.example.net");
        let asked = |name: String| {
            let resolver = lookup_resolver(listen);
            async move {
                resolver
                    .txt_lookup(name + ".")
                    .await
                    .map(|l| l.iter().map(|t| t.to_string()).collect::<Vec<_>>())
            }
        };
        let mut both = asked(name.clone()).await.unwrap();
        both.sort();
        assert_eq!(both, ["value-1", "value-2"]);
        publisher
            .withdraw(record, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(asked(name.clone()).await.unwrap(), ["value-2"]);
        publisher
            .withdraw(second, Duration::from_secs(5))
            .await
            .unwrap();
        let gone = asked(name).await.unwrap_err();
        assert!(gone.is_no_records_found(), "{gone}");
    });
}

/// A resolver asking the server at `at` alone.
fn lookup_resolver(at: SocketAddr) -> hickory_resolver::TokioResolver {
    use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig};
    let servers = NameServerConfigGroup::from_ips_clear(&[at.ip()], at.port(), true);
    let config = ResolverConfig::from_parts(None, vec![], servers);
    let mut builder = hickory_resolver::TokioResolver::builder_with_config(
        config,
        hickory_resolver::name_server::TokioConnectionProvider::default(),
    );
    builder.options_mut().cache_size = 0;
    builder.build()
}
