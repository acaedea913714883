//! Run orchestration: admission of a request to a thread, then the life of one run on its own OS
//! thread (new turn or resume), and the cancel extension.
//!
//! Admission ([`admit`]) holds the thread's mutex just long enough to check idempotency, binding and
//! the thread's mode, record the run digest durably and mark the thread busy. The run itself
//! ([`run`]) then owns the thread's document until it ends: it streams the A2A task through the
//! [`Projection`], persists what a restart needs before announcing it (fail closed), and always
//! closes the stream with `RUN_FINISHED` or `RUN_ERROR`, even when it panics.

use crate::a2a::{iac_code_metadata, A2aClient, A2aStream};
use crate::config::Config;
use crate::error::{Code, Error, Lang};
use crate::ids;
use crate::input::{ResumeEntry, RunInput};
use crate::interrupts::{self, Answer};
use crate::projection::{Durable, End, FinishAs, Projection, RunIds};
use crate::store::{ActiveRun, AppliedDigest, Execution, Pending, Slot, Store, ThreadDoc};
use crate::stream::{Heartbeats, SseStream};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Everything a request needs, shared by all threads.
pub struct App {
    pub config: Config,
    pub a2a: A2aClient,
    pub store: Store,
    pub heartbeats: Heartbeats,
    pub runs: Runs,
}

/// The runs in progress, so a shutdown can end each of them properly.
#[derive(Default)]
pub struct Runs {
    live: Mutex<Vec<Weak<Live>>>,
    stopping: AtomicBool,
}

/// One run in progress, as the shutdown sees it.
struct Live {
    stream: Arc<SseStream>,
    active: Mutex<Arc<ActiveRun>>,
    ids: RunIds,
    lang: Lang,
}

impl Runs {
    /// Whether the adapter is shutting down (new runs are refused, running ones end).
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn register(&self, live: &Arc<Live>) {
        let mut list = self.live.lock();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(live));
    }

    fn live(&self) -> Vec<Arc<Live>> {
        self.live.lock().iter().filter_map(Weak::upgrade).collect()
    }
}

fn shutting_down() -> Error {
    Error::new(
        Code::A2aUnavailable,
        "The adapter is shutting down.",
        "adapter 正在关闭。",
    )
}

/// SIGTERM/SIGINT: refuses new runs, cancels every active run's task and lets the run end itself
/// (`RUN_ERROR A2A_UNAVAILABLE`, spans closed, end of stream); a run still open after `grace`
/// (no task id yet, a hung kernel) gets its `RUN_ERROR` and end of stream written for it.
pub fn shutdown(app: &App, grace: Duration) {
    app.runs.stopping.store(true, Ordering::SeqCst);
    let live = app.runs.live();
    if live.is_empty() {
        return;
    }
    log::info!("shutting down: ending {} active run(s)", live.len());
    let deadline = Instant::now() + grace;
    for l in &live {
        let active = l.active.lock().clone();
        active.cancelled.store(true, Ordering::SeqCst);
        let a2a = app.a2a.clone();
        // Each CancelTask is bounded (CANCEL_TIMEOUT); they run side by side.
        let _ = std::thread::Builder::new()
            .name("shutdown-cancel".into())
            .spawn(move || cancel_once(&a2a, &active));
    }
    let weak: Vec<Weak<Live>> = live.iter().map(Arc::downgrade).collect();
    drop(live);
    while Instant::now() < deadline && weak.iter().any(|w| w.strong_count() > 0) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for l in weak.iter().filter_map(Weak::upgrade) {
        if l.stream.is_closed() {
            continue;
        }
        log::warn!(
            "run {} did not end in time; ending its stream",
            l.ids.run_id
        );
        let mut out = Vec::new();
        Projection::new(l.ids.clone(), l.lang).finish(&FinishAs::Error(shutting_down()), &mut out);
        l.stream.abort(&out, Duration::from_secs(1));
    }
}

enum Mode {
    /// A new turn; `Some(next)`: the thread's recorded execution never ended (the adapter was
    /// killed or stopped mid-run), so it is stopped and closed first and `next` takes its place.
    NewTurn(Option<Execution>),
    Resume(Vec<ResumeEntry>),
    /// The pending interrupts expired at admission; the resume is refused in the stream.
    Expired,
}

/// A request admitted to its thread: the thread is busy until [`run`] ends.
/// Dropping it, wherever that happens, frees the thread again.
pub struct Admitted {
    input: RunInput,
    lang: Lang,
    doc: ThreadDoc,
    active: Arc<ActiveRun>,
    mode: Mode,
    guard: ActiveGuard,
}

/// Checks a request against its thread and marks the thread busy.
pub fn admit(app: &Arc<App>, input: RunInput, lang: Lang) -> Result<Admitted, Error> {
    let thread_id = input.thread_id.clone();
    let slot = app.store.slot(&thread_id);
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
    input: RunInput,
    lang: Lang,
) -> Result<Admitted, Error> {
    let mut guard = slot.lock();
    if app.runs.stopping() {
        return Err(shutting_down());
    }
    if guard.active.is_some() {
        return Err(Error::new(
            Code::ThreadBusy,
            "The thread already has an active run.",
            "该 thread 已有活动的 run。",
        ));
    }
    let stored = app.store.load(&input.thread_id)?;
    if let Some(doc) = &stored {
        if let Some(d) = doc.run_digests.get(&input.run_id) {
            return Err(if *d == input.digest {
                Error::new(
                    Code::DuplicateRunId,
                    "The AG-UI run id has already been used for this request.",
                    "该 AG-UI run ID 已被相同请求使用。",
                )
            } else {
                Error::new(
                    Code::RunIdConflict,
                    "The AG-UI run id has already been used by a different request.",
                    "该 AG-UI run ID 已被另一个请求使用。",
                )
            });
        }
        if doc.cwd != input.iac.cwd || doc.user_id != input.iac.user_id {
            return Err(Error::new(
                Code::ThreadBindingConflict,
                "The thread is bound to another workspace or caller (cwd/userId).",
                "该 thread 已绑定到其他工作区或调用方（cwd/userId）。",
            ));
        }
    }
    let mut doc = match stored {
        Some(doc) => doc,
        None if input.resume.is_some() => return Err(lost()),
        None => ThreadDoc::new(
            &input.thread_id,
            &input.iac.cwd,
            input.iac.user_id.as_deref(),
        ),
    };
    let expired = expire_pending(app, &mut doc);
    let mode = match &input.resume {
        Some(entries) => {
            let exec = doc.execution.as_ref().ok_or_else(lost)?;
            if exec.ros_invocation_id != input.iac.ros_invocation_id {
                return Err(lost());
            }
            if expired {
                Mode::Expired
            } else {
                Mode::Resume(entries.clone())
            }
        }
        None => {
            if doc.pending_count() > 0 {
                return Err(Error::new(
                    Code::ResumeRequired,
                    "The thread is waiting for an interrupt response; send `resume` first.",
                    "该 thread 正在等待 Interrupt 响应，请先发送 `resume`。",
                ));
            }
            if input.user_message.is_none() {
                return Err(Error::invalid(
                    "A new run requires a user message.",
                    "新的 run 需要一条 user 消息。",
                ));
            }
            let next = Execution {
                execution_id: ids::uuid_v4(),
                ros_invocation_id: input.iac.ros_invocation_id.clone(),
                task_id: None,
                pending: Default::default(),
                pipeline_open_steps: vec![],
                pipeline_sequence: 0,
                text_snapshot_digests: vec![],
            };
            // No pending input and not terminal: the run that owned it never ended. It stays
            // recorded (the cancel extension still reaches it) until the run thread repaired it.
            let unfinished = doc
                .execution
                .as_ref()
                .is_some_and(|e| !doc.is_terminal(&e.execution_id));
            if unfinished {
                Mode::NewTurn(Some(next))
            } else {
                doc.execution = Some(next);
                Mode::NewTurn(None)
            }
        }
    };
    doc.run_digests
        .insert(input.run_id.clone(), input.digest.clone());
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
        guard: ActiveGuard {
            app: app.clone(),
            slot: Some(slot.clone()),
            thread_id: input.thread_id.clone(),
        },
        input,
    })
}

/// Expired interrupts: cleared (durably, best effort) and their task cancelled. `true` if any.
fn expire_pending(app: &App, doc: &mut ThreadDoc) -> bool {
    let now = ids::now_ms();
    let Some(exec) = &doc.execution else {
        return false;
    };
    let expired = exec
        .pending
        .values()
        .any(|p| p.expires_at_ms.is_some_and(|t| t <= now));
    if !expired {
        return false;
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
    true
}

fn lost() -> Error {
    Error::new(
        Code::ExecutionLost,
        "The interrupted execution cannot be recovered for this thread.",
        "无法为该 thread 恢复被中断的 execution。",
    )
}

/// Clears the thread's active run when the run ends, however it ends.
struct ActiveGuard {
    app: Arc<App>,
    slot: Option<Arc<Mutex<Slot>>>,
    thread_id: String,
}

impl ActiveGuard {
    /// Makes `active` the thread's active run (the slot stays busy).
    fn replace(&self, active: Arc<ActiveRun>) {
        if let Some(slot) = &self.slot {
            slot.lock().active = Some(active);
        }
    }

    /// Frees the thread for its next run (idempotent).
    fn release(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.lock().active = None;
            drop(slot);
            self.app.store.release(&self.thread_id);
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.release();
    }
}

/// Runs an admitted request to its end on the calling thread, writing to `stream`.
pub fn run(app: Arc<App>, admitted: Admitted, stream: Arc<SseStream>) {
    let execution_id = match &admitted.mode {
        Mode::NewTurn(Some(next)) => next.execution_id.clone(),
        _ => admitted.active.execution_id.clone(),
    };
    let ids = RunIds {
        thread_id: admitted.input.thread_id.clone(),
        run_id: admitted.input.run_id.clone(),
        parent_run_id: admitted.input.parent_run_id.clone(),
        execution_id,
        context_id: admitted.doc.context_id.clone(),
        ros_invocation_id: admitted.input.iac.ros_invocation_id.clone(),
    };
    crate::logctx::set_execution(&ids.execution_id);
    let lang = admitted.lang;
    let live = Arc::new(Live {
        stream: stream.clone(),
        active: Mutex::new(admitted.active.clone()),
        ids: ids.clone(),
        lang,
    });
    app.runs.register(&live);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        RunCtx::new(&app, admitted, stream.clone(), ids.clone(), live.clone()).execute();
    }));
    if outcome.is_err() {
        log::error!("run {} panicked; ending it with RUN_ERROR", ids.run_id);
        // The span state went with the panic: a fresh projection closes nothing and reports it.
        let mut p = Projection::new(ids, lang);
        let mut out = Vec::new();
        let e = Error::new(
            Code::A2aProtocolError,
            "The adapter failed while projecting this run; the run was stopped.",
            "adapter 在投影该 run 时出错，run 已停止。",
        );
        p.finish(&FinishAs::Error(e), &mut out);
        stream.send(&out);
        stream.finish();
    }
}

struct RunCtx<'a> {
    app: &'a App,
    input: RunInput,
    doc: ThreadDoc,
    active: Arc<ActiveRun>,
    stream: Arc<SseStream>,
    proj: Projection,
    out: Vec<Value>,
    mode: Option<Mode>,
    lang_tag: Option<String>,
    live: Arc<Live>,
    _guard: ActiveGuard,
}

/// What reading an A2A stream came to.
enum Pumped {
    End(End),
    Eof,
    Err(Error),
    ClientGone,
}

impl<'a> RunCtx<'a> {
    fn new(
        app: &'a App,
        a: Admitted,
        stream: Arc<SseStream>,
        ids: RunIds,
        live: Arc<Live>,
    ) -> RunCtx<'a> {
        let exec = a.doc.execution.clone();
        let mut proj = Projection::new(ids, a.lang);
        if let (Mode::Resume(_), Some(exec)) = (&a.mode, &exec) {
            if let Some(task) = &exec.task_id {
                let durable = Durable {
                    pipeline_sequence: exec.pipeline_sequence,
                    open_steps: exec.pipeline_open_steps.iter().cloned().collect(),
                    text_digests: exec.text_snapshot_digests.iter().cloned().collect(),
                };
                proj = proj.resuming(task, a.doc.iac_code_session_id.as_deref(), durable);
            }
        }
        let lang_tag = a.input.iac.preferred_language.clone().or_else(|| {
            Some(match a.lang {
                Lang::En => "en".into(),
                Lang::Zh => "zh".into(),
            })
        });
        RunCtx {
            app,
            input: a.input,
            doc: a.doc,
            active: a.active,
            stream,
            proj,
            out: Vec::new(),
            mode: Some(a.mode),
            lang_tag,
            live,
            _guard: a.guard,
        }
    }

    fn execute(&mut self) {
        log::debug!(
            "run {} on thread {} starts ({})",
            self.input.run_id,
            self.input.thread_id,
            match self.mode {
                Some(Mode::NewTurn(_)) => "new turn",
                Some(Mode::Resume(_)) => "resume",
                _ => "expired",
            }
        );
        self.proj.start(&mut self.out);
        self.flush();
        let finish = match self.mode.take() {
            Some(Mode::NewTurn(next)) => self.new_turn(next),
            Some(Mode::Resume(entries)) => self.resume(entries),
            Some(Mode::Expired) | None => FinishAs::Error(Error::new(
                Code::ExecutionExpired,
                "The interrupt has expired; start a new turn.",
                "该 Interrupt 已过期，请开始新的 turn。",
            )),
        };
        self.stream.clear_on_close();
        let finish = self.settle(finish);
        crate::metrics::run_ended(&finish);
        match finish.code() {
            Some(code) => log::info!("run {} ended with {code}", self.input.run_id),
            None => log::debug!("run {} ended", self.input.run_id),
        }
        self.proj.finish(&finish, &mut self.out);
        // Everything durable is on disk: free the thread before the client sees the end, so a
        // resume sent the moment RUN_FINISHED arrives is never refused as THREAD_BUSY.
        self._guard.release();
        self.flush();
        self.stream.finish();
    }

    /// A cancel (the extension, a disconnect, a shutdown) always leaves this run's execution
    /// closed: its task was told to stop, so nothing of it stays pending, whatever the run saw
    /// meanwhile (an answer refused by the cancelled task, an interrupt that raced the cancel).
    fn settle(&mut self, finish: FinishAs) -> FinishAs {
        let stopping = self.app.runs.stopping();
        let own = self.active.execution_id == self.live.ids.execution_id;
        if !own || !(stopping || self.active.is_cancelled()) {
            return finish;
        }
        let exec = self.exec();
        let open = !exec.pending.is_empty() || exec.task_id.is_some();
        let id = exec.execution_id.clone();
        if open || !self.doc.is_terminal(&id) {
            self.cancel_upstream();
            self.doc.mark_terminal();
            if let Err(e) = self.save() {
                log::error!("cannot record the end of run {}: {e}", self.input.run_id);
            }
        }
        match finish {
            FinishAs::Success => FinishAs::Success,
            _ if stopping => FinishAs::Error(shutting_down()),
            // Whatever else the run met (an answer the cancelled task refused), it was cancelled.
            _ => FinishAs::Error(Error::cancelled()),
        }
    }

    fn flush(&mut self) -> bool {
        let ok = self.stream.send(&self.out);
        self.out.clear();
        ok
    }

    fn exec(&mut self) -> &mut Execution {
        self.doc
            .execution
            .as_mut()
            .expect("admitted runs have an execution")
    }

    fn save(&self) -> Result<(), Error> {
        self.app.store.save(&self.doc)
    }

    fn metadata(&self, new_turn: bool) -> Value {
        iac_code_metadata(&self.input.iac, self.lang_tag.as_deref(), new_turn)
    }

    /// Cancels the A2A task once, whoever asks first (a disconnect, an error, the cancel extension).
    fn cancel_upstream(&self) {
        cancel_once(&self.app.a2a, &self.active);
    }

    /// From now on a vanished client cancels the task (the run is executing upstream). Before the
    /// task id is known the run is flagged, so it cancels the task the moment the id arrives.
    fn cancel_on_disconnect(&self) {
        let a2a = self.app.a2a.clone();
        let active = self.active.clone();
        self.stream.on_close(Box::new(move || {
            active.cancelled.store(true, Ordering::SeqCst);
            std::thread::spawn(move || cancel_once(&a2a, &active));
        }));
    }

    /// Stops and closes the execution a killed or stopped adapter left running (so the kernel
    /// does not refuse the new turn with "Task is already working"), then installs `next`.
    fn repair(&mut self, next: Execution) -> Result<(), Error> {
        let old = self.exec().clone();
        log::info!(
            "thread {}: execution {} never ended; stopping it before the new turn",
            self.input.thread_id,
            old.execution_id
        );
        if let Some(task) = &old.task_id {
            stop_task(&self.app.a2a, &self.active, task)?;
        }
        self.doc.mark_terminal();
        self.doc.execution = Some(next);
        self.save()?;
        let fresh = ActiveRun::new(&self.exec().execution_id, None);
        self._guard.replace(fresh.clone());
        *self.live.active.lock() = fresh.clone();
        self.active = fresh;
        Ok(())
    }

    fn new_turn(&mut self, next: Option<Execution>) -> FinishAs {
        if let Some(next) = next {
            if let Err(e) = self.repair(next) {
                return FinishAs::Error(e);
            }
        }
        if self.app.runs.stopping() {
            return self.terminal(FinishAs::Error(shutting_down()));
        }
        let Some(user) = self.input.user_message.clone() else {
            return FinishAs::Error(Error::invalid(
                "A new run requires a user message.",
                "新的 run 需要一条 user 消息。",
            ));
        };
        let message = json!({
            "messageId": user.id,
            "role": "ROLE_USER",
            "parts": user.parts,
            "metadata": {"iac_code": self.metadata(true)},
            "contextId": self.doc.context_id,
        });
        self.cancel_on_disconnect();
        let mut upstream = match self.app.a2a.send_streaming(message) {
            Ok(s) => s,
            Err(e) => return self.fail(e, false),
        };
        let pumped = self.pump(&mut upstream);
        self.conclude(pumped)
    }

    /// Reads the A2A stream into the client until the task reaches an end for this run.
    fn pump(&mut self, upstream: &mut A2aStream) -> Pumped {
        loop {
            if self.active.is_cancelled() {
                return Pumped::End(End::Failed(Error::cancelled()));
            }
            let item = match upstream.next_result() {
                Ok(Some(item)) => item,
                Ok(None) => return Pumped::Eof,
                Err(e) => return Pumped::Err(e),
            };
            // Items already buffered upstream go out in one write with this one: fewer
            // syscalls under load, and no added latency (we flush before we would block).
            if let Some(p) = self.project(&item, upstream.has_buffered()) {
                return p;
            }
        }
    }

    /// Projects one item, persisting newly learned identities first. `Some` ends the pump.
    /// Projects one item, persisting newly learned identities first; the events wait for the
    /// next item when `more` says one is already buffered. `Some` ends the pump.
    fn project(&mut self, item: &Value, more: bool) -> Option<Pumped> {
        #[cfg(debug_assertions)]
        panic_if_asked(item);
        let end = match self.proj.on_item(item, &mut self.out) {
            Ok(end) => end,
            Err(e) => return Some(Pumped::Err(e)),
        };
        if let Err(e) = self.learn_identities() {
            return Some(Pumped::Err(e));
        }
        if (!more || end.is_some()) && !self.flush() {
            return Some(Pumped::ClientGone);
        }
        end.map(Pumped::End)
    }

    /// The task and session ids are recovery-critical: written before the run goes on.
    fn learn_identities(&mut self) -> Result<(), Error> {
        let exec_task = self
            .doc
            .execution
            .as_ref()
            .and_then(|e| e.task_id.as_deref());
        let changed_task = self.proj.task_id().is_some() && exec_task != self.proj.task_id();
        let changed_session = self.proj.session_id().is_some()
            && self.doc.iac_code_session_id.as_deref() != self.proj.session_id();
        if !changed_task && !changed_session {
            return Ok(());
        }
        let task = self.proj.task_id().map(String::from);
        let session = self.proj.session_id().map(String::from);
        if changed_task {
            self.exec().task_id = task.clone();
            *self.active.task_id.lock() = task;
        }
        if changed_session {
            self.doc.iac_code_session_id = session;
        }
        self.save()
    }

    fn conclude(&mut self, pumped: Pumped) -> FinishAs {
        match pumped {
            Pumped::End(End::Success) => self.terminal(FinishAs::Success),
            Pumped::End(End::Interrupt(inputs)) => self.interrupt(inputs),
            Pumped::End(End::Failed(e)) => {
                if e.code == Code::Cancelled {
                    self.cancel_upstream();
                }
                self.terminal(FinishAs::Error(e))
            }
            Pumped::Eof if self.proj.got_reply_message() => self.terminal(FinishAs::Success),
            Pumped::Eof => self.fail(
                Error::a2a_unavailable("the A2A stream ended before the task finished"),
                true,
            ),
            Pumped::Err(e) => self.fail(e, true),
            Pumped::ClientGone => {
                log::info!(
                    "client of run {} went away; cancelling its task",
                    self.input.run_id
                );
                self.fail(Error::cancelled(), true)
            }
        }
    }

    /// Ends the execution with an error; `cancel` also cancels the A2A task (best effort).
    fn fail(&mut self, e: Error, cancel: bool) -> FinishAs {
        if cancel {
            self.cancel_upstream();
        }
        self.terminal(FinishAs::Error(e))
    }

    fn terminal(&mut self, finish: FinishAs) -> FinishAs {
        self.doc.mark_terminal();
        if let Err(e) = self.save() {
            log::error!("cannot record the end of run {}: {e}", self.input.run_id);
        }
        finish
    }

    /// Persists the input waits, then (only then) announces them.
    fn interrupt(&mut self, inputs: Vec<Value>) -> FinishAs {
        let ttl = self.app.config.interrupt_ttl.as_millis() as u64;
        let expires_ms = ids::now_ms() + ttl;
        let expires = ids::rfc3339(expires_ms);
        let durable = self.proj.durable();
        let task = self.proj.task_id().map(String::from);
        let exec = self.exec();
        for input in inputs {
            let id = input["inputId"].as_str().unwrap_or_default().to_string();
            exec.pending.entry(id).or_insert(Pending {
                sideband: interrupts::is_sideband(&input),
                value: input,
                expires_at: Some(expires.clone()),
                expires_at_ms: Some(expires_ms),
            });
        }
        exec.task_id = task;
        exec.pipeline_sequence = durable.pipeline_sequence;
        exec.pipeline_open_steps = durable.open_steps.into_iter().collect();
        exec.text_snapshot_digests = durable.text_digests.into_iter().collect();
        if let Err(e) = self.save() {
            // Fail closed: nothing resumable is announced, and the task must not wait forever.
            self.cancel_upstream();
            self.exec().pending.clear();
            return FinishAs::Error(e);
        }
        FinishAs::Interrupt(self.interrupt_list())
    }

    fn interrupt_list(&mut self) -> Vec<Value> {
        let lang = match self.lang_tag.as_deref() {
            Some(t) if t.starts_with("zh") => Lang::Zh,
            _ => Lang::En,
        };
        self.exec()
            .pending
            .values()
            .map(|p| {
                interrupts::to_interrupt(&p.value, p.expires_at.as_deref().unwrap_or(""), lang)
            })
            .collect()
    }

    fn resume(&mut self, entries: Vec<ResumeEntry>) -> FinishAs {
        let execution_id = self.exec().execution_id.clone();
        let applied = |doc: &ThreadDoc, id: &str| {
            doc.applied_resume_digests
                .iter()
                .find(|d| d.execution_id == execution_id && d.interrupt_id == id)
                .map(|d| d.digest.clone())
        };
        if self.exec().pending.is_empty() {
            let known = entries
                .iter()
                .any(|e| applied(&self.doc, &e.interrupt_id).is_some());
            return FinishAs::Error(if known {
                already_applied()
            } else if self.doc.is_terminal(&execution_id) {
                // Cancelled, expired or finished: nothing is left to resume (the reference's code).
                lost()
            } else {
                unknown_interrupt()
            });
        }
        // 1. The kernel still has the session, task and context we recorded.
        let Some(task_id) = self.exec().task_id.clone() else {
            return self.terminal(FinishAs::Error(lost()));
        };
        if let Some(session) = self.doc.iac_code_session_id.clone() {
            match self
                .app
                .a2a
                .ensure_restored(&self.doc.cwd, &session, &task_id)
            {
                Ok(true) => {}
                Ok(false) => return self.terminal(FinishAs::Error(lost())),
                Err(e) => return FinishAs::Error(e),
            }
        }
        let task = match self.app.a2a.get_task(&task_id) {
            Ok(Some(task)) => task,
            Ok(None) => return self.terminal(FinishAs::Error(lost())),
            Err(e) => return FinishAs::Error(e),
        };
        let same_task = task.get("id").and_then(Value::as_str) == Some(task_id.as_str());
        let same_context =
            task.get("contextId").and_then(Value::as_str) == Some(self.doc.context_id.as_str());
        if !same_task || !same_context {
            return FinishAs::Error(Error::a2a_protocol(
                "the A2A task or context no longer matches the thread",
            ));
        }
        let state = crate::projection::normalize_state(
            task.pointer("/status/state")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        if state != "input-required" {
            return self.terminal(FinishAs::Error(lost()));
        }
        // Inputs the kernel has that we have not announced yet (absence clears nothing: a task
        // restored after a kernel restart may carry no input projection).
        let iac = task
            .pointer("/metadata/iac_code")
            .cloned()
            .unwrap_or(Value::Null);
        let fresh: Vec<Value> =
            interrupts::inputs_of(&iac)
                .into_iter()
                .filter(|i| {
                    !self.doc.execution.as_ref().is_some_and(|e| {
                        e.pending.contains_key(i["inputId"].as_str().unwrap_or(""))
                    })
                })
                .collect();
        // 2. Pipeline events this client missed.
        match self
            .app
            .a2a
            .pipeline_state(&task_id, self.exec().pipeline_sequence)
        {
            Ok(Some(state)) => {
                self.proj.recover_pipeline(&state, &mut self.out);
                if !self.flush() {
                    return FinishAs::Error(Error::cancelled());
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("pipeline recovery failed: {e}"),
        }
        if !fresh.is_empty() {
            return self.interrupt(fresh);
        }
        // 3. Every pending interrupt answered exactly once, each answer valid.
        let mut answers: Vec<(ResumeEntry, Answer)> = Vec::new();
        for entry in &entries {
            if answers
                .iter()
                .any(|(e, _)| e.interrupt_id == entry.interrupt_id)
            {
                return FinishAs::Error(incomplete("a response repeats an interruptId"));
            }
            let Some(pending) = self.exec().pending.get(&entry.interrupt_id).cloned() else {
                return FinishAs::Error(match applied(&self.doc, &entry.interrupt_id) {
                    Some(_) => already_applied(),
                    None => unknown_interrupt(),
                });
            };
            match interrupts::answer(&pending.value, entry.cancelled, entry.payload.as_ref()) {
                Ok(a) => answers.push((entry.clone(), a)),
                Err(e) => return FinishAs::Error(e),
            }
        }
        if answers.len() != self.exec().pending.len() {
            return FinishAs::Error(incomplete("not every pending interrupt was answered"));
        }
        if answers.iter().any(|(_, a)| *a == Answer::CancelExecution) {
            self.cancel_upstream();
            return self.terminal(FinishAs::Error(Error::new(
                Code::Cancelled,
                "The execution was cancelled by the interrupt response.",
                "该 execution 已按 Interrupt 响应取消。",
            )));
        }
        // 4. The answers, in the order given; each leaves the durable pending state once A2A
        // accepted it.
        let last = answers.len() - 1;
        for (i, (entry, answer)) in answers.into_iter().enumerate() {
            let Answer::Message {
                parts,
                extra_metadata,
            } = answer
            else {
                continue;
            };
            let mut meta = self.metadata(false);
            if let (Some(m), Some(Value::Object(extra))) = (meta.as_object_mut(), extra_metadata) {
                m.extend(extra);
            }
            let message = json!({
                "messageId": format!("agui-resume-{}-{}", self.input.run_id, entry.interrupt_id),
                "role": "ROLE_USER",
                "parts": parts,
                "metadata": {"iac_code": meta},
                "contextId": self.doc.context_id,
                "taskId": task_id,
            });
            let mut upstream = match self.app.a2a.send_streaming(message) {
                Ok(s) => s,
                Err(e) => return FinishAs::Error(e),
            };
            let first = match upstream.next_result() {
                Ok(Some(item)) => item,
                Ok(None) => {
                    return FinishAs::Error(Error::a2a_unavailable(
                        "the A2A service did not accept the answer",
                    ))
                }
                Err(e) => return FinishAs::Error(e),
            };
            // Accepted: the answer is applied exactly once from here on.
            let exec = self.exec();
            exec.pending.remove(&entry.interrupt_id);
            let digest = ids::json_digest(&entry.canonical());
            self.doc.applied_resume_digests.push(AppliedDigest {
                digest,
                execution_id: execution_id.clone(),
                interrupt_id: entry.interrupt_id.clone(),
            });
            if let Err(e) = self.save() {
                self.cancel_upstream();
                return FinishAs::Error(e);
            }
            self.cancel_on_disconnect();
            if let Some(p) = self.project(&first, false) {
                return self.conclude(p);
            }
            if i == last {
                let pumped = self.pump(&mut upstream);
                return self.conclude(pumped);
            }
        }
        FinishAs::Success
    }
}

/// Debug builds only: an agent message of exactly this text panics the run thread, so the test
/// suite can prove a panicking run still ends with `RUN_ERROR` (tests/reliability.rs).
#[cfg(debug_assertions)]
fn panic_if_asked(item: &Value) {
    let text = item.pointer("/statusUpdate/status/message/parts/0/text");
    if text.and_then(Value::as_str) == Some("__iac_code_agui_test_panic__") {
        panic!("test panic requested by the upstream");
    }
}

/// How long the repair of an unfinished execution may wait for its task to stop.
const REPAIR_TIMEOUT: Duration = Duration::from_secs(10);

/// Cancels `task` and waits (bounded) until the kernel no longer runs it.
fn stop_task(a2a: &A2aClient, active: &ActiveRun, task: &str) -> Result<(), Error> {
    let deadline = Instant::now() + REPAIR_TIMEOUT;
    let mut last_cancel: Option<Instant> = None;
    loop {
        // Also an input wait nobody recorded is cancelled: no client can ever answer it.
        if last_cancel.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            active.cancel_sent.store(true, Ordering::SeqCst);
            if let Err(e) = a2a.cancel_task(task) {
                log::warn!("CancelTask {task} failed: {e}");
            }
            last_cancel = Some(Instant::now());
        }
        match a2a.task_state(task) {
            Ok(None) => return Ok(()),
            Ok(Some(state)) => {
                let state = crate::projection::normalize_state(&state);
                if !matches!(state.as_str(), "working" | "submitted") {
                    return Ok(());
                }
            }
            Err(e) => log::warn!("GetTask {task} failed: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                Code::A2aUnavailable,
                "The thread's previous execution is still running in the A2A service and could \
                 not be stopped; try again.",
                "该 thread 的上一个 execution 仍在 A2A 服务中运行且无法停止，请重试。",
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cancel_once(a2a: &A2aClient, active: &ActiveRun) {
    // Without a task id there is nothing to cancel yet; a later call (once it is known) will.
    let Some(task) = active.task_id.lock().clone() else {
        return;
    };
    if active.cancel_sent.swap(true, Ordering::SeqCst) {
        return;
    }
    // A burst of cancels (hundreds of clients leaving at once) can outlast one call's deadline;
    // a task left running would hold its context, so a transport failure is retried, bounded.
    for attempt in 1..=CANCEL_ATTEMPTS {
        match a2a.cancel_task(&task) {
            Ok(()) => return,
            Err(e) if attempt == CANCEL_ATTEMPTS => log::warn!("CancelTask {task} failed: {e}"),
            Err(e) => {
                log::info!("CancelTask {task} failed (attempt {attempt}), retrying: {e}");
                std::thread::sleep(Duration::from_millis(500 * attempt as u64));
            }
        }
    }
}

/// How many times a failed `CancelTask` is tried (each within the A2A client's cancel deadline).
const CANCEL_ATTEMPTS: u32 = 3;

fn already_applied() -> Error {
    Error::new(
        Code::ResumeAlreadyApplied,
        "This interrupt response has already been applied.",
        "该 Interrupt 响应已应用。",
    )
}

fn unknown_interrupt() -> Error {
    Error::new(
        Code::UnknownInterrupt,
        "The resume refers to an unknown interrupt.",
        "Resume 引用了未知的 Interrupt。",
    )
}

fn incomplete(why: &str) -> Error {
    Error::new(
        Code::IncompleteResume,
        format!("The resume is incomplete: {why}."),
        format!(
            "Resume 不完整：{}。",
            match why {
                "a response repeats an interruptId" => "存在重复的 interruptId",
                _ => "未覆盖全部 pending Interrupt",
            }
        ),
    )
}

/// `POST /extensions/iac-code/v1/executions/{executionId}/cancel`.
pub fn cancel_execution(app: &App, execution_id: &str, body: &[u8]) -> Result<Value, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        Error::invalid(
            "The cancel request body must be JSON.",
            "取消请求体必须是 JSON。",
        )
    })?;
    let field = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .ok_or_else(|| {
                Error::invalid(
                    format!("`{k}` is required."),
                    format!("缺少必填字段 `{k}`。"),
                )
            })
    };
    let (thread_id, ros) = (field("threadId")?, field("rosInvocationId")?);
    let not_found = || {
        Error::new(
            Code::ExecutionNotFound,
            "The execution was not found.",
            "未找到该 execution。",
        )
    };
    let slot = app.store.slot(&thread_id);
    let result = (|| {
        let guard = slot.lock();
        let mut doc = app.store.load(&thread_id)?.ok_or_else(not_found)?;
        let Some(exec) = doc.execution.clone() else {
            return Err(not_found());
        };
        let reply = |status: &str| json!({"executionId": execution_id, "status": status});
        if exec.execution_id != execution_id {
            return if doc.is_terminal(execution_id) {
                Ok(reply("already_terminal"))
            } else {
                Err(not_found())
            };
        }
        if exec.ros_invocation_id != ros {
            return Err(not_found());
        }
        if let Some(active) = guard
            .active
            .as_ref()
            .filter(|a| a.execution_id == execution_id)
        {
            // The run thread owns the document; it records the end when the stream stops.
            active.cancelled.store(true, Ordering::SeqCst);
            let (a2a, active) = (app.a2a.clone(), active.clone());
            drop(guard);
            cancel_once(&a2a, &active);
            return Ok(reply("cancelled"));
        }
        if doc.is_terminal(execution_id) {
            return Ok(reply("already_terminal"));
        }
        // Closed durably first, so no resume can apply meanwhile; the kernel is told after the
        // thread's lock is released (CancelTask is bounded, but a hung kernel holds no one).
        doc.mark_terminal();
        app.store.save(&doc)?;
        drop(guard);
        if let Some(task) = &exec.task_id {
            if let Err(e) = app.a2a.cancel_task(task) {
                log::warn!("CancelTask {task} failed: {e}");
            }
        }
        Ok(reply("cancelled"))
    })();
    drop(slot);
    app.store.release(&thread_id);
    result
}
