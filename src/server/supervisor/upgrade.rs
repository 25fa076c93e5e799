//! Upgrading espalier's binary without a dropped connection (`espalier upgrade`, `POST
//! /upgrade`, or SIGUSR2 to the master, as nginx's): the master starts the binary now on disk
//! at the path it was started from, with the same arguments, and hands it every listening
//! socket, every UDP socket (HTTP/3) and the admin endpoint's, from fd 3 as socket activation
//! does (`os::process::spawn_passing`). The new master starts its own workers and apps on
//! them and says on a socket of the pair when it serves; only then does this master stop
//! taking connections — the same sockets, so nothing queued in them is lost — and drain as
//! at SIGTERM (in-flight requests, uploads and WebSockets finish within `shutdown_timeout`),
//! then exit. Its apps go with it: the new master's are new processes, an overlapped recycle.
//! A new binary that fails or does not serve within [`UPGRADE_WITHIN`] is stopped, said in
//! the log, and this master goes on serving.
//!
//! HTTP/3: the UDP sockets pass on, each with whether an old worker reads it. The new workers
//! take the sockets no old worker reads, and the steering sends new connections to them;
//! a QUIC connection open at the upgrade keeps reaching its old worker (its connection IDs
//! name its socket) until that worker drains. The sockets the old workers read are the new
//! master's again once the old master is gone.
//!
//! Owns: the new master's start and its outcome. Must not touch: how this master drains
//! (`super::stop`).

use super::event::Event;
use super::pools::done;
use super::Supervisor;
use crate::os;
use crate::server::admin::AdminReply;
use crate::server::log;
use std::os::fd::AsRawFd;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a new master may take to serve.
const UPGRADE_WITHIN: Duration = Duration::from_secs(120);

impl Supervisor {
    /// Starts the upgrade (`reply`, when asked through the admin endpoint, is answered with
    /// its outcome); one at a time: a second ask waits for the first's outcome.
    pub(super) fn begin_upgrade(&mut self, reply_to: Option<oneshot::Sender<AdminReply>>) {
        self.upgrade.waiting.extend(reply_to);
        if self.upgrade.new_master.is_some() || self.upgrade.handed_over {
            return;
        }
        match self.start_new_master() {
            Ok(pid) => {
                log("master", format!("upgrade: a new master (pid {pid}) starts from {}, on this one's sockets; this one serves until it does", os::process::own_executable_name().display()));
                self.upgrade.new_master = Some(pid);
            }
            Err(e) => self.on_upgraded(0, Err(e)),
        }
    }

    /// The new master, started with this one's sockets; its pid.
    fn start_new_master(&mut self) -> Result<u32, String> {
        let mut fds: Vec<std::os::fd::RawFd> = Vec::new();
        let mut read = String::new();
        for g in &self.groups {
            fds.extend(g.sockets.iter().map(|s| s.as_raw_fd()));
            fds.extend(g.udp.raw_fds());
            read.push_str(&g.udp.read_flags());
        }
        let admin = self.upgrade.admin_socket.as_ref();
        fds.extend(admin.map(|a| a.as_raw_fd()));
        let sockets = fds.len();
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| format!("cannot make the new master's socket: {e}"))?;
        fds.push(theirs.as_raw_fd());
        let program = os::process::own_executable_name();
        let mut cmd = std::process::Command::new(program);
        cmd.args(std::env::args_os().skip(1))
            .env(os::net::UPGRADE_FDS, sockets.to_string())
            .env(os::net::UPGRADE_UDP_READ, read)
            .env(os::process::UPGRADE_READY_FD, (3 + sockets).to_string());
        let child = os::process::spawn_passing(&mut cmd, &fds)
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        drop(theirs);
        let pid = child.id();
        let events = self.events.clone();
        tokio::spawn(async move {
            let outcome = serves(ours).await;
            let _ = events.send(Event::Upgraded { pid, outcome });
        });
        Ok(pid)
    }

    /// The new master serves (this one stops taking connections and drains), or it failed
    /// (it is stopped, and this one goes on).
    pub(super) fn on_upgraded(&mut self, pid: u32, outcome: Result<(), String>) {
        self.upgrade.new_master = None;
        let (status, said) = match outcome {
            Ok(()) => {
                let said = format!("upgrade: the new master (pid {pid}) serves; this one takes no more connections, lets what it holds finish and exits");
                log("master", &said);
                // A service manager follows the new master from now on.
                let _ = os::notify::notify(&format!("MAINPID={pid}"));
                self.upgrade.handed_over = true;
                if let Some(task) = self.upgrade.admin_task.take() {
                    task.abort();
                }
                // Sleeping pools' sockets are the new master's to watch.
                for s in &mut self.slots {
                    if let Some(w) = s.watcher.take() {
                        w.abort();
                    }
                }
                (200, format!("the new master (pid {pid}) serves"))
            }
            Err(why) => {
                if pid != 0 {
                    let _ = os::process::kill(pid, libc::SIGKILL);
                }
                let said = format!("upgrade refused: {why}; this master goes on serving");
                log("master", &said);
                (500, said)
            }
        };
        for r in self.upgrade.waiting.drain(..) {
            let _ = r.send(done(status, said.clone()));
        }
    }
}

impl Supervisor {
    /// The master this one upgraded is gone (its workers with it): the UDP sockets they read
    /// are free for this master's later workers.
    pub(super) fn forget_upgraded_master(&mut self) {
        let Some(pid) = self.upgrade.from else { return };
        if os::process::kill(pid, 0).is_err() {
            for g in &mut self.groups {
                g.udp.release(pid);
            }
            self.upgrade.from = None;
        }
    }
}

/// Waits for the new master to say it serves on `socket` (`ready`), within
/// [`UPGRADE_WITHIN`].
async fn serves(socket: std::os::unix::net::UnixStream) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    socket
        .set_nonblocking(true)
        .map_err(|e| format!("the new master's socket: {e}"))?;
    let mut socket = tokio::net::UnixStream::from_std(socket)
        .map_err(|e| format!("the new master's socket: {e}"))?;
    let mut said = Vec::new();
    let read = tokio::time::timeout(UPGRADE_WITHIN, socket.read_to_end(&mut said)).await;
    match read {
        _ if said.starts_with(b"ready") => Ok(()),
        Err(_) => Err(format!(
            "the new master did not serve within {}s",
            UPGRADE_WITHIN.as_secs()
        )),
        Ok(_) => Err("the new master exited before it served (its lines above say why)".into()),
    }
}
