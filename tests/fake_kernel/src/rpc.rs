//! JSON-RPC 2.0: the envelope, the method table, and every method but `SendStreamingMessage`
//! (in `send`).

use crate::http::respond;
use crate::{State, Task};
use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn rpc_error(req: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": req.get("id").cloned().unwrap_or(Value::Null), "error": {"code": code, "message": message}})
}

pub(crate) fn rpc_result(req: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
}

pub(crate) fn rpc(state: &Arc<State>, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    if req["jsonrpc"] != "2.0" || req.get("id").is_none() {
        return respond(conn, 400, &rpc_error(req, -32600, "Invalid Request"));
    }
    match req["method"].as_str().unwrap_or("") {
        "GetTask" => get_task(state, conn, req),
        "CancelTask" => cancel_task(state, conn, req),
        "SubscribeToTask" => subscribe(state, conn, req),
        "SendStreamingMessage" => crate::send::send_streaming(state, conn, req),
        "SendMessage" => crate::send::send_unary(state, conn, req),
        _ => respond(conn, 200, &rpc_error(req, -32601, "Method not found")),
    }
}

/// A task as `GetTask` and `CancelTask` return it, with its pending waits.
fn task_json(t: &Task) -> Value {
    let mut iac = json!({});
    if let Some(input) = &t.input {
        iac["input"] = input.clone();
        let all: Vec<Value> = std::iter::once(input).chain(&t.side).cloned().collect();
        iac["pendingPermissions"] = Value::Array(all);
    }
    json!({"id": t.id, "contextId": t.context, "status": {"state": t.state}, "metadata": {"iac_code": iac}})
}

fn get_task(state: &State, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let id = req["params"]["id"].as_str().unwrap_or("");
    let mut tasks = state.tasks.lock().unwrap();
    crate::wind_down(state, &mut tasks);
    match tasks.get(id) {
        Some(t) => {
            // As the A2A SDK keeps it: the messages of the task's streams, newest last, the last
            // `historyLength` of them when given.
            let mut v = task_json(t);
            let mut history = history_of(&t.log.lock().unwrap());
            if let Some(n) = req["params"]["historyLength"].as_u64() {
                history.drain(..history.len().saturating_sub(n as usize));
            }
            if !history.is_empty() {
                v["history"] = Value::Array(history);
            }
            respond(conn, 200, &rpc_result(req, v))
        }
        None => respond(conn, 200, &rpc_error(req, -32001, "Task not found")),
    }
}

/// `SubscribeToTask`: for a working task, the task as it is now (its history holds the user
/// message and every agent message streamed so far), then each later item of its stream until
/// the turn ends; for any other task, the kernel's "not found" error.
fn subscribe(state: &State, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let id = req["params"]["id"].as_str().unwrap_or("");
    let found = state.tasks.lock().unwrap().get(id).cloned();
    let Some(task) = found.filter(|t| is_live(&t.state)) else {
        return respond(
            conn,
            200,
            &rpc_error(req, -32001, "Task not found or not streaming"),
        );
    };
    let (mut snapshot, mut seen) = {
        let log = task.log.lock().unwrap();
        let mut t = task_json(&task);
        t["history"] = Value::Array(history_of(&log));
        (t, log.len())
    };
    snapshot["status"]["state"] = json!("TASK_STATE_WORKING");
    let mut out = conn;
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
    )?;
    let frame = |result: &Value| {
        format!(
            "data: {}\n\n",
            json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
        )
    };
    out.write_all(frame(&json!({"task": snapshot})).as_bytes())?;
    let until = Instant::now() + Duration::from_secs(600);
    while Instant::now() < until {
        let fresh: Vec<Value> = task.log.lock().unwrap()[seen..].to_vec();
        seen += fresh.len();
        for item in fresh
            .into_iter()
            .filter(|i| i.get(crate::send::HISTORY_ONLY).is_none())
        {
            out.write_all(frame(&item).as_bytes())?;
            let st = item
                .pointer("/statusUpdate/status/state")
                .and_then(Value::as_str)
                .unwrap_or("TASK_STATE_WORKING");
            if !is_live(st) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn is_live(state: &str) -> bool {
    matches!(state, "TASK_STATE_WORKING" | "TASK_STATE_SUBMITTED")
}

/// The user message and every agent message a task's streams carried so far.
fn history_of(log: &[Value]) -> Vec<Value> {
    // In the order the task saw them: its first message, the agent's messages and the answers.
    log.iter()
        .flat_map(|i| {
            let first = i.pointer("/task/history").and_then(Value::as_array);
            let agent = i.pointer("/statusUpdate/status/message");
            let answer = i.get(crate::send::HISTORY_ONLY);
            first
                .into_iter()
                .flatten()
                .chain(agent)
                .chain(answer)
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Marks the task cancelled; the stream playing it notices and ends with `TASK_STATE_CANCELED`.
fn cancel_task(state: &State, conn: &TcpStream, req: &Value) -> std::io::Result<()> {
    let id = req["params"]["id"].as_str().unwrap_or("");
    let until = Instant::now() + Duration::from_secs(60);
    let stalled =
        || state.stall_cancels.load(Ordering::SeqCst) || state.hang_all.load(Ordering::SeqCst);
    while stalled() && Instant::now() < until {
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
        Some(t) if state.slow_cancels.load(Ordering::SeqCst) > 0 => {
            let ms = state.slow_cancels.load(Ordering::SeqCst);
            t.cancel_at
                .get_or_insert(Instant::now() + Duration::from_millis(ms));
            let v = task_json(t);
            respond(conn, 200, &rpc_result(req, v))
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
