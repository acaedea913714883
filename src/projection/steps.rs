//! Pipeline steps as `STEP_STARTED`/`STEP_FINISHED` spans. Two sets: the steps the pipeline is
//! running (they outlive a run when it ends in an interrupt: `Durable::open_steps`), and the step
//! spans open on this run's stream (a resumed run re-opens the running ones).

use super::out::Out;
use crate::events::EventType;
use serde_json::json;
use std::collections::BTreeSet;

/// The AG-UI `stepName` of a step key: the bare step id for a pipeline step
/// (`step:intent_parsing` → `intent_parsing`), the whole key inside a candidate
/// (`candidate:<id>:template_generating`, unique across parallel candidates) — the reference's
/// `_pipeline_step_name`.
fn name(key: &str) -> &str {
    key.strip_prefix("step:").unwrap_or(key)
}

#[derive(Default)]
pub(super) struct Steps {
    /// Started and not completed, as far as the pipeline is concerned; persisted.
    running: BTreeSet<String>,
    /// `STEP_STARTED` sent on this stream and not yet finished, in start order.
    open: Vec<String>,
}

impl Steps {
    /// Continues the steps an earlier run left running.
    pub(super) fn resumed(running: BTreeSet<String>) -> Steps {
        Steps {
            running,
            open: Vec::new(),
        }
    }

    /// The running steps, to persist.
    pub(super) fn running(&self) -> &BTreeSet<String> {
        &self.running
    }

    /// Opens a span for each running step (the start of a resumed run).
    pub(super) fn reopen_running(&mut self, out: &mut Out) {
        let running: Vec<String> = self.running.iter().cloned().collect();
        for key in running {
            self.open_span(&key, out);
        }
    }

    /// A step started.
    pub(super) fn start(&mut self, key: &str, out: &mut Out) {
        self.running.insert(key.to_string());
        self.open_span(key, out);
    }

    /// A step completed or failed. One this run never opened gets a zero-length pair, never an
    /// orphan `STEP_FINISHED`.
    pub(super) fn end(&mut self, key: &str, out: &mut Out) {
        self.running.remove(key);
        if !self.open.iter().any(|s| s == key) {
            out.push(EventType::StepStarted, json!({"stepName": name(key)}));
            self.open.push(key.to_string());
        }
        self.close_span(key, out);
    }

    /// The pipeline ended: none of its steps runs any more.
    pub(super) fn end_running(&mut self, out: &mut Out) {
        for key in std::mem::take(&mut self.running) {
            self.close_span(&key, out);
        }
    }

    /// Closes every open span in key order, as the reference's `close_all` (the run's end). The
    /// running steps stay.
    pub(super) fn close_spans(&mut self, out: &mut Out) {
        let mut open = std::mem::take(&mut self.open);
        open.sort();
        for key in open {
            out.push(EventType::StepFinished, json!({"stepName": name(&key)}));
        }
    }

    /// Forgets the running steps: only an interrupt keeps them alive for the next run.
    pub(super) fn forget_running(&mut self) {
        self.running.clear();
    }

    /// `STEP_STARTED`, unless the span is already open.
    fn open_span(&mut self, key: &str, out: &mut Out) {
        if self.open.iter().any(|s| s == key) {
            return;
        }
        out.push(EventType::StepStarted, json!({"stepName": name(key)}));
        self.open.push(key.to_string());
    }

    /// `STEP_FINISHED`, only for an open span.
    fn close_span(&mut self, key: &str, out: &mut Out) {
        if let Some(pos) = self.open.iter().position(|s| s == key) {
            self.open.remove(pos);
            out.push(EventType::StepFinished, json!({"stepName": name(key)}));
        }
    }
}
