//! Reading one streamed A2A `result`: its shape, its text, and the end its task state means.

use super::End;
use crate::a2a::frame::{Status, TaskState};
use crate::error::{Error, Msg};
use crate::interrupts;
use serde_json::Value;

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
pub(super) fn end_of(status: Option<&Status>) -> Result<Option<End>, Error> {
    let state = status.map_or(TaskState::Other, Status::state);
    Ok(match state {
        TaskState::InputRequired | TaskState::Completed => Some(End::Success),
        TaskState::Canceled => Some(End::Failed(Msg::Cancelled.err())),
        TaskState::Failed | TaskState::Rejected | TaskState::AuthRequired => {
            // The kernel's own text is a detail kept as it came; without one, the state names it.
            let text = status
                .and_then(|s| s.message.obj())
                .map_or("", |m| m.parts.as_str());
            let error = match text {
                "" => Msg::TaskEndedInState.with(&[&state.as_str()]),
                text => Msg::TaskFailed.with(&[&text]),
            };
            Some(End::Failed(error))
        }
        TaskState::Submitted | TaskState::Working | TaskState::Other => None,
    })
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
