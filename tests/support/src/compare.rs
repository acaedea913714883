//! Two runs of one script compared event by event, without what legitimately differs.

use serde_json::{json, Value};

/// AG-UI events with what legitimately differs between two runs removed: timestamps, thread/run
/// ids, the ids inside the session event, and `task` (the A2A task id) inside message ids, so two
/// streams compare event by event.
pub fn without_ids(events: &[Value], task: &str) -> Vec<Value> {
    events
        .iter()
        .map(|e| {
            let mut e = e.clone();
            let o = e.as_object_mut().unwrap();
            o.remove("timestamp");
            for k in ["threadId", "runId"] {
                if o.contains_key(k) {
                    o.insert(k.into(), json!("$id"));
                }
            }
            if let Some(v) = o.get_mut("value").and_then(Value::as_object_mut) {
                for k in [
                    "threadId",
                    "aguiRunId",
                    "executionId",
                    "contextId",
                    "taskId",
                    "sessionId",
                ] {
                    if v.contains_key(k) {
                        v.insert(k.into(), json!("$id"));
                    }
                }
            }
            if let Some(Value::String(m)) = o.get("messageId") {
                if !task.is_empty() {
                    let m = m.replace(task, "$TASK");
                    o.insert("messageId".into(), json!(m));
                }
            }
            e
        })
        .collect()
}
