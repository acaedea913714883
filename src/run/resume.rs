//! Resume: the client's answers to the interrupts its last run announced, in phases. Each phase
//! either hands the next what it learned (`Continue`) or ends the run (`Break`):
//!
//! 1. [`check_pending`](Run::check_pending): something is waiting for an answer;
//! 2. [`restore_session`](Run::restore_session), [`check_identity`](Run::check_identity): the kernel
//!    still has the session, task and context we recorded, and the task still waits for input;
//! 3. [`recover_pipeline`](Run::recover_pipeline): pipeline events this client missed;
//! 4. [`validate_answers`](Run::validate_answers): every pending interrupt answered exactly once,
//!    each answer valid;
//! 5. [`send_answers`](Run::send_answers): one by one, each leaving `pending` only once the kernel
//!    accepted it.

use super::{lost, Run, Write};
use crate::a2a::frame::TaskState;
use crate::a2a::{self, A2aStream, ExecutionMode, Rpc, Turn};
use crate::error::{Code, Error, Msg};
use crate::ids;
use crate::input::ResumeEntry;
use crate::interrupts::{self, Answer};
use crate::projection::End;
use crate::store::{AppliedDigest, ThreadDoc};
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// A pending interrupt's validated answer, with the input it answers.
struct Answered {
    entry: ResumeEntry,
    answer: Answer,
    /// The pending input (persisted fields).
    input: Value,
    /// A pipeline's side wait: answered with a unary `SendMessage` while the task runs on.
    sideband: bool,
}

impl Answered {
    fn is_permission(&self) -> bool {
        self.input.get("kind").and_then(Value::as_str) == Some("permission")
    }
}

impl Run<'_> {
    /// Resumes the waiting execution with the client's answers. Never inlined: its frame would
    /// grow the one a held new turn waits under. A resumed run then waits under this frame
    /// (`send_answers` inlined into it): it holds what `prepare_answers` gives and the last
    /// answer's stream, the phases' locals are in their own frames.
    #[inline(never)]
    pub(super) fn resume(&mut self, entries: &[ResumeEntry]) -> End {
        match self.prepare_answers(entries) {
            // Every answer was taken by the kernel already (an adapter killed before it heard
            // back): the task runs on; follow it.
            Continue((task_id, answers)) if answers.is_empty() => {
                let since = self.proj.durable().pipeline_sequence;
                self.proj.accepted(&mut self.out);
                self.cancel_on_disconnect();
                self.follow(&task_id, since)
            }
            Continue((task_id, answers)) => self.send_answers(&task_id, answers),
            Break(end) => end,
        }
    }

    /// Phases 1–4 (after the answers applied already in this execution are known to the
    /// projection); `Continue` carries the task id and the answers to send. Never inlined: its
    /// locals would stay in the frame a resumed run then waits under.
    #[inline(never)]
    fn prepare_answers(
        &mut self,
        entries: &[ResumeEntry],
    ) -> ControlFlow<End, (String, Vec<Answered>)> {
        let execution_id = self.execution().execution_id.clone();
        let applied: Vec<String> = self
            .doc
            .applied_resume_digests
            .iter()
            .filter(|d| d.execution_id == execution_id)
            .map(|d| d.interrupt_id.clone())
            .collect();
        self.proj.answered(applied);
        self.check_pending(entries)?;
        let task_id = self.restore_session()?;
        let task = self.check_identity(&task_id)?;
        let fresh = self.unannounced_inputs(&task);
        let since = self.execution().pipeline_sequence;
        self.recover_pipeline(&task_id, since)?;
        if !fresh.is_empty() {
            return Break(self.interrupt(fresh));
        }
        let answers = self.validate_answers(entries)?;
        let answers = self.skip_taken(&task, answers)?;
        if answers.iter().any(|a| a.answer == Answer::CancelExecution) {
            self.cancel_upstream();
            return Break(self.terminal(End::Failed(Msg::CancelledByResponse.err())));
        }
        Continue((task_id, answers))
    }

    /// Nothing pending: the answers were applied already, or came after the execution ended, or
    /// were never asked for.
    fn check_pending(&mut self, entries: &[ResumeEntry]) -> ControlFlow<End> {
        if !self.execution().pending.is_empty() {
            return Continue(());
        }
        let execution_id = self.execution().execution_id.clone();
        let known = entries
            .iter()
            .any(|e| was_applied(&self.doc, &execution_id, &e.interrupt_id));
        Break(End::Failed(if known {
            already_applied()
        } else if self.doc.is_terminal(&execution_id) {
            // Cancelled, expired or finished: nothing is left to resume (the reference's code).
            lost()
        } else {
            unknown_interrupt()
        }))
    }

    /// The recorded task, its session restored in the kernel (which may have restarted).
    fn restore_session(&mut self) -> ControlFlow<End, String> {
        let Some(task_id) = self.execution().task_id.clone() else {
            return Break(self.terminal(End::Failed(lost())));
        };
        if let Some(session) = self.doc.iac_code_session_id.clone() {
            match self
                .app
                .a2a
                .ensure_restored(&self.doc.cwd, &session, &task_id)
            {
                Ok(true) => {}
                Ok(false) => return Break(self.terminal(End::Failed(lost()))),
                Err(e) => return Break(End::Failed(e)),
            }
        }
        Continue(task_id)
    }

    /// `GetTask`: the same task in the thread's context, still waiting for input.
    fn check_identity(&mut self, task_id: &str) -> ControlFlow<End, Value> {
        let task = match self.live.upstream.get_task(task_id) {
            Ok(Some(task)) => task,
            Ok(None) => return Break(self.terminal(End::Failed(lost()))),
            Err(e) => return Break(End::Failed(e)),
        };
        let same_task = task.get("id").and_then(Value::as_str) == Some(task_id);
        let same_context =
            task.get("contextId").and_then(Value::as_str) == Some(self.doc.context_id.as_str());
        if !same_task || !same_context {
            return Break(End::Failed(Msg::IdentityChanged.err()));
        }
        let session = task
            .pointer(crate::a2a::incoming::POINTER)
            .and_then(|iac| iac.get(crate::a2a::incoming::SESSION_ID))
            .and_then(Value::as_str);
        if let (Some(s), Some(known)) = (session, self.doc.iac_code_session_id.as_deref()) {
            if s != known {
                return Break(End::Failed(Msg::SessionChanged.err()));
            }
        }
        let state = TaskState::parse(
            task.pointer("/status/state")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        // A side wait of a pipeline (a permission inside a candidate) is answered while the task
        // is WORKING (`pendingPermissions`): any state but an end is a live wait.
        if matches!(
            state,
            TaskState::Completed
                | TaskState::Failed
                | TaskState::Canceled
                | TaskState::Rejected
                | TaskState::AuthRequired
        ) {
            return Break(self.terminal(End::Failed(lost())));
        }
        Continue(task)
    }

    /// Inputs the kernel has that we have not announced yet (absence clears nothing: a task
    /// restored after a kernel restart may carry no input projection).
    fn unannounced_inputs(&mut self, task: &Value) -> Vec<Value> {
        let iac = task
            .pointer(crate::a2a::incoming::POINTER)
            .cloned()
            .unwrap_or(Value::Null);
        let Some(exec) = self.doc.execution.as_ref() else {
            return Vec::new();
        };
        let known = |id: &str| {
            exec.pending.contains_key(id) || was_applied(&self.doc, &exec.execution_id, id)
        };
        interrupts::inputs_of(&iac)
            .into_iter()
            .filter(|i| !known(i["inputId"].as_str().unwrap_or("")))
            .collect()
    }

    /// Pipeline events this client missed since `since`, written before anything else happens.
    pub(super) fn recover_pipeline(&mut self, task_id: &str, since: u64) -> ControlFlow<End> {
        match self.live.upstream.pipeline_state(task_id, since) {
            Ok(Some(state)) => {
                self.proj.recover_pipeline(&state, &mut self.out);
                if !self.flush() {
                    return Break(End::Failed(Msg::Cancelled.err()));
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("pipeline recovery failed: {e}"),
        }
        Continue(())
    }

    /// Answers the kernel took already, though this adapter never heard back (killed between
    /// sending an answer and clearing its pending input): the task's history holds the answer's
    /// message (the A2A SDK keeps every message a task took, `TaskManager.update_with_message`),
    /// named `agui-resume-…-<interruptId>`. They are recorded as applied, never sent again.
    fn skip_taken(
        &mut self,
        task: &Value,
        answers: Vec<Answered>,
    ) -> ControlFlow<End, Vec<Answered>> {
        let mut rest = Vec::with_capacity(answers.len());
        for answered in answers {
            if !answer_in_history(task, &answered.entry.interrupt_id) {
                rest.push(answered);
                continue;
            }
            log::info!(
                "the kernel took the answer to {} already; not sent again",
                answered.entry.interrupt_id
            );
            self.record_applied(&answered.entry)?;
        }
        Continue(rest)
    }

    /// Every pending interrupt answered exactly once, each answer valid for its interrupt.
    fn validate_answers(&mut self, entries: &[ResumeEntry]) -> ControlFlow<End, Vec<Answered>> {
        let execution_id = self.execution().execution_id.clone();
        let mut answers: Vec<Answered> = Vec::new();
        for entry in entries {
            if answers
                .iter()
                .any(|a| a.entry.interrupt_id == entry.interrupt_id)
            {
                return Break(End::Failed(repeated_interrupt_id()));
            }
            let Some(pending) = self.execution().pending.get(&entry.interrupt_id).cloned() else {
                // A retry after a partial failure repeats the answers already taken: the same
                // answer is applied already and the rest goes on; another one is a conflict.
                match applied_digest(&self.doc, &execution_id, &entry.interrupt_id) {
                    Some(d) if d == ids::json_digest(&entry.canonical()) => {
                        log::info!("answer to {} applied already; skipped", entry.interrupt_id);
                        continue;
                    }
                    Some(_) => return Break(End::Failed(already_applied())),
                    None => return Break(End::Failed(unknown_interrupt())),
                }
            };
            match interrupts::answer(&pending.value, entry.status, entry.payload.as_ref()) {
                Ok(answer) => answers.push(Answered {
                    entry: entry.clone(),
                    answer,
                    input: pending.value,
                    sideband: pending.sideband,
                }),
                Err(e) => return Break(End::Failed(e)),
            }
        }
        if answers.len() != self.execution().pending.len() {
            return Break(End::Failed(not_all_answered()));
        }
        Continue(answers)
    }

    /// The answers, in the order given; the stream of the last one is read to the task's next
    /// end. Side waits only: each with a unary `SendMessage`, then the task followed. Always
    /// inlined into `resume`: a resumed run held by a silent kernel waits under that one frame
    /// (3 stack pages with a frame of its own, 2 so), so what sending needs is in
    /// `deliver_answers`' (never inlined), and here only the last answer's stream.
    #[inline(always)]
    fn send_answers(&mut self, task_id: &str, answers: Vec<Answered>) -> End {
        // The recovery cursor of the follow-up: where this run stood before the kernel went on
        // (the reference's `recovery_after`). Events of the send/subscribe gap sit above it even
        // when the subscription then shows later ones first.
        let since = self.proj.durable().pipeline_sequence;
        if answers.iter().all(|a| a.sideband && a.is_permission()) {
            return self.send_side_answers(task_id, answers, since);
        }
        let mut upstream = match self.deliver_answers(task_id, answers) {
            Continue(upstream) => upstream,
            Break(end) => return end,
        };
        match self.read_to_end(&mut upstream) {
            Some(end) => self.conclude(end),
            // The answer's stream stopped short of an end (a pipeline runs on, the kernel sent
            // only its acknowledgement): follow the task.
            None => self.follow(task_id, since),
        }
    }

    /// Sends each answer and projects the kernel's first item of each; `Continue` with the last
    /// answer's stream when none of them ended the run. Never inlined (see `send_answers`).
    #[inline(never)]
    fn deliver_answers(
        &mut self,
        task_id: &str,
        answers: Vec<Answered>,
    ) -> ControlFlow<End, A2aStream> {
        let last = answers.len() - 1;
        for (i, answered) in answers.into_iter().enumerate() {
            let message_id = format!(
                "agui-resume-{}-{}",
                self.input.run_id, answered.entry.interrupt_id
            );
            let Some(message) = self.answer_message(&answered, &message_id, task_id) else {
                continue;
            };
            let (upstream, first) = self.send_answer(&answered, &message)?;
            self.resolve_tool(&answered);
            if let Some(end) = self.project(&first, Write::Now) {
                return Break(self.conclude(end));
            }
            if i == last {
                return Continue(upstream);
            }
        }
        Break(End::Success)
    }

    /// Side waits (the reference's `_send_pipeline_permission_responses`): each answer a unary
    /// `SendMessage` with the permission data part (message id `agui-resume-<interruptId>`,
    /// the same on a retry), applied once the kernel answers it; then the task is followed.
    /// Never inlined: its locals stay out of `send_answers`' frame.
    #[inline(never)]
    fn send_side_answers(&mut self, task_id: &str, answers: Vec<Answered>, since: u64) -> End {
        for answered in answers {
            let message_id = format!("agui-resume-{}", answered.entry.interrupt_id);
            let Some(message) = self.answer_message(&answered, &message_id, task_id) else {
                continue;
            };
            match self.live.upstream.send_message(&message) {
                Ok(Rpc::Result(_)) => {}
                Ok(Rpc::Error {
                    message,
                    kernel_code,
                    ..
                }) => {
                    log::warn!("the A2A service refused the answer: {message}");
                    return End::Failed(refusal(kernel_code.as_deref()));
                }
                Err(e) => return End::Failed(e),
            }
            if let Break(end) = self.record_applied(&answered.entry) {
                return end;
            }
        }
        self.proj.accepted(&mut self.out);
        self.cancel_on_disconnect();
        self.follow(task_id, since)
    }

    /// The answered question's tool call gets the answer text as its result, once the kernel
    /// accepted it (the reference, `iac_code/agui/adapter.py`: `resolved_tools`).
    fn resolve_tool(&mut self, answered: &Answered) {
        let Answer::Message { parts, .. } = &answered.answer else {
            return;
        };
        if answered.is_permission() {
            return;
        }
        let tool = answered.input.get("toolUseId").and_then(Value::as_str);
        let text = parts
            .first()
            .and_then(|p| p.get("text"))
            .and_then(Value::as_str);
        if let (Some(tool), Some(text)) = (tool, text) {
            self.proj.resolved_tool(tool, text, &mut self.out);
        }
    }

    /// The message carrying `answered` to the execution's task, in the mode the execution
    /// started in; none for an answer that cancels the execution instead.
    fn answer_message(
        &self,
        answered: &Answered,
        message_id: &str,
        task_id: &str,
    ) -> Option<Value> {
        let Answer::Message {
            parts,
            extra_metadata,
        } = &answered.answer
        else {
            return None;
        };
        let extra = extra_metadata.clone();
        let options = self.turn_options();
        let exec = self
            .doc
            .execution
            .as_ref()
            .expect("admitted runs have an execution");
        // One recorded without a mode (a state file the reference wrote): the answering
        // request's own, as the reference sends it.
        let turn = Turn::Answer {
            task_id,
            extra,
            mode: ExecutionMode {
                run_mode: exec.run_mode.or(options.mode.run_mode),
                pipeline_name: exec.pipeline_name.as_deref().or(options.mode.pipeline_name),
            },
        };
        let context = &self.doc.context_id;
        Some(a2a::user_message(
            message_id,
            parts.clone(),
            context,
            &options,
            turn,
        ))
    }

    /// Sends one answer and waits for the kernel's first item, which means it was accepted: from
    /// then on the answer is applied exactly once, and a vanished client cancels the task.
    fn send_answer(
        &mut self,
        answered: &Answered,
        message: &Value,
    ) -> ControlFlow<End, (A2aStream, Value)> {
        let mut upstream = match self.live.upstream.send_streaming(message) {
            Ok(s) => s,
            Err(e) => return Break(End::Failed(refused(e))),
        };
        let first = match upstream.next_result() {
            Ok(Some(item)) => item,
            Ok(None) => return Break(End::Failed(Msg::AnswerRefused.err())),
            Err(e) => return Break(End::Failed(refused(e))),
        };
        self.record_applied(&answered.entry)?;
        self.proj.accepted(&mut self.out);
        self.cancel_on_disconnect();
        Continue((upstream, first))
    }

    /// The answer leaves `pending` and its digest is kept, durably (fail closed).
    /// The conversation keeps the answer with its interrupt (`History::answered`).
    fn record_applied(&mut self, entry: &ResumeEntry) -> ControlFlow<End> {
        self.proj.answered([entry.interrupt_id.clone()]);
        let lang = self.lang;
        let exec = self.execution();
        if let Some(p) = exec.pending.remove(&entry.interrupt_id) {
            let expires = p.expires_at.as_deref().unwrap_or("");
            let interrupt = interrupts::to_interrupt(&p.value, expires, lang);
            let thread = &self.input.thread_id;
            (self.app.history).answered(thread, &interrupt, &entry.canonical());
        }
        let exec = self.execution();
        let execution_id = exec.execution_id.clone();
        self.doc.applied_resume_digests.push(AppliedDigest {
            digest: ids::json_digest(&entry.canonical()),
            execution_id,
            interrupt_id: entry.interrupt_id.clone(),
        });
        if let Err(e) = self.save() {
            self.cancel_upstream();
            return Break(End::Failed(e));
        }
        Continue(())
    }
}

/// A refused answer: the kernel's own `SESSION_BACKUP_NOT_READY` (retry shortly), else the
/// service did not take it (`A2A_UNAVAILABLE`, the answer stays pending).
fn refusal(kernel_code: Option<&str>) -> Error {
    if kernel_code == Some(a2a::SESSION_BACKUP_NOT_READY) {
        Msg::SessionBackupNotReady.err()
    } else {
        Msg::AnswerRefused.err()
    }
}

/// A JSON-RPC error instead of the answer's first item: the kernel refused the answer, which is
/// still pending (the reference's `_raise_for_a2a_error`: `A2A_UNAVAILABLE`), not a failed task.
fn refused(e: Error) -> Error {
    if e.code == Code::A2aExecutionFailed {
        log::warn!("the A2A service refused the answer: {e}");
        Msg::AnswerRefused.err()
    } else {
        e
    }
}

/// Whether the task's history holds a user message of ours answering `interrupt_id` (message
/// ids `agui-resume-<runId>-<interruptId>` or `agui-resume-<interruptId>`).
fn answer_in_history(task: &Value, interrupt_id: &str) -> bool {
    let suffix = format!("-{interrupt_id}");
    task.get("history")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("ROLE_USER"))
        .filter_map(|m| m.get("messageId").and_then(Value::as_str))
        .any(|id| id.starts_with("agui-resume-") && id.ends_with(&suffix))
}

/// The digest of the answer applied to `interrupt_id` in the execution, if one was.
fn applied_digest<'d>(
    doc: &'d ThreadDoc,
    execution_id: &str,
    interrupt_id: &str,
) -> Option<&'d str> {
    doc.applied_resume_digests
        .iter()
        .find(|d| d.execution_id == execution_id && d.interrupt_id == interrupt_id)
        .map(|d| d.digest.as_str())
}

fn was_applied(doc: &ThreadDoc, execution_id: &str, interrupt_id: &str) -> bool {
    doc.applied_resume_digests
        .iter()
        .any(|d| d.execution_id == execution_id && d.interrupt_id == interrupt_id)
}

fn already_applied() -> Error {
    Msg::AlreadyApplied.err()
}

fn unknown_interrupt() -> Error {
    Msg::UnknownInterrupt.err()
}

fn repeated_interrupt_id() -> Error {
    Msg::RepeatedInterruptId.err()
}

fn not_all_answered() -> Error {
    Msg::NotAllAnswered.err()
}
