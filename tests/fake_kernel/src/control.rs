//! What a test changes from outside the protocol: gates that hold a script, the record of requests
//! and faults (a kernel that lost its tasks, refuses answers, hangs on or ignores `CancelTask`).
//! In-process tests call the `FakeKernel` methods; the standalone binary serves the same under
//! `/__control/` (not recorded, no token needed): `open?gate=G`, `requests`, `forget`,
//! `hang?on=1|0`.

use crate::http::respond;
use crate::{FakeKernel, Fault, State};
use serde_json::{json, Value};
use std::net::TcpStream;
use std::sync::atomic::Ordering;

impl FakeKernel {
    /// Lets every script waiting on `Step::Gate(gate)` go on.
    pub fn open(&self, gate: &str) {
        open_gate(&self.state, gate);
    }

    /// Simulates a kernel that lost every task and session.
    pub fn forget_everything(&self) {
        forget(&self.state);
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

    /// The next `method` call is answered with the JSON-RPC `error` object instead (a kernel
    /// having trouble, or refusing for a reason of its own).
    pub fn fail_next_rpc(&self, method: &str, error: Value) {
        self.fail_rpc_after(method, 0, error);
    }

    /// As `fail_next_rpc`, once `skip` calls of `method` have gone through.
    pub fn fail_rpc_after(&self, method: &str, skip: usize, error: Value) {
        let body = json!({"jsonrpc": "2.0", "id": null, "error": error});
        self.add_fault(method, skip, 200, body);
    }

    /// The next request to the extension `path` is answered with `status` and `body` instead.
    pub fn fail_next_http(&self, path: &str, status: u16, body: Value) {
        self.add_fault(path, 0, status, body);
    }

    fn add_fault(&self, key: &str, skip: usize, status: u16, body: Value) {
        self.state.faults.lock().unwrap().push(Fault {
            key: key.to_string(),
            skip,
            status,
            body,
        });
    }

    /// Every context gets a new iac-code session at its next message (a kernel that lost its
    /// context-to-session links, which the adapter must not take silently).
    pub fn renew_sessions(&self) {
        self.state.sessions.lock().unwrap().clear();
    }

    /// While set, the reply to an answer the kernel took waits (at most 60 s).
    pub fn hold_answers(&self, on: bool) {
        self.state.hold_answers.store(on, Ordering::SeqCst);
    }

    /// How many answers to input waits the kernel took (each runs its tool once).
    pub fn accepted_answers(&self) -> u64 {
        self.state.accepted_answers.load(Ordering::SeqCst)
    }

    /// While set, `CancelTask` calls hang without an answer (a hung kernel).
    pub fn stall_cancels(&self, on: bool) {
        self.state.stall_cancels.store(on, Ordering::SeqCst);
    }

    /// While set, the kernel hangs: new tasks stream one text item and then nothing, `CancelTask`
    /// gets no answer (at most 60 s). Served as `POST /__control/hang?on=1|0` too.
    pub fn hang_all(&self, on: bool) {
        self.state.hang_all.store(on, Ordering::SeqCst);
    }

    /// From now on a cancelled task keeps working for `ms` before it stops (0: at once).
    pub fn slow_cancels(&self, ms: u64) {
        self.state.slow_cancels.store(ms, Ordering::SeqCst);
    }

    /// While set, `CancelTask` is answered but the task keeps working.
    pub fn ignore_cancels(&self, on: bool) {
        self.state.ignore_cancels.store(on, Ordering::SeqCst);
    }
}

/// The fault waiting for this request, if any: `(status, body)`, the JSON-RPC id filled in.
pub(crate) fn take_fault(state: &State, path: &str, body: &Value) -> Option<(u16, Value)> {
    let key = match path {
        "/" => body["method"].as_str().unwrap_or(""),
        other => other,
    };
    let mut faults = state.faults.lock().unwrap();
    let i = faults.iter().position(|f| f.key == key)?;
    if faults[i].skip > 0 {
        faults[i].skip -= 1;
        return None;
    }
    let Fault {
        status,
        body: mut reply,
        ..
    } = faults.remove(i);
    if path == "/" {
        reply["id"] = body["id"].clone();
    }
    Some((status, reply))
}

fn open_gate(state: &State, gate: &str) {
    state.gates.lock().unwrap().insert(gate.to_string());
    state.gate_cv.notify_all();
}

fn forget(state: &State) {
    state.tasks.lock().unwrap().clear();
    state.sessions.lock().unwrap().clear();
}

/// Serves `/health` and the `/__control/` endpoints, which need no token; `None` for any other
/// route.
pub(crate) fn serve_open_route(
    state: &State,
    conn: &TcpStream,
    method: &str,
    path: &str,
    query: &str,
) -> Option<std::io::Result<()>> {
    Some(match (method, path) {
        ("GET", "/health") => respond(conn, 200, &json!({"status": "healthy"})),
        ("POST", "/__control/open") => {
            open_gate(state, query.strip_prefix("gate=").unwrap_or(""));
            respond(conn, 200, &json!({"ok": true}))
        }
        ("GET", "/__control/requests") => {
            let all = state.requests.lock().unwrap().clone();
            respond(conn, 200, &Value::Array(all))
        }
        ("POST", "/__control/hang") => {
            let on = query == "on=1";
            state.hang_all.store(on, Ordering::SeqCst);
            respond(conn, 200, &json!({"ok": true, "hang": on}))
        }
        ("POST", "/__control/forget") => {
            forget(state);
            respond(conn, 200, &json!({"ok": true}))
        }
        _ => return None,
    })
}
