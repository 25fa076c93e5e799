//! `espalier app-exec`: the last step between the master and a user's application. The
//! master starts it, placed (CPU affinity and memory policy applied between fork and exec);
//! it joins the pool's control groups, places itself again (joining a v1 cpuset resets
//! affinity), moves the pool's listener sockets to fds 3…, enters its own view of the
//! filesystem (`[pool.isolation]`), becomes the pool's user (with `PR_SET_NO_NEW_PRIVS`),
//! narrows its rights with Landlock (the same key) and execs the application with `LISTEN_FDS`, `LISTEN_PID` and
//! `LISTEN_FDNAMES` exactly as systemd passes them.
//!
//! Owns: that hand-over. Must not touch: which sockets or placement (the master decided).
//!
//! Why a separate step rather than a `pre_exec` hook in the master: `LISTEN_PID` must be the
//! application's own pid, known only after the fork, and setting an environment variable
//! between fork and exec is not async-signal-safe. Here, a single-threaded process before
//! exec, it is an ordinary `Command` environment; exec keeps the pid.

use crate::config::MemoryPolicy;
use crate::cpuset::CpuSet;
use crate::os;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

pub const ENV_VAR: &str = "ESPALIER_APP_EXEC";

/// What the master hands `app-exec`: JSON in a sealed memory file whose inherited descriptor
/// [`ENV_VAR`] names (see `os::process::sealed_memfd`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecSpec {
    /// `pool/index`, for messages.
    pub name: String,
    /// Inherited listener sockets, in the order they become fds 3, 4, ….
    pub fds: Vec<i32>,
    /// `LISTEN_FDNAMES`, one per fd.
    pub names: Vec<String>,
    pub cgroups: Vec<PathBuf>,
    pub cpus: Vec<u32>,
    pub memory_policy: MemoryPolicy,
    pub memory_nodes: Vec<u32>,
    /// Set `WATCHDOG_PID` to the application's pid (the master set `WATCHDOG_USEC`).
    pub watchdog: bool,
    /// Who the application runs as (its pool's `user` and `group`).
    #[serde(default)]
    pub identity: Option<os::identity::Identity>,
    /// `[pool.isolation]`: the filesystem it sees, and (Landlock) what it may write.
    #[serde(default)]
    pub isolation: Option<crate::config::isolation::Isolation>,
    /// The TCP port it listens on (`PORT`), and the unix socket it makes, where it makes one:
    /// under Landlock, what it may bind.
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub socket: Option<PathBuf>,
}

/// Its process group, control groups, memory policy and CPUs, as the master placed it (what
/// cannot be done is a warning: it runs unplaced rather than not at all).
fn place(spec: &ExecSpec, warn: &dyn Fn(String)) {
    if let Err(e) = os::process::own_process_group() {
        warn(format!("cannot start a process group: {e}"));
    }
    for dir in &spec.cgroups {
        let group = os::cgroup::Group {
            dirs: vec![dir.clone()],
            ..Default::default()
        };
        if let Err(e) = group.attach(std::process::id()) {
            warn(format!("{e}; running outside that control group"));
        }
    }
    let mode = match spec.memory_policy {
        MemoryPolicy::Bind => os::numa::MemPolicyMode::Bind,
        MemoryPolicy::Preferred => os::numa::MemPolicyMode::Preferred,
        MemoryPolicy::Default => os::numa::MemPolicyMode::Default,
    };
    if mode != os::numa::MemPolicyMode::Default {
        if let Err(e) = os::numa::set_memory_policy(mode, &spec.memory_nodes) {
            warn(format!(
                "cannot set memory policy {:?} on node(s) {:?}: {e}",
                spec.memory_policy, spec.memory_nodes
            ));
        }
    }
    let cpus = CpuSet::from_ids(spec.cpus.iter().copied());
    if !cpus.is_empty() {
        if let Err(e) = os::numa::set_thread_affinity(0, &cpus) {
            warn(format!("cannot run on CPUs {cpus}: {e}"));
        }
    }
}

/// Landlock's rules of `[pool.isolation]`, where it asks for them: writes only under its
/// writable paths (and its unix socket's folder), TCP binds only to its port.
fn narrow(spec: &ExecSpec, warn: &dyn Fn(String)) -> Result<(), String> {
    let Some(isolation) = spec.isolation.as_ref().filter(|i| i.landlock) else {
        return Ok(());
    };
    let mut writable = isolation.writable();
    writable.extend(
        spec.socket
            .as_ref()
            .and_then(|s| s.parent())
            .map(PathBuf::from),
    );
    if os::isolation::restrict(&writable, &Vec::from_iter(spec.port))?.is_none() {
        warn("this kernel has no Landlock: the app's writes and binds are not narrowed (its mounts are)".into());
    }
    Ok(())
}

/// The mount namespace `isolation` plans entered — the folder of the unix socket the app
/// makes (`socket`) writable in it — and the working directory taken again in it (the one
/// inherited is the machine's view of it).
fn isolate(
    isolation: &crate::config::isolation::Isolation,
    socket: Option<&std::path::Path>,
) -> Result<(), String> {
    // Started in the pool's directory (the master's `current_dir`).
    let directory =
        std::env::current_dir().map_err(|e| format!("isolation: the working directory: {e}"))?;
    let mut plan = isolation.mount_plan(&directory);
    if let Some(folder) = socket.and_then(|s| s.parent()) {
        plan.push(crate::config::isolation::MountStep::Bind(
            folder.into(),
            false,
        ));
    }
    os::isolation::enter(&plan)?;
    if isolation.no_network {
        os::isolation::leave_network()?;
    }
    std::env::set_current_dir(&directory).map_err(|e| {
        format!(
            "isolation: the working directory {} cannot be seen: {e}",
            directory.display()
        )
    })
}

/// Entry point of `espalier app-exec -- PROGRAM ARGS…` (started only by the master).
pub fn main(argv: Vec<OsString>) -> i32 {
    // Read (and its descriptor closed) before the listeners are put at 3, 4, ….
    let spec: ExecSpec = match std::env::var(ENV_VAR)
        .map_err(|e| e.to_string())
        .and_then(|fd| fd.parse::<i32>().map_err(|e| e.to_string()))
        .and_then(|fd| os::process::read_inherited(fd).map_err(|e| e.to_string()))
        .and_then(|json| serde_json::from_slice(&json).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("espalier: `espalier app-exec` is started by `espalier serve`, not by hand ({ENV_VAR}: {e})");
            return 2;
        }
    };
    let Some(program) = argv.first() else {
        eprintln!("espalier[{}]: no program to run", spec.name);
        return 2;
    };
    // Before the master under memory pressure, for the app and all it forks.
    let _ = crate::os::process::set_oom_score_adj(super::lifecycle::OOM_SCORE_ADJ_POOL);
    let warn = |m: String| super::log(&spec.name, format!("warning: {m}"));
    place(&spec, &warn);
    if let Err(e) = os::process::place_fds(&spec.fds, 3) {
        super::log(
            &spec.name,
            format!("cannot hand over the listener sockets: {e}"),
        );
        return 1;
    }
    // The sockets go blocking, as systemd passes them. The file description is shared with
    // the master's copy, which accepts on it only while the pool has no process (and sets it
    // non-blocking again first, see `supervisor::pools`).
    for fd in 3..3 + spec.fds.len() as i32 {
        if let Err(e) = os::process::set_blocking(fd) {
            warn(format!("cannot make socket {fd} blocking: {e}"));
        }
    }
    // Its own view of the filesystem, made while it may still mount (root).
    if let Some(isolation) = &spec.isolation {
        if let Err(e) = isolate(isolation, spec.socket.as_deref()) {
            super::log(&spec.name, e);
            return 1;
        }
    }
    // Last, once everything that needs root is done: the application never runs as root
    // when its pool names a user.
    if let Some(id) = &spec.identity {
        os::process::give_output_pipes(id.uid, id.gid);
        if let Err(e) = id.assume() {
            super::log(&spec.name, format!("cannot become user `{}`: {e}", id.user));
            return 1;
        }
        // Changing user clears the parent-death signal.
        let _ = os::process::die_with_parent();
    }
    // Landlock after the user changed (it needs no privilege, and no_new_privs is set).
    if let Err(e) = narrow(&spec, &warn) {
        super::log(&spec.name, e);
        return 1;
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(&argv[1..]).env_remove(ENV_VAR);
    if spec.fds.is_empty() {
        cmd.env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES");
    } else {
        cmd.env("LISTEN_FDS", spec.fds.len().to_string())
            .env("LISTEN_PID", std::process::id().to_string())
            .env("LISTEN_FDNAMES", spec.names.join(":"));
    }
    if spec.watchdog {
        cmd.env("WATCHDOG_PID", std::process::id().to_string());
    }
    let e = cmd.exec();
    super::log(
        &spec.name,
        format!("cannot run `{}`: {e}", program.to_string_lossy()),
    );
    127
}
