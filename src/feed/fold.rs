//! The turn so far, folded from the run's own events, so a join answers from what this process
//! sent (same message ids, same text) instead of asking the kernel.
//!
//! A join is a run of its own: `RUN_STARTED`, the run's custom events (the session event a Stop
//! needs), one `MESSAGES_SNAPSHOT` with every message that is closed, the latest activity
//! snapshots, then every span still open re-opened (`STEP_STARTED`, `REASONING_START`,
//! `*_START` followed by the content so far), so the live tail that follows continues them. The
//! join of a run that ended (at an interrupt, within the detach grace) has its last assistant
//! message after the snapshot, as events (`catchup`), then the run's own end.

use crate::events::EventType;
use serde_json::{json, Map, Value};
use std::time::Instant;

#[derive(Default)]
pub(super) struct Fold {
    pub(super) run_started: Option<Kept>,
    /// The user's message of a new turn (not an event: the run's input), and its id.
    user: Option<(Option<String>, Kept)>,
    /// Custom events by name, latest kept, in first-seen order.
    customs: Vec<(String, Kept)>,
    activities: Vec<(String, Kept)>,
    items: Vec<Item>,
    steps: Vec<String>,
    /// `REASONING_START` spans still open (message ids).
    reasoning: Vec<String>,
}

enum Item {
    Text {
        id: String,
        role: String,
        content: Escaped,
        open: bool,
    },
    Reasoning {
        id: String,
        content: Escaped,
        open: bool,
    },
    Tool {
        id: String,
        name: String,
        parent: Option<String>,
        args: Escaped,
        open: bool,
    },
    Result {
        id: String,
        event: Kept,
    },
}

/// An event (or message) kept whole for a join, as its JSON text, parsed again only when a join
/// asks for it. Why text: a `Value` tree costs several times the text it was read from (a B-tree
/// node of a few hundred bytes per object, a block per key and string), and a held run keeps
/// its `RUN_STARTED`, its session event and its user's message for its whole life: ~4 KiB a run
/// as trees, ~1 KiB as text (benches/REPORT.md, issue 27, third pass).
pub(super) struct Kept(Box<str>);

impl Kept {
    fn of(ev: &Value) -> Kept {
        Kept(ev.to_string().into_boxed_str())
    }

    fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or_default()
    }
}

/// Streamed text as it came, still JSON-escaped: each delta is appended as the bytes between its
/// quotes (escapes are whole within a delta, so the pieces join into one valid JSON string), and
/// unescaped only when a join asks for it. The hot path copies bytes and allocates nothing.
#[derive(Default)]
pub(super) struct Escaped(String);

impl Escaped {
    /// Appends a JSON string literal's contents (`raw` with its quotes).
    pub(super) fn push_literal(&mut self, raw: &str) {
        if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            self.0.push_str(inner);
        }
    }

    fn push_text(&mut self, text: &str) {
        self.push_literal(&Value::from(text).to_string());
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn text(&self) -> String {
        serde_json::from_str(&format!("\"{}\"", self.0)).unwrap_or_default()
    }
}

fn s(ev: &Value, key: &str) -> String {
    ev.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Fold {
    pub(super) fn set_user(&mut self, message: Value) {
        let id = message["id"].as_str().map(String::from);
        self.user = Some((id, Kept::of(&message)));
    }

    /// Takes one event in (everything but the run's end).
    pub(super) fn apply(&mut self, ev: &Value) {
        let Some(ty) = EventType::of(ev) else {
            return;
        };
        let id = s(ev, "messageId");
        match ty {
            EventType::RunStarted if self.run_started.is_none() => {
                self.run_started = Some(Kept::of(ev))
            }
            EventType::Custom => keep_latest(&mut self.customs, s(ev, "name"), ev),
            EventType::ActivitySnapshot => keep_latest(&mut self.activities, id, ev),
            EventType::TextMessageStart => self.items.push(Item::Text {
                id,
                role: ev
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("assistant")
                    .into(),
                content: Escaped::default(),
                open: true,
            }),
            EventType::ReasoningStart => self.reasoning.push(id),
            EventType::ReasoningEnd => self.reasoning.retain(|r| *r != id),
            EventType::ReasoningMessageStart => self.items.push(Item::Reasoning {
                id,
                content: Escaped::default(),
                open: true,
            }),
            EventType::TextMessageContent
            | EventType::ReasoningMessageContent
            | EventType::ToolCallArgs => {
                if let Some(kind) = DeltaKind::of(ty) {
                    let id = ev.get("toolCallId").and_then(Value::as_str).unwrap_or(&id);
                    let delta = ev.get("delta").and_then(Value::as_str).unwrap_or("");
                    if let Some(target) = self.delta_target(kind, id) {
                        target.push_text(delta);
                    }
                }
            }
            EventType::TextMessageEnd | EventType::ReasoningMessageEnd => self.close(&id, None),
            EventType::ToolCallStart => self.items.push(Item::Tool {
                id: s(ev, "toolCallId"),
                name: s(ev, "toolCallName"),
                parent: ev
                    .get("parentMessageId")
                    .and_then(Value::as_str)
                    .map(String::from),
                args: Escaped::default(),
                open: true,
            }),
            EventType::ToolCallEnd => self.close("", Some(&s(ev, "toolCallId"))),
            EventType::ToolCallResult => self.items.push(Item::Result {
                id: s(ev, "messageId"),
                event: Kept::of(ev),
            }),
            EventType::StepStarted => self.steps.push(s(ev, "stepName")),
            EventType::StepFinished => {
                let name = s(ev, "stepName");
                if let Some(pos) = self.steps.iter().rposition(|n| *n == name) {
                    self.steps.remove(pos);
                }
            }
            _ => {}
        }
    }

    /// A text, reasoning or tool-argument delta for the open message or call `id`, as its JSON
    /// string literal.
    pub(super) fn apply_delta(&mut self, kind: DeltaKind, id: &str, literal: &str) {
        if let Some(target) = self.delta_target(kind, id) {
            target.push_literal(literal);
        }
    }

    fn delta_target(&mut self, kind: DeltaKind, id: &str) -> Option<&mut Escaped> {
        match kind {
            DeltaKind::Text => self.text_mut(id),
            DeltaKind::ToolArgs => self.items.iter_mut().rev().find_map(|i| match i {
                Item::Tool {
                    id: call,
                    args,
                    open: true,
                    ..
                } if call == id => Some(args),
                _ => None,
            }),
        }
    }

    fn text_mut(&mut self, wanted: &str) -> Option<&mut Escaped> {
        self.items.iter_mut().rev().find_map(|i| match i {
            Item::Text {
                id, content, open, ..
            }
            | Item::Reasoning { id, content, open }
                if *open && id == wanted =>
            {
                Some(content)
            }
            _ => None,
        })
    }

    fn close(&mut self, message: &str, call: Option<&str>) {
        for item in self.items.iter_mut().rev() {
            match item {
                Item::Text { id, open, .. } | Item::Reasoning { id, open, .. }
                    if call.is_none() && *open && id == message =>
                {
                    *open = false;
                    return;
                }
                Item::Tool { id, open, .. } if call == Some(id.as_str()) && *open => {
                    *open = false;
                    return;
                }
                _ => {}
            }
        }
    }

    /// The join's prelude: the events that bring a fresh client to where the run is now; its
    /// snapshot is the thread's kept conversation (`past`, oldest first) with this turn's closed
    /// messages taking the place of its records there, the newest `limit` only when given; up to
    /// the run's last assistant message when the run `ended` (`catchup::snapshot_then_tail`).
    pub(super) fn prelude(
        &self,
        now_ms: u64,
        past: &[Value],
        limit: Option<usize>,
        ended: Option<Instant>,
    ) -> Vec<Value> {
        let stamp = |mut ev: Value| {
            ev["timestamp"] = json!(now_ms);
            ev
        };
        let mut out = Vec::new();
        if let Some(started) = &self.run_started {
            out.push(started.value());
        }
        out.extend(self.customs.iter().map(|(_, ev)| ev.value()));
        let messages = self.with_past(past, limit);
        match ended {
            Some(_) => out.extend(crate::catchup::snapshot_then_tail(messages, now_ms)),
            None => out.push(
                json!({"type": EventType::MessagesSnapshot, "timestamp": now_ms,
                "messages": messages}),
            ),
        }
        out.extend(self.activities.iter().map(|(_, ev)| stamp(ev.value())));
        for step in &self.steps {
            out.push(
                json!({"type": EventType::StepStarted, "stepName": step, "timestamp": now_ms}),
            );
        }
        for id in &self.reasoning {
            out.push(
                json!({"type": EventType::ReasoningStart, "messageId": id, "timestamp": now_ms}),
            );
        }
        for item in &self.items {
            reopen(item, now_ms, &mut out);
        }
        out
    }

    /// `past` without what this turn holds (open or closed: an open span is re-opened after the
    /// snapshot), this turn's closed messages in the place of its first record there (so what was
    /// kept after them, as an interrupt's record, stays after them); the newest `limit` when given.
    fn with_past(&self, past: &[Value], limit: Option<usize>) -> Vec<Value> {
        let mut known: Vec<&str> = self
            .user
            .iter()
            .filter_map(|(id, _)| id.as_deref())
            .collect();
        known.extend(self.activities.iter().map(|(id, _)| id.as_str()));
        for item in &self.items {
            match item {
                Item::Text { id, .. } | Item::Reasoning { id, .. } => known.push(id),
                Item::Tool { id, parent, .. } => {
                    known.push(id);
                    known.extend(parent.as_deref());
                }
                Item::Result { id, .. } => known.push(id),
            }
        }
        let mine = |m: &Value| m["id"].as_str().is_some_and(|id| known.contains(&id));
        let at = past.iter().position(mine).unwrap_or(past.len());
        let mut msgs: Vec<Value> = past[..at].to_vec();
        msgs.extend(self.closed_messages());
        msgs.extend(past[at..].iter().filter(|m| !mine(m)).cloned());
        if let Some(n) = limit {
            msgs.drain(..msgs.len().saturating_sub(n));
        }
        msgs
    }

    /// Every message that is closed, as AG-UI messages (tool calls on their parent message).
    fn closed_messages(&self) -> Vec<Value> {
        let mut msgs: Vec<Value> = self.user.iter().map(|(_, m)| m.value()).collect();
        for item in &self.items {
            match item {
                Item::Text {
                    id,
                    role,
                    content,
                    open: false,
                } => msgs.push(json!({"id": id, "role": role, "content": content.text()})),
                Item::Reasoning {
                    id,
                    content,
                    open: false,
                } => msgs.push(json!({"id": id, "role": "reasoning", "content": content.text()})),
                Item::Tool {
                    id,
                    name,
                    parent,
                    args,
                    open: false,
                } => {
                    let call = json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": args.text()}});
                    // The client's rule: without a parent, the call's own id names its message.
                    let owner = parent.clone().unwrap_or_else(|| id.clone());
                    let found = msgs
                        .iter_mut()
                        .rev()
                        .find(|m| m["id"] == owner.as_str() && m["role"] == "assistant");
                    match found {
                        Some(m) => push_call(m, call),
                        None => msgs
                            .push(json!({"id": owner, "role": "assistant", "toolCalls": [call]})),
                    }
                }
                Item::Result { event, .. } => {
                    let ev = event.value();
                    msgs.push(json!({
                    "id": ev["messageId"], "role": "tool",
                    "toolCallId": ev["toolCallId"], "content": ev["content"]}))
                }
                _ => {}
            }
        }
        msgs
    }
}

fn keep_latest(list: &mut Vec<(String, Kept)>, key: String, ev: &Value) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = Kept::of(ev),
        None => list.push((key, Kept::of(ev))),
    }
}

fn push_call(message: &mut Value, call: Value) {
    let obj: &mut Map<String, Value> = message.as_object_mut().expect("a message object");
    match obj.get_mut("toolCalls").and_then(Value::as_array_mut) {
        Some(calls) => calls.push(call),
        None => {
            obj.insert("toolCalls".into(), json!([call]));
        }
    }
}

/// An open span as a fresh client needs it: its start, then what it holds so far.
fn reopen(item: &Item, now_ms: u64, out: &mut Vec<Value>) {
    let (start, content) = match item {
        Item::Text {
            id,
            role,
            content,
            open: true,
        } => (
            json!({"type": EventType::TextMessageStart, "messageId": id, "role": role}),
            (!content.is_empty()).then(|| {
                json!({"type": EventType::TextMessageContent, "messageId": id,
                       "delta": content.text()})
            }),
        ),
        Item::Reasoning {
            id,
            content,
            open: true,
        } => (
            json!({"type": EventType::ReasoningMessageStart, "messageId": id, "role": "reasoning"}),
            (!content.is_empty()).then(|| {
                json!({"type": EventType::ReasoningMessageContent, "messageId": id,
                       "delta": content.text()})
            }),
        ),
        Item::Tool {
            id,
            name,
            parent,
            args,
            open: true,
        } => {
            let mut start =
                json!({"type": EventType::ToolCallStart, "toolCallId": id, "toolCallName": name});
            if let Some(p) = parent {
                start["parentMessageId"] = json!(p);
            }
            let args = (!args.is_empty()).then(
                || json!({"type": EventType::ToolCallArgs, "toolCallId": id, "delta": args.text()}),
            );
            (start, args)
        }
        _ => return,
    };
    for mut ev in std::iter::once(start).chain(content) {
        ev["timestamp"] = json!(now_ms);
        out.push(ev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(evs: &[Value]) -> Vec<&str> {
        evs.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    #[test]
    fn a_join_snapshots_closed_messages_and_reopens_open_spans_with_their_content() {
        let mut f = Fold::default();
        for ev in [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "CUSTOM", "name": "iac-code.session.v1", "value": {}}),
            json!({"type": "STEP_STARTED", "stepName": "step:a"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Hi "}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "there"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "write", "parentMessageId": "m1"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":1}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "r1", "toolCallId": "c1", "content": "ok", "role": "tool"}),
            json!({"type": "REASONING_START", "messageId": "x1"}),
            json!({"type": "REASONING_MESSAGE_START", "messageId": "x1", "role": "reasoning"}),
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "x1", "delta": "hmm"}),
        ] {
            f.apply(&ev);
        }
        let p = f.prelude(7, &[], None, None);
        assert_eq!(
            types(&p),
            [
                "RUN_STARTED",
                "CUSTOM",
                "MESSAGES_SNAPSHOT",
                "STEP_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT"
            ]
        );
        assert_eq!(
            p[2]["messages"],
            json!([
                {"id": "m1", "role": "assistant", "content": "Hi there", "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "write", "arguments": "{\"a\":1}"}}]},
                {"id": "r1", "role": "tool", "toolCallId": "c1", "content": "ok"}])
        );
        assert_eq!(p[6]["delta"], "hmm");
    }

    #[test]
    fn the_join_of_an_ended_run_keeps_the_kept_order_and_sends_its_last_message_after_the_snapshot()
    {
        let mut f = Fold::default();
        f.set_user(json!({"id": "u2", "role": "user", "content": "write"}));
        for ev in [
            json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "write"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
        ] {
            f.apply(&ev);
        }
        let record = json!({"id": "interrupt-p1", "role": "activity", "activityType": "iac-code.interrupt",
            "content": {"interrupt": {"id": "p1"}, "answer": null}});
        let past = [
            json!({"id": "u1", "role": "user", "content": "hi"}),
            json!({"id": "a1", "role": "assistant", "content": "hello"}),
            json!({"id": "u2", "role": "user", "content": "write"}),
            json!({"id": "c1", "role": "assistant", "toolCalls": []}),
            record.clone(),
        ];
        let p = f.prelude(7, &past, None, Some(Instant::now()));
        assert_eq!(
            types(&p),
            [
                "RUN_STARTED",
                "MESSAGES_SNAPSHOT",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "ACTIVITY_SNAPSHOT"
            ]
        );
        let ids: Vec<&str> = p[1]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["u1", "a1", "u2"]);
        assert_eq!(p[2]["parentMessageId"], "c1");
        assert_eq!(p[5]["messageId"], "interrupt-p1");
        // A run in progress keeps every closed message in its snapshot.
        let p = f.prelude(7, &past, None, None);
        assert_eq!(p[1]["messages"].as_array().unwrap().len(), 5);
    }
}

/// The delta events, which the feed folds without parsing them into a `Value`.
#[derive(Clone, Copy)]
pub(super) enum DeltaKind {
    /// `TEXT_MESSAGE_CONTENT` or `REASONING_MESSAGE_CONTENT` (by `messageId`).
    Text,
    /// `TOOL_CALL_ARGS` (by `toolCallId`).
    ToolArgs,
}

impl DeltaKind {
    pub(super) fn of(event_type: EventType) -> Option<DeltaKind> {
        match event_type {
            EventType::TextMessageContent | EventType::ReasoningMessageContent => {
                Some(DeltaKind::Text)
            }
            EventType::ToolCallArgs => Some(DeltaKind::ToolArgs),
            _ => None,
        }
    }
}
