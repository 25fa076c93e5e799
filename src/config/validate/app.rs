//! Validation of a pool's application keys: `command`, `directory`, `environment`,
//! `transport`, `health`, `upstream` and the proxy timeouts.
//!
//! Owns: those keys' rules, including the one look at the file system they need — that the
//! program and the directory exist and can be used — so that `check` refuses what `serve`
//! could not start, with the key's line. Must not touch: sites (whether a site may use an
//! activation pool is decided in [`super::site`]).

use super::super::locate::Seg;
use super::super::model::*;
use super::super::raw::RawPool;
use super::Validator;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

impl Validator {
    /// The pool's application, when it has a `command`; errors for app keys without one.
    pub(super) fn app_command(
        &mut self,
        i: usize,
        raw: &mut RawPool,
        base: &Path,
    ) -> Option<AppCommand> {
        let at = |k: &'static str| [Seg::Key("pool"), Seg::Index(i), Seg::Key(k)];
        let Some(command) = raw.command.take() else {
            let stray = [
                ("directory", raw.directory.is_some()),
                ("environment", raw.environment.is_some()),
                ("transport", raw.transport.is_some()),
                ("health", raw.health.is_some()),
                ("warmup", raw.warmup.is_some()),
                ("upstream", raw.upstream.is_some()),
                ("connect_timeout", raw.connect_timeout.is_some()),
                ("response_timeout", raw.response_timeout.is_some()),
                ("script_extensions", raw.script_extensions.is_some()),
                ("protocol", raw.protocol.is_some()),
                (
                    "max_requests_per_process",
                    raw.max_requests_per_process.is_some(),
                ),
                ("queue_length", raw.queue_length.is_some()),
                ("queue_timeout", raw.queue_timeout.is_some()),
                ("isolation", raw.isolation.is_some()),
                (
                    "pass_underscored_fields",
                    raw.pass_underscored_fields.is_some(),
                ),
                ("buffer", raw.buffer.is_some()),
                ("cache_responses", raw.cache_responses.is_some()),
            ];
            for (key, set) in stray {
                if set {
                    self.err(&at(key), "applies only to a pool that runs an application; add command = [\"program\", \"arg\", …] or remove this key");
                }
            }
            return None;
        };
        let directory = match raw.directory.take() {
            None => base.to_path_buf(),
            Some(d) => {
                let p = Path::new(&d);
                let dir = if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    base.join(p)
                };
                match std::fs::metadata(&dir) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => self.err(&at("directory"), format!("{} is a file, not a directory; name the directory the application runs in", dir.display())),
                    Err(e) => self.err(&at("directory"), format!("{} cannot be used ({e}); create it, or fix the path (relative paths are from the config file's directory)", dir.display())),
                }
                dir
            }
        };
        let mut environment = Vec::new();
        for (k, v) in raw.environment.take().unwrap_or_default() {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                self.err(&at("environment"), format!("`{k}` cannot be an environment variable (no `=`, no NUL, not empty); rename it"));
            } else {
                environment.push((k, v));
            }
        }
        match command.first() {
            None => self.err(&at("command"), "is empty; write the program and its arguments, like [\"gunicorn\", \"--bind\", \"fd://3\", \"app:app\"]"),
            Some(program) => {
                let path = environment
                    .iter()
                    .find(|(k, _)| k == "PATH")
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var("PATH").ok())
                    .unwrap_or_default();
                if let Err(why) = find_program(program, &directory, &path) {
                    self.err(&at("command"), why);
                }
            }
        }
        let transport = self.choice(
            &at("transport"),
            raw.transport.take(),
            Transport::Proxy,
            &[
                ("activation", Transport::Activation),
                ("proxy", Transport::Proxy),
                ("fastcgi", Transport::FastCgi),
            ],
        );
        let health = raw.health.take();
        if let Some(h) = &health {
            if !h.starts_with('/') || h.bytes().any(|b| b <= b' ' || b == 0x7f) {
                self.err(
                    &at("health"),
                    format!("`{h}` is not a URL path; write it like \"/healthz\""),
                );
            }
        }
        if transport == Transport::FastCgi && health.is_some() {
            self.err(&at("health"), "a FastCGI app answers FastCGI, not HTTP, so an HTTP health URL cannot reach it; remove `health` (a process is ready when it accepts connections)");
        }
        let warmup = raw.warmup.take().unwrap_or_default();
        if let Some(p) = warmup
            .iter()
            .find(|p| !p.starts_with('/') || p.bytes().any(|b| b <= b' ' || b == 0x7f))
        {
            self.err(
                &at("warmup"),
                format!("`{p}` is not a URL path; write them like [\"/\", \"/catalog\"]"),
            );
        }
        if transport == Transport::FastCgi && !warmup.is_empty() {
            self.err(&at("warmup"), "a FastCGI app answers FastCGI, not HTTP, so warm-up requests cannot reach it; remove `warmup`");
        }
        if transport == Transport::FastCgi && raw.pass_underscored_fields == Some(true) {
            self.err(&at("pass_underscored_fields"), "a FastCGI app gets the request's fields as CGI variables, where `X_A` and `X-A` are the same HTTP_X_A, so fields with `_` are never passed; remove it (or speak HTTP: transport = \"proxy\")");
        }
        let proxy_keys = [
            ("upstream", raw.upstream.is_some()),
            ("connect_timeout", raw.connect_timeout.is_some()),
            ("response_timeout", raw.response_timeout.is_some()),
            (
                "max_requests_per_process",
                raw.max_requests_per_process.is_some(),
            ),
            ("queue_length", raw.queue_length.is_some()),
            ("queue_timeout", raw.queue_timeout.is_some()),
            (
                "pass_underscored_fields",
                raw.pass_underscored_fields.is_some(),
            ),
            ("buffer", raw.buffer.is_some()),
            ("cache_responses", raw.cache_responses.is_some()),
        ];
        if transport == Transport::Activation {
            for (key, set) in proxy_keys {
                if set {
                    self.err(&at(key), "applies only to transport = \"proxy\" (with activation the application accepts the connections itself); remove it");
                }
            }
        }
        // A pool's `upstream` is how its own processes listen; an address here is a user
        // looking for the way to reach a service espalier does not start.
        let written = raw.upstream.take();
        if let Some(w) = written.as_deref().filter(|w| !matches!(*w, "tcp" | "unix")) {
            self.err(&at("upstream"), format!("`{w}` is not one of \"tcp\", \"unix\" (how this pool's own processes listen); to forward to a server espalier does not start, write upstream = \"{w}\" on the site's [[site.app]] (or define an [[upstream]] group and name it there), and remove it here"));
        }
        let upstream = self.app_upstream(i, written, &command);
        let connect_timeout = self.nonzero_duration(
            &at("connect_timeout"),
            raw.connect_timeout.take(),
            Duration::from_secs(5),
        );
        let response_timeout = self.nonzero_duration(
            &at("response_timeout"),
            raw.response_timeout.take(),
            Duration::from_secs(60),
        );
        let script_extensions = match raw.script_extensions.take() {
            Some(_) if transport != Transport::FastCgi => {
                self.err(&at("script_extensions"), "applies only to transport = \"fastcgi\" (the files a FastCGI app may run); remove it");
                Vec::new()
            }
            None => vec![".php".to_string()],
            Some(list) => {
                let bad = list.iter().find(|e| {
                    e.len() < 2 || !e.starts_with('.') || e.bytes().any(|b| b == b'/' || b <= b' ')
                });
                if let Some(e) = bad {
                    self.err(
                        &at("script_extensions"),
                        format!("`{e}` is not a file extension; write them like [\".php\"]"),
                    );
                } else if list.is_empty() {
                    self.err(&at("script_extensions"), "is empty, so the app could run nothing; write the extensions of its scripts, like [\".php\"]");
                }
                list
            }
        };
        let protocol = self.app_protocol(i, raw, transport, &health, &warmup);
        let backpressure = self.backpressure(i, raw);
        let buffer = self.app_buffering(i, raw, (transport, protocol), backpressure);
        let cache_responses = self.app_response_cache(i, raw, (transport, protocol));
        let isolation = raw.isolation.take().and_then(|r| self.isolation(i, r));
        // Without a network, the front reaches the app by its socket or inherited listeners
        // alone: a loopback port in its own namespace is nobody's to reach.
        let port = upstream == UpstreamKind::Tcp && transport != Transport::Activation;
        // A private /tmp hides what the machine's held, the app's own folder included.
        let private_tmp = isolation.as_ref().is_some_and(|n| n.private_tmp.is_some());
        if private_tmp && crate::config::isolation::under_private_tmp(&directory) {
            self.err(&[Seg::Key("pool"), Seg::Index(i), Seg::Key("isolation"), Seg::Key("tmp")], format!("\"private\" hides the machine's /tmp and /var/tmp, and the app's directory {} is there; move the app out of them, or share /tmp", directory.display()));
        }
        if isolation.as_ref().is_some_and(|n| n.no_network) && port {
            self.err(&[Seg::Key("pool"), Seg::Index(i), Seg::Key("isolation"), Seg::Key("network")], "\"none\" leaves the app a loopback of its own, where espalier cannot reach its port; give it a unix socket ({socket} in the command, or upstream = \"unix\"), or remove the key");
        }
        Some(AppCommand {
            isolation,
            protocol,
            pass_underscored_fields: raw.pass_underscored_fields.take().unwrap_or(false),
            backpressure,
            buffer,
            cache_responses,
            command,
            directory,
            environment,
            transport,
            health,
            warmup,
            upstream,
            connect_timeout,
            response_timeout,
            script_extensions,
        })
    }
}

impl Validator {
    /// `upstream`: how the app's processes listen. Unwritten, it follows the command: one
    /// that names `{socket}` (and not `{port}`) listens on a unix socket — the cheaper hop
    /// (bench/app.sh: 0.80× the proxy's CPU per request of loopback TCP) — else on a port.
    /// Written, it must agree with the command.
    fn app_upstream(
        &mut self,
        i: usize,
        written: Option<String>,
        command: &[String],
    ) -> UpstreamKind {
        let at = [Seg::Key("pool"), Seg::Index(i), Seg::Key("upstream")];
        let names = |p: &str| command.iter().any(|a| a.contains(p));
        let (socket, port) = (names("{socket}"), names("{port}"));
        let inferred = if socket && !port {
            UpstreamKind::Unix
        } else {
            UpstreamKind::Tcp
        };
        let written = written.filter(|w| matches!(w.as_str(), "tcp" | "unix"));
        let upstream = self.choice(
            &at,
            written,
            inferred,
            &[("tcp", UpstreamKind::Tcp), ("unix", UpstreamKind::Unix)],
        );
        match upstream {
            UpstreamKind::Tcp if socket => self.err(&at, "is \"tcp\", and `command` names `{socket}`, a unix socket's path, which only a pool listening on one has; remove `upstream` (a command that names {socket} is given one) or write {port}"),
            UpstreamKind::Unix if port => self.err(&at, "is \"unix\", and `command` names `{port}`, which only a pool listening on TCP has; write {socket} (or read ESPALIER_SOCKET) instead"),
            _ => {}
        }
        upstream
    }

    /// `protocol`: HTTP/2 (h2c) is for proxied apps, whose readiness is then their accepting
    /// connections — the health and warm-up requests speak HTTP/1.1.
    fn app_protocol(
        &mut self,
        i: usize,
        raw: &mut RawPool,
        transport: Transport,
        health: &Option<String>,
        warmup: &[String],
    ) -> crate::config::upstream::Protocol {
        use crate::config::upstream::Protocol;
        let at = |k: &'static str| [Seg::Key("pool"), Seg::Index(i), Seg::Key(k)];
        let written = raw.protocol.take();
        let protocol = self.choice(
            &at("protocol"),
            written,
            Protocol::Http1,
            &Protocol::CHOICES,
        );
        if protocol == Protocol::Http2 {
            if transport != Transport::Proxy {
                self.err(&at("protocol"), format!("applies only to transport = \"proxy\" (an app spoken to in HTTP/2 is forwarded to; this pool's transport is \"{}\"); remove it", transport.name()));
            } else if health.is_some() {
                self.err(&at("health"), "is requested in HTTP/1.1, and this pool's apps speak HTTP/2 (protocol = \"http2\"); remove `health` (a process is ready when it accepts connections)");
            } else if !warmup.is_empty() {
                self.err(&at("warmup"), "is requested in HTTP/1.1, and this pool's apps speak HTTP/2 (protocol = \"http2\"); remove `warmup`");
            }
        }
        protocol
    }

    /// `max_requests_per_process`, and the queue beyond it (`queue_length`, `queue_timeout`).
    fn backpressure(&mut self, i: usize, raw: &mut RawPool) -> Option<Backpressure> {
        let at = |k: &'static str| [Seg::Key("pool"), Seg::Index(i), Seg::Key(k)];
        let cap = raw.max_requests_per_process.take();
        let (length, timeout) = (raw.queue_length.take(), raw.queue_timeout.take());
        let Some(cap) = cap else {
            for (key, set) in [
                ("queue_length", length.is_some()),
                ("queue_timeout", timeout.is_some()),
            ] {
                if set {
                    self.err(&at(key), "shapes the queue of requests beyond max_requests_per_process, which is not set; add max_requests_per_process = 1 (a sync worker) or remove it");
                }
            }
            return None;
        };
        let max_requests_per_process = self
            .positive(&at("max_requests_per_process"), Some(cap), 1)
            .min(u64::from(u32::MAX)) as u32;
        let queue_length = match length {
            None => DEFAULT_QUEUE_LENGTH,
            Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => n as u32,
            Some(n) => {
                self.err(
                    &at("queue_length"),
                    format!(
                        "{n} is not a number of requests; use 0 (no queue: 503 at once) or more"
                    ),
                );
                DEFAULT_QUEUE_LENGTH
            }
        };
        let queue_timeout =
            self.nonzero_duration(&at("queue_timeout"), timeout, DEFAULT_QUEUE_TIMEOUT);
        Some(Backpressure {
            max_requests_per_process,
            queue_length,
            queue_timeout,
        })
    }
}

/// Finds `program` as `execvp` would: a name with a `/` relative to the app's directory, else
/// on `path`. Says why it cannot be run, with the fix.
pub(crate) fn find_program(program: &str, directory: &Path, path: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| -> Result<(), String> {
        let m = std::fs::metadata(p).map_err(|e| e.to_string())?;
        if !m.is_file() {
            return Err("not a file".into());
        }
        if m.permissions().mode() & 0o111 == 0 {
            return Err("not executable; chmod +x it".into());
        }
        Ok(())
    };
    if program.contains('/') {
        let p = directory.join(program);
        return runnable(&p).map(|()| p.clone()).map_err(|e| {
            format!(
                "`{program}` cannot be run ({}: {e}); fix the path (relative to the pool's `directory`)",
                p.display()
            )
        });
    }
    for dir in path.split(':').filter(|d| !d.is_empty()) {
        let p = Path::new(dir).join(program);
        if runnable(&p).is_ok() {
            return Ok(p);
        }
    }
    Err(format!("`{program}` is not an executable program on PATH; install it, or give its full path as the first item of `command`"))
}
