//! The kernel's own record of a task (`GetTask`, a subscription's first `Task`) read as
//! conversation messages: a join's catch-up when this process has not streamed the turn, and the
//! completion of a turn a killed adapter cut.

use serde_json::{json, Value};
use std::collections::HashMap;

/// The task's user and agent text messages (its history, then its status message), the
/// consecutive parts of one message id joined.
fn texts(task: &Value) -> Vec<Value> {
    let history = task.get("history").and_then(Value::as_array);
    let status = task.pointer("/status/message");
    let mut messages: Vec<Value> = Vec::new();
    for m in history.into_iter().flatten().chain(status) {
        let role = match m.get("role").and_then(Value::as_str).unwrap_or("") {
            "ROLE_USER" | "user" => "user",
            "ROLE_AGENT" | "agent" => "assistant",
            _ => continue,
        };
        let text: String = m
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if text.is_empty() {
            continue;
        }
        let id = m
            .get("messageId")
            .and_then(Value::as_str)
            .unwrap_or("history")
            .to_string();
        match messages.last_mut() {
            Some(last) if last["id"] == id.as_str() && last["role"] == role => {
                let joined = format!("{}{text}", last["content"].as_str().unwrap_or(""));
                last["content"] = json!(joined);
            }
            _ => messages.push(json!({"id": id, "role": role, "content": text})),
        }
    }
    messages
}

/// The turn so far as one `MESSAGES_SNAPSHOT`. Empty when the task has no text yet.
pub(crate) fn catch_up(task: &Value) -> Option<Value> {
    let messages = texts(task);
    (!messages.is_empty()).then(|| {
        json!({"type": "MESSAGES_SNAPSHOT", "timestamp": crate::ids::now_ms(), "messages": messages})
    })
}

/// The agent messages of the task that complete what is kept (`have`, by id): a message kept
/// shorter than the kernel's text is superseded by it (its tool calls kept); one not kept at
/// all is added. The user's messages and the answers to interrupts are kept already.
pub(crate) fn completions(task: &Value, have: &HashMap<String, Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for mut m in texts(task).into_iter().filter(|m| m["role"] == "assistant") {
        let id = m["id"].as_str().unwrap_or("").to_string();
        let text = m["content"].as_str().unwrap_or("");
        match have.get(&id) {
            Some(kept) => {
                let kept_text = kept["content"].as_str().unwrap_or("");
                if kept["role"] != "assistant" || kept_text.len() >= text.len() {
                    continue;
                }
                if let Some(calls) = kept.get("toolCalls") {
                    m["toolCalls"] = calls.clone();
                }
                out.push(m);
            }
            None => out.push(m),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catch_up_joins_the_parts_of_each_streamed_message() {
        let task = json!({"history": [
            {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            {"messageId": "t-message", "role": "ROLE_AGENT", "parts": [{"text": "Here "}]},
            {"messageId": "t-message", "role": "ROLE_AGENT", "parts": [{"text": "is "}]},
            {"messageId": "t-message", "role": "ROLE_AGENT", "parts": []}],
            "status": {"state": "TASK_STATE_WORKING",
                "message": {"messageId": "t-message", "role": "ROLE_AGENT", "parts": [{"text": "a VPC"}]}}});
        let snap = catch_up(&task).unwrap();
        assert_eq!(snap["type"], "MESSAGES_SNAPSHOT");
        assert_eq!(
            snap["messages"],
            json!([{"id": "u1", "role": "user", "content": "hi"},
                   {"id": "t-message", "role": "assistant", "content": "Here is a VPC"}])
        );
        assert!(catch_up(&json!({"status": {"state": "TASK_STATE_WORKING"}})).is_none());
    }

    #[test]
    fn a_cut_message_is_completed_and_a_lost_one_added_from_the_task() {
        let task = json!({"history": [
            {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            {"messageId": "a1", "role": "ROLE_AGENT", "parts": [{"text": "Hello there"}]},
            {"messageId": "a2", "role": "ROLE_AGENT", "parts": [{"text": "Done"}]}]});
        let have: HashMap<String, Value> = [
            (
                "u1".to_string(),
                json!({"id": "u1", "role": "user", "content": "hi"}),
            ),
            (
                "a1".to_string(),
                json!({"id": "a1", "role": "assistant", "content": "Hel",
                "toolCalls": [{"id": "c"}]}),
            ),
        ]
        .into();
        let done = completions(&task, &have);
        assert_eq!(
            done,
            [
                json!({"id": "a1", "role": "assistant", "content": "Hello there", "toolCalls": [{"id": "c"}]}),
                json!({"id": "a2", "role": "assistant", "content": "Done"})
            ]
        );
    }
}
