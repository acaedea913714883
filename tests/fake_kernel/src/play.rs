//! Plays a script onto an open SSE response: one function per kind of `Step`. Before every step,
//! and while a step waits, a cancelled task ends the stream with `TASK_STATE_CANCELED`.

use crate::scenarios::working_text;
use crate::script::Step;
use crate::{Continuation, State};
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the `$…` placeholders of a script stand for in this stream, and the JSON-RPC id.
pub(crate) struct Vars {
    /// The task's log of stream items (`SubscribeToTask` and `GetTask` history read it).
    pub(crate) log: Arc<std::sync::Mutex<Vec<Value>>>,
    pub(crate) task: String,
    pub(crate) ctx: String,
    pub(crate) session: String,
    pub(crate) answer: String,
    pub(crate) id: Value,
}

type Out<'a> = &'a TcpStream;

/// Whether the stream goes on after a step.
#[derive(PartialEq)]
pub(crate) enum Next {
    Continue,
    Stop,
}

pub(crate) fn play(
    state: &Arc<State>,
    out: &mut Out,
    vars: &Vars,
    script: &[Step],
) -> std::io::Result<()> {
    for step in script {
        if cancelled(state, &vars.task) {
            return send_cancelled(out, vars);
        }
        if play_step(state, out, vars, step)? == Next::Stop {
            break;
        }
    }
    Ok(())
}

fn play_step(state: &Arc<State>, out: &mut Out, vars: &Vars, step: &Step) -> std::io::Result<Next> {
    match step {
        Step::Item(v) => item(state, out, vars, v),
        Step::Status {
            state: st,
            iac,
            text,
        } => agent_status(state, out, vars, st, iac, text.as_deref()),
        Step::Sleep(ms) => sleep(state, out, vars, *ms),
        Step::Gate(name) | Step::HoldTask(name) => gate(state, vars, name),
        Step::Hang => hang(state, out, vars),
        Step::Input {
            envelope,
            allow,
            deny,
            answer,
        } => {
            let next = Continuation {
                allow: allow.clone(),
                deny: deny.clone(),
                answer: answer.clone(),
            };
            input_wait(state, out, vars, envelope, next)
        }
        Step::SideWaits { envelopes, then } => side_waits(state, out, vars, envelopes, then),
        Step::Die => {
            set_state(state, &vars.task, "TASK_STATE_FAILED");
            out.shutdown(std::net::Shutdown::Both)?;
            Ok(Next::Stop)
        }
        Step::Garbage => {
            out.write_all(b"data: {this is not json\n\n")?;
            Ok(Next::Continue)
        }
        Step::RpcError(code, msg) => rpc_error(state, out, vars, *code, msg),
        Step::Raw(bytes) => raw(out, vars, bytes),
        Step::Numbered { count, gap_ms } => numbered(state, out, vars, *count, *gap_ms),
        Step::Flood(count) => flood(out, vars, *count),
        Step::PipelineLog(ev) => {
            if let Some(t) = state.tasks.lock().unwrap().get_mut(&vars.task) {
                t.pipeline.push(crate::pipeline::kept(ev, vars));
            }
            Ok(Next::Continue)
        }
    }
}

/// Replaces the `$…` placeholders in every string; `$NOW` is the emit time in microseconds since
/// the epoch, for latency measurements.
pub(crate) fn subst(v: &Value, vars: &Vars) -> Value {
    match v {
        Value::String(s) if s.contains("$NOW") => {
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

/// One SSE event carrying a JSON-RPC `result`.
pub(crate) fn emit(out: &mut Out, vars: &Vars, result: &Value) -> std::io::Result<()> {
    let result = subst(result, vars);
    vars.log.lock().unwrap().push(result.clone());
    let line = json!({"jsonrpc": "2.0", "id": vars.id, "result": result});
    let mut frame = b"data: ".to_vec();
    frame.extend(serde_json::to_vec(&line).unwrap());
    frame.extend(b"\n\n");
    out.write_all(&frame)
}

/// The task's state for `GetTask`; a cancelled task stays cancelled.
fn set_state(state: &State, task: &str, s: &str) {
    if let Some(t) = state.tasks.lock().unwrap().get_mut(task) {
        if t.state != "TASK_STATE_CANCELED" {
            t.state = s.into();
        }
    }
}

fn cancelled(state: &State, task: &str) -> bool {
    let mut tasks = state.tasks.lock().unwrap();
    crate::wind_down(state, &mut tasks);
    tasks
        .get(task)
        .is_none_or(|t| t.cancelled.load(Ordering::SeqCst))
}

fn send_cancelled(out: &mut Out, vars: &Vars) -> std::io::Result<()> {
    emit(
        out,
        vars,
        &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX", "status": {"state": "TASK_STATE_CANCELED"}}}),
    )
}

/// `send_cancelled`, and the stream ends.
fn stop_cancelled(out: &mut Out, vars: &Vars) -> std::io::Result<Next> {
    send_cancelled(out, vars)?;
    Ok(Next::Stop)
}

/// A recorded or literal `result`; an ending status also becomes the task's state, before the
/// item is sent (as the A2A SDK saves the task before the client sees the event: a client that
/// reacts to the end at once finds the task ended).
fn item(state: &State, out: &mut Out, vars: &Vars, v: &Value) -> std::io::Result<Next> {
    crate::pipeline::log_streamed(state, vars, v);
    if let Some(st) = v
        .pointer("/statusUpdate/status/state")
        .and_then(Value::as_str)
    {
        if !matches!(st, "TASK_STATE_WORKING" | "TASK_STATE_SUBMITTED") {
            set_state(state, &vars.task, st);
        }
    }
    emit(out, vars, v)?;
    Ok(Next::Continue)
}

fn agent_status(
    state: &State,
    out: &mut Out,
    vars: &Vars,
    st: &str,
    iac: &Value,
    text: Option<&str>,
) -> std::io::Result<Next> {
    let mut status = json!({"state": st});
    if let Some(t) = text {
        status["message"] = json!({"messageId": "$TASK-message", "contextId": "$CTX", "taskId": "$TASK", "role": "ROLE_AGENT", "parts": [{"text": t}]});
    }
    let mut iac = iac.clone();
    iac["iacCodeSessionId"] = json!("$SESSION");
    // An end is the task's state before the client sees it (see `item`).
    if st.ends_with("COMPLETED")
        || st.ends_with("FAILED")
        || st.ends_with("CANCELED")
        || st.ends_with("INPUT_REQUIRED")
    {
        set_state(state, &vars.task, st);
    }
    emit(
        out,
        vars,
        &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX", "status": status, "metadata": {"iac_code": iac}}}),
    )?;
    Ok(Next::Continue)
}

fn sleep(state: &State, out: &mut Out, vars: &Vars, ms: u64) -> std::io::Result<Next> {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        if cancelled(state, &vars.task) {
            return stop_cancelled(out, vars);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(Next::Continue)
}

/// Waits for the gate (or a cancel, which the next step notices).
pub(crate) fn gate(state: &State, vars: &Vars, name: &str) -> std::io::Result<Next> {
    let mut gates = state.gates.lock().unwrap();
    while !gates.contains(name) && !cancelled(state, &vars.task) {
        gates = state
            .gate_cv
            .wait_timeout(gates, Duration::from_millis(50))
            .unwrap()
            .0;
    }
    Ok(Next::Continue)
}

fn hang(state: &State, out: &mut Out, vars: &Vars) -> std::io::Result<Next> {
    while !cancelled(state, &vars.task) {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop_cancelled(out, vars)
}

/// The task waits for input; the stream ends, and the answer (`send`) picks from `next`.
fn input_wait(
    state: &State,
    out: &mut Out,
    vars: &Vars,
    envelope: &Value,
    next: Continuation,
) -> std::io::Result<Next> {
    let envelope = subst(envelope, vars);
    if let Some(t) = state.tasks.lock().unwrap().get_mut(&vars.task) {
        t.state = "TASK_STATE_INPUT_REQUIRED".into();
        t.input = Some(envelope.clone());
        t.continuation = Some(next);
    }
    crate::disk::save(state);
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
    Ok(Next::Stop)
}

/// Several permission waits at once; the task goes on with `then` once all are answered.
fn side_waits(
    state: &State,
    out: &mut Out,
    vars: &Vars,
    envelopes: &[Value],
    then: &[Step],
) -> std::io::Result<Next> {
    // As the kernel raises a permission inside a candidate sub-pipeline: the task stays WORKING,
    // the waits are in `input` / `pendingPermissions` of a `permission_requested` update.
    let all: Vec<Value> = envelopes.iter().map(|e| subst(e, vars)).collect();
    if let Some(t) = state.tasks.lock().unwrap().get_mut(&vars.task) {
        t.state = "TASK_STATE_WORKING".into();
        t.input = all.first().cloned();
        t.side = all[1..].to_vec();
        t.continuation = Some(Continuation {
            allow: then.to_vec(),
            deny: then.to_vec(),
            answer: then.to_vec(),
        });
    }
    let iac = json!({"input": all[0], "pendingPermissions": all, "iacCodeSessionId": "$SESSION",
                     "pipeline": {"eventType": "permission_requested", "scope": "candidate_step"}});
    emit(
        out,
        vars,
        &json!({"statusUpdate": {"taskId": "$TASK", "contextId": "$CTX",
        "status": {"state": "TASK_STATE_WORKING"}, "metadata": {"iac_code": iac}}}),
    )?;
    Ok(Next::Stop)
}

/// A JSON-RPC error inside the stream; the task fails.
fn rpc_error(
    state: &State,
    out: &mut Out,
    vars: &Vars,
    code: i64,
    msg: &str,
) -> std::io::Result<Next> {
    let line = json!({"jsonrpc": "2.0", "id": vars.id, "error": {"code": code, "message": msg}});
    set_state(state, &vars.task, "TASK_STATE_FAILED");
    out.write_all(format!("data: {line}\n\n").as_bytes())?;
    Ok(Next::Stop)
}

fn raw(out: &mut Out, vars: &Vars, bytes: &[u8]) -> std::io::Result<Next> {
    let text = String::from_utf8_lossy(bytes)
        .replace("$TASK", &vars.task)
        .replace("$CTX", &vars.ctx);
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(Next::Continue)
}

fn numbered(
    state: &Arc<State>,
    out: &mut Out,
    vars: &Vars,
    count: usize,
    gap_ms: u64,
) -> std::io::Result<Next> {
    for i in 0..count {
        if cancelled(state, &vars.task) {
            return stop_cancelled(out, vars);
        }
        let step = working_text(&format!("[{i}]"));
        play(state, out, vars, std::slice::from_ref(&step))?;
        std::thread::sleep(Duration::from_millis(gap_ms));
    }
    Ok(Next::Continue)
}

/// `count` text events rendered from one template and written 256 at a time.
fn flood(out: &mut Out, vars: &Vars, count: usize) -> std::io::Result<Next> {
    let template = json!({"jsonrpc": "2.0", "id": vars.id, "result": subst(&json!({"statusUpdate": {
        "taskId": "$TASK", "contextId": "$CTX", "status": {"state": "TASK_STATE_WORKING",
        "message": {"messageId": "$TASK-message", "contextId": "$CTX", "taskId": "$TASK", "role": "ROLE_AGENT",
        "parts": [{"text": "@@TEXT@@"}]}}, "metadata": {"iac_code": {"iacCodeSessionId": "$SESSION"}}}}), vars)})
    .to_string();
    let (head, tail) = template.split_once("@@TEXT@@").unwrap();
    let mut buf = Vec::with_capacity(256 * (template.len() + 16));
    for i in 0..count {
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
    Ok(Next::Continue)
}
