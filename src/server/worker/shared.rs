//! What a worker's engine threads share, made once as the worker starts (while it may still
//! read its keys): each https group's TLS, the body ceiling of the head parser, the upstream
//! groups' health, the limited sites' accounts, the pool's session ticket keys and its
//! shared session table (HTTP/3's 0-RTT).
//!
//! Owns: [`Shared`]. Must not touch: the threads (`super::engine` reads it).

use crate::proxy::GroupHealth;
use crate::routing::limits::Accounts;
use crate::server::log;
use crate::server::spec::WorkerSpec;
use crate::tls::tickets::{self, SharedTicketer, TicketKey};
use std::sync::Arc;

/// What a worker's threads share: the TLS of its listener groups (each https group's rustls
/// configuration, `None` for cleartext, and the connections the kernel's TLS can take), and
/// the accounts of its sites' limits.
pub(super) struct Shared {
    pub(super) configs: Vec<Option<(Arc<rustls::ServerConfig>, Option<crate::tls::Held>)>>,
    pub(super) kernel: crate::os::ktls::KernelSupport,
    pub(super) limits: Vec<Option<Arc<Accounts>>>,
    /// The head parser's bound on a body ([`WorkerSpec::body_ceiling`]).
    pub(super) max_body: u64,
    /// Each upstream group a path of the worker's sites names: its servers' health, shared
    /// by the threads (see `proxy::group`).
    pub(super) upstreams: Vec<Arc<GroupHealth>>,
    /// The pool's session ticket keys, which the master rotates (see `tls::tickets`).
    pub(super) tickets: Arc<SharedTicketer>,
    /// With `http3_early_data`: the pool's shared session table (see `tls::session_table`),
    /// `None` where the master gave none (QUIC keeps the worker's own cache then).
    pub(super) sessions: Option<Arc<dyn rustls::server::StoresServerSessions>>,
}

impl Shared {
    /// What `spec`'s threads share: each https group's TLS (certificates read now, while
    /// the worker may still read its keys; the store's from `store`), the body ceiling, the
    /// upstream groups' health and the limited sites' accounts.
    pub(super) fn of(
        spec: &WorkerSpec,
        store: &Arc<crate::certs::store::StoreKeys>,
        ktls: crate::os::ktls::KernelSupport,
        on_demand: Option<&Arc<crate::tls::on_demand::OnDemand>>,
    ) -> Result<Shared, String> {
        let tickets = Arc::new(SharedTicketer::new(&ticket_keys(spec)));
        Ok(Shared {
            sessions: session_table(spec),
            configs: spec
                .groups
                .iter()
                .map(|g| {
                    g.tls
                        .then(|| {
                            crate::tls::server_config(
                                g,
                                &spec.sites,
                                &spec.pool,
                                &spec.name(),
                                store,
                                (!ktls.is_empty(), &tickets),
                                crate::tls::AcmeAnswers {
                                    challenges: spec.acme_challenges.as_deref(),
                                    on_demand,
                                },
                            )
                        })
                        .transpose()
                })
                .collect::<Result<_, _>>()?,
            kernel: ktls,
            max_body: spec.body_ceiling(),
            upstreams: used_upstreams(spec)
                .map(|u| Arc::new(GroupHealth::new(Arc::new(u.clone()))))
                .collect(),
            // Each limited site's clients, counted per worker (per node; see routing::limits).
            limits: spec
                .sites
                .iter()
                .map(|s| {
                    s.limit.clone().map(|limit| {
                        let who = spec.name();
                        let report = Box::new(move |line: String| log(&who, line));
                        Arc::new(Accounts::new(&s.name, limit, spec.threads.len(), report))
                    })
                })
                .collect(),
            tickets,
        })
    }
}

/// The pool's shared session table the master handed this worker, mapped (a failure said:
/// sessions stay this worker's).
fn session_table(spec: &WorkerSpec) -> Option<Arc<dyn rustls::server::StoresServerSessions>> {
    let fd = spec.session_table_fd?;
    let mapped = crate::os::shared_memory::Mapping::map_inherited(fd)
        .map_err(|e| e.to_string())
        .and_then(crate::tls::session_table::SessionTable::new);
    match mapped {
        Ok(table) => Some(Arc::new(table)),
        Err(e) => {
            log(
                &spec.name(),
                format!("cannot map the pool's session table ({e}); 0-RTT resumes only here"),
            );
            None
        }
    }
}

/// The pool's ticket keys as the master gave them at start; keys of the worker's own where it
/// gave none it could read (said once): resumption then stays within this worker.
fn ticket_keys(spec: &WorkerSpec) -> Vec<TicketKey> {
    tickets::decode(&spec.ticket_keys).unwrap_or_else(|e| {
        if !spec.ticket_keys.is_empty() {
            log(&spec.name(), format!("{e}; this worker makes its own"));
        }
        tickets::pool_keys(&[tickets::new_secret()], &spec.pool)
    })
}

/// The upstream groups the paths of `spec`'s own sites name (a group no path of the
/// worker's uses costs it nothing).
fn used_upstreams(
    spec: &WorkerSpec,
) -> impl Iterator<Item = &crate::config::upstream::UpstreamSpec> {
    let used = |name: &str| {
        (spec.sites.iter())
            .flat_map(|s| &s.apps)
            .any(|a| a.answered_by(&spec.pool) && a.groups().any(|g| g == name))
    };
    spec.upstreams.iter().filter(move |u| used(&u.name))
}
