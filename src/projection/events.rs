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
    pub(super) fn custom(&mut self, name: &str, value: Value) {
        let mut fields = Map::new();
        fields.insert("name".into(), json!(name));
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
