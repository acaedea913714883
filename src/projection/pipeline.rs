//! Pipeline events (`metadata.iac_code.pipeline`, `pipelineBatch`, the recovery state): each
//! envelope de-duplicated, then mapped by its kind to text, reasoning, tools, usage or steps, and
//! sent on as an `iac-code.pipeline.v1` CUSTOM event when the spec lists its type.

use super::events::{Custom, Out};
use super::tools::ToolUpdate;
use super::{Projection, NULL};
use crate::a2a::incoming;
use crate::frame::Iac;
use serde_json::value::RawValue;
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
    /// The kernel's failed or cancelled end of a pipeline (`pipeline_failed`,
    /// `pipeline_canceled`: `iac_code/a2a/pipeline_executor.py`; the spec's `pipeline_error` is
    /// never sent): not in the CUSTOM list, but it closes every running step.
    PipelineEnded,
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
            "pipeline_failed" | "pipeline_canceled" => Kind::PipelineEnded,
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
    /// Projecting `/iac-code/pipeline/state` events: they are admitted by event id alone (the
    /// reference's `map_pipeline_recovery`), since events of the gap being recovered can sit
    /// below sequences this run already saw live.
    pub(super) recovering: bool,
}

impl Dedup {
    /// Continues after the sequence an earlier run reached.
    pub(super) fn after(sequence: u64) -> Dedup {
        Dedup {
            sequence,
            seen_ids: HashSet::new(),
            recovering: false,
        }
    }

    /// The highest sequence projected, to persist.
    pub(super) fn sequence(&self) -> u64 {
        self.sequence
    }

    /// A recovery snapshot covers the pipeline up to its `lastSequence`: the cursor moves there
    /// even when no listed event reached it (the reference's `map_pipeline_recovery`).
    pub(super) fn covered(&mut self, last_sequence: u64) {
        self.sequence = self.sequence.max(last_sequence);
    }

    /// Whether the envelope is new; a new one advances the sequence.
    fn admit(&mut self, event_type: &str, envelope: &Value) -> bool {
        let sequence = envelope
            .get("sequence")
            .and_then(Value::as_f64)
            .map(|s| s as u64);
        let id = envelope.get("eventId").and_then(Value::as_str);
        if let Some(seq) = sequence {
            if seq <= self.sequence && !(self.recovering && id.is_some()) {
                log::debug!("pipeline event {event_type} seq {seq} replayed; skipped");
                return false;
            }
        }
        if let Some(id) = id {
            if !self.seen_ids.insert(id.to_string()) {
                log::debug!("pipeline event {id} replayed; skipped");
                return false;
            }
        }
        if let Some(seq) = sequence {
            self.sequence = self.sequence.max(seq);
        }
        true
    }
}

impl Projection {
    /// One pipeline envelope, in this order: its mapping, its CUSTOM event (`raw`, the
    /// envelope's JSON as the kernel sent it, when the frame has it), the pipeline's end.
    pub(super) fn on_pipeline(&mut self, envelope: &Value, raw: Option<&RawValue>, out: &mut Out) {
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
                    let id = pipeline_message_id(envelope, &self.pipeline_run_id);
                    self.pipeline_text(&id, text, out);
                }
            }
            Kind::Thinking => {
                // The kernel's `thinking_delta` data is `{type: "raw_thinking", text}`.
                let raw = data.get("type").and_then(Value::as_str) == Some("raw_thinking");
                if let Some(text) = delta_text(data).filter(|_| raw) {
                    let id = pipeline_message_id(envelope, &self.pipeline_run_id);
                    let id = format!("reasoning-{id}");
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
            Kind::Custom { .. } | Kind::PipelineEnded => {}
            Kind::Unknown => {
                log::debug!("pipeline event type {event_type:?} is not in the allow-list; dropped");
            }
        }
        if kind.travels_as_custom() {
            match raw {
                Some(raw) => out.custom_raw(Custom::Pipeline, raw),
                None => out.custom(Custom::Pipeline, envelope.clone()),
            }
        }
        let ends = Kind::Custom {
            ends_pipeline: true,
        };
        if kind == ends || kind == Kind::PipelineEnded {
            self.steps.end_running(out);
        }
    }
}

/// The envelopes an item's `metadata.iac_code` carries, each with its JSON as it came: its
/// batch first, then the single one.
pub(super) fn envelopes<'a>(
    iac: &'a Iac<'_>,
) -> impl Iterator<Item = (&'a Value, Option<&'a RawValue>)> {
    let batch = iac
        .rare
        .get(incoming::PIPELINE_BATCH)
        .and_then(|b| b.get("events"))
        .and_then(Value::as_array)
        .map(|events| {
            let raw = iac
                .batch_raw
                .and_then(|b| serde_json::from_str::<RawBatch>(b.get()).ok())
                .map(|b| b.events)
                .filter(|raw| raw.len() == events.len());
            let raw = raw.unwrap_or_default();
            let raw = raw.into_iter().map(Some).chain(std::iter::repeat(None));
            events.iter().zip(raw).collect::<Vec<_>>()
        });
    let single = iac.rare.get(incoming::PIPELINE).filter(|v| v.is_object());
    batch
        .into_iter()
        .flatten()
        .chain(single.map(|v| (v, iac.pipeline_raw)))
}

#[derive(serde::Deserialize)]
struct RawBatch<'a> {
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
}

/// The fields of the `ACTIVITY_SNAPSHOT` for the kernel's pipeline state, if it has a snapshot;
/// `run` is the projection's pipeline run id, which the snapshot's replaces.
pub(super) fn snapshot(state: &Value, run: &mut String) -> Option<Value> {
    let snapshot = state.get("snapshot").filter(|s| s.is_object())?;
    if let Some(id) = field(Some(snapshot), "pipelineRunId") {
        *run = id.to_string();
    }
    let run = run.as_str();
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

/// A non-empty string field of an envelope coordinate (`step`, `candidate`, `candidateStep`).
fn field<'a>(v: Option<&'a Value>, key: &str) -> Option<&'a str> {
    v?.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `pipeline-message:<pipelineRunId>:<scope>[:<coordinates>]`, as the reference builds it
/// (`iac_code/agui/events.py`, `_pipeline_message_id`): the `runId` (else `id`) of `candidate`,
/// `candidateStep` and `step`, in that order, without repeats. The kernel's coordinates
/// (`iac_code/a2a/pipeline_events.py`): a parent step `{id, runId: "step-<id>-<attempt>"}`, a
/// candidate `{id: <subPipelineId>, runId}`, a candidate step `{id, runId:
/// "<candidate runId>-<step>-<attempt>"}`; so a step's text is `…:step:step-intent_parsing-1`
/// and a candidate step's `…:candidate_step:<candidate>:<candidate step>:<parent step>`:
/// parallel candidates never share a message.
pub(super) fn pipeline_message_id(envelope: &Value, pipeline_run_id: &str) -> String {
    let scope = envelope
        .get("scope")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("pipeline");
    let mut coordinates: Vec<&str> = Vec::new();
    for key in ["candidate", "candidateStep", "step"] {
        let c = envelope.get(key).filter(|c| c.is_object());
        if let Some(id) = field(c, "runId").or_else(|| field(c, "id")) {
            if !coordinates.contains(&id) {
                coordinates.push(id);
            }
        }
    }
    let mut id = format!("pipeline-message:{pipeline_run_id}:{scope}");
    for c in coordinates {
        id.push(':');
        id.push_str(c);
    }
    id
}

/// `step:<id>`, or `candidate:<candidate>:<id>` inside a candidate (the candidate's `id`, else
/// `subPipelineId`, else `runId`); the step is `candidateStep`, else `step` (the reference's
/// `_pipeline_step_key`).
pub(super) fn step_key(envelope: &Value) -> Option<String> {
    let step = envelope
        .get("candidateStep")
        .filter(|s| s.is_object())
        .or_else(|| envelope.get("step"));
    let step = field(step, "id")?;
    let c = envelope.get("candidate").filter(|c| c.is_object());
    let candidate = field(c, "id")
        .or_else(|| field(c, "subPipelineId"))
        .or_else(|| field(c, "runId"));
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
