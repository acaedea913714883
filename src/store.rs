//! The thread store: one small JSON document per AG-UI thread, `<state-dir>/threads/<key>.json`.
//!
//! Documents are loaded lazily (nothing is scanned at start-up) and replaced atomically (write to a
//! temporary file in the same directory, fsync, rename), so a crash at any instant leaves either the
//! old or the new document, never a torn one. A per-thread [`Slot`] mutex serializes everything that
//! reads and writes one thread. The layout is the reference adapter's; it never holds conversation
//! text or credentials.

use crate::error::{Error, Msg};
use crate::ids;
use crate::modes::RunMode;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThreadDoc {
    pub(crate) schema_version: u32,
    pub(crate) thread_id: String,
    pub(crate) context_id: String,
    pub(crate) cwd: String,
    pub(crate) user_id: Option<String>,
    pub(crate) iac_code_session_id: Option<String>,
    pub(crate) execution: Option<Execution>,
    #[serde(default)]
    pub(crate) run_digests: RunDigests,
    #[serde(default)]
    pub(crate) applied_resume_digests: Vec<AppliedDigest>,
    #[serde(default)]
    pub(crate) terminal_execution_ids: Vec<String>,
}

/// How many idempotency records a thread keeps: the newest ones, so the file stays small whatever
/// the number of runs (a retry comes within seconds, not hundreds of runs later).
pub(crate) const MAX_RUN_DIGESTS: usize = 256;

/// How many ended executions a thread remembers (the cancel extension answers `already_terminal`
/// for them, 404 for older ones; a client cancels within seconds of a run, not 64 runs later).
pub(crate) const MAX_TERMINAL_EXECUTIONS: usize = 64;

/// `runDigests`: runId → request digest, the reference's JSON object, kept in insertion order (the
/// object's key order in the file is that order) and pruned to the newest [`MAX_RUN_DIGESTS`].
/// A file the reference wrote (keys sorted) loads too; its order is then simply the sorted one.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunDigests(Vec<(String, String)>);

impl RunDigests {
    pub(crate) fn get(&self, run_id: &str) -> Option<&String> {
        self.0.iter().find(|(k, _)| k == run_id).map(|(_, v)| v)
    }

    /// Records (or refreshes) a run's digest as the newest, dropping the oldest beyond the cap.
    pub(crate) fn insert(&mut self, run_id: String, digest: String) {
        self.0.retain(|(k, _)| *k != run_id);
        self.0.push((run_id, digest));
        let excess = self.0.len().saturating_sub(MAX_RUN_DIGESTS);
        self.0.drain(..excess);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The run admitted last on the thread (the run of its current execution, if any).
    pub(crate) fn newest(&self) -> Option<&str> {
        self.0.last().map(|(k, _)| k.as_str())
    }
}

impl Serialize for RunDigests {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RunDigests {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RunDigests;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of runId to digest")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<RunDigests, A::Error> {
                let mut out = RunDigests::default();
                while let Some((k, v)) = m.next_entry::<String, String>()? {
                    out.insert(k, v);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Execution {
    pub(crate) execution_id: String,
    pub(crate) ros_invocation_id: String,
    pub(crate) task_id: Option<String>,
    #[serde(default)]
    pub(crate) pending: BTreeMap<String, Pending>,
    #[serde(default)]
    pub(crate) pipeline_open_steps: Vec<String>,
    #[serde(default)]
    pub(crate) pipeline_sequence: u64,
    #[serde(default)]
    pub(crate) text_snapshot_digests: Vec<String>,
    /// The client's `runMode` on the turn that started the execution, sent again with every
    /// answer (the kernel decides the mode per message: `iac_code/a2a/request_mode.py`).
    #[serde(default, skip_serializing_if = "Recorded::is_absent")]
    pub(crate) run_mode: Recorded<RunMode>,
    /// The client's `pipelineName`, recorded like `run_mode`.
    #[serde(default, skip_serializing_if = "Recorded::is_absent")]
    pub(crate) pipeline_name: Recorded<String>,
}

/// A choice of the turn that started an execution, as its state file keeps it: a key that is
/// present (even `null`) was recorded; an absent one was not (a file the reference wrote, which
/// keeps no mode), so the answering request's own choice is used.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum Recorded<T> {
    /// Not in the file: the file's writer keeps no such choice.
    #[default]
    Absent,
    /// What the client gave (`None`: nothing, and nothing is sent).
    Given(Option<T>),
}

impl<T> Recorded<T> {
    fn is_absent(&self) -> bool {
        matches!(self, Recorded::Absent)
    }

    /// What was recorded, else `fallback`.
    pub(crate) fn or(self, fallback: Option<T>) -> Option<T> {
        match self {
            Recorded::Absent => fallback,
            Recorded::Given(v) => v,
        }
    }

    pub(crate) fn as_deref(&self) -> Recorded<&T::Target>
    where
        T: std::ops::Deref,
    {
        match self {
            Recorded::Absent => Recorded::Absent,
            Recorded::Given(v) => Recorded::Given(v.as_deref()),
        }
    }
}

impl<T: Serialize> Serialize for Recorded<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Recorded::Absent => s.serialize_none(),
            Recorded::Given(v) => v.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Recorded<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(Recorded::Given)
    }
}

/// A pending interrupt: the reduced input envelope, whether it is a pipeline side wait, and when it
/// expires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pending {
    pub(crate) value: Value,
    #[serde(default)]
    pub(crate) sideband: bool,
    #[serde(default)]
    pub(crate) expires_at: Option<String>,
    #[serde(default)]
    pub(crate) expires_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppliedDigest {
    pub(crate) digest: String,
    pub(crate) execution_id: String,
    pub(crate) interrupt_id: String,
}

impl ThreadDoc {
    pub(crate) fn new(thread_id: &str, cwd: &str, user_id: Option<&str>) -> ThreadDoc {
        ThreadDoc {
            schema_version: 1,
            thread_id: thread_id.to_string(),
            context_id: ids::context_id(thread_id),
            cwd: cwd.to_string(),
            user_id: user_id.map(String::from),
            iac_code_session_id: None,
            execution: None,
            run_digests: RunDigests::default(),
            applied_resume_digests: Vec::new(),
            terminal_execution_ids: Vec::new(),
        }
    }

    pub(crate) fn is_terminal(&self, execution_id: &str) -> bool {
        self.terminal_execution_ids
            .iter()
            .any(|e| e == execution_id)
    }

    /// Ends the current execution: no pending inputs, no live task, its id remembered as terminal.
    pub(crate) fn mark_terminal(&mut self) {
        if let Some(exec) = &mut self.execution {
            exec.pending.clear();
            exec.task_id = None;
            exec.pipeline_open_steps.clear();
            if !self.terminal_execution_ids.contains(&exec.execution_id) {
                self.terminal_execution_ids.push(exec.execution_id.clone());
            }
        }
        self.prune_ended_executions();
    }

    /// Keeps the newest [`MAX_TERMINAL_EXECUTIONS`] ended executions and the applied-answer
    /// records of only those and the current one, so the file stays small whatever the run count.
    fn prune_ended_executions(&mut self) {
        let excess = self
            .terminal_execution_ids
            .len()
            .saturating_sub(MAX_TERMINAL_EXECUTIONS);
        self.terminal_execution_ids.drain(..excess);
        let current = self.execution.as_ref().map(|e| e.execution_id.as_str());
        let kept = &self.terminal_execution_ids;
        self.applied_resume_digests
            .retain(|a| Some(a.execution_id.as_str()) == current || kept.contains(&a.execution_id));
    }

    pub(crate) fn pending_count(&self) -> usize {
        self.execution.as_ref().map_or(0, |e| e.pending.len())
    }
}

/// A run in progress on a thread (at most one).
pub(crate) struct ActiveRun {
    pub(crate) execution_id: String,
    pub(crate) task_id: Mutex<Option<String>>,
    /// Set by the cancel extension; the run ends with `RUN_ERROR CANCELLED`.
    pub(crate) cancelled: AtomicBool,
    /// Set once `CancelTask` was sent, so a disconnect and an error do not both send it.
    pub(crate) cancel_sent: AtomicBool,
}

impl ActiveRun {
    pub(crate) fn new(execution_id: &str, task_id: Option<String>) -> Arc<ActiveRun> {
        Arc::new(ActiveRun {
            execution_id: execution_id.to_string(),
            task_id: Mutex::new(task_id),
            cancelled: AtomicBool::new(false),
            cancel_sent: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) active: Option<Arc<ActiveRun>>,
}

/// Modes of the state directories and files: they hold thread bindings (which user and workspace
/// drive which kernel session), so only the adapter's user may read them.
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

pub struct Store {
    /// The state dir; documents live in its `threads/`.
    root: PathBuf,
    dir: PathBuf,
    slots: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
}

impl Store {
    pub fn new(state_dir: PathBuf) -> Store {
        Store {
            dir: state_dir.join("threads"),
            root: state_dir,
            slots: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn path_of(&self, thread_id: &str) -> PathBuf {
        self.dir
            .join(format!("{}.json", ids::thread_key(thread_id)))
    }

    /// The thread's mutex. Hold it for every read-modify-write of the thread.
    pub(crate) fn slot(&self, thread_id: &str) -> Arc<Mutex<Slot>> {
        self.slots
            .lock()
            .entry(thread_id.to_string())
            .or_default()
            .clone()
    }

    /// Forgets an idle slot so the map only holds threads in use. Safe because a slot is only handed
    /// out under the map lock: if nobody else holds it now, nobody can.
    pub(crate) fn release(&self, thread_id: &str) {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get(thread_id) {
            if Arc::strong_count(slot) == 1 && slot.lock().active.is_none() {
                slots.remove(thread_id);
            }
        }
    }

    pub fn active_runs(&self) -> usize {
        self.slots
            .lock()
            .values()
            .filter(|s| s.try_lock().is_none_or(|s| s.active.is_some()))
            .count()
    }

    /// Reads a thread's document; `Ok(None)` when the thread is new.
    pub(crate) fn load(&self, thread_id: &str) -> Result<Option<ThreadDoc>, Error> {
        let path = self.path_of(thread_id);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                log::error!("cannot read thread state {}: {e}", path.display());
                return Err(unavailable());
            }
        };
        let doc: ThreadDoc = serde_json::from_slice(&bytes).map_err(|e| {
            log::error!("thread state {} does not parse: {e}", path.display());
            unavailable()
        })?;
        if doc.thread_id != thread_id {
            log::error!(
                "thread state {} belongs to another thread id",
                path.display()
            );
            return Err(unavailable());
        }
        Ok(Some(doc))
    }

    /// Atomically replaces a thread's document.
    pub(crate) fn save(&self, doc: &ThreadDoc) -> Result<(), Error> {
        let path = self.path_of(&doc.thread_id);
        let bytes = serde_json::to_vec_pretty(doc).map_err(|_| Msg::StateEncodeFailed.err())?;
        let write = || -> std::io::Result<()> {
            self.create_dirs()?;
            let file = atomicwrites::AtomicFile::new(&path, atomicwrites::AllowOverwrite);
            // The temporary file is made owner-only before any byte is in it; the rename keeps it.
            file.write(|f| {
                f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
                std::io::Write::write_all(f, &bytes)
            })
            .map_err(|e| match e {
                atomicwrites::Error::Internal(e) | atomicwrites::Error::User(e) => e,
            })
        };
        let started = std::time::Instant::now();
        let written = write();
        crate::metrics::STATE_WRITE_LATENCY.observe(started.elapsed());
        written.map_err(|e| {
            log::error!("cannot write thread state {}: {e}", path.display());
            Msg::StateWriteFailed.err()
        })
    }
}

impl Store {
    /// Creates the state dir and `threads/` owner-only, and re-applies that mode on every save,
    /// as the reference does (a directory an operator loosened is tightened again).
    fn create_dirs(&self) -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)?;
        for d in [&self.root, &self.dir] {
            if tightenable(d) {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(DIR_MODE))?;
            }
        }
        Ok(())
    }

    /// Start-up check: the state dir and `threads/` each get a warning when others may read or
    /// write them (and are tightened at once when they are ours); documents too loose get one
    /// warning for all, from a sample of the first `PERMISSION_SAMPLE` (start-up stays fast
    /// whatever the thread count; every save writes its file 0600 anyway). Returns the warnings.
    pub fn check_permissions(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for dir in [&self.root, &self.dir] {
            let Ok(meta) = std::fs::metadata(dir) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 == 0 {
                continue;
            }
            let fix = if tightenable(dir) {
                match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)) {
                    Ok(()) => format!("tightened to {DIR_MODE:04o}"),
                    Err(e) => format!("cannot tighten it to {DIR_MODE:04o}: {e}"),
                }
            } else {
                format!("not ours or shared, left as is; expected {DIR_MODE:04o}")
            };
            warnings.push(format!(
                "state dir {} is mode {mode:04o}, open to other users ({fix})",
                dir.display()
            ));
        }
        let loose: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flat_map(|entries| entries.flatten().take(PERMISSION_SAMPLE))
            .filter(|e| {
                e.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o077 != 0)
            })
            .map(|e| e.path())
            .collect();
        if let Some(first) = loose.first() {
            warnings.push(format!(
                "{} state file(s) open to other users, e.g. {} (expected {FILE_MODE:04o}; \
                 each is rewritten {FILE_MODE:04o} at its next save; chmod 600 them to fix now)",
                loose.len(),
                first.display()
            ));
        }
        for w in &warnings {
            log::warn!("{w}");
        }
        warnings
    }
}

/// How many documents the start-up permission check looks at.
const PERMISSION_SAMPLE: usize = 100;

/// A directory we may chmod: ours, and not a shared sticky one such as /tmp (a `--state-dir /tmp`
/// must not lock every other user out of it).
fn tightenable(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| {
        // SAFETY: geteuid(2) has no failure mode.
        m.is_dir() && m.uid() == unsafe { libc::geteuid() } && m.mode() & 0o1000 == 0
    })
}

fn unavailable() -> Error {
    Msg::StateUnreadable.err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;
    use serde_json::json;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agui-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_reference_state_file_loads() {
        let text = include_str!("../tests/data/permission-flow.state.json");
        let doc: ThreadDoc = serde_json::from_str(text).unwrap();
        assert_eq!(doc.context_id, ids::context_id(&doc.thread_id));
        assert_eq!(doc.terminal_execution_ids.len(), 1);
    }

    #[test]
    fn state_files_this_adapter_wrote_load_and_are_written_back_byte_for_byte() {
        let files = [
            include_str!("../tests/data/pipeline-turn.state.json"),
            include_str!("../tests/data/plain-turn.state.json"),
        ];
        for text in files {
            let doc: ThreadDoc = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_vec_pretty(&doc).unwrap(), text.as_bytes());
        }
        let doc: ThreadDoc = serde_json::from_str(files[0]).unwrap();
        let exec = doc.execution.unwrap();
        assert_eq!(exec.run_mode, Recorded::Given(Some(RunMode::Pipeline)));
        assert_eq!(
            exec.pipeline_name.as_deref(),
            Recorded::Given(Some("selling"))
        );
        let doc: ThreadDoc = serde_json::from_str(files[1]).unwrap();
        assert_eq!(doc.execution.unwrap().run_mode, Recorded::Given(None));
        let reference: ThreadDoc =
            serde_json::from_str(include_str!("../tests/data/permission-flow.state.json")).unwrap();
        assert_eq!(reference.execution.unwrap().run_mode, Recorded::Absent);
    }

    #[test]
    fn save_then_load_round_trips_and_checks_the_thread_id() {
        let dir = tmp("rt");
        let store = Store::new(dir.clone());
        let mut doc = ThreadDoc::new("../evil", "/w", None);
        doc.run_digests.insert("r".into(), "d".into());
        store.save(&doc).unwrap();
        assert!(store.path_of("../evil").starts_with(dir.join("threads")));
        assert_eq!(store.load("../evil").unwrap(), Some(doc.clone()));
        assert_eq!(store.load("other").unwrap(), None);
        std::fs::copy(store.path_of("../evil"), store.path_of("other")).unwrap();
        assert_eq!(
            store.load("other").unwrap_err().code,
            Code::StateUnavailable
        );
    }

    #[test]
    fn state_dirs_are_0700_and_files_0600_and_loose_ones_are_reported() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tmp("perms");
        let store = Store::new(dir.clone());
        assert!(store.check_permissions().is_empty(), "nothing there yet");
        store.save(&ThreadDoc::new("t", "/w", None)).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("threads")), 0o700);
        assert_eq!(mode(&store.path_of("t")), 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(store.path_of("t"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let warnings = store.check_permissions();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("0755") && warnings[0].contains("tightened"));
        assert!(
            warnings[1].starts_with("1 state file(s)"),
            "{}",
            warnings[1]
        );
        assert_eq!(mode(&dir), 0o700);
        // A save re-applies the modes: the replaced file is owner-only again.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        store.save(&ThreadDoc::new("t", "/w", None)).unwrap();
        assert_eq!((mode(&dir), mode(&store.path_of("t"))), (0o700, 0o600));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_failure_is_state_persistence_failed() {
        let dir = tmp("ro");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("threads"), b"a file where the directory should be").unwrap();
        let store = Store::new(dir);
        let e = store.save(&ThreadDoc::new("t", "/w", None)).unwrap_err();
        assert_eq!(e.code, Code::StatePersistenceFailed);
    }

    #[test]
    fn idle_slots_are_released_but_held_ones_are_not() {
        let store = Store::new(tmp("slots"));
        let held = store.slot("a");
        store.release("a");
        assert!(Arc::ptr_eq(&held, &store.slot("a")));
        drop(held);
        store.release("a");
        assert_eq!(store.slots.lock().len(), 0);
    }

    #[test]
    fn a_recorded_run_mode_differs_from_a_file_without_one() {
        let base = json!({"executionId": "e", "rosInvocationId": "r", "taskId": null});
        let read = |extra: Value| {
            let mut v = base.clone();
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value::<Execution>(v).unwrap()
        };
        assert_eq!(
            read(json!({})).run_mode,
            Recorded::Absent,
            "a file the reference wrote"
        );
        assert_eq!(
            read(json!({"runMode": null})).run_mode,
            Recorded::Given(None)
        );
        let e = read(json!({"runMode": "pipeline", "pipelineName": "selling"}));
        assert_eq!(e.run_mode, Recorded::Given(Some(RunMode::Pipeline)));
        let back = serde_json::to_value(&e).unwrap();
        assert_eq!(back["pipelineName"], "selling");
        assert!(serde_json::to_value(read(json!({})))
            .unwrap()
            .get("runMode")
            .is_none());
    }

    #[test]
    fn ended_executions_and_their_applied_answers_are_pruned_to_the_newest() {
        let mut doc = ThreadDoc::new("t", "/w", None);
        for i in 0..(MAX_TERMINAL_EXECUTIONS + 10) {
            doc.execution = Some(Execution {
                execution_id: format!("e{i:03}"),
                ros_invocation_id: "r".into(),
                task_id: None,
                pending: BTreeMap::new(),
                pipeline_open_steps: Vec::new(),
                pipeline_sequence: 0,
                text_snapshot_digests: Vec::new(),
                run_mode: Recorded::Absent,
                pipeline_name: Recorded::Absent,
            });
            doc.applied_resume_digests.push(AppliedDigest {
                digest: "d".into(),
                execution_id: format!("e{i:03}"),
                interrupt_id: "i".into(),
            });
            doc.mark_terminal();
        }
        assert_eq!(doc.terminal_execution_ids.len(), MAX_TERMINAL_EXECUTIONS);
        assert!(!doc.is_terminal("e009") && doc.is_terminal("e010"));
        assert_eq!(doc.applied_resume_digests.len(), MAX_TERMINAL_EXECUTIONS);
        assert_eq!(doc.applied_resume_digests[0].execution_id, "e010");
    }

    #[test]
    fn run_digests_keep_the_newest_in_order_and_stay_an_object() {
        let mut doc = ThreadDoc::new("t", "/w", None);
        for i in 0..(MAX_RUN_DIGESTS + 44) {
            doc.run_digests.insert(format!("r{i:04}"), format!("d{i}"));
        }
        assert_eq!(doc.run_digests.len(), MAX_RUN_DIGESTS);
        assert_eq!(doc.run_digests.get("r0043"), None);
        assert_eq!(
            doc.run_digests.get("r0044").map(String::as_str),
            Some("d44")
        );
        // A refreshed id becomes the newest, so the next prune drops r0045, not it.
        doc.run_digests.insert("r0044".into(), "again".into());
        doc.run_digests.insert("new".into(), "x".into());
        assert_eq!(doc.run_digests.get("r0045"), None);
        assert_eq!(
            doc.run_digests.get("r0044").map(String::as_str),
            Some("again")
        );
        let json = serde_json::to_value(&doc).unwrap();
        let map = json["runDigests"].as_object().unwrap();
        assert_eq!(map.len(), MAX_RUN_DIGESTS);
        let text = serde_json::to_string(&doc).unwrap();
        let back: ThreadDoc = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc, "insertion order survives a save and a load");
        let big = format!(
            "{{\"schemaVersion\":1,\"threadId\":\"t\",\"contextId\":\"c\",\"cwd\":\"/w\",\
             \"userId\":null,\"iacCodeSessionId\":null,\"execution\":null,\"runDigests\":{{{}}}}}",
            (0..1000)
                .map(|i| format!("\"k{i}\":\"v\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let legacy: ThreadDoc = serde_json::from_str(&big).unwrap();
        assert_eq!(legacy.run_digests.len(), MAX_RUN_DIGESTS);
        assert!(legacy.run_digests.get("k999").is_some());
    }
}
