//! A run's events, as it streams them, turned into the records of its thread's log.
//!
//! Fed from the very events the run writes (`run::write_events`), so the kept conversation has
//! the streamed ids and text. A text or reasoning message is `open`ed when it starts, its text
//! appended when it ends and, while it streams, whenever the run is about to wait for its
//! upstream ([`Recorder::settle`]) or at most every [`PARTIAL_EVERY`] within a burst, so a kill
//! mid-message keeps what was sent; a tool call is written when it ends, a result
//! when it comes, an activity (a pipeline's) when it first appears and then, latest only, at the
//! run's end and wherever the thread's state is saved; an interrupt when the run announces it.
//! Deltas are not parsed: their escaped text is copied as it is (the hot path allocates nothing).

use super::History;
use crate::events::{DeltaSpans, EventType, Serialized};
use serde_json::value::RawValue;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How often the text of a message still streaming is written.
pub(crate) const PARTIAL_EVERY: Duration = Duration::from_millis(200);

/// The activity type of an interrupt and the answer it got, as a conversation keeps it.
pub const INTERRUPT_ACTIVITY: &str = "iac-code.interrupt";

/// The message id of an interrupt's activity message.
pub(crate) fn interrupt_message_id(interrupt_id: &str) -> String {
    format!("interrupt-{interrupt_id}")
}

/// One run's recorder.
pub(crate) struct Recorder {
    sink: Option<(History, String)>,
    /// Open text and reasoning messages: id, text not yet written (JSON-escaped).
    open: Vec<(String, String)>,
    /// Open tool calls: id, name, parent, arguments (JSON-escaped).
    tools: Vec<(String, String, Option<String>, String)>,
    /// Activities seen; `Some` body while the latest is not written yet.
    activities: Vec<(String, Option<Vec<u8>>)>,
    /// Record bodies to write, back to back.
    bodies: Vec<u8>,
    ends: Vec<usize>,
    last_partial: Instant,
}

#[derive(serde::Deserialize)]
struct View<'a> {
    #[serde(rename = "type")]
    kind: EventType,
    #[serde(rename = "messageId", default)]
    message_id: Option<&'a str>,
    #[serde(rename = "toolCallId", default)]
    tool_call_id: Option<&'a str>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
}

fn inner(literal: &str) -> &str {
    literal
        .strip_prefix('"')
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or("")
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

impl Recorder {
    pub(crate) fn new(history: &History, thread_id: &str) -> Recorder {
        let mut r = Recorder::detached();
        if history.keeps() {
            r.sink = Some((history.clone(), thread_id.to_string()));
            // While the run waits on a silent upstream, its log holds no descriptor: a held
            // run costs 2, not 3 (10,000 runs in a hard limit of 20,000 less what idles).
            let (history, thread_id) = (history.clone(), thread_id.to_string());
            crate::memory::on_idle(Some(Box::new(move || history.close_idle(&thread_id))));
        }
        r
    }

    /// A recorder that writes nowhere (the frames bench; a history cap of 0).
    pub(crate) fn detached() -> Recorder {
        Recorder {
            sink: None,
            open: Vec::new(),
            tools: Vec::new(),
            activities: Vec::new(),
            bodies: Vec::new(),
            ends: Vec::new(),
            last_partial: Instant::now(),
        }
    }

    /// Takes the events a run is about to write and writes the records they close.
    pub(crate) fn observe(&mut self, events: &(impl Serialized + ?Sized)) {
        if self.sink.is_none() {
            return;
        }
        events.each_event(&mut |json, spans| self.event(json, spans));
        if !self.open.is_empty() && self.last_partial.elapsed() >= PARTIAL_EVERY {
            self.flush_partials();
        }
        self.write();
    }

    /// Writes the text still streaming that is not on disk yet: the run is about to wait for
    /// its upstream (nothing more is buffered), so what the client has is kept whatever comes
    /// next. One `write()` per burst of the upstream, only while a message streams.
    pub(crate) fn settle(&mut self) {
        if self.sink.is_some() && self.open.iter().any(|o| !o.1.is_empty()) {
            self.flush_partials();
            self.write();
        }
    }

    /// Writes what is held (streamed text, latest activities): the run's state is being saved.
    pub(crate) fn checkpoint(&mut self) {
        if self.sink.is_none() {
            return;
        }
        self.flush_partials();
        self.flush_activities();
        self.write();
    }

    fn event(&mut self, json: &[u8], spans: Option<DeltaSpans>) {
        if let Some(DeltaSpans { message_id, delta }) = spans {
            let id = std::str::from_utf8(&json[message_id.0..message_id.1]).unwrap_or("");
            let literal = std::str::from_utf8(&json[delta.0..delta.1]).unwrap_or("");
            self.text(id, inner(literal));
            return;
        }
        let text = std::str::from_utf8(json).unwrap_or("");
        let Ok(view) = serde_json::from_str::<View>(text) else {
            // An id with an escape, or a type this adapter does not read: the whole event.
            if let Ok(ev) = serde_json::from_str::<Value>(text) {
                self.whole(&ev);
            }
            return;
        };
        let literal = view.delta.map_or("", |d| inner(d.get()));
        match view.kind {
            EventType::TextMessageContent | EventType::ReasoningMessageContent => {
                self.text(view.message_id.unwrap_or(""), literal)
            }
            EventType::ToolCallArgs => {
                let id = view.tool_call_id.unwrap_or("");
                if let Some(t) = self.tools.iter_mut().rev().find(|t| t.0 == id) {
                    t.3.push_str(literal);
                }
            }
            EventType::TextMessageEnd | EventType::ReasoningMessageEnd => {
                self.close(view.message_id.unwrap_or(""))
            }
            EventType::ToolCallEnd => self.tool_end(view.tool_call_id.unwrap_or("")),
            _ => {
                if let Ok(ev) = serde_json::from_str::<Value>(text) {
                    self.whole(&ev);
                }
            }
        }
    }

    fn text(&mut self, id: &str, escaped: &str) {
        if let Some(open) = self.open.iter_mut().rev().find(|o| o.0 == id) {
            open.1.push_str(escaped);
        }
    }

    /// An event read whole: the rare ones (starts, results, activities, the run's end).
    fn whole(&mut self, ev: &Value) {
        let s = |k: &str| ev.get(k).and_then(Value::as_str).unwrap_or("");
        match EventType::of(ev) {
            Some(EventType::TextMessageStart) => self.start(s("messageId"), s("role")),
            Some(EventType::ReasoningMessageStart) => self.start(s("messageId"), "reasoning"),
            Some(EventType::TextMessageContent | EventType::ReasoningMessageContent) => {
                let delta = Value::from(s("delta")).to_string();
                self.text(s("messageId"), inner(&delta));
            }
            Some(EventType::TextMessageEnd | EventType::ReasoningMessageEnd) => {
                self.close(s("messageId"))
            }
            Some(EventType::ToolCallStart) => self.tools.push((
                s("toolCallId").into(),
                s("toolCallName").into(),
                ev.get("parentMessageId")
                    .and_then(Value::as_str)
                    .map(String::from),
                String::new(),
            )),
            Some(EventType::ToolCallArgs) => {
                let delta = Value::from(s("delta")).to_string();
                if let Some(t) = self.tools.iter_mut().rev().find(|t| t.0 == s("toolCallId")) {
                    t.3.push_str(inner(&delta));
                }
            }
            Some(EventType::ToolCallEnd) => self.tool_end(s("toolCallId")),
            Some(EventType::ToolCallResult) => {
                let m = serde_json::json!({"id": s("messageId"), "role": "tool",
                    "toolCallId": s("toolCallId"), "content": ev.get("content").unwrap_or(&Value::Null)});
                self.message(&m);
            }
            Some(EventType::ActivitySnapshot) => self.activity(ev),
            Some(EventType::RunFinished | EventType::RunError) => {
                self.flush_partials();
                self.flush_activities();
                let interrupts = ev.pointer("/outcome/interrupts").and_then(Value::as_array);
                for i in interrupts.into_iter().flatten() {
                    self.message(&interrupt_message(i, None));
                }
            }
            _ => {}
        }
    }

    fn start(&mut self, id: &str, role: &str) {
        let role = if role.is_empty() { "assistant" } else { role };
        self.body(|b| {
            b.extend_from_slice(b"\"open\":{\"id\":");
            json_str(b, id);
            b.extend_from_slice(b",\"role\":");
            json_str(b, role);
            b.push(b'}');
        });
        self.open.push((id.to_string(), String::new()));
    }

    fn close(&mut self, id: &str) {
        if let Some(pos) = self.open.iter().rposition(|o| o.0 == id) {
            let (id, text) = self.open.remove(pos);
            self.append(&id, &text);
        }
    }

    fn append(&mut self, id: &str, escaped: &str) {
        if escaped.is_empty() {
            return;
        }
        self.body(|b| {
            b.extend_from_slice(b"\"append\":{\"id\":");
            json_str(b, id);
            b.extend_from_slice(b",\"content\":\"");
            b.extend_from_slice(escaped.as_bytes());
            b.extend_from_slice(b"\"}");
        });
    }

    fn tool_end(&mut self, id: &str) {
        let Some(pos) = self.tools.iter().rposition(|t| t.0 == id) else {
            return;
        };
        let (id, name, parent, args) = self.tools.remove(pos);
        self.body(|b| {
            b.extend_from_slice(b"\"toolCall\":{");
            if let Some(p) = &parent {
                b.extend_from_slice(b"\"messageId\":");
                json_str(b, p);
                b.push(b',');
            }
            b.extend_from_slice(b"\"call\":{\"id\":");
            json_str(b, &id);
            b.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
            json_str(b, &name);
            b.extend_from_slice(b",\"arguments\":\"");
            b.extend_from_slice(args.as_bytes());
            b.extend_from_slice(b"\"}}}");
        });
    }

    /// An activity: written when it first appears, then held (latest only) until a checkpoint.
    fn activity(&mut self, ev: &Value) {
        let id = ev.get("messageId").and_then(Value::as_str).unwrap_or("");
        let m = serde_json::json!({"id": id, "role": "activity",
            "activityType": ev.get("activityType").unwrap_or(&Value::Null),
            "content": ev.get("content").unwrap_or(&Value::Null)});
        let mut body = b"\"message\":".to_vec();
        let _ = serde_json::to_writer(&mut body, &m);
        match self.activities.iter_mut().find(|a| a.0 == id) {
            Some(a) => a.1 = Some(body),
            None => {
                self.activities.push((id.to_string(), None));
                self.body(|b| b.extend_from_slice(&body));
            }
        }
    }

    fn message(&mut self, m: &Value) {
        self.body(|b| {
            b.extend_from_slice(b"\"message\":");
            let _ = serde_json::to_writer(b, m);
        });
    }

    fn body(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.bodies);
        self.ends.push(self.bodies.len());
    }

    fn flush_partials(&mut self) {
        self.last_partial = Instant::now();
        let mut open = std::mem::take(&mut self.open);
        for (id, text) in &mut open {
            self.append(id, text);
            text.clear();
        }
        self.open = open;
    }

    fn flush_activities(&mut self) {
        let held: Vec<Vec<u8>> = self
            .activities
            .iter_mut()
            .filter_map(|a| a.1.take())
            .collect();
        for body in held {
            self.body(|b| b.extend_from_slice(&body));
        }
    }

    fn write(&mut self) {
        if self.ends.is_empty() {
            return;
        }
        if let Some((history, thread)) = &self.sink {
            let starts = std::iter::once(0).chain(self.ends.iter().copied());
            let bodies = starts.zip(&self.ends).map(|(s, &e)| &self.bodies[s..e]);
            history.append(thread, "", bodies);
        }
        self.bodies.clear();
        self.ends.clear();
    }
}

/// An interrupt as the conversation keeps it: an activity message, later superseded by the same
/// id with the answer it got.
pub(crate) fn interrupt_message(interrupt: &Value, answer: Option<&Value>) -> Value {
    let id = interrupt.get("id").and_then(Value::as_str).unwrap_or("");
    serde_json::json!({"id": interrupt_message_id(id), "role": "activity",
        "activityType": INTERRUPT_ACTIVITY,
        "content": {"interrupt": interrupt, "answer": answer}})
}

impl Drop for Recorder {
    /// A run that ends without its end event (a panic) still leaves what it streamed.
    fn drop(&mut self) {
        if self.sink.is_some() && (!self.open.is_empty() || !self.ends.is_empty()) {
            self.checkpoint();
        }
        if let Some((history, thread_id)) = &self.sink {
            crate::memory::on_idle(None);
            history.release(thread_id);
        }
    }
}
