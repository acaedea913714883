//! Admission: a request checked against its thread and the thread marked busy, under the thread's
//! mutex, held just long enough to check idempotency, binding and the thread's mode and to record
//! the run digest durably.

use super::{lost, shutting_down};
use crate::app::App;
use crate::error::{Error, Lang, Msg};
use crate::ids;
use crate::input::{ResumeEntry, RunInput, UserMessage};
use crate::store::{ActiveRun, Execution, Recorded, Seen, Slot, Store, ThreadDoc};
use parking_lot::Mutex;
use std::sync::Arc;

/// What the admitted run does.
pub(super) enum Mode {
    /// A new turn with the user's message, on the execution admission installed.
    NewTurn(UserMessage),
    /// A new turn, but the thread's recorded execution never ended (the adapter was killed or
    /// stopped mid-run): the run stops and closes it first, then `next` takes its place.
    RepairThenNewTurn {
        next: Box<Execution>,
        message: UserMessage,
    },
    Resume(Vec<ResumeEntry>),
    /// The pending interrupts expired at admission; the resume is refused in the stream.
    Expired,
}

/// A request admitted to its thread: the thread is busy until the run ends.
/// Dropping it, wherever that happens, frees the thread again.
pub(crate) struct Admitted {
    pub(super) input: RunInput,
    pub(super) lang: Lang,
    pub(super) doc: ThreadDoc,
    pub(super) active: Arc<ActiveRun>,
    pub(super) mode: Mode,
    pub(super) guard: ActiveGuard,
}

/// Checks a request against its thread and marks the thread busy.
pub(crate) fn admit(app: &Arc<App>, input: RunInput, lang: Lang) -> Result<Admitted, Error> {
    let thread_id = input.thread_id.clone();
    // Before the slot's lock: a left client's close hook takes that lock to free the thread.
    app.runs.client_left(&thread_id);
    let slot = app.store.slot(&thread_id);
    wait_while_stopping(&slot);
    let admitted = admit_locked(app, &slot, input, lang);
    if admitted.is_err() {
        drop(slot);
        app.store.release(&thread_id);
    }
    admitted
}

fn admit_locked(
    app: &Arc<App>,
    slot: &Arc<Mutex<Slot>>,
    mut input: RunInput,
    lang: Lang,
) -> Result<Admitted, Error> {
    let mut guard = slot.lock();
    if app.runs.stopping() {
        return Err(shutting_down());
    }
    if app.runs.paused() {
        return Err(Msg::KernelRestarting.err());
    }
    if let Some(active) = &guard.active {
        if app.feeds.detached(&active.execution_id) {
            return Err(Msg::ThreadDetached.err());
        }
        if active.is_cancelled() {
            return Err(Msg::ThreadStopping.err());
        }
        return Err(Msg::ThreadBusy.err());
    }
    let mut doc = match app.store.load(&input.thread_id)? {
        Some(doc) => {
            check_against(&doc, &input)?;
            doc
        }
        None if input.resume.is_some() => return Err(lost()),
        None => ThreadDoc::new(
            &input.thread_id,
            &input.iac.cwd,
            input.iac.user_id.as_deref(),
        ),
    };
    // A run the replaced process is still streaming (an upgrade's drain) keeps its thread busy
    // here too, as it would in that process; it is not one a killed adapter left.
    if doc.running_elsewhere() {
        return Err(Msg::ThreadBusy.err());
    }
    let waits = expire_pending(app, &mut doc);
    let mode = match &input.resume {
        Some(entries) => resume_mode(&doc, &input, entries, waits)?,
        None => new_turn_mode(&mut doc, &mut input)?,
    };
    doc.record_run(input.run_id.clone(), input.digest.clone());
    if let Some(exec) = doc.execution.as_mut() {
        exec.owner = Some(crate::store::this_process().to_string());
    }
    app.store.save(&doc)?;
    let exec = doc.execution.as_ref().ok_or_else(lost)?;
    let active = ActiveRun::new(&exec.execution_id, exec.task_id.clone());
    guard.active = Some(active.clone());
    drop(guard);
    Ok(Admitted {
        lang,
        doc,
        active,
        mode,
        guard: ActiveGuard::new(app.clone(), slot.clone(), input.thread_id.clone()),
        input,
    })
}

/// A run cancelled (Stop, a client that left) ends within `cancel::STOP_BOUND` whatever its kernel
/// and client do: a turn sent meanwhile waits for it (bounded) instead of being refused as busy.
fn wait_while_stopping(slot: &Mutex<Slot>) {
    let deadline = std::time::Instant::now() + super::cancel::STOP_BOUND;
    let stopping = || {
        slot.lock()
            .active
            .as_ref()
            .is_some_and(|a| a.is_cancelled())
    };
    while stopping() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Idempotency (the run id) and binding (workspace and caller) against the stored thread.
/// A used run id with another request; a resume that reuses one (CopilotKit keeps the interrupted
/// run's id) is told how to give it a new one.
fn run_id_conflict(input: &RunInput) -> Error {
    match input.resume {
        Some(_) => Msg::RunIdReusedByResume.err(),
        None => Msg::RunIdConflict.err(),
    }
}

fn check_against(doc: &ThreadDoc, input: &RunInput) -> Result<(), Error> {
    match doc.run_seen(&input.run_id, &input.digest) {
        Some(Seen::Same) => return Err(Msg::DuplicateRunId.err()),
        Some(Seen::Other) => return Err(run_id_conflict(input)),
        None => {}
    }
    if doc.cwd != input.iac.cwd || doc.user_id != input.iac.user_id {
        return Err(Msg::ThreadBound.err());
    }
    Ok(())
}

/// A resume needs the execution it answers, from the same invocation.
fn resume_mode(
    doc: &ThreadDoc,
    input: &RunInput,
    entries: &[ResumeEntry],
    waits: Waits,
) -> Result<Mode, Error> {
    let exec = doc.execution.as_ref().ok_or_else(lost)?;
    if exec.ros_invocation_id != input.iac.ros_invocation_id {
        return Err(lost());
    }
    Ok(match waits {
        Waits::Expired => Mode::Expired,
        Waits::Current => Mode::Resume(entries.to_vec()),
    })
}

/// A new turn needs a thread that waits for nothing, and a user message; it gets a new execution.
fn new_turn_mode(doc: &mut ThreadDoc, input: &mut RunInput) -> Result<Mode, Error> {
    if doc.pending_count() > 0 {
        return Err(Msg::ResumeRequired.err());
    }
    let Some(message) = input.user_message.take() else {
        return Err(Msg::NewRunNeedsUserMessage.err());
    };
    let next = Execution {
        execution_id: ids::uuid_v4(),
        ros_invocation_id: input.iac.ros_invocation_id.clone(),
        task_id: None,
        pending: Default::default(),
        pipeline_open_steps: vec![],
        pipeline_sequence: 0,
        text_snapshot_digests: vec![],
        // Every answer of this execution carries the mode it started in.
        run_mode: Recorded::Given(input.iac.run_mode),
        pipeline_name: Recorded::Given(input.iac.pipeline_name.clone()),
        owner: Some(crate::store::this_process().to_string()),
    };
    // No pending input and not terminal: the run that owned it never ended. It stays recorded
    // (the cancel extension still reaches it) until the run thread repaired it.
    let unfinished = doc
        .execution
        .as_ref()
        .is_some_and(|e| !doc.is_terminal(&e.execution_id));
    if unfinished {
        return Ok(Mode::RepairThenNewTurn {
            next: Box::new(next),
            message,
        });
    }
    doc.execution = Some(next);
    Ok(Mode::NewTurn(message))
}

/// What admission found of the thread's input waits.
#[derive(Clone, Copy)]
enum Waits {
    /// None expired (or there are none).
    Current,
    /// One expired: the execution was closed.
    Expired,
}

/// Expired interrupts: cleared (durably, best effort) and their task cancelled.
fn expire_pending(app: &App, doc: &mut ThreadDoc) -> Waits {
    let now = ids::now_ms();
    let Some(exec) = &doc.execution else {
        return Waits::Current;
    };
    let expired = exec
        .pending
        .values()
        .any(|p| p.expires_at_ms.is_some_and(|t| t <= now));
    if !expired {
        return Waits::Current;
    }
    let task = exec.task_id.clone();
    doc.mark_terminal();
    if let Err(e) = app.store.save(doc) {
        log::error!("cannot record expired interrupts: {e}");
    }
    if let Some(task) = task {
        let a2a = app.a2a.clone();
        std::thread::spawn(move || {
            if let Err(e) = a2a.cancel_task(&task) {
                log::warn!("cancel of expired task failed: {e}");
            }
        });
    }
    Waits::Expired
}

/// Clears the thread's active run when the run ends, however it ends.
pub(super) struct ActiveGuard(SlotHandle);

/// The run's hold on its thread, shared with whoever may free the thread before the run thread
/// ends: a client that left (its cancelled task may take seconds to wind down upstream, and the
/// thread's next turn must not wait for that), a detach grace that ran out.
#[derive(Clone)]
pub(super) struct SlotHandle(Arc<Hold>);

struct Hold {
    app: Arc<App>,
    /// `None` once the thread was freed: from then on the run writes nothing to the thread's
    /// document (its next turn owns it, and repairs this execution first).
    slot: Mutex<Option<Arc<Mutex<Slot>>>>,
    thread_id: String,
}

impl ActiveGuard {
    fn new(app: Arc<App>, slot: Arc<Mutex<Slot>>, thread_id: String) -> ActiveGuard {
        ActiveGuard(SlotHandle(Arc::new(Hold {
            app,
            slot: Mutex::new(Some(slot)),
            thread_id,
        })))
    }

    pub(super) fn handle(&self) -> SlotHandle {
        self.0.clone()
    }

    /// Makes `active` the thread's active run (the slot stays busy).
    pub(super) fn replace(&self, active: Arc<ActiveRun>) {
        if let Some(slot) = &*self.0 .0.slot.lock() {
            slot.lock().active = Some(active);
        }
    }

    /// Frees the thread for its next run (idempotent).
    pub(super) fn release(&mut self) {
        self.0.release();
    }

    /// Saves the run's document, unless the thread was freed meanwhile (under the thread's
    /// mutex, so a save never lands after the next turn's admission read the document).
    pub(super) fn save(&self, doc: &ThreadDoc) -> Result<(), Error> {
        self.save_with(doc, Store::save)
    }

    /// [`ActiveGuard::save`] without waiting for the disk: the end of a run whose client left
    /// (`Store::save_unsynced` says when its loss is harmless).
    pub(super) fn save_unsynced(&self, doc: &ThreadDoc) -> Result<(), Error> {
        self.save_with(doc, Store::save_unsynced)
    }

    fn save_with(
        &self,
        doc: &ThreadDoc,
        save: fn(&Store, &ThreadDoc) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let hold = self.0 .0.slot.lock();
        let Some(slot) = &*hold else {
            log::debug!(
                "thread {} was freed; the run's state is not saved",
                doc.thread_id
            );
            return Ok(());
        };
        let _slot = slot.lock();
        save(&self.0 .0.app.store, doc)
    }
}

impl ActiveGuard {
    /// A run whose thread was freed before it ended (its client left) records its end after
    /// all, unless the thread took another run meanwhile (that run's repair closes it then).
    /// Nobody waits for that end, and the next turn repairs it if it is lost: it is written
    /// unsynced, unless the execution waited for input (its loss would offer that again).
    pub(super) fn close_if_freed(&self, execution_id: &str) {
        if self.0 .0.slot.lock().is_some() {
            return;
        }
        let Hold { app, thread_id, .. } = &*self.0 .0;
        let slot = app.store.slot(thread_id);
        let guard = slot.lock();
        if guard.active.is_none() {
            if let Ok(Some(mut doc)) = app.store.load(thread_id) {
                let ours = doc
                    .execution
                    .as_ref()
                    .is_some_and(|e| e.execution_id == execution_id);
                if ours && !doc.is_terminal(execution_id) {
                    let waited = doc.pending_count() > 0;
                    doc.mark_terminal();
                    let saved = if waited {
                        app.store.save(&doc)
                    } else {
                        app.store.save_unsynced(&doc)
                    };
                    if let Err(e) = saved {
                        log::error!("cannot record the end of execution {execution_id}: {e}");
                    }
                }
            }
        }
        drop(guard);
        drop(slot);
        app.store.release(thread_id);
    }
}

impl SlotHandle {
    /// Frees the thread (idempotent).
    pub(super) fn release(&self) {
        let slot = self.0.slot.lock().take();
        if let Some(slot) = slot {
            slot.lock().active = None;
            drop(slot);
            self.0.app.store.release(&self.0.thread_id);
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.release();
    }
}
