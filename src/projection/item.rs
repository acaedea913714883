//! Reading one streamed A2A `result`: its shape, its text, and the end its task state means.

use super::End;
use crate::a2a::incoming;
use crate::error::{Error, Msg};
use crate::interrupts;
use serde_json::Value;

/// The four shapes of a streamed `result`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ItemKind {
    Task,
    StatusUpdate,
    ArtifactUpdate,
    Message,
}

impl ItemKind {
    /// The item's kind and body; a bare object is a task.
    pub(super) fn of(result: &Value) -> (ItemKind, &Value) {
        const KEYS: [(ItemKind, &str); 4] = [
            (ItemKind::Task, "task"),
            (ItemKind::StatusUpdate, "statusUpdate"),
            (ItemKind::ArtifactUpdate, "artifactUpdate"),
            (ItemKind::Message, "message"),
        ];
        KEYS.iter()
            .find_map(|(kind, key)| result.get(*key).map(|v| (*kind, v)))
            .unwrap_or((ItemKind::Task, result))
    }
}

/// The input waits of an item's `metadata.iac_code` that are not answered yet, whatever the task
/// state: a pipeline's side wait (a permission inside a candidate) arrives while the task is
/// `WORKING` (the reference's main loop, `iac_code/agui/adapter.py`, looks at every event's
/// inputs before its state).
pub(super) fn open_waits(
    iac: &Value,
    answered: &std::collections::HashSet<String>,
) -> Result<Vec<Value>, Error> {
    let inputs: Vec<Value> = interrupts::inputs_of(iac)
        .into_iter()
        .filter(|i| !answered.contains(i["inputId"].as_str().unwrap_or("")))
        .collect();
    for input in &inputs {
        interrupts::check_envelope(input)?;
    }
    Ok(inputs)
}

/// The end a task state means for this run (its open input waits, from [`open_waits`], come
/// first); an input wait without envelopes is a success.
pub(super) fn end_of(status: &Value) -> Result<Option<End>, Error> {
    let state = normalize_state(
        status
            .pointer("/state")
            .and_then(Value::as_str)
            .unwrap_or(""),
    );
    Ok(match state.as_str() {
        "input-required" => Some(End::Success),
        "completed" => Some(End::Success),
        "canceled" | "cancelled" => Some(End::Failed(Msg::Cancelled.err())),
        "failed" | "rejected" | "auth-required" => {
            // The kernel's own text is a detail kept as it came; without one, the state names it.
            let error = status
                .get("message")
                .map(message_text)
                .filter(|t| !t.is_empty())
                .map_or_else(
                    || Msg::TaskEndedInState.with(&[&state]),
                    |text| Msg::TaskFailed.with(&[&text]),
                );
            Some(End::Failed(error))
        }
        _ => None,
    })
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`.
pub(crate) fn normalize_state(state: &str) -> String {
    let lower = state.to_ascii_lowercase();
    lower
        .strip_prefix("task_state_")
        .unwrap_or(&lower)
        .replace('_', "-")
}

/// The non-empty text of `metadata.iac_code.thinking` when it is raw thinking.
pub(super) fn raw_thinking(iac: &Value) -> Option<&str> {
    let thinking = iac.get(incoming::THINKING)?;
    if thinking.get("type").and_then(Value::as_str) != Some("raw_thinking") {
        return None;
    }
    thinking
        .get("text")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
}

/// The concatenated text parts of an A2A message.
pub(super) fn message_text(message: &Value) -> String {
    message
        .get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}
