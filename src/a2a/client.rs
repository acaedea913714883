//! The blocking JSON-RPC client (over ureq): the calls the adapter makes on the kernel, each
//! bounded in time, each failure mapped to a spec code ([`super::failure`]).

use super::failure::{backup_not_ready, check_status, transport, truncate};
use super::reader::A2aStream;
use super::rpc::{parse_rpc, rpc_of, Rpc, TASK_NOT_FOUND};
use super::transport::LeanConnector;
use crate::error::{Error, Msg};
use serde_json::{json, Value};
use std::time::Duration;

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

/// The JSON-RPC body of `SendStreamingMessage` for `message`, serialized in one go into a buffer
/// sized for it: the message is borrowed, never cloned into a request tree (an 11 MiB user message
/// is this one copy, not three).
pub(crate) fn streaming_body(message: &Value) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Body<'a> {
        jsonrpc: &'static str,
        id: String,
        method: &'static str,
        params: Params<'a>,
    }
    #[derive(serde::Serialize)]
    struct Params<'a> {
        message: &'a Value,
        configuration: Value,
    }
    let body = Body {
        jsonrpc: "2.0",
        id: crate::ids::uuid_v4(),
        method: "SendStreamingMessage",
        params: Params {
            message,
            configuration: json!({"acceptedOutputModes": ["text/plain"]}),
        },
    };
    let mut out = Vec::with_capacity(text_bytes(message) + 4096);
    let _ = serde_json::to_writer(&mut out, &body);
    out
}

/// The bytes of the message's text parts (a size hint for its serialization).
fn text_bytes(message: &Value) -> usize {
    message["parts"].as_array().map_or(0, |parts| {
        parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .map(|t| t.len() + t.len() / 16)
            .sum()
    })
}

/// How long `CancelTask` may take in all (connect, send, answer).
pub(crate) const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// An agent whose connections free their buffers while the kernel is silent.
fn lean_agent(config: ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(
        config,
        LeanConnector,
        ureq::unversioned::resolver::DefaultResolver::default(),
    )
}

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
            // The input buffer is every read's size (32 KiB: a fast stream is read in few reads,
            // figure 7); the output buffer only carries the request out (8 KiB writes). Both
            // are freed while the upstream is silent (`transport`): a held run keeps neither.
            .input_buffer_size(32 * 1024)
            .output_buffer_size(8 * 1024)
            .max_idle_connections_per_host(64)
            .build();
        let control = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(CANCEL_TIMEOUT))
            .build();
        A2aClient {
            agent: lean_agent(config),
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

    /// A client for one run: its own connections (not the shared pool), so that [`stop`] can
    /// shut them down from another thread and wake a read blocked on a kernel that never answers.
    /// `CancelTask` and the other control calls keep the shared, short-deadline agent.
    ///
    /// [`stop`]: A2aClient::stop
    pub(crate) fn for_run(&self) -> A2aClient {
        let agent = lean_agent(self.agent.config().clone());
        A2aClient {
            agent,
            ..self.clone()
        }
    }

    /// Shuts down every connection of this client's agent (a run's own, see [`for_run`]): a call
    /// blocked on one returns an error at once; later calls fail. Idempotent.
    ///
    /// [`for_run`]: A2aClient::for_run
    pub(crate) fn stop(&self) {
        self.agent.clone().shutdown();
    }

    /// `SendStreamingMessage`: the stream of task updates for `message`.
    pub(crate) fn send_streaming(&self, message: &Value) -> Result<A2aStream, Error> {
        self.send_streaming_body(streaming_body(message))
    }

    /// `SendStreamingMessage` with its JSON-RPC body already serialized ([`streaming_body`]), so
    /// that the caller can free the message before the bytes go out.
    pub(crate) fn send_streaming_body(&self, body: Vec<u8>) -> Result<A2aStream, Error> {
        self.open_stream(body)
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
        self.open_stream(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// Sends a streaming JSON-RPC call and returns its stream of results.
    fn open_stream(&self, body: Vec<u8>) -> Result<A2aStream, Error> {
        let started = std::time::Instant::now();
        let resp = self
            .post("/")
            .header("Accept", "text/event-stream")
            .send(body);
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

    /// Whether the kernel answers `GET /health` with 200 now (bounded like a cancel).
    pub(crate) fn healthy(&self) -> bool {
        let mut req = self.control.get(format!("{}/health", self.base));
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        req.call().is_ok_and(|r| r.status().as_u16() == 200)
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
