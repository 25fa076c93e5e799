//! The configuration API in the master (`/config…` on the admin endpoint, `espalier
//! config`): a read gives the files' configuration as JSON with its version (`ETag`); a write
//! changes one part of the files (`config::document`), is validated as `check` validates —
//! refused with its one-line messages, nothing written — then written (each file replaced
//! whole, by a rename) and applied through the reload's diff, so that only the pools whose
//! sites or settings it changed get new workers. A write the running server cannot take
//! (an address it cannot bind) puts the files back as they were.
//!
//! Writes are one at a time: the supervisor takes one command at a time. A write that names
//! the version it read (`If-Match`) over a newer one is refused (412): a hosting panel's two
//! workers never lose one's change to the other's.
//!
//! Owns: the calls, their order and when each is answered (its state is
//! [`super::config_version`]'s). Must not touch: what the files say (`config::document`) or
//! how a configuration is switched to (`super::reload`).

use super::config_version::SERVING_WITHIN;
use super::fleet::Deferred;
use super::Supervisor;
use crate::config::document::{ConfigFiles, Part, Refusal};
use crate::config::{Config, Overlay};
use crate::server::admin::{AdminReply, ConfigCall, ConfigMethod};
use crate::server::log;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::sync::oneshot;

fn answer(status: u16, body: &Value, version: Option<String>) -> AdminReply {
    let mut body = serde_json::to_vec_pretty(body).unwrap_or_default();
    body.push(b'\n');
    AdminReply::Config {
        status,
        body,
        version,
    }
}

pub(super) fn refused(
    status: u16,
    message: impl Into<String>,
    version: Option<String>,
) -> AdminReply {
    answer(
        status,
        &json!({ "ok": false, "message": message.into() }),
        version,
    )
}

/// Writes `text` to `path` whole: beside it first, then renamed over it (a reader sees the
/// old file or the new one, never half), its mode kept; `None` removes it.
fn replace_file(path: &Path, text: Option<&str>) -> std::io::Result<()> {
    use std::io::Write;
    let Some(text) = text else {
        return std::fs::remove_file(path);
    };
    let folder = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let beside = folder.join(format!(".{}.espalier-new", name.unwrap_or_default()));
    let mut file = std::fs::File::create(&beside)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    if let Ok(old) = std::fs::metadata(path) {
        std::fs::set_permissions(&beside, old.permissions())?;
    }
    std::fs::rename(&beside, path)
}

/// A write's answer: what it did, and the new version.
pub(super) fn written(said: &str, version: &str, created: bool) -> AdminReply {
    let body = json!({ "ok": true, "message": said, "version": version });
    let status = if created { 201 } else { 200 };
    answer(status, &body, Some(version.to_string()))
}

/// Writes every change; on a failure, what was written is put back. The files as they were.
pub(super) fn write_all(
    changes: &[(PathBuf, Option<String>)],
) -> Result<Vec<(PathBuf, Option<String>)>, String> {
    let mut undo = Vec::new();
    for (path, text) in changes {
        let before = std::fs::read_to_string(path).ok();
        if let Err(e) = replace_file(path, text.as_deref()) {
            put_back(&undo);
            return Err(format!(
                "cannot write {}: {e}; nothing was changed",
                path.display()
            ));
        }
        undo.push((path.clone(), before));
    }
    // What was read of them, and the listings of their folders, are as written now.
    let written: Vec<(&Path, bool)> = (changes.iter())
        .map(|(path, text)| (path.as_path(), text.is_some()))
        .collect();
    crate::config::files_written_here(&written);
    Ok(undo)
}

pub(super) fn put_back(undo: &[(PathBuf, Option<String>)]) {
    crate::config::files_written();
    for (path, before) in undo.iter().rev() {
        if let Err(e) = replace_file(path, before.as_deref()) {
            log(
                "master",
                format!("config: cannot put {} back: {e}", path.display()),
            );
        }
    }
}

/// One change of `files`: what it did (for the answer and the audit line), and whether it
/// created its part.
fn edit(
    files: &mut ConfigFiles,
    method: ConfigMethod,
    part: &Part,
    value: &Value,
) -> Result<(String, bool), Refusal> {
    let created = match method {
        ConfigMethod::Put => files.put(part, value)?,
        ConfigMethod::Load => files.put(&Part::Whole, value)?,
        ConfigMethod::Patch => files.patch(part, value).map(|()| false)?,
        ConfigMethod::Delete => files.delete(part).map(|()| false)?,
        ConfigMethod::Get | ConfigMethod::Batch => false,
    };
    Ok((summary(method, part, created), created))
}

/// The changes one batch may hold: each is applied to the files in memory before the next,
/// so a batch is bounded as a body is.
const MAX_BATCH: usize = 1000;

/// `POST /config/batch`: the body's changes, in order, validated and applied as one — a
/// site's path and the upstream group it names, which neither passes `check` alone.
fn edit_batch(files: &mut ConfigFiles, list: &Value) -> Result<(String, bool), Refusal> {
    let Value::Array(list) = list else {
        return Err(Refusal(400, "a batch is a list of changes: [{\"method\": \"PUT\", \"path\": \"/sites/shop\", \"value\": {…}}, …]".into()));
    };
    if list.len() > MAX_BATCH {
        return Err(Refusal(413, format!("a batch of {} changes is more than {MAX_BATCH}: send it in parts, or the whole document to /config/load", list.len())));
    }
    let (mut said, mut created) = (Vec::new(), false);
    for (k, change) in list.iter().enumerate() {
        let at = |Refusal(status, m): Refusal| Refusal(status, format!("change {k}: {m}"));
        let method = match change["method"].as_str() {
            Some("PUT") => ConfigMethod::Put,
            Some("PATCH") => ConfigMethod::Patch,
            Some("DELETE") => ConfigMethod::Delete,
            _ => {
                return Err(at(Refusal(
                    400,
                    "its `method` is PUT, PATCH or DELETE".into(),
                )))
            }
        };
        let path = change["path"].as_str().unwrap_or_default();
        let path = path.strip_prefix("/config").unwrap_or(path);
        let part = Part::parse(path).map_err(|m| at(Refusal(400, m)))?;
        let (one, made) = edit(files, method, &part, &change["value"]).map_err(at)?;
        said.push(one);
        created |= made;
    }
    Ok((said.join(", "), created))
}

/// What a write did, for its answer and the audit line.
fn summary(method: ConfigMethod, part: &Part, created: bool) -> String {
    let what = match part {
        Part::Whole => "the whole configuration".to_string(),
        Part::Server => "[server]".to_string(),
        Part::All(kind) => format!("every {}", kind.key()),
        Part::One(kind, name) => format!("{} {name}", kind.key()),
    };
    let done = match (method, created) {
        (ConfigMethod::Delete, _) => "removed",
        (ConfigMethod::Patch, _) => "changed",
        (ConfigMethod::Load | ConfigMethod::Batch, _) => "replaced",
        (_, true) => "created",
        _ => "replaced",
    };
    format!("{what} {done}")
}

/// A configuration API call's outcome: its answer, or a fleet's write for etcd first.
enum Answered {
    Now(AdminReply),
    AfterEtcd(Vec<crate::server::cluster::Change>, Deferred),
}

impl Supervisor {
    /// Takes one configuration API call: a read or a refusal is answered at once; an applied
    /// write once what it changed serves — every worker it started ready (an on-demand one
    /// asleep, watching its sockets) and none it replaced still taking requests — so that the
    /// caller's next request meets the change (within [`SERVING_WITHIN`]; past it, the answer
    /// says so).
    pub(super) fn config_call(&mut self, call: ConfigCall, reply: oneshot::Sender<AdminReply>) {
        let applied = call.method != ConfigMethod::Get;
        // Its edit and its validation list the same folders and read the same files: once.
        match crate::config::files_read_once(|| self.config_answer(call)) {
            Answered::Now(answer) if applied => self.answer_when_served(answer, reply),
            Answered::Now(answer) => {
                let _ = reply.send(answer);
            }
            Answered::AfterEtcd(shared, deferred) => self.fleet_write(shared, deferred, reply),
        }
    }

    /// Sends a write's `answer` once what it changed serves (a refusal at once).
    pub(super) fn answer_when_served(
        &mut self,
        answer: AdminReply,
        reply: oneshot::Sender<AdminReply>,
    ) {
        let ok = matches!(
            answer,
            AdminReply::Config {
                status: 200 | 201,
                ..
            }
        );
        if ok {
            (self.config_api.waiting).push((answer, reply, Instant::now() + SERVING_WITHIN));
            self.answer_config_calls_served(Instant::now());
        } else {
            let _ = reply.send(answer);
        }
    }

    /// What does not serve yet as the configuration says — a slot not started, or not
    /// ready, or a dispatcher not yet holding its new hosts in every thread; a replaced worker
    /// still taking connections beside its replacement — named for the late answer and the
    /// log; `None` when every slot serves (started and ready, asleep, or its pool stopped).
    fn not_serving_yet(&self) -> Option<String> {
        let stopped = |pool: usize| self.pools[pool].stopped.is_some();
        for s in &self.slots {
            if s.asleep || stopped(s.pool) {
                continue;
            }
            match &s.current {
                None => return Some(format!("{} is not started", s.spec.name())),
                Some(c) if !c.life.is_ready() => {
                    return Some(format!("{} (pid {}) is not ready", s.spec.name(), c.pid))
                }
                // A dispatcher told new hosts has them in every thread (`hosts_live`).
                Some(c) if c.hosts_taken < c.hosts_sent => {
                    return Some(format!(
                        "{} (pid {}) has not taken its new hosts",
                        s.spec.name(),
                        c.pid
                    ))
                }
                Some(_) => {}
            }
        }
        // A replaced worker takes connections until it says its threads stopped accepting
        // (an app process never took any: its front did).
        let gone = |p: &super::procs::Proc| p.accepts_no_more || p.app.is_some();
        let draining = self.slots.iter().flat_map(|s| &s.draining);
        let replaced = self.retiring.iter().map(|(_, p)| p).chain(draining);
        replaced
            .filter(|p| !gone(p))
            .map(|p| {
                format!(
                    "the replaced worker of pool {} (pid {}) still accepts",
                    p.pool, p.pid
                )
            })
            .next()
    }

    /// A worker says its threads accept no more (an app: that it is stopping by itself).
    pub(super) fn on_stopping(&mut self, generation: u64) {
        if let Some((name, p)) = self.proc_of(generation) {
            if !p.life.is_stopping() {
                log(
                    "master",
                    format!("app {name} (pid {}) says it is stopping", p.pid),
                );
            }
            p.accepts_no_more = true;
        } else if let Some((_, p)) =
            (self.retiring.iter_mut()).find(|(_, p)| p.generation == generation)
        {
            p.accepts_no_more = true;
        }
    }

    /// Sends the answers of writes that now serve (or waited [`SERVING_WITHIN`]).
    pub(super) fn answer_config_calls_served(&mut self, now: Instant) {
        if self.config_api.waiting.is_empty() {
            return;
        }
        // A replaced worker is told to stop as soon as its successor is ready, not at the
        // next tick: the answer waits for it.
        self.retire_when_replaced();
        let unserved = self.not_serving_yet();
        let waiting = std::mem::take(&mut self.config_api.waiting);
        for (answer, reply, until) in waiting {
            if let Some(what) = unserved.as_ref().filter(|_| now >= until) {
                let late = format!("applied, and not every worker it started is ready after {}s ({what}): see espalier status", SERVING_WITHIN.as_secs());
                log("master", format!("config: {late}"));
                let _ = reply.send(refused(202, late, self.config_api.version.clone()));
            } else if unserved.is_none() {
                let _ = reply.send(answer);
            } else {
                self.config_api.waiting.push((answer, reply, until));
            }
        }
    }

    /// Answers one configuration API call (a write applied), or — a write of a fleet's
    /// shared parts — says what etcd is to take first.
    fn config_answer(&mut self, call: ConfigCall) -> Answered {
        match self.config_answer_or_refusal(call) {
            Ok(answered) => answered,
            Err(refusal) => Answered::Now(refusal),
        }
    }

    fn config_answer_or_refusal(&mut self, call: ConfigCall) -> Result<Answered, AdminReply> {
        let Some(main) = self.config.source.clone() else {
            return Err(refused(409, "espalier serve was started without -c FILE: there is no configuration file to read or change; start it with one", None));
        };
        let mut files = match ConfigFiles::read(&main) {
            Ok(f) => f,
            Err(e) => return Err(refused(500, e, None)),
        };
        // The version as read is named by a read and a refusal; an applied write names its
        // new one alone.
        let version = |files: &ConfigFiles| Some(files.version_as_read());
        let whole = matches!(call.method, ConfigMethod::Load | ConfigMethod::Batch);
        let part = match if whole {
            Ok(Part::Whole)
        } else {
            Part::parse(&call.rest)
        } {
            Ok(p) => p,
            Err(e) => return Err(refused(404, e, version(&files))),
        };
        if call.method == ConfigMethod::Get {
            return Ok(Answered::Now(match files.get(&part) {
                Some(value) => answer(200, &value, version(&files)),
                None => refused(
                    404,
                    format!("there is nothing at /config{}", call.rest),
                    version(&files),
                ),
            }));
        }
        if let Some(wanted) = call.if_match.as_deref().map(|v| v.trim().trim_matches('"')) {
            let now = files.version_as_read();
            if wanted != "*" && wanted != now {
                return Err(refused(412, format!("the configuration changed since version {wanted} was read (it is {now} now): read it again and make the change on that"), Some(now)));
            }
        }
        if call.create_only && files.get(&part).is_some() {
            return Err(refused(
                412,
                format!(
                    "/config{} is there already: change it with PUT or PATCH",
                    call.rest
                ),
                version(&files),
            ));
        }
        let value: Value = match (call.method, serde_json::from_slice(&call.body)) {
            (ConfigMethod::Delete, _) => Value::Null,
            (_, Ok(v)) => v,
            (_, Err(e)) => {
                return Err(refused(
                    400,
                    format!("the body is not JSON: {e}"),
                    version(&files),
                ))
            }
        };
        let edited = match call.method {
            ConfigMethod::Batch => edit_batch(&mut files, &value),
            method => edit(&mut files, method, &part, &value),
        };
        let (said, created) = match edited {
            Ok(done) => done,
            Err(Refusal(status, message)) => return Err(refused(status, message, version(&files))),
        };
        let changes = files.changes();
        if changes.is_empty() {
            let version = files.version_as_read();
            let body = json!({ "ok": true, "message": format!("{said}: nothing changed"), "version": version });
            return Ok(Answered::Now(answer(200, &body, Some(version))));
        }
        let main_text = files.main_text();
        // The files as this write leaves them: their version without reading them again.
        let new_version = files.version();
        if let Some(shared) = self.fleet.shared(&changes) {
            // A fleet's parts go to etcd first; what `check` refuses never gets there.
            let overlay: Overlay = changes.iter().cloned().collect();
            if let Err(e) = Config::parse_with(&main_text, &main, &self.topology, &overlay) {
                return Err(refused(400, e.to_string().trim_end(), version(&files)));
            }
            let deferred = Deferred {
                main,
                main_text,
                changes,
                version: new_version,
                call,
                said,
                created,
            };
            return Ok(Answered::AfterEtcd(shared, deferred));
        }
        let applied =
            self.write_and_apply((&main, &main_text), &new_version, &changes, (&call, &said));
        Ok(Answered::Now(applied.map_or_else(
            |(status, message)| refused(status, message, version(&files)),
            |new_version| written(&said, &new_version, created),
        )))
    }

    /// Validates the edited files as `check` does, writes them and applies them; the new
    /// version, or the status and line refusing it (the files then as they were).
    pub(super) fn write_and_apply(
        &mut self,
        (main, main_text): (&Path, &str),
        version: &str,
        changes: &[(PathBuf, Option<String>)],
        (call, said): (&ConfigCall, &str),
    ) -> Result<String, (u16, String)> {
        let overlay: Overlay = changes.iter().cloned().collect();
        let new = Config::revise_with(main_text, main, &self.topology, &overlay)
            .map_err(|e| (400, e.to_string().trim_end().to_string()))?;
        let undo = write_all(changes).map_err(|e| (500, e))?;
        let switched = self.switch_to(new, main);
        if let Err(e) = self.after_reload(switched) {
            put_back(&undo);
            return Err((409, e));
        }
        let who = format!("the admin token's holder at {}", call.who);
        self.config_api.applied(Some(version.to_string()), &who);
        log(
            "master",
            format!(
                "config: {} /config{} by {who}: {said}; version {version}",
                call.method.word(),
                call.rest
            ),
        );
        Ok(version.to_string())
    }
}
