//! Thread stacks are sized on purpose (src/http/dispatch.rs `RUN_STACK`, src/http/limits.rs
//! `CONNECTION_STACK`): the deep real paths fit on them in a debug build (whose frames are
//! larger than a release build's). An overflow would hit the guard page and kill the whole
//! process, so each test also checks that the adapter still serves afterwards.

use fake_kernel::{pipe, FakeKernel, Step};
use serde_json::{json, Value};
use test_support::*;

/// Nesting of the pipeline frame's data: with the envelope around it the frame is ~110 levels
/// deep, under serde_json's recursion limit (128), which bounds every JSON value we read.
const DEPTH: usize = 100;

/// A pipeline frame (a CUSTOM `candidate_completed`, its envelope and data reach the client)
/// whose data is `DEPTH` levels deep around a 2 MiB string.
fn deep_pipeline_frame() -> Value {
    let big = "x".repeat(2 * 1024 * 1024);
    let data = nested(DEPTH, json!({"marker": "deep-leaf", "text": big}));
    pipe(
        "candidate_completed",
        1,
        json!({"scope": "candidate",
               "step": {"id": "architecture_planning", "runId": "step-architecture_planning-1", "attempt": 1},
               "candidate": {"id": "c1", "runId": "c1-run-1", "index": 0, "attempt": 1},
               "data": {"result": data}}),
    )
}

fn working(iac: Value, text: Option<&str>) -> Step {
    Step::Status {
        state: "TASK_STATE_WORKING",
        iac,
        text: text.map(String::from),
    }
}

/// The fake kernel's question (`scenario:question`), answered with `answer`: a resumed run.
fn question_then(answer: Vec<Step>) -> Vec<Step> {
    vec![Step::Input {
        envelope: json!({"kind": "ask_user_question", "schemaVersion": 1, "requestTaskId": "$TASK",
            "contextId": "$CTX", "inputId": "ask-call_q", "toolUseId": "call_q", "required": true,
            "prompt": "Which region?", "allowFreeText": true,
            "options": [{"id": "cn-hangzhou", "label": "Hangzhou"}, {"id": "cn-beijing", "label": "Beijing"}]}),
        allow: vec![],
        deny: vec![],
        answer,
    }]
}

/// The thread's question answered (the first run ends at the interrupt): the resumed run.
fn resumed(a: &Adapter, thread: &str, first: Value) -> RunResult {
    let q = a.run(&first).interrupts()[0].clone();
    let pick = json!([{"interruptId": q["id"], "status": "resolved", "payload": {"selectedId": "cn-beijing"}}]);
    let mut resume = a.resume_request(thread, "r2", pick);
    resume["forwardedProps"] = first["forwardedProps"].clone();
    a.run(&resume)
}

fn nested(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(
        leaf,
        |inner, i| json!({ format!("level{i}"): inner, "n": i }),
    )
}

#[test]
fn a_large_deeply_nested_pipeline_frame_goes_through_the_projection_on_the_run_stack() {
    let k = FakeKernel::start();
    let frame = deep_pipeline_frame();
    k.script(
        "deep-pipe",
        vec![
            Step::Status {
                state: "TASK_STATE_WORKING",
                iac: json!({"pipeline": frame}),
                text: None,
            },
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ],
    );
    let a = Adapter::start(&k.url);
    let r = a.run(&pipeline_request(&a, "t-deep", "scenario:deep-pipe"));
    assert_deep_frame_reached_the_client(&r);
    // The process is alive and the next run is served.
    let r = a.run(&a.request("t-deep", "r2", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_panic_with_a_backtrace_is_caught_on_the_run_stack_and_answered() {
    let k = FakeKernel::start();
    let a = Adapter::start_with(
        &k.url,
        Options {
            envs: vec![("RUST_BACKTRACE".into(), "1".into())],
            ..Default::default()
        },
    );
    let r = a.run(&a.request("t-panic", "r1", "scenario:panic"));
    assert_eq!(r.types()[0], "RUN_STARTED");
    assert_eq!(r.last()["type"], "RUN_ERROR");
    // The hook symbolized the backtrace on the run's own stack before catch_unwind took over.
    let logs = a.logs();
    assert!(logs.contains("request handler panicked"), "{logs}");
    assert!(
        logs.contains("panic_if_asked"),
        "the backtrace names the panicking function: {logs}"
    );
    let r = a.run(&a.request("t-panic", "r2", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

/// A resumed run relays the answer's stream from other frames than a new turn
/// (`send_answers`, `read_to_end`): the deep frame fits there too.
#[test]
fn a_large_deeply_nested_pipeline_frame_after_an_answer_goes_through_the_projection_on_the_run_stack(
) {
    let k = FakeKernel::start();
    k.script(
        "deep-pipe-resumed",
        question_then(vec![
            working(json!({}), Some("Going on. ")),
            working(json!({"pipeline": deep_pipeline_frame()}), None),
            Step::Status {
                state: "TASK_STATE_INPUT_REQUIRED",
                iac: json!({}),
                text: None,
            },
        ]),
    );
    let a = Adapter::start(&k.url);
    let first = pipeline_request(&a, "t-deep-resumed", "scenario:deep-pipe-resumed");
    let r = resumed(&a, "t-deep-resumed", first);
    assert_deep_frame_reached_the_client(&r);
    let r = a.run(&a.request("t-deep-resumed", "r3", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

#[test]
fn a_panic_with_a_backtrace_after_an_answer_is_caught_on_the_run_stack_and_answered() {
    let k = FakeKernel::start();
    k.script(
        "panic-resumed",
        question_then(vec![
            working(json!({}), Some("before ")),
            working(json!({}), Some("__iac_code_agui_test_panic__")),
        ]),
    );
    let a = Adapter::start_with(
        &k.url,
        Options {
            envs: vec![("RUST_BACKTRACE".into(), "1".into())],
            ..Default::default()
        },
    );
    let first = a.request("t-panic-resumed", "r1", "scenario:panic-resumed");
    let r = resumed(&a, "t-panic-resumed", first);
    assert_eq!(r.types()[0], "RUN_STARTED");
    assert_eq!(r.last()["type"], "RUN_ERROR", "{:?}", r.types());
    let logs = a.logs();
    assert!(logs.contains("request handler panicked"), "{logs}");
    assert!(
        logs.contains("panic_if_asked") && logs.contains("read_to_end"),
        "the backtrace names the panicking function, under the resumed run's wait: {logs}"
    );
    let r = a.run(&a.request("t-after-panic", "r1", "hi"));
    assert_eq!(r.last()["outcome"]["type"], "success");
}

/// A first run (`r1`) of the "selling" pipeline.
fn pipeline_request(a: &Adapter, thread: &str, text: &str) -> Value {
    let mut body = a.request(thread, "r1", text);
    let iac = &mut body["forwardedProps"]["iacCode"];
    iac["runMode"] = json!("pipeline");
    iac["pipelineName"] = json!("selling");
    body
}

fn assert_deep_frame_reached_the_client(r: &RunResult) {
    assert_eq!(r.status, 200);
    assert_eq!(r.last()["type"], "RUN_FINISHED", "{:?}", r.types());
    let all = serde_json::to_string(&r.events).unwrap();
    assert!(
        all.contains("deep-leaf") && all.len() > 2 * 1024 * 1024,
        "the frame's data reached the client: {:?}",
        r.types()
    );
}
