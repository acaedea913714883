//! `SendStreamingMessage`: check the request, find the context's session, then either start a new
//! task (a user message) or take an answer to the task's input wait, and stream what follows.

use crate::http::respond;
use crate::play::{emit, play, Vars};
use crate::rpc::{rpc_error, rpc_result};
use crate::scenarios::scenario;
use crate::script::Step;
use crate::{Continuation, State, Task};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A log entry that is history only (an answer the task took), never streamed.
pub(crate) const HISTORY_ONLY: &str = "historyOnly";

/// A JSON-RPC error the kernel would answer with: code and message.
type Refusal = (i64, &'static str);

/// How an accepted call goes on.
enum Accepted {
    /// Stream `first` (the submitted task or the received answer), then play `script`.
    Play {
        task: String,
        script: Vec<Step>,
        answer: String,
        first: Value,
    },
    /// One of several side waits answered while others remain: acknowledge it, still waiting.
    Acknowledge(Value),
}

pub(crate) fn send_streaming(
    state: &Arc<State>,
    conn: &TcpStream,
    req: &Value,
) -> std::io::Result<()> {
    let m = &req["params"]["message"];
    if let Err(e) = check_request(req) {
        return respond(conn, 200, &rpc_error(req, -32602, e));
    }
    let ctx = m["contextId"].as_str().unwrap().to_string();
    let session = session_kept(state, &ctx);
    let accepted = match m["taskId"].as_str() {
        Some(task_id) => take_answer(state, m, task_id, &ctx),
        None => start_task(state, m, &ctx),
    };
    if m["taskId"].is_string() && accepted.is_ok() {
        crate::disk::save(state);
    }
    match accepted {
        Err((code, message)) => respond(conn, 200, &rpc_error(req, code, message)),
        Ok(Accepted::Acknowledge(first)) => acknowledge(conn, req, &first),
        Ok(Accepted::Play {
            task,
            script,
            answer,
            first,
        }) => {
            let vars = play_vars(state, req, task, ctx, session, answer);
            if m["taskId"].is_string() && hold_while_asked(state) {
                // The caller may be gone by now; the task runs on regardless, as a kernel's does.
                play_detached(state, &vars, &first, &script);
                return Ok(());
            }
            stream(state, conn, &vars, &first, &script)
        }
    }
}

/// `FakeKernel::hold_answers`: the answer is taken, its reply waits (bounded); `true` when it
/// was held.
fn hold_while_asked(state: &State) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut held = false;
    while state.hold_answers.load(Ordering::SeqCst) && std::time::Instant::now() < until {
        held = true;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    held
}

/// `SendMessage` (unary), as the kernel takes a pipeline's side-wait answer: only an answer to a
/// waiting task; the task runs on in the background (its items go to the task's log, which
/// `SubscribeToTask` and `GetTask` read), and the reply is the acknowledgement.
pub(crate) fn send_unary(state: &Arc<State>, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let m = &req["params"]["message"];
    if let Err(e) = check_request(req) {
        return respond(conn, 200, &rpc_error(req, -32602, e));
    }
    let ctx = m["contextId"].as_str().unwrap().to_string();
    let Some(task_id) = m["taskId"].as_str() else {
        return respond(
            conn,
            200,
            &rpc_error(req, -32004, "This fake takes only answers unary"),
        );
    };
    let session = session_kept(state, &ctx);
    let accepted = take_answer(state, m, task_id, &ctx);
    if accepted.is_ok() {
        crate::disk::save(state);
    }
    match accepted {
        Err((code, message)) => respond(conn, 200, &rpc_error(req, code, message)),
        Ok(Accepted::Acknowledge(first)) => respond(conn, 200, &rpc_result(req, first)),
        Ok(Accepted::Play {
            task,
            script,
            answer,
            first,
        }) => {
            let vars = play_vars(state, req, task, ctx, session, answer);
            respond(conn, 200, &rpc_result(req, first.clone()))?;
            let state = state.clone();
            std::thread::spawn(move || play_detached(&state, &vars, &first, &script));
            Ok(())
        }
    }
}

/// Plays a continuation nobody streams: into a loopback socket whose other end is drained.
fn play_detached(state: &Arc<State>, vars: &Vars, first: &Value, script: &[Step]) {
    let Ok(listener) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return;
    };
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    let Ok(mut reader) = TcpStream::connect(addr) else {
        return;
    };
    let Ok((writer, _)) = listener.accept() else {
        return;
    };
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let _ = stream(state, &writer, vars, first, script);
}

/// The message shape and configuration the kernel accepts.
fn check_request(req: &Value) -> Result<(), &'static str> {
    check_message(&req["params"]["message"])?;
    if req["params"]["configuration"]["acceptedOutputModes"] != json!(["text/plain"]) {
        return Err("configuration.acceptedOutputModes");
    }
    Ok(())
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

/// The context's iac-code session, made on its first message.
fn session_for(state: &State, ctx: &str) -> String {
    state
        .sessions
        .lock()
        .unwrap()
        .entry(ctx.to_string())
        .or_insert_with(|| format!("session-{}", state.counter.fetch_add(1, Ordering::SeqCst)))
        .clone()
}

/// The context's session, kept on disk when it is new (a persisting fake: `disk`).
fn session_kept(state: &State, ctx: &str) -> String {
    let known = state.sessions.lock().unwrap().contains_key(ctx);
    let session = session_for(state, ctx);
    if !known {
        crate::disk::save(state);
    }
    session
}

/// A user message: a new task in the context, running the scenario its text names.
fn start_task(state: &State, m: &Value, ctx: &str) -> Result<Accepted, Refusal> {
    let mut tasks = state.tasks.lock().unwrap();
    crate::wind_down(state, &mut tasks);
    if tasks
        .values()
        .any(|t| t.context == ctx && t.state == "TASK_STATE_WORKING")
    {
        return Err((-32603, "Task is already working."));
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
    let name = if state.hang_all.load(Ordering::SeqCst) {
        "hang"
    } else {
        name
    };
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
            context: ctx.to_string(),
            scenario: name.to_string(),
            state: "TASK_STATE_WORKING".into(),
            input: None,
            side: Vec::new(),
            continuation: None,
            cancelled: Arc::new(AtomicBool::new(false)),
            pipeline: Vec::new(),
            log: Arc::default(),
            cancel_at: None,
        },
    );
    let first = json!({"task": {"id": id, "contextId": ctx, "status": {"state": "TASK_STATE_SUBMITTED"},
        "history": [m]}});
    Ok(Accepted::Play {
        task: id,
        script,
        answer: String::new(),
        first,
    })
}

/// An answer to the task's input wait: checked like the kernel checks it, it picks the
/// continuation (or, with side waits left, only moves on to the next wait).
fn take_answer(state: &State, m: &Value, task_id: &str, ctx: &str) -> Result<Accepted, Refusal> {
    if state.reject_answers.load(Ordering::SeqCst) {
        return Err((-32603, "The kernel is restarting; try again."));
    }
    let mut tasks = state.tasks.lock().unwrap();
    let task = tasks.get_mut(task_id).ok_or((-32001, "Task not found"))?;
    if task.context != ctx {
        return Err((-32602, "contextId does not match the task"));
    }
    bring_answered_wait_forward(task, m);
    let (Some(input), Some(continuation)) = (task.input.clone(), task.continuation.clone()) else {
        return Err((
            -32602,
            "input_response_mismatch: the task is not waiting for input",
        ));
    };
    let (script, answer, via) = continuation_for(m, task_id, &input, continuation)?;
    // As the A2A SDK keeps it (`TaskManager.update_with_message`): the answer joins the task's
    // history, in its place; streams never carry it.
    task.log.lock().unwrap().push(json!({ HISTORY_ONLY: m }));
    let first = json!({"statusUpdate": {"taskId": task_id, "contextId": ctx, "status": {"state": "TASK_STATE_WORKING"},
        "metadata": {"iac_code": {"inputReceived": {"kind": input["kind"], "inputId": input["inputId"], "toolUseId": input["toolUseId"], "via": via}}}}});
    if !task.side.is_empty() {
        task.input = Some(task.side.remove(0));
        return Ok(Accepted::Acknowledge(first));
    }
    task.input = None;
    task.continuation = None;
    task.state = "TASK_STATE_WORKING".into();
    state.accepted_answers.fetch_add(1, Ordering::SeqCst);
    Ok(Accepted::Play {
        task: task_id.to_string(),
        script,
        answer,
        first,
    })
}

/// With side waits pending, the answer names which one it answers: that one becomes `input`.
fn bring_answered_wait_forward(task: &mut Task, m: &Value) {
    let answered = m["parts"][0]["data"]["inputId"].as_str().unwrap_or("");
    if let Some(i) = task.side.iter().position(|w| w["inputId"] == answered) {
        let w = task.side.remove(i);
        task.side
            .insert(0, task.input.replace(w).unwrap_or(Value::Null));
    }
}

/// The steps after the answer, the answer text for `$ANSWER`, and how it was received.
fn continuation_for(
    m: &Value,
    task_id: &str,
    input: &Value,
    next: Continuation,
) -> Result<(Vec<Step>, String, &'static str), Refusal> {
    let parts = m["parts"].as_array().unwrap();
    if input["kind"] == "permission" {
        return match permission_decision(parts, task_id, input)? {
            "allow_once" => Ok((next.allow, String::new(), "permission")),
            "deny" => Ok((next.deny, String::new(), "permission")),
            _ => Err((-32602, "invalid decision")),
        };
    }
    let text = parts
        .iter()
        .filter_map(|p| p["text"].as_str())
        .collect::<String>();
    if text.trim().is_empty() {
        return Err((-32602, "an answer text is required"));
    }
    Ok((next.answer, text, "answer"))
}

/// A permission answer must be exactly one data part with exactly the kernel's keys, naming the
/// pending wait; returns its decision ("" when it is not a string).
fn permission_decision<'a>(
    parts: &'a [Value],
    task_id: &str,
    input: &Value,
) -> Result<&'a str, Refusal> {
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
        return Err((-32602, "input_response_mismatch"));
    }
    Ok(data["decision"].as_str().unwrap_or(""))
}

/// The one-event stream that acknowledges a side wait's answer.
fn acknowledge(conn: &TcpStream, req: &Value, first: &Value) -> std::io::Result<()> {
    let mut out = conn;
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    )?;
    let line = json!({"jsonrpc": "2.0", "id": req["id"], "result": first});
    out.write_all(format!("data: {line}\n\n").as_bytes())
}

/// The SSE response: `first`, then the script.
fn stream(
    state: &Arc<State>,
    conn: &TcpStream,
    vars: &Vars,
    first: &Value,
    script: &[Step],
) -> std::io::Result<()> {
    let mut out = conn;
    out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")?;
    let script = match script.split_first() {
        Some((Step::HoldTask(name), rest)) => {
            crate::play::gate(state, vars, name)?;
            rest
        }
        _ => script,
    };
    emit(&mut out, vars, first)?;
    play(state, &mut out, vars, script)
}

/// What a script played for `task` needs: its log, ids and the answer it was given.
fn play_vars(
    state: &State,
    req: &Value,
    task: String,
    ctx: String,
    session: String,
    answer: String,
) -> Vars {
    let log = state
        .tasks
        .lock()
        .unwrap()
        .get(&task)
        .map(|t| t.log.clone())
        .unwrap_or_default();
    Vars {
        log,
        task,
        ctx,
        session,
        answer,
        id: req["id"].clone(),
    }
}
