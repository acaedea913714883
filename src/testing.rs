//! Test support shared by the unit tests, the integration tests and the fuzzers. Not part of the
//! adapter's API (hidden from the docs); nothing in the binary calls it.

use serde_json::Value;

/// Checks AG-UI span balance: every START has its END (matched by id: message, tool call or step
/// name), no END without a START, nothing open at `RUN_FINISHED`/`RUN_ERROR`, and the run ends.
/// The projection keeps this by construction; tests and fuzzers use this to prove it.
pub fn check_spans(events: &[Value]) -> Result<(), String> {
    let mut open: Vec<(&str, &str)> = Vec::new();
    for e in events {
        let t = e["type"].as_str().unwrap_or("");
        let id = ["messageId", "toolCallId", "stepName"]
            .iter()
            .find_map(|k| e.get(*k).and_then(Value::as_str))
            .unwrap_or("");
        let (kind, opens) = match t {
            "TEXT_MESSAGE_START" => ("text", true),
            "TEXT_MESSAGE_END" => ("text", false),
            "REASONING_START" => ("reasoning", true),
            "REASONING_END" => ("reasoning", false),
            "TOOL_CALL_START" => ("tool", true),
            "TOOL_CALL_END" => ("tool", false),
            "STEP_STARTED" => ("step", true),
            "STEP_FINISHED" => ("step", false),
            "RUN_FINISHED" | "RUN_ERROR" if open.is_empty() => return Ok(()),
            "RUN_FINISHED" | "RUN_ERROR" => return Err(format!("open at {t}: {open:?}")),
            _ => continue,
        };
        if opens {
            open.push((kind, id));
        } else if let Some(i) = open.iter().position(|o| *o == (kind, id)) {
            open.remove(i);
        } else {
            return Err(format!("{t} without a start: {e}"));
        }
    }
    Err("the run never ended".into())
}
