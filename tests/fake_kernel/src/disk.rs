//! What the fake keeps on disk when asked to (`--persist FILE`), as the real kernel keeps its A2A
//! state under its config dir: each context's session and every task waiting on an input (with
//! the scenario it came from). A fake started again on the same file — a pair moved to another
//! host with its volume (tests/pairs/hostloss.sh) — keeps the threads' sessions and takes the
//! answer to a wait the previous process raised. Only a scenario's own `Step::Input` waits are
//! kept (not side waits, not gated or overridden scripts); everything else stays in memory.

use crate::scenarios::scenario;
use crate::script::Step;
use crate::{Continuation, State, Task};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Writes the file (atomic replace) when the fake persists; a no-op otherwise.
pub(crate) fn save(state: &State) {
    let Some(file) = &state.persist else { return };
    // One writer at a time: concurrent saves share the temporary file.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _writing = WRITING.lock().unwrap();
    let sessions = state.sessions.lock().unwrap().clone();
    let waits: Vec<Value> = state
        .tasks
        .lock()
        .unwrap()
        .values()
        .filter(|t| t.state == "TASK_STATE_INPUT_REQUIRED" && t.input.is_some())
        .map(
            |t| json!({"id": t.id, "context": t.context, "scenario": t.scenario, "input": t.input}),
        )
        .collect();
    let doc = json!({"counter": state.counter.load(Ordering::SeqCst), "sessions": sessions, "waits": waits});
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).expect("write the fake kernel's state");
    std::fs::rename(&tmp, file).expect("replace the fake kernel's state");
}

/// Reads the file back into a fresh state: sessions, the id counter, the waiting tasks (their
/// continuation rebuilt from their scenario).
pub(crate) fn load(state: &mut State) {
    let Some(file) = &state.persist else { return };
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    let doc: Value = serde_json::from_str(&text).expect("the fake kernel's state is JSON");
    state.counter = doc["counter"].as_u64().unwrap_or(0).into();
    let sessions = doc["sessions"].as_object().cloned().unwrap_or_default();
    *state.sessions.get_mut().unwrap() = sessions
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_string()))
        .collect();
    let tasks = state.tasks.get_mut().unwrap();
    for w in doc["waits"].as_array().cloned().unwrap_or_default() {
        let name = w["scenario"].as_str().unwrap_or_default().to_string();
        let Some(continuation) = scenario(&name).and_then(|s| first_wait(&s)) else {
            continue;
        };
        let id = w["id"].as_str().unwrap_or_default().to_string();
        tasks.insert(
            id.clone(),
            Task {
                id,
                context: w["context"].as_str().unwrap_or_default().to_string(),
                scenario: name,
                state: "TASK_STATE_INPUT_REQUIRED".into(),
                input: Some(w["input"].clone()),
                side: Vec::new(),
                continuation: Some(continuation),
                cancelled: Arc::new(AtomicBool::new(false)),
                pipeline: Vec::new(),
                log: Arc::default(),
                cancel_at: None,
            },
        );
    }
}

/// The continuation of a script's first input wait.
fn first_wait(script: &[Step]) -> Option<Continuation> {
    script.iter().find_map(|s| match s {
        Step::Input {
            allow,
            deny,
            answer,
            ..
        } => Some(Continuation {
            allow: allow.clone(),
            deny: deny.clone(),
            answer: answer.clone(),
        }),
        _ => None,
    })
}
