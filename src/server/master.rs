//! The master (`espalier serve`): the WAS + HTTP.sys of espalier. It opens every listener
//! itself ([`super::listeners`]), builds one worker spec per planned slot
//! ([`super::spawn`]) with its hand-off sockets on shared addresses ([`super::handoffs`]),
//! and hands them to the supervisor, which starts the workers, keeps them
//! alive and stops everything gracefully on SIGTERM/SIGINT.
//!
//! Owns: the order of start-up. Must not touch: requests — the master never serves one.

use crate::config::Config;
use crate::placement::Plan;
use crate::topology::Topology;

/// Pools that name a user need a master that may become it: root, or that user itself.
pub(super) fn check_identities(config: &Config) -> Result<(), String> {
    let me = crate::os::identity::effective_uid();
    if me == 0 {
        return Ok(());
    }
    match config
        .pools
        .iter()
        .find(|p| p.identity.as_ref().is_some_and(|id| id.uid != me))
    {
        Some(p) => Err(format!(
            "pool `{}` runs as user `{}`, but espalier runs as uid {me}, which cannot become it; start espalier as root (it binds, places and spawns, and every worker then drops to its pool's user), or remove `user`",
            p.name,
            p.identity.as_ref().map_or("", |id| id.user.as_str())
        )),
        None => Ok(()),
    }
}

/// Runs the server until it is stopped. Returns the exit code.
pub fn run(owned: Config, topology: &Topology, plan: &Plan) -> Result<i32, String> {
    let config = &owned;
    // Before anything could replace the binary on disk: workers start from this handle.
    crate::os::process::hold_own_executable();
    // The OOM killer's last choice (only root may lower it; its workers and apps raise theirs).
    if crate::os::process::is_root() {
        if let Err(e) =
            crate::os::process::set_oom_score_adj(super::lifecycle::OOM_SCORE_ADJ_MASTER)
        {
            super::log(
                "master",
                format!("warning: cannot lower the master's oom_score_adj: {e}"),
            );
        }
    }
    // Each listening thread holds a socket per address it serves (the dispatcher's, on a
    // shared one), each awake pool thread on a shared address one for hand-offs, and the
    // master watches a copy of a sleeping one's listeners: an upper bound, which a hoster's
    // thousands of pools on a shared port stay far below (a sleeping one costs nothing).
    let threads: u64 = plan.workers.iter().map(|w| w.cpus.len() as u64).sum();
    let addresses = config
        .sites
        .iter()
        .flat_map(|s| s.bindings.iter().map(|b| b.addr))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let needed = 4096 + 2 * threads * (addresses + 1);
    if let Err(e) = crate::os::process::raise_descriptor_limit(needed) {
        super::log(
            "master",
            format!("warning: cannot raise the descriptor limit: {e}"),
        );
    }
    let file = config
        .source
        .as_ref()
        .map_or("the command line".to_string(), |p| p.display().to_string());
    super::runtime::prepare_access_logs(config).map_err(|e| format!("{file}: {e}"))?;
    for w in crate::tls::expiry_warnings(&config.sites, std::time::SystemTime::now()) {
        super::log("master", format!("{file}: {w}"));
    }
    check_identities(config).map_err(|e| format!("{file}: {e}"))?;
    end_what_a_dead_server_left_frozen();
    // The sockets a service manager, or the master this one upgrades, passed: the admin
    // endpoint's among them is its own.
    let mut inherited = crate::os::net::inherited_sockets();
    let upgrading = crate::os::process::take_upgrade_ready();
    let admin_passed = (inherited.iter())
        .position(|s| !s.udp && s.addr == config.server.admin)
        .map(|k| std::net::TcpListener::from(inherited.remove(k).socket));
    let groups = super::listeners::open_listeners(config, topology, plan, &file, inherited)?;
    let admin = match admin_passed {
        Some(listener) => listener,
        None => super::admin::bind(config).map_err(|e| format!("{file}: {e}"))?,
    };
    let mut handoffs = super::handoffs::Handoffs::new()?;
    // An on-demand pool starts asleep: no hand-off socket until its first connection.
    let on_demand = super::handoffs::on_demand_pools(&config.pools);
    handoffs.ensure(&groups, &config.pools, plan, |p| on_demand.contains(p))?;
    let specs = super::spawn::worker_specs(config, plan, &groups, &handoffs, topology, |_| true);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    // The supervisor keeps the one copy (a hoster's config is thousands of sites).
    rt.block_on(super::supervisor::run(
        (owned, plan.clone()),
        topology,
        groups,
        handoffs,
        specs,
        (admin, upgrading),
    ))
}

/// A server that died with idle workers frozen left them holding its ports and queues
/// (frozen, they cannot act on the SIGTERM its death sent them); outside systemd nothing else
/// ends them. Done before this server opens its own listeners (see
/// [`crate::os::freezer::Freezer::end_leftovers`]), in both freezers where a machine has both.
fn end_what_a_dead_server_left_frozen() {
    let base = std::path::Path::new("/sys/fs/cgroup");
    let mut freezers = vec![crate::os::freezer::detect(base, false)];
    freezers.push(crate::os::freezer::detect(base, true));
    freezers.dedup();
    let ended: usize = freezers
        .into_iter()
        .flatten()
        .map(|f| f.end_leftovers())
        .sum();
    if ended > 0 {
        super::log(
            "master",
            format!("ended {ended} process(es) a previous server left frozen (it died while they were suspended)"),
        );
    }
}
