//! The A2A 1.0 JSON-RPC client (blocking, over ureq) and the one table of `metadata.iac_code` keys.
//!
//! Every upstream failure becomes one of three spec codes: the service cannot be reached or stops
//! mid-stream (`A2A_UNAVAILABLE`), it answers something that is not the protocol
//! (`A2A_PROTOCOL_ERROR`), or it refuses or fails the execution (`A2A_EXECUTION_FAILED`).

use crate::error::{Error, Msg};
use crate::frame::Item;
use crate::modes::{Presentation, RunMode};
use crate::sse::EventReader;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// What a `SendStreamingMessage` starts.
pub(crate) enum Turn<'a> {
    /// A new turn in the thread's context, in the client's `runMode`/`pipelineName` (none given:
    /// none sent, the kernel decides).
    New,
    /// An answer on the task waiting for input; `extra` keys join `metadata.iac_code`.
    Answer {
        task_id: &'a str,
        extra: Option<Value>,
        /// The execution's mode: the kernel reads the mode from each message
        /// (`iac_code/a2a/request_mode.py`), so an answer without it is a normal chat turn.
        mode: ExecutionMode<'a>,
    },
}

/// The `run_mode` and `pipeline_name` an execution started with.
#[derive(Clone, Copy, Default)]
pub(crate) struct ExecutionMode<'a> {
    pub(crate) run_mode: Option<RunMode>,
    pub(crate) pipeline_name: Option<&'a str>,
}

/// The client's settings every message's `metadata.iac_code` carries, borrowed from wherever the
/// caller keeps them (src/run/ fills it from the request's `forwardedProps.iacCode`).
#[derive(Clone, Copy, Default)]
pub(crate) struct TurnOptions<'a> {
    pub(crate) cwd: &'a str,
    pub(crate) ros_invocation_id: &'a str,
    pub(crate) preferred_language: Option<&'a str>,
    pub(crate) cleanup_only: bool,
    pub(crate) user_id: Option<&'a str>,
    pub(crate) channel: Option<&'a str>,
    pub(crate) model: Option<&'a str>,
    pub(crate) llm_api_key: Option<&'a str>,
    pub(crate) candidate_presentation: Option<Presentation>,
    /// The mode of a [`Turn::New`] (an answer carries its execution's own).
    pub(crate) mode: ExecutionMode<'a>,
    pub(crate) thinking: ThinkingMetadata<'a>,
    pub(crate) cloud: CloudCredentials<'a>,
}

/// `metadata.iac_code.thinking` of a message we send: the client's thinking options (sent only
/// when one of them is given).
#[derive(Clone, Copy, Default)]
pub(crate) struct ThinkingMetadata<'a> {
    pub(crate) enabled: Option<bool>,
    pub(crate) effort: Option<&'a str>,
    pub(crate) budget: Option<u64>,
}

/// The `alibaba_cloud_*` keys.
#[derive(Clone, Copy, Default)]
pub(crate) struct CloudCredentials<'a> {
    pub(crate) access_key_id: Option<&'a str>,
    pub(crate) access_key_secret: Option<&'a str>,
    pub(crate) security_token: Option<&'a str>,
    pub(crate) region_id: Option<&'a str>,
}

/// The A2A `message` of a `SendStreamingMessage`: a `ROLE_USER` message in the thread's context
/// whose `metadata.iac_code` carries the client's `options`.
pub(crate) fn user_message(
    message_id: &str,
    parts: &[Value],
    context_id: &str,
    options: &TurnOptions,
    turn: Turn,
) -> Value {
    let mut meta = iac_code_metadata(options, &turn);
    let mut message = json!({
        "messageId": message_id,
        "role": "ROLE_USER",
        "parts": parts,
        "contextId": context_id,
    });
    if let Turn::Answer { task_id, extra, .. } = turn {
        if let (Some(m), Some(Value::Object(extra))) = (meta.as_object_mut(), extra) {
            m.extend(extra);
        }
        message["taskId"] = json!(task_id);
    }
    message["metadata"] = json!({ "iac_code": meta });
    message
}

/// The kernel's name of a candidate presentation: `rich` is its `rich-v1`.
fn kernel_presentation(p: Presentation) -> &'static str {
    match p {
        Presentation::Standard => "standard",
        Presentation::Rich => "rich-v1",
    }
}

/// The client's settings → `metadata.iac_code`, in one place (names read from the kernel's source).
fn iac_code_metadata(o: &TurnOptions, turn: &Turn) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_string(), v);
        }
    };
    let s = |v: Option<&str>| v.map(|s| json!(s));
    let trimmed = |v: Option<&str>| v.map(|v| json!(v.trim())).filter(|v| v != "");
    put("cwd", Some(json!(o.cwd)));
    put("rosInvocationId", Some(json!(o.ros_invocation_id)));
    put("preferredLanguage", s(o.preferred_language));
    put("cleanupOnly", Some(json!(o.cleanup_only)));
    put("user_id", s(o.user_id));
    put("channel", s(o.channel));
    put("iac_code_model", trimmed(o.model));
    put("iac_code_api_key", trimmed(o.llm_api_key));
    put(
        "candidatePresentation",
        o.candidate_presentation
            .map(|p| json!(kernel_presentation(p))),
    );
    let mode = match turn {
        Turn::New => o.mode,
        Turn::Answer { mode, .. } => *mode,
    };
    put("run_mode", s(mode.run_mode.map(RunMode::as_str)));
    put("pipeline_name", s(mode.pipeline_name));
    let mut th = Map::new();
    if let Some(e) = o.thinking.enabled {
        th.insert("enabled".into(), json!(e));
    }
    if let Some(e) = o.thinking.effort {
        th.insert("effort".into(), json!(e));
    }
    if let Some(b) = o.thinking.budget {
        th.insert("budget".into(), json!(b));
    }
    if !th.is_empty() {
        put("thinking", Some(Value::Object(th)));
    }
    put("alibaba_cloud_access_key_id", s(o.cloud.access_key_id));
    put(
        "alibaba_cloud_access_key_secret",
        s(o.cloud.access_key_secret),
    );
    put("alibaba_cloud_security_token", s(o.cloud.security_token));
    put("alibaba_cloud_region_id", s(o.cloud.region_id));
    Value::Object(m)
}

/// The incoming side of the table: the `metadata.iac_code` keys the kernel sends on tasks, status
/// updates and artifacts, as the projection and the interrupts read them.
pub(crate) mod incoming {
    /// Where the object sits in an A2A task, status update or artifact update (a JSON pointer).
    pub(crate) const POINTER: &str = "/metadata/iac_code";
    /// The iac-code session id (also inside a pipeline envelope).
    pub(crate) const SESSION_ID: &str = "iacCodeSessionId";
    /// A tool call's update.
    pub(crate) const TOOL: &str = "tool";
    /// An MCP tool's progress.
    pub(crate) const MCP_PROGRESS: &str = "mcpProgress";
    /// Token usage of the turn.
    pub(crate) const USAGE: &str = "usage";
    /// Reasoning (`{type: "raw_thinking", text}`).
    pub(crate) const THINKING: &str = "thinking";
    /// One pipeline envelope.
    pub(crate) const PIPELINE: &str = "pipeline";
    /// Several pipeline envelopes, under `events`.
    pub(crate) const PIPELINE_BATCH: &str = "pipelineBatch";
    /// The input the task waits for.
    pub(crate) const INPUT: &str = "input";
    /// Further permission inputs waiting at the same time.
    pub(crate) const PENDING_PERMISSIONS: &str = "pendingPermissions";
}

/// A blocking A2A client bound to one loopback base URL.
#[derive(Clone)]
pub struct A2aClient {
    agent: ureq::Agent,
    /// For `CancelTask`: a short overall deadline, so a hung kernel never holds a worker, a
    /// disconnect or a shutdown for long.
    control: ureq::Agent,
    base: String,
    token: Option<String>,
}

/// How long `CancelTask` may take in all (connect, send, answer).
pub(crate) const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The reply to a JSON-RPC call that is not a transport failure.
pub(crate) enum Rpc {
    Result(Value),
    Error {
        code: i64,
        message: String,
        /// The kernel's own code in `error.data.code` (`SESSION_BACKUP_NOT_READY`).
        kernel_code: Option<String>,
    },
}

/// A2A's `TaskNotFoundError` (`a2a/utils/errors.py`): the one JSON-RPC answer that says a task is
/// gone for good; any other error of a lookup is the service's trouble, not the task's end.
const TASK_NOT_FOUND: i64 = -32001;

/// The kernel's code for a session backup still synchronizing (`iac_code/services/
/// session_backup.py`), in `error.data.code` of a JSON-RPC error (`iac_code/a2a/executor.py`,
/// `SessionBackupNotReadyInvalidParamsError`) and in `error.code` of ensure-restored's 409
/// (`iac_code/a2a/app.py`).
pub(crate) const SESSION_BACKUP_NOT_READY: &str = "SESSION_BACKUP_NOT_READY";

impl A2aClient {
    /// `idle` bounds how long the upstream may stay silent or refuse our bytes: every read, the
    /// request head and body, and the wait for the answer's head (zero: forever). Connecting
    /// always has a deadline.
    pub fn new(base: &str, token: Option<String>, idle: Duration) -> A2aClient {
        let idle = (!idle.is_zero()).then_some(idle);
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_send_request(idle)
            .timeout_send_body(idle)
            .timeout_per_write(idle)
            .timeout_recv_response(idle)
            .timeout_per_read(idle)
            .input_buffer_size(32 * 1024)
            .output_buffer_size(32 * 1024)
            .max_idle_connections_per_host(64)
            .build();
        let control = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(CANCEL_TIMEOUT))
            .build();
        A2aClient {
            agent: config.into(),
            control: control.into(),
            base: base.trim_end_matches('/').to_string(),
            token,
        }
    }

    fn post(&self, path: &str) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        self.post_on(&self.agent, path)
    }

    fn post_on(
        &self,
        agent: &ureq::Agent,
        path: &str,
    ) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut req = agent
            .post(format!("{}{path}", self.base))
            .header("A2A-Version", "1.0")
            .header("Content-Type", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        req
    }

    /// `SendStreamingMessage`: the stream of task updates for `message`.
    pub(crate) fn send_streaming(&self, message: &Value) -> Result<A2aStream, Error> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": crate::ids::uuid_v4(),
            "method": "SendStreamingMessage",
            "params": {"message": message, "configuration": {"acceptedOutputModes": ["text/plain"]}},
        });
        self.open_stream(&body)
    }

    /// `SendMessage` (unary): how the reference answers a pipeline's side wait, which the kernel
    /// takes while the task keeps running (`iac_code/agui/adapter.py`,
    /// `_send_pipeline_permission_responses`).
    pub(crate) fn send_message(&self, message: &Value) -> Result<Rpc, Error> {
        let params =
            json!({"message": message, "configuration": {"acceptedOutputModes": ["text/plain"]}});
        self.call("SendMessage", &params)
    }

    /// `SubscribeToTask`: the task as it is now, then its later updates until the turn ends.
    /// A task that is not running answers with a JSON-RPC error (read as the stream's first item).
    pub(crate) fn subscribe_to_task(&self, task_id: &str) -> Result<A2aStream, Error> {
        let body = json!({
            "jsonrpc": "2.0",
            "id": crate::ids::uuid_v4(),
            "method": "SubscribeToTask",
            "params": {"id": task_id},
        });
        self.open_stream(&body)
    }

    /// Sends a streaming JSON-RPC call and returns its stream of results.
    fn open_stream(&self, body: &Value) -> Result<A2aStream, Error> {
        let started = std::time::Instant::now();
        let resp = self
            .post("/")
            .header("Accept", "text/event-stream")
            .send(serde_json::to_vec(&body).unwrap_or_default());
        crate::metrics::UPSTREAM_LATENCY.observe(started.elapsed());
        let resp = resp.map_err(transport)?;
        check_status(resp.status().as_u16())?;
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let mut body = resp.into_body();
        if !sse {
            // A plain JSON-RPC answer instead of a stream: an error (or a one-shot result).
            let text = body
                .with_config()
                .limit(1024 * 1024)
                .read_to_string()
                .map_err(transport)?;
            return Ok(A2aStream::One(
                Some(parse_rpc(text.as_bytes())?),
                String::new(),
            ));
        }
        Ok(A2aStream::new(body.into_reader()))
    }

    /// A non-streaming JSON-RPC call.
    pub(crate) fn call(&self, method: &str, params: &Value) -> Result<Rpc, Error> {
        self.call_on(&self.agent, method, params)
    }

    fn call_on(&self, agent: &ureq::Agent, method: &str, params: &Value) -> Result<Rpc, Error> {
        let body = json!({"jsonrpc": "2.0", "id": crate::ids::uuid_v4(), "method": method, "params": params});
        let started = std::time::Instant::now();
        let resp = self
            .post_on(agent, "/")
            .send(serde_json::to_vec(&body).unwrap_or_default())
            .map_err(transport)?;
        check_status(resp.status().as_u16())?;
        let text = resp
            .into_body()
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_string()
            .map_err(transport);
        crate::metrics::UPSTREAM_LATENCY.observe(started.elapsed());
        let text = text?;
        let v: Value = serde_json::from_str(&text).map_err(|_| Msg::RpcNotJson.err())?;
        rpc_of(v)
    }

    /// `GetTask`; `None` when the kernel says the task does not exist (any other refusal is an
    /// error: it says nothing about the task).
    pub(crate) fn get_task(&self, task_id: &str) -> Result<Option<Value>, Error> {
        match self.call("GetTask", &json!({"id": task_id, "historyLength": 100}))? {
            Rpc::Result(task) => Ok(Some(task)),
            Rpc::Error {
                code: TASK_NOT_FOUND,
                ..
            } => Ok(None),
            Rpc::Error { code, message, .. } => {
                Err(Msg::TaskLookupRefused.with(&[&code, &truncate(&message, 200)]))
            }
        }
    }

    /// The task's state (`TASK_STATE_…`) within [`CANCEL_TIMEOUT`]; `None` when the kernel does
    /// not know the task.
    pub(crate) fn task_state(&self, task_id: &str) -> Result<Option<String>, Error> {
        let params = json!({"id": task_id, "historyLength": 0});
        match self.call_on(&self.control, "GetTask", &params)? {
            Rpc::Result(task) => Ok(Some(
                task.pointer("/status/state")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )),
            Rpc::Error { .. } => Ok(None),
        }
    }

    /// `CancelTask`, within [`CANCEL_TIMEOUT`]; a task that is not cancelable (already ended) is
    /// not an error here.
    pub(crate) fn cancel_task(&self, task_id: &str) -> Result<(), Error> {
        self.call_on(&self.control, "CancelTask", &json!({ "id": task_id }))
            .map(|_| ())
    }

    /// iac-code extension: make sure the session is live. `Ok(false)`: the kernel does not have it.
    pub(crate) fn ensure_restored(
        &self,
        cwd: &str,
        session: &str,
        task: &str,
    ) -> Result<bool, Error> {
        let body = json!({"cwd": cwd, "sessionId": session, "taskId": task});
        let resp = self
            .post("/iac-code/session/ensure-restored")
            .send(serde_json::to_vec(&body).unwrap_or_default())
            .map_err(transport)?;
        match resp.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            409 if backup_not_ready(resp) => Err(Msg::SessionBackupNotReady.err()),
            s => Err(Msg::SessionRestoreHttp.with(&[&s])),
        }
    }

    /// iac-code extension: the pipeline snapshot and the events after `after`; `None` when the task
    /// has no pipeline.
    pub(crate) fn pipeline_state(&self, task: &str, after: u64) -> Result<Option<Value>, Error> {
        let mut req = self
            .agent
            .get(format!("{}/iac-code/pipeline/state", self.base))
            .query("taskId", task)
            .query("afterSequence", after.to_string())
            .header("A2A-Version", "1.0");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let resp = req.call().map_err(transport)?;
        let status = resp.status().as_u16();
        let text = resp
            .into_body()
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_string()
            .map_err(transport)?;
        match status {
            200 => serde_json::from_str(&text)
                .map(Some)
                .map_err(|_| Msg::PipelineStateNotJson.err()),
            404 => Ok(None),
            s => Err(Msg::PipelineStateHttp.with(&[&s])),
        }
    }
}

/// One `SendStreamingMessage` reply.
pub(crate) enum A2aStream<R = ureq::BodyReader<'static>> {
    /// The events, and room for a result that had to be read the slow way.
    Sse(Box<EventReader<R>>, String),
    /// A one-shot result, and room for its text.
    One(Option<Value>, String),
}

/// One result, viewed, and whether the next one is already buffered (the caller may batch its
/// output).
pub(crate) struct Next<'a> {
    pub(crate) item: Item<'a>,
    pub(crate) buffered: bool,
}

impl<R: std::io::Read> A2aStream<R> {
    pub(crate) fn new(reader: R) -> A2aStream<R> {
        A2aStream::Sse(Box::new(EventReader::new(reader)), String::new())
    }

    /// Whether the next result is already buffered (the caller may batch its output).
    pub(crate) fn has_buffered(&self) -> bool {
        match self {
            A2aStream::One(v, _) => v.is_some(),
            A2aStream::Sse(events, _) => events.has_ready(),
        }
    }

    /// The next JSON-RPC `result`, `Ok(None)` at the end of the stream.
    pub(crate) fn next_result(&mut self) -> Result<Option<Value>, Error> {
        match self {
            A2aStream::One(v, _) => Ok(v.take()),
            A2aStream::Sse(events, _) => match events.next_data().map_err(|e| read_error(&e))? {
                Some((data, _)) => parse_rpc(data).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The next `result`, viewed in place (the run's hot path); `Ok(None)` at the end.
    pub(crate) fn next_view(&mut self) -> Result<Option<Next<'_>>, Error> {
        let (result, text, buffered) = match self {
            A2aStream::One(v, text) => match v.take() {
                Some(v) => (v, text, false),
                None => return Ok(None),
            },
            A2aStream::Sse(events, text) => {
                let Some((data, buffered)) = events.next_data().map_err(|e| read_error(&e))? else {
                    return Ok(None);
                };
                if let Some(item) = Item::of_frame(data) {
                    return Ok(Some(Next { item, buffered }));
                }
                // Not a plain result (or a shape the view refuses, such as a repeated key): the
                // `Value` reading decides, exactly as before.
                (parse_rpc(data)?, text, buffered)
            }
        };
        *text = result.to_string();
        let item = Item::of_result(text).map_err(|_| Msg::StreamNotJson.err())?;
        Ok(Some(Next { item, buffered }))
    }
}

fn read_error(e: &std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::InvalidData => Msg::SseEventTooLarge.err(),
        _ => transport_io(e),
    }
}

fn parse_rpc(data: &[u8]) -> Result<Value, Error> {
    let v: Value = serde_json::from_slice(data).map_err(|_| Msg::StreamNotJson.err())?;
    match rpc_of(v)? {
        Rpc::Result(r) => Ok(r),
        Rpc::Error {
            kernel_code: Some(k),
            ..
        } if k == SESSION_BACKUP_NOT_READY => Err(Msg::SessionBackupNotReady.err()),
        Rpc::Error { code, message, .. } => {
            Err(Msg::RpcError.with(&[&code, &truncate(&message, 200)]))
        }
    }
}

/// Takes the reply apart without copying the (possibly large) result.
fn rpc_of(mut v: Value) -> Result<Rpc, Error> {
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        return Ok(Rpc::Error {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            kernel_code: e
                .pointer("/data/code")
                .and_then(Value::as_str)
                .map(String::from),
        });
    }
    match v.get_mut("result").map(Value::take) {
        Some(r) if r.is_object() => Ok(Rpc::Result(r)),
        _ => Err(Msg::RpcNeither.err()),
    }
}

/// ensure-restored's 409 body names the kernel's code (and says it is retryable).
fn backup_not_ready(resp: ureq::http::Response<ureq::Body>) -> bool {
    let text = resp
        .into_body()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v.pointer("/error/code")?.as_str().map(String::from))
        .is_some_and(|c| c == SESSION_BACKUP_NOT_READY)
}

fn check_status(status: u16) -> Result<(), Error> {
    match status {
        200..=299 => Ok(()),
        401 | 403 => Err(Msg::CredentialsRefused.err()),
        s => Err(Msg::UpstreamHttp.with(&[&s])),
    }
}

fn transport(e: ureq::Error) -> Error {
    match e {
        ureq::Error::Io(io) => transport_io(&io),
        ureq::Error::Timeout(_) => Msg::UpstreamTimeout.err(),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => Msg::UpstreamUnreachable.err(),
        other => Msg::Transport.with(&[&truncate(&other.to_string(), 200)]),
    }
}

fn transport_io(e: &std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    // ureq reports its own timeouts inside the io::Error it hands the body reader.
    let ureq_timeout = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
    if ureq_timeout {
        return Msg::StreamSilent.err();
    }
    match e.kind() {
        TimedOut | WouldBlock => Msg::StreamSilent.err(),
        ConnectionRefused => Msg::UpstreamUnreachable.err(),
        _ => Msg::StreamBroke.err(),
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_uses_the_kernel_key_names() {
        let iac = TurnOptions {
            ros_invocation_id: "inv",
            cwd: "/w",
            preferred_language: Some("en"),
            model: Some(" m "),
            llm_api_key: Some("k"),
            user_id: Some("u"),
            candidate_presentation: Some(Presentation::Rich),
            mode: ExecutionMode {
                run_mode: Some(RunMode::Pipeline),
                pipeline_name: Some("selling"),
            },
            thinking: ThinkingMetadata {
                enabled: Some(true),
                effort: None,
                budget: Some(9),
            },
            cloud: CloudCredentials {
                access_key_id: Some("id"),
                region_id: Some("cn"),
                ..Default::default()
            },
            ..Default::default()
        };
        let m = iac_code_metadata(&iac, &Turn::New);
        assert_eq!(m["iac_code_model"], "m");
        assert_eq!(m["iac_code_api_key"], "k");
        assert_eq!(m["user_id"], "u");
        assert_eq!(m["candidatePresentation"], "rich-v1");
        assert_eq!(m["run_mode"], "pipeline");
        assert_eq!(m["cleanupOnly"], false);
        assert_eq!(m["pipeline_name"], "selling");
        assert_eq!(m["thinking"], json!({"enabled": true, "budget": 9}));
        assert_eq!(m["alibaba_cloud_region_id"], "cn");
        assert!(m.get("alibaba_cloud_security_token").is_none());
        // An answer carries the execution's mode, not the request's.
        let answer = Turn::Answer {
            task_id: "t",
            extra: None,
            mode: ExecutionMode {
                run_mode: Some(RunMode::Normal),
                pipeline_name: None,
            },
        };
        let m = iac_code_metadata(&iac, &answer);
        assert_eq!(m["run_mode"], "normal");
        assert!(m.get("pipeline_name").is_none());
    }

    #[test]
    fn no_run_mode_is_sent_when_the_client_gave_none() {
        let iac = TurnOptions {
            cwd: "/w",
            ..Default::default()
        };
        let m = iac_code_metadata(&iac, &Turn::New);
        assert!(m.get("run_mode").is_none(), "{m}");
        assert!(m.get("pipeline_name").is_none(), "{m}");
    }

    #[test]
    fn a_new_turn_and_an_answer_are_one_message_shape_and_only_the_answer_names_the_task() {
        let iac = TurnOptions {
            cwd: "/w",
            ros_invocation_id: "inv",
            preferred_language: Some("en"),
            ..Default::default()
        };
        let parts = [json!({"text": "hi"})];
        let turn = user_message("m1", &parts, "ctx", &iac, Turn::New);
        assert_eq!(
            turn,
            json!({"messageId": "m1", "role": "ROLE_USER", "parts": parts, "contextId": "ctx",
                   "metadata": {"iac_code": iac_code_metadata(&iac, &Turn::New)}})
        );
        let answer = Turn::Answer {
            task_id: "task-1",
            extra: Some(json!({"inputResponse": {"value": "v"}})),
            mode: ExecutionMode::default(),
        };
        let m = user_message("m2", &parts, "ctx", &iac, answer);
        assert_eq!(m["taskId"], "task-1");
        assert_eq!(
            m["metadata"]["iac_code"]["inputResponse"],
            json!({"value": "v"})
        );
        assert_eq!(m["metadata"]["iac_code"]["cwd"], "/w");
        assert!(m["metadata"]["iac_code"].get("run_mode").is_none());
    }

    #[test]
    fn rpc_errors_and_garbage_map_to_spec_codes() {
        use crate::error::Code;
        assert_eq!(
            parse_rpc(b"not json").unwrap_err().code,
            Code::A2aProtocolError
        );
        assert_eq!(
            parse_rpc(br#"{"jsonrpc":"2.0"}"#).unwrap_err().code,
            Code::A2aProtocolError
        );
        let e = parse_rpc(br#"{"error":{"code":-32001,"message":"Task is already working."}}"#)
            .unwrap_err();
        assert_eq!(e.code, Code::A2aExecutionFailed);
        assert!(parse_rpc(br#"{"result":{"task":{}}}"#).is_ok());
    }
}
