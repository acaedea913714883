//! The user's message of a turn as the conversation keeps it: its text whole, its images up to
//! [`IMAGE_BUDGET`] bytes per message (decoded), each image beyond that replaced by a text part
//! naming its media type and size, so nothing is silently dropped.

use serde_json::{json, Value};

/// Decoded image bytes kept per user message.
pub(crate) const IMAGE_BUDGET: usize = 256 * 1024;

/// The AG-UI user message for the A2A `parts` of a turn, and the conversation's title from it.
pub(crate) fn message(id: &str, parts: &Value) -> (Value, String) {
    let parts = parts.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut title = String::new();
    let mut content = Vec::new();
    let mut budget = IMAGE_BUDGET;
    for p in parts {
        if let Some(text) = p.get("text").and_then(Value::as_str) {
            if title.is_empty() {
                title = super::logfile::title_of(text);
            }
            content.push(json!({"type": "text", "text": text}));
            continue;
        }
        let (Some(raw), Some(mime)) = (
            p.get("raw").and_then(Value::as_str),
            p.get("mediaType").and_then(Value::as_str),
        ) else {
            continue;
        };
        let size = raw.len() / 4 * 3 - raw.bytes().rev().take_while(|&b| b == b'=').count();
        if size <= budget {
            budget -= size;
            let mut image = json!({"type": "image",
                "source": {"type": "data", "value": raw, "mimeType": mime}});
            if let Some(name) = p.get("filename") {
                image["metadata"] = json!({"filename": name});
            }
            content.push(image);
        } else {
            content.push(json!({"type": "text",
                "text": format!("[image not kept: {mime}, {size} bytes]")}));
        }
    }
    let content = match content.as_slice() {
        [one] if one["type"] == "text" => one["text"].clone(),
        _ => Value::Array(content),
    };
    (json!({"id": id, "role": "user", "content": content}), title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_kept_up_to_the_budget_and_named_beyond_it() {
        let small = "AAAA".repeat(10); // 30 bytes
        let big = "AAAA".repeat(IMAGE_BUDGET / 3 + 1);
        let parts = json!([{"text": "  look at these  "},
            {"raw": small, "mediaType": "image/png", "filename": "a.png"},
            {"raw": big, "mediaType": "image/jpeg"}]);
        let (m, title) = message("u1", &parts);
        assert_eq!(title, "look at these");
        assert_eq!(m["content"][1]["source"]["value"], small);
        assert_eq!(m["content"][1]["metadata"]["filename"], "a.png");
        let size = (IMAGE_BUDGET / 3 + 1) * 3;
        assert_eq!(
            m["content"][2]["text"],
            format!("[image not kept: image/jpeg, {size} bytes]")
        );
        let (m, _) = message("u2", &json!([{"text": "hi"}]));
        assert_eq!(m, json!({"id": "u2", "role": "user", "content": "hi"}));
    }
}
