//! Where the projection writes: each AG-UI event stamped with the projection's clock, into the
//! caller's sink: serialised straight into a run's frame buffer ([`Events`](crate::events::Events)), or as JSON values
//! (tests, observers). The per-item text events are written field by field, never built as a
//! `Value`.

use crate::events::{DeltaSpans, EventSink, EventType, Target};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// The events of a hot path, written without a `Value`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Delta {
    Text,
    Reasoning,
}

impl Delta {
    fn event_type(self) -> EventType {
        match self {
            Delta::Text => EventType::TextMessageContent,
            Delta::Reasoning => EventType::ReasoningMessageContent,
        }
    }
}

/// Where the projection writes: the caller's sink, and the clock that stamps each event.
pub(super) struct Out<'a> {
    target: Target<'a>,
    clock: fn() -> u64,
}

impl<'a> Out<'a> {
    pub(super) fn new(events: &'a mut (impl EventSink + ?Sized), clock: fn() -> u64) -> Out<'a> {
        Out {
            target: events.target(),
            clock,
        }
    }

    /// Appends an event of type `kind`: the `fields` object plus `type` and `timestamp`.
    pub(super) fn push(&mut self, kind: EventType, fields: Value) {
        let mut event = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        event.insert("type".into(), Value::String(kind.as_str().into()));
        event.insert("timestamp".into(), json!((self.clock)()));
        let event = Value::Object(event);
        match &mut self.target {
            Target::Values(v) => v.push(event),
            Target::Frames(f) => f.push_json(|w| {
                let _ = serde_json::to_writer(w, &event);
                None
            }),
        }
    }

    /// `TEXT_MESSAGE_CONTENT` or `REASONING_MESSAGE_CONTENT`, with the keys in the order a `Value`
    /// writes them (sorted), so the bytes are the same either way.
    pub(super) fn delta(&mut self, kind: Delta, message_id: &str, delta: &str) {
        if let Target::Values(_) = self.target {
            let fields = json!({"messageId": message_id, "delta": delta});
            return self.push(kind.event_type(), fields);
        }
        let ts = (self.clock)();
        let Target::Frames(f) = &mut self.target else {
            return;
        };
        f.push_json(|w| delta_json(w, kind, message_id, delta, ts));
    }

    /// Appends a `CUSTOM` event whose value is `raw`, copied as it is (keys in the same order a
    /// `Value` writes them). JSON with a line break (a multi-line upstream event) is re-encoded:
    /// an SSE `data:` line can't hold one.
    pub(super) fn custom_raw(&mut self, name: Custom, raw: &RawValue) {
        let one_line = !raw.get().bytes().any(|b| b == b'\n' || b == b'\r');
        let clock = self.clock;
        match &mut self.target {
            Target::Frames(f) if one_line => f.push_json(|w| {
                w.extend_from_slice(b"{\"name\":\"");
                w.extend_from_slice(name.as_str().as_bytes());
                w.extend_from_slice(b"\",\"timestamp\":");
                let _ = serde_json::to_writer(&mut *w, &clock());
                w.extend_from_slice(b",\"type\":\"CUSTOM\",\"value\":");
                w.extend_from_slice(raw.get().as_bytes());
                w.push(b'}');
                None
            }),
            _ => {
                let value = serde_json::from_str(raw.get()).unwrap_or_default();
                self.custom(name, value);
            }
        }
    }

    /// Appends a `CUSTOM` event.
    pub(super) fn custom(&mut self, name: Custom, value: Value) {
        let mut fields = Map::new();
        fields.insert("name".into(), json!(name.as_str()));
        fields.insert("value".into(), value);
        self.push(EventType::Custom, Value::Object(fields));
    }
}

/// A delta event's JSON with the keys in the order a `Value` writes them (sorted), so the bytes
/// are the same either way; where its message id and delta are.
fn delta_json(
    w: &mut Vec<u8>,
    kind: Delta,
    message_id: &str,
    delta: &str,
    ts: u64,
) -> Option<DeltaSpans> {
    let start = w.len();
    w.extend_from_slice(b"{\"delta\":");
    let delta_at = w.len() - start;
    let _ = serde_json::to_writer(&mut *w, delta);
    let delta_end = w.len() - start;
    w.extend_from_slice(b",\"messageId\":");
    let id_at = w.len() - start + 1;
    let _ = serde_json::to_writer(&mut *w, message_id);
    let id_end = w.len() - start - 1;
    w.extend_from_slice(b",\"timestamp\":");
    let _ = serde_json::to_writer(&mut *w, &ts);
    w.extend_from_slice(b",\"type\":\"");
    w.extend_from_slice(kind.event_type().as_str().as_bytes());
    w.extend_from_slice(b"\"}");
    // An id the JSON escapes would not match its start event's: that one is read back.
    let plain_id = id_end - id_at == message_id.len();
    plain_id.then_some(DeltaSpans {
        message_id: (id_at, id_end),
        delta: (delta_at, delta_end),
    })
}

/// `{"schemaVersion": 1}` plus the fields of the object `from` (a `schemaVersion` in it loses).
pub(super) fn versioned(from: &Value) -> Value {
    let mut value = Map::new();
    value.insert("schemaVersion".into(), json!(1));
    if let Some(fields) = from.as_object() {
        for (k, v) in fields {
            value.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Value::Object(value)
}

/// The one list of CUSTOM event names this adapter sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Custom {
    /// The run's A2A task and iac-code session, once per run (session.rs).
    Session,
    /// A running tool's progress (tools.rs, via mod.rs).
    ToolProgress,
    /// An A2A artifact, whole (mod.rs).
    Artifact,
    /// A pipeline envelope of a listed type (pipeline.rs); also the pipeline activity's type.
    Pipeline,
}

impl Custom {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Custom::Session => "iac-code.session.v1",
            Custom::ToolProgress => "iac-code.tool-progress.v1",
            Custom::Artifact => "iac-code.artifact.v1",
            Custom::Pipeline => "iac-code.pipeline.v1",
        }
    }
}
