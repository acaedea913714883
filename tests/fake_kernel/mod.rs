//! A scripted fake of the iac-code A2A kernel, honest to the upstream contract.
//!
//! It speaks A2A 1.0 JSON-RPC over HTTP on 127.0.0.1 (`SendStreamingMessage`, `GetTask`,
//! `CancelTask`, `SubscribeToTask`), the two iac-code extensions (`/iac-code/session/ensure-restored`,
//! `/iac-code/pipeline/state`) and `/health`, and it checks what it is sent the way the kernel does:
//! the `A2A-Version` header, the bearer token, method names, message shape, the exact permission
//! answer, one working task per context. Each new user message picks a scripted scenario by its text
//! (`scenario:<name>`, else `normal`); the `normal` and `permission` scenarios replay the real
//! kernel's recorded traffic from `tests/data/`.
//!
//! Tests drive it in-process; `cargo run --example fake-kernel -- --port P` runs it standalone (for
//! the JavaScript conformance suite and the benches). Control endpoints under `/__control/` open
//! gates, list recorded requests and simulate a kernel that lost its tasks.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// One step of a scripted stream.
#[derive(Clone, Debug)]
pub enum Step {
    /// A JSON-RPC `result` sent as is after `$TASK`, `$CTX`, `$SESSION`, `$ANSWER` substitution.
    Item(Value),
    /// A `statusUpdate` in `state` with `metadata.iac_code = iac` and optional agent text.
    Status {
        state: &'static str,
        iac: Value,
        text: Option<String>,
    },
    Sleep(u64),
    /// Blocks until the test opens the gate (`FakeKernel::open`).
    Gate(String),
    /// Blocks until `CancelTask`, then sends `TASK_STATE_CANCELED`.
    Hang,
    /// Ends the stream with an input wait; the answer picks the continuation.
    Input {
        envelope: Value,
        allow: Vec<Step>,
        deny: Vec<Step>,
        answer: Vec<Step>,
    },
    /// Closes the connection mid-stream without ending the task.
    Die,
    /// Sends data that is not JSON.
    Garbage,
    /// Sends a JSON-RPC error in the stream.
    RpcError(i64, &'static str),
    /// Writes raw bytes (to test SSE framing).
    Raw(Vec<u8>),
    /// Records a pipeline event for `/iac-code/pipeline/state` without streaming it.
    PipelineLog(Value),
    /// Agent text `[0]`, `[1]`, … `count` times, `gap_ms` apart (cheap to build for load tests).
    Numbered {
        count: usize,
        gap_ms: u64,
    },
    /// Several permission waits at once (`input` plus `pendingPermissions[]`); every one must be
    /// answered before the task goes on with `then`.
    SideWaits {
        envelopes: Vec<Value>,
        then: Vec<Step>,
    },
    /// `count` agent text events `t0 `, `t1 `, … as fast as the socket takes them: frames are
    /// rendered once and written 256 at a time, so the fake is never the bottleneck of a bench.
    Flood(usize),
}

#[derive(Clone)]
struct Task {
    id: String,
    context: String,
    state: String,
    input: Option<Value>,
    /// Further permission waits pending beside `input` (pipeline side waits).
    side: Vec<Value>,
    continuation: Option<(Vec<Step>, Vec<Step>, Vec<Step>)>,
    cancelled: Arc<AtomicBool>,
    pipeline: Vec<Value>,
}

#[derive(Default)]
struct State {
    tasks: Mutex<HashMap<String, Task>>,
    requests: Mutex<Vec<Value>>,
    gates: Mutex<HashSet<String>>,
    gate_cv: Condvar,
    sessions: Mutex<HashMap<String, String>>,
    token: Option<String>,
    overrides: Mutex<HashMap<String, Vec<Step>>>,
    counter: AtomicU64,
    reject_answers: AtomicBool,
    /// A hung kernel: `CancelTask` calls get no answer while set (at most 60 s).
    stall_cancels: AtomicBool,
    /// A kernel that ignores `CancelTask` (answers, but the task keeps working).
    ignore_cancels: AtomicBool,
}

pub struct FakeKernel {
    pub url: String,
    pub port: u16,
    state: Arc<State>,
}

impl FakeKernel {
    pub fn start() -> FakeKernel {
        FakeKernel::start_on(0, None)
    }

    pub fn with_token(token: &str) -> FakeKernel {
        FakeKernel::start_on(0, Some(token.to_string()))
    }

    pub fn start_on(port: u16, token: Option<String>) -> FakeKernel {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind fake kernel");
        // A deep accept queue, like uvicorn's, so bursts of runs are not slowed by SYN retries.
        // SAFETY: listen(2) again on our own socket only changes its backlog.
        unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 4096) };
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            token,
            ..Default::default()
        });
        let s = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(&s, conn);
                });
            }
        });
        FakeKernel {
            url: format!("http://127.0.0.1:{port}"),
            port,
            state,
        }
    }

    /// Uses `script` for user messages whose text is `scenario:<name>`.
    pub fn script(&self, name: &str, script: Vec<Step>) {
        self.state
            .overrides
            .lock()
            .unwrap()
            .insert(name.to_string(), script);
    }

    pub fn open(&self, gate: &str) {
        open_gate(&self.state, gate);
    }

    /// Every request received: `{method, path, headers, body}`.
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// JSON-RPC calls of `method`, in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["body"]["method"] == method)
            .collect()
    }

    /// Simulates a kernel that lost every task and session.
    pub fn forget_everything(&self) {
        self.state.tasks.lock().unwrap().clear();
        self.state.sessions.lock().unwrap().clear();
    }

    /// Moves a task to another context (an identity the adapter must refuse).
    pub fn swap_context(&self, task_id: &str) {
        if let Some(t) = self.state.tasks.lock().unwrap().get_mut(task_id) {
            t.context = "agui-0000000000000000000000000000000000000000".into();
        }
    }

    /// While set, every answer to an input wait is refused with a JSON-RPC error.
    pub fn reject_answers(&self, on: bool) {
        self.state.reject_answers.store(on, Ordering::SeqCst);
    }

    /// While set, `CancelTask` calls hang without an answer (a hung kernel).
    pub fn stall_cancels(&self, on: bool) {
        self.state.stall_cancels.store(on, Ordering::SeqCst);
    }

    /// While set, `CancelTask` is answered but the task keeps working.
    pub fn ignore_cancels(&self, on: bool) {
        self.state.ignore_cancels.store(on, Ordering::SeqCst);
    }

    pub fn task_state(&self, task_id: &str) -> Option<String> {
        self.state
            .tasks
            .lock()
            .unwrap()
            .get(task_id)
            .map(|t| t.state.clone())
    }
}

fn open_gate(state: &State, gate: &str) {
    state.gates.lock().unwrap().insert(gate.to_string());
    state.gate_cv.notify_all();
}

// ---- HTTP ---------------------------------------------------------------------------------

struct Req {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

fn read_request(conn: &TcpStream) -> std::io::Result<Req> {
    let mut r = BufReader::new(conn);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Req {
        method,
        path,
        headers,
        body,
    })
}

fn respond(mut conn: &TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(body).unwrap();
    write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        bytes.len()
    )?;
    conn.write_all(&bytes)?;
    conn.flush()
}

fn serve(state: &Arc<State>, conn: TcpStream) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let req = read_request(&conn)?;
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    if !path.starts_with("/__control") {
        let mut headers = json!({});
        for k in ["a2a-version", "authorization", "content-type", "accept"] {
            if let Some(v) = req.headers.get(k) {
                headers[k] = json!(v);
            }
        }
        state.requests.lock().unwrap().push(json!({
            "method": req.method, "path": req.path, "headers": headers, "body": body
        }));
    }
    match (req.method.as_str(), path) {
        ("GET", "/health") => return respond(&conn, 200, &json!({"status": "healthy"})),
        ("POST", "/__control/open") => {
            open_gate(state, query.strip_prefix("gate=").unwrap_or(""));
            return respond(&conn, 200, &json!({"ok": true}));
        }
        ("GET", "/__control/requests") => {
            let all = state.requests.lock().unwrap().clone();
            return respond(&conn, 200, &Value::Array(all));
        }
        ("POST", "/__control/forget") => {
            state.tasks.lock().unwrap().clear();
            state.sessions.lock().unwrap().clear();
            return respond(&conn, 200, &json!({"ok": true}));
        }
        _ => {}
    }
    if let Some(token) = &state.token {
        if req.headers.get("authorization") != Some(&format!("Bearer {token}")) {
            return respond(&conn, 401, &json!({"error": "Unauthorized"}));
        }
    }
    match (req.method.as_str(), path) {
        ("POST", "/iac-code/session/ensure-restored") => {
            let known = body["sessionId"]
                .as_str()
                .is_some_and(|s| state.sessions.lock().unwrap().values().any(|v| v == s));
            if known {
                respond(&conn, 200, &json!({"status": "current"}))
            } else {
                respond(&conn, 404, &json!({"status": "not_found"}))
            }
        }
        ("GET", "/iac-code/pipeline/state") => pipeline_state(state, &conn, query),
        ("POST", "/") => {
            if req.headers.get("a2a-version").map(String::as_str) != Some("1.0") {
                return respond(
                    &conn,
                    400,
                    &rpc_error(&body, -32600, "A2A-Version 1.0 header required"),
                );
            }
            if !req
                .headers
                .get("content-type")
                .is_some_and(|c| c.starts_with("application/json"))
            {
                return respond(
                    &conn,
                    400,
                    &rpc_error(&body, -32600, "Content-Type must be application/json"),
                );
            }
            rpc(state, &conn, &body)
        }
        _ => respond(&conn, 404, &json!({"error": "Not Found"})),
    }
}

fn rpc_error(req: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": req.get("id").cloned().unwrap_or(Value::Null), "error": {"code": code, "message": message}})
}

fn rpc_result(req: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
}

fn task_json(t: &Task) -> Value {
    let mut iac = json!({});
    if let Some(input) = &t.input {
        iac["input"] = input.clone();
        let all: Vec<Value> = std::iter::once(input).chain(&t.side).cloned().collect();
        iac["pendingPermissions"] = Value::Array(all);
    }
    json!({"id": t.id, "contextId": t.context, "status": {"state": t.state}, "metadata": {"iac_code": iac}})
}

fn rpc(state: &Arc<State>, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    if req["jsonrpc"] != "2.0" || req.get("id").is_none() {
        return respond(conn, 400, &rpc_error(req, -32600, "Invalid Request"));
    }
    let params = &req["params"];
    match req["method"].as_str().unwrap_or("") {
        "GetTask" => {
            let id = params["id"].as_str().unwrap_or("");
            match state.tasks.lock().unwrap().get(id) {
                Some(t) => respond(conn, 200, &rpc_result(req, task_json(t))),
                None => respond(conn, 200, &rpc_error(req, -32001, "Task not found")),
            }
        }
        "CancelTask" => {
            let id = params["id"].as_str().unwrap_or("");
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while state.stall_cancels.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            let mut tasks = state.tasks.lock().unwrap();
            if state.ignore_cancels.load(Ordering::SeqCst) {
                let v = tasks.get(id).map(task_json).unwrap_or(Value::Null);
                return respond(conn, 200, &rpc_result(req, v));
            }
            match tasks.get_mut(id) {
                None => respond(conn, 200, &rpc_error(req, -32001, "Task not found")),
                Some(t)
                    if matches!(
                        t.state.as_str(),
                        "TASK_STATE_CANCELED" | "TASK_STATE_FAILED" | "TASK_STATE_COMPLETED"
                    ) =>
                {
                    respond(
                        conn,
                        200,
                        &rpc_error(req, -32002, "Task cannot be canceled"),
                    )
                }
                Some(t) => {
                    t.cancelled.store(true, Ordering::SeqCst);
                    t.state = "TASK_STATE_CANCELED".into();
                    t.input = None;
                    t.continuation = None;
                    let v = task_json(t);
                    drop(tasks);
                    state.gate_cv.notify_all();
                    respond(conn, 200, &rpc_result(req, v))
                }
            }
        }
        "SubscribeToTask" => respond(
            conn,
            200,
            &rpc_error(req, -32001, "Task not found or not streaming"),
        ),
        "SendStreamingMessage" => send_streaming(state, conn, req),
        "SendMessage" => respond(conn, 200, &rpc_error(req, -32004, "This fake only streams")),
        _ => respond(conn, 200, &rpc_error(req, -32601, "Method not found")),
    }
}

fn check_message(m: &Value) -> Result<(), &'static str> {
    if m["messageId"].as_str().is_none_or(str::is_empty) {
        return Err("message.messageId is required");
    }
    if m["role"] != "ROLE_USER" {
        return Err("message.role must be ROLE_USER");
    }
    let parts = m["parts"]
        .as_array()
        .ok_or("message.parts must be an array")?;
    if parts.is_empty() {
        return Err("message.parts must not be empty");
    }
    for p in parts {
        let ok = p["text"].is_string()
            || (p["data"].is_object() && p["mediaType"] == "application/json")
            || (p["raw"].is_string() && p["mediaType"].is_string());
        if !ok {
            return Err("unsupported part");
        }
    }
    if !m["metadata"]["iac_code"]["cwd"].is_string() {
        return Err("metadata.iac_code.cwd is required");
    }
    let ctx = m["contextId"].as_str().ok_or("contextId is required")?;
    if !(ctx.starts_with("agui-") && ctx.len() == 45) {
        return Err("contextId is not an adapter-derived id");
    }
    Ok(())
}

fn send_streaming(state: &Arc<State>, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let m = &req["params"]["message"];
    if let Err(e) = check_message(m) {
        return respond(conn, 200, &rpc_error(req, -32602, e));
    }
    if req["params"]["configuration"]["acceptedOutputModes"] != json!(["text/plain"]) {
        return respond(
            conn,
            200,
            &rpc_error(req, -32602, "configuration.acceptedOutputModes"),
        );
    }
    let ctx = m["contextId"].as_str().unwrap().to_string();
    let session = state
        .sessions
        .lock()
        .unwrap()
        .entry(ctx.clone())
        .or_insert_with(|| format!("session-{}", state.counter.fetch_add(1, Ordering::SeqCst)))
        .clone();
    let (task_id, script, answer_text, first) = if let Some(task_id) = m["taskId"].as_str() {
        // An answer to an input wait.
        if state.reject_answers.load(Ordering::SeqCst) {
            return respond(
                conn,
                200,
                &rpc_error(req, -32603, "The kernel is restarting; try again."),
            );
        }
        let mut tasks = state.tasks.lock().unwrap();
        let Some(task) = tasks.get_mut(task_id) else {
            return respond(conn, 200, &rpc_error(req, -32001, "Task not found"));
        };
        if task.context != ctx {
            return respond(
                conn,
                200,
                &rpc_error(req, -32602, "contextId does not match the task"),
            );
        }
        // With side waits pending, the answer names which one it answers.
        let answered = m["parts"][0]["data"]["inputId"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(i) = task
            .side
            .iter()
            .position(|w| w["inputId"] == answered.as_str())
        {
            let w = task.side.remove(i);
            task.side
                .insert(0, task.input.replace(w).unwrap_or(Value::Null));
        }
        let (Some(input), Some((allow, deny, answer))) =
            (task.input.clone(), task.continuation.clone())
        else {
            return respond(
                conn,
                200,
                &rpc_error(
                    req,
                    -32602,
                    "input_response_mismatch: the task is not waiting for input",
                ),
            );
        };
        let parts = m["parts"].as_array().unwrap();
        let (script, text, received) = if input["kind"] == "permission" {
            let data = &parts[0]["data"];
            let keys: HashSet<&str> = data
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let want: HashSet<&str> = [
                "schemaVersion",
                "kind",
                "requestTaskId",
                "inputId",
                "toolUseId",
                "decision",
            ]
            .into();
            let exact = parts.len() == 1
                && keys == want
                && data["schemaVersion"] == 1
                && data["kind"] == "permission"
                && data["requestTaskId"] == task_id
                && data["inputId"] == input["inputId"]
                && data["toolUseId"] == input["toolUseId"];
            if !exact {
                return respond(
                    conn,
                    200,
                    &rpc_error(req, -32602, "input_response_mismatch"),
                );
            }
            match data["decision"].as_str() {
                Some("allow_once") => (allow, String::new(), "permission"),
                Some("deny") => (deny, String::new(), "permission"),
                _ => return respond(conn, 200, &rpc_error(req, -32602, "invalid decision")),
            }
        } else {
            let text = parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<String>();
            if text.trim().is_empty() {
                return respond(
                    conn,
                    200,
                    &rpc_error(req, -32602, "an answer text is required"),
                );
            }
            (answer, text, "answer")
        };
        let first = json!({"statusUpdate": {"taskId": task_id, "contextId": ctx, "status": {"state": "TASK_STATE_WORKING"},
            "metadata": {"iac_code": {"inputReceived": {"kind": input["kind"], "inputId": input["inputId"], "toolUseId": input["toolUseId"], "via": received}}}}});
        if !task.side.is_empty() {
            // Other waits remain: acknowledge this answer and end the stream, still waiting.
            task.input = Some(task.side.remove(0));
            let id = req["id"].clone();
            drop(tasks);
            let mut out = conn;
            out.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
            )?;
            let line = json!({"jsonrpc": "2.0", "id": id, "result": first});
            return out.write_all(format!("data: {line}\n\n").as_bytes());
        }
        task.input = None;
        task.continuation = None;
        task.state = "TASK_STATE_WORKING".into();
        (task_id.to_string(), script, text, vec![first])
    } else {
        let mut tasks = state.tasks.lock().unwrap();
        if tasks
            .values()
            .any(|t| t.context == ctx && t.state == "TASK_STATE_WORKING")
        {
            return respond(
                conn,
                200,
                &rpc_error(req, -32603, "Task is already working."),
            );
        }
        let text: String = m["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect();
        let name = text
            .strip_prefix("scenario:")
            .map(|s| s.split_whitespace().next().unwrap_or(""))
            .unwrap_or("normal");
        let script = state
            .overrides
            .lock()
            .unwrap()
            .get(name)
            .cloned()
            .or_else(|| scenario(name))
            .unwrap_or_else(|| vec![Step::RpcError(-32602, "unknown scenario")]);
        let id = format!("task-{:08}", state.counter.fetch_add(1, Ordering::SeqCst));
        tasks.insert(
            id.clone(),
            Task {
                id: id.clone(),
                context: ctx.clone(),
                state: "TASK_STATE_WORKING".into(),
                input: None,
                side: Vec::new(),
                continuation: None,
                cancelled: Arc::new(AtomicBool::new(false)),
                pipeline: Vec::new(),
            },
        );
        let first = json!({"task": {"id": id, "contextId": ctx, "status": {"state": "TASK_STATE_SUBMITTED"},
            "history": [m]}});
        (id, script, String::new(), vec![first])
    };
    let mut out = conn;
    out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")?;
    let vars = Vars {
        task: task_id,
        ctx,
        session,
        answer: answer_text,
        id: req["id"].clone(),
    };
    for item in first {
        emit(&mut out, &vars, &item)?;
    }
    play(state, &mut out, &vars, &script)
}

struct Vars {
    task: String,
    ctx: String,
    session: String,
    answer: String,
    id: Value,
}

fn subst(v: &Value, vars: &Vars) -> Value {
    match v {
        Value::String(s) if s.contains("$NOW") => {
            // Microseconds since the epoch at emit time, for latency measurements.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros();
            subst(&Value::String(s.replace("$NOW", &now.to_string())), vars)
        }
        Value::String(s) => Value::String(
            s.replace("$TASK", &vars.task)
                .replace("$CTX", &vars.ctx)
                .replace("$SESSION", &vars.session)
                .replace("$ANSWER", &vars.answer),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| subst(x, vars)).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), subst(x, vars))).collect())
        }
        other => other.clone(),
    }
}

fn emit(out: &mut &TcpStream, vars: &Vars, result: &Value) -> std::io::Result<()> {
    let line = json!({"jsonrpc": "2.0", "id": vars.id, "result": subst(result, vars)});
    let mut frame = b"data: ".to_vec();
    frame.extend(serde_json::to_vec(&line).unwrap());
    frame.extend(b"\n\n");
    out.write_all(&frame)
}

fn set_state(state: &State, task: &str, s: &str) {
    if let Some(t) = state.tasks.lock().unwrap().get_mut(task) {
        if t.state != "TASK_STATE_CANCELED" {
            t.state = s.into();
        }
    }
}

fn cancelled(state: &State, task: &str) -> bool {
    state
        .tasks
        .lock()
        .unwrap()
        .get(task)
        .is_none_or(|t| t.cancelled.load(Ordering::SeqCst))
}

fn send_cancelled(out: &mut &TcpStream, vars: &Vars) -> std::io::Result<()> {
    emit(
        out,
        vars,
        &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX", "status": {"state": "TASK_STATE_CANCELED"}}}),
    )
}

fn play(
    state: &Arc<State>,
    out: &mut &TcpStream,
    vars: &Vars,
    script: &[Step],
) -> std::io::Result<()> {
    for step in script {
        if cancelled(state, &vars.task) {
            return send_cancelled(out, vars);
        }
        match step {
            Step::Item(v) => {
                log_pipeline(state, vars, v);
                emit(out, vars, v)?;
                if let Some(st) = v
                    .pointer("/statusUpdate/status/state")
                    .and_then(Value::as_str)
                {
                    if !matches!(st, "TASK_STATE_WORKING" | "TASK_STATE_SUBMITTED") {
                        set_state(state, &vars.task, st);
                    }
                }
            }
            Step::Status {
                state: st,
                iac,
                text,
            } => {
                let mut status = json!({"state": st});
                if let Some(t) = text {
                    status["message"] = json!({"messageId": "$TASK-message", "contextId": "$CTX", "taskId": "$TASK", "role": "ROLE_AGENT", "parts": [{"text": t}]});
                }
                let mut iac = iac.clone();
                iac["iacCodeSessionId"] = json!("$SESSION");
                emit(
                    out,
                    vars,
                    &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX", "status": status, "metadata": {"iac_code": iac}}}),
                )?;
                if st.ends_with("COMPLETED")
                    || st.ends_with("FAILED")
                    || st.ends_with("CANCELED")
                    || st.ends_with("INPUT_REQUIRED")
                {
                    set_state(state, &vars.task, st);
                }
            }
            Step::Sleep(ms) => {
                let until = std::time::Instant::now() + Duration::from_millis(*ms);
                while std::time::Instant::now() < until {
                    if cancelled(state, &vars.task) {
                        return send_cancelled(out, vars);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Step::Gate(name) => {
                let mut gates = state.gates.lock().unwrap();
                while !gates.contains(name) && !cancelled(state, &vars.task) {
                    gates = state
                        .gate_cv
                        .wait_timeout(gates, Duration::from_millis(50))
                        .unwrap()
                        .0;
                }
            }
            Step::Hang => {
                while !cancelled(state, &vars.task) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                return send_cancelled(out, vars);
            }
            Step::Input {
                envelope,
                allow,
                deny,
                answer,
            } => {
                let envelope = subst(envelope, vars);
                {
                    let mut tasks = state.tasks.lock().unwrap();
                    if let Some(t) = tasks.get_mut(&vars.task) {
                        t.state = "TASK_STATE_INPUT_REQUIRED".into();
                        t.input = Some(envelope.clone());
                        t.continuation = Some((allow.clone(), deny.clone(), answer.clone()));
                    }
                }
                let mut iac = json!({"input": envelope, "iacCodeSessionId": "$SESSION"});
                if envelope["kind"] == "permission" {
                    iac["permission"] = json!({"autoApproved": false, "pending": true, "toolUseId": envelope["toolUseId"], "toolName": envelope["toolName"]});
                }
                emit(
                    out,
                    vars,
                    &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX",
                    "status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "metadata": {"iac_code": iac}}}),
                )?;
                return Ok(());
            }
            Step::SideWaits { envelopes, then } => {
                let all: Vec<Value> = envelopes.iter().map(|e| subst(e, vars)).collect();
                if let Some(t) = state.tasks.lock().unwrap().get_mut(&vars.task) {
                    t.state = "TASK_STATE_INPUT_REQUIRED".into();
                    t.input = all.first().cloned();
                    t.side = all[1..].to_vec();
                    t.continuation = Some((then.clone(), then.clone(), then.clone()));
                }
                let iac = json!({"input": all[0], "pendingPermissions": all, "iacCodeSessionId": "$SESSION"});
                emit(
                    out,
                    vars,
                    &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX",
                    "status": {"state": "TASK_STATE_INPUT_REQUIRED"}, "metadata": {"iac_code": iac}}}),
                )?;
                return Ok(());
            }
            Step::Die => {
                set_state(state, &vars.task, "TASK_STATE_FAILED");
                return out.shutdown(std::net::Shutdown::Both);
            }
            Step::Garbage => out.write_all(b"data: {this is not json\n\n")?,
            Step::RpcError(code, msg) => {
                let line = json!({"jsonrpc": "2.0", "id": vars.id, "error": {"code": code, "message": msg}});
                out.write_all(format!("data: {line}\n\n").as_bytes())?;
                set_state(state, &vars.task, "TASK_STATE_FAILED");
                return Ok(());
            }
            Step::Raw(bytes) => {
                let text = String::from_utf8_lossy(bytes)
                    .replace("$TASK", &vars.task)
                    .replace("$CTX", &vars.ctx);
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Step::Numbered { count, gap_ms } => {
                for i in 0..*count {
                    if cancelled(state, &vars.task) {
                        return send_cancelled(out, vars);
                    }
                    let step = working_text(&format!("[{i}]"));
                    play(state, out, vars, std::slice::from_ref(&step))?;
                    std::thread::sleep(Duration::from_millis(*gap_ms));
                }
            }
            Step::Flood(count) => {
                let template = json!({"jsonrpc": "2.0", "id": vars.id, "result": subst(&json!({"statusUpdate": {
                    "taskId": "$TASK", "contextId": "$CTX", "status": {"state": "TASK_STATE_WORKING",
                    "message": {"messageId": "$TASK-message", "contextId": "$CTX", "taskId": "$TASK", "role": "ROLE_AGENT",
                    "parts": [{"text": "@@TEXT@@"}]}}, "metadata": {"iac_code": {"iacCodeSessionId": "$SESSION"}}}}), vars)})
                .to_string();
                let (head, tail) = template.split_once("@@TEXT@@").unwrap();
                let mut buf = Vec::with_capacity(256 * (template.len() + 16));
                for i in 0..*count {
                    buf.extend_from_slice(b"data: ");
                    buf.extend_from_slice(head.as_bytes());
                    buf.extend_from_slice(format!("t{i} ").as_bytes());
                    buf.extend_from_slice(tail.as_bytes());
                    buf.extend_from_slice(b"\n\n");
                    if i % 256 == 255 {
                        out.write_all(&buf)?;
                        buf.clear();
                    }
                }
                out.write_all(&buf)?;
            }
            Step::PipelineLog(ev) => {
                if let Some(t) = state.tasks.lock().unwrap().get_mut(&vars.task) {
                    t.pipeline.push(subst(ev, vars));
                }
            }
        }
    }
    Ok(())
}

/// Streamed pipeline envelopes are also kept, as the kernel keeps them for recovery.
fn log_pipeline(state: &State, vars: &Vars, item: &Value) {
    let iac = item.pointer("/statusUpdate/metadata/iac_code");
    let single = iac.and_then(|i| i.get("pipeline")).into_iter();
    let batch = iac
        .and_then(|i| i.pointer("/pipelineBatch/events"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    let mut tasks = state.tasks.lock().unwrap();
    if let Some(t) = tasks.get_mut(&vars.task) {
        for ev in batch.chain(single) {
            let seq = ev["sequence"].as_u64();
            if !t.pipeline.iter().any(|e| e["sequence"].as_u64() == seq) {
                t.pipeline.push(subst(ev, vars));
            }
        }
    }
}

fn pipeline_state(state: &State, conn: &TcpStream, query: &str) -> std::io::Result<()> {
    let q: HashMap<&str, &str> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let tasks = state.tasks.lock().unwrap();
    let Some(t) = q.get("taskId").and_then(|id| tasks.get(*id)) else {
        return respond(conn, 404, &json!({"error": "A2A pipeline state not found"}));
    };
    if t.pipeline.is_empty() {
        return respond(conn, 404, &json!({"error": "A2A pipeline state not found"}));
    }
    let after: u64 = q
        .get("afterSequence")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let last = t
        .pipeline
        .iter()
        .filter_map(|e| e["sequence"].as_u64())
        .max()
        .unwrap_or(0);
    let events: Vec<Value> = t
        .pipeline
        .iter()
        .filter(|e| e["sequence"].as_u64().unwrap_or(0) > after)
        .cloned()
        .collect();
    let snapshot = json!({"schemaVersion": 1, "pipelineRunId": "pr-1", "taskId": t.id, "contextId": t.context,
        "status": "waiting_input", "lastSequence": last, "steps": []});
    respond(conn, 200, &json!({"snapshot": snapshot, "events": events}))
}

// ---- scenarios ----------------------------------------------------------------------------

const NORMAL_TURN: &str = include_str!("../data/normal-turn.a2a.sse");
const PERMISSION_FLOW: &str = include_str!("../data/permission-flow.a2a.jsonl");

/// The recorded stream with its ids replaced by placeholders (the first item, the submitted task,
/// is produced by the fake itself).
fn recorded(
    lines: impl Iterator<Item = String>,
    task: &str,
    ctx: &str,
    session: &str,
) -> Vec<Step> {
    lines
        .filter_map(|l| l.strip_prefix("data: ").map(String::from))
        .filter_map(|l| {
            let l = l
                .replace(task, "$TASK")
                .replace(ctx, "$CTX")
                .replace(session, "$SESSION");
            let v: Value = serde_json::from_str(&l).ok()?;
            Some(v["result"].clone())
        })
        .filter(|r| r.get("task").is_none())
        .map(Step::Item)
        .collect()
}

pub fn normal_turn() -> Vec<Step> {
    recorded(
        NORMAL_TURN.lines().map(String::from),
        "88b24f14-1984-4a52-9ab9-b44c1ac2ba2d",
        "bdd96997-fc99-4760-9d7c-64466b091e18",
        "44be09b7-2125-4b26-ba40-ae369498f999",
    )
}

/// The permission flow of the capture: run 1 up to the input wait, the resumed stream after it.
pub fn permission_flow() -> (Vec<Step>, Value, Vec<Step>) {
    let (task, ctx, session) = (
        "07195cb1-be1b-4aa4-93c0-53feadfa81e7",
        "agui-58633450475f377504ca56b46b5a293d95591ee7",
        "9d08fcfb-85c7-4bb8-9ec3-024ec4a1b37d",
    );
    let mut streams: Vec<Vec<String>> = vec![];
    let mut current_is_stream = false;
    for line in PERMISSION_FLOW.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "request" {
            current_is_stream = v["body"]["method"] == "SendStreamingMessage";
            if current_is_stream {
                streams.push(vec![]);
            }
        } else if current_is_stream {
            streams
                .last_mut()
                .unwrap()
                .push(v["line"].as_str().unwrap().to_string());
        }
    }
    let mut run1 = recorded(streams[0].clone().into_iter(), task, ctx, session);
    let Some(Step::Item(last)) = run1.pop() else {
        panic!("capture")
    };
    let envelope = last["statusUpdate"]["metadata"]["iac_code"]["input"].clone();
    let mut run2 = recorded(streams[1].clone().into_iter(), task, ctx, session);
    run2.remove(0); // inputReceived: the fake sends its own
    (run1, envelope, run2)
}

fn status(state: &'static str, iac: Value, text: Option<&str>) -> Step {
    Step::Status {
        state,
        iac,
        text: text.map(String::from),
    }
}

fn working_text(t: &str) -> Step {
    status("TASK_STATE_WORKING", json!({}), Some(t))
}

fn done() -> Step {
    status("TASK_STATE_INPUT_REQUIRED", json!({}), None)
}

fn tool(id: &str, st: &str, extra: Value) -> Step {
    let mut t = json!({"toolUseId": id, "name": "write_file", "status": st});
    if let (Some(o), Some(e)) = (t.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    status("TASK_STATE_WORKING", json!({"tool": t}), None)
}

pub fn permission_envelope(input_id: &str, tool_use: &str) -> Value {
    json!({"kind": "permission", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
           "inputId": input_id, "toolUseId": tool_use, "toolName": "write_file", "required": true,
           "title": "Change a workspace file", "purpose": "Write a file needed for the task.",
           "safeSummary": "write_file: hello.txt", "prompt": "Change a workspace file Allow once?",
           "options": [{"id": "allow_once", "label": "Allow once"}, {"id": "deny", "label": "Deny"}]})
}

fn denied_tail() -> Vec<Step> {
    vec![
        tool(
            "call_1",
            "failed",
            json!({"result": "Permission denied by the user."}),
        ),
        working_text("OK, I did not write the file."),
        done(),
    ]
}

/// A named scenario.
pub fn scenario(name: &str) -> Option<Vec<Step>> {
    Some(match name {
        "normal" => normal_turn(),
        "permission" => {
            let (perm_run1, perm_envelope, perm_run2) = permission_flow();
            let mut s = perm_run1;
            s.push(Step::Input { envelope: perm_envelope, allow: perm_run2, deny: denied_tail(), answer: vec![] });
            s
        }
        "permission-gated" => {
            let (perm_run1, perm_envelope, perm_run2) = permission_flow();
            let mut s = perm_run1;
            s.push(Step::Gate("interrupt".into()));
            s.push(Step::Input { envelope: perm_envelope, allow: perm_run2, deny: denied_tail(), answer: vec![] });
            s
        }
        "question" => vec![
            working_text("I need one detail. "),
            Step::Input {
                envelope: json!({"kind": "ask_user_question", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
                    "inputId": "ask-call_q", "toolUseId": "call_q", "required": true, "prompt": "Which region?", "allowFreeText": true,
                    "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]}),
                allow: vec![], deny: vec![],
                answer: vec![working_text("You chose: $ANSWER."), done()],
            },
        ],
        "selection" => vec![Step::Input {
            envelope: json!({"kind": "candidate_selection", "schemaVersion": 1, "requestTaskId": "$TASK", "contextId": "$CTX",
                "inputId": "input-sel-1", "required": true, "prompt": "Pick a plan",
                "options": [{"id": "0", "label": "Plan A"}, {"id": "1", "label": "Plan B"}]}),
            allow: vec![], deny: vec![],
            answer: vec![working_text("Selected $ANSWER."), done()],
        }],
        "reasoning" => vec![
            status("TASK_STATE_WORKING", json!({"thinking": {"type": "raw_thinking", "text": "Let me think. "}}), None),
            status("TASK_STATE_WORKING", json!({"thinking": {"type": "raw_thinking", "text": "Done."}}), None),
            working_text("Answer."),
            status("TASK_STATE_WORKING", json!({"usage": {"provider": "openai", "model": "m", "inputTokens": 3.0, "outputTokens": 2.0, "totalTokens": 5.0}}), None),
            done(),
        ],
        "tools-artifact" => vec![
            working_text("Writing. "),
            tool("call_9", "started", json!({})),
            tool("call_9", "input_complete", json!({"toolInput": {"path": "/w/a.txt"}})),
            tool("call_9", "progress", json!({"progress": 0.5})),
            status("TASK_STATE_WORKING", json!({"mcpProgress": {"server": "ros", "message": "halfway"}}), None),
            Step::Item(json!({"artifactUpdate": {"taskId": "$TASK", "contextId": "$CTX", "artifact": {"artifactId": "a1", "name": "a.txt",
                "parts": [{"url": "file:///w/a.txt", "mediaType": "text/plain"}]}, "lastChunk": true}})),
            tool("call_9", "completed", json!({"result": {"ok": true}})),
            working_text("Done."),
            status("TASK_STATE_COMPLETED", json!({}), None),
        ],
        "fail" => vec![working_text("Trying. "), status("TASK_STATE_FAILED", json!({}), Some("The model provider rejected the request."))],
        "rpc-error" => vec![Step::RpcError(-32603, "Internal error while running the task")],
        "die" => vec![working_text("Partial "), Step::Die],
        "garbage" => vec![working_text("Partial "), Step::Garbage],
        "hang" => vec![working_text("Working on it. "), Step::Hang],
        "silent" => vec![working_text("Thinking "), Step::Sleep(700), working_text("done."), done()],
        "mismatch" => vec![Step::Item(json!({"statusUpdate": {"taskId": "$TASK", "contextId": "agui-ffffffffffffffffffffffffffffffffffffffff",
            "status": {"state": "TASK_STATE_WORKING"}}}))],
        "framing" => vec![
            Step::Raw(b"data: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\r\ndata: \"result\":{\"statusUpdate\":{\"taskId\":\"$TASK\",\"contextId\":\"$CTX\",".to_vec()),
            Step::Sleep(20),
            Step::Raw("\"status\":{\"state\":\"TASK_STATE_WORKING\",\"message\":{\"messageId\":\"m\",\"role\":\"ROLE_AGENT\",\"parts\":[{\"text\":\"你好\"}]}}}}}\r\n\r\n: comment\r\n\r".as_bytes().to_vec()),
            Step::Raw(b"\n".to_vec()),
            done(),
        ],
        "pipeline" => pipeline_flow(),
        "side-waits" => {
            let side = |id: &str, tool: &str, cand: &str| {
                let mut e = permission_envelope(id, tool);
                e["scope"] = json!("candidate");
                e["subPipelineId"] = json!(cand);
                e
            };
            vec![
                working_text("Two candidates need approval. "),
                Step::SideWaits {
                    envelopes: vec![side("permission-c1", "call_c1", "c1"), side("permission-c2", "call_c2", "c2")],
                    then: vec![working_text("Both approved."), done()],
                },
            ]
        }
        "panic" => vec![working_text("before "), working_text("__iac_code_agui_test_panic__"), done()],
        "numbered" => (0..20).map(|i| working_text(&format!("[{i}]"))).chain([done()]).collect(),
        "slow-numbered" => vec![Step::Numbered { count: 100_000, gap_ms: 100 }, done()],
        // `count` text events whose text is `$NOW` (the fake's clock at emit time, µs), ~5 ms apart:
        // per-event latency through a proxy against direct (benches/pairs.mjs).
        n if n.starts_with("clock-") => (0..n["clock-".len()..].parse().ok()?)
            .flat_map(|_| [working_text("$NOW"), Step::Sleep(1)])
            .chain([done()])
            .collect(),
        n if n.starts_with("flood-") => vec![Step::Flood(n["flood-".len()..].parse().ok()?), done()],
        _ => return None,
    })
}

/// One pipeline envelope as the kernel streams it in `metadata.iac_code.pipeline`.
pub fn pipe(event_type: &str, seq: u64, extra: Value) -> Value {
    let mut env = json!({"eventType": event_type, "eventId": format!("ev-{seq}"), "sequence": seq,
                         "pipelineRunId": "pr-1", "scope": "pipeline", "data": {}});
    if let (Some(o), Some(e)) = (env.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    env
}

fn pipe_step(event_type: &str, seq: u64, extra: Value) -> Step {
    status(
        "TASK_STATE_WORKING",
        json!({"pipeline": pipe(event_type, seq, extra)}),
        None,
    )
}

fn pipe_batch(events: Vec<Value>) -> Step {
    status(
        "TASK_STATE_WORKING",
        json!({"pipelineBatch": {"events": events}}),
        None,
    )
}

/// A selling-style pipeline: requirements, two parallel candidates, a selection, then a deploy
/// step whose tool needs permission; events the client missed are only in the kernel's pipeline
/// state; the resumed stream replays an old event and old text.
pub fn pipeline_flow() -> Vec<Step> {
    let c = |id: &str| json!({"candidate": {"id": id}, "scope": "candidate"});
    let ctext = |id: &str, text: &str| json!({"candidate": {"id": id}, "candidateStep": {"id": "plan"}, "scope": "candidate", "data": {"text": text}});
    let cs = |id: &str, step: &str| json!({"candidate": {"id": id}, "candidateStep": {"id": step}, "scope": "candidate"});
    let run1 = vec![
        pipe_step(
            "pipeline_started",
            1,
            json!({"data": {"pipelineName": "selling"}}),
        ),
        pipe_step("step_started", 2, json!({"step": {"id": "requirements"}})),
        pipe_step(
            "text_delta",
            3,
            json!({"data": {"text": "Collecting requirements."}}),
        ),
        pipe_step("step_completed", 4, json!({"step": {"id": "requirements"}})),
        pipe_step("step_started", 5, json!({"step": {"id": "candidates"}})),
        pipe_step("sub_pipeline_started", 6, json!({"data": {"count": 2}})),
        pipe_batch(vec![
            pipe("candidate_started", 7, c("c1")),
            pipe("candidate_started", 8, c("c2")),
        ]),
        pipe_batch(vec![
            pipe("candidate_step_started", 9, cs("c1", "plan")),
            pipe("candidate_step_started", 10, cs("c2", "plan")),
        ]),
        pipe_step("text_delta", 11, ctext("c1", "Plan A: ECS")),
        pipe_step("text_delta", 12, ctext("c2", "Plan B: ACK")),
        pipe_step("text_delta", 11, ctext("c1", "Plan A: ECS")),
        pipe_step("text_delta", 13, ctext("c1", " with SLB")),
        pipe_step(
            "thinking_delta",
            14,
            json!({"data": {"text": "Comparing costs."}}),
        ),
        pipe_batch(vec![
            pipe("candidate_step_completed", 15, cs("c1", "plan")),
            pipe("candidate_step_completed", 16, cs("c2", "plan")),
        ]),
        pipe_batch(vec![
            pipe("candidate_completed", 17, c("c1")),
            pipe("candidate_completed", 18, c("c2")),
        ]),
        pipe_step("sub_pipeline_completed", 19, json!({})),
        pipe_step(
            "candidate_selected",
            20,
            json!({"data": {"candidateId": "c1"}}),
        ),
        pipe_step("step_completed", 21, json!({"step": {"id": "candidates"}})),
        pipe_step("step_started", 22, json!({"step": {"id": "deploy"}})),
        pipe_step(
            "tool_started",
            23,
            json!({"step": {"id": "deploy"}, "data": {"toolUseId": "call_d", "toolName": "ros_stack", "input": {"action": "create"}}}),
        ),
        pipe_step(
            "usage",
            24,
            json!({"data": {"provider": "openai", "model": "m", "inputTokens": 7, "outputTokens": 3, "totalTokens": 10}}),
        ),
        pipe_step("input_required", 25, json!({})),
        pipe_step("backup_committed", 26, json!({})),
        pipe_step("stack_progress", 27, json!({"data": {"percent": 10}})),
        Step::PipelineLog(pipe("stack_progress", 28, json!({"data": {"percent": 20}}))),
    ];
    let mut envelope = permission_envelope("permission-deploy", "call_d");
    envelope["toolName"] = json!("ros_stack");
    envelope["scope"] = json!("pipeline");
    let after_allow = vec![
        status(
            "TASK_STATE_WORKING",
            json!({}),
            Some("Collecting requirements."),
        ),
        pipe_step("stack_progress", 27, json!({"data": {"percent": 10}})),
        pipe_step("input_received", 29, json!({"step": {"id": "deploy"}})),
        pipe_step(
            "tool_result",
            30,
            json!({"data": {"toolUseId": "call_d", "result": "stack created"}}),
        ),
        pipe_step("text_delta", 31, json!({"data": {"text": "Deployed."}})),
        pipe_step("step_completed", 32, json!({"step": {"id": "deploy"}})),
        pipe_step("pipeline_completed", 33, json!({})),
        done(),
    ];
    let after_deny = vec![
        pipe_step(
            "tool_result",
            29,
            json!({"data": {"toolUseId": "call_d", "result": "denied", "isError": true}}),
        ),
        pipe_step("step_failed", 30, json!({"step": {"id": "deploy"}})),
        pipe_step(
            "pipeline_error",
            31,
            json!({"data": {"message": "Deployment was not approved."}}),
        ),
        done(),
    ];
    let mut s = run1;
    s.push(Step::Input {
        envelope,
        allow: after_allow,
        deny: after_deny,
        answer: vec![],
    });
    s
}
