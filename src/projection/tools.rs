//! Tool calls: the kernel's tool updates (from `metadata.iac_code.tool` or a pipeline event) as
//! `TOOL_CALL_*` spans, each call started, ended and answered at most once.

use super::out::{versioned, Out};
use crate::a2a::frame::{Field, LStr};
use crate::events::EventType;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;

/// One tool update, read from either of the kernel's two forms.
pub(super) enum ToolUpdate {
    /// The call started; its input comes later.
    Started { id: String, name: String },
    /// The call's whole input: `TOOL_CALL_START` if not yet sent, `ARGS`, `END`.
    Input {
        id: String,
        name: String,
        args: String,
    },
    /// The call's result or error: `TOOL_CALL_END` if not yet sent, then `RESULT` once.
    Result { id: String, content: String },
    /// Progress of a running call: the `iac-code.tool-progress.v1` value.
    Progress(Value),
}

impl ToolUpdate {
    /// Reads `metadata.iac_code.tool` as it came: the statuses that carry nothing but ids (a
    /// start, the kernel's many `input_delta`s) through a borrowed view, the others as a `Value`.
    pub(super) fn from_raw(tool: &RawValue) -> Option<ToolUpdate> {
        let view = match serde_json::from_str::<Field<ToolView>>(tool.get()) {
            Ok(Field::Obj(view)) => view,
            Ok(_) => return None,
            // A shape the view refuses (a repeated key): read as a `Value`, where the last key wins.
            Err(_) => return ToolUpdate::from_iac(&serde_json::from_str(tool.get()).ok()?),
        };
        match view.status.get().unwrap_or("") {
            "started" => {
                let name = match view.name.is_present() {
                    true => view.name.get(),
                    false => view.tool_name.get(),
                };
                Some(ToolUpdate::Started {
                    id: view.id.get()?.to_string(),
                    name: name.unwrap_or("tool").to_string(),
                })
            }
            "input_complete" | "completed" | "failed" | "progress" => {
                ToolUpdate::from_iac(&serde_json::from_str(tool.get()).ok()?)
            }
            _ => None,
        }
    }

    /// Reads `metadata.iac_code.tool`; `None` without a `toolUseId` or for a status we ignore.
    pub(super) fn from_iac(tool: &Value) -> Option<ToolUpdate> {
        let id = tool.get("toolUseId")?.as_str()?.to_string();
        let name = tool
            .get("name")
            .or_else(|| tool.get("toolName"))
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_string();
        let status = tool.get("status").and_then(Value::as_str).unwrap_or("");
        Some(match status {
            "started" => ToolUpdate::Started { id, name },
            "input_complete" => {
                let args = match tool.get("toolInput") {
                    Some(input) if !input.is_null() => input.to_string(),
                    _ => json!({"summary": tool.get("inputSummary")}).to_string(),
                };
                ToolUpdate::Input { id, name, args }
            }
            "completed" | "failed" => {
                let content = match tool.get("result").or_else(|| tool.get("error")) {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) if !v.is_null() => v.to_string(),
                    _ => status.to_string(),
                };
                ToolUpdate::Result { id, content }
            }
            "progress" => ToolUpdate::Progress(versioned(tool)),
            _ => return None,
        })
    }

    /// Reads the `data` of a pipeline `tool_started`: the call with its whole input.
    pub(super) fn pipeline_started(data: &Value) -> Option<ToolUpdate> {
        let id = data.get("toolUseId")?.as_str()?.to_string();
        let name = data
            .get("toolName")
            .and_then(Value::as_str)
            .unwrap_or("tool");
        let args = data
            .get("input")
            .map(Value::to_string)
            .unwrap_or_else(|| "{}".into());
        Some(ToolUpdate::Input {
            id,
            name: name.to_string(),
            args,
        })
    }

    /// Reads the `data` of a pipeline `tool_result`.
    pub(super) fn pipeline_result(data: &Value) -> Option<ToolUpdate> {
        let id = data.get("toolUseId")?.as_str()?.to_string();
        let content = match data.get("result") {
            Some(Value::String(s)) => s.clone(),
            Some(v) if !v.is_null() => v.to_string(),
            _ => String::new(),
        };
        Some(ToolUpdate::Result { id, content })
    }
}

/// The fields of a tool update every status has.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct ToolView<'a> {
    #[serde(borrow, rename = "toolUseId")]
    id: LStr<'a>,
    #[serde(borrow)]
    name: LStr<'a>,
    #[serde(borrow, rename = "toolName")]
    tool_name: LStr<'a>,
    #[serde(borrow)]
    status: LStr<'a>,
}

/// What was sent for one call.
#[derive(Default)]
struct Call {
    ended: bool,
    result_sent: bool,
}

#[derive(Default)]
pub(super) struct Tools {
    /// Every call of this run, by id.
    calls: HashMap<String, Call>,
    /// Calls started and not yet ended, in start order.
    open: Vec<String>,
}

impl Tools {
    pub(super) fn knows(&self, id: &str) -> bool {
        self.calls.contains_key(id)
    }

    /// `TOOL_CALL_START` for a new call, under the open reply message if there is one.
    pub(super) fn start(&mut self, id: &str, name: &str, parent: Option<&str>, out: &mut Out) {
        let mut fields = json!({"toolCallId": id, "toolCallName": name});
        if let Some(parent) = parent {
            fields["parentMessageId"] = json!(parent);
        }
        out.push(EventType::ToolCallStart, fields);
        self.calls.insert(id.to_string(), Call::default());
        self.open.push(id.to_string());
    }

    /// The call's input as one `TOOL_CALL_ARGS`, then its end; nothing once it ended.
    pub(super) fn args_and_end(&mut self, id: &str, args: &str, out: &mut Out) {
        if self.calls.get(id).is_some_and(|c| c.ended) {
            return;
        }
        out.push(
            EventType::ToolCallArgs,
            json!({"toolCallId": id, "delta": args}),
        );
        self.end(id, out);
    }

    /// Ends the call if open, then its one `TOOL_CALL_RESULT` (a result for an unknown call too).
    pub(super) fn result(&mut self, id: &str, content: &str, out: &mut Out) {
        self.end(id, out);
        let call = self.calls.entry(id.to_string()).or_insert(Call {
            ended: true,
            result_sent: false,
        });
        if call.result_sent {
            return;
        }
        call.result_sent = true;
        out.push(
            EventType::ToolCallResult,
            json!({"messageId": format!("tool-result-{id}"), "toolCallId": id, "content": content, "role": "tool"}),
        );
    }

    /// Ends every open call (the run's end).
    pub(super) fn end_all(&mut self, out: &mut Out) {
        for id in std::mem::take(&mut self.open) {
            if let Some(c) = self.calls.get_mut(&id) {
                c.ended = true;
            }
            out.push(EventType::ToolCallEnd, json!({"toolCallId": id}));
        }
    }

    /// `TOOL_CALL_END` once, for a call that started.
    fn end(&mut self, id: &str, out: &mut Out) {
        if let Some(c) = self.calls.get_mut(id) {
            if !c.ended {
                c.ended = true;
                self.open.retain(|o| o != id);
                out.push(EventType::ToolCallEnd, json!({"toolCallId": id}));
            }
        }
    }
}
