//! AG-UI events as JSON objects, each stamped with the projection's clock.

use serde_json::{json, Map, Value};

/// Where the projection writes: the caller's event list, and the clock that stamps each event.
pub(super) struct Out<'a> {
    events: &'a mut Vec<Value>,
    clock: fn() -> u64,
}

impl<'a> Out<'a> {
    pub(super) fn new(events: &'a mut Vec<Value>, clock: fn() -> u64) -> Out<'a> {
        Out { events, clock }
    }

    /// Appends an event of type `kind`: the `fields` object plus `type` and `timestamp`.
    pub(super) fn push(&mut self, kind: &str, fields: Value) {
        let mut event = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        event.insert("type".into(), Value::String(kind.into()));
        event.insert("timestamp".into(), json!((self.clock)()));
        self.events.push(Value::Object(event));
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
