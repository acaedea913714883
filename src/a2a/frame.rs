//! A typed, borrowing view of one A2A JSON-RPC frame: the envelope, the result's kind, and the few
//! fields the projection reads on every item, borrowed from the frame's bytes (no `Value` tree, no
//! owned string unless the JSON escapes one). What is rare or passed through (tool updates,
//! pipeline envelopes, input waits, usage, a task's history, artifacts) stays raw JSON and becomes a
//! `Value` only on the items that carry it.
//!
//! The view reads as leniently as `Value` lookups did: a field of the wrong JSON type counts as
//! absent, and a present `null` is still present where that made a difference before.

use super::incoming;
use super::lenient::{AnyVisitor, Fill, FillFrom, Scalar};
pub(crate) use super::lenient::{Field, LStr, Text};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The four shapes of a streamed `result`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ItemKind {
    Task,
    StatusUpdate,
    ArtifactUpdate,
    Message,
}

/// One streamed `result`, viewed.
pub(crate) struct Item<'a> {
    pub(crate) kind: ItemKind,
    pub(crate) head: Head<'a>,
}

impl<'a> Item<'a> {
    /// The `result` of one JSON-RPC frame; `None` for anything else (an error, not JSON, no
    /// object result, a repeated `result` or `error`), which the caller reads the slow way to
    /// say why.
    pub(crate) fn of_frame(data: &'a [u8]) -> Option<Item<'a>> {
        // Checked as UTF-8 once, so the strings borrowed from it are not checked again one by one.
        let text = std::str::from_utf8(data).ok()?;
        let mut item = Item::default();
        let mut frame = RpcFrame {
            result: ResultSlot::new(&mut item),
            result_obj: false,
            error: None,
            seen: (false, false),
        };
        let mut de = serde_json::Deserializer::from_str(text);
        let is_obj = Fill(&mut frame).deserialize(&mut de).ok()?;
        de.end().ok()?;
        let error = frame.error.is_some_and(|e| e.get() != "null");
        (is_obj && frame.result_obj && !error).then_some(item)
    }

    /// A `result` object (a bare object is a task).
    pub(crate) fn of_result(result: &'a str) -> serde_json::Result<Item<'a>> {
        let mut item = Item::default();
        let mut de = serde_json::Deserializer::from_str(result);
        Fill(&mut ResultSlot::new(&mut item)).deserialize(&mut de)?;
        de.end()?;
        Ok(item)
    }
}

impl Default for Item<'_> {
    fn default() -> Self {
        Item {
            kind: ItemKind::Task,
            head: Head::default(),
        }
    }
}

/// The JSON-RPC frame: its `result` read where it is (serde_json allocates to skip a nested
/// value, so nothing is skipped first and parsed again), its `error` kept raw.
struct RpcFrame<'i, 'a> {
    result: ResultSlot<'i, 'a>,
    result_obj: bool,
    error: Option<&'a RawValue>,
    /// `result`, `error` read: a second one is refused, as a derived view would.
    seen: (bool, bool),
}

impl<'de: 'a, 'a> FillFrom<'de> for RpcFrame<'_, 'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            match key.get().unwrap_or("") {
                "result" if !self.seen.0 => {
                    self.seen.0 = true;
                    self.result_obj = map.next_value_seed(Fill(&mut self.result))?;
                }
                "error" if !self.seen.1 => {
                    self.seen.1 = true;
                    self.error = Some(map.next_value()?);
                }
                k @ ("result" | "error") => {
                    return Err(de::Error::custom(format_args!("duplicate field `{k}`")))
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A result: the body of its first kind (in the order of `KINDS`) or, with none, itself as a
/// bare task, read into the item's one `Head`.
struct ResultSlot<'i, 'a> {
    item: &'i mut Item<'a>,
    /// The index in `KINDS` of the kind read into the head.
    read: Option<usize>,
}

impl<'i, 'a> ResultSlot<'i, 'a> {
    const KINDS: [(ItemKind, &'static str); 4] = [
        (ItemKind::Task, "task"),
        (ItemKind::StatusUpdate, "statusUpdate"),
        (ItemKind::ArtifactUpdate, "artifactUpdate"),
        (ItemKind::Message, "message"),
    ];

    fn new(item: &'i mut Item<'a>) -> ResultSlot<'i, 'a> {
        ResultSlot { item, read: None }
    }
}

impl<'de: 'a, 'a> FillFrom<'de> for ResultSlot<'_, 'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            let key = key.get().unwrap_or("");
            let kind = Self::KINDS.iter().position(|(_, k)| *k == key);
            match (kind, self.read) {
                // A kind before the one read (or the first): its body is the item.
                (Some(i), read) if read.is_none_or(|r| i < r) => {
                    self.item.head = Head::default();
                    map.next_value_seed(Fill(&mut self.item.head))?;
                    self.item.kind = Self::KINDS[i].0;
                    self.read = Some(i);
                }
                // The bare task's own fields, while no kind was read.
                (None, None) => self.item.head.take(key, &mut map)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The fields of a task, status update, artifact update or message that the projection reads.
#[derive(Default)]
pub(crate) struct Head<'a> {
    pub(crate) id: LStr<'a>,
    pub(crate) task_id: LStr<'a>,
    pub(crate) context_id: LStr<'a>,
    pub(crate) status: Field<Status<'a>>,
    /// `metadata.iac_code`.
    pub(crate) iac: Iac<'a>,
    /// A task's history (read only when a task snapshot brings the answer).
    pub(crate) history: Option<&'a RawValue>,
    /// A plain message's id and text.
    pub(crate) message_id: LStr<'a>,
    pub(crate) parts: Text<'a>,
    /// An artifact update's artifact, passed on whole.
    pub(crate) artifact: Option<&'a RawValue>,
}

impl<'a> Head<'a> {
    /// Reads the value of `key` into the view (or skips it).
    fn take<'de: 'a, M: MapAccess<'de>>(&mut self, key: &str, map: &mut M) -> Result<(), M::Error> {
        match key {
            "id" => self.id = map.next_value()?,
            "taskId" => self.task_id = map.next_value()?,
            "contextId" => self.context_id = map.next_value()?,
            "status" => fill_field(&mut self.status, map)?,
            "metadata" => {
                self.iac = Iac::default();
                map.next_value_seed(Fill(&mut Meta(&mut self.iac)))?;
            }
            "history" => self.history = Some(map.next_value()?),
            "messageId" => self.message_id = map.next_value()?,
            "parts" => self.parts = map.next_value()?,
            "artifact" => self.artifact = Some(map.next_value()?),
            _ => {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl<'de: 'a, 'a> FillFrom<'de> for Head<'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            self.take(key.get().unwrap_or(""), &mut map)?;
        }
        Ok(())
    }
}

/// Fills an object field in place: `Obj` when the value is an object, else `Other`.
fn fill_field<'de, T, M>(field: &mut Field<T>, map: &mut M) -> Result<(), M::Error>
where
    T: Default + FillFrom<'de>,
    M: MapAccess<'de>,
{
    *field = Field::Obj(T::default());
    if let Field::Obj(t) = field {
        if !map.next_value_seed(Fill(t))? {
            *field = Field::Other;
        }
    }
    Ok(())
}

#[derive(Default)]
pub(crate) struct Status<'a> {
    pub(crate) state: LStr<'a>,
    pub(crate) message: Field<Message<'a>>,
}

impl<'de: 'a, 'a> FillFrom<'de> for Status<'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            match key.get().unwrap_or("") {
                "state" => self.state = map.next_value()?,
                "message" => fill_field(&mut self.message, &mut map)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

impl Status<'_> {
    pub(crate) fn state(&self) -> TaskState {
        TaskState::parse(self.state.get().unwrap_or(""))
    }
}

#[derive(Default)]
pub(crate) struct Message<'a> {
    pub(crate) role: LStr<'a>,
    pub(crate) message_id: LStr<'a>,
    pub(crate) parts: Text<'a>,
}

impl<'de: 'a, 'a> FillFrom<'de> for Message<'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            match key.get().unwrap_or("") {
                "role" => self.role = map.next_value()?,
                "messageId" => self.message_id = map.next_value()?,
                "parts" => self.parts = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `metadata`: only its `iac_code` is read, into the head's [`Iac`].
struct Meta<'i, 'a>(&'i mut Iac<'a>);

impl<'de: 'a, 'a> FillFrom<'de> for Meta<'_, 'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            if key.get() == Some("iac_code") {
                *self.0 = Iac::default();
                map.next_value_seed(Fill(&mut *self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// `metadata.iac_code`: the keys every text or reasoning frame carries, typed; the other keys
/// (tool, pipeline, input waits, usage, …) as a `Value` object for the code that reads those.
#[derive(Default)]
pub(crate) struct Iac<'a> {
    pub(crate) session_id: LStr<'a>,
    /// `assistantFinal.complete` is `true`: the message repeats the streamed text.
    pub(crate) final_complete: bool,
    pub(crate) thinking: Field<ThinkingUpdate<'a>>,
    /// The other keys, `Null` when there are none.
    pub(crate) rare: Value,
    /// `pipeline` and `pipelineBatch` as they came (not in `rare`): each envelope is viewed
    /// ([`Envelope`]), and a listed one goes on as a CUSTOM value byte for byte.
    pub(crate) pipeline_raw: Option<&'a RawValue>,
    pub(crate) batch_raw: Option<&'a RawValue>,
    /// `tool` as it came (not in `rare`): most tool updates are read through a small view.
    pub(crate) tool_raw: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> FillFrom<'de> for Iac<'a> {
    fn fill<M: MapAccess<'de>>(&mut self, mut map: M) -> Result<(), M::Error> {
        let mut rare = serde_json::Map::new();
        while let Some(key) = map.next_key::<LStr<'de>>()? {
            match key.get().unwrap_or("") {
                incoming::SESSION_ID => self.session_id = map.next_value()?,
                "assistantFinal" => {
                    self.final_complete = match map.next_value::<Field<Final>>()? {
                        Field::Obj(f) => f.complete.0,
                        _ => false,
                    }
                }
                incoming::THINKING => self.thinking = map.next_value()?,
                incoming::PIPELINE => self.pipeline_raw = Some(map.next_value()?),
                incoming::PIPELINE_BATCH => self.batch_raw = Some(map.next_value()?),
                incoming::TOOL => self.tool_raw = Some(map.next_value()?),
                other => {
                    rare.insert(other.to_string(), map.next_value()?);
                }
            }
        }
        if !rare.is_empty() {
            self.rare = Value::Object(rare);
        }
        Ok(())
    }
}

/// `metadata.iac_code.thinking` of an update: the kernel's reasoning (not the client's thinking
/// options, `input::ThinkingOptions`).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct ThinkingUpdate<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: LStr<'a>,
    #[serde(borrow)]
    pub(crate) text: LStr<'a>,
}

impl ThinkingUpdate<'_> {
    /// The non-empty text of raw thinking.
    pub(crate) fn raw_text(&self) -> Option<&str> {
        (self.kind.get() == Some("raw_thinking"))
            .then(|| self.text.get())
            .flatten()
            .filter(|t| !t.is_empty())
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Final {
    complete: IsTrue,
}

/// `true` only for the JSON `true`.
#[derive(Default)]
struct IsTrue(bool);

impl<'de> Deserialize<'de> for IsTrue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(IsTrue(matches!(
            d.deserialize_any(AnyVisitor)?,
            Scalar::Bool(true)
        )))
    }
}

/// An A2A task state, read from any of its spellings (`TASK_STATE_INPUT_REQUIRED`,
/// `input-required`, `input_required`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
    AuthRequired,
    /// Anything else, or no state.
    Other,
}

impl TaskState {
    const NAMES: [(TaskState, &'static str); 9] = [
        (TaskState::Submitted, "submitted"),
        (TaskState::Working, "working"),
        (TaskState::InputRequired, "input-required"),
        (TaskState::Completed, "completed"),
        (TaskState::Canceled, "canceled"),
        (TaskState::Canceled, "cancelled"),
        (TaskState::Failed, "failed"),
        (TaskState::Rejected, "rejected"),
        (TaskState::AuthRequired, "auth-required"),
    ];

    /// Case-insensitive, `_` = `-`, an optional `task_state_` prefix.
    pub(crate) fn parse(state: &str) -> TaskState {
        const PREFIX: &str = "task_state_";
        let s = match state.get(..PREFIX.len()) {
            Some(p) if p.eq_ignore_ascii_case(PREFIX) => &state[PREFIX.len()..],
            _ => state,
        };
        let same = |name: &str| {
            s.len() == name.len()
                && s.bytes().zip(name.bytes()).all(|(a, b)| {
                    let a = a.to_ascii_lowercase();
                    a == b || (a == b'_' && b == b'-')
                })
        };
        Self::NAMES
            .iter()
            .find(|(_, name)| same(name))
            .map_or(TaskState::Other, |(state, _)| *state)
    }

    /// The state's name in messages (`input-required`).
    pub(crate) fn as_str(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(state, _)| *state == self)
            .map_or("", |(_, name)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    #[test]
    fn states_read_as_normalize_state_reads_them() {
        for (s, want) in [
            ("TASK_STATE_INPUT_REQUIRED", TaskState::InputRequired),
            ("input-required", TaskState::InputRequired),
            ("Input_Required", TaskState::InputRequired),
            ("task_state_cancelled", TaskState::Canceled),
            ("TASK_STATE_AUTH_REQUIRED", TaskState::AuthRequired),
            ("task-state-completed", TaskState::Other),
            ("", TaskState::Other),
            ("TASK_STATE_COMPLETED", TaskState::Completed),
        ] {
            assert_eq!(TaskState::parse(s), want, "{s}");
        }
    }

    #[test]
    fn a_text_frame_is_viewed_without_copies() {
        let frame = br#"{"result":{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"Hi "}]}},"metadata":{"iac_code":{"iacCodeSessionId":"s"}}}},"id":"1","jsonrpc":"2.0"}"#;
        let item = Item::of_frame(frame).expect("a result");
        assert_eq!(item.kind, ItemKind::StatusUpdate);
        assert_eq!(item.head.task_id.get(), Some("t"));
        let status = item.head.status.obj().unwrap();
        assert_eq!(status.state(), TaskState::Working);
        let message = status.message.obj().unwrap();
        assert!(matches!(message.parts.0, Some(Cow::Borrowed("Hi "))));
        assert_eq!(item.head.iac.session_id.get(), Some("s"));
        assert!(item.head.iac.rare.is_null());
    }

    #[test]
    fn wrong_types_read_as_absent_and_other_keys_as_a_value() {
        let item = Item::of_result(
            r#"{"task":null,"statusUpdate":{},"id":7,"metadata":{"iac_code":{"tool":{"a":1},"assistantFinal":{"complete":"yes"}}}}"#,
        )
        .unwrap();
        assert_eq!(item.kind, ItemKind::Task);
        assert!(!item.head.id.is_present());
        let item = Item::of_result(
            r#"{"id":7,"status":[1],"metadata":{"iac_code":{"tool":{"a":1},"assistantFinal":{"complete":"yes"}}}}"#,
        )
        .unwrap();
        assert!(item.head.id.is_present() && item.head.id.get().is_none());
        assert!(item.head.status.is_present() && item.head.status.obj().is_none());
        assert!(!item.head.iac.final_complete);
        assert_eq!(
            item.head.iac.tool_raw.map(RawValue::get),
            Some(r#"{"a":1}"#)
        );
        let item = Item::of_result(r#"{"metadata":{"iac_code":{"usage":{"n":2}}}}"#).unwrap();
        assert_eq!(item.head.iac.rare["usage"]["n"], 2);
        let parts = Item::of_result(
            r#"{"parts":[{"text":"a"},{"text":1},"x",{"text":"b\n"}],"messageId":"m"}"#,
        )
        .unwrap();
        assert_eq!(parts.head.parts.as_str(), "ab\n");
    }

    /// Found by the `a2a_stream` fuzz target: the view skips what it does not read without
    /// checking it to the end, so a frame whose skipped field holds a lone surrogate escape or a
    /// number beyond f64 is read, where a `Value` refuses the whole frame. The fields it reads
    /// are checked: the same escape there refuses the frame (and the slow way says why).
    #[test]
    fn a_frame_with_an_unreadable_value_in_a_skipped_field_is_still_read() {
        for frame in [
            r#"{"result":{"statusUpdate":{"taskId":"t"}},"id":"a\ud83d1"}"#,
            r#"{"result":{"statusUpdate":{"taskId":"t","x":1e999}}}"#,
        ] {
            assert!(serde_json::from_str::<Value>(frame).is_err(), "{frame}");
            let item = Item::of_frame(frame.as_bytes()).expect("read");
            assert_eq!(item.head.task_id.get(), Some("t"));
        }
        let read_field = br#"{"result":{"statusUpdate":{"taskId":"a\ud83d1"}}}"#;
        assert!(Item::of_frame(read_field).is_none());
    }
}
