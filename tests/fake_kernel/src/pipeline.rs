//! The `/iac-code/pipeline/state` extension: streamed pipeline envelopes are also kept, as the
//! kernel keeps them for recovery, and served after a sequence number.

use crate::http::respond;
use crate::play::{subst, Vars};
use crate::State;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::TcpStream;

/// Streamed pipeline envelopes are also kept, as the kernel keeps them for recovery.
pub(crate) fn log_streamed(state: &State, vars: &Vars, item: &Value) {
    let iac = item.pointer("/statusUpdate/metadata/iac_code");
    let single = iac.and_then(|i| i.get("pipeline")).into_iter();
    let batch = iac
        .and_then(|i| i.pointer("/pipelineBatch/events"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let mut tasks = state.tasks.lock().unwrap();
    if let Some(t) = tasks.get_mut(&vars.task) {
        for ev in batch.chain(single) {
            // A float on the A2A wire, an integer in the kernel's pipeline state.
            let seq = ev["sequence"].as_f64().map(|s| s as u64);
            if !t.pipeline.iter().any(|e| e["sequence"].as_u64() == seq) {
                t.pipeline.push(kept(ev, vars));
            }
        }
    }
}

/// An envelope as the kernel keeps it for recovery: its sequence an integer.
pub(crate) fn kept(ev: &Value, vars: &Vars) -> Value {
    let mut kept = subst(ev, vars);
    if let Some(seq) = ev["sequence"].as_f64() {
        kept["sequence"] = json!(seq as u64);
    }
    kept
}

pub(crate) fn serve_state(state: &State, conn: &TcpStream, query: &str) -> std::io::Result<()> {
    let q: HashMap<&str, &str> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let tasks = state.tasks.lock().unwrap();
    let Some(t) = q.get("taskId").and_then(|id| tasks.get(*id)) else {
        return respond(conn, 404, &json!({"error": "A2A pipeline state not found"}));
    };
    if t.pipeline.is_empty() {
        return respond(conn, 404, &json!({"error": "A2A pipeline state not found"}));
    }
    let after: u64 = q
        .get("afterSequence")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let last = t
        .pipeline
        .iter()
        .filter_map(|e| e["sequence"].as_u64())
        .max()
        .unwrap_or(0);
    let events: Vec<Value> = t
        .pipeline
        .iter()
        .filter(|e| e["sequence"].as_u64().unwrap_or(0) > after)
        .cloned()
        .collect();
    let snapshot = json!({"schemaVersion": 1, "pipelineRunId": "pr-1", "taskId": t.id, "contextId": t.context,
        "status": "waiting_input", "lastSequence": last, "steps": []});
    respond(conn, 200, &json!({"snapshot": snapshot, "events": events}))
}
