//! The user's message as others see it: `RUN_STARTED.input` of a new turn (echoed, so a client
//! that did not send it, a thread's live feed, ends with the same messages as the one that did),
//! and the copy a join's snapshot shows.

use crate::input::UserMessage;
use crate::projection::RunIds;
use serde_json::Value;

/// The longest user text `RUN_STARTED.input` echoes whole; a longer one is cut there (the
/// whole text is in the kernel's session and the kept conversation).
const ECHO_MAX: usize = 64 * 1024;

/// `RUN_STARTED.input` of a new turn: the run's ids and the user's message as AG-UI has it
/// (its text parts joined; images are not echoed). The sender's client already has the message
/// by its id and keeps it; a thread's live feed adds it (`@ag-ui/client` merges `input.messages`
/// it does not have). No `forwardedProps`: secrets never go back out.
pub(super) fn echoed_input(ids: &RunIds, m: &UserMessage) -> Value {
    let mut text = String::new();
    for t in m
        .parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
    {
        text.push_str(t);
    }
    if text.len() > ECHO_MAX {
        let mut end = ECHO_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    // `tools` and `context` are required arrays of `RunAgentInput` (clients that check events
    // with `@ag-ui/core`'s schemas, CopilotKit's runtime among them, refuse the event without).
    serde_json::json!({"threadId": ids.thread_id, "runId": ids.run_id,
        "messages": [{"id": m.id, "role": "user", "content": text}], "tools": [], "context": []})
}

/// The user's message as a join's snapshot shows it (its text parts), its text moved out of the
/// A2A message once that is serialized: the one copy of a large message the run keeps.
pub(super) fn user_message_json(id: &str, message: &mut Value) -> Value {
    let mut texts = message["parts"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|p| match p.get_mut("text") {
            Some(Value::String(t)) => Some(std::mem::take(t)),
            _ => None,
        });
    let mut text = texts.next().unwrap_or_default();
    texts.for_each(|t| text.push_str(&t));
    // Built field by field: `json!` would copy the text.
    let mut user = serde_json::Map::new();
    user.insert("id".into(), Value::from(id));
    user.insert("role".into(), Value::from("user"));
    user.insert("content".into(), Value::String(text));
    Value::Object(user)
}
