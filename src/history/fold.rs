//! Records back into the conversation, as `@ag-ui/client`'s own reducer would have built it from
//! the streams: a message keeps the place where it first appeared; a later record with the same
//! id supersedes it (its `toolCalls` merged by call id); `open` starts a text or reasoning
//! message unless it exists (a later run continues a message by its id); `append` adds streamed text to an open
//! message; `toolCall` puts a call on its parent assistant message (a new assistant message with
//! that id when there is none, as the client does); a `tool` result goes right after the
//! assistant message that holds its call and the results already there.

use super::logfile::Record;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// One message of the conversation and the record numbers it came from.
pub(crate) struct Kept {
    /// Where it first appeared: its position key and cursor.
    pub(crate) seq: u64,
    /// When it last changed (ms).
    pub(crate) at: u64,
    pub(crate) message: Value,
}

#[derive(Default)]
pub(crate) struct Folded {
    pub(crate) kept: Vec<Kept>,
    /// Message id → its place in `kept`.
    index: HashMap<String, usize>,
    /// Tool call id → the id of the assistant message that holds it (the first one to), so a
    /// result finds its place without reading every message: a compaction folds a whole log,
    /// and a search per result made it quadratic in the tool calls kept (issue 27).
    owner: HashMap<String, String>,
}

impl Folded {
    pub(crate) fn of(records: Vec<Record>) -> Folded {
        let mut f = Folded::default();
        for r in records {
            f.apply(r);
        }
        f
    }

    /// The messages, in order.
    pub(crate) fn messages(self) -> Vec<Value> {
        self.kept.into_iter().map(|k| k.message).collect()
    }

    fn apply(&mut self, r: Record) {
        let Value::Object(mut body) = r.body else {
            return;
        };
        if let Some(Value::Object(m)) = body.remove("message") {
            self.put(r.seq, r.at, m);
        } else if let Some(Value::Object(a)) = body.remove("append") {
            let id = a.get("id").and_then(Value::as_str).unwrap_or("");
            let text = a.get("content").and_then(Value::as_str).unwrap_or("");
            if let Some(&i) = self.index.get(id) {
                let k = &mut self.kept[i];
                match k.message.get_mut("content") {
                    Some(Value::String(content)) => content.push_str(text),
                    _ => k.message["content"] = json!(text),
                }
                k.at = r.at;
            }
        } else if let Some(Value::Object(t)) = body.remove("toolCall") {
            self.tool_call(r.seq, r.at, t);
        } else if let Some(Value::Object(o)) = body.remove("open") {
            // A message starts: created empty unless it exists (a later run continues it).
            let id = o.get("id").and_then(Value::as_str).unwrap_or("");
            if !id.is_empty() && !self.index.contains_key(id) {
                let role = o.get("role").cloned().unwrap_or_else(|| json!("assistant"));
                if let Value::Object(m) = json!({"id": id, "role": role, "content": ""}) {
                    self.put(r.seq, r.at, m);
                }
            }
        }
    }

    fn put(&mut self, seq: u64, at: u64, m: Map<String, Value>) {
        let id = m
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if let Some(&i) = self.index.get(&id) {
            let k = &mut self.kept[i];
            let old_calls = k.message.get("toolCalls").cloned();
            k.message = Value::Object(m);
            k.at = at;
            if let Some(Value::Array(calls)) = old_calls {
                for call in calls {
                    add_call(&mut k.message, call);
                }
            }
            self.own_calls(i);
            return;
        }
        let message = Value::Object(m);
        let at_end = self.kept.len();
        let pos = match message["role"].as_str() {
            Some("tool") => self.after_call(message["toolCallId"].as_str().unwrap_or("")),
            _ => None,
        }
        .unwrap_or(at_end);
        self.kept.insert(pos, Kept { seq, at, message });
        if pos == at_end {
            self.index.insert(id, pos);
        } else {
            self.reindex(pos);
        }
        self.own_calls(pos);
    }

    /// Notes the calls of the assistant message at `i` as its own.
    fn own_calls(&mut self, i: usize) {
        let message = &self.kept[i].message;
        if message["role"] != "assistant" {
            return;
        }
        let id = message["id"].as_str().unwrap_or("");
        for call in message["toolCalls"].as_array().into_iter().flatten() {
            if let Some(call) = call["id"].as_str() {
                if !self.owner.contains_key(call) {
                    self.owner.insert(call.to_string(), id.to_string());
                }
            }
        }
    }

    /// Where a result of `call` goes: after its assistant message and the results after it.
    fn after_call(&self, call: &str) -> Option<usize> {
        let owner = *self.index.get(self.owner.get(call)?)?;
        let mut pos = owner + 1;
        while pos < self.kept.len() && self.kept[pos].message["role"] == "tool" {
            pos += 1;
        }
        Some(pos)
    }

    fn reindex(&mut self, from: usize) {
        for (i, k) in self.kept.iter().enumerate().skip(from) {
            if let Some(id) = k.message["id"].as_str() {
                match self.index.get_mut(id) {
                    Some(at) => *at = i,
                    None => _ = self.index.insert(id.to_string(), i),
                }
            }
        }
    }

    fn tool_call(&mut self, seq: u64, at: u64, t: Map<String, Value>) {
        let Some(call) = t.get("call").cloned() else {
            return;
        };
        let parent = t.get("messageId").and_then(Value::as_str).unwrap_or("");
        let call_id = call["id"].as_str().unwrap_or("").to_string();
        let owner = match self.index.get(parent) {
            Some(&i) if self.kept[i].message["role"] == "assistant" => Some(i),
            _ => None,
        };
        match owner {
            Some(i) => {
                add_call(&mut self.kept[i].message, call);
                self.kept[i].at = at;
                self.own_calls(i);
            }
            None => {
                // The client's rule: a new assistant message named by the parent id, or by the
                // call's own id when the parent id is taken by a message of another role.
                let id = if parent.is_empty() || self.index.contains_key(parent) {
                    call_id
                } else {
                    parent.to_string()
                };
                let m = json!({"id": id, "role": "assistant", "toolCalls": [call]});
                if let Value::Object(m) = m {
                    self.put(seq, at, m);
                }
            }
        }
    }
}

/// Adds `call` to the message's `toolCalls`, replacing a call of the same id.
fn add_call(message: &mut Value, call: Value) {
    let Some(obj) = message.as_object_mut() else {
        return;
    };
    let calls = obj
        .entry("toolCalls")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(calls) = calls {
        match calls.iter_mut().find(|c| c["id"] == call["id"]) {
            Some(c) => *c = call,
            None => calls.push(call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, body: Value) -> Record {
        Record {
            seq,
            at: seq * 10,
            body,
        }
    }

    #[test]
    fn a_later_record_supersedes_in_place_and_text_appends_to_its_message() {
        let f = Folded::of(vec![
            rec(
                1,
                json!({"message": {"id": "u", "role": "user", "content": "hi"}}),
            ),
            rec(2, json!({"open": {"id": "m", "role": "assistant"}})),
            rec(3, json!({"append": {"id": "m", "content": "Hel"}})),
            rec(3, json!({"open": {"id": "m", "role": "assistant"}})),
            rec(
                4,
                json!({"message": {"id": "i", "role": "activity", "activityType": "iac-code.interrupt",
                                      "content": {"answer": null}}}),
            ),
            rec(5, json!({"append": {"id": "m", "content": "lo"}})),
            rec(
                6,
                json!({"toolCall": {"messageId": "m", "call": {"id": "c", "type": "function",
                                      "function": {"name": "w", "arguments": "{}"}}}}),
            ),
            rec(
                7,
                json!({"message": {"id": "i", "role": "activity", "activityType": "iac-code.interrupt",
                                      "content": {"answer": {"status": "resolved"}}}}),
            ),
        ]);
        let seqs: Vec<u64> = f.kept.iter().map(|k| k.seq).collect();
        assert_eq!(seqs, [1, 2, 4]);
        let m = f.messages();
        assert_eq!(m[1]["content"], "Hello");
        assert_eq!(m[1]["toolCalls"][0]["id"], "c");
        assert_eq!(m[2]["content"]["answer"]["status"], "resolved");
    }

    #[test]
    fn a_tool_result_goes_after_its_call_and_a_call_without_parent_gets_its_own_message() {
        let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "n", "arguments": ""}});
        let f = Folded::of(vec![
            rec(
                1,
                json!({"message": {"id": "m", "role": "assistant", "content": "x"}}),
            ),
            rec(
                2,
                json!({"toolCall": {"messageId": "m", "call": call("c1")}}),
            ),
            rec(
                3,
                json!({"message": {"id": "r", "role": "reasoning", "content": "later"}}),
            ),
            rec(
                4,
                json!({"message": {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "ok"}}),
            ),
            rec(5, json!({"toolCall": {"call": call("c2")}})),
            // A compacted log keeps a call inside its message: its result still finds it.
            rec(
                6,
                json!({"message": {"id": "a", "role": "assistant", "toolCalls": [call("c3")]}}),
            ),
            rec(7, json!({"open": {"id": "z", "role": "assistant"}})),
            rec(
                8,
                json!({"message": {"id": "t3", "role": "tool", "toolCallId": "c3", "content": "ok"}}),
            ),
        ]);
        let ids: Vec<String> = f
            .messages()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ids, ["m", "t1", "r", "c2", "a", "t3", "z"]);
    }
}
