//! The script language: a scenario is a list of `Step`s that `play` turns into a stream.

use serde_json::Value;

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
    /// As a script's first step only: the stream's first item (the submitted task, which names
    /// the task id) waits for the gate, so a test can act while the adapter knows no task yet.
    HoldTask(String),
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
