//! Which A2A task and iac-code session the run belongs to: checked on every item, learned from the
//! first that names them, announced once as `iac-code.session.v1`.

use super::out::{Custom, Out};
use super::RunIds;
use crate::a2a::frame::{Head, Iac, ItemKind};
use crate::error::{Error, Msg};
use serde_json::json;

#[derive(Default)]
pub(super) struct Session {
    task_id: Option<String>,
    session_id: Option<String>,
    announced: bool,
    /// A resume whose answers the kernel has not accepted yet: nothing is announced until then.
    held: bool,
}

impl Session {
    /// A resumed execution: its task (and maybe its session) are already known.
    pub(super) fn resumed(task_id: &str, session_id: Option<&str>) -> Session {
        Session {
            task_id: Some(task_id.to_string()),
            session_id: session_id.map(String::from),
            announced: false,
            held: false,
        }
    }

    pub(super) fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    pub(super) fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Refuses an item of another context or task; the first task id seen becomes the run's.
    pub(super) fn check_identity(
        &mut self,
        context_id: &str,
        kind: ItemKind,
        item: &Head,
    ) -> Result<(), Error> {
        let task = match kind {
            ItemKind::Task if item.id.is_present() => &item.id,
            _ => &item.task_id,
        }
        .get();
        if let Some(context) = item.context_id.get() {
            if context != context_id {
                return Err(Msg::ContextMismatch.err());
            }
        }
        match (task, &self.task_id) {
            (Some(t), Some(known)) if t != known => Err(Msg::TaskIdMismatch.err()),
            (Some(t), None) => {
                if !valid_a2a_id(t) {
                    return Err(Msg::TaskIdMalformed.err());
                }
                self.task_id = Some(t.to_string());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A new turn of a thread that has a session: the kernel keeps one session per context, so
    /// any other is a broken mapping.
    pub(super) fn expecting(session_id: &str) -> Session {
        Session {
            session_id: Some(session_id.to_string()),
            ..Session::default()
        }
    }

    /// Takes the iac-code session id from `metadata.iac_code`, wherever this item carries it; a
    /// different one than the thread's is `A2A_PROTOCOL_ERROR` (the spec's code for a
    /// task/context/session that no longer matches its mapping; the reference's
    /// `_remember_session_id`).
    /// `pipeline`: the session ids of the item's single pipeline envelope and of its batch.
    pub(super) fn learn(
        &mut self,
        view: &Iac,
        (single, batch): (Option<&str>, Option<&str>),
    ) -> Result<(), Error> {
        let direct = view.session_id.is_present().then(|| view.session_id.get());
        let found = direct.unwrap_or(single).or(batch);
        match (found, self.session_id.as_deref()) {
            (Some(s), Some(known)) if s != known => Err(Msg::SessionChanged.err()),
            (Some(s), None) => {
                self.session_id = Some(s.to_string());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Both the task and the session are known: the announcement is complete.
    pub(super) fn is_known(&self) -> bool {
        self.task_id.is_some() && self.session_id.is_some()
    }

    /// Holds the announcement back until [`release`](Self::release).
    pub(super) fn hold(&mut self) {
        self.held = true;
    }

    pub(super) fn release(&mut self) {
        self.held = false;
    }

    /// `iac-code.session.v1`, once per run, before the first event that belongs to the task.
    pub(super) fn announce(&mut self, ids: &RunIds, out: &mut Out) {
        if self.announced || self.held {
            return;
        }
        self.announced = true;
        let value = json!({
            "schemaVersion": 1,
            "threadId": ids.thread_id,
            "aguiRunId": ids.run_id,
            "executionId": ids.execution_id,
            "contextId": ids.context_id,
            "taskId": self.task_id,
            "rosInvocationId": ids.ros_invocation_id,
            "sessionId": self.session_id,
        });
        out.custom(Custom::Session, value);
    }
}

/// Non-empty, at most 128 characters of letters, digits and `_ . : -`.
fn valid_a2a_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}
