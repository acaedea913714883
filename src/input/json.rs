//! The strict JSON reader: objects read key by key without building their values, typed fields,
//! and the `INVALID_INPUT` errors that name a field's path (never its value).

use crate::error::{Error, Msg};
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;

pub(super) fn missing(path: &str) -> Error {
    Msg::Missing.with(&[&path])
}

/// `path` is not of the type `want` names (one of the `MustBe*` messages).
pub(super) fn wrong_type(path: &str, want: Msg) -> Error {
    want.with(&[&path])
}

pub(super) fn not_json() -> Error {
    Msg::NotJson.err()
}

/// The JSON type of a raw value, from its first byte (serde_json hands out values trimmed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Object,
    Array,
    String,
    Bool,
    Null,
    Number,
}

pub(super) fn kind(raw: &RawValue) -> Kind {
    match raw.get().as_bytes().first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

/// A JSON object read without building its values: the raw text of each known key's value
/// (borrowed from the body), the first unknown key and the first repeated known key. Unknown
/// keys' values are skipped unread, so whatever they hold costs no memory.
pub(super) struct Obj<'a> {
    fields: Vec<(&'static str, &'a RawValue)>,
    unknown: Option<String>,
    duplicate: Option<&'static str>,
}

impl<'a> Obj<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// The object with a `null` in any of `keys` taken as absent: the reference's optional
    /// fields (`str | None = None`) take `null` as "not given", and a client written against it
    /// sends `"model": null` for a field it leaves unset.
    pub(super) fn null_is_absent(mut self, keys: &[&str]) -> Obj<'a> {
        self.fields
            .retain(|(k, v)| !(keys.contains(k) && kind(v) == Kind::Null));
        self
    }

    /// The first key the object holds beyond the known ones.
    pub(super) fn unknown_key(&self) -> Option<&str> {
        self.unknown.as_deref()
    }

    /// The strict form: no unknown and no repeated key.
    pub(super) fn strict(self, path: &str) -> Result<Obj<'a>, Error> {
        if let Some(k) = &self.unknown {
            return Err(Msg::UnknownField.with(&[&format!("{path}.{k}")]));
        }
        self.no_duplicate(path)
    }

    /// A repeated key is refused everywhere: two readers could pick different values, and a
    /// repeated secret would escape the digest's blanking.
    pub(super) fn no_duplicate(self, path: &str) -> Result<Obj<'a>, Error> {
        match self.duplicate {
            Some(k) => {
                let at = if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                };
                Err(Msg::DuplicateField.with(&[&at]))
            }
            None => Ok(self),
        }
    }
}

/// Reads `raw` as an object with the `known` keys (a type error when it is not an object).
pub(super) fn object<'a>(
    raw: &'a RawValue,
    known: &[&'static str],
    path: &str,
) -> Result<Obj<'a>, Error> {
    if kind(raw) != Kind::Object {
        return Err(wrong_type(path, Msg::MustBeObject));
    }
    struct Visit<'k>(&'k [&'static str]);
    impl<'de> Visitor<'de> for Visit<'_> {
        type Value = Obj<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Obj<'de>, A::Error> {
            let mut obj = Obj {
                fields: Vec::new(),
                unknown: None,
                duplicate: None,
            };
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let Some(&k) = self.0.iter().find(|k| **k == key) else {
                    obj.unknown.get_or_insert_with(|| key.into_owned());
                    map.next_value::<IgnoredAny>()?;
                    continue;
                };
                let value = map.next_value::<&'de RawValue>()?;
                if obj.get(k).is_some() {
                    obj.duplicate.get_or_insert(k);
                }
                obj.fields.push((k, value));
            }
            Ok(obj)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    serde::Deserializer::deserialize_map(&mut de, Visit(known)).map_err(|_| not_json())
}

/// Calls `f` on each element of the array `raw` in turn, without collecting them; stops at the
/// first error `f` returns.
pub(super) fn each_element<'a>(
    raw: &'a RawValue,
    mut f: impl FnMut(usize, &'a RawValue) -> Result<(), Error>,
) -> Result<(), Error> {
    struct Visit<'f, F>(&'f mut F, Option<Error>);
    impl<'de, F: FnMut(usize, &'de RawValue) -> Result<(), Error>> Visitor<'de> for Visit<'_, F> {
        type Value = Option<Error>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<S: SeqAccess<'de>>(mut self, mut seq: S) -> Result<Option<Error>, S::Error> {
            let mut i = 0;
            while let Some(el) = seq.next_element::<&'de RawValue>()? {
                if let Err(e) = (self.0)(i, el) {
                    self.1 = Some(e);
                    // Skip the rest unread: the deserializer insists on reaching the end.
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    break;
                }
                i += 1;
            }
            Ok(self.1)
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    match serde::Deserializer::deserialize_seq(&mut de, Visit(&mut f, None)) {
        Ok(None) => Ok(()),
        Ok(Some(e)) => Err(e),
        Err(_) => Err(not_json()),
    }
}

/// A raw value as a `Value` (small values only: ids, payloads, message content).
pub(super) fn value(raw: &RawValue) -> Result<Value, Error> {
    serde_json::from_str(raw.get()).map_err(|_| not_json())
}

pub(super) fn string_field(obj: &Obj, key: &str, path: &str) -> Result<Option<String>, Error> {
    match obj.get(key) {
        None => Ok(None),
        Some(raw) if kind(raw) == Kind::String => Ok(Some(
            serde_json::from_str(raw.get()).map_err(|_| not_json())?,
        )),
        Some(_) => Err(wrong_type(path, Msg::MustBeString)),
    }
}

pub(super) fn non_empty(obj: &Obj, key: &str, path: &str) -> Result<String, Error> {
    match string_field(obj, key, path)? {
        None => Err(missing(path)),
        Some(s) if s.trim().is_empty() => Err(wrong_type(path, Msg::MustBeNonEmptyString)),
        Some(s) => Ok(s),
    }
}

pub(super) fn bool_field(obj: &Obj, key: &str, path: &str) -> Result<Option<bool>, Error> {
    match obj.get(key) {
        None => Ok(None),
        Some(raw) if kind(raw) == Kind::Bool => Ok(Some(raw.get() == "true")),
        Some(_) => Err(wrong_type(path, Msg::MustBeBool)),
    }
}

/// A string field that must be one of `names`, read as the value its name stands for.
pub(super) fn choice<T: Copy>(
    obj: &Obj,
    key: &str,
    path: &str,
    names: &[(T, &str)],
) -> Result<Option<T>, Error> {
    let Some(s) = string_field(obj, key, path)? else {
        return Ok(None);
    };
    match names.iter().find(|(_, name)| *name == s) {
        Some((value, _)) => Ok(Some(*value)),
        None => {
            let list: Vec<&str> = names.iter().map(|(_, name)| *name).collect();
            Err(Msg::NotOneOf.with(&[&path, &list.join(", ")]))
        }
    }
}
