//! Pipeline events (`metadata.iac_code.pipeline`, `pipelineBatch`, the recovery state): each
//! envelope de-duplicated, then mapped by its kind to text, reasoning, tools, usage or steps, and
//! sent on as an `iac-code.pipeline.v1` CUSTOM event when the spec lists its type.

use super::out::{Custom, Out};
use super::tools::ToolUpdate;
use super::Projection;
use crate::a2a::frame::{Field, Iac, LStr};
use crate::a2a::{Coord, Envelope};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

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
    /// The event ids seen, as 64-bit hashes: no string kept per event (two ids would collide
    /// only after about 2^32 events in one run).
    seen_ids: HashSet<u64>,
    hasher: RandomState,
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
            ..Dedup::default()
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
    fn admit(&mut self, event_type: &str, envelope: &Envelope) -> bool {
        let sequence = envelope.sequence.0.map(|s| s as u64);
        let id = envelope.event_id.get();
        if let Some(seq) = sequence {
            if seq <= self.sequence && !(self.recovering && id.is_some()) {
                log::debug!("pipeline event {event_type} seq {seq} replayed; skipped");
                return false;
            }
        }
        if let Some(id) = id {
            if !self.seen_ids.insert(self.hasher.hash_one(id)) {
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
    /// envelope's JSON as the kernel sent it), the pipeline's end.
    pub(super) fn on_pipeline(&mut self, envelope: &Envelope, raw: &RawValue, out: &mut Out) {
        let event_type = envelope.event_type.get().unwrap_or("");
        if !self.dedup.admit(event_type, envelope) {
            return;
        }
        self.announce(out);
        let kind = Kind::of(event_type);
        match kind {
            Kind::Text => {
                let data = envelope.delta();
                if let Some(text) = non_empty(&data.text) {
                    let mut id = std::mem::take(&mut self.scratch_id);
                    id.clear();
                    pipeline_message_id(&mut id, envelope, &self.pipeline_run_id);
                    self.pipeline_text(&id, text, out);
                    self.scratch_id = id;
                }
            }
            Kind::Thinking => {
                // The kernel's `thinking_delta` data is `{type: "raw_thinking", text}`.
                let data = envelope.delta();
                let raw_thinking = data.kind.get() == Some("raw_thinking");
                if let Some(text) = non_empty(&data.text).filter(|_| raw_thinking) {
                    let mut id = std::mem::take(&mut self.scratch_id);
                    id.clear();
                    id.push_str("reasoning-");
                    pipeline_message_id(&mut id, envelope, &self.pipeline_run_id);
                    self.spans.reasoning(&id, text, out);
                    self.scratch_id = id;
                }
            }
            Kind::ToolStarted => {
                if let Some(update) = ToolUpdate::pipeline_started(&envelope.data_value()) {
                    self.tool(update, out);
                }
            }
            Kind::ToolResult => {
                if let Some(update) = ToolUpdate::pipeline_result(&envelope.data_value()) {
                    self.tool(update, out);
                }
            }
            Kind::Usage => self.usage.add(&envelope.data_value()),
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
            out.custom_raw(Custom::Pipeline, raw);
        }
        let ends = Kind::Custom {
            ends_pipeline: true,
        };
        if kind == ends || kind == Kind::PipelineEnded {
            self.steps.end_running(out);
        }
    }

    /// An envelope as a `Value` (the kernel's pipeline state, or one the view refused, such as
    /// one with a repeated key): viewed from its JSON.
    pub(super) fn on_pipeline_value(&mut self, envelope: &Value, out: &mut Out) {
        let Ok(raw) = serde_json::value::to_raw_value(envelope) else {
            return;
        };
        if let Some(view) = Envelope::of(&raw) {
            self.on_pipeline(&view, &raw, out);
        }
    }
}

/// The envelopes an item's `metadata.iac_code` carries, viewed once per item, each with its
/// JSON as it came: its batch first, then the single one. An envelope the view refuses is kept
/// raw and read as a `Value`.
#[derive(Default)]
pub(super) struct Envelopes<'a> {
    batch: Vec<(Option<Envelope<'a>>, &'a RawValue)>,
    single: Option<(Option<Envelope<'a>>, &'a RawValue)>,
}

impl<'a> Envelopes<'a> {
    pub(super) fn of(iac: &Iac<'a>) -> Envelopes<'a> {
        let view = |raw: &'a RawValue| (Envelope::of(raw), raw);
        let batch = iac
            .batch_raw
            .and_then(|b| serde_json::from_str::<Field<RawBatch>>(b.get()).ok())
            .and_then(|b| match b {
                Field::Obj(b) => Some(b.events),
                _ => None,
            })
            .unwrap_or_default();
        let single = iac.pipeline_raw.filter(|r| r.get().starts_with('{'));
        Envelopes {
            batch: batch.into_iter().map(view).collect(),
            single: single.map(view),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(Option<Envelope<'a>>, &'a RawValue)> {
        self.batch.iter().chain(&self.single)
    }

    /// The single envelope's session id, and the first one in the batch.
    pub(super) fn session_ids(&self) -> (Option<&str>, Option<&str>) {
        fn of<'s>(e: &'s (Option<Envelope>, &RawValue)) -> Option<&'s str> {
            e.0.as_ref()?.session_id.get()
        }
        (
            self.single.as_ref().and_then(of),
            self.batch.iter().find_map(of),
        )
    }
}

impl Projection {
    /// Every envelope of an item, in order.
    pub(super) fn on_envelopes(&mut self, envelopes: &Envelopes, out: &mut Out) {
        for (view, raw) in envelopes.iter() {
            match view {
                Some(view) => self.on_pipeline(view, raw, out),
                None => {
                    let value: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                    self.on_pipeline_value(&value, out);
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct RawBatch<'a> {
    #[serde(borrow, default)]
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

/// A string field that is present and not empty.
fn non_empty<'s>(s: &'s LStr) -> Option<&'s str> {
    s.get().filter(|s| !s.is_empty())
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
pub(super) fn pipeline_message_id(id: &mut String, envelope: &Envelope, pipeline_run_id: &str) {
    let scope = non_empty(&envelope.scope).unwrap_or("pipeline");
    let mut coordinates: [&str; 3] = [""; 3];
    let mut n = 0;
    for c in [
        &envelope.candidate,
        &envelope.candidate_step,
        &envelope.step,
    ] {
        let c = c.obj();
        let found = c.and_then(|c| non_empty(&c.run_id).or_else(|| non_empty(&c.id)));
        if let Some(found) = found.filter(|f| !coordinates[..n].contains(f)) {
            coordinates[n] = found;
            n += 1;
        }
    }
    id.push_str("pipeline-message:");
    id.push_str(pipeline_run_id);
    id.push(':');
    id.push_str(scope);
    for c in &coordinates[..n] {
        id.push(':');
        id.push_str(c);
    }
}

/// `step:<id>`, or `candidate:<candidate>:<id>` inside a candidate (the candidate's `id`, else
/// `subPipelineId`, else `runId`); the step is `candidateStep`, else `step` (the reference's
/// `_pipeline_step_key`).
pub(super) fn step_key(envelope: &Envelope) -> Option<String> {
    let step = match &envelope.candidate_step {
        Field::Obj(step) => Some(step),
        _ => envelope.step.obj(),
    };
    let step = step.and_then(|s| non_empty(&s.id))?;
    let candidate = envelope.candidate.obj().and_then(|c: &Coord| {
        non_empty(&c.id)
            .or_else(|| non_empty(&c.sub_pipeline_id))
            .or_else(|| non_empty(&c.run_id))
    });
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
