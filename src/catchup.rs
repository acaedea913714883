//! A join's catch-up for a run that ended, or waits at an interrupt: the kept conversation as
//! one `MESSAGES_SNAPSHOT` up to the run's last assistant message, then that message and what
//! follows it (its tool results, the interrupt's record) as the events that streamed them, as the
//! live run sent them. `@ag-ui/client`'s reducer builds the same messages, ids and order as from
//! one snapshot of them all.
//!
//! Why not all of it in the snapshot: assistant-ui (`@assistant-ui/react-ag-ui` 0.0.58,
//! `AgUiThreadRuntimeCore.importMessagesSnapshot`) drops its run's placeholder message when the
//! snapshot ends with an assistant message (a tool call's, a reasoning's or a tool result's
//! count as one), and the `RUN_FINISHED` that carries the interrupt then updates no message:
//! the approval card never shows. Here the snapshot ends with the turn's user message, or the
//! message the interrupt waits on arrives as events, which that client attaches the run's end
//! to.

use crate::events::EventType;
use serde_json::{json, Value};

/// The catch-up events of `messages` (a kept conversation, oldest first): its
/// `MESSAGES_SNAPSHOT`, then the tail ([`tail_start`]) as events, all stamped `now_ms`.
pub(crate) fn snapshot_then_tail(mut messages: Vec<Value>, now_ms: u64) -> Vec<Value> {
    let tail = messages.split_off(tail_start(&messages));
    let mut out = vec![json!({"type": EventType::MessagesSnapshot, "messages": messages})];
    for m in &tail {
        message_events(m, &mut out);
    }
    for ev in &mut out {
        ev["timestamp"] = json!(now_ms);
    }
    out
}

/// Where the tail starts: at this turn's last assistant message (one after the last
/// user message), else just after the user message. Either way the snapshot ends with the
/// user's message or is followed by a text or tool call event.
fn tail_start(messages: &[Value]) -> usize {
    let after_user = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |i| i + 1);
    messages[after_user..]
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .map_or(after_user, |i| after_user + i)
}

/// One kept message as the events that build it in a client's reducer (ids as kept).
fn message_events(m: &Value, out: &mut Vec<Value>) {
    let id = &m["id"];
    let text = m["content"].as_str().unwrap_or("");
    match m["role"].as_str() {
        Some("assistant") => {
            let calls = m["toolCalls"].as_array().filter(|c| !c.is_empty());
            if !text.is_empty() || calls.is_none() {
                out.push(json!({"type": EventType::TextMessageStart, "messageId": id, "role": "assistant"}));
                if !text.is_empty() {
                    out.push(json!({"type": EventType::TextMessageContent, "messageId": id, "delta": text}));
                }
                out.push(json!({"type": EventType::TextMessageEnd, "messageId": id}));
            }
            for call in calls.into_iter().flatten() {
                let (call_id, f) = (&call["id"], &call["function"]);
                out.push(
                    json!({"type": EventType::ToolCallStart, "toolCallId": call_id,
                    "toolCallName": f["name"], "parentMessageId": id}),
                );
                if let Some(args) = f["arguments"].as_str().filter(|a| !a.is_empty()) {
                    out.push(json!({"type": EventType::ToolCallArgs, "toolCallId": call_id, "delta": args}));
                }
                out.push(json!({"type": EventType::ToolCallEnd, "toolCallId": call_id}));
            }
        }
        Some("tool") => out.push(json!({"type": EventType::ToolCallResult, "messageId": id,
            "toolCallId": m["toolCallId"], "content": m["content"], "role": "tool"})),
        Some("reasoning") => {
            out.push(json!({"type": EventType::ReasoningStart, "messageId": id}));
            out.push(json!({"type": EventType::ReasoningMessageStart, "messageId": id, "role": "reasoning"}));
            if !text.is_empty() {
                out.push(json!({"type": EventType::ReasoningMessageContent, "messageId": id, "delta": text}));
            }
            out.push(json!({"type": EventType::ReasoningMessageEnd, "messageId": id}));
            out.push(json!({"type": EventType::ReasoningEnd, "messageId": id}));
        }
        Some("activity") => out.push(json!({"type": EventType::ActivitySnapshot, "messageId": id,
            "activityType": m["activityType"], "content": m["content"]})),
        // Nothing else follows a turn's user message in a kept conversation.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, role: &str) -> Value {
        json!({"id": id, "role": role, "content": id})
    }

    #[test]
    fn the_tail_starts_at_the_turn_s_last_assistant_message_else_after_its_user_message() {
        let (u, a, t, act) = (
            msg("u", "user"),
            msg("a", "assistant"),
            msg("t", "tool"),
            msg("i", "activity"),
        );
        let turn = [u.clone(), a.clone(), t.clone(), a.clone(), act.clone()];
        assert_eq!(tail_start(&turn), 3);
        assert_eq!(
            tail_start(&[a.clone(), u.clone(), t.clone(), act.clone()]),
            2
        );
        assert_eq!(tail_start(&[a.clone(), u.clone()]), 2);
        assert_eq!(tail_start(&[t, act]), 0);
    }

    #[test]
    fn a_tool_call_message_is_sent_as_the_events_of_its_calls_under_its_own_id() {
        let m = json!({"id": "c1", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function",
            "function": {"name": "write_file", "arguments": "{\"path\":\"a\"}"}}]});
        let mut out = Vec::new();
        message_events(&m, &mut out);
        let types: Vec<&str> = out.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
        );
        assert_eq!(out[0]["parentMessageId"], "c1");
        assert_eq!(out[1]["delta"], "{\"path\":\"a\"}");
    }
}
