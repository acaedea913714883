//! The life of one run on its own OS thread, from `RUN_STARTED` to the end of the stream.
//!
//! Admission (`admit`, in `admit.rs`) checks a request against its thread and marks the thread busy.
//! The run (`drive`) then owns the thread's document until it ends: it streams the A2A task
//! through the [`Projection`], persists what a restart needs before announcing it (fail closed),
//! and always closes the stream with `RUN_FINISHED` or `RUN_ERROR`, even when it panics.
//!
//! This file is the run's life: one sequence (`Run::drive`) and one function per phase. The
//! phases that need more room have their own files: `resume.rs` (answers to interrupts),
//! `repair.rs` (the execution a killed adapter left running), `end.rs` (what the task's end means
//! for the execution, what a cancel leaves, a panic's end); `cancel.rs` is the cancel extension,
//! `shutdown.rs` ends every run on SIGTERM.

mod admit;
mod cancel;
mod echo;
mod end;
mod follow;
mod identity;
mod relay;
mod repair;
mod resume;
mod shutdown;

pub(crate) use admit::{admit, Admitted};
pub(crate) use cancel::cancel_execution;
use identity::admitted_ids;
pub(crate) use identity::{durable_of, run_ids};
#[cfg(debug_assertions)]
use relay::panic_if_asked;
pub(crate) use relay::{project_next, write_events};
pub use shutdown::shutdown;

use crate::a2a::{self, A2aStream, Turn};
use crate::app::{App, LiveRun};
use crate::error::{Error, Lang, Msg};
use crate::feed::Feed;
use crate::history::Recorder;
use crate::input::{RunInput, UserMessage};
use crate::projection::{End, Events, Projection};
use crate::store::{ActiveRun, Execution, ThreadDoc};
use crate::stream::SseStream;
use admit::{ActiveGuard, Mode};
use cancel::{cancel_in_background, cancel_once, stop_soon};
use echo::{echoed_input, user_message_json};
use end::end_after_panic;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Runs an admitted request to its end on the calling thread, writing to `stream`.
///
/// A held run waits for its kernel under this frame for minutes, and the pages of every frame
/// live above its read stay resident (a frame's pages are all touched when it is entered: stack
/// probes), so its frames hold pointers: the run is built on the heap (`Run::new`), and its
/// set-up and teardown are functions of their own, never inlined, whose locals are gone when it
/// waits. Never inlined itself, so that its caller's frame stays small too.
#[inline(never)]
pub(crate) fn drive(app: &App, admitted: Box<Admitted>, stream: &Arc<SseStream>) {
    let (live, feed) = open_run(app, &admitted, stream);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (run, mode) = Run::new(app, admitted, stream.clone(), live.clone(), feed.clone());
        run.drive(mode);
    }));
    close_run(app, &live, &feed, outcome.is_err());
}

/// The run announced to the rest of the adapter: its log fields, its replay buffer, its entry in
/// the live runs (a cancel, a shutdown and the heartbeat find it there).
#[inline(never)]
fn open_run(app: &App, admitted: &Admitted, stream: &Arc<SseStream>) -> (Arc<LiveRun>, Arc<Feed>) {
    let ids = admitted_ids(admitted);
    crate::logctx::set_execution(&ids.execution_id);
    stream.set_tag(&ids.execution_id);
    let feed = app.feeds.open(&ids.execution_id);
    feed.watch();
    app.threads.run_started(&ids.thread_id, &feed);
    let live = LiveRun::new(
        stream.clone(),
        admitted.active.clone(),
        ids,
        admitted.lang,
        app.a2a.for_run(),
    );
    app.runs.register(&live);
    (live, feed)
}

/// The run's end, told to the rest of the adapter; a run that panicked is ended here first.
#[inline(never)]
fn close_run(app: &App, live: &LiveRun, feed: &Arc<Feed>, panicked: bool) {
    if panicked {
        end_after_panic(live.ids.clone(), live.lang, &live.stream, feed);
    }
    live.ended.store(true, Ordering::SeqCst);
    app.feeds.ended(&live.ids.execution_id, feed);
}

/// When a projected item's events go to the client.
#[derive(Clone, Copy)]
enum Write {
    Now,
    /// With the next item's, which is already buffered upstream.
    WithNextItem,
}

/// How often at most a run gives back the stack pages below its read loop.
const STACK_RELEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// One run on its thread, with everything it owns until it ends.
struct Run<'a> {
    app: &'a App,
    input: RunInput,
    doc: ThreadDoc,
    active: Arc<ActiveRun>,
    stream: Arc<SseStream>,
    proj: Projection,
    /// Events projected but not written yet.
    out: Events,
    /// Their SSE frames (reused: a frame allocates nothing).
    frames: Vec<u8>,
    /// A task or session id learned and not yet written to the thread's document.
    identities_unsaved: bool,
    /// The request's one language decision (errors and interrupt texts).
    lang: Lang,
    /// `preferredLanguage` for the kernel: the client's own tag, else the decided language's.
    lang_tag: String,
    live: Arc<LiveRun>,
    guard: ActiveGuard,
    /// This run's replay buffer: every event goes through it, numbered, before its client.
    feed: Arc<Feed>,
    /// The thread's kept conversation, fed with every event the run writes.
    turn: Recorder,
}

impl<'a> Run<'a> {
    /// The run, built here and moved to the heap once: its frames then hold a pointer to it,
    /// not its ~2 KiB (the projection, the input, the thread's document). Never inlined: its
    /// temporaries would stay in the frame a held run waits under, resident.
    #[inline(never)]
    fn new(
        app: &'a App,
        a: Box<Admitted>,
        stream: Arc<SseStream>,
        live: Arc<LiveRun>,
        feed: Arc<Feed>,
    ) -> (Box<Run<'a>>, Mode) {
        let a = *a;
        let mut proj = Projection::new(live.ids.clone(), a.lang)
            .in_session(a.doc.iac_code_session_id.as_deref());
        if let (Mode::Resume(_), Some(exec)) = (&a.mode, &a.doc.execution) {
            if let Some(task) = &exec.task_id {
                let durable = durable_of(exec);
                proj = proj
                    .resuming(task, a.doc.iac_code_session_id.as_deref(), durable)
                    .until_accepted();
            }
        }
        let turn = Recorder::new(&app.history, &live.ids.thread_id);
        if let Mode::NewTurn(m) | Mode::RepairThenNewTurn { message: m, .. } = &a.mode {
            proj = proj.echoing(echoed_input(&live.ids, m));
        }
        let lang_tag =
            (a.input.iac.preferred_language.clone()).unwrap_or_else(|| a.lang.tag().to_string());
        let run = Box::new(Run {
            app,
            input: a.input,
            doc: a.doc,
            active: a.active,
            stream,
            proj,
            out: Events::default(),
            frames: Vec::new(),
            identities_unsaved: false,
            lang: a.lang,
            lang_tag,
            live,
            guard: a.guard,
            feed,
            turn,
        });
        (run, a.mode)
    }

    /// The run's life: `RUN_STARTED`, its phase, what a cancel leaves, the closing events. A
    /// held run waits under this frame: its start and its end are phases of their own.
    fn drive(mut self: Box<Self>, mode: Mode) {
        self.start(&mode);
        let end = match mode {
            Mode::NewTurn(message) => self.new_turn(message),
            Mode::RepairThenNewTurn { next, message } => match self.repair(next) {
                Ok(()) => self.new_turn(message),
                Err(e) => End::Failed(e),
            },
            Mode::Resume(entries) => self.resume(&entries),
            Mode::Expired => End::Failed(Msg::InterruptExpired.err()),
        };
        self.close(end);
    }

    /// `RUN_STARTED` (never inlined: its locals would stay in the frame the run waits under).
    #[inline(never)]
    fn start(&mut self, mode: &Mode) {
        log::debug!(
            "run {} on thread {} starts ({})",
            self.input.run_id,
            self.input.thread_id,
            match mode {
                Mode::NewTurn(_) | Mode::RepairThenNewTurn { .. } => "new turn",
                Mode::Resume(_) => "resume",
                Mode::Expired => "expired",
            }
        );
        self.proj.start(&mut self.out);
        self.flush();
    }

    /// The request's `forwardedProps.iacCode` as the A2A client sends it, in the run's language.
    fn turn_options(&self) -> a2a::TurnOptions<'_> {
        let iac = &self.input.iac;
        let thinking = iac.thinking.as_ref();
        let cloud = iac.alibaba_cloud.as_ref();
        a2a::TurnOptions {
            cwd: &iac.cwd,
            ros_invocation_id: &iac.ros_invocation_id,
            preferred_language: Some(&self.lang_tag),
            cleanup_only: iac.cleanup_only.unwrap_or(false),
            user_id: iac.user_id.as_deref(),
            channel: iac.channel.as_deref(),
            model: iac.model.as_deref(),
            llm_api_key: iac.llm_api_key.as_deref(),
            candidate_presentation: iac.candidate_presentation,
            mode: a2a::ExecutionMode {
                run_mode: iac.run_mode,
                pipeline_name: iac.pipeline_name.as_deref(),
            },
            thinking: a2a::ThinkingMetadata {
                enabled: thinking.and_then(|t| t.enabled),
                effort: thinking.and_then(|t| t.effort.as_deref()),
                budget: thinking.and_then(|t| t.budget),
            },
            cloud: a2a::CloudCredentials {
                access_key_id: cloud.and_then(|c| c.access_key_id.as_deref()),
                access_key_secret: cloud.and_then(|c| c.access_key_secret.as_deref()),
                security_token: cloud.and_then(|c| c.security_token.as_deref()),
                region_id: cloud.and_then(|c| c.region_id.as_deref()),
            },
        }
    }

    /// Sends the user's message and reads the task to its next end. A held run waits under this
    /// frame: the sending is a phase of its own (never inlined, nor is this one, so that its
    /// caller's frame does not grow by it).
    #[inline(never)]
    fn new_turn(&mut self, message: UserMessage) -> End {
        let mut upstream = match self.send_turn(message) {
            Ok(upstream) => upstream,
            Err(end) => return end,
        };
        let end = self.pump(&mut upstream);
        self.conclude(end)
    }

    /// The user's message sent; its stream, or the run's end when it cannot be sent.
    /// The message is serialized once, its text then moved to the replay buffer (a join's
    /// snapshot), and only the bytes go out: one copy of a large message besides the text.
    #[inline(never)]
    fn send_turn(&mut self, message: UserMessage) -> Result<A2aStream, End> {
        if self.app.runs.stopping() {
            return Err(self.terminal(End::Failed(shutting_down())));
        }
        let UserMessage { id, parts } = message;
        let mut message = a2a::user_message(
            &id,
            parts,
            &self.doc.context_id,
            &self.turn_options(),
            Turn::New,
        );
        let body = a2a::streaming_body(&message);
        (self.app.history).user(&self.input.thread_id, &id, &message["parts"]);
        self.feed.set_user(user_message_json(&id, &mut message));
        drop(message);
        self.cancel_on_disconnect();
        (self.live.upstream.send_streaming_body(body)).map_err(|e| self.terminal(End::Failed(e)))
    }

    /// Reads the A2A stream into the client until the task reaches an end for this run. A stream
    /// that stops short (closed, broken, its client gone) leaves the task cancelled. A held run
    /// waits under this frame: what an item needs is in `relay`'s (never inlined).
    #[inline(never)]
    fn pump(&mut self, upstream: &mut A2aStream) -> End {
        let mut stack_released: Option<std::time::Instant> = None;
        loop {
            if self.active.is_cancelled() {
                return End::Failed(Msg::Cancelled.err());
            }
            // The view stays where next_view built it (matched by reference, not moved).
            let read = upstream.next_view();
            let next = match read {
                Ok(Some(ref next)) => next,
                Ok(None) if self.proj.got_reply_message() => return End::Success,
                Ok(None) => {
                    let e = Msg::StreamEndedEarly.err();
                    return self.abandon(e);
                }
                Err(e) => return self.abandon(e),
            };
            if let Some(end) = self.relay(next) {
                return end;
            }
            // Nothing more buffered: the next read may wait long (a held run). What admission
            // and the projection touched below this frame goes back (at most once a second).
            if !next.buffered && stack_released.is_none_or(|t| t.elapsed() >= STACK_RELEASE) {
                crate::memory::release_unused_stack();
                stack_released = Some(std::time::Instant::now());
            }
        }
    }

    /// One item read from the stream: projected, and written unless the next is already
    /// buffered upstream: those go out in one write with it (fewer syscalls under load, and no
    /// added latency: the write comes before a read could block). `Some` ends the read.
    #[inline(never)]
    fn relay(&mut self, next: &a2a::Next) -> Option<End> {
        let write = if next.buffered {
            Write::WithNextItem
        } else {
            Write::Now
        };
        let end = project_next(&mut self.proj, next, &mut self.out);
        self.after_item(end, write)
    }

    /// Projects one item, persisting newly learned identities first, and writes its events when
    /// `write` says so (an end is written at once). `Some` ends the pump.
    fn project(&mut self, item: &Value, write: Write) -> Option<End> {
        #[cfg(debug_assertions)]
        panic_if_asked(
            item.pointer("/statusUpdate/status/message/parts/0/text")
                .and_then(Value::as_str),
        );
        let end = self.proj.on_item(item, &mut self.out);
        self.after_item(end, write)
    }

    /// What follows an item's projection: identities learned, and persisted before events are
    /// written, when `write` says so (an end is written at once). `Some` ends the pump.
    fn after_item(&mut self, end: Result<Option<End>, Error>, write: Write) -> Option<End> {
        let end = match end {
            Ok(end) => end,
            Err(e) => return Some(self.abandon(e)),
        };
        self.learn_identities();
        let now = matches!(write, Write::Now) || end.is_some();
        if !now {
            return end;
        }
        if let Err(e) = self.save_identities() {
            return Some(self.abandon(e));
        }
        if !self.flush() {
            log::info!(
                "client of run {} went away; cancelling its task",
                self.input.run_id
            );
            return Some(self.abandon(Msg::Cancelled.err()));
        }
        end
    }

    /// Takes the task and session ids the projection learned into the thread's document (and
    /// the task id at once where a cancel looks for it).
    fn learn_identities(&mut self) {
        let exec_task = self
            .doc
            .execution
            .as_ref()
            .and_then(|e| e.task_id.as_deref());
        let changed_task = self.proj.task_id().is_some() && exec_task != self.proj.task_id();
        let changed_session = self.proj.session_id().is_some()
            && self.doc.iac_code_session_id.as_deref() != self.proj.session_id();
        if !changed_task && !changed_session {
            return;
        }
        let task = self.proj.task_id().map(String::from);
        let session = self.proj.session_id().map(String::from);
        if changed_task {
            self.execution().task_id = task.clone();
            *self.active.task_id.lock() = task;
            // A Stop (or a client that left) came before the kernel named the task: its CancelTask
            // goes now (a kernel may send no other item), off this thread (it may hang 5 s).
            if self.active.is_cancelled() {
                self.live.task_may_outlive.store(true, Ordering::SeqCst);
                cancel_in_background(&self.app.a2a, &self.active);
            }
        }
        if changed_session {
            self.doc.iac_code_session_id = session;
        }
        self.identities_unsaved = true;
    }

    /// The task and session ids are recovery-critical: written before any event of the items
    /// that brought them. Items read in one go share one write (the kernel's task and its first
    /// update bring the task id and the session id: one fsync'd write, not two).
    fn save_identities(&mut self) -> Result<(), Error> {
        if !self.identities_unsaved {
            return Ok(());
        }
        self.save()?;
        self.identities_unsaved = false;
        Ok(())
    }

    /// Writes the projected events (replay buffer, conversation, client; then the text still
    /// streaming settled in the conversation); `false` once the client is gone
    /// and the run should stop (always `true` with a detach grace: the grace decides).
    fn flush(&mut self) -> bool {
        let ok = write_events(
            &self.feed,
            &self.stream,
            &mut self.out,
            &mut self.frames,
            &mut self.turn,
        );
        self.turn.settle();
        ok || !self.app.config.detach_grace.is_zero()
    }

    fn execution(&mut self) -> &mut Execution {
        self.doc
            .execution
            .as_mut()
            .expect("admitted runs have an execution")
    }

    /// Saves the thread's document; the conversation is made durable at the same points.
    fn save(&mut self) -> Result<(), Error> {
        self.turn.checkpoint();
        self.app.history.sync(&self.input.thread_id);
        self.guard.save(&self.doc)
    }

    /// [`Run::save`] without waiting for the disk, neither the state file nor the conversation
    /// log: the end of a run whose client left (`end.rs`, `record_end`).
    fn save_unsynced(&mut self) -> Result<(), Error> {
        self.turn.checkpoint();
        self.guard.save_unsynced(&self.doc)
    }

    /// Cancels the A2A task once, whoever asks first (a disconnect, an error, the cancel extension).
    fn cancel_upstream(&self) {
        cancel_once(&self.app.a2a, &self.active);
    }

    /// From now on a vanished client cancels the task (the run is executing upstream): at once,
    /// or, with a detach grace, when the grace runs out with nobody re-attached. Before the task
    /// id is known the run is flagged, so it cancels the task the moment the id arrives.
    fn cancel_on_disconnect(&self) {
        let stop = self.stopper();
        let expire = stop.clone();
        self.feed.on_expire(Box::new(move || expire()));
        let feed = self.feed.clone();
        let grace = !self.app.config.detach_grace.is_zero();
        self.stream.on_close(Box::new(move || {
            if grace {
                feed.unwatch();
            } else {
                stop();
            }
        }));
    }

    /// Cancels the run's task for a client that is gone, and frees the thread at once when the
    /// task is known: the kernel may take seconds to wind a cancelled task down, and the thread's
    /// next turn waits for that itself (bounded, `repair.rs`), so it is neither refused as
    /// `THREAD_BUSY` nor sent while the old task still runs. From then on this run saves nothing.
    /// A kernel that never ends the stream does not hold the run: its connection is shut down
    /// after a grace (`cancel::stop_soon`), and the run ends and frees the thread on its own.
    fn stopper(&self) -> Arc<dyn Fn() + Send + Sync> {
        let a2a = self.app.a2a.clone();
        let active = self.active.clone();
        let slot = self.guard.handle();
        let live = Arc::downgrade(&self.live);
        Arc::new(move || {
            active.cancelled.store(true, Ordering::SeqCst);
            if active.task_id.lock().is_some() {
                slot.release();
            }
            cancel_in_background(&a2a, &active);
            if let Some(live) = live.upgrade() {
                stop_soon(live);
            }
        })
    }
}

fn shutting_down() -> Error {
    Msg::ShuttingDown.err()
}

fn lost() -> Error {
    Msg::ExecutionUnrecoverable.err()
}
