//! Test harness: start the real `espalier serve` on loopback, talk raw HTTP to it, stop it.
#![allow(dead_code)]

pub mod apps;
pub mod backends;
pub mod browser;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs the real binary with `args`, from the repository's root, and waits for it.
pub fn espalier(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_espalier"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// Runs `cmd`, which must succeed (its stderr in the panic otherwise); its output.
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs the real binary with `args`, which must succeed; its standard output.
pub fn espalier_ok(args: &[&str]) -> String {
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_espalier"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR")),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `espalier status --json` of the server whose admin endpoint is `admin`, as the CLI prints it.
pub fn status_json(admin: &str) -> serde_json::Value {
    let out = espalier(&["status", "--json", "--admin", admin]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A loopback port for a server a test starts. Probing with port 0 and releasing would race:
/// the kernel hands the same ephemeral port to the next `bind(0)` or to a client's `connect`
/// before the server binds it. So ports come from below the ephemeral range
/// (`ip_local_port_range` starts at 32768 by default), each handed out once per test binary
/// (an atomic counter; cargo runs test binaries one at a time), starting at an offset of the
/// binary's pid, and checked free. They end below 24 576, where the ports espalier gives its
/// apps begin (`os::net::free_loopback_port`), so a test's server never races an app for one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 12000;
    const SPAN: u32 = 12000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id() * 97 % SPAN;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < SPAN, "no free port left below the ephemeral range");
        let port = (FIRST + (base + n) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Installs Debian packages whose commands are missing (`CMD:PACKAGE`, `-:PACKAGE` for a
/// package without a command; see `bench/common.sh`), or fails the test saying why in one
/// line: these tests run the real programs, never stand-ins.
pub fn need_tools(tools: &str, what: &str) {
    let out = Command::new("bash")
        .args(["-c", &format!(". bench/common.sh; need_tools {tools}")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "this test needs {what}: {}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
}

/// Installs the Python package `package` from PyPI under target/`folder` (once: a folder
/// holding it is taken as it is), for a test's script to put on its `PYTHONPATH`; `None`
/// when pip cannot. One install per package at a time in this process (tests asking at once
/// wait for the first), each into a folder of its own renamed into place whole: a pip
/// stopped half-way leaves no folder a later run would take for a complete install, and
/// another process's finished install is kept rather than replaced under its tests.
pub fn python_package(package: &str, folder: &str) -> Option<PathBuf> {
    python_package_at(package, package, folder)
}

/// [`python_package`] for a package whose import path is not its name on PyPI
/// (`opentelemetry-proto` installs `opentelemetry/proto`): `module` is that path.
pub fn python_package_at(package: &str, module: &str, folder: &str) -> Option<PathBuf> {
    static INSTALLED: std::sync::Mutex<std::collections::BTreeMap<String, Option<PathBuf>>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(done) = installed.get(package) {
        return done.clone();
    }
    let done = pip_install(package, module, folder);
    installed.insert(package.to_string(), done.clone());
    done
}

fn pip_install(package: &str, module: &str, folder: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(folder);
    if dir.join(module).exists() {
        return Some(dir);
    }
    let fresh = dir.with_extension(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&fresh);
    let ok = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "--target"])
        .arg(&fresh)
        .arg(package)
        .status()
        .is_ok_and(|s| s.success());
    if !ok || dir.join(module).exists() {
        let _ = std::fs::remove_dir_all(&fresh);
        return dir.join(module).exists().then_some(dir);
    }
    // An incomplete folder (a pip stopped half-way) gives way.
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::rename(&fresh, &dir);
    dir.join(module).exists().then_some(dir)
}

/// What `espalier check` says refusing `config`, written as `dir`'s espalier.toml; fails
/// the test when the config is accepted.
pub fn check_refuses(dir: &Path, config: &str) -> String {
    let path = dir.join("espalier.toml");
    std::fs::write(&path, config).unwrap();
    let out = espalier(&["check", "-c", path.to_str().unwrap()]);
    assert!(!out.status.success(), "check accepted:\n{config}");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `config` with `[server] admin` on a port of its own, unless it names one: the default
/// admin address would be shared by every server of a test binary.
pub fn with_own_admin(config: &str) -> (String, String) {
    if let Some(line) = config.lines().find(|l| l.trim_start().starts_with("admin")) {
        let addr = line.split('"').nth(1).unwrap_or_default().to_string();
        return (config.to_string(), addr);
    }
    let addr = format!("127.0.0.1:{}", free_port());
    let line = format!("admin = \"{addr}\"\n");
    let config = match config.find("[server]\n") {
        Some(i) => format!("{}{line}{}", &config[..i + 9], &config[i + 9..]),
        None => format!("[server]\n{line}{config}"),
    };
    (config, addr)
}

/// A peer program a test started (HAProxy, nginx…): killed and reaped when dropped, so a
/// failing assertion never leaves it running.
pub struct Stopped(pub Child);

impl Stopped {
    /// Starts `cmd` (its output where the caller put it) and waits until it listens on
    /// `addr` (within 20 s).
    pub fn listening(cmd: &mut Command, addr: SocketAddr) -> Stopped {
        let child = cmd.spawn().unwrap_or_else(|e| panic!("start {cmd:?}: {e}"));
        let started = Stopped(child);
        wait_listening(addr, Duration::from_secs(20));
        started
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Says that the calling test — or the part of it named in `reason` — cannot run here and
/// why, where the run shows it: on the terminal past the test harness's capture (a passing
/// test's own output is hidden), as `SKIPPED <test>: <reason>`, and as a line in
/// `target/tmp/skipped.txt`, which `tests/io_paths.rs` counts and prints for its run. A test
/// that skips returns at once after it; never a silent pass.
pub fn skip(reason: &str) {
    use std::io::Write as _;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    let record = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Waits until `ok` holds — an event the test can observe (a file written, a counter moved)
/// — polling every 20 ms, failing after `within` (a generous bound: never a timing claim).
pub fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`wait_for`] inside an async test: `ok` polled every 20 ms on the test's runtime, whose
/// other tasks (the client's connections) go on meanwhile.
pub async fn wait_for_async(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The paths a test app with `RECORD` set was asked for, in order (see tests/apps/test_app.py).
pub fn recorded(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The kernel's spelling of `addr` in `/proc/net/tcp*` (`0100007F:1F90`).
fn kernel_addr(addr: SocketAddr) -> String {
    let host = match addr.ip() {
        std::net::IpAddr::V4(ip) => format!("{:08X}", u32::from_le_bytes(ip.octets())),
        std::net::IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{host}:{:04X}", addr.port())
}

/// Bytes the server end of the connection from `client` to `server` has not read yet, from
/// the kernel's socket tables (`None`: no such socket).
pub fn unread_by_server(server: SocketAddr, client: SocketAddr) -> Option<u64> {
    let (local, remote) = (kernel_addr(server), kernel_addr(client));
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).unwrap_or_default();
            text.lines().skip(1).find_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.get(1) != Some(&local.as_str()) || f.get(2) != Some(&remote.as_str()) {
                    return None;
                }
                let (_, rx) = f.get(4)?.split_once(':')?;
                u64::from_str_radix(rx, 16).ok()
            })
        })
}

/// A count a load's clients bump per answer: what a test waits on to know the load has
/// started, or moved on, instead of sleeping and hoping it did.
#[derive(Clone, Default)]
pub struct Counter(Arc<std::sync::atomic::AtomicU64>);

impl Counter {
    pub fn bump(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until `n` more answers than now were counted (the load moved on).
    pub fn wait_more(&self, n: u64, what: &str) {
        let from = self.get();
        wait_for(what, Duration::from_secs(60), || self.get() >= from + n);
    }
}

/// Waits until something accepts connections on `addr` (a peer program just started),
/// failing the test after `within`.
pub fn wait_listening(addr: SocketAddr, within: Duration) {
    let deadline = Instant::now() + within;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens on {addr} after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A free admin address for a server started with `args` in `cwd`, unless it has one: given
/// (`--admin`), or in its config file (`[server] admin`); a `--dry-run` serves nothing.
fn free_admin_unless_given(args: &[&str], cwd: &Path) -> Option<String> {
    if args.iter().any(|a| *a == "--admin" || *a == "--dry-run") {
        return None;
    }
    let file = args
        .iter()
        .position(|a| *a == "-c" || *a == "--config")
        .and_then(|k| args.get(k + 1));
    let names_one = file.is_some_and(|f| {
        std::fs::read_to_string(cwd.join(f))
            .unwrap_or_default()
            .lines()
            .any(|l| l.trim_start().starts_with("admin "))
    });
    (!names_one).then(|| format!("127.0.0.1:{}", free_port()))
}

/// A running `espalier serve`. Dropping it stops the server (SIGTERM, then SIGKILL) and waits.
pub struct Server {
    pub child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
    /// The admin endpoint, for servers started from a config.
    pub admin: Option<String>,
}

impl Server {
    /// Starts `espalier serve ARGS` in `cwd` and waits until every worker reports ready.
    pub fn start(args: &[&str], cwd: &Path) -> Server {
        Server::start_env(args, cwd, &[])
    }

    /// As [`Server::start`], with extra environment variables for the server alone.
    pub fn start_env(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Server {
        Server::start_with(&[], args, cwd, env)
    }

    /// As [`Server::start_env`], run through `prefix` (a program that execs the rest, as
    /// `nsenter --net=…` does; signals then reach the server itself).
    pub fn start_with(prefix: &[&str], args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> Server {
        let bin = Path::new(env!("CARGO_BIN_EXE_espalier"));
        Server::start_program(bin, prefix, args, cwd, env)
    }

    /// As [`Server::start_with`], from the espalier binary at `bin`.
    pub fn start_program(
        bin: &Path,
        prefix: &[&str],
        args: &[&str],
        cwd: &Path,
        env: &[(&str, &str)],
    ) -> Server {
        let mut command = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        // Every server its own admin address: two on the default one would refuse to start.
        let own_admin = free_admin_unless_given(args, cwd);
        command.arg("serve").args(args);
        if let Some(addr) = &own_admin {
            command.args(["--admin", addr]);
        }
        let mut child = command
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start espalier");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let server = Server {
            child,
            log,
            admin: own_admin,
        };
        // Generous: ten thousand sites on a loaded CI machine took more than 20 s to start.
        server.wait_for_log("serving", Duration::from_secs(90));
        server
    }

    /// Starts with a config file written into `dir` (given its own admin address).
    pub fn with_config(dir: &Path, config: &str) -> Server {
        let (config, admin) = with_own_admin(config);
        let path = dir.join("espalier.toml");
        std::fs::write(&path, config).unwrap();
        let mut server = Server::start(&["-c", path.to_str().unwrap()], dir);
        server.admin = Some(admin);
        server
    }

    /// The running server's status, from its admin endpoint.
    pub fn status(&self) -> espalier::server::status::Status {
        let addr = self.admin.as_ref().expect("a server started from a config");
        let (code, body) =
            espalier::server::admin::request(addr.parse().unwrap(), "GET", "/status")
                .unwrap_or_else(|e| {
                    // The log's end only: a hoster's whole log would push the cause out of
                    // what CI shows.
                    panic!(
                        "GET /status: {e}; the server's log ends:\n{}",
                        self.log_tail(40)
                    )
                });
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }

    /// An action on the admin endpoint (`POST path`), with the token the server made.
    pub fn post(&self, path: &str) -> (u16, Vec<u8>) {
        let addr: SocketAddr = self
            .admin
            .as_ref()
            .expect("a server started from a config")
            .parse()
            .unwrap();
        let token = std::fs::read_to_string(espalier::server::admin::token_file(addr)).ok();
        espalier::server::admin::request_with_token(
            addr,
            "POST",
            path,
            token.as_deref().map(str::trim),
        )
        .unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The master's own runtime folder (`master-…` in the runtime base, a random name),
    /// which it holds a descriptor of.
    pub fn runtime_dir(&self) -> PathBuf {
        let base = espalier::server::runtime::base_dir();
        let held = std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("the master's descriptors")
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .find(|l| {
                l.parent() == Some(base.as_path())
                    && l.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("master-"))
            });
        held.expect("the master holds its runtime folder")
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The log's last `n` lines.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(n)..].join("\n")
    }

    /// Waits for a log line containing `needle`; panics with the log on timeout.
    pub fn wait_for_log(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "no log line with {needle:?} within {within:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether `pool` is in `state` with none of its processes left, draining ones included
    /// (a stopping or sleeping pool's workers finish what they hold first).
    pub fn pool_gone(&self, pool: &str, state: espalier::server::status::PoolState) -> bool {
        self.status().pools.iter().any(|p| {
            p.name == pool
                && p.state == state
                && p.workers
                    .iter()
                    .all(|w| w.pid.is_none() && w.draining.is_empty())
        })
    }

    /// Requests the workers have taken so far, as `/status` reports them (at the workers'
    /// heartbeats): what a test waits on to know a request, or a load, reached the server.
    pub fn requests_taken(&self) -> u64 {
        self.status()
            .pools
            .iter()
            .flat_map(|p| &p.workers)
            .map(|w| w.requests)
            .sum()
    }

    /// (name, pid, cpus) of each running worker of the configured pools, from the admin
    /// endpoint's status.
    pub fn workers(&self) -> Vec<(String, u32, String)> {
        Self::running(&self.status().pools)
    }

    /// The pid of the first proxy front worker of the configured pools.
    pub fn front_pid(&self) -> u32 {
        self.status()
            .pools
            .iter()
            .flat_map(|p| p.workers.clone())
            .find(|w| w.role == espalier::server::status::Role::Front)
            .and_then(|w| w.pid)
            .expect("a front worker with a pid")
    }

    /// The running workers of the dispatcher (in front of a shared address), as `workers`.
    pub fn dispatcher_workers(&self) -> Vec<(String, u32, String)> {
        Self::running(self.status().dispatcher.as_slice())
    }

    fn running(pools: &[espalier::server::status::PoolStatus]) -> Vec<(String, u32, String)> {
        use espalier::server::status::WorkerState;
        pools
            .iter()
            .flat_map(|p| {
                p.workers
                    .iter()
                    .filter(|w| w.state == WorkerState::Running)
                    .map(|w| {
                        let cpus = espalier::cpuset::CpuSet::from_ids(w.cpus.iter().copied());
                        (
                            format!("{}/{}", p.name, w.index),
                            w.pid.unwrap_or(0),
                            cpus.to_string(),
                        )
                    })
            })
            .collect()
    }

    /// Polls `ok` until it holds, for at most `within`; panics with the log otherwise.
    pub fn wait_until(&self, what: &str, within: Duration, mut ok: impl FnMut(&Server) -> bool) {
        let deadline = Instant::now() + within;
        while !ok(self) {
            assert!(
                Instant::now() < deadline,
                // Said again after the log: CI shows a long output's two ends alone.
                "{what}: not within {within:?}; log:\n{}\n({what}: not within {within:?})",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a signal to the master.
    pub fn signal(&self, sig: i32) {
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits for the master to exit; returns its exit code.
    pub fn wait_exit(&mut self, within: Duration) -> Option<i32> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGTERM);
            if self.wait_exit(Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        // The admin token the server made for its (test-only) port stays with the port
        // otherwise, as a real server's does across restarts.
        let from_log = self.log.lock().unwrap().iter().find_map(|l| {
            Some(
                l.split("admin endpoint on http://")
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .to_string(),
            )
        });
        if let Some(addr) = self.admin.clone().or(from_log).and_then(|a| a.parse().ok()) {
            let _ = std::fs::remove_file(espalier::server::admin::token_file(addr));
        }
    }
}

pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A keep-alive connection with a read buffer.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Waits until the server has read everything sent on this connection so far (its end's
    /// receive queue is empty): the event a test of a request split over writes waits for
    /// before the next piece, instead of sleeping and hoping the pieces were read apart.
    pub fn wait_read(&self) {
        let (client, server) = (
            self.stream.local_addr().unwrap(),
            self.stream.peer_addr().unwrap(),
        );
        wait_for(
            "the server reading what was sent",
            Duration::from_secs(30),
            || unread_by_server(server, client) == Some(0),
        );
    }

    pub fn open(addr: SocketAddr) -> Conn {
        Conn::over(TcpStream::connect(addr).expect("connect"))
    }

    /// A connection over `stream`, its reads bounded by 10 s.
    fn over(stream: TcpStream) -> Conn {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            buf: Vec::new(),
        }
    }

    /// A connection to `addr` from the local address `from` (`127.0.0.2`, `::1`): a client
    /// another address than the others, as allow and deny lists see it.
    pub fn open_from(from: &str, addr: SocketAddr) -> Conn {
        let domain = socket2::Domain::for_address(addr);
        let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None).unwrap();
        let local = SocketAddr::new(from.parse().expect("an address"), 0);
        socket
            .bind(&local.into())
            .expect("bind the client's address");
        socket.connect(&addr.into()).expect("connect");
        Conn::over(socket.into())
    }

    pub fn send(&mut self, raw: &[u8]) {
        self.stream.write_all(raw).unwrap();
    }

    /// Reads one response; `head_only` for responses to HEAD (no body despite Content-Length).
    pub fn read_response(&mut self, head_only: bool) -> Option<Response> {
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if !self.fill() {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .collect();
        self.buf.drain(..head_end);
        let mut r = Response {
            status,
            headers,
            body: Vec::new(),
        };
        if head_only || status == 304 || status == 100 {
            return Some(r);
        }
        if r.header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            r.body = self.read_chunked()?;
            return Some(r);
        }
        match r
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(len) => {
                while self.buf.len() < len {
                    if !self.fill() {
                        return None;
                    }
                }
                r.body = self.buf.drain(..len).collect();
            }
            None => {
                while self.fill() {}
                r.body = std::mem::take(&mut self.buf);
            }
        }
        Some(r)
    }

    /// A chunked body, decoded (extensions and trailers skipped).
    fn read_chunked(&mut self) -> Option<Vec<u8>> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                if !self.fill() {
                    return None;
                }
            };
            let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            self.buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let end = loop {
                        if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                            break i;
                        }
                        if !self.fill() {
                            return None;
                        }
                    };
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        return Some(body);
                    }
                }
            }
            while self.buf.len() < size + 2 {
                if !self.fill() {
                    return None;
                }
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 65536];
        match self.stream.read(&mut chunk) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// True when the server has closed the connection (EOF, no more bytes).
    pub fn closed(&mut self) -> bool {
        self.buf.is_empty() && !self.fill()
    }
}

/// One request on a fresh connection.
pub fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> Response {
    let mut c = Conn::open(addr);
    c.send(
        format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra_headers}Connection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    c.read_response(false).expect("a response")
}

/// The value of a `Key:\t value` line in /proc/PID/task/TID/status.
pub fn status_field(path: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(path.join("status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim_start_matches(':').trim().to_string())
        .unwrap_or_default()
}

/// Copies espalier's binary to `to`, for a test that replaces or upgrades it, by `cp` in a
/// process of its own. Copied here, the file's open write descriptor would be inherited by a
/// child another test thread forks at that moment, until the child's exec closes it; running
/// the copy in that window fails with ETXTBSY ("Text file busy").
pub fn copy_espalier(to: &Path) {
    run_ok(
        Command::new("cp")
            .arg(env!("CARGO_BIN_EXE_espalier"))
            .arg(to),
    );
}

/// Copies a directory tree, symlinks as symlinks (fixture trees hold `cpuN/nodeK` links).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), target).unwrap();
        } else if ft.is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Runs a test's async client to its end on a runtime of its own (one thread, timers on).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A GET of `path` naming `host`, on a connection of its own.
pub fn get_host(addr: SocketAddr, host: &str, path: &str) -> Response {
    get_host_from("127.0.0.1", addr, host, path).expect("an answer")
}

/// [`get_host`] from the local address `from`; `None` when the connection closed unanswered.
pub fn get_host_from(from: &str, addr: SocketAddr, host: &str, path: &str) -> Option<Response> {
    let mut c = Conn::open_from(from, addr);
    c.send(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes());
    c.read_response(false)
}

/// The tests' small HTTP app (`tests/apps/test_app.py`: `/slow…` after a second,
/// `/endless…` without end, paths recorded in `$RECORD`).
pub fn test_app() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps/test_app.py")
}

/// A site answering `NAME.example` on `port` with pool `pool`'s dynamic page.
pub fn dynamic_site(port: u16, name: &str, pool: &str) -> String {
    format!("[[site]]\nname = \"{name}\"\nbindings = [\"http://127.0.0.1:{port}:{name}.example\"]\n[[site.app]]\npool = \"{pool}\"\nhandler = \"dynamic\"\n")
}

/// Sends a GET of `url` on an HTTP/2 connection (made ready first); the answer to await.
pub async fn h2_get(
    h2: &mut h2::client::SendRequest<bytes::Bytes>,
    url: &str,
) -> h2::client::ResponseFuture {
    let ready = h2.clone().ready().await.unwrap();
    *h2 = ready;
    let req = http::Request::get(url).body(()).unwrap();
    h2.send_request(req, true).unwrap().0
}

/// An HTTP/2 connection to 127.0.0.1:`port` with prior knowledge (h2c), driven by a task of
/// the runtime it is made on; requests go by what is returned.
pub async fn h2c(port: u16) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    send
}

/// Whether an answer is the output of the tests' planted script `<?php echo 'EXECUTED'; ?>`
/// (its source, sent as a file, has the `<?php` around it).
pub fn ran_planted_script(text: &str) -> bool {
    text.contains("EXECUTED") && !text.contains("<?php")
}

/// Whether one of `pids` holds the server's end of the loopback connection from `client` to
/// `port`: its socket's inode (from /proc/net/tcp) among their descriptors. False once the
/// socket has left the table or no process owns it.
pub fn server_end_held(port: u16, client: SocketAddr, pids: &[u32]) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port_of = |field: &str| u16::from_str_radix(field.rsplit(':').next().unwrap(), 16).unwrap();
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| port_of(f[1]) == port && port_of(f[2]) == client.port())
        .map(|f| f[9].to_string())
        .filter(|inode| inode != "0")
        .collect();
    let target: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    pids.iter().any(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .any(|link| target.iter().any(|t| link.to_string_lossy() == t.as_str()))
    })
}
