//! The projection from A2A task updates to AG-UI events: a pure state machine.
//!
//! [`Projection::on_item`] takes one JSON-RPC `result` of the A2A stream and appends the AG-UI events
//! it means to `out`; it never does I/O, so tests drive it with recorded streams. It reports when the
//! A2A task reached an end ([`End`]); the orchestrator then persists what must be durable and asks for
//! the closing events ([`Projection::finish`]), which close every open span (reasoning, tools, text,
//! steps, in that order) before `RUN_FINISHED` or `RUN_ERROR`.
//!
//! This file is the front: it reads an item and hands its parts to small machines, one per file —
//! `session` (identity and its announcement), `spans` (text and reasoning messages), `replay`
//! (trimming text an earlier run already sent), `tools`, `pipeline` (envelopes, de-duplication),
//! `steps`, `usage`; `item` reads an A2A result, `out` stamps the events and writes them where the
//! caller wants them, `outcome` names how a run ends.

mod item;
mod out;
mod outcome;
mod pipeline;
mod replay;
mod session;
mod spans;
mod steps;
mod tools;
mod usage;

pub use crate::events::{DeltaSpans, EventSink, Events, Serialized};
pub use outcome::End;

use crate::a2a::frame::{Item, ItemKind, Message, ThinkingUpdate};
use crate::a2a::incoming;
use crate::error::{Error, Lang, Msg};
use crate::events::EventType;
use item::{end_of, message_text, open_waits};
use out::{versioned, Custom, Out};
use pipeline::Dedup;
use replay::Replay;
use serde_json::{json, Map, Value};
use session::Session;
use spans::Spans;
use std::collections::{BTreeSet, HashMap, HashSet};
use steps::Steps;
use tools::{ToolUpdate, Tools};
use usage::Usage;

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
    pub(crate) pipeline_sequence: u64,
    pub(crate) open_steps: BTreeSet<String>,
    pub(crate) text_digests: BTreeSet<String>,
}

/// The state of one run's projection: the run's ids, the clock, and one small machine per concern.
pub struct Projection {
    ids: RunIds,
    lang: Lang,
    clock: fn() -> u64,
    session: Session,
    spans: Spans,
    replay: Replay,
    tools: Tools,
    dedup: Dedup,
    steps: Steps,
    usage: Usage,
    /// The pipeline run in message ids: `pipeline-<threadId>` until a recovery snapshot names
    /// the kernel's (the reference's rule, `iac_code/agui/events.py`).
    pipeline_run_id: String,
    /// A pipeline delta's message id, built in place (no `String` per envelope).
    scratch_id: String,
    /// `reasoning-<runId>`, the one reasoning message id of the run.
    reasoning_id: String,
    /// Inputs of this execution answered already: a replay of one (in the stream or a task
    /// snapshot) is never a new interrupt.
    answered: HashSet<String>,
    /// The stream answered with a plain `message`, not a task.
    got_reply_message: bool,
    /// Text taken from task snapshots in this run, whole per message id: a run can see several
    /// snapshots (a side answer's `GetTask`, then `SubscribeToTask`'s first item), and each
    /// message's text is taken once; a later snapshot adds only what the message gained.
    snapshot_taken: HashMap<String, String>,
    /// How many of the run's text contents came from task snapshots.
    snapshot_contents: usize,
    /// `RUN_STARTED.input`: the turn's user message, so a client that did not send it (a
    /// thread's live feed) has it too.
    input: Option<Value>,
}

impl Projection {
    /// A projection for a new run.
    pub fn new(ids: RunIds, lang: Lang) -> Projection {
        Projection {
            pipeline_run_id: format!("pipeline-{}", ids.thread_id),
            scratch_id: String::new(),
            reasoning_id: format!("reasoning-{}", ids.run_id),
            answered: HashSet::new(),
            ids,
            lang,
            clock: crate::ids::now_ms,
            session: Session::default(),
            spans: Spans::default(),
            replay: Replay::default(),
            tools: Tools::default(),
            dedup: Dedup::default(),
            steps: Steps::default(),
            usage: Usage::default(),
            got_reply_message: false,
            snapshot_taken: HashMap::new(),
            snapshot_contents: 0,
            input: None,
        }
    }

    /// `RUN_STARTED` carries `input` (a `RunAgentInput`: the run's ids and the user's message).
    pub(crate) fn echoing(mut self, input: Value) -> Projection {
        self.input = Some(input);
        self
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
        self.session = Session::resumed(task_id, session_id);
        self.dedup = Dedup::after(durable.pipeline_sequence);
        self.steps = Steps::resumed(durable.open_steps);
        self.replay = Replay::after(durable.text_digests);
        self
    }

    /// A new turn of a thread whose iac-code session is known: the same one is expected.
    pub fn in_session(mut self, session_id: Option<&str>) -> Projection {
        if let Some(s) = session_id {
            self.session = Session::expecting(s);
        }
        self
    }

    /// Inputs answered already in this execution: never announced again.
    pub(crate) fn answered(&mut self, ids: impl IntoIterator<Item = String>) {
        self.answered.extend(ids);
    }

    /// The answered question's tool call gets the answer as its result, once the kernel
    /// accepted it (the reference's `map_resolved_tool`).
    pub(crate) fn resolved_tool(
        &mut self,
        tool_call_id: &str,
        content: &str,
        events: &mut impl EventSink,
    ) {
        let out = &mut Out::new(events, self.clock);
        self.tools.result(tool_call_id, content, out);
    }

    /// The A2A task id, once known: the run persists it the moment it is learned.
    pub(crate) fn task_id(&self) -> Option<&str> {
        self.session.task_id()
    }

    /// The iac-code session id, once known: persisted like the task id.
    pub(crate) fn session_id(&self) -> Option<&str> {
        self.session.session_id()
    }

    /// Whether the A2A stream answered with a plain `message` (a complete, task-less reply).
    pub(crate) fn got_reply_message(&self) -> bool {
        self.got_reply_message
    }

    /// The durable facts to persist: open steps, sequence, digests of the text emitted so far.
    pub(crate) fn durable(&self) -> Durable {
        Durable {
            pipeline_sequence: self.dedup.sequence(),
            open_steps: self.steps.running().clone(),
            text_digests: self.replay.digests(),
        }
    }

    /// `RUN_STARTED`, then (for a resumed run) the session mapping and the durable steps re-opened.
    pub fn start(&mut self, events: &mut impl EventSink) {
        let out = &mut Out::new(events, self.clock);
        let mut fields = json!({"threadId": self.ids.thread_id, "runId": self.ids.run_id});
        if let Some(parent) = &self.ids.parent_run_id {
            fields["parentRunId"] = json!(parent);
        }
        if let Some(input) = self.input.take() {
            fields["input"] = input;
        }
        out.push(EventType::RunStarted, fields);
        if self.session.task_id().is_some() {
            self.announce(out);
        }
        self.steps.reopen_running(out);
    }

    /// Projects one JSON-RPC `result`. `Ok(Some(end))` when the task reached an end for this run.
    pub fn on_item(
        &mut self,
        result: &Value,
        events: &mut impl EventSink,
    ) -> Result<Option<End>, Error> {
        let text = result.to_string();
        let item = Item::of_result(&text).map_err(|_| Msg::StreamNotJson.err())?;
        self.on_view(&item, events)
    }

    /// [`on_item`](Self::on_item) for a result already viewed (the run's hot path).
    pub(crate) fn on_view(
        &mut self,
        item: &Item,
        events: &mut impl EventSink,
    ) -> Result<Option<End>, Error> {
        let out = &mut Out::new(events, self.clock);
        let (kind, head) = (item.kind, &item.head);
        let iac = &head.iac;
        let envelopes = pipeline::Envelopes::of(iac);
        self.session
            .check_identity(&self.ids.context_id, kind, head)?;
        self.session.learn(iac, envelopes.session_ids())?;
        if self.session.is_known() {
            self.announce(out);
        }
        match kind {
            ItemKind::ArtifactUpdate => {
                self.announce(out);
                self.artifact(head.artifact, out);
                return Ok(None);
            }
            ItemKind::Message => {
                self.got_reply_message = true;
                self.reply_message(head, out);
                return Ok(None);
            }
            ItemKind::Task | ItemKind::StatusUpdate => {}
        }
        self.on_iac(iac, &envelopes, out);
        let status = head.status.obj();
        let message = status.map(|s| &s.message).filter(|m| m.is_present());
        if let Some(message) = message {
            if iac.final_complete {
                self.final_message(message.obj(), out);
            } else {
                self.status_message(message.obj(), out);
            }
        } else if kind == ItemKind::Task && self.spans.contents() == self.snapshot_contents {
            // Only snapshots have given text so far: the stream has not taken over.
            self.history_text(head.history, out);
        }
        let waits = open_waits(&iac.rare, &self.answered)?;
        let end = if waits.is_empty() {
            end_of(status)?
        } else {
            Some(End::Interrupt(waits))
        };
        if end.is_some() {
            self.announce(out);
        }
        Ok(end)
    }

    /// A recovery snapshot from the kernel's pipeline state, then the events it lists, de-duplicated.
    pub(crate) fn recover_pipeline(&mut self, state: &Value, events: &mut impl EventSink) {
        let out = &mut Out::new(events, self.clock);
        if let Some(fields) = pipeline::snapshot(state, &mut self.pipeline_run_id) {
            out.push(EventType::ActivitySnapshot, fields);
        }
        if let Some(envelopes) = state.get("events").and_then(Value::as_array) {
            self.dedup.recovering = true;
            for envelope in envelopes {
                self.on_pipeline_value(envelope, out);
            }
            self.dedup.recovering = false;
        }
        let last = state
            .pointer("/snapshot/lastSequence")
            .and_then(Value::as_f64);
        if let Some(last) = last {
            self.dedup.covered(last as u64);
        }
    }

    /// Closes every open span, then `RUN_FINISHED` (success or interrupt) or `RUN_ERROR`.
    pub fn finish(&mut self, end: &End, events: &mut impl EventSink) {
        let out = &mut Out::new(events, self.clock);
        self.spans.close_reasoning(out);
        self.tools.end_all(out);
        self.spans.close_messages(out);
        self.steps.close_spans(out);
        if !matches!(end, End::Interrupt(_)) {
            // Only an interrupt keeps pipeline steps alive for the next run.
            self.steps.forget_running();
        }
        let (kind, mut fields) = match end {
            End::Success => (
                EventType::RunFinished,
                json!({"threadId": self.ids.thread_id, "runId": self.ids.run_id,
                       "outcome": {"type": "success"}}),
            ),
            End::Interrupt(list) => (
                EventType::RunFinished,
                json!({"threadId": self.ids.thread_id, "runId": self.ids.run_id,
                       "outcome": {"type": "interrupt", "interrupts": list}}),
            ),
            End::Failed(e) => (
                EventType::RunError,
                json!({"message": e.message(self.lang), "code": e.code.as_str()}),
            ),
        };
        if let Some(usage) = self.usage.list() {
            fields["usage"] = usage;
        }
        out.push(kind, fields);
    }

    // ---- the parts of an item -----------------------------------------------------------------

    /// The session announcement, once: every event of the task comes after it.
    fn announce(&mut self, out: &mut Out) {
        self.session.announce(&self.ids, out);
    }

    /// An artifact travels whole as `iac-code.artifact.v1`.
    fn artifact(&mut self, artifact: Option<&serde_json::value::RawValue>, out: &mut Out) {
        let artifact: Option<Value> = artifact.and_then(|a| serde_json::from_str(a.get()).ok());
        if let Some(Value::Object(artifact)) = artifact {
            let mut value = Map::new();
            value.insert("schemaVersion".into(), json!(1));
            value.extend(artifact);
            out.custom(Custom::Artifact, Value::Object(value));
        }
    }

    /// A plain `message` result: the kernel's whole, task-less reply.
    fn reply_message(&mut self, head: &crate::a2a::frame::Head, out: &mut Out) {
        let text = head.parts.as_str();
        if !text.is_empty() {
            self.announce(out);
            let id = head.message_id.get().unwrap_or("reply");
            self.reply_text(id, text, out);
        }
    }

    /// `metadata.iac_code` of a task or status update: reasoning, tool, MCP progress, pipeline
    /// events, usage, in that order.
    fn on_iac(
        &mut self,
        iac: &crate::a2a::frame::Iac,
        envelopes: &pipeline::Envelopes,
        out: &mut Out,
    ) {
        if let Some(text) = iac.thinking.obj().and_then(ThinkingUpdate::raw_text) {
            self.announce(out);
            let id = std::mem::take(&mut self.reasoning_id);
            self.spans.reasoning(&id, text, out);
            self.reasoning_id = id;
        }
        let view = iac;
        let iac = &iac.rare;
        if let Some(tool) = view.tool_raw {
            self.announce(out);
            if let Some(update) = ToolUpdate::from_raw(tool) {
                self.tool(update, out);
            }
        }
        if let Some(progress) = iac.get(incoming::MCP_PROGRESS).filter(|v| v.is_object()) {
            out.custom(Custom::ToolProgress, versioned(progress));
        }
        self.on_envelopes(envelopes, out);
        if let Some(usage) = iac.get(incoming::USAGE) {
            self.usage.add(usage);
        }
    }

    /// The agent's final message (`assistantFinal.complete`): it repeats the streamed text, so
    /// it is text of its own only when nothing was streamed.
    fn final_message(&mut self, message: Option<&Message>, out: &mut Out) {
        if !self.spans.sent_text() {
            self.status_message(message, out);
        }
    }

    /// The agent's message in a status: streamed text.
    fn status_message(&mut self, message: Option<&Message>, out: &mut Out) {
        let Some(message) = message else {
            return; // not an object: no text
        };
        let role = message.role.get().unwrap_or("ROLE_AGENT");
        if !matches!(role, "ROLE_AGENT" | "agent" | "") {
            return;
        }
        let text = message.parts.as_str();
        if text.is_empty() {
            return;
        }
        let owned;
        let id = match message.message_id.get() {
            Some(id) => id,
            None => {
                let owner = self.session.task_id().unwrap_or(&self.ids.run_id);
                owned = format!("{owner}-message");
                &owned
            }
        };
        self.announce(out);
        self.reply_text(id, text, out);
    }

    /// A task snapshot with no streamed text yet: its trailing agent messages are the answer,
    /// joined per message id (the kernel streams a reply as many status messages of one id, which
    /// the task's history keeps one by one), minus what an earlier snapshot of this run took.
    /// The history is read in place: only its trailing agent messages are built (the user's
    /// message before them, which may be megabytes, is looked at for its role alone).
    fn history_text(&mut self, history: Option<&serde_json::value::RawValue>, out: &mut Out) {
        type Raw<'h> = &'h serde_json::value::RawValue;
        let history: Option<Vec<Raw>> = history.and_then(|h| serde_json::from_str(h.get()).ok());
        let Some(history) = history else {
            return;
        };
        #[derive(serde::Deserialize)]
        struct Role<'h> {
            #[serde(borrow, default)]
            role: Option<std::borrow::Cow<'h, str>>,
        }
        let is_user = |m: &Raw| {
            serde_json::from_str::<Role>(m.get())
                .ok()
                .and_then(|r| r.role)
                .is_some_and(|r| r == "ROLE_USER")
        };
        let newest_first: Vec<Value> = history
            .iter()
            .rev()
            .take_while(|m| !is_user(m))
            .filter_map(|m| serde_json::from_str(m.get()).ok())
            .collect();
        let trailing: Vec<&Value> = newest_first.iter().collect();
        let mut whole: Vec<(String, String)> = Vec::new();
        for m in trailing.into_iter().rev() {
            let text = message_text(m);
            if text.is_empty() {
                continue;
            }
            let id = m
                .get("messageId")
                .and_then(Value::as_str)
                .unwrap_or("history");
            match whole.iter_mut().find(|(known, _)| known == id) {
                Some((_, joined)) => joined.push_str(&text),
                None => whole.push((id.to_string(), text)),
            }
        }
        for (id, text) in whole {
            let taken = self.snapshot_taken.entry(id.clone()).or_default();
            // A history cut short (`historyLength`) may no longer start with what was taken.
            let Some(gained) = text.strip_prefix(taken.as_str()).map(str::to_string) else {
                continue;
            };
            *taken = text;
            if gained.is_empty() {
                continue;
            }
            self.announce(out);
            let before = self.spans.contents();
            self.reply_text(&id, &gained, out);
            self.snapshot_contents += self.spans.contents() - before;
        }
    }

    /// Reply text, minus what an earlier run of the execution already sent.
    fn reply_text(&mut self, id: &str, text: &str, out: &mut Out) {
        if let Some(text) = self.replay.fresh(id, text) {
            self.spans.reply(id, text, out);
        }
    }

    /// Pipeline text, minus what an earlier run of the execution already sent.
    fn pipeline_text(&mut self, id: &str, text: &str, out: &mut Out) {
        if let Some(text) = self.replay.fresh(id, text) {
            self.spans.pipeline(id, text, out);
        }
    }

    /// A tool update from either of the kernel's forms.
    fn tool(&mut self, update: ToolUpdate, out: &mut Out) {
        match update {
            ToolUpdate::Started { id, name } => self.start_tool(&id, &name, out),
            ToolUpdate::Input { id, name, args } => {
                self.start_tool(&id, &name, out);
                self.tools.args_and_end(&id, &args, out);
            }
            ToolUpdate::Result { id, content } => self.tools.result(&id, &content, out),
            ToolUpdate::Progress(value) => out.custom(Custom::ToolProgress, value),
        }
    }

    /// A new call closes the reasoning first: thinking ends where acting starts, and overlapping
    /// spans only confuse renderers.
    fn start_tool(&mut self, id: &str, name: &str, out: &mut Out) {
        if !self.tools.knows(id) {
            self.spans.close_reasoning(out);
            self.tools.start(id, name, self.spans.open_reply(), out);
        }
    }
}

#[cfg(test)]
mod tests;
