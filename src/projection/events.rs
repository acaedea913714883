//! AG-UI events, each stamped with the projection's clock, written where the caller wants them:
//! serialised straight into a run's frame buffer ([`Events`]), or as JSON values (tests,
//! observers). The per-item text events are written field by field, never built as a `Value`.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// Serialised events, back to back, for one write to the client: no `Value` and, once the
/// buffers have grown, no allocation per event.
#[derive(Default)]
pub struct Events {
    json: Vec<u8>,
    ends: Vec<usize>,
    /// Per event: where a text or reasoning delta's parts are.
    spans: Vec<Option<DeltaSpans>>,
}

/// Where a text or reasoning delta's message id (the string inside its quotes) and its delta
/// (the JSON string literal) sit in the event's JSON: the replay buffer's fold takes them from
/// there instead of reading the event back.
#[derive(Clone, Copy, Debug)]
pub struct DeltaSpans {
    pub message_id: (usize, usize),
    pub delta: (usize, usize),
}

impl Events {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Forgets the events, keeping the buffers.
    pub fn clear(&mut self) {
        self.json.clear();
        self.ends.clear();
        self.spans.clear();
    }

    /// Each event's JSON (one object, no newline).
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter()).map(|(s, &e)| &self.json[s..e])
    }

    /// The events as values (tests).
    pub fn values(&self) -> Vec<Value> {
        self.iter()
            .map(|j| serde_json::from_slice(j).unwrap_or_default())
            .collect()
    }
}

/// Events ready to be framed for the client, one JSON object each.
pub trait Serialized {
    fn count(&self) -> usize;
    /// Calls `f` with each event's JSON, in order.
    fn each_json(&self, f: &mut dyn FnMut(&[u8]));
    /// [`each_json`](Self::each_json), with the [`DeltaSpans`] of the deltas that know them.
    fn each_event(&self, f: &mut dyn FnMut(&[u8], Option<DeltaSpans>)) {
        self.each_json(&mut |json| f(json, None))
    }
}

impl Serialized for Events {
    fn count(&self) -> usize {
        self.len()
    }
    fn each_json(&self, f: &mut dyn FnMut(&[u8])) {
        self.iter().for_each(f)
    }
    fn each_event(&self, f: &mut dyn FnMut(&[u8], Option<DeltaSpans>)) {
        self.iter()
            .zip(&self.spans)
            .for_each(|(json, spans)| f(json, *spans))
    }
}

impl Serialized for [Value] {
    fn count(&self) -> usize {
        self.len()
    }
    fn each_json(&self, f: &mut dyn FnMut(&[u8])) {
        for ev in self {
            f(&serde_json::to_vec(ev).unwrap_or_default());
        }
    }
}

impl Serialized for Vec<Value> {
    fn count(&self) -> usize {
        self.len()
    }
    fn each_json(&self, f: &mut dyn FnMut(&[u8])) {
        self.as_slice().each_json(f)
    }
}

impl<const N: usize> Serialized for [Value; N] {
    fn count(&self) -> usize {
        N
    }
    fn each_json(&self, f: &mut dyn FnMut(&[u8])) {
        self.as_slice().each_json(f)
    }
}

/// Where projected events can go: a run's [`Events`] or a list of values.
pub trait EventSink {
    #[doc(hidden)]
    fn target(&mut self) -> Target<'_>;
}

#[doc(hidden)]
pub enum Target<'a> {
    Frames(&'a mut Events),
    Values(&'a mut Vec<Value>),
}

impl EventSink for Events {
    fn target(&mut self) -> Target<'_> {
        Target::Frames(self)
    }
}

impl EventSink for Vec<Value> {
    fn target(&mut self) -> Target<'_> {
        Target::Values(self)
    }
}

/// The events of a hot path, written without a `Value`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Delta {
    Text,
    Reasoning,
}

impl Delta {
    fn event_type(self) -> &'static str {
        match self {
            Delta::Text => "TEXT_MESSAGE_CONTENT",
            Delta::Reasoning => "REASONING_MESSAGE_CONTENT",
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
    pub(super) fn push(&mut self, kind: &str, fields: Value) {
        let mut event = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        event.insert("type".into(), Value::String(kind.into()));
        event.insert("timestamp".into(), json!((self.clock)()));
        let event = Value::Object(event);
        match &mut self.target {
            Target::Values(v) => v.push(event),
            Target::Frames(f) => {
                let _ = serde_json::to_writer(&mut f.json, &event);
                f.ends.push(f.json.len());
                f.spans.push(None);
            }
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
        let w = &mut f.json;
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
        w.extend_from_slice(kind.event_type().as_bytes());
        w.extend_from_slice(b"\"}");
        f.ends.push(w.len());
        // An id the JSON escapes would not match its start event's: that one is read back.
        let plain_id = id_end - id_at == message_id.len();
        f.spans.push(plain_id.then_some(DeltaSpans {
            message_id: (id_at, id_end),
            delta: (delta_at, delta_end),
        }));
    }

    /// Appends a `CUSTOM` event whose value is `raw`, copied as it is (keys in the same order a
    /// `Value` writes them). JSON with a line break (a multi-line upstream event) is re-encoded:
    /// an SSE `data:` line can't hold one.
    pub(super) fn custom_raw(&mut self, name: Custom, raw: &RawValue) {
        let one_line = !raw.get().bytes().any(|b| b == b'\n' || b == b'\r');
        let clock = self.clock;
        match &mut self.target {
            Target::Frames(f) if one_line => {
                let ts = clock();
                let w = &mut f.json;
                w.extend_from_slice(b"{\"name\":\"");
                w.extend_from_slice(name.as_str().as_bytes());
                w.extend_from_slice(b"\",\"timestamp\":");
                let _ = serde_json::to_writer(&mut *w, &ts);
                w.extend_from_slice(b",\"type\":\"CUSTOM\",\"value\":");
                w.extend_from_slice(raw.get().as_bytes());
                w.push(b'}');
                f.ends.push(w.len());
                f.spans.push(None);
            }
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
        self.push("CUSTOM", Value::Object(fields));
    }
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
