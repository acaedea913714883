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
use crate::a2a::{self, A2aStream, Turn};
use crate::error::{Error, Msg};
use crate::ids;
use crate::input::ResumeEntry;
use crate::interrupts::{self, Answer};
use crate::projection::{normalize_state, End};
use crate::store::{AppliedDigest, ThreadDoc};
use serde_json::Value;
use std::ops::ControlFlow::{self, Break, Continue};

/// A pending interrupt's validated answer.
type Answered = (ResumeEntry, Answer);

impl Run<'_> {
    /// Resumes the waiting execution with the client's answers.
    pub(super) fn resume(&mut self, entries: &[ResumeEntry]) -> End {
        match self.prepare_answers(entries) {
            Continue((task_id, answers)) => self.send_answers(&task_id, answers),
            Break(end) => end,
        }
    }

    /// Phases 1–4; `Continue` carries the task id and the answers to send.
    fn prepare_answers(
        &mut self,
        entries: &[ResumeEntry],
    ) -> ControlFlow<End, (String, Vec<Answered>)> {
        self.check_pending(entries)?;
        let task_id = self.restore_session()?;
        let task = self.check_identity(&task_id)?;
        let fresh = self.unannounced_inputs(&task);
        self.recover_pipeline(&task_id)?;
        if !fresh.is_empty() {
            return Break(self.interrupt(fresh));
        }
        let answers = self.validate_answers(entries)?;
        if answers.iter().any(|(_, a)| *a == Answer::CancelExecution) {
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
        let task = match self.app.a2a.get_task(task_id) {
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
        let state = normalize_state(
            task.pointer("/status/state")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        if state != "input-required" {
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
        let pending = &self.execution().pending;
        interrupts::inputs_of(&iac)
            .into_iter()
            .filter(|i| !pending.contains_key(i["inputId"].as_str().unwrap_or("")))
            .collect()
    }

    /// Pipeline events this client missed, written before anything else happens.
    fn recover_pipeline(&mut self, task_id: &str) -> ControlFlow<End> {
        let since = self.execution().pipeline_sequence;
        match self.app.a2a.pipeline_state(task_id, since) {
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

    /// Every pending interrupt answered exactly once, each answer valid for its interrupt.
    fn validate_answers(&mut self, entries: &[ResumeEntry]) -> ControlFlow<End, Vec<Answered>> {
        let execution_id = self.execution().execution_id.clone();
        let mut answers: Vec<Answered> = Vec::new();
        for entry in entries {
            if answers
                .iter()
                .any(|(e, _)| e.interrupt_id == entry.interrupt_id)
            {
                return Break(End::Failed(repeated_interrupt_id()));
            }
            let Some(pending) = self.execution().pending.get(&entry.interrupt_id).cloned() else {
                return Break(End::Failed(
                    if was_applied(&self.doc, &execution_id, &entry.interrupt_id) {
                        already_applied()
                    } else {
                        unknown_interrupt()
                    },
                ));
            };
            match interrupts::answer(&pending.value, entry.cancelled, entry.payload.as_ref()) {
                Ok(a) => answers.push((entry.clone(), a)),
                Err(e) => return Break(End::Failed(e)),
            }
        }
        if answers.len() != self.execution().pending.len() {
            return Break(End::Failed(not_all_answered()));
        }
        Continue(answers)
    }

    /// The answers, in the order given; the stream of the last one is read to the task's next end.
    fn send_answers(&mut self, task_id: &str, answers: Vec<Answered>) -> End {
        let last = answers.len() - 1;
        for (i, (entry, answer)) in answers.into_iter().enumerate() {
            let Answer::Message {
                parts,
                extra_metadata,
            } = answer
            else {
                continue;
            };
            let turn = Turn::Answer {
                task_id,
                extra: extra_metadata,
            };
            let (mut upstream, first) = match self.send_answer(&entry, &parts, turn) {
                Continue(accepted) => accepted,
                Break(end) => return end,
            };
            if let Some(end) = self.project(&first, Write::Now) {
                return self.conclude(end);
            }
            if i == last {
                let end = self.pump(&mut upstream);
                return self.conclude(end);
            }
        }
        End::Success
    }

    /// Sends one answer and waits for the kernel's first item, which means it was accepted: from
    /// then on the answer is applied exactly once, and a vanished client cancels the task.
    fn send_answer(
        &mut self,
        entry: &ResumeEntry,
        parts: &[Value],
        turn: Turn,
    ) -> ControlFlow<End, (A2aStream, Value)> {
        let message = a2a::user_message(
            &format!("agui-resume-{}-{}", self.input.run_id, entry.interrupt_id),
            parts,
            &self.doc.context_id,
            &self.input.iac,
            Some(&self.lang_tag),
            turn,
        );
        let mut upstream = match self.app.a2a.send_streaming(message) {
            Ok(s) => s,
            Err(e) => return Break(End::Failed(e)),
        };
        let first = match upstream.next_result() {
            Ok(Some(item)) => item,
            Ok(None) => return Break(End::Failed(Msg::AnswerRefused.err())),
            Err(e) => return Break(End::Failed(e)),
        };
        self.record_applied(entry)?;
        self.cancel_on_disconnect();
        Continue((upstream, first))
    }

    /// The answer leaves `pending` and its digest is kept, durably (fail closed).
    fn record_applied(&mut self, entry: &ResumeEntry) -> ControlFlow<End> {
        let exec = self.execution();
        exec.pending.remove(&entry.interrupt_id);
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
