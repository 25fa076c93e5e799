//! The fleet's news acted on by the supervisor (its data is `fleet`'s): etcd's copy written
//! into the cluster's folder and applied through the reload's diff, older revisions refused;
//! the configuration API's writes of shared parts sent to etcd first, in a transaction that
//! fails if another member changed them, then applied here as a write of files is.
//!
//! Owns: the order of those steps and what the log says of them. Must not touch: etcd (the
//! task's: `crate::server::cluster`) or what a part means (the config's).

use super::config_api::{put_back, refused, write_all, written};
use super::event::Event;
use super::fleet::{file_of, part_at, Deferred, Pending, REVISION_FILE};
use super::Supervisor;
use crate::config::cluster::KINDS;
use crate::config::{Config, Overlay};
use crate::server::admin::AdminReply;
use crate::server::cluster::{self, Change, News, Part, Written};
use crate::server::log;
use std::path::PathBuf;

/// Files of the copy written with their new texts (`None`: removed).
type FileChanges = Vec<(PathBuf, Option<String>)>;
use std::time::SystemTime;
use tokio::sync::oneshot;

impl Supervisor {
    /// What the fleet's task said.
    pub(super) fn on_cluster(&mut self, news: News) {
        match news {
            News::Connected(client, lease) => {
                if let Some((since, _)) = self.fleet.unreachable.take() {
                    let for_s = since.elapsed().map_or(0, |d| d.as_secs());
                    log(
                        "master",
                        format!("cluster: etcd is reachable again (after {for_s} s)"),
                    );
                } else {
                    log("master", "cluster: connected to etcd");
                }
                self.fleet.set_link(Some(((*client).clone(), lease)));
                self.fleet.client = Some((*client, lease));
            }
            News::Copy {
                revision,
                parts,
                whole,
            } => self.take_copy(revision, parts, whole),
            News::Members(members) => self.fleet.members = members,
            News::Unreachable(cause) => {
                self.fleet.client = None;
                self.fleet.set_link(None);
                let said = self.fleet.unreachable.as_ref().map(|u| u.1.as_str());
                if said != Some(cause.as_str()) {
                    log("master", format!("cluster: {cause}; serving the configuration of revision {} until etcd answers again", self.fleet.applied));
                    let since = self
                        .fleet
                        .unreachable
                        .as_ref()
                        .map_or(SystemTime::now(), |u| u.0);
                    self.fleet.unreachable = Some((since, cause));
                }
            }
            News::Written { id, outcome } => self.on_fleet_written(id, outcome),
            News::Tickets(sealed, revision) => self.on_fleet_tickets(sealed, revision),
            News::TicketsPublished(outcome) => self.on_tickets_published(outcome),
            News::Files(files) => self.on_fleet_files(files),
            News::Locks(locks) => self.fleet.locks = locks,
        }
    }

    /// Brings the copy up to `revision` with `parts` (all of them when `whole`), validated as
    /// `check` validates before a file is written, and applies it. An older revision than
    /// the one applied is refused: after a partition or a restored etcd, this member never
    /// goes back.
    fn take_copy(&mut self, revision: i64, parts: Vec<Part>, whole: bool) {
        let Some(spec) = self.fleet.spec.clone() else {
            return;
        };
        if revision < self.fleet.applied {
            log("master", format!("cluster: etcd is at revision {revision}, older than the {} applied here (a restored or partitioned etcd?): kept the newer", self.fleet.applied));
            return;
        }
        let mut changes: Vec<(PathBuf, Option<String>)> = Vec::new();
        let mut named = std::collections::HashSet::new();
        for p in &parts {
            let path = file_of(&spec.folder, p.kind, &p.name);
            named.insert(path.clone());
            let now = std::fs::read_to_string(&path).ok();
            if now != p.text {
                changes.push((path, p.text.clone()));
            }
            match &p.text {
                Some(_) => self.fleet.seen.insert((p.kind, p.name.clone()), p.revision),
                None => self.fleet.seen.remove(&(p.kind, p.name.clone())),
            };
        }
        if whole {
            // A part etcd no longer holds goes from the copy too.
            for (kind, _) in KINDS.iter().enumerate() {
                let folder = spec.folder.join(KINDS[kind].0);
                for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                    let path = entry.path();
                    if part_at(&spec.folder, &path).is_some() && !named.contains(&path) {
                        changes.push((path, None));
                    }
                }
            }
        }
        if !changes.is_empty() {
            match self.apply_copy(&changes) {
                Ok((line, refused)) => log(
                    "master",
                    format!(
                        "cluster: revision {revision} applied ({} part(s) changed{}): {line}",
                        changes.len() - refused,
                        match refused {
                            0 => String::new(),
                            n => format!(", {n} refused"),
                        }
                    ),
                ),
                Err(e) => {
                    log("master", format!("cluster: revision {revision} refused, the running configuration keeps serving: {e}"));
                    return;
                }
            }
        }
        self.fleet.applied = revision;
        let _ = std::fs::create_dir_all(&spec.folder).and_then(|()| {
            std::fs::write(spec.folder.join(REVISION_FILE), format!("{revision}\n"))
        });
        self.say_revision(revision);
    }

    /// Validates the configuration the copy's `changes` make — leaving out each changed part
    /// `check` refuses, said in the log, so that one bad part (written into etcd by hand)
    /// holds up no other — writes the rest and switches to it. How many parts were refused.
    fn apply_copy(
        &mut self,
        changes: &[(PathBuf, Option<String>)],
    ) -> Result<(String, usize), String> {
        let main = self.config.source.clone().ok_or("no configuration file")?;
        let text = std::fs::read_to_string(&main)
            .map_err(|e| format!("cannot read {}: {e}", main.display()))?;
        let (new, changes, refused) = self.checked_copy(&main, &text, changes.to_vec())?;
        if changes.is_empty() {
            return Ok(("nothing else changed".into(), refused));
        }
        for (kind, _) in KINDS {
            let folder = self.fleet.spec.as_ref().map(|s| s.folder.join(kind));
            let _ = folder.map(std::fs::create_dir_all);
        }
        let undo = write_all(&changes)?;
        let switched = self.switch_to(new, &main);
        match self.after_reload(switched) {
            Ok(line) => {
                let version = crate::config::document::version_on_disk(&main).ok();
                self.config_api.applied(version, "the fleet (etcd)");
                Ok((line, refused))
            }
            Err(e) => {
                put_back(&undo);
                Err(e)
            }
        }
    }

    /// The configuration `changes` make, checked as `check` checks: a changed part an error
    /// names is left out (said once, with the error) and the rest checked again, until what
    /// is left passes; an error that names no changed part refuses them all. The
    /// configuration, the changes kept, and how many were left out.
    fn checked_copy(
        &self,
        main: &std::path::Path,
        text: &str,
        mut changes: Vec<(PathBuf, Option<String>)>,
    ) -> Result<(Config, FileChanges, usize), String> {
        let absolute =
            |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut refused = 0;
        loop {
            let overlay: Overlay = changes.iter().cloned().collect();
            let errors = match Config::parse_with(text, main, &self.topology, &overlay) {
                Ok(new) => return Ok((new, changes, refused)),
                Err(errors) => errors,
            };
            let named = |path: &PathBuf| {
                let path = absolute(path);
                errors
                    .0
                    .iter()
                    .any(|e| absolute(std::path::Path::new(&e.file)) == path)
            };
            let (bad, good): (Vec<_>, Vec<_>) = changes
                .into_iter()
                .partition(|(path, text)| text.is_some() && named(path));
            if bad.is_empty() {
                return Err(errors.to_string().trim_end().to_string());
            }
            for (path, _) in &bad {
                let path = absolute(path);
                let why = (errors.0.iter())
                    .filter(|e| absolute(std::path::Path::new(&e.file)) == path)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ");
                log(
                    "master",
                    format!("cluster: a part is refused, the others go on: {why}"),
                );
            }
            refused += bad.len();
            changes = good;
            if changes.is_empty() {
                let overlay = Overlay::new();
                let same = Config::parse_with(text, main, &self.topology, &overlay);
                return same
                    .map(|c| (c, Vec::new(), refused))
                    .map_err(|e| e.to_string());
            }
        }
    }

    /// Tells the fleet which revision this member serves (its member key).
    fn say_revision(&self, revision: i64) {
        let (Some(spec), Some((client, lease))) =
            (self.fleet.spec.clone(), self.fleet.client.clone())
        else {
            return;
        };
        let mut client = client;
        tokio::spawn(async move {
            let said = serde_json::json!({ "revision": revision, "at": humantime::format_rfc3339_seconds(SystemTime::now()).to_string() });
            let _ = cluster::put_member(&mut client, &spec, lease, &said).await;
        });
    }

    /// Sends a configuration API write's shared parts to etcd; its answer waits for etcd's.
    pub(super) fn fleet_write(
        &mut self,
        shared: Vec<Change>,
        write: Deferred,
        reply: oneshot::Sender<AdminReply>,
    ) {
        let (Some(spec), Some((client, _))) = (self.fleet.spec.clone(), self.fleet.client.clone())
        else {
            let cause = self
                .fleet
                .unreachable
                .as_ref()
                .map_or("not connected yet".to_string(), |u| u.1.clone());
            let _ = reply.send(refused(503, format!("the fleet's configuration cannot be changed while etcd cannot be reached ({cause}): try again when `espalier status` says the cluster is reachable"), Some(write.version)));
            return;
        };
        let pending = Pending { write, reply };
        let id = self.fleet.next_write;
        self.fleet.next_write += 1;
        self.fleet.pending.insert(id, pending);
        let events = self.events.clone();
        let mut client = client;
        tokio::spawn(async move {
            let outcome = cluster::write(&mut client, &spec, shared).await;
            let _ = events.send(Event::Cluster(News::Written { id, outcome }));
        });
    }

    /// etcd took a write (it is applied here as the other members apply it: the copy first,
    /// then the switch) or refused it.
    fn on_fleet_written(&mut self, id: u64, outcome: Written) {
        let Some(Pending { write: w, reply }) = self.fleet.pending.remove(&id) else {
            return;
        };
        let refused = |status, message: String| refused(status, message, Some(w.version.clone()));
        match outcome {
            Written::Done(revision) => {
                let applied = self.write_and_apply(
                    (&w.main, &w.main_text),
                    &w.version,
                    &w.changes,
                    (&w.call, &w.said),
                );
                let answer = match applied {
                    Ok(version) => {
                        log(
                            "master",
                            format!("cluster: the write is etcd's revision {revision}"),
                        );
                        written(&w.said, &version, w.created)
                    }
                    Err((status, message)) => refused(status, message),
                };
                self.answer_when_served(answer, reply);
            }
            Written::Changed => {
                let _ = reply.send(refused(412, "another member changed these parts since this one saw them: read them again and make the change on that".into()));
            }
            Written::Failed(cause) => {
                let _ = reply.send(refused(
                    503,
                    format!("the fleet's configuration could not be changed: {cause}"),
                ));
            }
        }
    }
}
