//! AG-UI events as they leave the adapter: the event types by their wire names ([`EventType`]),
//! serialised events back to back for one write ([`Events`]), and the traits that let the
//! projection, the replay buffer and the client's stream take either those or JSON values.
//!
//! A leaf: the projection writes these, the feed and the stream read them, and none of them has
//! to know the others to do so.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The AG-UI event types this adapter writes or reads back, serialised as their wire names
/// (`TEXT_MESSAGE_CONTENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum EventType {
    RunStarted,
    RunFinished,
    RunError,
    StepStarted,
    StepFinished,
    TextMessageStart,
    TextMessageContent,
    TextMessageEnd,
    ReasoningStart,
    ReasoningMessageStart,
    ReasoningMessageContent,
    ReasoningMessageEnd,
    ReasoningEnd,
    ToolCallStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    MessagesSnapshot,
    ActivitySnapshot,
    Custom,
}

impl EventType {
    const ALL: [EventType; 20] = [
        EventType::RunStarted,
        EventType::RunFinished,
        EventType::RunError,
        EventType::StepStarted,
        EventType::StepFinished,
        EventType::TextMessageStart,
        EventType::TextMessageContent,
        EventType::TextMessageEnd,
        EventType::ReasoningStart,
        EventType::ReasoningMessageStart,
        EventType::ReasoningMessageContent,
        EventType::ReasoningMessageEnd,
        EventType::ReasoningEnd,
        EventType::ToolCallStart,
        EventType::ToolCallArgs,
        EventType::ToolCallEnd,
        EventType::ToolCallResult,
        EventType::MessagesSnapshot,
        EventType::ActivitySnapshot,
        EventType::Custom,
    ];

    /// The wire name (`TEXT_MESSAGE_CONTENT`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::RunStarted => "RUN_STARTED",
            EventType::RunFinished => "RUN_FINISHED",
            EventType::RunError => "RUN_ERROR",
            EventType::StepStarted => "STEP_STARTED",
            EventType::StepFinished => "STEP_FINISHED",
            EventType::TextMessageStart => "TEXT_MESSAGE_START",
            EventType::TextMessageContent => "TEXT_MESSAGE_CONTENT",
            EventType::TextMessageEnd => "TEXT_MESSAGE_END",
            EventType::ReasoningStart => "REASONING_START",
            EventType::ReasoningMessageStart => "REASONING_MESSAGE_START",
            EventType::ReasoningMessageContent => "REASONING_MESSAGE_CONTENT",
            EventType::ReasoningMessageEnd => "REASONING_MESSAGE_END",
            EventType::ReasoningEnd => "REASONING_END",
            EventType::ToolCallStart => "TOOL_CALL_START",
            EventType::ToolCallArgs => "TOOL_CALL_ARGS",
            EventType::ToolCallEnd => "TOOL_CALL_END",
            EventType::ToolCallResult => "TOOL_CALL_RESULT",
            EventType::MessagesSnapshot => "MESSAGES_SNAPSHOT",
            EventType::ActivitySnapshot => "ACTIVITY_SNAPSHOT",
            EventType::Custom => "CUSTOM",
        }
    }

    /// The type of a wire name; `None` for a type this adapter neither writes nor reads.
    pub(crate) fn parse(name: &str) -> Option<EventType> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The type of an event as a JSON value (its `type`).
    pub(crate) fn of(event: &Value) -> Option<EventType> {
        event
            .get("type")
            .and_then(Value::as_str)
            .and_then(Self::parse)
    }

    /// `RUN_FINISHED` or `RUN_ERROR`: the run's end.
    pub(crate) fn ends_run(self) -> bool {
        matches!(self, EventType::RunFinished | EventType::RunError)
    }
}

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

    /// Appends one event: `write` appends its JSON (one object, no line break) to the buffer it
    /// is given and returns where its delta's parts are, counted from the event's first byte.
    pub(crate) fn push_json(&mut self, write: impl FnOnce(&mut Vec<u8>) -> Option<DeltaSpans>) {
        let spans = write(&mut self.json);
        self.ends.push(self.json.len());
        self.spans.push(spans);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_types_read_and_write_their_wire_names() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
            assert_eq!(
                serde_json::from_value::<EventType>(t.as_str().into()).unwrap(),
                t
            );
        }
        assert_eq!(EventType::parse("STATE_SNAPSHOT"), None);
        assert_eq!(
            EventType::of(&serde_json::json!({"type": "TOOL_CALL_ARGS"})),
            Some(EventType::ToolCallArgs)
        );
    }
}
