//! Text and reasoning spans: which messages are open, opened and closed so that a reasoning span
//! never overlaps a text message.

use super::out::{Delta, Out};
use crate::events::EventType;
use serde_json::json;

#[derive(Default)]
pub(super) struct Spans {
    /// The open reasoning message.
    reasoning: Option<String>,
    /// The open reply message (text that is not the pipeline's): one at a time.
    reply: Option<String>,
    /// Open pipeline messages: parallel sub-pipelines stream at once, so several stay open.
    pipeline: Vec<String>,
    /// How many text contents went out in this run.
    contents: usize,
}

impl Spans {
    /// Whether any text content went out: a final repeat or a task's history then adds nothing.
    pub(super) fn sent_text(&self) -> bool {
        self.contents > 0
    }

    /// How many text contents went out in this run.
    pub(super) fn contents(&self) -> usize {
        self.contents
    }

    /// The open reply message, the parent of a tool call that starts now.
    pub(super) fn open_reply(&self) -> Option<&str> {
        self.reply.as_deref()
    }

    /// Reasoning text; a new reasoning message closes the open reasoning and reply first.
    pub(super) fn reasoning(&mut self, id: &str, text: &str, out: &mut Out) {
        if self.reasoning.as_deref() != Some(id) {
            self.close_reasoning(out);
            self.close_reply(out);
            out.push(EventType::ReasoningStart, json!({"messageId": id}));
            out.push(
                EventType::ReasoningMessageStart,
                json!({"messageId": id, "role": "reasoning"}),
            );
            self.reasoning = Some(id.to_string());
        }
        out.delta(Delta::Reasoning, id, text);
    }

    /// Reply text: a new reply message closes the open one.
    pub(super) fn reply(&mut self, id: &str, text: &str, out: &mut Out) {
        self.close_reasoning(out);
        if self.reply.as_deref() != Some(id) {
            self.close_reply(out);
            out.push(
                EventType::TextMessageStart,
                json!({"messageId": id, "role": "assistant"}),
            );
            self.reply = Some(id.to_string());
        }
        self.content(id, text, out);
    }

    /// Pipeline text: its message opens once and stays open beside the others until the run ends.
    pub(super) fn pipeline(&mut self, id: &str, text: &str, out: &mut Out) {
        self.close_reasoning(out);
        if !self.pipeline.iter().any(|open| open == id) {
            out.push(
                EventType::TextMessageStart,
                json!({"messageId": id, "role": "assistant"}),
            );
            self.pipeline.push(id.to_string());
        }
        self.content(id, text, out);
    }

    pub(super) fn close_reasoning(&mut self, out: &mut Out) {
        if let Some(id) = self.reasoning.take() {
            out.push(EventType::ReasoningMessageEnd, json!({"messageId": id}));
            out.push(EventType::ReasoningEnd, json!({"messageId": id}));
        }
    }

    /// Closes the reply, then every pipeline message (the run's end).
    pub(super) fn close_messages(&mut self, out: &mut Out) {
        self.close_reply(out);
        for id in std::mem::take(&mut self.pipeline) {
            out.push(EventType::TextMessageEnd, json!({"messageId": id}));
        }
    }

    fn close_reply(&mut self, out: &mut Out) {
        if let Some(id) = self.reply.take() {
            out.push(EventType::TextMessageEnd, json!({"messageId": id}));
        }
    }

    /// One `TEXT_MESSAGE_CONTENT` in the message `id`, which is open.
    fn content(&mut self, id: &str, text: &str, out: &mut Out) {
        self.contents += 1;
        out.delta(Delta::Text, id, text);
    }
}
