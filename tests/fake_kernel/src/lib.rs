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
//!
//! Files, in the order a request meets them: `http` (the server, routing, auth), `rpc` (JSON-RPC
//! methods other than streaming), `send` (`SendStreamingMessage`: a new task or an answer),
//! `play` (streams a script), `pipeline` (the pipeline-state extension); the scripts themselves:
//! `script` (the `Step` language), `scenarios` (the named scripts), `captures` (recorded traffic);
//! `control` (what a test changes from outside: gates, recorded requests, faults).

mod captures;
mod control;
mod disk;
mod http;
mod pipeline;
mod play;
mod rpc;
mod scenarios;
mod script;
mod send;

pub use captures::{normal_turn, permission_flow};
pub use scenarios::{permission_envelope, pipe, pipeline_flow, scenario};
pub use script::Step;

use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Microseconds on a monotonic clock shared by everything in this process (its zero is the first
/// call): the time each request arrived (`atUs` in [`FakeKernel::requests`]), comparable with the
/// timestamps a bench takes on the same clock.
pub fn clock_us() -> u64 {
    static ZERO: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ZERO.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_micros() as u64
}

/// The steps that follow an input wait, picked by the answer.
#[derive(Clone)]
struct Continuation {
    allow: Vec<Step>,
    deny: Vec<Step>,
    answer: Vec<Step>,
}

#[derive(Clone)]
struct Task {
    id: String,
    context: String,
    /// The scenario the task's user message picked (kept on disk with a wait: `disk`).
    scenario: String,
    state: String,
    input: Option<Value>,
    /// Further permission waits pending beside `input` (pipeline side waits).
    side: Vec<Value>,
    continuation: Option<Continuation>,
    cancelled: Arc<AtomicBool>,
    pipeline: Vec<Value>,
    /// Every stream item of the task so far, for `SubscribeToTask` (its snapshot and its tail).
    log: Arc<Mutex<Vec<Value>>>,
    /// A cancel being wound down (`slow_cancels`): the task still works until then.
    cancel_at: Option<std::time::Instant>,
}

/// Cancels whose wind-down time has come take effect (`FakeKernel::slow_cancels`). A kernel
/// without slow cancels skips the scan: it runs under the task lock at every step of every task,
/// which would make a kernel serving hundreds of streams quadratic.
fn wind_down(state: &State, tasks: &mut HashMap<String, Task>) {
    if state.slow_cancels.load(Ordering::SeqCst) == 0 {
        return;
    }
    let now = std::time::Instant::now();
    for t in tasks.values_mut() {
        if t.cancel_at.is_some_and(|at| at <= now) {
            t.cancel_at = None;
            t.cancelled.store(true, Ordering::SeqCst);
            t.state = "TASK_STATE_CANCELED".into();
            t.input = None;
            t.continuation = None;
        }
    }
}

/// A one-shot fault: after `skip` requests for `key` pass, the next gets `status` and `body`.
struct Fault {
    key: String,
    skip: usize,
    status: u16,
    body: Value,
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
    /// A hung kernel (the soak's fault): while set, every new task streams one text item and then
    /// hangs whatever its message asked for, and `CancelTask` calls get no answer (at most 60 s).
    hang_all: AtomicBool,
    /// A kernel that ignores `CancelTask` (answers, but the task keeps working).
    ignore_cancels: AtomicBool,
    /// Milliseconds a cancelled task keeps working (and its context busy) before it stops, as
    /// the real kernel winds a cancelled task down.
    slow_cancels: AtomicU64,
    /// One-shot faults: the next request for the key (a JSON-RPC method, or a path) is answered
    /// with this HTTP status and body instead.
    faults: Mutex<Vec<Fault>>,
    /// While set, an accepted answer's reply waits (the kernel took it; the caller has not
    /// heard back yet).
    hold_answers: AtomicBool,
    /// Answers taken to an input wait: each one runs what the wait held back (the tool).
    accepted_answers: AtomicU64,
    /// Where sessions and waiting tasks are kept across processes (`--persist`), if anywhere.
    persist: Option<std::path::PathBuf>,
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
        FakeKernel::start_persisted(port, token, None)
    }

    /// As `start_on`, keeping sessions and waiting tasks in `persist` (read back first when it
    /// exists): a fake started again on the same file goes on where the last one was.
    pub fn start_persisted(
        port: u16,
        token: Option<String>,
        persist: Option<std::path::PathBuf>,
    ) -> FakeKernel {
        let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind fake kernel");
        // A deep accept queue, like uvicorn's, so bursts of runs are not slowed by SYN retries.
        // SAFETY: listen(2) again on our own socket only changes its backlog.
        unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 4096) };
        let port = listener.local_addr().unwrap().port();
        let mut state = State {
            token,
            persist,
            ..Default::default()
        };
        disk::load(&mut state);
        let state = Arc::new(state);
        let s = state.clone();
        std::thread::spawn(move || http::accept(&s, &listener));
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

    /// Every request received: `{method, path, headers, body}`.
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The requests received after the first `n` (cheaper than `requests` on a long run).
    pub fn requests_since(&self, n: usize) -> Vec<Value> {
        let all = self.state.requests.lock().unwrap();
        all.get(n..).unwrap_or_default().to_vec()
    }

    /// How many requests were received so far.
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().unwrap().len()
    }

    /// JSON-RPC calls of `method`, in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["body"]["method"] == method)
            .collect()
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
