//! A pipeline envelope (`metadata.iac_code.pipeline`, or one of `pipelineBatch.events`), viewed
//! the way the frame is: the fields the projection reads on every envelope, borrowed; `data` raw,
//! read per event type (a text delta's text typed, a tool's input as a `Value`).

use super::lenient::{Field, LStr};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Envelope<'a> {
    #[serde(borrow, rename = "eventType")]
    pub(crate) event_type: LStr<'a>,
    #[serde(borrow, rename = "eventId")]
    pub(crate) event_id: LStr<'a>,
    pub(crate) sequence: Num,
    #[serde(borrow)]
    pub(crate) scope: LStr<'a>,
    #[serde(borrow, rename = "iacCodeSessionId")]
    pub(crate) session_id: LStr<'a>,
    #[serde(borrow)]
    pub(crate) step: Field<Coord<'a>>,
    #[serde(borrow, rename = "candidateStep")]
    pub(crate) candidate_step: Field<Coord<'a>>,
    #[serde(borrow)]
    pub(crate) candidate: Field<Coord<'a>>,
    #[serde(borrow, deserialize_with = "super::lenient::raw")]
    pub(crate) data: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    /// The envelope in `raw` (`None` if it is not an object this view reads).
    pub(crate) fn of(raw: &'a RawValue) -> Option<Envelope<'a>> {
        match serde_json::from_str::<Field<Envelope>>(raw.get()).ok()? {
            Field::Obj(e) => Some(e),
            _ => None,
        }
    }

    /// `data` as a `Value` (`Null` when absent), for the event types that read more of it.
    pub(crate) fn data_value(&self) -> serde_json::Value {
        self.data
            .and_then(|d| serde_json::from_str(d.get()).ok())
            .unwrap_or_default()
    }

    /// `data` of a text or thinking delta.
    pub(crate) fn delta(&self) -> Delta<'a> {
        self.data
            .and_then(|d| serde_json::from_str::<Field<Delta>>(d.get()).ok())
            .and_then(|f| match f {
                Field::Obj(d) => Some(d),
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// A pipeline coordinate (`step`, `candidate`, `candidateStep`).
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Coord<'a> {
    #[serde(borrow)]
    pub(crate) id: LStr<'a>,
    #[serde(borrow, rename = "runId")]
    pub(crate) run_id: LStr<'a>,
    #[serde(borrow, rename = "subPipelineId")]
    pub(crate) sub_pipeline_id: LStr<'a>,
}

/// The `data` of `text_delta` and `thinking_delta`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Delta<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: LStr<'a>,
    #[serde(borrow)]
    pub(crate) text: LStr<'a>,
}

/// A number field, read as `Value::as_f64` reads it: `None` when absent or not a number.
#[derive(Default, Clone, Copy)]
pub(crate) struct Num(pub(crate) Option<f64>);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, n: u64) -> Result<Num, E> {
                Ok(Num(Some(n as f64)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Num, E> {
                Ok(Num(Some(n as f64)))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Num, E> {
                Ok(Num(Some(n)))
            }
            fn visit_str<E>(self, _: &str) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num(None))
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Num, S::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Num(None))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Num, M::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Num(None))
            }
        }
        d.deserialize_any(V)
    }
}
