//! The thread store: one small JSON document per AG-UI thread, `<state-dir>/threads/<key>.json`.
//!
//! Documents are loaded lazily and replaced atomically (write to a temporary file in the same
//! directory, fsync, rename), so a crash at any instant leaves either the old or the new document,
//! never a torn one. A per-thread [`Slot`] mutex serializes everything that reads and writes one
//! thread. The layout is the reference adapter's; it never holds conversation text or credentials.
//!
//! The thread list (`list.rs`) reads an in-memory index (`index.rs`) of the user-bound threads,
//! built by a background scan at start-up (`scan.rs`; nothing at start-up waits for it) and kept
//! current by every save, which stamps the file it writes (`cursor.rs`: the list's cursor).

mod cursor;
mod doc;
mod index;
mod io_gate;
mod list;
mod owner;
mod replace;
mod scan;
mod used;

use crate::error::{Error, Msg};
use crate::ids;
pub(crate) use doc::{AppliedDigest, Execution, Pending, Recorded, ThreadDoc};
use index::ThreadIndex;
pub(crate) use list::parse_limit;
pub(crate) use owner::this_process;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
pub(crate) use used::Seen;

/// A run in progress on a thread (at most one).
pub(crate) struct ActiveRun {
    pub(crate) execution_id: String,
    pub(crate) task_id: Mutex<Option<String>>,
    /// Set by the cancel extension; the run ends with `RUN_ERROR CANCELLED`.
    pub(crate) cancelled: AtomicBool,
    /// Set once `CancelTask` was sent, so a disconnect and an error do not both send it.
    pub(crate) cancel_sent: AtomicBool,
    /// Set once that `CancelTask` came back (answered or failed): a kernel that honours it ends
    /// the task's stream now, and the run's grace for that (`cancel::stop_soon`) starts here.
    pub(crate) cancel_returned: AtomicBool,
}

impl ActiveRun {
    pub(crate) fn new(execution_id: &str, task_id: Option<String>) -> Arc<ActiveRun> {
        Arc::new(ActiveRun {
            execution_id: execution_id.to_string(),
            task_id: Mutex::new(task_id),
            cancelled: AtomicBool::new(false),
            cancel_sent: AtomicBool::new(false),
            cancel_returned: AtomicBool::new(false),
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

/// `replace::replace` or `replace::replace_unsynced`.
type ReplaceFn =
    fn(&std::path::Path, &str, &[u8], u32, std::time::SystemTime) -> std::io::Result<()>;

pub struct Store {
    /// The state dir; documents live in its `threads/`.
    root: PathBuf,
    dir: PathBuf,
    slots: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
    /// The user-bound threads by recent activity, for the thread list.
    index: Arc<ThreadIndex>,
    index_scan: std::sync::Once,
}

impl Store {
    pub fn new(state_dir: PathBuf) -> Store {
        Store {
            dir: state_dir.join("threads"),
            root: state_dir,
            slots: Mutex::new(HashMap::new()),
            index: Arc::default(),
            index_scan: std::sync::Once::new(),
        }
    }

    /// Starts building the thread index from the state files, in the background (once; `main`
    /// calls it at start-up, the first list otherwise).
    pub fn start_index(&self) {
        self.index_scan.call_once(|| {
            scan::scan_in_background(self.dir.clone(), self.index.clone());
        });
    }

    /// Adds to the thread index the threads written since `since_ms` by another process (an
    /// upgrade's old one, while it drained), in the background.
    pub fn rescan_since(&self, since_ms: u64) {
        scan::rescan_in_background(self.dir.clone(), self.index.clone(), since_ms);
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
        let bytes = match io_gate::with_descriptor(|| std::fs::read(&path)) {
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

    /// Atomically and durably replaces a thread's document, and records the write as the
    /// thread's newest activity in the index (its stamp is the file's modification time, which
    /// the start-up scan reads back).
    pub(crate) fn save(&self, doc: &ThreadDoc) -> Result<(), Error> {
        let started = std::time::Instant::now();
        let saved = self.save_as(doc, replace::replace);
        crate::metrics::STATE_WRITE_LATENCY.observe(started.elapsed());
        saved
    }

    /// [`Store::save`] with one flush, not two (the file's data, not the directory: the rename
    /// may be lost in a host crash, the document is never left empty), for the end of a run
    /// whose client left, and only when the document it replaces waits for no
    /// input. Its loss (a crash of the host before the kernel wrote it back) leaves the execution
    /// recorded as running, which is what a crash mid-run leaves: the thread's next turn stops
    /// the task and closes the execution first (`run/repair.rs`), and nobody is there to be
    /// shown the end. When thousands of clients leave at once these ends were ~2 fsyncs each,
    /// most of the time their threads took to go; the data's flush stays, so a crash leaves a
    /// readable document, without which every request of the thread would fail. Two functions, not a flag: each call site
    /// says which promise it makes.
    pub(crate) fn save_unsynced(&self, doc: &ThreadDoc) -> Result<(), Error> {
        crate::metrics::STATE_WRITES_UNSYNCED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.save_as(doc, replace::replace_unsynced)
    }

    fn save_as(&self, doc: &ThreadDoc, replace: ReplaceFn) -> Result<(), Error> {
        let key = ids::thread_key(&doc.thread_id);
        let path = self.dir.join(format!("{key}.json"));
        let bytes = serde_json::to_vec_pretty(doc).map_err(|_| Msg::StateEncodeFailed.err())?;
        let stamp = self.index.begin_write();
        let modified = std::time::UNIX_EPOCH + std::time::Duration::from_millis(stamp);
        let write = || -> std::io::Result<()> {
            self.create_dirs()?;
            replace(
                &self.dir,
                &format!("{key}.json"),
                &bytes,
                FILE_MODE,
                modified,
            )
        };
        let written = io_gate::with_descriptor(write);
        let listed = written.is_ok().then_some(()).and(doc.user_id.as_deref());
        self.index.end_write(
            stamp,
            listed.map(|user| (key.as_str(), doc.thread_id.as_str(), user)),
        );
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
    use super::doc::{MAX_RUN_DIGESTS, MAX_TERMINAL_EXECUTIONS};
    use super::*;
    use crate::error::Code;
    use crate::modes::RunMode;
    use serde_json::json;
    use serde_json::Value;
    use std::collections::BTreeMap;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("agui-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_reference_state_file_loads() {
        let text = include_str!("../../tests/data/permission-flow.state.json");
        let doc: ThreadDoc = serde_json::from_str(text).unwrap();
        assert_eq!(doc.context_id, ids::context_id(&doc.thread_id));
        assert_eq!(doc.terminal_execution_ids.len(), 1);
    }

    #[test]
    fn state_files_this_adapter_wrote_load_and_are_written_back_byte_for_byte() {
        let files = [
            include_str!("../../tests/data/pipeline-turn.state.json"),
            include_str!("../../tests/data/plain-turn.state.json"),
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
            serde_json::from_str(include_str!("../../tests/data/permission-flow.state.json"))
                .unwrap();
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
                owner: None,
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
    fn run_digests_keep_the_newest_in_order_and_every_older_run_stays_used() {
        let mut doc = ThreadDoc::new("t", "/w", None);
        for i in 0..(MAX_RUN_DIGESTS + 44) {
            doc.record_run(format!("r{i:04}"), format!("d{i}"));
        }
        assert_eq!(doc.run_digests.len(), MAX_RUN_DIGESTS);
        assert_eq!(doc.run_digests.get("r0043"), None);
        assert_eq!(
            doc.run_digests.get("r0044").map(String::as_str),
            Some("d44")
        );
        // Evicted from the whole records, never forgotten: the same request, or another one.
        assert_eq!(doc.run_seen("r0000", "d0"), Some(Seen::Same));
        assert_eq!(doc.run_seen("r0043", "other"), Some(Seen::Other));
        assert_eq!(doc.run_seen("r0044", "d44"), Some(Seen::Same));
        assert_eq!(doc.run_seen("fresh", "d0"), None);
        let json = serde_json::to_value(&doc).unwrap();
        let map = json["runDigests"].as_object().unwrap();
        assert_eq!(map.len(), MAX_RUN_DIGESTS);
        assert_eq!(
            json["usedRunIds"].as_str().unwrap().len(),
            (44 * 16usize).div_ceil(3) * 4
        );
        let text = serde_json::to_string(&doc).unwrap();
        let back: ThreadDoc = serde_json::from_str(&text).unwrap();
        assert_eq!(
            back, doc,
            "insertion order and the used ids survive a save and a load"
        );
        // A file without the key (older, or the reference's: every run in `runDigests`) loads
        // whole, and its oldest runs move to `usedRunIds` at the next run.
        let big = format!(
            "{{\"schemaVersion\":1,\"threadId\":\"t\",\"contextId\":\"c\",\"cwd\":\"/w\",\
             \"userId\":null,\"iacCodeSessionId\":null,\"execution\":null,\"runDigests\":{{{}}}}}",
            (0..1000)
                .map(|i| format!("\"k{i}\":\"v\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut legacy: ThreadDoc = serde_json::from_str(&big).unwrap();
        assert_eq!(legacy.run_digests.len(), 1000);
        legacy.record_run("new".into(), "x".into());
        assert_eq!(legacy.run_digests.len(), MAX_RUN_DIGESTS);
        assert_eq!(legacy.run_seen("k0", "v"), Some(Seen::Same));
        assert_eq!(legacy.run_seen("k999", "w"), Some(Seen::Other));
    }
}
