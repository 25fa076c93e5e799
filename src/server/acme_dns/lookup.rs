//! Whether each DNS-01 name's delegation is in place, as `check` and `doctor` ask: the CNAME
//! of its `_acme-challenge` name, looked up through the system's resolvers (or
//! `[server.acme.dns] resolver`), compared with the name espalier's zone gives it.
//!
//! Owns: those lookups, a few at a time and each bounded. Must not touch: what is done
//! with a missing one (the caller says it).

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use std::net::SocketAddr;
use std::time::Duration;

/// Lookups at once: a hoster's thousand names are asked a score at a time.
const AT_ONCE: usize = 16;

/// How long one lookup may take.
const LOOKUP_WAIT: Duration = Duration::from_secs(5);

/// What a name's delegation was found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delegation {
    /// The CNAME is there and points where it should.
    InPlace,
    /// No CNAME at the challenge name.
    Missing,
    /// A CNAME to another name (given).
    Elsewhere(String),
    /// The lookup failed (why).
    Unknown(String),
}

impl Delegation {
    /// What was found at `challenge` (a name's `_acme-challenge`), said for a person; `None`
    /// when it is in place.
    pub fn problem(&self, challenge: &str) -> Option<String> {
        match self {
            Delegation::InPlace => None,
            Delegation::Missing => Some(format!("{challenge} has no CNAME")),
            Delegation::Elsewhere(to) => Some(format!("{challenge} is a CNAME to {to}")),
            Delegation::Unknown(why) => Some(format!("{challenge} cannot be looked up ({why})")),
        }
    }
}

/// The delegation of each of `identifiers` into `zone`, in their order, looked up through
/// `resolver` (`None`: the system's).
pub fn check(
    identifiers: &[String],
    zone: &str,
    resolver: Option<SocketAddr>,
) -> Result<Vec<Delegation>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the lookups: {e}"))?;
    runtime.block_on(async {
        let resolver = resolver_for(resolver)?;
        let mut found = vec![Delegation::Missing; identifiers.len()];
        // AT_ONCE lookups in flight, each a task (awaited in turn, they would cost their sum).
        let mut asking = tokio::task::JoinSet::new();
        for (at, identifier) in identifiers.iter().enumerate() {
            if asking.len() == AT_ONCE {
                if let Some(Ok((at, delegation))) = asking.join_next().await {
                    found[at] = delegation;
                }
            }
            let (resolver, identifier, zone) =
                (resolver.clone(), identifier.clone(), zone.to_string());
            asking.spawn(async move { (at, one(&resolver, &identifier, &zone).await) });
        }
        while let Some(done) = asking.join_next().await {
            if let Ok((at, delegation)) = done {
                found[at] = delegation;
            }
        }
        Ok(found)
    })
}

/// The resolver to ask: `at`, or the system's.
fn resolver_for(at: Option<SocketAddr>) -> Result<TokioResolver, String> {
    let provider = TokioConnectionProvider::default();
    let mut builder = match at {
        Some(addr) => {
            let servers = NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true);
            TokioResolver::builder_with_config(
                ResolverConfig::from_parts(None, vec![], servers),
                provider,
            )
        }
        None => TokioResolver::builder(provider)
            .map_err(|e| format!("cannot read the system's resolvers (/etc/resolv.conf): {e}"))?,
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.timeout = LOOKUP_WAIT;
    opts.attempts = 1;
    // A delegation just added must be seen, not an answer kept from before.
    opts.cache_size = 0;
    Ok(builder.build())
}

/// The delegation of `identifier` into `zone`.
async fn one(resolver: &TokioResolver, identifier: &str, zone: &str) -> Delegation {
    let name = crate::certs::dns01::challenge_name(identifier) + ".";
    let want = crate::certs::dns01::delegated_name(identifier, zone);
    let asked = resolver.lookup(name, RecordType::CNAME);
    match tokio::time::timeout(LOOKUP_WAIT * 2, asked).await {
        Err(_) => Delegation::Unknown("no answer in time".into()),
        Ok(Err(e)) if e.is_no_records_found() => Delegation::Missing,
        Ok(Err(e)) => Delegation::Unknown(e.to_string()),
        Ok(Ok(lookup)) => {
            let target = lookup.record_iter().find_map(|r| match r.data() {
                RData::CNAME(c) => Some(c.0.to_ascii().trim_end_matches('.').to_ascii_lowercase()),
                _ => None,
            });
            match target {
                Some(t) if t == want => Delegation::InPlace,
                Some(t) => Delegation::Elsewhere(t),
                None => Delegation::Missing,
            }
        }
    }
}
