//! The projection from A2A task updates to AG-UI events: a pure state machine.
//!
//! [`Projection::on_item`] takes one JSON-RPC `result` of the A2A stream and appends the AG-UI events
//! it means to `out`; it never does I/O, so tests drive it with recorded streams. It reports when the
//! A2A task reached an end ([`End`]); the orchestrator then persists what must be durable and asks for
//! the closing events ([`Projection::finish`]), which close every open span (reasoning, tools, text,
//! steps, in that order) before `RUN_FINISHED` or `RUN_ERROR`.

use crate::error::{Code, Error, Lang};
use crate::interrupts;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The pipeline `eventType`s that travel as `iac-code.pipeline.v1` CUSTOM events: exactly the spec's
/// list. Anything else either has a standard mapping or is dropped.
pub const PIPELINE_CUSTOM_TYPES: &[&str] = &[
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

const STEP_OPENERS: &[&str] = &["step_started", "candidate_step_started", "input_received"];
const STEP_CLOSERS: &[&str] = &[
    "step_completed",
    "step_failed",
    "candidate_step_completed",
    "candidate_step_failed",
];

static NULL: Value = Value::Null;

/// The identities of one AG-UI run and its A2A execution.
#[derive(Debug, Clone, Default)]
pub struct RunIds {
    pub thread_id: String,
    pub run_id: String,
    pub parent_run_id: Option<String>,
    pub execution_id: String,
    pub context_id: String,
    pub ros_invocation_id: String,
}

/// Pipeline facts that outlive a run (persisted in the thread's state file).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durable {
    pub pipeline_sequence: u64,
    pub open_steps: BTreeSet<String>,
    pub text_digests: BTreeSet<String>,
}

/// How a run ends, the one type for it: [`Projection::on_item`] reports the A2A task's end, the run
/// persists what must be durable, and [`Projection::finish`] writes the end it was handed.
///
/// An interrupt's list changes form on the way: `on_item` reports the kernel's input waits (reduced
/// envelopes, see [`interrupts::inputs_of`]); `finish` takes the AG-UI interrupt objects the run
/// announces ([`End::announced`] converts one into the other).
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    Success,
    Interrupt(Vec<Value>),
    Failed(Error),
}

impl End {
    /// The error code a failed run ends with.
    pub fn code(&self) -> Option<Code> {
        match self {
            End::Failed(e) => Some(e.code),
            _ => None,
        }
    }

    /// The end as announced to the client: input waits become AG-UI interrupts that expire at
    /// `expires_at`, with texts in `lang`.
    pub fn announced(self, expires_at: &str, lang: Lang) -> End {
        match self {
            End::Interrupt(inputs) => End::Interrupt(
                inputs
                    .iter()
                    .map(|i| interrupts::to_interrupt(i, expires_at, lang))
                    .collect(),
            ),
            end => end,
        }
    }
}

#[derive(Default)]
struct Tool {
    ended: bool,
    result_sent: bool,
}

pub struct Projection {
    ids: RunIds,
    lang: Lang,
    clock: fn() -> u64,
    task_id: Option<String>,
    session_id: Option<String>,
    session_announced: bool,
    /// The open non-pipeline text message.
    text: Option<String>,
    /// Open pipeline messages (parallel sub-pipelines may stream at once).
    pipeline_texts: Vec<String>,
    /// A running SHA-256 of the text of each message of this run, for the replay digests (the
    /// text itself is never kept).
    texts: HashMap<String, Sha256>,
    text_emitted: bool,
    reasoning: Option<String>,
    tools: HashMap<String, Tool>,
    open_tools: Vec<String>,
    open_steps: Vec<String>,
    durable: Durable,
    seen_event_ids: HashSet<String>,
    usage: BTreeMap<(String, String), Map<String, Value>>,
    resumed: bool,
    replay_checked: HashSet<String>,
    got_reply_message: bool,
}

fn now_ms() -> u64 {
    crate::ids::now_ms()
}

impl Projection {
    /// A projection for a run; `task_id`/`session_id` are known for resumed runs.
    pub fn new(ids: RunIds, lang: Lang) -> Projection {
        Projection {
            ids,
            lang,
            clock: now_ms,
            task_id: None,
            session_id: None,
            session_announced: false,
            text: None,
            pipeline_texts: Vec::new(),
            texts: HashMap::new(),
            text_emitted: false,
            reasoning: None,
            tools: HashMap::new(),
            open_tools: Vec::new(),
            open_steps: Vec::new(),
            durable: Durable::default(),
            seen_event_ids: HashSet::new(),
            usage: BTreeMap::new(),
            resumed: false,
            replay_checked: HashSet::new(),
            got_reply_message: false,
        }
    }

    /// Fixes the clock (tests compare streams without timestamps, benches avoid the syscall).
    pub fn with_clock(mut self, clock: fn() -> u64) -> Projection {
        self.clock = clock;
        self
    }

    /// Continues an execution: its task, session and durable pipeline facts are known.
    pub fn resuming(
        mut self,
        task_id: &str,
        session_id: Option<&str>,
        durable: Durable,
    ) -> Projection {
        self.task_id = Some(task_id.to_string());
        self.session_id = session_id.map(String::from);
        self.durable = durable;
        self.resumed = true;
        self
    }

    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }

    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    pub fn ids(&self) -> &RunIds {
        &self.ids
    }

    /// Whether the A2A stream answered with a plain `message` (a complete, task-less reply).
    pub fn got_reply_message(&self) -> bool {
        self.got_reply_message
    }

    /// The durable facts to persist: open steps, sequence, digests of the text emitted so far.
    pub fn durable(&self) -> Durable {
        let mut d = self.durable.clone();
        for hasher in self.texts.values() {
            d.text_digests
                .insert(crate::ids::hex(&hasher.clone().finalize()));
        }
        d
    }

    fn event(&self, kind: &str, fields: Value) -> Value {
        let mut ev = match fields {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        ev.insert("type".into(), Value::String(kind.into()));
        ev.insert("timestamp".into(), json!((self.clock)()));
        Value::Object(ev)
    }

    fn custom(&self, name: &str, value: Value) -> Value {
        self.event("CUSTOM", json!({"name": name, "value": value}))
    }

    /// `RUN_STARTED`, then (for a resumed run) the session mapping and the durable steps re-opened.
    pub fn start(&mut self, out: &mut Vec<Value>) {
        let mut fields = json!({"threadId": self.ids.thread_id, "runId": self.ids.run_id});
        if let Some(parent) = &self.ids.parent_run_id {
            fields["parentRunId"] = json!(parent);
        }
        out.push(self.event("RUN_STARTED", fields));
        if self.task_id.is_some() {
            self.announce_session(out);
        }
        let durable: Vec<String> = self.durable.open_steps.iter().cloned().collect();
        for step in durable {
            self.open_step(&step, out);
        }
    }

    fn announce_session(&mut self, out: &mut Vec<Value>) {
        if self.session_announced {
            return;
        }
        self.session_announced = true;
        let value = json!({
            "schemaVersion": 1,
            "threadId": self.ids.thread_id,
            "aguiRunId": self.ids.run_id,
            "executionId": self.ids.execution_id,
            "contextId": self.ids.context_id,
            "taskId": self.task_id,
            "rosInvocationId": self.ids.ros_invocation_id,
            "sessionId": self.session_id,
        });
        out.push(self.custom("iac-code.session.v1", value));
    }

    /// Projects one JSON-RPC `result`. `Ok(Some(end))` when the task reached an end for this run.
    pub fn on_item(&mut self, result: &Value, out: &mut Vec<Value>) -> Result<Option<End>, Error> {
        let (kind, item) = ["task", "statusUpdate", "artifactUpdate", "message"]
            .iter()
            .find_map(|k| result.get(*k).map(|v| (*k, v)))
            .unwrap_or(("task", result));
        self.check_identity(kind, item)?;
        let iac = item.pointer("/metadata/iac_code").unwrap_or(&NULL);
        self.learn_session(iac);
        if self.session_id.is_some() && self.task_id.is_some() {
            self.announce_session(out);
        }
        match kind {
            "artifactUpdate" => {
                self.announce_session(out);
                if let Some(artifact) = item.get("artifact").and_then(Value::as_object) {
                    let mut value = Map::new();
                    value.insert("schemaVersion".into(), json!(1));
                    value.extend(artifact.clone());
                    out.push(self.custom("iac-code.artifact.v1", Value::Object(value)));
                }
                return Ok(None);
            }
            "message" => {
                self.got_reply_message = true;
                let text = message_text(item);
                if !text.is_empty() {
                    self.announce_session(out);
                    let id = item
                        .get("messageId")
                        .and_then(Value::as_str)
                        .unwrap_or("reply")
                        .to_string();
                    self.emit_text(&id, &text, out);
                }
                return Ok(None);
            }
            _ => {}
        }
        self.project_iac(iac, out);
        let status = item.get("status").unwrap_or(&NULL);
        if let Some(message) = status.get("message") {
            self.project_status_message(message, iac, out);
        }
        if kind == "task" && !self.text_emitted && status.get("message").is_none() {
            self.project_history_text(item, out);
        }
        let state = normalize_state(
            status
                .pointer("/state")
                .and_then(Value::as_str)
                .unwrap_or(""),
        );
        let end = match state.as_str() {
            "input-required" => {
                let inputs = interrupts::inputs_of(iac);
                for input in &inputs {
                    interrupts::check_envelope(input)?;
                }
                if inputs.is_empty() {
                    Some(End::Success)
                } else {
                    Some(End::Interrupt(inputs))
                }
            }
            "completed" => Some(End::Success),
            "canceled" | "cancelled" => Some(End::Failed(Error::cancelled())),
            "failed" | "rejected" | "auth-required" => {
                let detail = status
                    .get("message")
                    .map(message_text)
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| format!("the task ended in state `{state}`."));
                Some(End::Failed(Error::a2a_failed(&detail)))
            }
            _ => None,
        };
        if end.is_some() {
            self.announce_session(out);
        }
        Ok(end)
    }

    fn check_identity(&mut self, kind: &str, item: &Value) -> Result<(), Error> {
        let task = if kind == "task" {
            item.get("id").or_else(|| item.get("taskId"))
        } else {
            item.get("taskId")
        }
        .and_then(Value::as_str);
        if let Some(context) = item.get("contextId").and_then(Value::as_str) {
            if context != self.ids.context_id {
                return Err(Error::a2a_protocol(
                    "the A2A context id does not match the thread",
                ));
            }
        }
        match (task, &self.task_id) {
            (Some(t), Some(known)) if t != known => Err(Error::a2a_protocol(
                "the A2A task id does not match the execution",
            )),
            (Some(t), None) => {
                if !valid_a2a_id(t) {
                    return Err(Error::a2a_protocol("the A2A task id is malformed"));
                }
                self.task_id = Some(t.to_string());
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn learn_session(&mut self, iac: &Value) {
        let found = iac
            .get("iacCodeSessionId")
            .or_else(|| iac.pointer("/pipeline/iacCodeSessionId"))
            .and_then(Value::as_str)
            .or_else(|| {
                iac.pointer("/pipelineBatch/events")?
                    .as_array()?
                    .iter()
                    .find_map(|e| e.get("iacCodeSessionId")?.as_str())
            });
        if let Some(s) = found {
            if self.session_id.as_deref() != Some(s) {
                self.session_id = Some(s.to_string());
            }
        }
    }

    fn project_iac(&mut self, iac: &Value, out: &mut Vec<Value>) {
        if iac.is_null() {
            return;
        }
        if let Some(thinking) = iac.get("thinking") {
            if thinking.get("type").and_then(Value::as_str) == Some("raw_thinking") {
                if let Some(text) = thinking
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    let id = format!("reasoning-{}", self.ids.run_id);
                    self.announce_session(out);
                    self.emit_reasoning(&id, text, out);
                }
            }
        }
        if let Some(tool) = iac.get("tool") {
            self.announce_session(out);
            self.project_tool(tool, out);
        }
        if let Some(progress) = iac.get("mcpProgress").filter(|v| v.is_object()) {
            let mut value = json!({"schemaVersion": 1});
            merge(&mut value, progress);
            out.push(self.custom("iac-code.tool-progress.v1", value));
        }
        if let Some(events) = iac
            .pointer("/pipelineBatch/events")
            .and_then(Value::as_array)
        {
            for envelope in events {
                self.project_pipeline(envelope, out);
            }
        }
        if let Some(envelope) = iac.get("pipeline").filter(|v| v.is_object()) {
            self.project_pipeline(envelope, out);
        }
        if let Some(usage) = iac.get("usage") {
            self.add_usage(usage);
        }
    }

    fn project_status_message(&mut self, message: &Value, iac: &Value, out: &mut Vec<Value>) {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("ROLE_AGENT");
        if !matches!(role, "ROLE_AGENT" | "agent" | "") {
            return;
        }
        let text = message_text(message);
        if text.is_empty() {
            return;
        }
        // Debug builds only: lets the test suite prove a panicking run ends with RUN_ERROR.
        #[cfg(debug_assertions)]
        if text == "__iac_code_agui_test_panic__" {
            panic!("test panic requested by the upstream");
        }
        let final_repeat = iac.pointer("/assistantFinal/complete") == Some(&Value::Bool(true));
        if final_repeat && self.text_emitted {
            return;
        }
        let id = message
            .get("messageId")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| {
                format!(
                    "{}-message",
                    self.task_id.as_deref().unwrap_or(&self.ids.run_id)
                )
            });
        self.announce_session(out);
        self.emit_text(&id, &text, out);
    }

    /// A task snapshot with no streamed text yet: its trailing agent messages are the answer.
    fn project_history_text(&mut self, task: &Value, out: &mut Vec<Value>) {
        let Some(history) = task.get("history").and_then(Value::as_array) else {
            return;
        };
        let trailing: Vec<&Value> = history
            .iter()
            .rev()
            .take_while(|m| m.get("role").and_then(Value::as_str) != Some("ROLE_USER"))
            .collect();
        for m in trailing.into_iter().rev() {
            let text = message_text(m);
            if !text.is_empty() {
                let id = m
                    .get("messageId")
                    .and_then(Value::as_str)
                    .unwrap_or("history")
                    .to_string();
                self.announce_session(out);
                self.emit_text(&id, &text, out);
            }
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.reasoning.take() {
            out.push(self.event("REASONING_MESSAGE_END", json!({"messageId": id})));
            out.push(self.event("REASONING_END", json!({"messageId": id})));
        }
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.text.take() {
            out.push(self.event("TEXT_MESSAGE_END", json!({"messageId": id})));
        }
    }

    fn emit_reasoning(&mut self, id: &str, text: &str, out: &mut Vec<Value>) {
        if self.reasoning.as_deref() != Some(id) {
            self.close_reasoning(out);
            self.close_text(out);
            out.push(self.event("REASONING_START", json!({"messageId": id})));
            out.push(self.event(
                "REASONING_MESSAGE_START",
                json!({"messageId": id, "role": "reasoning"}),
            ));
            self.reasoning = Some(id.to_string());
        }
        out.push(self.event(
            "REASONING_MESSAGE_CONTENT",
            json!({"messageId": id, "delta": text}),
        ));
    }

    /// Text of a non-pipeline message: one message open at a time.
    fn emit_text(&mut self, id: &str, text: &str, out: &mut Vec<Value>) {
        let Some(text) = self.strip_replayed(id, text) else {
            return;
        };
        self.close_reasoning(out);
        if self.text.as_deref() != Some(id) {
            self.close_text(out);
            out.push(self.event(
                "TEXT_MESSAGE_START",
                json!({"messageId": id, "role": "assistant"}),
            ));
            self.text = Some(id.to_string());
        }
        self.push_content(id, text, out);
    }

    fn push_content(&mut self, id: &str, text: &str, out: &mut Vec<Value>) {
        self.text_emitted = true;
        match self.texts.get_mut(id) {
            Some(hasher) => hasher.update(text.as_bytes()),
            None => {
                self.texts
                    .insert(id.to_string(), Sha256::new_with_prefix(text.as_bytes()));
            }
        }
        out.push(self.event(
            "TEXT_MESSAGE_CONTENT",
            json!({"messageId": id, "delta": text}),
        ));
    }

    /// After a resume the kernel may replay a message from its start: the first text of each message
    /// loses the longest prefix whose digest an earlier run recorded.
    fn strip_replayed<'t>(&mut self, id: &str, text: &'t str) -> Option<&'t str> {
        if !self.resumed
            || self.durable.text_digests.is_empty()
            || !self.replay_checked.insert(id.to_string())
        {
            return Some(text);
        }
        let cut = longest_recorded_prefix(text, &self.durable.text_digests);
        match cut {
            Some(i) if i == text.len() => None,
            Some(i) => Some(&text[i..]),
            None => Some(text),
        }
    }

    fn project_tool(&mut self, tool: &Value, out: &mut Vec<Value>) {
        let Some(id) = tool
            .get("toolUseId")
            .and_then(Value::as_str)
            .map(String::from)
        else {
            return;
        };
        let status = tool.get("status").and_then(Value::as_str).unwrap_or("");
        match status {
            "started" => self.start_tool(&id, tool, out),
            "input_complete" => {
                self.start_tool(&id, tool, out);
                let args = match tool.get("toolInput") {
                    Some(input) if !input.is_null() => input.to_string(),
                    _ => json!({"summary": tool.get("inputSummary")}).to_string(),
                };
                self.tool_args_and_end(&id, args, out);
            }
            "completed" | "failed" => {
                let content = match tool.get("result").or_else(|| tool.get("error")) {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) if !v.is_null() => v.to_string(),
                    _ => status.to_string(),
                };
                self.tool_result(&id, content, out);
            }
            "progress" => {
                let mut value = json!({"schemaVersion": 1});
                merge(&mut value, tool);
                out.push(self.custom("iac-code.tool-progress.v1", value));
            }
            _ => {}
        }
    }

    fn start_tool(&mut self, id: &str, tool: &Value, out: &mut Vec<Value>) {
        if self.tools.contains_key(id) {
            return;
        }
        // Thinking ends where acting starts; overlapping spans only confuse renderers.
        self.close_reasoning(out);
        let name = tool
            .get("name")
            .or_else(|| tool.get("toolName"))
            .and_then(Value::as_str)
            .unwrap_or("tool");
        let mut fields = json!({"toolCallId": id, "toolCallName": name});
        if let Some(parent) = &self.text {
            fields["parentMessageId"] = json!(parent);
        }
        out.push(self.event("TOOL_CALL_START", fields));
        self.tools.insert(id.to_string(), Tool::default());
        self.open_tools.push(id.to_string());
    }

    fn tool_args_and_end(&mut self, id: &str, args: String, out: &mut Vec<Value>) {
        if self.tools.get(id).is_some_and(|t| t.ended) {
            return;
        }
        out.push(self.event("TOOL_CALL_ARGS", json!({"toolCallId": id, "delta": args})));
        self.end_tool(id, out);
    }

    fn end_tool(&mut self, id: &str, out: &mut Vec<Value>) {
        if let Some(t) = self.tools.get_mut(id) {
            if !t.ended {
                t.ended = true;
                self.open_tools.retain(|o| o != id);
                out.push(self.event("TOOL_CALL_END", json!({"toolCallId": id})));
            }
        }
    }

    fn tool_result(&mut self, id: &str, content: String, out: &mut Vec<Value>) {
        self.end_tool(id, out);
        let tool = self.tools.entry(id.to_string()).or_insert(Tool {
            ended: true,
            result_sent: false,
        });
        if tool.result_sent {
            return;
        }
        tool.result_sent = true;
        out.push(self.event(
            "TOOL_CALL_RESULT",
            json!({"messageId": format!("tool-result-{id}"), "toolCallId": id, "content": content, "role": "tool"}),
        ));
    }

    fn add_usage(&mut self, usage: &Value) {
        let Some(u) = usage.as_object() else { return };
        let label = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let entry = self
            .usage
            .entry((label("provider"), label("model")))
            .or_default();
        for key in [
            "inputTokens",
            "outputTokens",
            "totalTokens",
            "reasoningTokens",
            "cachedInputTokens",
            "cacheWriteInputTokens",
        ] {
            if let Some(n) = u
                .get(key)
                .and_then(Value::as_f64)
                .filter(|n| n.is_finite() && *n >= 0.0)
            {
                let sum = entry.get(key).and_then(Value::as_u64).unwrap_or(0) + n.round() as u64;
                entry.insert(key.into(), json!(sum));
            }
        }
    }

    fn usage_list(&self) -> Option<Value> {
        if self.usage.is_empty() {
            return None;
        }
        let list = self
            .usage
            .iter()
            .map(|((provider, model), counts)| {
                let mut v = Map::new();
                if !provider.is_empty() {
                    v.insert("provider".into(), json!(provider));
                }
                if !model.is_empty() {
                    v.insert("model".into(), json!(model));
                }
                v.extend(counts.clone());
                Value::Object(v)
            })
            .collect();
        Some(Value::Array(list))
    }

    // ---- pipeline -------------------------------------------------------------------------

    fn project_pipeline(&mut self, envelope: &Value, out: &mut Vec<Value>) {
        let event_type = envelope
            .get("eventType")
            .and_then(Value::as_str)
            .unwrap_or("");
        let event_id = envelope.get("eventId").and_then(Value::as_str);
        let sequence = envelope
            .get("sequence")
            .and_then(Value::as_f64)
            .map(|s| s as u64);
        if let Some(seq) = sequence {
            if seq <= self.durable.pipeline_sequence {
                log::debug!("pipeline event {event_type} seq {seq} replayed; skipped");
                return;
            }
        }
        if let Some(id) = event_id {
            if !self.seen_event_ids.insert(id.to_string()) {
                log::debug!("pipeline event {id} replayed; skipped");
                return;
            }
        }
        if let Some(seq) = sequence {
            self.durable.pipeline_sequence = seq;
        }
        self.announce_session(out);
        let data = envelope.get("data").unwrap_or(&NULL);
        match event_type {
            "text_delta" => {
                if let Some(text) = data
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    let id = pipeline_message_id(envelope);
                    self.emit_pipeline_text(&id, text, out);
                }
            }
            "thinking_delta" => {
                if let Some(text) = data
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    let id = format!("reasoning-{}", pipeline_message_id(envelope));
                    self.emit_reasoning(&id, text, out);
                }
            }
            "tool_started" => {
                if let Some(id) = data
                    .get("toolUseId")
                    .and_then(Value::as_str)
                    .map(String::from)
                {
                    let tool =
                        json!({"name": data.get("toolName").cloned().unwrap_or(json!("tool"))});
                    self.start_tool(&id, &tool, out);
                    let args = data
                        .get("input")
                        .map(Value::to_string)
                        .unwrap_or_else(|| "{}".into());
                    self.tool_args_and_end(&id, args, out);
                }
            }
            "tool_result" => {
                if let Some(id) = data
                    .get("toolUseId")
                    .and_then(Value::as_str)
                    .map(String::from)
                {
                    let content = match data.get("result") {
                        Some(Value::String(s)) => s.clone(),
                        Some(v) if !v.is_null() => v.to_string(),
                        _ => String::new(),
                    };
                    self.tool_result(&id, content, out);
                }
            }
            "usage" => self.add_usage(data),
            "pipeline_completed" | "pipeline_error" => {}
            _ => {}
        }
        if STEP_OPENERS.contains(&event_type) {
            if let Some(key) = step_key(envelope) {
                self.durable.open_steps.insert(key.clone());
                self.open_step(&key, out);
            }
        } else if STEP_CLOSERS.contains(&event_type) {
            if let Some(key) = step_key(envelope) {
                self.durable.open_steps.remove(&key);
                if !self.open_steps.contains(&key) {
                    // A completion for a step this run never opened: a zero-length pair, never an orphan.
                    out.push(self.event("STEP_STARTED", json!({"stepName": key})));
                    self.open_steps.push(key.clone());
                }
                self.close_step(&key, out);
            }
        }
        if PIPELINE_CUSTOM_TYPES.contains(&event_type) {
            out.push(self.custom("iac-code.pipeline.v1", envelope.clone()));
        } else if !matches!(
            event_type,
            "text_delta" | "thinking_delta" | "tool_started" | "tool_result" | "usage"
        ) && !STEP_OPENERS.contains(&event_type)
            && !STEP_CLOSERS.contains(&event_type)
        {
            log::debug!("pipeline event type {event_type:?} is not in the allow-list; dropped");
        }
        if matches!(event_type, "pipeline_completed" | "pipeline_error") {
            let open = std::mem::take(&mut self.durable.open_steps);
            for key in open {
                self.close_step(&key, out);
            }
        }
    }

    fn emit_pipeline_text(&mut self, id: &str, text: &str, out: &mut Vec<Value>) {
        let Some(text) = self.strip_replayed(id, text) else {
            return;
        };
        self.close_reasoning(out);
        if !self.pipeline_texts.iter().any(|t| t == id) {
            out.push(self.event(
                "TEXT_MESSAGE_START",
                json!({"messageId": id, "role": "assistant"}),
            ));
            self.pipeline_texts.push(id.to_string());
        }
        self.push_content(id, text, out);
    }

    fn open_step(&mut self, key: &str, out: &mut Vec<Value>) {
        if self.open_steps.iter().any(|s| s == key) {
            return;
        }
        out.push(self.event("STEP_STARTED", json!({"stepName": key})));
        self.open_steps.push(key.to_string());
    }

    fn close_step(&mut self, key: &str, out: &mut Vec<Value>) {
        if let Some(pos) = self.open_steps.iter().position(|s| s == key) {
            self.open_steps.remove(pos);
            out.push(self.event("STEP_FINISHED", json!({"stepName": key})));
        }
    }

    /// A recovery snapshot from the kernel's pipeline state, then the events it lists, de-duplicated.
    pub fn recover_pipeline(&mut self, state: &Value, out: &mut Vec<Value>) {
        if let Some(snapshot) = state.get("snapshot").filter(|s| s.is_object()) {
            let run = snapshot
                .get("pipelineRunId")
                .and_then(Value::as_str)
                .unwrap_or("pipeline");
            let mut content =
                json!({"schemaVersion": 1, "pipelineRunId": run, "snapshot": snapshot});
            if let Some(last) = snapshot.get("lastSequence") {
                content["lastSequence"] = last.clone();
            }
            out.push(self.event(
                "ACTIVITY_SNAPSHOT",
                json!({"messageId": format!("pipeline:{run}"), "activityType": "iac-code.pipeline.v1",
                       "content": content, "replace": true}),
            ));
        }
        if let Some(events) = state.get("events").and_then(Value::as_array) {
            for envelope in events {
                self.project_pipeline(envelope, out);
            }
        }
    }

    // ---- the end --------------------------------------------------------------------------

    /// Closes every open span, then `RUN_FINISHED` (success or interrupt) or `RUN_ERROR`.
    pub fn finish(&mut self, end: &End, out: &mut Vec<Value>) {
        self.close_reasoning(out);
        for id in std::mem::take(&mut self.open_tools) {
            if let Some(t) = self.tools.get_mut(&id) {
                t.ended = true;
            }
            out.push(self.event("TOOL_CALL_END", json!({"toolCallId": id})));
        }
        self.close_text(out);
        for id in std::mem::take(&mut self.pipeline_texts) {
            out.push(self.event("TEXT_MESSAGE_END", json!({"messageId": id})));
        }
        for key in std::mem::take(&mut self.open_steps).into_iter().rev() {
            out.push(self.event("STEP_FINISHED", json!({"stepName": key})));
        }
        if !matches!(end, End::Interrupt(_)) {
            // Only an interrupt keeps pipeline steps alive for the next run.
            self.durable.open_steps.clear();
        }
        let mut fields = json!({"threadId": self.ids.thread_id, "runId": self.ids.run_id});
        match end {
            End::Success => {
                fields["outcome"] = json!({"type": "success"});
            }
            End::Interrupt(list) => {
                fields["outcome"] = json!({"type": "interrupt", "interrupts": list});
            }
            End::Failed(e) => {
                let mut f = json!({"message": e.message(self.lang), "code": e.code.as_str()});
                if let Some(u) = self.usage_list() {
                    f["usage"] = u;
                }
                out.push(self.event("RUN_ERROR", f));
                return;
            }
        }
        if let Some(u) = self.usage_list() {
            fields["usage"] = u;
        }
        out.push(self.event("RUN_FINISHED", fields));
    }
}

/// `TASK_STATE_INPUT_REQUIRED` → `input-required`.
pub fn normalize_state(state: &str) -> String {
    let lower = state.to_ascii_lowercase();
    lower
        .strip_prefix("task_state_")
        .unwrap_or(&lower)
        .replace('_', "-")
}

fn message_text(message: &Value) -> String {
    message
        .get("parts")
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in b {
            a.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// Non-empty, at most 128 characters of letters, digits and `_ . : -`.
pub fn valid_a2a_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

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

/// The end of the longest non-empty prefix of `text` (on a char boundary) whose SHA-256 hex is in
/// `digests`. One running hash over the text: each boundary costs a clone and a final block, so the
/// whole check is linear in the text (hashing every prefix from scratch was quadratic).
fn longest_recorded_prefix(text: &str, digests: &BTreeSet<String>) -> Option<usize> {
    let wanted: HashSet<[u8; 32]> = digests.iter().filter_map(|d| unhex32(d)).collect();
    if wanted.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    let mut found = None;
    let mut start = 0;
    for end in text
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain([text.len()])
        .filter(|&end| end > 0)
    {
        hasher.update(&text.as_bytes()[start..end]);
        start = end;
        let digest: [u8; 32] = hasher.clone().finalize().into();
        if wanted.contains(&digest) {
            found = Some(end);
        }
    }
    found
}

fn unhex32(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks(2)) {
        let s = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::sha256_hex;

    fn ids() -> RunIds {
        RunIds {
            thread_id: "t".into(),
            run_id: "r".into(),
            execution_id: "e".into(),
            context_id: "ctx".into(),
            ros_invocation_id: "inv".into(),
            parent_run_id: None,
        }
    }

    fn proj() -> Projection {
        Projection::new(ids(), Lang::En).with_clock(|| 0)
    }

    fn types(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap()).collect()
    }

    fn status(iac: Value, state: &str) -> Value {
        json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": state}, "metadata": {"iac_code": iac}}})
    }

    fn text(id: &str, t: &str) -> Value {
        json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING",
               "message": {"messageId": id, "role": "ROLE_AGENT", "parts": [{"text": t}]}}}})
    }

    #[test]
    fn identity_mismatch_is_a_protocol_error() {
        let mut p = proj();
        let mut out = vec![];
        p.on_item(&text("m", "a"), &mut out).unwrap();
        let other = json!({"statusUpdate": {"taskId": "other", "contextId": "ctx", "status": {"state": "TASK_STATE_WORKING"}}});
        assert_eq!(
            p.on_item(&other, &mut out).unwrap_err().code,
            Code::A2aProtocolError
        );
        let ctx = json!({"statusUpdate": {"taskId": "task", "contextId": "nope", "status": {"state": "TASK_STATE_WORKING"}}});
        assert_eq!(
            p.on_item(&ctx, &mut out).unwrap_err().code,
            Code::A2aProtocolError
        );
    }

    #[test]
    fn every_span_is_closed_on_error() {
        let mut p = proj();
        let mut out = vec![];
        p.start(&mut out);
        p.on_item(
            &status(
                json!({"thinking": {"type": "raw_thinking", "text": "hmm"}}),
                "TASK_STATE_WORKING",
            ),
            &mut out,
        )
        .unwrap();
        p.on_item(&text("m1", "hi"), &mut out).unwrap();
        p.on_item(
            &status(
                json!({"tool": {"toolUseId": "c1", "name": "x", "status": "started"}}),
                "TASK_STATE_WORKING",
            ),
            &mut out,
        )
        .unwrap();
        let end = p.on_item(&json!({"statusUpdate": {"taskId": "task", "contextId": "ctx", "status": {"state": "TASK_STATE_FAILED"}}}), &mut out).unwrap();
        let Some(End::Failed(e)) = end else {
            panic!("{end:?}")
        };
        assert_eq!(e.code, Code::A2aExecutionFailed);
        p.finish(&End::Failed(e), &mut out);
        let t = types(&out);
        assert_eq!(
            &t[t.len() - 3..],
            &["TOOL_CALL_END", "TEXT_MESSAGE_END", "RUN_ERROR"]
        );
        assert!(t.contains(&"REASONING_END"));
        assert_balanced(&out);
    }

    fn assert_balanced(events: &[Value]) {
        if let Err(e) = check_spans(events) {
            panic!("{e}");
        }
    }

    #[test]
    fn final_repeat_is_not_emitted_twice_and_usage_is_summed() {
        let mut p = proj();
        let mut out = vec![];
        p.on_item(&text("m1", "Hello"), &mut out).unwrap();
        let mut fin = text("m2", "Hello");
        fin["statusUpdate"]["metadata"] =
            json!({"iac_code": {"assistantFinal": {"complete": true}}});
        p.on_item(&fin, &mut out).unwrap();
        let u = json!({"usage": {"provider": "openai", "model": "m", "inputTokens": 10.0, "outputTokens": 2.0}});
        p.on_item(&status(u.clone(), "TASK_STATE_WORKING"), &mut out)
            .unwrap();
        p.on_item(&status(u, "TASK_STATE_WORKING"), &mut out)
            .unwrap();
        let end = p
            .on_item(&status(json!({}), "TASK_STATE_INPUT_REQUIRED"), &mut out)
            .unwrap();
        assert_eq!(end, Some(End::Success));
        p.finish(&End::Success, &mut out);
        let contents: Vec<_> = out
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .collect();
        assert_eq!(contents.len(), 1);
        let last = out.last().unwrap();
        assert_eq!(
            last["usage"],
            json!([{"provider": "openai", "model": "m", "inputTokens": 20, "outputTokens": 4}])
        );
    }

    #[test]
    fn input_required_with_an_envelope_is_an_interrupt() {
        let mut p = proj();
        let mut out = vec![];
        let input = json!({"input": {"kind": "permission", "inputId": "p1", "required": true, "toolUseId": "c1"}});
        let end = p
            .on_item(&status(input, "TASK_STATE_INPUT_REQUIRED"), &mut out)
            .unwrap();
        let Some(End::Interrupt(inputs)) = end else {
            panic!()
        };
        assert_eq!(inputs[0]["inputId"], "p1");
    }

    #[test]
    fn tool_lifecycle_matches_the_reference() {
        let mut p = proj();
        let mut out = vec![];
        let tool = |s: Value| status(json!({"tool": s}), "TASK_STATE_WORKING");
        p.on_item(
            &tool(json!({"toolUseId": "c1", "name": "write_file", "status": "started"})),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &tool(json!({"toolUseId": "c1", "status": "input_delta"})),
            &mut out,
        )
        .unwrap();
        p.on_item(&tool(json!({"toolUseId": "c1", "name": "write_file", "status": "input_complete", "toolInput": {"b": 1, "a": 2}})), &mut out).unwrap();
        p.on_item(
            &tool(json!({"toolUseId": "c1", "status": "completed", "result": "ok"})),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &tool(json!({"toolUseId": "c1", "status": "completed", "result": "ok"})),
            &mut out,
        )
        .unwrap();
        assert_eq!(
            types(&out)[1..],
            [
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT"
            ]
        );
        assert_eq!(out[2]["delta"], r#"{"a":2,"b":1}"#);
        assert_eq!(out[4]["messageId"], "tool-result-c1");
    }

    fn pipe(event_type: &str, seq: u64, extra: Value) -> Value {
        let mut env = json!({"eventType": event_type, "eventId": format!("ev-{seq}"), "sequence": seq, "pipelineRunId": "pr"});
        merge(&mut env, &extra);
        status(json!({"pipeline": env}), "TASK_STATE_WORKING")
    }

    #[test]
    fn pipeline_replays_are_dropped_and_unknown_types_never_leak() {
        let mut p = proj();
        let mut out = vec![];
        p.on_item(&pipe("pipeline_started", 1, json!({})), &mut out)
            .unwrap();
        p.on_item(&pipe("pipeline_started", 1, json!({})), &mut out)
            .unwrap();
        p.on_item(&pipe("backup_committed", 2, json!({})), &mut out)
            .unwrap();
        p.on_item(
            &pipe("text_delta", 3, json!({"data": {"text": "x"}})),
            &mut out,
        )
        .unwrap();
        let customs: Vec<_> = out
            .iter()
            .filter(|e| e["type"] == "CUSTOM" && e["name"] == "iac-code.pipeline.v1")
            .collect();
        assert_eq!(customs.len(), 1);
        assert!(out.iter().all(|e| e["value"]["eventType"] != "text_delta"));
        assert_eq!(p.durable().pipeline_sequence, 3);
    }

    #[test]
    fn parallel_candidates_get_their_own_messages_and_steps() {
        let mut p = proj();
        let mut out = vec![];
        p.on_item(
            &pipe(
                "candidate_step_started",
                1,
                json!({"candidate": {"id": "c1"}, "candidateStep": {"id": "plan"}}),
            ),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &pipe(
                "candidate_step_started",
                2,
                json!({"candidate": {"id": "c2"}, "candidateStep": {"id": "plan"}}),
            ),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &pipe(
                "text_delta",
                3,
                json!({"candidate": {"id": "c1"}, "data": {"text": "a"}}),
            ),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &pipe(
                "text_delta",
                4,
                json!({"candidate": {"id": "c2"}, "data": {"text": "b"}}),
            ),
            &mut out,
        )
        .unwrap();
        let starts: Vec<_> = out
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_START")
            .map(|e| e["messageId"].clone())
            .collect();
        assert_eq!(starts.len(), 2);
        assert_ne!(starts[0], starts[1]);
        let steps: Vec<_> = out
            .iter()
            .filter(|e| e["type"] == "STEP_STARTED")
            .map(|e| e["stepName"].clone())
            .collect();
        assert_eq!(
            steps,
            vec![json!("candidate:c1:plan"), json!("candidate:c2:plan")]
        );
        p.finish(&End::Interrupt(vec![json!({"id": "i"})]), &mut out);
        assert_balanced(&out);
        assert_eq!(p.durable().open_steps.len(), 2);
    }

    #[test]
    fn resumed_run_reopens_durable_steps_and_strips_replayed_text() {
        let mut first = proj();
        let mut out = vec![];
        first.on_item(&text("m1", "Hello "), &mut out).unwrap();
        let mut durable = first.durable();
        durable.open_steps.insert("step:deploy".into());
        let mut p = proj().resuming("task", Some("s"), durable);
        let mut out = vec![];
        p.start(&mut out);
        assert_eq!(types(&out), ["RUN_STARTED", "CUSTOM", "STEP_STARTED"]);
        p.on_item(&text("m1", "Hello world"), &mut out).unwrap();
        let delta: Vec<_> = out
            .iter()
            .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
            .collect();
        assert_eq!(delta[0]["delta"], "world");
        p.on_item(
            &pipe("step_completed", 1, json!({"step": {"id": "deploy"}})),
            &mut out,
        )
        .unwrap();
        p.on_item(
            &pipe("step_completed", 2, json!({"step": {"id": "verify"}})),
            &mut out,
        )
        .unwrap();
        p.finish(&End::Success, &mut out);
        assert_balanced(&out);
        assert!(p.durable().open_steps.is_empty());
    }

    #[test]
    fn replay_prefix_check_is_linear_and_matches_the_naive_rule() {
        let text = "héllo wörld ".repeat(2_000);
        let cut = text.char_indices().nth(17_000).unwrap().0;
        let digests: BTreeSet<String> = [
            sha256_hex(&text.as_bytes()[..cut]),
            sha256_hex(b"h"),
            sha256_hex(b""),
            "not hex".to_string(),
        ]
        .into();
        assert_eq!(longest_recorded_prefix(&text, &digests), Some(cut));
        assert_eq!(longest_recorded_prefix("", &digests), None);
        assert_eq!(longest_recorded_prefix("x", &digests), None);
        let whole: BTreeSet<String> = [sha256_hex("é".as_bytes())].into();
        assert_eq!(longest_recorded_prefix("é", &whole), Some(2));
    }
}
