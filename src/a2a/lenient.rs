//! Lenient JSON reading for the frame view: fields that count as absent when they hold another
//! JSON type (as a `Value` lookup would), strings borrowed from the frame unless escaped, and views
//! filled in place ([`FillFrom`]).

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// A view filled in place, field by field, where it lives: the views are a few hundred bytes, and
/// returning them up through each level of the JSON would copy them once per level.
pub(super) trait FillFrom<'de> {
    fn fill<M: MapAccess<'de>>(&mut self, map: M) -> Result<(), M::Error>;
}

/// Fills the view from a JSON object (`true`); any other JSON value leaves it as it is (`false`).
pub(super) struct Fill<'t, T>(pub(super) &'t mut T);

impl<'de, T: FillFrom<'de>> DeserializeSeed<'de> for Fill<'_, T> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: FillFrom<'de>> Visitor<'de> for Fill<'_, T> {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<bool, M::Error> {
        self.0.fill(map).map(|()| true)
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<bool, S::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// Keeps a raw value even when it is `null` (`Option<&RawValue>` would read `null` as absent).
pub(super) fn raw<'de: 'a, 'a, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<&'a RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A string field: absent, present with another JSON type, or a string (borrowed unless escaped).
#[derive(Default, Debug)]
pub(crate) struct LStr<'a> {
    present: bool,
    value: Option<Cow<'a, str>>,
}

impl LStr<'_> {
    pub(crate) fn get(&self) -> Option<&str> {
        self.value.as_deref()
    }

    pub(crate) fn is_present(&self) -> bool {
        self.present
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = match d.deserialize_any(AnyVisitor)? {
            Scalar::Str(s) => Some(s),
            _ => None,
        };
        Ok(LStr {
            present: true,
            value,
        })
    }
}

/// An object field: absent, present with another JSON type, or an object.
#[derive(Default)]
pub(crate) enum Field<T> {
    #[default]
    Absent,
    Other,
    Obj(T),
}

impl<T> Field<T> {
    pub(crate) fn is_present(&self) -> bool {
        !matches!(self, Field::Absent)
    }

    pub(crate) fn obj(&self) -> Option<&T> {
        match self {
            Field::Obj(t) => Some(t),
            _ => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Field<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Field<T>, M::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Field::Obj)
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Field<T>, S::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
            fn visit_unit<E>(self) -> Result<Field<T>, E> {
                Ok(Field::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The concatenated `text` of a message's `parts` (one part: borrowed from the frame).
#[derive(Default, Debug)]
pub(crate) struct Text<'a>(pub(super) Option<Cow<'a, str>>);

impl Text<'_> {
    pub(crate) fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Part<'a> {
    #[serde(borrow)]
    text: LStr<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Text<'a>, S::Error> {
                let mut text: Option<Cow<'a, str>> = None;
                while let Some(part) = seq.next_element::<Field<Part<'de>>>()? {
                    let Field::Obj(Part { text: t }) = part else {
                        continue;
                    };
                    match (&mut text, t.value) {
                        (_, None) => {}
                        (None, Some(s)) => text = Some(s),
                        (Some(acc), Some(s)) => acc.to_mut().push_str(&s),
                    }
                }
                Ok(Text(text))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Text<'a>, M::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'a>, E> {
                Ok(Text(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// What a lenient field saw: a string, a bool, or something else (consumed).
pub(super) enum Scalar<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    Other,
}

pub(super) struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s.to_string())))
    }
    fn visit_string<E>(self, s: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s)))
    }
    fn visit_bool<E>(self, b: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(b))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Scalar<'de>, S::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Scalar<'de>, M::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}
