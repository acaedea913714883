//! The user messages: the latest one checked strictly and its content turned into A2A parts (text
//! and inline images, with their size limits); the history only as far as roles go.

use super::json::{
    each_element, kind, missing, non_empty, not_json, object, string_field, value, wrong_type,
    Kind, Obj,
};
use crate::error::{Error, Msg};
use base64::Engine;
use serde_json::value::RawValue;
use serde_json::Value;

pub(crate) const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;
pub(crate) const MAX_IMAGES_BYTES: usize = 10 * 1024 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct UserMessage {
    pub(crate) id: String,
    pub(crate) parts: Vec<Value>,
}

/// Returns the latest user message in A2A form, checked strictly; the earlier messages are read
/// leniently: each must be an object with a `role` (the pair-mode rule counts roles), nothing
/// more. The spec sends only the latest user message to the kernel (A2A keeps the conversation
/// itself), as the reference does, so an odd message a client keeps in its history (a remote
/// image, an empty text, an audio part) never refuses a later turn, and only the latest
/// message's images count toward the image budget. Messages are visited one at a time; only the
/// latest user message's content is built.
pub(super) fn parse_messages(messages: &RawValue) -> Result<Option<UserMessage>, Error> {
    let mut latest: Option<(usize, &RawValue)> = None;
    each_element(messages, |i, m| {
        let path = format!("messages[{i}]");
        let obj = object(m, &["role"], &path)?.no_duplicate(&path)?;
        if non_empty(&obj, "role", &format!("{path}.role"))? == "user" {
            latest = Some((i, m));
        }
        Ok(())
    })?;
    let Some((i, m)) = latest else {
        return Ok(None);
    };
    let path = format!("messages[{i}]");
    let m = object(m, &["role", "id", "content"], &path)?.no_duplicate(&path)?;
    let id = non_empty(&m, "id", &format!("{path}.id"))?;
    let content = m
        .get("content")
        .ok_or_else(|| missing(&format!("{path}.content")))?;
    let parts = user_parts(content, &path, &mut 0)?;
    Ok(Some(UserMessage { id, parts }))
}

fn user_parts(content: &RawValue, path: &str, images: &mut usize) -> Result<Vec<Value>, Error> {
    let empty = || Msg::ContentEmpty.with(&[&path]);
    match kind(content) {
        Kind::String => {
            let s: String = serde_json::from_str(content.get()).map_err(|_| not_json())?;
            if s.is_empty() {
                return Err(empty());
            }
            Ok(vec![text_part(s)])
        }
        Kind::Array => {
            let mut parts = Vec::new();
            each_element(content, |j, part| {
                parts.push(content_part(part, &format!("{path}.content[{j}]"), images)?);
                Ok(())
            })?;
            if parts.is_empty() {
                return Err(empty());
            }
            Ok(parts)
        }
        _ => Err(wrong_type(
            &format!("{path}.content"),
            Msg::MustBeStringOrParts,
        )),
    }
}

/// `{"text": text}`, the text moved in (`json!` would copy it: a user message may be 12 MiB).
fn text_part(text: String) -> Value {
    let mut part = serde_json::Map::new();
    part.insert("text".into(), Value::String(text));
    Value::Object(part)
}

fn content_part(part: &RawValue, path: &str, images: &mut usize) -> Result<Value, Error> {
    let obj = object(part, &["type", "text", "source", "metadata"], path)?.no_duplicate(path)?;
    let kind_of = non_empty(&obj, "type", &format!("{path}.type"))?;
    match kind_of.as_str() {
        "text" => {
            let text = string_field(&obj, "text", &format!("{path}.text"))?
                .ok_or_else(|| missing(&format!("{path}.text")))?;
            Ok(text_part(text))
        }
        "image" => image_part(&obj, path, images),
        other => Err(Msg::PartUnsupported.with(&[&path, &other])),
    }
}

fn image_part(obj: &Obj, path: &str, images: &mut usize) -> Result<Value, Error> {
    let source_path = format!("{path}.source");
    let source = object(
        obj.get("source").ok_or_else(|| missing(&source_path))?,
        &["type", "mimeType", "value"],
        &source_path,
    )?
    .no_duplicate(&source_path)?;
    let source_type = match source.get("type") {
        Some(raw) if kind(raw) == Kind::String => Some(value(raw)?),
        _ => None,
    };
    if source_type.as_ref().and_then(Value::as_str) != Some("data") {
        return Err(Msg::ImageNotInline.with(&[&path]));
    }
    let mime = non_empty(&source, "mimeType", &format!("{path}.source.mimeType"))?;
    if !mime.starts_with("image/") {
        return Err(wrong_type(
            &format!("{path}.source.mimeType"),
            Msg::MustBeImageType,
        ));
    }
    let data = non_empty(&source, "value", &format!("{path}.source.value"))?;
    let decoded_len = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| wrong_type(&format!("{path}.source.value"), Msg::MustBeBase64))?
        .len();
    if decoded_len > MAX_IMAGE_BYTES {
        return Err(Msg::ImageTooLarge.with(&[&path, &(MAX_IMAGE_BYTES >> 20)]));
    }
    *images += decoded_len;
    if *images > MAX_IMAGES_BYTES {
        return Err(Msg::ImagesTooLarge.with(&[&(MAX_IMAGES_BYTES >> 20)]));
    }
    // The base64 text moves into the part (no copy unless it had surrounding blanks).
    let data = if data.trim().len() == data.len() {
        data
    } else {
        data.trim().to_string()
    };
    // Built field by field: `json!` would copy the data after all.
    let mut part = serde_json::Map::new();
    part.insert("raw".into(), Value::String(data));
    part.insert("mediaType".into(), Value::from(mime));
    let mut raw = Value::Object(part);
    if let Some(name) = obj
        .get("metadata")
        .and_then(|m| object(m, &["filename"], "").ok())
        .and_then(|m| m.get("filename"))
        .filter(|f| kind(f) == Kind::String)
        .map(value)
        .transpose()?
    {
        raw["filename"] = name;
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::fixtures::{base, err_of, parse};
    use serde_json::json;

    #[test]
    fn only_text_and_inline_images_are_accepted() {
        let img = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
        let mut v = base();
        v["messages"][0]["content"] = json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "data", "value": img, "mimeType": "image/png"}}
        ]);
        let parts = parse(&v).unwrap().user_message.unwrap().parts;
        assert_eq!(parts[1], json!({"raw": img, "mediaType": "image/png"}));
        for part in [
            json!({"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}),
            json!({"type": "audio", "source": {"type": "data", "value": "AA==", "mimeType": "audio/wav"}}),
            json!({"type": "video", "source": {"type": "data", "value": "AA==", "mimeType": "video/mp4"}}),
            json!({"type": "document", "source": {"type": "data", "value": "AA==", "mimeType": "application/pdf"}}),
            json!({"type": "binary", "mimeType": "application/octet-stream", "data": "AA=="}),
            json!({"type": "image", "source": {"type": "data", "value": "!!!", "mimeType": "image/png"}}),
        ] {
            let e = err_of(|v| v["messages"][0]["content"] = json!([part.clone()]));
            assert!(e.contains("content[0]"), "{part}: {e}");
        }
    }

    #[test]
    fn only_the_latest_user_message_is_checked_and_counts_toward_the_image_budget() {
        let six = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 6 * 1024 * 1024]);
        let img = json!({"type": "image", "source": {"type": "data", "value": six, "mimeType": "image/png"}});
        let mut v = base();
        v["messages"] = json!([
            {"id": "h1", "role": "user", "content": [{"type": "image", "source": {"type": "url", "value": "https://x/y.png"}}]},
            {"id": "h2", "role": "user", "content": ""},
            {"id": "h3", "role": "user", "content": [{"type": "audio", "source": {"type": "data", "value": "AA==", "mimeType": "audio/wav"}}]},
            {"role": "user", "content": [img.clone()]},
            {"id": "a1", "role": "assistant", "content": null},
            {"id": "m9", "role": "user", "content": [img.clone()]}
        ]);
        let latest = parse(&v).unwrap().user_message.unwrap();
        assert_eq!(latest.id, "m9");
        assert_eq!(latest.parts[0]["mediaType"], "image/png");
        // The latest one is still checked strictly, and a message still needs its role.
        v["messages"][5]["content"] = json!("");
        assert!(parse(&v)
            .unwrap_err()
            .message(crate::error::Lang::En)
            .contains("messages[5]"));
        let e = err_of(|v| {
            v["messages"] =
                json!([{"id": "h", "content": "x"}, {"id": "m", "role": "user", "content": "hi"}])
        });
        assert!(e.contains("messages[0].role"), "{e}");
    }

    #[test]
    fn image_size_limits() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_IMAGE_BYTES + 1]);
        let e = err_of(
            |v| v["messages"][0]["content"] = json!([{"type": "image", "source": {"type": "data", "value": big, "mimeType": "image/png"}}]),
        );
        assert!(e.contains("8 MiB"), "{e}");
        let six = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 6 * 1024 * 1024]);
        let img = json!({"type": "image", "source": {"type": "data", "value": six, "mimeType": "image/png"}});
        let e = err_of(|v| v["messages"][0]["content"] = json!([img.clone(), img.clone()]));
        assert!(e.contains("10 MiB"), "{e}");
    }
}
