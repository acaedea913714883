//! The user's message of a turn as the conversation keeps it: its text whole, its images up to
//! [`IMAGE_BUDGET`] bytes per message (decoded), each image beyond that replaced by a text part
//! naming its media type and size, so nothing is silently dropped.

use serde_json::Value;

/// Decoded image bytes kept per user message.
pub(crate) const IMAGE_BUDGET: usize = 256 * 1024;

/// The conversation's title: the first text part, trimmed to 80 characters.
pub(crate) fn title(parts: &Value) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|p| p.get("text").and_then(Value::as_str))
        .map(super::logfile::title_of)
        .unwrap_or_default()
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

/// Writes the record body (`"message": {…}`) of the AG-UI user message for the A2A `parts` of a
/// turn straight into `out`: the text is escaped into it once, never built into a value first
/// (a user's message may be 12 MiB).
pub(crate) fn write_record(id: &str, parts: &Value, out: &mut Vec<u8>) {
    let parts = parts.as_array().map(Vec::as_slice).unwrap_or(&[]);
    out.extend_from_slice(b"\"message\":{\"id\":");
    json_str(out, id);
    out.extend_from_slice(b",\"role\":\"user\",\"content\":");
    if let [one] = parts {
        if let Some(text) = one.get("text").and_then(Value::as_str) {
            json_str(out, text);
            out.push(b'}');
            return;
        }
    }
    out.push(b'[');
    let mut budget = IMAGE_BUDGET;
    let mut first = true;
    for p in parts {
        let text = p.get("text").and_then(Value::as_str);
        let image =
            (p.get("raw").and_then(Value::as_str)).zip(p.get("mediaType").and_then(Value::as_str));
        if text.is_none() && image.is_none() {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        if let Some(text) = text {
            out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
            json_str(out, text);
            out.push(b'}');
            continue;
        }
        let Some((raw, mime)) = image else { continue };
        let size = raw.len() / 4 * 3 - raw.bytes().rev().take_while(|&b| b == b'=').count();
        if size > budget {
            out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
            json_str(out, &format!("[image not kept: {mime}, {size} bytes]"));
            out.push(b'}');
            continue;
        }
        budget -= size;
        out.extend_from_slice(b"{\"type\":\"image\",\"source\":{\"type\":\"data\",\"value\":");
        json_str(out, raw);
        out.extend_from_slice(b",\"mimeType\":");
        json_str(out, mime);
        out.push(b'}');
        if let Some(name) = p.get("filename") {
            out.extend_from_slice(b",\"metadata\":{\"filename\":");
            let _ = serde_json::to_writer(&mut *out, name);
            out.push(b'}');
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// The message [`write_record`] writes, as a value (tests).
#[cfg(test)]
fn message(id: &str, parts: &Value) -> (Value, String) {
    let mut out = b"{".to_vec();
    write_record(id, parts, &mut out);
    out.push(b'}');
    let v: Value = serde_json::from_slice(&out).expect("a record body is JSON");
    (v["message"].clone(), title(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
