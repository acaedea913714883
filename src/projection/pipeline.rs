//! Pipeline events (`metadata.iac_code.pipeline`, `pipelineBatch`, the recovery state): each
//! envelope de-duplicated, then mapped by its kind to text, reasoning, tools, usage or steps, and
//! sent on as an `iac-code.pipeline.v1` CUSTOM event when the spec lists its type.

use super::events::{Custom, Out};
use super::tools::ToolUpdate;
use super::{Projection, NULL};
use crate::a2a::incoming;
use serde_json::{json, Value};
use std::collections::HashSet;

/// What the projection does with a pipeline `eventType`: the one list of the types it handles.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// `text_delta`: text of the step's own message.
    Text,
    /// `thinking_delta`: reasoning of the step.
    Thinking,
    /// `tool_started`: a tool call with its whole input.
    ToolStarted,
    /// `tool_result`.
    ToolResult,
    /// `usage`: summed into the run's usage.
    Usage,
    /// A step starts (`input_received` too: the step waits for the user).
    StepStarted,
    /// A step ends; its failures (`custom`) also travel as CUSTOM.
    StepEnded { custom: bool },
    /// Travels as CUSTOM only; the pipeline's own end also closes its running steps.
    Custom { ends_pipeline: bool },
    /// Not in the allow-list: dropped.
    Unknown,
}

impl Kind {
    /// The CUSTOM types are exactly the spec's list: the `Custom` arms and the two step failures.
    fn of(event_type: &str) -> Kind {
        match event_type {
            "text_delta" => Kind::Text,
            "thinking_delta" => Kind::Thinking,
            "tool_started" => Kind::ToolStarted,
            "tool_result" => Kind::ToolResult,
            "usage" => Kind::Usage,
            "step_started" | "candidate_step_started" | "input_received" => Kind::StepStarted,
            "step_completed" | "candidate_step_completed" => Kind::StepEnded { custom: false },
            "step_failed" | "candidate_step_failed" => Kind::StepEnded { custom: true },
            "pipeline_completed" | "pipeline_error" => Kind::Custom {
                ends_pipeline: true,
            },
            "pipeline_started"
            | "pipeline_resumed"
            | "pipeline_warning"
            | "backup_blocked"
            | "candidate_started"
            | "candidate_completed"
            | "candidate_failed"
            | "candidate_interrupted"
            | "candidate_restart_requested"
            | "candidate_selected"
            | "candidate_detail_shown"
            | "sub_pipeline_started"
            | "sub_pipeline_completed"
            | "sub_step_failed"
            | "stack_progress"
            | "stack_instances_progress"
            | "stack_current_changed"
            | "cleanup_started"
            | "cleanup_progress"
            | "cleanup_completed"
            | "cleanup_failed"
            | "rollback_triggered"
            | "rollback_completed"
            | "context_compaction_started"
            | "context_compacted"
            | "context_compaction_failed"
            | "fields_marked_stale"
            | "diagram_shown"
            | "mcp_status"
            | "tool_progress" => Kind::Custom {
                ends_pipeline: false,
            },
            _ => Kind::Unknown,
        }
    }

    fn travels_as_custom(self) -> bool {
        matches!(self, Kind::Custom { .. } | Kind::StepEnded { custom: true })
    }
}

/// Drops replayed envelopes: by sequence (persisted across runs) and by event id (this run).
#[derive(Default)]
pub(super) struct Dedup {
    /// The highest sequence projected (`Durable::pipeline_sequence`).
    sequence: u64,
    seen_ids: HashSet<String>,
}

impl Dedup {
    /// Continues after the sequence an earlier run reached.
    pub(super) fn after(sequence: u64) -> Dedup {
        Dedup {
            sequence,
            seen_ids: HashSet::new(),
        }
    }

    /// The highest sequence projected, to persist.
    pub(super) fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether the envelope is new; a new one advances the sequence.
    fn admit(&mut self, event_type: &str, envelope: &Value) -> bool {
        let sequence = envelope
            .get("sequence")
            .and_then(Value::as_f64)
            .map(|s| s as u64);
        if let Some(seq) = sequence {
            if seq <= self.sequence {
                log::debug!("pipeline event {event_type} seq {seq} replayed; skipped");
                return false;
            }
        }
        if let Some(id) = envelope.get("eventId").and_then(Value::as_str) {
            if !self.seen_ids.insert(id.to_string()) {
                log::debug!("pipeline event {id} replayed; skipped");
                return false;
            }
        }
        if let Some(seq) = sequence {
            self.sequence = seq;
        }
        true
    }
}

impl Projection {
    /// One pipeline envelope, in this order: its mapping, its CUSTOM event, the pipeline's end.
    pub(super) fn on_pipeline(&mut self, envelope: &Value, out: &mut Out) {
        let event_type = envelope
            .get("eventType")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !self.dedup.admit(event_type, envelope) {
            return;
        }
        self.announce(out);
        let kind = Kind::of(event_type);
        let data = envelope.get("data").unwrap_or(&NULL);
        match kind {
            Kind::Text => {
                if let Some(text) = delta_text(data) {
                    self.pipeline_text(&pipeline_message_id(envelope), text, out);
                }
            }
            Kind::Thinking => {
                if let Some(text) = delta_text(data) {
                    let id = format!("reasoning-{}", pipeline_message_id(envelope));
                    self.spans.reasoning(&id, text, out);
                }
            }
            Kind::ToolStarted => {
                if let Some(update) = ToolUpdate::pipeline_started(data) {
                    self.tool(update, out);
                }
            }
            Kind::ToolResult => {
                if let Some(update) = ToolUpdate::pipeline_result(data) {
                    self.tool(update, out);
                }
            }
            Kind::Usage => self.usage.add(data),
            Kind::StepStarted => {
                if let Some(key) = step_key(envelope) {
                    self.steps.start(&key, out);
                }
            }
            Kind::StepEnded { .. } => {
                if let Some(key) = step_key(envelope) {
                    self.steps.end(&key, out);
                }
            }
            Kind::Custom { .. } => {}
            Kind::Unknown => {
                log::debug!("pipeline event type {event_type:?} is not in the allow-list; dropped");
            }
        }
        if kind.travels_as_custom() {
            out.custom(Custom::Pipeline, envelope.clone());
        }
        if kind
            == (Kind::Custom {
                ends_pipeline: true,
            })
        {
            self.steps.end_running(out);
        }
    }
}

/// The envelopes an item's `metadata.iac_code` carries: its batch first, then the single one.
pub(super) fn envelopes(iac: &Value) -> impl Iterator<Item = &Value> {
    let batch = iac
        .get(incoming::PIPELINE_BATCH)
        .and_then(|b| b.get("events"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    batch.chain(iac.get(incoming::PIPELINE).filter(|v| v.is_object()))
}

/// The fields of the `ACTIVITY_SNAPSHOT` for the kernel's pipeline state, if it has a snapshot.
pub(super) fn snapshot(state: &Value) -> Option<Value> {
    let snapshot = state.get("snapshot").filter(|s| s.is_object())?;
    let run = snapshot
        .get("pipelineRunId")
        .and_then(Value::as_str)
        .unwrap_or("pipeline");
    let mut content = json!({"schemaVersion": 1, "pipelineRunId": run, "snapshot": snapshot});
    if let Some(last) = snapshot.get("lastSequence") {
        content["lastSequence"] = last.clone();
    }
    Some(
        json!({"messageId": format!("pipeline:{run}"), "activityType": Custom::Pipeline.as_str(),
                "content": content, "replace": true}),
    )
}

/// The non-empty `data.text` of a delta.
fn delta_text(data: &Value) -> Option<&str> {
    data.get("text")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
}

/// A coordinate of the envelope: the string itself, or the first of `keys` that is a non-empty
/// string or a number.
fn coord(v: Option<&Value>, keys: &[&str]) -> Option<String> {
    let v = v?;
    if let Some(s) = v.as_str() {
        return Some(s.to_string());
    }
    keys.iter().find_map(|k| match v.get(*k)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// `pipeline-message:<pipelineRunId>:<scope>[:<candidate>][:<step>]`: parallel sub-pipelines never
/// share a message.
fn pipeline_message_id(envelope: &Value) -> String {
    let run = coord(Some(envelope), &["pipelineRunId"])
        .or_else(|| coord(envelope.get("data"), &["pipelineRunId"]))
        .unwrap_or_else(|| "pipeline".into());
    let scope =
        coord(envelope.get("scope"), &["kind", "type", "id"]).unwrap_or_else(|| "pipeline".into());
    let mut id = format!("pipeline-message:{run}:{scope}");
    if let Some(c) = coord(envelope.get("candidate"), &["runId", "id", "subPipelineId"])
        .or_else(|| coord(envelope.get("subPipelineId"), &[]))
    {
        id.push(':');
        id.push_str(&c);
    }
    if let Some(s) = coord(envelope.get("candidateStep"), &["runId", "id"]) {
        id.push(':');
        id.push_str(&s);
    }
    id
}

/// `step:<id>`, or `candidate:<candidate>:<step>` inside a candidate.
fn step_key(envelope: &Value) -> Option<String> {
    let data = envelope.get("data");
    let step = coord(envelope.get("candidateStep"), &["id", "stepId", "name"])
        .or_else(|| coord(envelope.get("step"), &["id", "stepId", "name"]))
        .or_else(|| coord(data, &["stepId", "step"]))?;
    let candidate = coord(envelope.get("candidate"), &["id", "subPipelineId", "runId"])
        .or_else(|| coord(envelope.get("subPipelineId"), &[]));
    Some(match candidate {
        Some(c) => format!("candidate:{c}:{step}"),
        None => format!("step:{step}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's `iac-code.pipeline.v1` list, checked against [`Kind::of`].
    const SPEC_CUSTOM_TYPES: [&str; 34] = [
        "pipeline_started",
        "pipeline_resumed",
        "pipeline_completed",
        "pipeline_error",
        "pipeline_warning",
        "backup_blocked",
        "candidate_started",
        "candidate_completed",
        "candidate_failed",
        "candidate_interrupted",
        "candidate_restart_requested",
        "candidate_selected",
        "candidate_detail_shown",
        "candidate_step_failed",
        "sub_pipeline_started",
        "sub_pipeline_completed",
        "sub_step_failed",
        "step_failed",
        "stack_progress",
        "stack_instances_progress",
        "stack_current_changed",
        "cleanup_started",
        "cleanup_progress",
        "cleanup_completed",
        "cleanup_failed",
        "rollback_triggered",
        "rollback_completed",
        "context_compaction_started",
        "context_compacted",
        "context_compaction_failed",
        "fields_marked_stale",
        "diagram_shown",
        "mcp_status",
        "tool_progress",
    ];

    #[test]
    fn exactly_the_spec_list_travels_as_custom() {
        for t in SPEC_CUSTOM_TYPES {
            assert!(Kind::of(t).travels_as_custom(), "{t}");
        }
        for t in [
            "text_delta",
            "step_completed",
            "input_received",
            "usage",
            "backup_committed",
        ] {
            assert!(!Kind::of(t).travels_as_custom(), "{t}");
        }
    }
}
